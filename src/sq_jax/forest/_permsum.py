"""Group the permuted copies of a sum's terms: each permutation of the result read once.

Why: an antisymmetrized (``Â``) or symmetrized (``Ŝ``) term is expanded by the parser into
its permuted copies (:mod:`sq_jax.expr.symmetrize`); spin-orbital CCSD's R2 becomes 124
terms. Label-blind keys (:mod:`sq_jax.forest.canon`) make the copies of one term *one
value*, but a plain left-deep chain still adds every copy separately, each read through
its own transpose (most SUM reads of a CCSD residual transpose an o²v² array). When
several terms are expanded by the same operator, the sum factors: with ``Â{i1,i2;a1,a2}``
and families ``X_f``::

    Σ_f c_f (X_f - X_f^(a1a2) - X_f^(i1i2) + X_f^(a1a2)(i1i2))
        = Y - Y^(a1a2) - Y^(i1i2) + Y^(a1a2)(i1i2),    Y = Σ_f c_f X_f

so the sum needs one read per family (into ``Y``) and one per permutation (of ``Y``),
instead of one per family and permutation.

How (:func:`group_permuted`, given the built terms as ``(node, coef)``):

1. **Families** — terms of one key are one array under relabelings of the result's
   labels. A member's permutation is taken relative to a representative member ``m``,
   as the map ``π`` of result labels with ``π(m.indices[p]) = member.indices[p]``; the
   family's *pattern* (relative to ``m``) is the set of ``(π, coef / coef_m)``. Terms of
   one orientation (the same array twice, e.g. the copies that a symmetric term makes)
   count as one, with their coefficients added; a family whose orientations cancel, or
   that has only one, stays as it is.
2. **Groups** — families that share a pattern (for some choice of representative) form a
   group; greedily, the pattern shared by the most families first. For an ``Â``/``Ŝ``
   expansion the patterns are a group with a sign character, the same whichever member
   represents the family; for a partial one (a sum of only some permutations) only some
   members may represent it. A pattern of only one family is left as its terms.
3. **Orientation** — ``Y``'s mode order is the orientation that the most families can
   represent themselves in, and each family is represented by a member in that
   orientation when it has one, so ``Y`` reads as few families transposed as possible.
4. **Chains** — ``Y = Σ_f coef_f · rep_f`` is a left-deep SUM chain; the sum's summands
   become ``r_π · π(Y)`` for each ``(π, r_π)`` of the pattern, where ``π(Y)`` is ``Y``
   with its labels renamed by ``π`` (the same key: one value read under other labels).
   They take the place of the group's first term, in the order of the first family's
   members (so the first term's own permutation comes first and, when that term starts
   the sum, the sum keeps its mode order); other terms stay where they were.

The result is the same sum, exactly up to floating-point reassociation.

Scheduling: ``Y`` is one value read under several labels; each ``π(Y)`` repeats ``Y``'s
subtree, and the scheduler reads a value's operands only at its first occurrence
(:mod:`sq_jax.schedule.rich`), so the repeats cost neither FLOPs nor memory unbatched.
Under a batch plan that cuts a space ``π`` moves, ``π(Y)`` is a value of its own (one per
batch layout, as each permuted copy was before); intermediates it shares with ``Y`` then
stay live from ``Y`` to ``π(Y)``.

Known limitations: families are found by key only, so copies that binarize to different
keys are separate families (of smaller patterns); a family is never split to join a
smaller pattern; the greedy grouping is not guaranteed to minimize the reads. Because of
the shared intermediates above, a batched plan's static peak can be a little higher than
with the ungrouped sum (CCSD at i=10, a=38: up to +10% for ``i`` in 2 batches, FLOPs
slightly lower).

Example:
    >>> from fractions import Fraction
    >>> from sq_jax.expr.nodes import Index, Tensor
    >>> from sq_jax.forest.canon import leaf_node
    >>> a1, a2, i1, i2 = Index("a", 1), Index("a", 2), Index("i", 1), Index("i", 2)
    >>> def leaf(label, bra):
    ...     return leaf_node(Tensor(label, bra=bra, ket=(i1, i2)))
    >>> terms = [(leaf("g", (a1, a2)), Fraction(1)), (leaf("g", (a2, a1)), Fraction(-1)),
    ...          (leaf("h", (a2, a1)), Fraction(-2)), (leaf("h", (a1, a2)), Fraction(2))]
    >>> for node, coef in group_permuted(terms, (a1, a2, i1, i2)):
    ...     print(node.kind.name, coef, " ".join(map(str, node.indices)))
    SUM 1 a_1 a_2 i_1 i_2
    SUM -1 a_2 a_1 i_1 i_2
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from operator import itemgetter

from ..expr.nodes import Index
from .canon import leaf_node, product_node, sum_node
from .nodes import EvalNode, NodeKind, post_order

__all__ = ["group_permuted", "relabel_node"]

Perm = tuple[int, ...]
"""A permutation of the result's labels: ``π(result[k]) = result[perm[k]]``."""
Pattern = frozenset[tuple[Perm, int]]
"""A family relative to its representative: ``(π, coef / coef_rep)``, the ratio by its
number in a :class:`_Ratios` table."""


class _Ratios:
    """Coefficient ratios numbered once, with a cached division.

    Patterns of hundreds of members are then hashed and compared as small integers, not
    as fractions.
    """

    def __init__(self) -> None:
        self.values: list[Fraction] = []
        self._number: dict[Fraction, int] = {}
        self._quotients: dict[tuple[int, int], int] = {}

    def number(self, value: Fraction) -> int:
        """The number of ``value`` (numbered on first sight)."""
        n = self._number.setdefault(value, len(self.values))
        if n == len(self.values):
            self.values.append(value)
        return n

    def divide(self, a: int, b: int) -> int:
        """The number of ``values[a] / values[b]``."""
        q = self._quotients.get((a, b))
        if q is None:
            q = self._quotients[a, b] = self.number(self.values[a] / self.values[b])
        return q


@dataclass(slots=True)
class _Family:
    """Terms of one key: their positions in the sum, and valid representatives."""

    members: list[int]
    """Every term of the family (positions in the sum)."""
    coefs: dict[int, Fraction]
    """Per orientation, its first term's position → the orientation's total coefficient."""
    reps: dict[int, list[int]]
    """Per pattern (its number), the orientations (first positions) that represent the
    family with it."""


def group_permuted(
    terms: Sequence[tuple[EvalNode, Fraction]], result: Sequence[Index]
) -> list[tuple[EvalNode, Fraction]]:
    """The summands of ``Σ coef · node``, families of permuted copies grouped (module doc).

    Args:
        terms: the sum's terms, in order, each a node whose modes are the result's labels
            and its coefficient.
        result: the sum's result labels (the order only fixes how permutations are
            written; it does not change the grouping).

    Returns:
        ``(node, coef)`` summands of the same sum: the terms themselves where nothing is
        grouped (the input, as a list, when nothing is), else ``r_π · π(Y)`` per group.

    Example:
        >>> from fractions import Fraction
        >>> from sq_jax.expr.nodes import Index, Tensor
        >>> from sq_jax.forest.canon import leaf_node
        >>> i1, i2 = Index("i", 1), Index("i", 2)
        >>> f = leaf_node(Tensor("f", (i1,), (i2,)))
        >>> [c for _, c in group_permuted([(f, Fraction(1)), (f, Fraction(2))], (i1, i2))]
        [Fraction(1, 1), Fraction(2, 1)]
    """
    result = tuple(result)
    out = list(terms)
    if len(result) < 2 or len(out) < 4:  # two families of two members at least
        return out
    pos = {ix: k for k, ix in enumerate(result)}
    ratio_table = _Ratios()
    families, patterns = _families(out, pos, ratio_table)
    groups = _groups(families)
    if not groups:
        return out
    # summands as (sort key, node, coef): a group takes its first term's place
    summands: list[tuple[tuple[int, int], EvalNode, Fraction]] = []
    grouped: set[int] = set()
    for pattern, fams in groups:
        members = [k for f in fams for k in families[f].members]
        grouped.update(members)
        y, rep = _group_sum(out, pattern, [families[f] for f in fams])
        # in the order of the first family's members, so the group's first summand is
        # the sum's first term's permutation (the chain keeps that term's mode order when
        # it is grouped), and keys do not depend on how the result's labels are ordered
        first = families[fams[0]].coefs
        perms = [_perm(out[rep][0].indices, out[k][0].indices, pos) for k in first]
        ratios = {perm: ratio_table.values[r] for perm, r in patterns[pattern]}
        for n, perm in enumerate(perms):
            mapping = {result[k]: result[p] for k, p in enumerate(perm) if p != k}
            node = relabel_node(y, mapping) if mapping else y
            summands.append(((min(members), n), node, ratios[perm]))
    summands += [((k, 0), n, c) for k, (n, c) in enumerate(out) if k not in grouped]
    summands.sort(key=lambda s: s[0])
    return [(node, coef) for _, node, coef in summands]


def _perm(rep: Sequence[Index], member: Sequence[Index], pos: Mapping[Index, int]) -> Perm:
    """The permutation ``π`` with ``π(rep[p]) = member[p]`` for every ``p``.

    It is written on the result's label positions ``pos`` (label → position).
    """
    out = [0] * len(pos)
    for a, b in zip(rep, member, strict=True):
        out[pos[a]] = pos[b]
    return tuple(out)


def _rebase(base: Pattern, ratios: _Ratios) -> dict[Perm, Pattern]:
    """Per entry ``(π_s, r_s)`` of a family's pattern, the pattern relative to that member.

    A member ``j`` is ``π_j`` of the representative, so relative to member ``s`` it is
    ``π_j ∘ π_s⁻¹``, with ratio ``r_j / r_s``. This costs O(members² · rank), so it is
    done once per distinct ``base`` (all families of one expansion share it).
    """
    out: dict[Perm, Pattern] = {}
    for perm_s, ratio_s in base:
        inverse = [0] * len(perm_s)
        for k, p in enumerate(perm_s):
            inverse[p] = k
        compose = itemgetter(*inverse)  # perm_j -> perm_j ∘ perm_s⁻¹
        out[perm_s] = frozenset(
            (_as_perm(compose(perm_j)), ratios.divide(ratio_j, ratio_s)) for perm_j, ratio_j in base
        )
    return out


def _as_perm(picked: int | tuple[int, ...]) -> Perm:
    """``itemgetter``'s result as a tuple (it returns a bare item for one index)."""
    return picked if isinstance(picked, tuple) else (picked,)


def _families(
    terms: Sequence[tuple[EvalNode, Fraction]], pos: Mapping[Index, int], ratios: _Ratios
) -> tuple[list[_Family], list[Pattern]]:
    """Families of two or more orientations, in order of first appearance, and patterns.

    The patterns are those the families' representatives can give; ``_Family.reps``
    refers to them by their position in that list.
    """
    by_key: dict[str, list[int]] = {}
    for k, (node, _) in enumerate(terms):
        if len(node.indices) == len(pos) and set(node.indices) == pos.keys():
            by_key.setdefault(node.key, []).append(k)
    number: dict[Pattern, int] = {}  # every pattern seen -> its number
    rebased: dict[Pattern, dict[Perm, int]] = {}  # base -> per member, its pattern number
    families = []
    for members in by_key.values():
        first: dict[tuple[Index, ...], int] = {}  # orientation -> its first position
        coefs: dict[int, Fraction] = {}
        for k in members:
            m = first.setdefault(terms[k][0].indices, k)
            coefs[m] = coefs.get(m, Fraction(0)) + terms[k][1]
        if len(coefs) < 2 or not all(coefs.values()):
            continue  # one orientation, or copies that cancel: left as they are
        m0 = next(iter(coefs))
        perms = {m: _perm(terms[m0][0].indices, terms[m][0].indices, pos) for m in coefs}
        base = frozenset((perms[m], ratios.number(c / coefs[m0])) for m, c in coefs.items())
        if base not in rebased:
            rebased[base] = {
                perm: number.setdefault(pattern, len(number))
                for perm, pattern in _rebase(base, ratios).items()
            }
        reps: dict[int, list[int]] = {}
        for m in coefs:
            reps.setdefault(rebased[base][perms[m]], []).append(m)
        families.append(_Family(members, coefs, reps))
    return families, list(number)


def _groups(families: Sequence[_Family]) -> list[tuple[int, list[int]]]:
    """Greedy: the pattern that the most free families admit, while two or more do."""
    admitting: dict[int, list[int]] = {}
    for f, fam in enumerate(families):
        for pattern in fam.reps:
            admitting.setdefault(pattern, []).append(f)
    taken: set[int] = set()
    groups: list[tuple[int, list[int]]] = []
    while True:
        best: tuple[int, list[int]] | None = None
        for pattern, fams in admitting.items():
            free = [f for f in fams if f not in taken]
            if len(free) >= 2 and (best is None or len(free) > len(best[1])):
                best = (pattern, free)
        if best is None:
            return groups
        taken.update(best[1])
        groups.append(best)


def _group_sum(
    terms: Sequence[tuple[EvalNode, Fraction]], pattern: int, fams: Sequence[_Family]
) -> tuple[EvalNode, int]:
    """``Y = Σ coef_rep · rep`` over ``fams``, and the first family's representative.

    ``Y``'s modes are in the orientation that the most representatives can take; the
    representative is returned as its position in ``terms``.
    """
    orients = Counter(terms[m][0].indices for fam in fams for m in fam.reps[pattern])
    order = max(orients, key=orients.__getitem__)  # ties: the first seen (max is stable)
    chain: EvalNode | None = None
    first: tuple[EvalNode, Fraction] | None = None
    rep = -1
    for fam in fams:
        candidates = fam.reps[pattern]
        m = next((m for m in candidates if terms[m][0].indices == order), candidates[0])
        node, coef = terms[m][0], fam.coefs[m]
        if first is None:
            first, rep = (node, coef), m
        elif chain is None:
            chain = sum_node(first[0], first[1], node, coef, order)
        else:
            chain = sum_node(chain, Fraction(1), node, coef, order)
    assert chain is not None  # a group has two families or more
    return chain, rep


def relabel_node(node: EvalNode, mapping: Mapping[Index, Index]) -> EvalNode:
    """``node``'s tree with every label renamed by ``mapping`` (others kept): the same key.

    The copy is rebuilt with the :mod:`sq_jax.forest.canon` constructors, so it is a
    well-formed tree of its own; ``mapping`` must be a bijection of the labels it renames
    and must not rename a label onto one that it keeps (else the tree changes meaning).
    Iterative (sum chains can be thousands deep); a subtree shared by identity is copied
    once.

    Args:
        node: the tree.
        mapping: old label → new label.

    Returns:
        The relabeled tree (its key equals ``node.key``).

    Example:
        >>> from sq_jax.expr.nodes import Index, Tensor
        >>> from sq_jax.forest.canon import leaf_node, product_node
        >>> i1, i2, a1 = Index("i", 1), Index("i", 2), Index("a", 1)
        >>> p = product_node(leaf_node(Tensor("f", (i1,), (a1,))),
        ...                  leaf_node(Tensor("t", (a1,), (i2,))), (i1, i2))
        >>> q = relabel_node(p, {i1: i2, i2: i1})
        >>> q.key == p.key, [str(ix) for ix in q.indices]
        (True, ['i_2', 'i_1'])
    """

    def rename(indices: Sequence[Index]) -> tuple[Index, ...]:
        return tuple(mapping.get(ix, ix) for ix in indices)

    done: dict[int, EvalNode] = {}
    for current in post_order(node, set()):
        if current.kind is NodeKind.SCALAR:
            copy = current
        elif current.kind is NodeKind.LEAF:
            t = current.tensor
            assert t is not None
            copy = leaf_node(
                dataclasses.replace(t, bra=rename(t.bra), ket=rename(t.ket), aux=rename(t.aux))
            )
        else:
            left, right = done[id(current.left)], done[id(current.right)]
            if current.kind is NodeKind.PRODUCT:
                copy = product_node(left, right, rename(current.indices))
            else:
                copy = sum_node(
                    left, current.left_coef, right, current.right_coef, rename(current.indices)
                )
            assert copy.key == current.key and copy.indices == rename(current.indices)
        done[id(current)] = copy
    return done[id(node)]
