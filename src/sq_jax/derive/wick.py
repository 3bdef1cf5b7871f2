"""Wick's theorem for projected CC residuals, one contraction pattern at a time.

The residual of rank n is ``⟨Φ_{i_1..i_n}^{a_1..a_n}| (H_N e^T)_C |0⟩`` (rank 0: the
energy), with the normal-ordered Hamiltonian ``H_N = Σ f_pq {p†q} + 1/4 Σ ⟨pq‖rs⟩
{p†q†sr}`` and ``T_m = (1/m!)² Σ t_{i..}^{a..} a_1†..a_m† i_m..i_1``. Because
``e^{-T} H e^{T} = (H e^T)_C`` (the BCH series ends after the fourfold commutator:
H has at most four lines), only connected terms with at most four T's are needed.

Relative to the Fermi vacuum every operator of a T is a quasi-creator and every operator
of the projector a quasi-annihilator, so a full contraction is fixed by how many lines
join each pair of vertices:

* a virtual line joins a virtual annihilator on the left (projector, or a ``ket`` slot of
  H) to a virtual creator on the right (a ``bra`` slot of H, or of a T);
* an occupied line joins an occupied creator on the left (projector, or a ``bra`` slot of
  H) to an occupied annihilator on the right (a ``ket`` slot of H, or of a T).

A *pattern* is, for each T_j, the number x_j of its virtual lines from H and y_j of its
occupied lines from H (the rest come from the projector); connectedness is
x_j + y_j ≥ 1. Every explicit contraction of one pattern gives the same value once the
tensors' antisymmetry is used, so each pattern yields one term whose coefficient is
counted, not enumerated (the usual diagram rules, derived from the operator algebra):

    sign / (Π_rank mult! · Π_j x_j! y_j! · Π_groups e_G!)

where ``mult`` counts equal-rank T's (from e^T), ``x_j!``/``y_j!`` are equivalent
internal lines, and ``e_G`` is the number of external lines on one antisymmetric slot
group (the stabiliser of the unnormalised ``Â`` that the term is written under). The
sign is the parity of one representative full contraction of the operator string.

Known limitations: spin-orbital, single reference, canonical normal ordering with
respect to the Fermi vacuum; the Hamiltonian is at most two-body.

Example:
    >>> terms = contract(0, ("i", "i"), ("a", "a"), (2,))
    >>> [(str(t.coefficient), " ".join(str(f) for f in t.factors)) for t in terms]
    [('1/4', 'g{i_1,i_2;a_1,a_2} t{a_1,a_2;i_1,i_2}')]
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator
from fractions import Fraction

from .terms import OCC, VIR, Factor, Idx, RawTerm, parity

__all__ = ["contract", "hamiltonian_blocks"]


def hamiltonian_blocks() -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
    """Every block of H_N as (label, bra spaces, ket spaces), occupied slots first.

    A block stands for all its slot orders (``g{i,a;…}`` and ``g{a,i;…}``): the
    coefficient rule of :func:`contract` counts them.

    Example:
        >>> len(hamiltonian_blocks())
        13
    """
    one = tuple(("f", (b,), (k,)) for b in (OCC, VIR) for k in (OCC, VIR))
    pairs = ((OCC, OCC), (OCC, VIR), (VIR, VIR))
    two = tuple(("g", b, k) for b in pairs for k in pairs)
    return one + two


def contract(
    rank: int, h_bra: tuple[str, ...], h_ket: tuple[str, ...], t_ranks: tuple[int, ...]
) -> list[RawTerm]:
    """All connected, fully contracted terms of ``⟨Φ_rank| h T_{m_1}..T_{m_k} |0⟩``.

    Args:
        rank: the projection's excitation rank n (0 for the energy).
        h_bra: spaces of the Hamiltonian block's bra (creator) slots, ``"i"``/``"a"``.
        h_ket: spaces of its ket (annihilator) slots.
        t_ranks: the ranks of the cluster operators in the product, sorted.

    Returns:
        One :class:`RawTerm` per contraction pattern (T vertices labelled, so patterns
        that differ by swapping equal T's both appear, each with the e^T factor 1/mult!).

    Example:
        >>> [str(t.coefficient) for t in contract(1, ("a",), ("a",), (1,))]
        ['1']
    """
    label = "f" if len(h_bra) == 1 else "g"
    ho_a = h_bra.count(OCC)  # occupied lines from H's bra to the T's
    hv_c = h_bra.count(VIR)  # virtual lines from the projector into H's bra
    ho_c = h_ket.count(OCC)  # occupied lines from the projector into H's ket
    hv_a = h_ket.count(VIR)  # virtual lines from H's ket to the T's
    total = sum(t_ranks)
    if hv_c + total - hv_a != rank or ho_c + total - ho_a != rank:
        return []
    mult = math.prod(math.factorial(c) for c in Counter(t_ranks).values())
    out = []
    for xs in _splits(hv_a, t_ranks):
        for ys in _splits(ho_a, t_ranks):
            if any(x + y == 0 for x, y in zip(xs, ys, strict=True)):
                continue  # a T not connected to H: disconnected
            out.append(_pattern(rank, label, h_bra, h_ket, t_ranks, xs, ys, mult))
    return out


def _splits(lines: int, t_ranks: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Ways to share ``lines`` H lines among the T's, at most m_j each."""
    for xs in itertools.product(*(range(m + 1) for m in t_ranks)):
        if sum(xs) == lines:
            yield xs


def _pattern(
    rank: int,
    label: str,
    h_bra: tuple[str, ...],
    h_ket: tuple[str, ...],
    t_ranks: tuple[int, ...],
    xs: tuple[int, ...],
    ys: tuple[int, ...],
    mult: int,
) -> RawTerm:
    """The term of one pattern: a representative contraction, its sign and its weight."""
    # Operator positions in the string  P h T_1 .. T_k  (P: i_1†..i_n† a_n..a_1).
    # A vertex with b bra and k ket slots occupies positions base .. base+b+k-1: bra
    # slot s at base+s (creators), ket slot s at base+b+k-1-s (annihilators, reversed).
    bases = [0, 2 * rank]
    for m in (len(h_bra) + len(h_ket), *(2 * r for r in t_ranks[:-1])):
        bases.append(bases[-1] + m)
    h_base = bases[1]
    nb, nk = len(h_bra), len(h_ket)

    def h_pos(group: str, slot: int) -> int:
        return h_base + slot if group == "bra" else h_base + nb + nk - 1 - slot

    def t_pos(j: int, group: str, slot: int) -> int:
        m = t_ranks[j]
        return bases[2 + j] + (slot if group == "bra" else 2 * m - 1 - slot)

    pairs: list[tuple[int, int]] = []
    h_idx: dict[tuple[str, int], Idx] = {}
    t_idx: dict[tuple[int, str, int], Idx] = {}
    dummy = {VIR: itertools.count(rank + 1), OCC: itertools.count(rank + 1)}

    groups = {"bra": h_bra, "ket": h_ket}

    def wire(space: str, h_ext: str, h_int: str, t_side: str, counts, proj_pos) -> None:
        """Wire the lines of one space into ``pairs``, ``h_idx`` and ``t_idx``.

        The projector feeds H's ``h_ext`` slots, then the T's ``t_side`` slots not fed
        by H; H's ``h_int`` slots feed the T's first ``counts[j]`` ``t_side`` slots.
        """
        targets = [("h", s) for s, sp in enumerate(groups[h_ext]) if sp == space]
        targets += [("t", j, s) for j, m in enumerate(t_ranks) for s in range(counts[j], m)]
        for k, target in enumerate(targets, start=1):
            ext = Idx(space, True, k)
            if target[0] == "h":
                h_idx[h_ext, target[1]] = ext
                right = h_pos(h_ext, target[1])
            else:
                t_idx[target[1], t_side, target[2]] = ext
                right = t_pos(target[1], t_side, target[2])
            pairs.append((proj_pos(k), right))
        h_slots = [s for s, sp in enumerate(groups[h_int]) if sp == space]
        t_from_h = [(j, s) for j in range(len(t_ranks)) for s in range(counts[j])]
        for s, (j, ts) in zip(h_slots, t_from_h, strict=True):
            d = Idx(space, False, next(dummy[space]))
            h_idx[h_int, s] = t_idx[j, t_side, ts] = d
            pairs.append((h_pos(h_int, s), t_pos(j, t_side, ts)))

    # Virtual lines: projector a_k sits at 2n-1-(k-1); it feeds H's virtual bra slots,
    # then the T's bra slots not fed by H; H's virtual ket slots feed T bra slots 0..x_j-1.
    wire(VIR, "bra", "ket", "bra", xs, lambda k: 2 * rank - k)
    # Occupied lines: projector i_k† sits at k-1; it feeds H's occupied ket slots, then
    # the T's ket slots not fed by H; H's occupied bra slots feed T ket slots 0..y_j-1.
    wire(OCC, "ket", "bra", "ket", ys, lambda k: k - 1)

    sign = parity([p for pair in pairs for p in pair])
    ext_groups = [h_bra.count(VIR), h_ket.count(OCC)]
    ext_groups += [m - x for m, x in zip(t_ranks, xs, strict=True)]
    ext_groups += [m - y for m, y in zip(t_ranks, ys, strict=True)]
    weight = mult * math.prod(math.factorial(v) for v in (*xs, *ys, *ext_groups))
    h = Factor(
        label,
        tuple(h_idx["bra", s] for s in range(nb)),
        tuple(h_idx["ket", s] for s in range(nk)),
    )
    ts = tuple(
        Factor(
            "t",
            tuple(t_idx[j, "bra", s] for s in range(m)),
            tuple(t_idx[j, "ket", s] for s in range(m)),
        )
        for j, m in enumerate(t_ranks)
    )
    return RawTerm(Fraction(sign, weight), (h, *ts), rank)
