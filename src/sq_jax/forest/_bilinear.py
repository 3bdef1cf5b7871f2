"""Bilinear blocks: ``F1·S + F2·S → (F1 + F2)·S`` for a whole inner sum ``S`` two factors share.

Why: the distributive pass (:mod:`sq_jax.forest.factor`) pulls one *tensor* out of several
terms. In closed-shell CCSD the ladder ``½ g_vvvv·(t2 + t1 t1)`` is such a group, and the
terms ``−t1·g_vvvo·t2`` and ``−t1·g_vvvo·t1 t1`` carry the same two rests ``t2`` and
``t1 t1``, wired the same way, behind the *product* ``F2 = t1·g_vvvo``. Pulling the
tensor ``g_vvvo`` instead leaves ``g_vvvo·(t1 (t2 + t1 t1))``, an o³v³ contraction; the
textbook dresses the ladder instead, ``(½ g_vvvv − t1·g_vvvo)·τ``: one ov⁴ dressing and no
extra contraction. A *block* is a tensor group ``F1·Σ_j c_j R_j`` (as the pass finds it)
plus, for each of its rests ``R_j``, another term ``r c_j F2 R_j`` of the same sum, with one
sub-product ``F2`` (a subset of the term's tensors) and one ratio ``r``; it becomes the one
term ``c_1 (F1 + r F2)·Σ_j (c_j / c_1) R_j``.

Where: :func:`find_blocks`, called by :func:`~sq_jax.forest.factor.factor_terms` before
its greedy choice of groups; a block is taken when it is worth more than its tensor group
alone and the pass's ledger says it lowers the sum's FLOPs, and when ``F1 + F2`` is no
bigger than the largest tensor its terms read (the dressed ladder is v⁴, as ``g_vvvv``).
Memory: the dressing and ``F1 + F2`` are new intermediates of that size, which the
undressed forest does not hold (ccsd_cs: a v⁴ pair); ``without_blocks()`` in
:mod:`sq_jax.forest.factor` builds without blocks. Labels are compared literally
after renaming each pulled factor's summed labels in slot order (as the pass does), so
``F1 + F2`` is well formed: both have the same free labels, checked.

Example (``g`` pulled out of two terms, ``h·s`` dressing it):
    >>> import sq_jax as sq
    >>> from sq_jax.forest.factor import factor_terms, with_blocks
    >>> (eq,) = sq.parse(
    ...     "R{a1;i1} = g{a1;a2} t{a2,a3;i1,i2} x{a3;i2} + g{a1;a2} t{a2;i1}"
    ...     " - h{a1;a2;i3} s{i3} t{a2,a3;i1,i2} x{a3;i2} - h{a1;a2;i3} s{i3} t{a2;i1}"
    ... )
    >>> with with_blocks():  # blocks are opt-in (build_forest(..., dress=True))
    ...     (term,) = factor_terms(eq.rhs.terms, eq.lhs.indices, sq.Spaces(i=8, a=9))
    >>> print(str(term).replace(":N-C-S", ""))
    (t{a_4;i_1} + t{a_4,a_5;i_1,i_6} * x{a_5;i_6}) * (g{a_1;a_4} - 1 h{a_1;a_4;i_3} * s{i_3})
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations
from typing import Any

from ..expr.nodes import Expr, Index, Power, Product, Sum, Tensor, Variable
from ..expr.spaces import Spaces

__all__ = ["Block", "find_blocks"]

Factor = Tensor | Variable | Power


@dataclass(frozen=True, slots=True)
class Block:
    """A bilinear block: its members (positions in the sum) and the one term they become."""

    positions: tuple[int, ...]
    """All members, in the order of the sum; the first one's place gets :attr:`term`."""
    term: Expr
    worth: int
    """FLOPs saved, standalone prices, beyond what its tensor group alone saves."""
    values: dict[str, int]
    """Key → FLOPs of the values the block adds (its rests, ``F2``, the sum and ``(F1+F2)·S``)."""


def _pull_set(
    factors: Sequence[Factor], chosen: tuple[int, ...], result: tuple[Index, ...], base: int
) -> tuple[tuple[Factor, ...], tuple[Factor, ...], tuple[Index, ...]] | None:
    """The factors ``chosen`` pulled out: (them, the rest, the inner labels), renamed.

    Labels of the pulled factors that are not result labels become ``Index(space, base + n)``
    in slot order, as :func:`sq_jax.forest.factor._pull` numbers a single tensor's.
    """
    from .factor import _renamed  # the pass imports this module

    kept = set(result)
    rename: dict[Index, Index] = {}
    for p in chosen:
        factor = factors[p]
        if not isinstance(factor, Tensor):
            return None
        for ix in factor.indices:
            if ix not in kept and ix not in rename:
                rename[ix] = Index(ix.space, base + len(rename))
    pulled = tuple(_renamed(factors[p], rename) for p in chosen)
    rest = tuple(_renamed(f, rename) for n, f in enumerate(factors) if n not in chosen)
    on_rest = {ix for f in rest if isinstance(f, Tensor) for ix in f.indices}
    inner = tuple(ix for ix in result if ix in on_rest) + tuple(
        ix for ix in rename.values() if ix in on_rest
    )
    return pulled, rest, inner


def _canonical(rest: tuple[Factor, ...], inner: tuple[Index, ...], base: int) -> tuple:
    """``rest`` with its own summed labels renamed in order of appearance (a lookup key).

    Two rests that differ only in the names of labels summed inside them (``t{a2,a3;…}
    x{a3;…}`` and ``t{a2,a6;…} x{a6;…}``) are one value of the inner labels.
    """
    from .factor import _renamed

    keep = set(inner)
    rename: dict[Index, Index] = {}
    for f in rest:
        if isinstance(f, Tensor):
            for ix in f.indices:
                if ix not in keep and ix not in rename:
                    rename[ix] = Index(ix.space, base + _INTERNAL + len(rename))
    return tuple(_renamed(f, rename) for f in rest), frozenset(inner)


_INTERNAL = 1000
"""Ordinals ``base + _INTERNAL + n`` name a rest's own summed labels (above any renamed slot)."""


def _free_labels(factors: Sequence[Factor]) -> frozenset[Index]:
    """The labels that occur once over ``factors`` (the others are summed inside)."""
    count: dict[Index, int] = {}
    for f in factors:
        if isinstance(f, Tensor):
            for ix in f.indices:
                count[ix] = count.get(ix, 0) + 1
    return frozenset(ix for ix, n in count.items() if n == 1)


def find_blocks(
    plain: dict,
    groups: Sequence[tuple[Tensor, tuple[Index, ...], list]],
    result: tuple[Index, ...],
    spaces: Spaces,
    optimize: Any,
    base: int,
    group_worth: Any,
) -> list[Block]:
    """Every bilinear block of the sum (module doc), most worth first.

    Args:
        plain: position → the pass's priced product terms.
        groups: the pass's tensor groups ``(F1, inner labels, members)``.
        result: the sum's result labels.
        spaces: extents for the cost model.
        optimize: the contraction-order optimizer.
        base: the first ordinal free for renamed labels (the pass's).
        group_worth: ``(F1, inner, members) → FLOPs`` the tensor group alone saves.
    """
    from .canon import leaf_node, product_node, sum_node
    from .cost import contraction_flops, mode_size
    from .factor import _price

    # each term's sub-products of two tensors or more, by (rest, inner labels)
    by_rest: dict[tuple, list[tuple[int, tuple[Factor, ...]]]] = {}
    for k, term in plain.items():
        tensors = [n for n, f in enumerate(term.factors) if isinstance(f, Tensor)]
        for size in range(2, len(tensors)):
            for chosen in combinations(tensors, size):
                pulled = _pull_set(term.factors, chosen, result, base)
                if pulled is not None:
                    f2, rest, inner = pulled
                    by_rest.setdefault(_canonical(rest, inner, base), []).append((k, f2))
    if not by_rest:
        return []
    blocks: list[Block] = []
    for f1, inner, members in groups:
        mine = {opt.position for opt in members}
        first = plain[members[0].position].coef
        # F2 → (ratio, partner positions), kept while every member has a partner
        partners: dict[tuple[Factor, ...], tuple[Fraction, list[int]]] | None = None
        for opt in members:
            here: dict[tuple[Factor, ...], tuple[Fraction, list[int]]] = {}
            for k, f2 in by_rest.get(_canonical(opt.rest, inner, base), ()):
                if k in mine or f2 in here:
                    continue
                ratio = plain[k].coef / plain[opt.position].coef
                if partners is None:
                    here[f2] = (ratio, [k])
                elif f2 in partners and partners[f2][0] == ratio and k not in partners[f2][1]:
                    here[f2] = (ratio, [*partners[f2][1], k])
            partners = here
            if not partners:
                break
        if not partners:
            continue
        f2, (ratio, others) = next(iter(partners.items()))
        if _free_labels(f2) != frozenset(f1.indices) or len(set(f1.indices)) != len(f1.indices):
            continue
        labels = f1.indices
        largest_input = max(
            mode_size(f.indices, spaces)
            for k in mine | set(others)
            for f in plain[k].factors
            if isinstance(f, Tensor)
        )
        if mode_size(labels, spaces) > largest_input:
            continue  # the dressed F1 + F2 would be bigger than any tensor its terms read
        w_root, w_values = _price(f2, labels, spaces, optimize)
        dressed = sum_node(leaf_node(f1), Fraction(1), w_root, ratio, labels)
        chain = members[0].root
        for opt in members[1:]:  # on the first rest's mode order: permuted copies, one key
            ratio_j = plain[opt.position].coef / first
            chain = sum_node(chain, Fraction(1), opt.root, ratio_j, members[0].root.indices)
        values: dict[str, int] = dict(w_values)
        for opt in members:
            values.update(opt.values)
        values[dressed.key] = mode_size(labels, spaces)
        values[product_node(dressed, chain, result).key] = contraction_flops(
            (labels, inner), result, spaces
        ) + (len(members) - 1) * mode_size(inner, spaces)
        positions = sorted(mine | set(others))
        before = sum(sum(plain[k].values.values()) for k in positions)
        before += (len(positions) - 1) * mode_size(result, spaces)  # the outer adds
        worth = before - sum(values.values()) - group_worth(f1, inner, members)
        if worth <= 0:
            continue
        inner_sum = Sum(tuple(Product(plain[o.position].coef / first, o.rest) for o in members))
        dressing = Sum((Product(Fraction(1), (f1,)), Product(ratio, f2)))
        term = Product(first, (dressing, inner_sum))
        blocks.append(Block(tuple(positions), term, worth, values))
    blocks.sort(key=lambda b: (-b.worth, b.positions[0]))
    return blocks
