"""Long sums in bounded pieces: where a chain of ``Combine`` adds is cut, and how.

XLA fuses a chain of elementwise adds into one loop fusion, however long. On CPU the
LLVM compile of that one fusion grows faster than linearly with its size (measured: a
chain of 2,000 adds of small tensors 36 s, of 1,000 adds 7 s; a 5,000-term sum
compiled for minutes), and ``lax.optimization_barrier`` does not stop it (the CPU
pipeline drops barriers before fusion). A ``dot_general`` is never fused with the adds
around it, so a chain is cut every :data:`SUM_PIECE` terms: the pending terms are
stacked and contracted with their coefficients in one matrix-vector product, whose
result is one term of the rest of the chain; the end of a chain that was cut is a cut
too. Sums of fewer terms are left exactly as they were (no cut), so the CC programs do
not change.

Even cut, a sum of ``n`` products still compiles ``2 n`` kernels (each product's
``dot_general`` and the transpose bringing it to the sum's mode order). So the products
of a piece that contract alike (a :class:`ProductGroup`: same matrix-product plan,
operand shapes and transpose) run as *one* ``dot_general``: each side's operands are
concatenated along their first contracted mode and the coefficients scale the smaller
side along it, so the group's sum is a single matrix product
(:func:`sq_jax.lower.execute.contract_group`). Kernels then grow with the number of
groups, not of terms (``bench/README.md``, W8: pieces of 256 compile fastest; groups in
pieces of 64 cost more than they save). Such a product is not run where it stands: the
cut runs it (:attr:`SumPlan.skip`), as it does the chain's adds before the cut.

:func:`plan_sums` finds the cuts and groups of one body statically: both the
interpreter (:mod:`sq_jax.lower.execute`) and the memory model
(:mod:`sq_jax.lower.memory`, which charges the stacked operands and terms) use it.

Example:
    >>> from sq_jax.lower.ir import Read
    >>> dims = ((3, None),)
    >>> body = [Combine(2, (1.0, 1.0), ((0,), (0,)), (Read(0), Read(1)), dims)]
    >>> for k in range(3, 9):  # v_k = v_{k-1} - x_k: a chain of 8 terms
    ...     body.append(Combine(k, (1.0, -1.0), ((0,), (0,)), (Read(k - 1), Read(100 + k)), dims))
    >>> plan = plan_sums(body, piece=5)  # cut every 5 terms
    >>> [(body[k].value_id, len(cut.rest), len(cut.groups)) for k, cut in plan.cuts.items()]
    [(5, 5, 0), (8, 4, 0)]
    >>> sorted(body[k].value_id for k in plan.skip)  # the adds a cut replaces are not run
    [2, 3, 4, 6, 7]
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from .accumulate import reads_of
from .ir import Accumulate, Combine, Contract, Instr, Loop, Read

__all__ = ["GROUP_MIN", "SUM_PIECE", "ProductGroup", "SumCut", "SumPlan", "SumTerm", "plan_sums"]

SUM_PIECE = 256
"""Terms a chain of adds collects before it is cut (larger than any CC sum's chain)."""

GROUP_MIN = 2
"""Products that contract alike run as one group from this many on (per cut)."""


@dataclass(frozen=True, slots=True)
class SumTerm:
    """One term of a cut sum: ``coef * transpose(read, perm)`` in the sum's mode order."""

    read: Read
    perm: tuple[int, ...]
    coef: float


@dataclass(frozen=True, slots=True)
class ProductGroup:
    """Products of one cut that contract alike, run as one ``dot_general``.

    Their sum ``sum_g coefs[g] * transpose(product_g, perm)`` is one matrix product of
    the stacked operands (:func:`sq_jax.lower.execute.contract_group`).
    """

    products: tuple[Contract, ...]
    """The products (all with the same gemm plan and operand shapes), in sum order."""
    coefs: tuple[float, ...]
    """Per product, its coefficient in the sum."""
    perm: tuple[int, ...]
    """The transpose that brings every product to the sum's mode order."""

    @property
    def scaled(self) -> int:
        """The operand (0 or 1) the coefficients scale: the smaller one (fewer copied bytes).

        Example:
            >>> from sq_jax.lower.ir import Read
            >>> big, small = Read(1, dims=((9, None), (9, None))), Read(2, dims=((9, None),))
            >>> product = Contract(0, "ab,b->a", (big, small), ((9, None),))
            >>> ProductGroup((product,), (1.0,), (0,)).scaled
            1
        """
        sizes = [math.prod(extent for extent, _ in r.dims) for r in self.products[0].operands]
        return 1 if sizes[1] < sizes[0] else 0


@dataclass(frozen=True, slots=True)
class SumCut:
    """One cut of a long sum: its grouped products plus its other terms, stacked."""

    groups: tuple[ProductGroup, ...]
    """Products run together at the cut (:class:`ProductGroup`)."""
    rest: tuple[SumTerm, ...]
    """The other terms, read as they are (earlier cuts, shared or sliced values, ...)."""

    @property
    def stacked(self) -> int:
        """Arrays stacked for the final coefficient contraction (rest, then groups)."""
        return len(self.rest) + len(self.groups)


@dataclass(frozen=True, slots=True)
class SumPlan:
    """How the long sums of one body run: the cuts, and the instructions they replace."""

    cuts: dict[int, SumCut]
    """Position of each cut ``Combine`` -> what it adds."""
    skip: frozenset[int]
    """Positions not run where they stand: the adds a cut replaces, the grouped products."""


def _compose(inner: tuple[int, ...], outer: tuple[int, ...]) -> tuple[int, ...]:
    """The one transpose equal to ``inner`` then ``outer``."""
    return tuple(inner[p] for p in outer)


def _reads(ins: Instr) -> list[int]:
    """Computed values an instruction reads, once per read (a loop: its whole body)."""
    if isinstance(ins, Loop):
        return [v for sub in ins.body for v in _reads(sub)]
    if isinstance(ins, Accumulate):
        return sorted(reads_of(ins))
    return [r.value_id for r in ins.operands if r.input_key is None and r.scalar is None]


def _shape_key(read: Read) -> tuple:
    """What fixes an operand's shape: per mode, its extent and the loop cutting it."""
    cut = dict(read.slices)
    return tuple(
        (extent, lp if lp is not None else cut.get(p)) for p, (extent, lp) in enumerate(read.dims)
    )


def _group_key(ins: Contract, perm: tuple[int, ...]) -> tuple | None:
    """Products with equal keys stack into one contraction; ``None``: never grouped."""
    plan = ins.gemm
    if plan is None or plan.groups[2] == 0 or any(r.scalar is not None for r in ins.operands):
        return None  # no contracted mode to stack along (or not a matrix product)
    # equal transposes too: the group runs with its first product's (valid for each only
    # when each chose them through its own operand's symmetry)
    how = (
        plan.swap,
        plan.perms,
        plan.equal,
        plan.groups,
        plan.lhs_k_first,
        plan.rhs_k_first,
        plan.relabel,  # the group runs with its first product's (the sign, the tangents)
    )
    return (how, tuple(_shape_key(r) for r in ins.operands), perm)


def _split(
    terms: Sequence[SumTerm],
    at: dict[int, int],
    body: Sequence[Instr],
    reads: Counter,
    keep: Collection[int],
) -> SumCut:
    """A cut's terms: products that contract alike in groups (two or more), the rest."""
    keyed: dict[tuple, list[SumTerm]] = {}
    for t in terms:
        j = at.get(t.read.value_id) if t.read.input_key is None else None
        ins = body[j] if j is not None else None
        if not isinstance(ins, Contract) or t.read.slices or t.read.scalar is not None:
            continue
        if reads[ins.value_id] != 1 or ins.value_id in keep:
            continue  # read elsewhere too: it must exist where it stands
        key = _group_key(ins, t.perm)
        if key is not None:
            keyed.setdefault(key, []).append(t)
    groups, grouped = [], set()
    for (_, _, perm), members in keyed.items():
        if len(members) < GROUP_MIN:
            continue
        products = tuple(body[at[t.read.value_id]] for t in members)
        groups.append(ProductGroup(products, tuple(t.coef for t in members), perm))  # type: ignore[arg-type]
        grouped.update(t.read.value_id for t in members)
    rest = tuple(t for t in terms if t.read.input_key is not None or t.read.value_id not in grouped)
    return SumCut(tuple(groups), rest)


def plan_sums(
    body: Sequence[Instr], keep: Collection[int] = (), piece: int | None = None
) -> SumPlan:
    """The cuts of the long sums of one body, and the instructions they replace.

    Each ``Combine`` collects the terms of the ``Combine`` values it reads (of this body,
    unsliced, read nowhere else, not kept) and its other operands as terms; when it
    holds ``piece`` terms or more, it is a cut: its value is the stacked terms contracted
    with their coefficients, and it counts as one term for the ``Combine`` instructions
    that read it. The last ``Combine`` of a chain that holds a cut is a cut too. The
    products of a cut that contract alike and are read only there form its
    :class:`ProductGroup` s.

    Args:
        body: one body of an instruction tree (loops are not entered).
        keep: values read after the body (loop escapes, results): never replaced.
        piece: terms per piece (default :data:`SUM_PIECE`).

    Returns:
        The cuts and the positions they replace (:class:`SumPlan`).
    """
    piece = SUM_PIECE if piece is None else piece
    reads: Counter = Counter()
    for ins in body:
        reads.update(_reads(ins))
    at = {ins.value_id: k for k, ins in enumerate(body) if not isinstance(ins, Loop)}
    terms: dict[int, list[SumTerm]] = {}  # value id -> its pending terms
    holds_cut: set[int] = set()  # values whose pending terms include a cut
    into: dict[int, int] = {}  # position of a Combine -> position of the one that took its terms
    cut_terms: dict[int, tuple[SumTerm, ...]] = {}
    for k, ins in enumerate(body):
        if not isinstance(ins, Combine):
            continue
        mine: list[SumTerm] = []
        for read, perm, coef in zip(ins.operands, ins.perms, ins.coefs, strict=True):
            v = read.value_id
            inner = terms.get(v) if read.input_key is None else None
            if inner is None or read.slices or read.scalar is not None or reads[v] > 1 or v in keep:
                mine.append(SumTerm(read, perm, coef))
                continue
            if not mine and coef == 1.0 and perm == tuple(range(len(perm))):
                mine = inner  # the chain's only reader: take its list over, copy nothing
            else:
                mine.extend(SumTerm(t.read, _compose(t.perm, perm), t.coef * coef) for t in inner)
            into[at[v]] = k
            if v in holds_cut:
                holds_cut.add(ins.value_id)
        if len(mine) >= piece:
            cut_terms[k] = tuple(mine)
            whole = Read(ins.value_id, dims=ins.dims)
            terms[ins.value_id] = [SumTerm(whole, tuple(range(len(ins.dims))), 1.0)]
            holds_cut.add(ins.value_id)
        else:
            terms[ins.value_id] = mine
    for k, ins in enumerate(body):  # the end of a chain that was cut
        if k not in into and k not in cut_terms and isinstance(ins, Combine):
            if ins.value_id in holds_cut:
                cut_terms[k] = tuple(terms[ins.value_id])
    skip: set[int] = set()
    for j in sorted(into, reverse=True):  # an add taken into a cut is never needed
        if j not in cut_terms and (into[j] in cut_terms or into[j] in skip):
            skip.add(j)
    cuts = {k: _split(ts, at, body, reads, keep) for k, ts in sorted(cut_terms.items())}
    for cut in cuts.values():
        skip.update(at[p.value_id] for g in cut.groups for p in g.products)
    return SumPlan(cuts, frozenset(skip))
