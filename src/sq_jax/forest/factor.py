"""Factor a sum: pull a tensor shared by several terms out of them (the distributive law).

Why: equations such as closed-shell CCSD come as a flat expansion. Two terms
``c1 · F · X1`` and ``c2 · F · X2`` that contract the same tensor ``F`` the same way are two
contractions with ``F``; ``F · (c1 · X1 + c2 · X2)`` is one, plus a cheap sum. Binarizing
each term on its own and folding common subexpressions never finds this (CCSD at
benzene/cc-pVDZ sizes: 17 o³v³ contractions where textbook formulations have about 6).

Where: on the *expression*, before binarization (:func:`factor_terms`, called by the
builder on each sum's terms). A tensor is shared when, after renaming the dummies of each
term, it is literally the same tensor in every term: the same label and signature, the
result's labels in the same slots, and the summed labels in the same pattern. The rest of
each term becomes a term of a nested sum whose result is the result's labels plus the shared
tensor's summed labels, and the builder does the rest as for any nested sum: it binarizes
each inner term with the best order for *its* labels, factors the inner sum again (so a
tensor shared by the rests is pulled out one level down: ``F·G·X + F·G·Y`` becomes
``F·(G·(X + Y))``), and groups permuted copies (:mod:`sq_jax.forest._permsum`) on each
level. Working on the binarized trees instead would only see a shared operand of the
*top* contraction, and the order chosen for a term alone often buries the tensor that a
group of terms shares; on the expression every factor of every term is a candidate, the
rest's order is chosen knowing that ``F`` is pulled out, and nested sums, CSE keys and
permuted-sum grouping need nothing new.

How (greedy, priced with :mod:`sq_jax.forest.cost` on the real extents):

1. each term that is a product of tensors and scalars is binarized on its own; its cost is
   the FLOPs of its tree's distinct values;
2. for each term and each tensor factor ``F`` (no repeated label), the *option* of pulling
   ``F`` out: the rest is binarized onto its inner labels; the option saves the term's cost
   minus the rest's cost minus one add of the inner sum;
3. options with the same ``F`` (after renaming) and inner labels form a group; terms of
   one value (one key: repeats, or the permuted copies of an ``Â``/``Ŝ`` expansion) never
   share a group, as they are one contraction already and the permuted-sum grouping
   reads each permutation once. A group is worth the savings of its members that save something,
   plus the adds it removes, minus the one contraction ``F · Σ``;
4. groups are taken by worth, largest first (groups of equal worth, such as the permuted
   copies of a group, as one batch), each with its members that no earlier group took,
   when a ledger of the sum's values with common subexpressions counted once says the
   batch lowers the FLOPs (:class:`_Ledger`: only a term's own result is freed; its inner
   values may be read elsewhere, even by another equation, so they are kept).

Before step 4, *bilinear blocks* (:mod:`sq_jax.forest._bilinear`): a group ``F1·S`` whose
whole inner sum ``S`` other terms carry behind one sub-product ``F2`` becomes
``(F1 + F2)·S`` (the T1-dressed ladder of CCSD), when the ledger agrees; a block frees
the inner values of its terms that no other term holds. Across sums, the builder builds
twice (:class:`GroupSharing`): the second time each sum prices a group value that another
sum chose as paid, so of two groups of equal worth it takes the one built anyway; it keeps
the cheapest build, and one without blocks (``without_blocks()``) when a block was taken,
as a block's freed values may be read by another equation.

A group's first member keeps its place in the sum, with the first member's coefficient
outside (so groups whose coefficients are proportional give the same inner sum), and the
group's terms are in the order of the sum, so the permuted copies of a group (an ``Ŝ``/``Â``
expansion) factor into permuted copies of one term, which the builder then groups.

Only the builder's own nested sums pass through here; ``with unfactored():`` turns the
pass off (the reference evaluator builds its forest that way, so it stays an independent
oracle of the factored forest).

Known limitations: a tensor is shared only when it is written the same way; a tensor's
declared symmetry is not used (``t{a1,a2;i1,i2}`` and ``t{a2,a1;i2,i1}`` differ), because
the default annotation declares column symmetry that real inputs need not have. The greedy
choice is not guaranteed optimal; a group is priced without the factoring that the builder
then applies inside it; a block needs a partner for every member of its group, with one
ratio; the ledger sees one sum at a time, so it keeps every inner value of a factored term
(blocks aside), even one that no other term reads; on tiny extents the pass can make a
sum a few FLOPs dearer than flat (the builder then keeps the flat forest).

Example:
    >>> import sq_jax as sq
    >>> eqs = sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1} - 2 f{a1;a3} u{a3;i1}")
    >>> (eq,) = eqs
    >>> [str(t) for t in factor_terms(eq.rhs.terms, eq.lhs.indices, sq.Spaces(i=4, a=30))]
    ['f{a_1;a_4}:N-C-S * (t{a_4;i_1}:N-C-S - 2 u{a_4;i_1}:N-C-S)']
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from ..expr.nodes import Expr, Index, Power, Product, Sum, Tensor, Variable
from ..expr.spaces import Spaces
from ._bilinear import Block, find_blocks
from ._factor_modes import (
    BLOCKS,
    ENABLED,
    PRICES,
    priced_once,
    unfactored,
    with_blocks,
    without_blocks,
)
from ._sharing import GroupSharing, current_sharing, sharing_groups
from .binarize import binarize
from .canon import leaf_node, product_node, scalar_node, sum_node
from .cost import contraction_flops, mode_size, node_flops
from .nodes import EvalNode

__all__ = [
    "GroupSharing",
    "factor_terms",
    "priced_once",
    "sharing_groups",
    "unfactored",
    "with_blocks",
    "without_blocks",
]
# GroupSharing and sharing_groups live in ._sharing, the switches in ._factor_modes;
# re-exported here for the builder


@dataclass(frozen=True, slots=True)
class _Term:
    """A product of tensors and scalars: its factors and its standalone tree's values."""

    coef: Fraction
    factors: tuple[Tensor | Variable | Power, ...]
    values: dict[str, int]
    """Key → FLOPs of each distinct value of the term's binarized tree."""
    top: str
    """The key of the term's own value (its tree's root)."""


@dataclass(frozen=True, slots=True)
class _Option:
    """One term with one tensor pulled out (labels renamed so the group shares them)."""

    position: int
    """The term's position in the sum."""
    saving: int
    """FLOPs the term saves when the tensor is pulled out (positive for an option)."""
    rest: tuple[Tensor | Variable | Power, ...]
    values: dict[str, int]
    """The rest's tree, binarized onto the inner labels."""
    root: EvalNode
    """The root of the rest's tree."""


def factor_terms(
    terms: Sequence[Expr], result: Sequence[Index], spaces: Spaces, optimize: Any = "auto"
) -> list[Expr]:
    """The terms of a sum, with tensors shared by several terms pulled out (module doc).

    Args:
        terms: the sum's terms (already checked by the builder).
        result: the sum's result labels.
        spaces: extents for the cost model.
        optimize: the contraction-order optimizer (see
            :func:`sq_jax.forest.binarize.resolve_optimizer`).

    Returns:
        The same sum's terms: each group of factored terms is one ``F · (Σ …)`` term in its
        first member's place; the input terms, as a list, when nothing pays.

    Example:
        >>> import sq_jax as sq
        >>> (eq,) = sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1} + g{a1;i2} u{i2;i1}")
        >>> len(factor_terms(eq.rhs.terms, eq.lhs.indices, sq.Spaces(i=3, a=4)))  # none shared
        2
    """
    out = list(terms)
    if not ENABLED.get() or len(out) < 2:
        return out
    result = tuple(result)
    sharing = current_sharing()
    plain = _plain_terms(out, result, spaces, optimize)
    call = _call_id(plain, len(out)) if sharing is not None else ""
    paid = sharing.free(call) if sharing is not None else frozenset()
    groups = _groups(plain, result, spaces, optimize, paid)
    if not groups:
        return out
    ledger = _Ledger(plain, spaces, paid)
    blocks: list[Block] = []
    taken: set[int] = set()
    found: list[Block] = []
    if BLOCKS.get() and (sharing is None or sharing.blocks):
        base = _base(plain, result)
        found = find_blocks(
            plain, groups, result, spaces, optimize, base, ledger.group_worth(result)
        )
    for worth in sorted({block.worth for block in found}, reverse=True):
        # blocks of equal worth (the permuted copies of one) as one batch, as groups are
        batch: list[Block] = []
        for block in found:
            if block.worth == worth and not taken.intersection(block.positions):
                batch.append(block)
                taken.update(block.positions)
        if batch and ledger.take_blocks(batch, result):
            blocks += batch
        else:
            taken.difference_update(k for block in batch for k in block.positions)
    chosen = ledger.select(groups, result, taken)
    if not chosen and not blocks:
        return out
    if sharing is not None:
        sharing.blocks_taken += len(blocks)
    if sharing is not None:
        sharing.chosen.setdefault(call, set()).update(
            _group_key(shared, members, plain, result) for shared, _, members in chosen
        )
    taken.update(opt.position for _, _, members in chosen for opt in members)
    merged: dict[int, Expr] = {block.positions[0]: block.term for block in blocks}
    for shared, _, members in chosen:
        first = plain[members[0].position].coef
        inner_terms = tuple(Product(plain[opt.position].coef / first, opt.rest) for opt in members)
        merged[members[0].position] = Product(first, (shared, Sum(inner_terms)))
    return [merged.get(k, term) for k, term in enumerate(out) if k not in taken or k in merged]


# -- pricing -----------------------------------------------------------------------------


def _tree_values(node: EvalNode, spaces: Spaces) -> dict[str, int]:
    """Key → FLOPs of every distinct computed value of ``node``'s tree (iterative)."""
    values: dict[str, int] = {}
    stack = [node]
    while stack:
        current = stack.pop()
        if current.is_leaf or current.key in values:
            continue
        values[current.key] = node_flops(current, spaces)
        stack.extend(current.children)
    return values


def _price(
    factors: Sequence[Tensor | Variable | Power],
    result: Sequence[Index],
    spaces: Spaces,
    optimize: Any,
) -> tuple[EvalNode, dict[str, int]]:
    """The product's binarized root and its tree's values (key → FLOPs).

    Memoized within :func:`priced_once` (the builder's builds of one forest price the same
    products; spaces and optimizer are fixed there).
    """
    cache = PRICES.get()
    memo = (tuple(factors), tuple(result))
    if cache is not None and memo in cache:
        return cache[memo]
    ops = [leaf_node(f) if isinstance(f, Tensor) else scalar_node(f) for f in factors]
    root = binarize(ops, result, spaces, optimize)
    priced = root, _tree_values(root, spaces)
    if cache is not None:
        cache[memo] = priced
    return priced


def _plain_terms(
    terms: Sequence[Expr], result: Sequence[Index], spaces: Spaces, optimize: Any
) -> dict[int, _Term]:
    """The terms that are products of tensors and scalars, by position, priced."""
    from .build import _flatten_product  # the builder imports this module

    plain: dict[int, _Term] = {}
    for k, term in enumerate(terms):
        coef, factors = _flatten_product(term)
        if (
            not coef
            or len(factors) < 2
            or not all(isinstance(f, (Tensor, Variable, Power)) for f in factors)
        ):
            continue  # nothing to pull out of one factor; nested sums are left alone
        root, values = _price(factors, result, spaces, optimize)
        plain[k] = _Term(coef, tuple(factors), values, root.key)  # type: ignore[arg-type]
    return plain


def _call_id(plain: dict[int, _Term], n_terms: int) -> str:
    """A sum's identity across builds, label-blind (the permuted copies of a sum are one).

    The digest of its product terms' value keys, sorted, and its number of terms.
    """
    text = "\n".join(sorted(term.top for term in plain.values())) + f"\n{n_terms}"
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _worth(
    shared: Tensor,
    inner: Sequence[Index],
    members: Sequence[_Option],
    result: Sequence[Index],
    spaces: Spaces,
    paid: bool = False,
) -> int:
    """FLOPs saved by factoring ``members`` (standalone prices, module doc step 3).

    ``paid``: another sum builds the group's value ``F · Σ`` (:class:`GroupSharing`).
    """
    once = 0 if paid else contraction_flops((shared.indices, inner), result, spaces)
    fewer_adds = (len(members) - 1) * mode_size(result, spaces)  # the outer sum's
    return sum(opt.saving for opt in members) + mode_size(inner, spaces) + fewer_adds - once


Group = tuple[Tensor, tuple[Index, ...], list[_Option]]
"""A shared tensor, the inner labels, and the members (in the order of the sum)."""


class _Ledger:
    """The sum's values with common subexpressions counted once, as groups are taken.

    A term's *top* value (its result) is freed when no remaining term has it; every other
    value of the flat terms' trees is kept (it may be read elsewhere, even by another
    equation, which this sum cannot see). A group adds its rests' values that are
    not there yet, and one contraction ``F · Σ`` and the inner sum's adds per distinct
    group value (the permuted copies of a group are one value).
    """

    def __init__(self, plain: dict[int, _Term], spaces: Spaces, paid: frozenset[str]) -> None:
        self.plain, self.spaces, self.paid = plain, spaces, paid
        self.tops = Counter(term.top for term in plain.values())
        self.present: set[str] = set()
        for term in plain.values():
            self.present.update(k for k in term.values if k != term.top)
        self.pinned = frozenset(self.present)
        self.holders: dict[str, set[int]] = {}
        """An inner value of the flat terms → the positions of the terms whose tree has it."""
        for k, term in plain.items():
            for key in term.values:
                self.holders.setdefault(key, set()).add(k)
        self.gone: set[int] = set()

    def select(
        self, groups: Sequence[Group], result: Sequence[Index], before: set[int]
    ) -> list[Group]:
        """The groups taken, greedily; groups of equal worth (mirror copies) as one batch.

        ``before``: the positions already taken (by bilinear blocks).
        """
        taken = set(before)
        chosen: list[Group] = []
        n = 0
        while n < len(groups):
            batch_worth = self._worth(*groups[n], result)
            batch: list[Group] = []
            while n < len(groups) and self._worth(*groups[n], result) == batch_worth:
                shared, inner, options = groups[n]
                members = [opt for opt in options if opt.position not in taken]
                if len(members) >= 2 and self._worth(shared, inner, members, result) > 0:
                    batch.append((shared, inner, members))
                    taken.update(opt.position for opt in members)
                n += 1
            if batch and self._take(batch, result):
                chosen += batch
            else:
                taken.difference_update(opt.position for g in batch for opt in g[2])
        return chosen

    def _worth(
        self, shared: Tensor, inner: Sequence[Index], members: Sequence[_Option], result
    ) -> int:
        paid = bool(self.paid) and _group_key(shared, members, self.plain, result) in self.paid
        return _worth(shared, inner, members, result, self.spaces, paid)

    def group_worth(self, result: Sequence[Index]) -> Any:
        """``(F, inner, members) → FLOPs`` a tensor group saves on its own (for blocks)."""
        return lambda shared, inner, members: self._worth(shared, inner, members, result)

    def take_blocks(self, batch: Sequence[Block], result: Sequence[Index]) -> bool:
        """Take bilinear blocks if they lower the sum's FLOPs (and record them)."""
        tops = Counter(self.plain[k].top for block in batch for k in block.positions)
        freed = 0
        for block in batch:
            freed += (len(block.positions) - 1) * mode_size(result, self.spaces)
        for key, count in tops.items():
            if self.tops[key] == count and key not in self.pinned:
                term = next(t for t in self.plain.values() if t.top == key)
                freed += term.values[key]
        # a block replaces whole trees (an o³v³ inside a T1 term): an inner value that no
        # other term of the sum holds is freed too; the builder keeps the cheaper forest
        # of a build with blocks and one without, as another equation may read it
        leaving = self.gone | {k for block in batch for k in block.positions}
        inner = {
            key: f
            for block in batch
            for k in block.positions
            for key, f in self.plain[k].values.items()
            if key in self.pinned and self.holders[key] <= leaving
        }
        freed += sum(inner.values())
        added = {k: f for block in batch for k, f in block.values.items() if k not in self.present}
        if freed <= sum(added.values()):
            return False
        self.tops.subtract(tops)
        self.present.update(added)
        self.gone = leaving
        return True

    def _take(self, batch: Sequence[Group], result: Sequence[Index]) -> bool:
        """Take ``batch`` if it lowers the sum's FLOPs (and record it); else change nothing."""
        tops = Counter(self.plain[opt.position].top for _, _, members in batch for opt in members)
        freed = 0
        for key, count in tops.items():
            if self.tops[key] == count and key not in self.pinned:
                term = next(t for t in self.plain.values() if t.top == key)
                freed += term.values[key]
        added: dict[str, int] = {}
        for shared, inner, members in batch:
            freed += (len(members) - 1) * mode_size(result, self.spaces)  # outer adds
            for opt in members:
                added.update((k, f) for k, f in opt.values.items() if k not in self.present)
            key = _group_key(shared, members, self.plain, result)
            once = contraction_flops((shared.indices, inner), result, self.spaces)
            if key in self.paid:
                once = 0  # another sum builds this value (GroupSharing)
            added[key] = once + (len(members) - 1) * mode_size(inner, self.spaces)
        if freed <= sum(added.values()):
            return False
        self.tops.subtract(tops)
        self.present.update(added)
        return True


def _group_key(
    shared: Tensor,
    members: Sequence[_Option],
    plain: dict[int, _Term],
    result: Sequence[Index],
) -> str:
    """The label-blind key of a group's value ``F · Σ`` (equal for its permuted copies).

    Built with the forest's own constructors from the rests' trees, so it is the key the
    builder gives the group when it groups and factors nothing more inside; used for
    pricing only.
    """
    first = members[0].root
    chain = first
    for opt in members[1:]:
        ratio = plain[opt.position].coef / plain[members[0].position].coef
        chain = sum_node(chain, Fraction(1), opt.root, ratio, first.indices)
    return product_node(leaf_node(shared), chain, result).key


# -- options and groups ------------------------------------------------------------------


def _groups(
    plain: dict[int, _Term],
    result: tuple[Index, ...],
    spaces: Spaces,
    optimize: Any,
    paid: frozenset[str] = frozenset(),
) -> list[tuple[Tensor, tuple[Index, ...], list[_Option]]]:
    """Every (shared tensor, inner labels) of two terms or more, most worth first.

    Each group lists its members that save FLOPs, in the order of the sum.
    """
    base = _base(plain, result)
    candidates: dict[tuple[Tensor, frozenset[Index]], list[tuple[int, int]]] = {}
    renamed: dict[tuple[int, int], tuple[Tensor, tuple, tuple[Index, ...]]] = {}
    for k, term in plain.items():
        for p in range(len(term.factors)):
            pulled = _pull(term.factors, p, result, base)
            if pulled is None:
                continue
            shared, rest, inner = pulled
            candidates.setdefault((shared, frozenset(inner)), []).append((k, p))
            renamed[k, p] = pulled
    groups = []
    for (shared, _), where in candidates.items():
        if len({k for k, _ in where}) < 2:
            continue
        options: list[_Option] = []
        seen: set[int | str] = set()
        for k, p in where:
            if k in seen or plain[k].top in seen:
                # the same tensor twice in one term: pull out one copy; two terms of one
                # value (repeats, or permuted copies from an Â/Ŝ expansion) are one
                # contraction already, and the permuted-sum grouping reads each
                # permutation once
                continue
            seen.update((k, plain[k].top))
            _, rest, inner = renamed[k, p]
            root, values = _price(rest, inner, spaces, optimize)
            saving = sum(plain[k].values.values()) - sum(values.values()) - mode_size(inner, spaces)
            if saving > 0:
                options.append(_Option(k, saving, rest, values, root))
        inner = renamed[where[0]][2]
        if len(options) >= 2:
            key_paid = bool(paid) and _group_key(shared, options, plain, result) in paid
            worth = _worth(shared, inner, options, result, spaces, key_paid)
            if worth > 0:
                groups.append((worth, options[0].position, shared, inner, options))
    groups.sort(key=lambda g: (-g[0], g[1]))
    return [(shared, inner, options) for _, _, shared, inner, options in groups]


def _base(plain: dict[int, _Term], result: tuple[Index, ...]) -> int:
    """The first ordinal that no label of the sum uses (renamed labels start there)."""
    on_terms = (
        ix.ordinal
        for term in plain.values()
        for f in term.factors
        if isinstance(f, Tensor)
        for ix in f.indices
    )
    return 1 + max(max(on_terms, default=0), max((ix.ordinal for ix in result), default=0))


def _pull(
    factors: Sequence[Tensor | Variable | Power], p: int, result: tuple[Index, ...], base: int
) -> tuple[Tensor, tuple[Tensor | Variable | Power, ...], tuple[Index, ...]] | None:
    """Factor ``p`` pulled out: (it, the rest, the inner labels), summed labels renamed.

    The shared tensor's summed labels become ``Index(space, base + n)`` for the ``n``-th of
    them, so the same tensor wired the same way is the same ``Tensor`` in every term.
    ``None`` when the factor is not a tensor or repeats a label.
    """
    factor = factors[p]
    if not isinstance(factor, Tensor) or len(set(factor.indices)) != len(factor.indices):
        return None
    kept = set(result)
    rename: dict[Index, Index] = {}
    for ix in factor.indices:
        if ix not in kept:
            rename[ix] = Index(ix.space, base + len(rename))
    rest = tuple(_renamed(f, rename) for n, f in enumerate(factors) if n != p)
    on_rest = {ix for f in rest if isinstance(f, Tensor) for ix in f.indices}
    inner = tuple(ix for ix in result if ix in on_rest) + tuple(
        ix for ix in rename.values() if ix in on_rest
    )
    return _renamed(factor, rename), rest, inner


def _renamed(
    factor: Tensor | Variable | Power, rename: dict[Index, Index]
) -> Tensor | Variable | Power:
    if not isinstance(factor, Tensor) or not rename:
        return factor

    def new(slots: tuple[Index, ...]) -> tuple[Index, ...]:
        return tuple(rename.get(ix, ix) for ix in slots)

    return replace(factor, bra=new(factor.bra), ket=new(factor.ket), aux=new(factor.aux))
