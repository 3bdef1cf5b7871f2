"""Which values of a forest are symmetric under swapping pairs of their modes.

A *symmetry* of a value ``X`` with modes ``(m_0, …, m_{n-1})`` (its node's canonical
order) is a position permutation ``p`` and a sign ``s`` with
``X[x_0, …, x_{n-1}] = s · X[x_{p[0]}, …, x_{p[n-1]}]`` for every element. The
lowering (:mod:`sq_jax.lower.pairs`) uses them to compute a product over a symmetric
pair of modes only for ``x ≤ y`` and fill the rest by symmetry: the o²v⁴ ladder
``g_ab^cd τ_cd^ij`` of CCSD at half its FLOPs.

Symmetries come from what the inputs **declare** (SeQuant's ``:P-B-C`` annotation,
:class:`~sq_jax.expr.nodes.Symmetry`), so they are trusted only when the caller says
its inputs have them (``sq.compile(..., pair_symmetry=True)``): SeQuant's default
annotation ``N-C-S`` declares every tensor column-symmetric. Used:

* **column symmetry** ``S``: swapping two columns (bra slot *k* with bra slot *l* and
  ket slot *k* with ket slot *l* together) leaves the tensor unchanged —
  ``g{p,q;r,s} = g{q,p;s,r}``, closed-shell ``t{a,b;i,j} = t{b,a;j,i}``;
* **permutational symmetry** ``A`` / ``S`` within the bra (or the ket): swapping two of
  its slots flips the sign (``A``) or keeps it (``S``).

Bra/ket (``C``/``H``) symmetry is not used: it holds only for real tensors. A swap is
used only between slots of one index space (otherwise it maps the block to another
block), and never on a leaf with a repeated label (a trace).

They propagate through the forest: a product is symmetric under a pair of its operands'
symmetries that agree on the shared (contracted and Hadamard) modes and keep the result
modes among themselves, and under swapping two operands that are the same value (the
``t1 ⊗ t1`` of τ); a sum under what both terms share, and ``c·Y + c·ψ(Y)`` under ``ψ``.

Example:
    >>> import sq_jax as sq
    >>> f = sq.build_forest(sq.parse("R{a1,a2;i1,i2} = g{a1,a2;a3,a4} t{a3,a4;i1,i2}"),
    ...                     sq.Spaces(i=2, a=3))
    >>> syms = value_symmetries(f)
    >>> node = f.roots[0].node
    >>> [str(ix) for ix in node.indices], sorted(syms[node.key])
    (['a_1', 'a_2', 'i_1', 'i_2'], [((0, 1, 2, 3), 1), ((1, 0, 3, 2), 1)])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np

from ..expr.nodes import Index, Tensor
from .inputs import block_key
from .nodes import EvalNode, Forest, NodeKind

__all__ = [
    "ValueSymmetry",
    "block_pair_products",
    "free_pair_packs",
    "joint_swaps",
    "symmetric_random_inputs",
    "value_symmetries",
]

ValueSymmetry = tuple[tuple[int, ...], int]
"""A position permutation of a value's modes and its sign (see the module docstring)."""

_MAX_GROUP = 48
"""At most this many symmetries are kept per value (a larger group is cut short: fewer
symmetries are found, none is wrong)."""

_LabelSym = tuple[dict[Index, Index], int]


def _leaf(tensor: Tensor) -> list[ValueSymmetry]:
    """Generators of a leaf's declared symmetries, on its slots (bra, ket, aux)."""
    slots = tensor.indices
    if len(set(slots)) != len(slots):
        return []
    nb, nk = len(tensor.bra), len(tensor.ket)
    out: list[ValueSymmetry] = []

    def swap(*pairs: tuple[int, int]) -> tuple[int, ...]:
        perm = list(range(len(slots)))
        for x, y in pairs:
            perm[x], perm[y] = y, x
        return tuple(perm)

    sym = tensor.symmetry
    for first, count in ((0, nb), (nb, nk)):
        if sym.perm == "N":
            break
        for k in range(count - 1):
            x, y = first + k, first + k + 1
            if slots[x].space == slots[y].space:
                out.append((swap((x, y)), -1 if sym.perm == "A" else 1))
    if sym.column == "S" and nb == nk:
        for k in range(nb - 1):
            bra, ket = (k, k + 1), (nb + k, nb + k + 1)
            if all(slots[x].space == slots[y].space for x, y in (bra, ket)):
                out.append((swap(bra, ket), 1))
    return out


def _to_labels(labels: Sequence[Index], sym: ValueSymmetry) -> _LabelSym:
    perm, sign = sym
    return {labels[k]: labels[perm[k]] for k in range(len(labels))}, sign


def _to_positions(labels: Sequence[Index], sym: _LabelSym) -> ValueSymmetry | None:
    mapping, sign = sym
    where = {ix: k for k, ix in enumerate(labels)}
    perm = []
    for ix in labels:
        image = mapping.get(ix, ix)
        if image not in where:
            return None  # moves a result mode onto a summed one
        perm.append(where[image])
    if sorted(perm) != list(range(len(labels))):
        return None
    return tuple(perm), sign


def _closure(generators: Sequence[ValueSymmetry], rank: int) -> frozenset[ValueSymmetry]:
    """The group the generators make (with the identity), at most ``_MAX_GROUP`` long."""
    identity: ValueSymmetry = (tuple(range(rank)), 1)
    group = {identity}
    frontier = [identity]
    gens = [g for g in generators if g != identity]
    while frontier and len(group) < _MAX_GROUP:
        nxt = []
        for perm, sign in frontier:
            for gp, gs in gens:
                new = (tuple(perm[gp[k]] for k in range(rank)), sign * gs)
                if new[0] == identity[0] and new[1] == -1:
                    return frozenset({identity})  # X = -X: contradictory declarations
                if new not in group:
                    group.add(new)
                    nxt.append(new)
        frontier = nxt
    return frozenset(group)


def _product(
    node: EvalNode, left: frozenset[ValueSymmetry], right: frozenset[ValueSymmetry]
) -> list[ValueSymmetry]:
    assert node.left is not None and node.right is not None
    la, lb = node.left.indices, node.right.indices
    if len(set(la)) != len(la) or len(set(lb)) != len(lb):
        return []
    shared = set(la) & set(lb)
    out: list[ValueSymmetry] = []
    for sa in left:
        ma, sign_a = _to_labels(la, sa)
        for sb in right:
            mb, sign_b = _to_labels(lb, sb)
            if any(ma[ix] != mb[ix] for ix in shared):
                continue
            found = _to_positions(node.indices, ({**ma, **mb}, sign_a * sign_b))
            if found is not None:
                out.append(found)
    if node.left.key == node.right.key:  # swapping the two operands
        mapping: dict[Index, Index] = {}
        for x, y in zip(la, lb, strict=True):
            for u, w in ((x, y), (y, x)):
                if mapping.setdefault(u, w) != w:
                    return out
        found = _to_positions(node.indices, (mapping, 1))
        if found is not None:
            out.append(found)
    return out


def _sum(
    node: EvalNode, left: frozenset[ValueSymmetry], right: frozenset[ValueSymmetry]
) -> list[ValueSymmetry]:
    assert node.left is not None and node.right is not None
    la, lb, out_labels = node.left.indices, node.right.indices, node.indices
    if len(set(out_labels)) != len(out_labels):
        return []
    mine_a = {_to_positions(out_labels, _to_labels(la, s)) for s in left}
    mine_b = {_to_positions(out_labels, _to_labels(lb, s)) for s in right}
    out = [s for s in mine_a & mine_b if s is not None]
    ca, cb = node.left_coef, node.right_coef
    if node.left.key == node.right.key and abs(ca) == abs(cb):
        # right = left with its labels moved by psi: c·Y + c'·ψ(Y) is symmetric under ψ
        psi = {x: y for x, y in zip(la, lb, strict=True)}
        if all(psi.get(psi[x], psi[x]) == x for x in psi):  # an involution
            found = _to_positions(out_labels, (psi, 1 if ca == cb else -1))
            if found is not None and found[0] != tuple(range(len(out_labels))):
                out.append(found)
    return out


def value_symmetries(forest: Forest) -> Mapping[str, frozenset[ValueSymmetry]]:
    """The symmetries of every value of ``forest``, by node key (identity included).

    Args:
        forest: the eval forest; its leaves' declared symmetries are trusted.

    Returns:
        Node key → the group of :data:`ValueSymmetry` of that value, on its canonical mode
        order (leaves and scalars included).

    Example:
        >>> import sq_jax as sq
        >>> eqs = sq.parse("R{a1,a2;i1,i2} = t{a1;i1} t{a2;i2}")
        >>> f = sq.build_forest(eqs, sq.Spaces(i=2, a=3))
        >>> node = f.roots[0].node  # t1 ⊗ t1: swap the two factors
        >>> [str(ix) for ix in node.indices], sorted(value_symmetries(f)[node.key])
        (['a_1', 'i_1', 'a_2', 'i_2'], [((0, 1, 2, 3), 1), ((2, 3, 0, 1), 1)])
    """
    known = forest.derived.get("value_symmetries")
    if known is None:
        known = forest.derived["value_symmetries"] = MappingProxyType(_derive(forest))
    return known  # type: ignore[return-value]


def _derive(forest: Forest) -> dict[str, frozenset[ValueSymmetry]]:
    out: dict[str, frozenset[ValueSymmetry]] = {}
    for node in forest.distinct():
        rank = len(node.indices)
        if node.kind is NodeKind.LEAF:
            assert node.tensor is not None
            gens = _leaf(node.tensor)
        elif node.kind is NodeKind.PRODUCT:
            assert node.left is not None and node.right is not None
            gens = _product(node, out[node.left.key], out[node.right.key])
        elif node.kind is NodeKind.SUM:
            assert node.left is not None and node.right is not None
            gens = _sum(node, out[node.left.key], out[node.right.key])
        else:
            gens = []
        out[node.key] = _closure(gens, rank)
    return out


def joint_swaps(
    labels: Sequence[Index], syms: frozenset[ValueSymmetry], contracted: set[Index]
) -> dict[frozenset[Index], tuple[tuple[Index, Index], int]]:
    """Per contracted pair of ``labels``, a free pair swapped together with it, and the sign.

    ``labels`` are a value's modes in the order its symmetries ``syms`` permute;
    ``contracted`` the modes its reader sums.

    Example:
        >>> a = [Index("a", n) for n in range(1, 5)]
        >>> sym = frozenset({((0, 1, 2, 3), 1), ((1, 0, 3, 2), 1)})  # g_ab^cd = g_ba^dc
        >>> found = joint_swaps(a, sym, {a[2], a[3]})
        >>> [(sorted(map(str, k)), tuple(map(str, f)), s) for k, (f, s) in found.items()]
        [(['a_3', 'a_4'], ('a_1', 'a_2'), 1)]
    """
    out: dict[frozenset[Index], tuple[tuple[Index, Index], int]] = {}
    for perm, sign in sorted(syms):
        moved = [k for k, p in enumerate(perm) if p != k]
        if len(moved) != 4 or any(perm[perm[k]] != k for k in moved):
            continue
        ks = [labels[k] for k in moved if labels[k] in contracted]
        fs = [k for k in moved if labels[k] not in contracted]
        if len(ks) != 2 or len(fs) != 2 or perm[fs[0]] != fs[1]:
            continue
        out.setdefault(frozenset(ks), ((labels[fs[0]], labels[fs[1]]), sign))
    return out


def block_pair_products(forest: Forest) -> frozenset[str]:
    """Keys of the products that can run over block pairs when loops cut their summed pair.

    A product whose operands both swap one summed pair of a space together with a free
    pair of their own (the closed-shell ladder ``Σ_cd g_ab^cd τ_cd^ij``), at least one
    of those free pairs in the result: :mod:`sq_jax.lower.block_pairs` packs it when two
    loops of that space cut the summed pair and nothing else cuts the free pairs.
    ``BatchPlan(hoist="pairs")`` builds these products whole, with their computed
    operands (:mod:`sq_jax.schedule.loop_identity`). Empty unless the forest trusts its
    inputs' symmetries (``Forest.pair_symmetry``).

    Example:
        >>> import sq_jax as sq, dataclasses
        >>> eqs = sq.parse("R{a1,a2;i1,i2} = g{a1,a2;a3,a4} t{a3,a4;i1,i2}")
        >>> f = sq.build_forest(eqs, sq.Spaces(i=2, a=3))
        >>> len(block_pair_products(f)), len(block_pair_products(
        ...     dataclasses.replace(f, pair_symmetry=True)))
        (0, 1)
    """
    if not forest.pair_symmetry:
        return frozenset()
    known = forest.derived.get("block_pair_products")
    if known is None:
        syms = value_symmetries(forest)
        found = set()
        for node in forest.distinct():
            if node.kind is NodeKind.PRODUCT and _pairs_cut_together(node, syms):
                found.add(node.key)
        known = forest.derived["block_pair_products"] = frozenset(found)
    return known  # type: ignore[return-value]


def _pairs_cut_together(node: EvalNode, syms: Mapping[str, frozenset[ValueSymmetry]]) -> bool:
    """Whether ``node``'s operands swap one summed pair together with free pairs."""
    assert node.left is not None and node.right is not None
    operands = (node.left, node.right)
    out = set(node.indices)
    contracted = (set(node.left.indices) & set(node.right.indices)) - out
    if len(contracted) < 2:
        return False
    found = [joint_swaps(op.indices, syms[op.key], contracted) for op in operands]
    for summed, (free, _) in found[0].items():
        if summed not in found[1] or len({ix.space for ix in summed}) != 1:
            continue
        for k, pair in ((0, free), (1, found[1][summed][0])):
            if pair[0].space == pair[1].space and free_pair_packs(
                pair, node.indices, operands[1 - k].indices
            ):
                return True
    return False


def free_pair_packs(pair: Sequence[Index], out: Sequence[Index], other: Sequence[Index]) -> bool:
    """Whether an operand's free pair, swapped with a summed pair, can be stored packed.

    Both of its modes must be on the product's result ``out`` and neither on the other
    operand ``other``: the product then holds the pair's two orders as one triangle.
    :func:`block_pair_products` and :func:`~sq_jax.lower.block_pairs.plan_block_pairs`
    (which also needs the pair's extents equal and neither mode cut by another loop)
    share this condition.

    Example:
        >>> a1, a2, i1 = Index("a", 1), Index("a", 2), Index("i", 1)
        >>> free_pair_packs((a1, a2), (a1, a2, i1), (i1,)), free_pair_packs((a1, a2), (a1,), ())
        (True, False)
    """
    return set(pair) <= set(out) and not set(pair) & set(other)


def symmetric_random_inputs(
    forest: Forest, seed: int = 0, scale: float = 1.0
) -> dict[str, np.ndarray]:
    """Random input blocks with exactly the symmetries their leaves declare.

    What a program compiled with ``pair_symmetry=True`` may assume of its inputs
    (antisymmetric ``g`` and ``t{a,a;i,i}``, ...): each block is a normal random array,
    times ``scale``, averaged over its leaf's symmetry group with the group's signs.

    Example:
        >>> import numpy as np
        >>> import sq_jax as sq
        >>> from sq_jax.cc.equations import load_equations
        >>> forest = sq.build_forest(sq.parse(load_equations("ccd_so")), sq.Spaces(i=2, a=3))
        >>> t = symmetric_random_inputs(forest, seed=1)["t{a,a;i,i}"]
        >>> bool(np.allclose(t, -t.transpose(1, 0, 2, 3)))
        True
    """
    syms = value_symmetries(forest)
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for leaf in forest.leaves():
        key = block_key(leaf.tensor)
        if key in out:
            continue
        shape = tuple(forest.spaces.extent(ix.space) for ix in leaf.tensor.indices)
        x = scale * rng.standard_normal(shape)
        group = syms[leaf.key]
        # y[k_0, k_1, ...] = x[k_p0, k_p1, ...] for each symmetry p of the group
        out[key] = sum(s * np.transpose(x, np.argsort(p)) for p, s in group) / len(group)
    return out
