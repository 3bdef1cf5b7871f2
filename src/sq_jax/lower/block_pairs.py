"""Two contracted loops that cut one symmetric summed pair, run over block pairs ``P ≤ Q``.

Under a memory budget the closed-shell ladder ``X_ab^ij = Σ_cd g_ab^cd τ_cd^ij`` is summed
in batches of ``c`` and of ``d``: two nested contracted loops over one space. The packed
products of :mod:`sq_jax.lower.pairs` need the whole pair ``(c, d)``, so inside these
loops the ladder ran as a plain product (benzene/cc-pVDZ at a quarter of the unbatched
memory: 1.37x the unbatched FLOPs, most of it this). The loops' blocks pair up instead.
With ``A^± = (A_cd ± A_dc) / 2`` (likewise ``B``), for blocks ``P ≠ Q`` the batches
``(P, Q)`` and ``(Q, P)`` together are

    ``Σ_{c∈P, d∈Q} (A_cd B_cd + A_dc B_dc) = 2 Σ_{c∈P, d∈Q} (A⁺_cd B⁺_cd + A⁻_cd B⁻_cd)``,

and the batch ``(P, P)`` alone is ``Σ_{c, d∈P} (A⁺B⁺ + A⁻B⁻)``. Neither identity needs a
symmetry. The saving does: when ``B`` swaps ``(c, d)`` together with a free pair of its
own (``τ_cd^ij = τ_dc^ji``), ``B^±`` is symmetric (``+``) or antisymmetric (``-``) in
``(i, j)`` alone, so both products are computed for ``i ≤ j`` only and the rest is filled
by that sign; likewise ``A``'s free pair when no other loop cuts it. So the nest runs
``nb(nb-1)/2`` iterations over pairs ``P < Q``, each two products of about half (a
quarter, with both free pairs) the size of one plain batch, and ``nb`` over blocks
``P``, summed over ``c ≤ d`` inside the block: about the packed share of the plain
nest's FLOPs (:meth:`BlockPairs.fraction`).

The lowering marks the product (:attr:`sq_jax.lower.ir.Contract.block_pairs`);
:func:`sq_jax.lower.execute.run_loop` runs the outer loop of a marked nest this way. The
marked nest is still a valid plain nest: a runner that ignores the mark (the device mesh
of :mod:`sq_jax.lower.shard` for a root loop) computes the same values. Derivatives are
the plain products' (a custom JVP rule): exact in every direction, at the plain cost.

Example:
    >>> import numpy as np, sq_jax as sq
    >>> text = "R{a1,a2;i1,i2} = g{a1,a2;a3,a4} t{a3,a4;i1,i2}"
    >>> plan = sq.BatchPlan.of({"a": {"batches": 3, "roles": "contracted"}})
    >>> prog = sq.compile(text, sq.Spaces(i=10, a=20), pair_symmetry=True, batch=plan)
    >>> print(prog.lowered.body[0].lines()[0])
    loop a#0 extent 20 block 7 Contracted, over block pairs with a#1
    >>> print(prog.lowered.body[0].body[0].body[0].block_pairs)
    block pairs a_3<->a_4; a_1<=a_2 +1, i_1<=i_2 +1
    >>> rng = np.random.default_rng(0)
    >>> g, t = rng.normal(size=(20,) * 4), rng.normal(size=(20, 20, 10, 10))
    >>> g, t = g + g.transpose(1, 0, 3, 2), t + t.transpose(1, 0, 3, 2)  # declared: N-C-S
    >>> r = prog({"g{a,a;a,a}": g, "t{a,a;i,i}": t})["R"]
    >>> bool(np.allclose(r, np.einsum("abcd,cdij->abij", g, t)))
    True
"""

from __future__ import annotations

import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_derivatives import SymbolicZero

from ..expr.nodes import Index
from ..forest.symmetry import ValueSymmetry, free_pair_packs, joint_swaps
from ..schedule.ir import LoopId
from . import pairs as _pairs
from .pairs import _unfold, take_pairs

__all__ = ["BlockPairs", "block_pair_product", "plan_block_pairs"]


@dataclass(frozen=True, slots=True)
class BlockPairs:
    """How a product summed by two loops over one pair runs over block pairs ``P ≤ Q``."""

    inner: LoopId
    """The inner loop of the nest (the outer one cuts :attr:`summed`'s first mode)."""
    summed: tuple[Index, Index]
    """``(k1, k2)``: the summed pair, ``k1`` cut by the outer loop, ``k2`` by the inner."""
    free: tuple[tuple[Index, Index] | None, tuple[Index, Index] | None]
    """Per operand, the free pair it swaps together with ``(k1, k2)`` and packs to
    ``f1 ≤ f2`` in both parts, or ``None`` (cut by another loop: not packed)."""
    signs: tuple[int, int]
    """Per operand, its sign under that joint swap."""
    extents: tuple[int, int]
    """Per operand, the extent of its packed free pair (0 when not packed)."""
    labels: tuple[tuple[Index, ...], tuple[Index, ...]]
    """Each operand's stored modes (the product's ``spec`` names them by letter)."""

    @property
    def share(self) -> float:
        """FLOPs of one iteration's two products over those of one plain batch, halved."""
        out = 1.0
        for pair, n in zip(self.free, self.extents, strict=True):
            if pair is not None:
                out *= (n + 1) / (2 * n)
        return out

    def fraction(self, extent: int, block: int) -> float:
        """The nest's FLOPs over the plain nest's, ``extent`` elements in blocks of ``block``.

        Each pair ``P < Q`` runs two products at :attr:`share` of its two plain batches;
        each block ``P`` two products over ``k1 ≤ k2``, ``(b + 1) / (2b)`` of its plain
        batch each: in all ``(1 + 1 / (nb · b))`` times :attr:`share`. Every iteration
        multiplies whole blocks: a last, smaller batch overlaps the one before (masked),
        so each loop covers ``nb · block`` elements rather than ``extent``.

        Example:
            >>> a = [Index("a", n) for n in range(1, 5)]
            >>> free = (None, (a[0], a[1]))
            >>> plan = BlockPairs(("a", 1), (a[2], a[3]), free, (1, 1), (0, 9), ((), ()))
            >>> round(plan.fraction(15, 3), 4)  # (1 + 1 / 15) * 10 / 18
            0.5926
            >>> round(plan.fraction(14, 3), 4)  # the last batch overlaps: 15 of 14 rows
            0.6803
        """
        batches = -(-extent // block)
        return (1 + 1 / (batches * block)) * self.share * (batches * block / extent) ** 2

    def gain(self, extent: int, block: int, sizes: Mapping[Index, int]) -> float:
        """Seconds the nest saves per run: FLOPs saved less the parts its iterations write.

        Priced as :func:`~sq_jax.lower.pairs.plan_pairs` prices a packing (at
        :data:`~sq_jax.lower.pairs.FLOP_RATE` and :data:`~sq_jax.lower.pairs.GATHER_RATE`,
        over full extents ``sizes``): each iteration writes both operands' two parts, so
        the nest writes each operand about once, at its packed share. Where
        the product is small beside its operands (few occupied orbitals) the parts cost
        more than the FLOPs they save (measured: the ladder at o = 4, v = 93, ``a`` in 3
        batches, 0.33 s over block pairs against 0.15 s plain).

        Example:
            >>> a = [Index("a", n) for n in range(1, 5)]
            >>> i = [Index("i", n) for n in range(1, 3)]
            >>> sym = frozenset({((0, 1, 2, 3), 1), ((1, 0, 3, 2), 1)})
            >>> g, t = (a[0], a[1], a[2], a[3]), (a[2], a[3], i[0], i[1])
            >>> def plan(o):
            ...     sizes = {ix: 93 if ix.space == "a" else o for ix in (*g, *t)}
            ...     p = plan_block_pairs(("a", 1), (a[2], a[3]), (g, t), (g, t), (sym, sym),
            ...                          (a[0], a[1], i[0], i[1]), sizes, frozenset({a[0]}))
            ...     return p.gain(93, 31, sizes) > 0
            >>> plan(4), plan(21)
            (False, True)
        """
        modes = set(self.labels[0]) | set(self.labels[1])
        flops = 2.0 * math.prod(sizes[ix] for ix in modes)
        batches = -(-extent // block)
        written = 0.0
        for labels, pair, n in zip(self.labels, self.free, self.extents, strict=True):
            share = (n + 1) / (2 * n) if pair is not None else 1.0
            whole = 8 * math.prod(sizes[ix] for ix in labels)
            written += (1 + 1 / (batches * block)) * whole * share
        saved = flops * (1 - self.fraction(extent, block))
        return saved / _pairs.FLOP_RATE - written / _pairs.GATHER_RATE

    def __str__(self) -> str:
        k1, k2 = self.summed
        packed = (
            f"{p[0]}<={p[1]} {s:+d}"
            for p, s in zip(self.free, self.signs, strict=True)
            if p is not None
        )
        return f"block pairs {k1}<->{k2}; " + ", ".join(packed)


def plan_block_pairs(
    inner: LoopId,
    summed: tuple[Index, Index],
    labels: tuple[Sequence[Index], Sequence[Index]],
    node_labels: tuple[Sequence[Index], Sequence[Index]],
    syms: tuple[frozenset[ValueSymmetry], frozenset[ValueSymmetry]],
    out: Sequence[Index],
    extent: Mapping[Index, int],
    fixed: frozenset[Index],
) -> BlockPairs | None:
    """A :class:`BlockPairs` plan, or ``None`` when no free pair can be packed.

    Args:
        inner: the inner loop of the nest.
        summed: ``(k1, k2)``, cut by the outer and the inner loop.
        labels: each operand's stored modes.
        node_labels: each operand's modes in its value's canonical order (what ``syms``
            permute).
        syms: each operand's symmetries (:func:`~sq_jax.forest.symmetry.value_symmetries`).
        out: the product's modes.
        extent: each label's extent.
        fixed: free modes cut by other loops: no packed pair may hold one.

    Example:
        >>> a = [Index("a", n) for n in range(1, 5)]
        >>> i = [Index("i", n) for n in range(1, 3)]
        >>> g, t = (a[0], a[1], a[2], a[3]), (a[2], a[3], i[0], i[1])
        >>> sym = frozenset({((0, 1, 2, 3), 1), ((1, 0, 3, 2), 1)})
        >>> extent = {ix: 10 if ix.space == "a" else 3 for ix in (*g, *t)}
        >>> plan = plan_block_pairs(("a", 1), (a[2], a[3]), (g, t), (g, t), (sym, sym),
        ...                         (a[0], a[1], i[0], i[1]), extent, frozenset({a[0]}))
        >>> print(plan)  # a_1 is cut by another loop: only t's free pair is packed
        block pairs a_3<->a_4; i_1<=i_2 +1
    """
    contracted = (set(labels[0]) & set(labels[1])) - set(out)
    if not set(summed) <= contracted or extent[summed[0]] != extent[summed[1]]:
        return None
    free: list[tuple[Index, Index] | None] = []
    signs: list[int] = []
    sizes: list[int] = []
    for k in (0, 1):
        joint = joint_swaps(node_labels[k], syms[k], contracted)
        found = joint.get(frozenset(summed))
        if found is None:
            return None  # a_dc is not a swap of a_cd with signs: nothing to pair
        (f1, f2), sign = found
        f1, f2 = sorted((f1, f2), key=list(labels[k]).index)
        ok = (
            not {f1, f2} & fixed
            and free_pair_packs((f1, f2), out, labels[1 - k])
            and extent[f1] == extent[f2] > 1
        )
        free.append((f1, f2) if ok else None)
        signs.append(sign)
        sizes.append(extent[f1] if ok else 0)
    if free == [None, None]:
        return None
    return BlockPairs(
        inner,
        summed,
        (free[0], free[1]),
        (signs[0], signs[1]),
        (sizes[0], sizes[1]),
        (tuple(labels[0]), tuple(labels[1])),
    )


def _spec_labels(spec: str, labels: tuple[Sequence[Index], Sequence[Index]]) -> dict[str, Index]:
    lhs, _ = spec.split("->")
    out: dict[str, Index] = {}
    for letters, modes in zip(lhs.split(","), labels, strict=True):
        out.update(zip(letters, modes, strict=True))
    return out


def block_pair_product(
    plan: BlockPairs,
    spec: str,
    here: Sequence[Any],
    swapped: Sequence[Any],
    diagonal: bool = False,
) -> Any:
    """One iteration: the batches ``(P, Q)`` and ``(Q, P)`` together, in ``spec``'s order.

    ``here`` are the operands of the batch ``(P, Q)`` (``k1 ∈ P``, ``k2 ∈ Q``),
    ``swapped`` those of ``(Q, P)``: ``2 Σ (A⁺B⁺ + A⁻B⁻)``, the sum of both plain
    products (also its derivative). ``diagonal`` (``P = Q``, ``swapped`` is ``here``):
    the batch alone, ``Σ (A⁺B⁺ + A⁻B⁻)`` over ``k1 ≤ k2``, its plain product.

    Example:
        >>> a = [Index("a", n) for n in range(1, 5)]
        >>> i = [Index("i", n) for n in range(1, 3)]
        >>> sym = frozenset({((0, 1, 2, 3), 1), ((1, 0, 3, 2), 1)})
        >>> labels = ((a[0], a[1], a[2], a[3]), (a[2], a[3], i[0], i[1]))
        >>> extent = {ix: 4 if ix.space == "a" else 3 for ix in (*labels[0], *labels[1])}
        >>> plan = plan_block_pairs(("a", 1), (a[2], a[3]), labels, labels, (sym, sym),
        ...                         (a[0], a[1], i[0], i[1]), extent, frozenset())
        >>> rng = np.random.default_rng(0)
        >>> g, t = rng.normal(size=(4,) * 4), rng.normal(size=(4, 4, 3, 3))
        >>> g, t = g + g.transpose(1, 0, 3, 2), t + t.transpose(1, 0, 3, 2)
        >>> x = block_pair_product(plan, "abcd,cdef->abef", [g, t], [g, t], diagonal=True)
        >>> bool(np.allclose(x, np.einsum("abcd,cdef->abef", g, t)))
        True
    """
    factor = 1.0 if diagonal else 2.0

    @jax.custom_jvp
    def packed(x0: Any, x1: Any, y0: Any, y1: Any) -> Any:
        return factor * _packed(plan, spec, (x0, x1), (y0, y1), diagonal)

    def plain(x0: Any, x1: Any, y0: Any, y1: Any) -> Any:  # equal to packed, any inputs
        return (factor / 2) * (
            jnp.einsum(spec, x0, x1, precision=lax.Precision.HIGHEST)
            + jnp.einsum(spec, y0, y1, precision=lax.Precision.HIGHEST)
        )

    def tangent(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
        out = packed(*primals)
        if all(isinstance(d, SymbolicZero) for d in tangents):
            return out, jnp.zeros_like(out)
        dops = tuple(
            jnp.zeros_like(x) if isinstance(d, SymbolicZero) else d
            for x, d in zip(primals, tangents, strict=True)
        )
        return out, jax.jvp(plain, primals, dops)[1]

    packed.defjvp(tangent, symbolic_zeros=True)
    return packed(here[0], here[1], swapped[0], swapped[1])


def _packed(
    plan: BlockPairs, spec: str, here: Sequence[Any], swapped: Sequence[Any], diagonal: bool
) -> Any:
    """``Σ (A⁺B⁺ + A⁻B⁻)`` over the batch, free pairs packed, in ``spec``'s output order.

    ``diagonal``: the batch ``(P, P)``, summed over ``k1 ≤ k2`` only, twice off the
    diagonal (``A⁺B⁺`` and ``A⁻B⁻`` are both symmetric in ``(k1, k2)``).
    """
    by_letter = _spec_labels(spec, plan.labels)
    letter_of = {ix: c for c, ix in by_letter.items()}
    unused = iter(c for c in string.ascii_letters if c not in by_letter)
    summed_mark = next(unused)
    lhs, out_letters = spec.split("->")
    k1, k2 = plan.summed
    plus, minus, operands = [], [], []
    marks: list[tuple[str, tuple[str, str], int, int] | None] = []  # mark, pair, n, sign
    for k in (0, 1):
        letters = list(lhs.split(",")[k])
        axes = (letters.index(letter_of[k1]), letters.index(letter_of[k2]))
        other = jnp.swapaxes(swapped[k], *axes)  # its value at (k2, k1), for k1 ∈ P, k2 ∈ Q
        parts = [(here[k] + other) / 2, (here[k] - other) / 2]
        pair = plan.free[k]
        if pair is not None:
            mark = next(unused)
            letter_pair = (letter_of[pair[0]], letter_of[pair[1]])
            marks.append((mark, letter_pair, plan.extents[k], plan.signs[k]))
            parts, letters = _triangle(parts, letters, marks[-1][1], mark)
        else:
            marks.append(None)
        if diagonal:  # the pair (k1, k2) to k1 <= k2, twice off the diagonal in operand 0
            summed = (letter_of[k1], letter_of[k2])
            parts, letters = _triangle(parts, letters, summed, summed_mark, weighted=k == 0)
        plus.append(parts[0])
        minus.append(parts[1])
        operands.append("".join(letters))
    packed_pairs = {c for m in marks if m is not None for c in m[1]}
    result = [c for c in out_letters if c not in packed_pairs] + [m[0] for m in marks if m]
    big = _summed_in_order(operands, plus, minus, result)
    # the product written with the larger operand's free modes first: XLA then reads that
    # operand as the left matrix, as gathered. In the result's order it wanted it summed
    # modes first, a gather of single elements 361 apart: 16-27 ms a batch where this
    # takes 7 (g's block at benzene/cc-pVDZ sizes, a quarter of the memory)
    first, second = (big, 1 - big)
    rows = [c for c in (*operands[first], *operands[second]) if c in result]
    product = "{},{}->{}".format(operands[first], operands[second], "".join(rows))
    back = tuple(rows.index(c) for c in result)
    yp, ym = (
        jnp.transpose(
            jnp.einsum(product, part[first], part[second], precision=lax.Precision.HIGHEST), back
        )
        for part in (plus, minus)
    )
    y, z = yp + ym, yp - ym
    done = [m for m in marks if m is not None]
    # the later axis first: the earlier one keeps its place (pairs.py, _split_product)
    at_last = len(result) - 1
    if len(done) == 2:
        (_, p2, n2, s2), (_, p1, n1, s1) = done
        y, z = _unfold(y, z, at_last, n1, s1), _unfold(z, y, at_last, n1, s1)
        x = _unfold(y, z, at_last - 1, n2, s2)
        final = [*result[:-2], *p2, *p1]
    else:
        ((_, p1, n1, s1),) = done
        x = _unfold(y, z, at_last, n1, s1)
        final = [*result[:-1], *p1]
    perm = tuple(final.index(c) for c in out_letters)
    return jnp.transpose(x, perm)


def _summed_in_order(
    operands: list[str], plus: list[Any], minus: list[Any], result: Sequence[str]
) -> int:
    """The smaller operand's summed modes put in the larger one's order (in place).

    The product needs both operands' summed modes in one order: transposing the smaller
    part (the amplitudes' block) costs a moment, the larger one (g's block) a full copy.
    Returns the larger operand's position.

    Example:
        >>> ops, plus = ["abh", "iba"], [np.zeros((2, 3, 4)), np.zeros((5, 3, 2))]
        >>> minus = list(plus)
        >>> _summed_in_order(ops, plus, minus, ["h", "i"]), ops, plus[0].shape
        (1, ['bah', 'iba'], (3, 2, 4))
    """
    summed = {c for c in operands[0] if c in operands[1] and c not in result}
    small = 0 if plus[0].size <= plus[1].size else 1
    wanted = [c for c in operands[1 - small] if c in summed]
    if [c for c in operands[small] if c in summed] == wanted:
        return 1 - small
    slots = iter(wanted)
    letters = [next(slots) if c in summed else c for c in operands[small]]
    perm = tuple(operands[small].index(c) for c in letters)
    plus[small] = jnp.transpose(plus[small], perm)
    minus[small] = jnp.transpose(minus[small], perm)
    operands[small] = "".join(letters)
    return 1 - small


def _triangle(
    parts: list[Any], letters: list[str], pair: tuple[str, str], mark: str, weighted: bool = False
) -> tuple[list[Any], list[str]]:
    """``parts`` with the modes ``pair`` gathered to ``x ≤ y`` as one mode ``mark``, last.

    ``weighted``: the off-diagonal elements doubled (a sum over ``x ≤ y`` standing for
    the whole symmetric sum).
    """
    axes = (letters.index(pair[0]), letters.index(pair[1]))
    rows, cols = np.triu_indices(parts[0].shape[axes[0]])
    first = min(axes)
    if abs(axes[0] - axes[1]) == 1:
        # side by side: gathered where they stand, each pair reading the modes after it
        # as one contiguous row (moved last first, each pair is single elements apart)
        index = (rows, cols) if axes[0] < axes[1] else (cols, rows)
        out = [take_pairs(p, first, *index) for p in parts]
        packed = [*letters[:first], mark, *letters[first + 2 :]]
    else:
        out = [take_pairs(jnp.moveaxis(p, axes, (-2, -1)), p.ndim - 2, rows, cols) for p in parts]
        packed = [c for c in letters if c not in pair] + [mark]
    if weighted:
        shape = [1] * len(packed)
        shape[packed.index(mark)] = len(rows)
        weight = jnp.asarray(np.where(rows == cols, 1.0, 2.0).reshape(shape), out[0].dtype)
        out = [p * weight for p in out]
    return out, packed
