"""Contractions over symmetric pairs of modes at a half or a quarter of the FLOPs.

Four kinds of pair, found by :func:`plan_pairs` and run by :func:`contract_pairs`:

* **A free pair filled by symmetry.** The o²v⁴ ladder of closed-shell CCSD,
  ``X_ab^ij = Σ_cd g_ab^cd τ_cd^ij``: both operands are symmetric under swapping a
  contracted pair together with a free pair (``g_ab^cd = g_ba^dc``, ``τ_cd^ij =
  τ_dc^ji``), so the result is too, ``X_ab^ij = X_ba^ji``. The smaller operand's free
  pair is packed to ``i ≤ j`` (``n(n+1)/2`` instead of ``n²`` columns: about half the
  FLOPs) and ``i > j`` is filled from ``X_ba^ij``. The large operand is read as stored.
  Generally: ``X = Σ_K A[F_A, K] B[K, F_B]`` with ``A`` symmetric (sign ``s_A``) under
  ``k1 ↔ k2`` together with ``f1 ↔ f2`` and ``B`` (sign ``s_B``) under ``k1 ↔ k2``
  together with ``g1 ↔ g2``; then ``X[…f1, f2…, …g1, g2…] = s_A s_B X[…f2, f1…, …g2,
  g1…]``.
* **A free pair symmetric alone.** When one operand is (anti)symmetric under swapping
  two of its free modes alone — ``t_ij^cd = -t_ji^cd`` — so is the result: that pair is
  packed to ``i < j`` (``i ≤ j`` when symmetric) and the rest is ``±`` the computed half
  read transposed. Unlike the fill above it needs no swap of the other operand's modes,
  so it holds inside a loop that cuts them (the spin-orbital ladder with ``a_1``
  batched: without it, the loop paid the full ladder, 1.22x the unbatched FLOPs of a
  W3 plan; with it 1.05x).
* **A summed pair.** When both operands are antisymmetric (or both symmetric) under
  swapping two contracted modes alone — ``½ Σ_cd ⟨ab‖cd⟩ t_ij^cd`` of spin-orbital
  CCSD — the sum runs over ``c < d`` (``c ≤ d``) only, twice off the diagonal: both
  operands are packed, about half the FLOPs. With a free pair as well (the spin-orbital
  ladder) about a quarter.

* **A split pair.** When neither operand is symmetric in a contracted pair alone but
  each swaps it together with a free pair of its own — the closed-shell ladder
  ``Σ_cd g_ab^cd τ_cd^ij`` — both are split into their parts symmetric and antisymmetric
  in ``(c, d)`` (:class:`Split`): two products over ``c ≤ d`` of operands packed to
  ``a ≤ b`` and ``i ≤ j``, a quarter of the FLOPs in all.

Packing is a gather of the operands' elements (memory traffic, no FLOPs), so a plan
trades it against the FLOPs it saves: at (H2O)2/cc-pVDZ sizes (o = 20, v = 76) spin-
orbital CCSD went from 7.00e10 to 4.14e10 FLOPs and 1.35 to 1.07 s per iteration.
The symmetries are those the inputs declare (:mod:`sq_jax.forest.symmetry`), trusted
only with ``sq.compile(..., pair_symmetry=True)``: on inputs without them the result
is wrong. Derivatives are the plain product's (a custom JVP rule): exact in every
direction, at the plain cost.

Example:
    >>> import numpy as np, sq_jax as sq
    >>> text = "R{a1,a2;i1,i2} = g{a1,a2;a3,a4} t{a3,a4;i1,i2}"
    >>> prog = sq.compile(text, sq.Spaces(i=10, a=40), pair_symmetry=True)
    >>> print(prog.lowered.body[0])
    v2 = pairs(abcd,cdef->abef; i_1<=i_2, rest by a_1<->a_2, +1) g{a,a;a,a} t{a,a;i,i}
    >>> rng = np.random.default_rng(0)
    >>> g, t = rng.normal(size=(40, 40, 40, 40)), rng.normal(size=(40, 40, 10, 10))
    >>> g, t = g + g.transpose(1, 0, 3, 2), t + t.transpose(1, 0, 3, 2)  # declared: N-C-S
    >>> r = prog({"g{a,a;a,a}": g, "t{a,a;i,i}": t})["R"]
    >>> bool(np.allclose(r, np.einsum("abcd,cdij->abij", g, t)))
    True

    With g fixed between calls (packed once, :meth:`sq_jax.Program.prepare`), g splits:

    >>> once = sq.compile(text, sq.Spaces(i=10, a=40), pair_symmetry=True, fixed_inputs=["g"])
    >>> print(once.lowered.body[0].pairs)
    splits a_3<->a_4; a_1<=a_2 +1, i_1<=i_2 +1
    >>> step = once.prepare({"g{a,a;a,a}": g})
    >>> bool(np.allclose(step({"t{a,a;i,i}": t})["R"], np.einsum("abcd,cdij->abij", g, t)))
    True

    Packing is a gather: a pair is packed only where the FLOPs it saves are worth more
    than the bytes the gather writes (:data:`FLOP_RATE`, :data:`GATHER_RATE`):

    >>> anti = "R{a1,a2;i1,i2} = g{a1,a2;a3,a4}:A t{a3,a4;i1,i2}:A"
    >>> for o in (10, 30):  # g{a,a;a,a} packed too only where o is large enough
    ...     prog = sq.compile(anti, sq.Spaces(i=o, a=40), pair_symmetry=True)
    ...     print(prog.lowered.body[0].pairs)
    i_1<i_2, rest alone, -1
    sums a_3<a_4; a_1<a_2, rest alone, -1; i_1<i_2, rest alone, -1
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from .._errors import LoweringError
from ..expr.nodes import Index
from ..forest.symmetry import ValueSymmetry, joint_swaps
from .gemm import GemmPlan, plan_gemm

FLOP_RATE = 5e10
"""FLOPs per second of a product on this project's 2-core CPU (JAX float64 GEMM: 60-146
GFLOP/s alone, about 55 in CCSD): what the FLOPs a packing saves are worth."""

GATHER_RATE = 1e10
"""Bytes per second a gather of a computed value (or of a product to unpack) writes
here, what a packing costs: a pair is packed only where the FLOPs it saves take longer
than its gathers. Fitted with :data:`INPUT_GATHER_RATE` to whole iterations of
spin-orbital CCSD, interleaved in one process (``bench/README.md``):

* prepared as the drivers run it (integrals packed once): H2O/cc-pVDZ 24.7 ms and
  (H2O)2/cc-pVDZ 1.055 s with these two rates, 26.6 ms and 1.129 s with 1e9 for both;
* called with every input: H2O/cc-pVDZ 29.3 ms, against 33.0 ms with 1e9 for both and
  34.6 ms with 1e10 for both."""

INPUT_GATHER_RATE = 1e9
"""Bytes per second a gather of an input block writes when it is made on every call (a
fresh buffer: 0.5-1.9 GB/s measured for 17-598 MB). Inputs packed once
(:mod:`sq_jax.lower.prepare`) cost nothing per call."""

__all__ = [
    "Fill",
    "Pack",
    "PairPlan",
    "Split",
    "contract_pairs",
    "gather_rate",
    "packed_products",
    "packed_share",
    "pair_shares",
    "plan_pairs",
    "ready_operand",
]


@dataclass(frozen=True, slots=True)
class Pack:
    """Two modes of one operand gathered into one mode over their pairs ``x ≤ y``."""

    labels: tuple[Index, Index]
    """The pair's labels, first mode first."""
    extent: int
    """The extent ``n`` of both modes."""
    strict: bool
    """Pairs ``x < y`` only (the diagonal is zero: an antisymmetric pair)."""
    mark: Index
    """The label of the packed mode."""

    @property
    def size(self) -> int:
        """Pairs kept: ``n(n+1)/2`` (``n(n-1)/2`` when strict)."""
        n = self.extent
        return n * (n - 1) // 2 if self.strict else n * (n + 1) // 2


def packed_share(packs: Iterable[Pack]) -> float:
    """The share of elements (or FLOPs) left when ``packs`` are packed.

    Example:
        >>> i1, i2 = Index("i", 1), Index("i", 2)
        >>> packed_share([Pack((i1, i2), 10, False, Index("p", 0))])  # 55 of 100 pairs
        0.55
    """
    return math.prod(p.size / p.extent**2 for p in packs)


@dataclass(frozen=True, slots=True)
class Fill:
    """How the result's half ``g1 > g2`` is filled from the computed half ``g1 ≤ g2``."""

    pack: Pack
    """The free pair ``(g1, g2)`` packed in one operand."""
    at: int
    """The packed pair's axis in the product ``gemm`` computes."""
    swap: tuple[int, ...]
    """Axes of the other operand's free pair ``(f1, f2)`` in that product; ``()`` when
    the packed operand is (anti)symmetric in ``(g1, g2)`` alone."""
    partners: tuple[Index, ...]
    """``(f1, f2)``: the labels of those axes (``()`` alone)."""
    sign: int
    """``s_A s_B``: ``X[…f1, f2…, …g2, g1…] = sign · X[…f2, f1…, …g1, g2…]``; alone,
    ``X[…g2, g1…] = sign · X[…g1, g2…]``."""


@dataclass(frozen=True, slots=True)
class Split:
    """Both operands split into their parts symmetric and antisymmetric in the summed pair.

    ``A = A⁺ + A⁻`` with ``A^± = (A ± A|k1↔k2) / 2``; as ``A`` is symmetric (sign
    ``s_A``) under swapping ``k1 ↔ k2`` together with its free pair ``f1 ↔ f2``, ``A^±``
    is symmetric (sign ``±s_A``) under swapping ``f1 ↔ f2`` alone; ``B`` likewise with
    ``g1 ↔ g2``. ``X = Σ A⁺B⁺ + Σ A⁻B⁻`` (the mixed sums vanish), each a product over
    ``k1 ≤ k2`` of operands packed to ``f1 ≤ f2`` and ``g1 ≤ g2``: an eighth of the plain
    product's FLOPs each, a quarter in all (the closed-shell ladder as PySCF runs it).
    """

    packs: tuple[Pack, Pack]
    """The free pair ``(f1, f2)`` packed in operand 0, ``(g1, g2)`` in operand 1."""
    signs: tuple[int, int]
    """``(s_A, s_B)``: each symmetric part's sign under swapping its free pair alone."""


@dataclass(frozen=True, slots=True)
class PairPlan:
    """One contraction with pairs of modes packed (:func:`plan_pairs`)."""

    stored: tuple[tuple[Index, ...], tuple[Index, ...]]
    """Each operand's modes as stored."""
    packs: tuple[tuple[Pack, ...], tuple[Pack, ...]]
    """Per operand, the pairs it gathers, in order (the summed pair first)."""
    summed: Pack | None
    """The contracted pair packed in both operands, or ``None``."""
    weighted: int
    """The operand scaled by the summed pair's weights (2 off the diagonal)."""
    fill: Fill | None
    """The free pair packed in one operand and filled by symmetry, or ``None``."""
    gemm: GemmPlan
    """The product of the packed operands."""
    output: tuple[Index, ...]
    """The result's stored modes."""
    split: Split | None = None
    """Set when the operands are split into (anti)symmetric parts: two packed products."""
    also: Fill | None = None
    """A second free pair symmetric alone, of the other operand than ``fill``'s (both
    alone): ``X_ab^ij = Σ g_ab^cd t_cd^ij`` with ``g`` antisymmetric in ``(a, b)`` and
    ``t`` in ``(i, j)`` is computed for ``a < b`` and ``i < j`` only."""

    @property
    def fraction(self) -> float:
        """The FLOPs of the packed product over the plain one's."""
        share = packed_share({p for side in self.packs for p in side})
        return 2 * share if self.split is not None else share

    @property
    def unpacks(self) -> bool:
        """Whether the product comes out packed and is unpacked into the result."""
        return self.fill is not None or self.split is not None

    @property
    def fills(self) -> tuple[Fill, ...]:
        """The filled free pairs, in the order they are unpacked (the later axis first)."""
        found = [f for f in (self.fill, self.also) if f is not None]
        return tuple(sorted(found, key=lambda f: -f.at))

    def __str__(self) -> str:
        if self.split is not None:
            assert self.summed is not None
            (k1, k2), sa, sb = self.summed.labels, *self.split.signs
            (f1, f2), (g1, g2) = (p.labels for p in self.split.packs)
            return f"splits {k1}<->{k2}; {f1}<={f2} {sa:+d}, {g1}<={g2} {sb:+d}"
        parts = []
        if self.summed is not None:
            (k1, k2), rel = self.summed.labels, "<" if self.summed.strict else "<="
            parts.append(f"sums {k1}{rel}{k2}")
        for fill in (self.fill, self.also):
            if fill is not None and fill.partners:
                (g1, g2), (f1, f2) = fill.pack.labels, fill.partners
                parts.append(f"{g1}<={g2}, rest by {f1}<->{f2}, {fill.sign:+d}")
            elif fill is not None:
                (g1, g2), rel = fill.pack.labels, "<" if fill.pack.strict else "<="
                parts.append(f"{g1}{rel}{g2}, rest alone, {fill.sign:+d}")
        return "; ".join(parts)


def _moved(perm: tuple[int, ...]) -> list[int]:
    return [k for k, p in enumerate(perm) if p != k]


def _lone_swaps(
    labels: Sequence[Index], syms: frozenset[ValueSymmetry], contracted: set[Index]
) -> dict[frozenset[Index], int]:
    """Per contracted pair swapped alone (everything else fixed), the sign."""
    out: dict[frozenset[Index], int] = {}
    for perm, sign in sorted(syms):
        moved = _moved(perm)
        if len(moved) == 2 and all(labels[k] in contracted for k in moved):
            out.setdefault(frozenset(labels[k] for k in moved), sign)
    return out


_FillChoice = tuple[int, Pack, tuple[Index, ...], int]
"""``(packed operand, its free pair, the other operand's partner pair or (), sign)``."""


def _lone_fills(
    stored: tuple[Sequence[Index], Sequence[Index]],
    node_labels: tuple[Sequence[Index], Sequence[Index]],
    syms: tuple[frozenset[ValueSymmetry], frozenset[ValueSymmetry]],
    free: set[Index],
    extent: Mapping[Index, int],
) -> list[_FillChoice]:
    """Per operand, a free pair it is (anti)symmetric in alone: the result is too.

    ``t_ij^ab = -t_ji^ab`` makes ``X_ij = Σ A t_ij`` antisymmetric in ``(i, j)`` whatever
    the other operand: computed for ``i < j`` (``i ≤ j`` when symmetric), the rest is
    ``±`` the computed half. Unlike the joint fill it needs no swap of the other
    operand's modes, so it holds where a loop cuts those (a batch of ``a_1`` alone).
    """
    out: list[_FillChoice] = []
    for k in (0, 1):
        mine = (set(stored[k]) & free) - set(stored[1 - k])
        for perm, sign in sorted(syms[k]):
            moved = _moved(perm)
            if len(moved) != 2:
                continue
            g1, g2 = sorted((node_labels[k][m] for m in moved), key=list(stored[k]).index)
            if {g1, g2} <= mine and extent[g1] == extent[g2] > 1:
                out.append((k, Pack((g1, g2), extent[g1], sign < 0, _mark((g1, g2))), (), sign))
                break
    return out


def _after(stored: Sequence[Index], packs: Sequence[Pack]) -> list[Index]:
    """An operand's modes after its packs: each pair's two modes become one, last."""
    labels = list(stored)
    for pack in packs:
        labels = [ix for ix in labels if ix not in pack.labels] + [pack.mark]
    return labels


def _mark(pair: tuple[Index, Index]) -> Index:
    return Index(f"({pair[0]} {pair[1]})", 0)


def gather_rate(is_input: bool, made_once: bool) -> float:
    """Bytes per second a gather of an operand costs per call (``inf``: made once).

    Example:
        >>> gather_rate(True, True), gather_rate(True, False), gather_rate(False, False)
        (inf, 1000000000.0, 10000000000.0)
    """
    if made_once:
        return math.inf
    return INPUT_GATHER_RATE if is_input else GATHER_RATE


def plan_pairs(
    stored: tuple[Sequence[Index], Sequence[Index]],
    node_labels: tuple[Sequence[Index], Sequence[Index]],
    syms: tuple[frozenset[ValueSymmetry], frozenset[ValueSymmetry]],
    out: Sequence[Index],
    nbytes: tuple[int, int],
    extent: Mapping[Index, int],
    fixed: frozenset[Index] = frozenset(),
    rates: tuple[float, float] = (GATHER_RATE, GATHER_RATE),
) -> PairPlan | None:
    """A packed plan for ``einsum(stored[0], stored[1] -> out)``, or ``None``.

    Two kinds of pair, used together where both apply (the spin-orbital ladder):

    * a **summed** pair ``(k1, k2)`` that both operands are symmetric (or both
      antisymmetric) under swapping alone: summed over ``k1 ≤ k2`` (``<``), twice off
      the diagonal;
    * a **free** pair of the smaller operand, swapped together with a contracted pair
      in both operands: computed for ``g1 ≤ g2``, the rest filled by symmetry;
    * or a free pair of one operand that it is (anti)symmetric in alone: computed for
      ``g1 < g2`` (``≤``), the rest by sign.

    Args:
        stored: each operand's modes in stored order.
        node_labels: each operand's modes in its value's canonical order (what ``syms``
            permute).
        syms: each operand's symmetries (:func:`~sq_jax.forest.symmetry.value_symmetries`).
        out: the result's modes.
        nbytes: each operand's size: the smaller one's free pair is packed.
        extent: each label's extent.
        fixed: modes cut to a loop's batch here: no pair may hold one.
        rates: per operand, the bytes per second its gathers write
            (:func:`gather_rate`; ``inf``: packed once, :mod:`sq_jax.lower.prepare`).

    Returns:
        The plan, or ``None`` when no pair of either kind is found or none pays.

    Example:
        >>> a1, a2, a3, a4 = (Index("a", n) for n in range(1, 5))
        >>> i1, i2 = Index("i", 1), Index("i", 2)
        >>> g, t = (a1, a2, a3, a4), (a3, a4, i1, i2)  # g_ab^cd = g_ba^dc, t likewise
        >>> sym = frozenset({((0, 1, 2, 3), 1), ((1, 0, 3, 2), 1)})
        >>> extent = {ix: 40 if ix.space == "a" else 10 for ix in (*g, *t)}
        >>> plan = plan_pairs((g, t), (g, t), (sym, sym), (a1, a2, i1, i2),
        ...                   (8 * 40**4, 8 * 40**2 * 10**2), extent)
        >>> str(plan), round(plan.fraction, 3)  # both split in (a_3, a_4), then packed
        ('splits a_3<->a_4; a_1<=a_2 +1, i_1<=i_2 +1', 0.289)
    """
    out_set = set(out)
    contracted = (set(stored[0]) & set(stored[1])) - out_set
    if len(contracted) < 2:
        return None
    lone = [_lone_swaps(node_labels[k], syms[k], contracted) for k in (0, 1)]
    summed: Pack | None = None
    for pair in sorted(set(lone[0]) & set(lone[1]), key=lambda p: sorted(map(str, p))):
        if pair & fixed:
            continue
        if lone[0][pair] == lone[1][pair]:  # opposite signs: the product is zero
            k1, k2 = sorted(pair, key=list(stored[0]).index)
            if extent[k1] == extent[k2]:
                summed = Pack((k1, k2), extent[k1], lone[0][pair] < 0, _mark((k1, k2)))
                break
    joint = [joint_swaps(node_labels[k], syms[k], contracted) for k in (0, 1)]
    order = sorted((0, 1), key=lambda k: (nbytes[k], k))
    fill: _FillChoice | None = None
    pairs = sorted(set(joint[0]) & set(joint[1]), key=lambda p: sorted(map(str, p)))
    for pair in pairs:
        if pair & fixed:
            continue
        for packed in order:
            other = 1 - packed
            (g1, g2), s_packed = joint[packed][pair]
            (f1, f2), s_other = joint[other][pair]
            if extent[g1] != extent[g2] or not {g1, g2, f1, f2} <= out_set - fixed:
                continue
            if {f1, f2} & set(stored[packed]) or {g1, g2} & set(stored[other]):
                continue  # a Hadamard mode: both operands would have to swap it
            pack = Pack((g1, g2), extent[g1], False, _mark((g1, g2)))
            fill = (packed, pack, (f1, f2), s_packed * s_other)
            break
        if fill is not None:
            break
    lone_fills = _lone_fills(stored, node_labels, syms, out_set - fixed, extent)
    fills: list[tuple[_FillChoice, ...]] = [(f,) for f in (fill, *lone_fills) if f is not None]
    if len(lone_fills) == 2:  # one pair of each operand, both alone
        fills.append((lone_fills[0], lone_fills[1]))
    flops = 2.0 * math.prod(extent[ix] for ix in set(stored[0]) | set(stored[1]))
    out_bytes = 8.0 * math.prod(extent[ix] for ix in out)
    best: tuple[float, PairPlan] | None = None
    candidates: list[PairPlan | None] = [
        _assemble(stored, out, nbytes, use_summed, use_fill)
        for use_summed, use_fill in itertools.product((summed, None), (*fills, ()))
        if use_summed is not None or use_fill
    ]
    if summed is None:  # a pair symmetric alone in both operands leaves nothing to split
        candidates += [_assemble_split(stored, out, nbytes, extent, fixed, joint, pairs)]
    for plan in candidates:
        if plan is None:
            continue
        # what packing saves in FLOPs against the bytes its gathers write
        parts = 2 if plan.split is not None else 1
        writing = sum(
            parts * nbytes[k] * packed_share(plan.packs[k]) / rates[k]
            for k in (0, 1)
            if plan.packs[k]
        )
        for done in plan.fills:  # each unpacking writes the product, larger each time
            writing += out_bytes * packed_share([done.pack]) / GATHER_RATE
        if plan.split is not None:
            writing += out_bytes * 2 * packed_share(plan.split.packs) / GATHER_RATE
        gain = flops * (1 - plan.fraction) / FLOP_RATE - writing
        if gain > 0 and (best is None or gain > best[0]):
            best = (gain, plan)
    return None if best is None else best[1]


def _assemble(
    stored: tuple[Sequence[Index], Sequence[Index]],
    out: Sequence[Index],
    nbytes: tuple[int, int],
    summed: Pack | None,
    fills: tuple[_FillChoice, ...],
) -> PairPlan | None:
    """The plan that packs ``summed`` in both operands and each fill's pair in its operand.

    Two fills only when both are alone, one per operand.
    """
    packs: list[list[Pack]] = [[], []]
    if summed is not None:
        packs = [[summed], [summed]]
    for k, pack, _, _ in fills:
        packs[k].append(pack)
    labels = [_after(stored[k], packs[k]) for k in (0, 1)]
    sizes = [round(nbytes[k] * packed_share(packs[k])) for k in (0, 1)]
    free_pairs = {ix for _, pack, _, _ in fills for ix in pack.labels}
    want = [ix for ix in out if ix not in free_pairs] + [pack.mark for _, pack, _, _ in fills]
    free = (bool(packs[0]), bool(packs[1]))  # a gathered operand's order is ours to pick
    gemm = plan_gemm(labels[0], labels[1], want, (sizes[0], sizes[1]), free_layout=free)
    if gemm is None:
        return None
    output = tuple(gemm.output)
    done = []
    for _, pack, partners, sign in fills:
        at = output.index(pack.mark)
        swap = tuple(output.index(f) for f in partners)
        done.append(Fill(pack, at, swap, partners, sign))
    for f in sorted(done, key=lambda f: -f.at):  # the later axis first: the others keep theirs
        output = (*output[: f.at], *f.pack.labels, *output[f.at + 1 :])
    weighted = min((0, 1), key=lambda k: (sizes[k], k))
    return PairPlan(
        (tuple(stored[0]), tuple(stored[1])),
        (tuple(packs[0]), tuple(packs[1])),
        summed,
        weighted,
        done[0] if done else None,
        gemm,
        output,
        also=done[1] if len(done) > 1 else None,
    )


def _assemble_split(
    stored: tuple[Sequence[Index], Sequence[Index]],
    out: Sequence[Index],
    nbytes: tuple[int, int],
    extent: Mapping[Index, int],
    fixed: frozenset[Index],
    joint: list[dict[frozenset[Index], tuple[tuple[Index, Index], int]]],
    pairs: Sequence[frozenset[Index]],
) -> PairPlan | None:
    """A :class:`Split` plan, or ``None``.

    Over the first contracted pair that both operands swap together with a free pair of
    their own.
    """
    free = set(out) - fixed
    for pair in pairs:
        k1, k2 = sorted(pair, key=list(stored[0]).index)
        (f1, f2), sa = joint[0][pair]
        (g1, g2), sb = joint[1][pair]
        if pair & fixed or not {f1, f2, g1, g2} <= free or extent[k1] != extent[k2]:
            continue
        if extent[f1] != extent[f2] or extent[g1] != extent[g2]:
            continue
        if {f1, f2} & set(stored[1]) or {g1, g2} & set(stored[0]):
            continue  # a Hadamard mode
        summed = Pack((k1, k2), extent[k1], False, _mark((k1, k2)))
        pf = Pack((f1, f2), extent[f1], False, _mark((f1, f2)))
        pg = Pack((g1, g2), extent[g1], False, _mark((g1, g2)))
        packs = ((summed, pf), (summed, pg))
        labels = [_after(stored[k], packs[k]) for k in (0, 1)]
        sizes = [round(nbytes[k] * packed_share(packs[k])) for k in (0, 1)]
        want = [ix for ix in out if ix not in (f1, f2, g1, g2)] + [pf.mark, pg.mark]
        gemm = plan_gemm(labels[0], labels[1], want, (sizes[0], sizes[1]), free_layout=(True, True))
        if gemm is None:
            continue
        output: tuple[Index, ...] = tuple(gemm.output)
        for pack in (pf, pg):
            at = output.index(pack.mark)
            output = (*output[:at], *pack.labels, *output[at + 1 :])
        weighted = min((0, 1), key=lambda k: (sizes[k], k))
        split = Split((pf, pg), (sa, sb))
        return PairPlan(
            (tuple(stored[0]), tuple(stored[1])), packs, summed, weighted, None, gemm, output, split
        )
    return None


def _pair_of(n: int, strict: bool = False) -> np.ndarray:
    """Per ``(i, j)``, the packed pair ``(min, max)`` it reads.

    Pairs ``i ≤ j`` in order; ``i < j`` when ``strict`` (the diagonal reads pair 0).
    """
    rows, cols = np.triu_indices(n, 1 if strict else 0)
    where = np.zeros((n, n), dtype=np.int32)
    where[rows, cols] = np.arange(len(rows))
    where[cols, rows] = np.arange(len(rows))
    return where


def contract_pairs(
    plan: PairPlan, ops: list[Any], matmul: Any, plain: Any, ready: Sequence[Any] = (None, None)
) -> Any:
    """Run a :class:`PairPlan` on the two operands (stored layouts).

    ``matmul(gemm, x, y)`` multiplies as a :class:`~sq_jax.lower.gemm.GemmPlan` says and
    returns the product in its output order; ``plain(x, y)`` is the unpacked product in
    ``plan.output`` order. Derivatives (``jvp``, and ``vjp`` by its transpose) are those
    of ``plain``: exact in every direction, symmetric or not, at the plain product's
    cost — only the primal is packed. ``ready[k]``, when given, is operand ``k`` already
    made ready (:func:`ready_operand`), used for the primal instead of ``ops[k]``.

    Example:
        >>> import numpy as np, sq_jax as sq
        >>> from sq_jax.lower.execute import contract  # calls this for a packed product
        >>> text = "R{a1,a2;i1,i2} = g{a1,a2;a3,a4} t{a3,a4;i1,i2}"
        >>> ins = sq.compile(text, sq.Spaces(i=10, a=40), pair_symmetry=True).lowered.body[0]
        >>> rng = np.random.default_rng(1)
        >>> g, t = rng.normal(size=(40,) * 4), rng.normal(size=(40, 40, 10, 10))
        >>> g, t = g + g.transpose(1, 0, 3, 2), t + t.transpose(1, 0, 3, 2)
        >>> x = contract(ins, [g, t])  # stored order: ins.pairs.output
        >>> bool(np.allclose(x, np.einsum("abcd,cdij->abij", g, t)))
        True
    """
    where = [k for k in (0, 1) if ready[k] is not None]

    @jax.custom_jvp
    def packed(x: Any, y: Any, *given: Any) -> Any:
        made = [None, None]
        for k, r in zip(where, given, strict=True):
            made[k] = r
        return _packed(plan, [x, y], matmul, made)

    def tangent(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
        # a ready operand is made from its plain one: the plain tangent holds it all
        (x, y, *given), (dx, dy, *_) = primals, tangents
        terms = []
        if not isinstance(dx, SymbolicZero):
            terms.append(plain(dx, y))
        if not isinstance(dy, SymbolicZero):
            terms.append(plain(x, dy))
        out = packed(x, y, *given)
        if not terms:
            return out, jnp.zeros_like(out)
        return out, terms[0] if len(terms) == 1 else terms[0] + terms[1]

    packed.defjvp(tangent, symbolic_zeros=True)
    return packed(ops[0], ops[1], *(ready[k] for k in where))


def take_fixed(x: Any, index: np.ndarray, axis: int) -> Any:
    """``jnp.take(x, index, axis)`` for a fixed, in-bounds ``index``, as one gather.

    ``index``'s shape replaces the axis. ``jnp.take`` and array indexing trace more than
    the gather: negative indices wrapped, out-of-bounds reads masked, inside a loop at
    every iteration and each a kernel XLA compiles. Closed-shell CCSD at benzene/cc-pVDZ
    sizes, ``a`` in 3 batches: 207 fusions instead of 231 (2,765 HLO instructions instead
    of 3,167); its compile and call times moved less than this machine's noise.

    Example:
        >>> x = np.arange(12.0).reshape(3, 4)
        >>> np.asarray(take_fixed(x, np.array([[3, 0], [1, 1]]), 1))[2]
        array([[11.,  8.],
               [ 9.,  9.]])
    """
    index = np.asarray(index)
    flat = index.ravel()
    if flat.size and (flat.min() < 0 or flat.max() >= x.shape[axis]):
        raise LoweringError(
            f"internal: a fixed gather received indices {flat.min()}..{flat.max()} for axis "
            f"{axis} of extent {x.shape[axis]}; expected 0..{x.shape[axis] - 1}. The lowering "
            "built them: please report this with the equations and the plan."
        )
    kept = [d for d in range(x.ndim + index.ndim - 1) if not axis <= d < axis + index.ndim]
    numbers = jax.lax.GatherDimensionNumbers(
        offset_dims=tuple(kept), collapsed_slice_dims=(axis,), start_index_map=(axis,)
    )
    return jax.lax.gather(
        x,
        jnp.asarray(index.astype(np.int32)[..., None]),
        numbers,
        tuple(1 if d == axis else n for d, n in enumerate(x.shape)),
        indices_are_sorted=bool(np.all(np.diff(flat) > 0)),
        unique_indices=len(np.unique(flat)) == flat.size,
        mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS,
    )


def take_pairs(x: Any, at: int, rows: np.ndarray, cols: np.ndarray) -> Any:
    """``x[..., rows, cols]`` over its square axes ``at`` and ``at + 1``, as one axis.

    Example:
        >>> x = np.arange(18.0).reshape(2, 3, 3)
        >>> rows, cols = np.triu_indices(3)
        >>> bool((np.asarray(take_pairs(x, 1, rows, cols)) == x[:, rows, cols]).all())
        True
    """
    n = x.shape[at]
    merged = jnp.reshape(x, (*x.shape[:at], n * x.shape[at + 1], *x.shape[at + 2 :]))
    return take_fixed(merged, rows * x.shape[at + 1] + cols, at)


def _gather(x: Any, labels: list[Index], pack: Pack) -> tuple[Any, list[Index]]:
    """``x`` with ``pack``'s two modes gathered into one, last."""
    axes = (labels.index(pack.labels[0]), labels.index(pack.labels[1]))
    x = jnp.moveaxis(x, axes, (-2, -1))
    rows, cols = np.triu_indices(pack.extent, 1 if pack.strict else 0)
    packed = take_pairs(x, x.ndim - 2, rows, cols)
    return packed, [ix for ix in labels if ix not in pack.labels] + [pack.mark]


def ready_operand(plan: PairPlan, k: int, x: Any) -> Any:
    """Operand ``k`` (stored layout) as the packed product multiplies it.

    Its pairs gathered, scaled by the summed pair's weights when it is the weighted
    operand, and transposed as ``plan.gemm`` wants. :mod:`sq_jax.lower.prepare` makes
    these once for operands that stay fixed between calls.

    Example:
        >>> import numpy as np, sq_jax as sq
        >>> text = "R{a1,a2;i1,i2} = g{a1,a2;a3,a4}:A t{a3,a4;i1,i2}:A"
        >>> plan = sq.compile(text, sq.Spaces(i=30, a=40), pair_symmetry=True).lowered.body[0].pairs
        >>> ready_operand(plan, 0, np.ones((40,) * 4)).shape  # (a3<a4, a1<a2)
        (780, 780)
    """
    if plan.split is not None:  # the symmetric and antisymmetric parts, stacked
        assert plan.summed is not None
        k1, k2 = (plan.stored[k].index(ix) for ix in plan.summed.labels)
        swapped = jnp.swapaxes(x, k1, k2)
        parts = ((x + swapped) / 2, (x - swapped) / 2)
        return jnp.stack([_ready_part(plan, k, part) for part in parts])
    return _ready_part(plan, k, x)


def _ready_part(plan: PairPlan, k: int, x: Any) -> Any:
    labels = list(plan.stored[k])
    for pack in plan.packs[k]:
        x, labels = _gather(x, labels, pack)
    if plan.summed is not None and k == plan.weighted:
        rows, cols = np.triu_indices(plan.summed.extent, 1 if plan.summed.strict else 0)
        weight = np.where(rows == cols, 1.0, 2.0)
        shape = [1] * len(labels)
        shape[labels.index(plan.summed.mark)] = len(weight)
        x = x * jnp.asarray(weight.reshape(shape), x.dtype)
    perm = plan.gemm.perms[k]
    return x if perm is None else jnp.transpose(x, perm)


def _packed(
    plan: PairPlan, ops: list[Any], matmul: Any, ready: Sequence[Any] = (None, None)
) -> Any:
    ops = [
        ready_operand(plan, k, x) if r is None else r
        for k, (x, r) in enumerate(zip(ops, ready, strict=True))
    ]
    gemm = replace(plan.gemm, perms=(None, None))
    if plan.split is not None:
        return _split_product(plan, gemm, ops, matmul)
    y = matmul(gemm, ops[0], ops[1])
    for fill in plan.fills:
        y = _unfill(y, fill)
    return y


def _unfill(y: Any, fill: Fill) -> Any:
    """``y`` with ``fill``'s packed axis unpacked into its pair, the rest by symmetry."""
    n, at = fill.pack.extent, fill.at
    full = take_fixed(y, _pair_of(n, fill.pack.strict), at)  # (.., n, n, ..)
    shape = [1] * full.ndim
    shape[at], shape[at + 1] = n, n
    if not fill.swap:  # alone: the rest is the computed half read transposed, signed
        lower = np.tril(np.ones((n, n)), -1)
        factor = np.triu(np.ones((n, n)), 1 if fill.pack.strict else 0) + fill.sign * lower
        return full * jnp.asarray(factor.reshape(shape), full.dtype)
    f1, f2 = (a + (a > at) for a in fill.swap)
    swapped = jnp.swapaxes(full, f1, f2)
    below = jnp.asarray(np.tril(np.ones((n, n), dtype=bool), -1).reshape(shape))
    return jnp.where(below, swapped if fill.sign > 0 else -swapped, full)


def _split_product(plan: PairPlan, gemm: GemmPlan, ops: list[Any], matmul: Any) -> Any:
    """``Σ A⁺B⁺ + Σ A⁻B⁻`` from the stacked parts, unpacked in both free pairs.

    With ``y = X⁺ + X⁻`` and ``z = X⁺ − X⁻`` (packed), ``X[f, g] = y[f, g]`` where both
    pairs are in order, ``s_A z`` or ``s_B z`` with one of them swapped, ``s_A s_B y`` with
    both: unpacked one pair at a time, with no full-size copy of either part.
    """
    assert plan.split is not None
    # one product batched over the two parts: each part is read in place from its stack
    # (indexing the stack first made XLA copy each part of a prepared g: +160 MB)
    both = jax.vmap(lambda x, w: matmul(gemm, x, w))(ops[0], ops[1])
    y, z = both[0] + both[1], both[0] - both[1]
    pairs = zip(plan.split.packs, plan.split.signs, strict=True)
    (at1, n1, s1), (at2, n2, s2) = sorted(
        ((gemm.output.index(p.mark), p.extent, s) for p, s in pairs), reverse=True
    )  # the later axis first: the other one keeps its place
    y, z = _unfold(y, z, at1, n1, s1), _unfold(z, y, at1, n1, s1)
    return _unfold(y, z, at2, n2, s2)


def _unfold(keep: Any, swap: Any, at: int, n: int, sign: int) -> Any:
    """Axis ``at`` (pairs ``i ≤ j``) unpacked: ``keep_ij``, and ``sign·swap_ji`` below."""
    where = _pair_of(n)
    shape = [1] * (keep.ndim + 1)
    shape[at], shape[at + 1] = n, n
    below = jnp.asarray(np.tril(np.ones((n, n), dtype=bool), -1).reshape(shape))
    other = take_fixed(swap, where, at)
    return jnp.where(below, other if sign > 0 else -other, take_fixed(keep, where, at))


def pair_shares(lowered: Any) -> dict[int, float]:
    """Per value id of a packed product, anywhere in ``lowered``: its share of the FLOPs.

    The share is :attr:`PairPlan.fraction` of the plain product's, or for a product run
    over block pairs :meth:`~sq_jax.lower.block_pairs.BlockPairs.fraction` of its nest's.

    Example:
        >>> import sq_jax as sq
        >>> text = "R{a1,a2;i1,i2} = g{a1,a2;a3,a4} t{a3,a4;i1,i2}"
        >>> pair_shares(sq.compile(text, sq.Spaces(i=3, a=40), pair_symmetry=True).lowered)
        {2: 0.6666666666666666}
    """
    return {v: share for v, (share, _) in packed_products(lowered).items()}


def packed_products(lowered: Any) -> dict[int, tuple[float, tuple[str, Any] | None]]:
    """Per value id of a packed product in ``lowered``: its share, and how it scales.

    ``(share, None)`` for a packed product (:class:`PairPlan`: the share does not depend
    on the loops around it); ``(share, (space, plan))`` for a product over block pairs,
    whose share at another block size of its loops over ``space`` is
    ``plan.fraction(extent, block)`` (:meth:`~sq_jax.lower.block_pairs.BlockPairs.fraction`).

    Example:
        >>> import sq_jax as sq
        >>> text = "R{a1,a2;i1,i2} = g{a1,a2;a3,a4} t{a3,a4;i1,i2}"
        >>> plan = sq.BatchPlan.of({"a": {"batches": 3, "roles": "contracted"}})
        >>> prog = sq.compile(text, sq.Spaces(i=10, a=20), pair_symmetry=True, batch=plan)
        >>> [(v, round(s, 3), rule[0]) for v, (s, rule) in packed_products(prog.lowered).items()]
        [(2, 0.334, 'a')]
    """
    out: dict[int, tuple[float, tuple[str, Any] | None]] = {}
    stack = list(lowered.body)
    while stack:
        ins = stack.pop()
        body = getattr(ins, "body", None)
        if body is not None:  # a loop
            nest = ins.block_pair_nest  # its product over block pairs (:mod:`.block_pairs`)
            if nest is not None:
                plan = nest[1].block_pairs
                out[nest[1].value_id] = (plan.fraction(ins.extent, ins.block), (ins.loop[0], plan))
                stack.extend(nest[0].body[:-1])  # its operands made for the batch
                continue
            stack.extend(body)
        elif hasattr(ins, "terms"):  # a sequenced sum
            stack.extend(i for t in ins.terms for i in t.body)
        elif getattr(ins, "pairs", None) is not None:
            out[ins.value_id] = (ins.pairs.fraction, None)
    return out
