"""Consumer-aware layouts: what a value's stored mode order costs the values that read it.

A product comes out of its matrix product as ``B F_left F_right`` (:mod:`sq_jax.lower.gemm`);
which operand is the left matrix and the order of the batch and contracted modes change
that order. A reader whose modes do not group into a matrix in the stored order has to
transpose the value into a copy first — for the CCSD ``t1 · ⟨ab‖cd⟩`` intermediate, a
copy of an ``a³i`` block on every call. :class:`ReaderCosts` prices a candidate stored
order by the bytes its readers would copy, so the lowering can pick, among a
product's equally cheap plans (or one that costs a little more here), the one its
readers take as is, and a sum can take the mode order of whichever operand suits its
readers.

A reader that is a product is priced by its own best plan with the value in that order
(its other operand in its stored order when it is already lowered, else in its node's
order); a reader that is a sum is assumed to adopt the order and is priced through its
own readers, up to :data:`SUM_HOPS` sums deep (sum chains can be thousands long); a
result read in another mode order than its equation's is one more output copy.

Example:
    >>> import sq_jax as sq
    >>> prog = sq.compile("R{i1;a1} = (g{i1,a2;a1,a3} + g{a2,i1;a3,a1}) f{a3;a2}",
    ...     sq.Spaces(i=2, a=3))
    >>> print(prog.lowered)  # the sum is stored as f's product reads it: no transpose there
    v3 = 1*g{i,a;a,a} + 1*g{a,i;a,a}
    v4 = gemm(ab,abcd->cd) f{a;a} v3
    result R = v4
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..expr.nodes import Index
from ..forest.nodes import NodeKind
from ..schedule.rich import OccurrenceRec, RichSchedule
from .gemm import copied_bytes, plan_gemm

__all__ = ["SUM_HOPS", "ReaderCosts"]

SUM_HOPS = 4
"""How many sums deep a stored order is followed to the readers of the sums."""


class ReaderCosts:
    """Bytes a value's readers copy, per candidate stored order (module docstring).

    Args:
        rich: the rich schedule (cells, occurrences).
        owner: per static point, the value it produces.
        rec_at: per static point, its occurrence record.
        extent: the full extent of a mode.
        axes: the stored orders chosen so far (read live: the lowering fills it in).
        results: per root value, the mode orders its equations want it in.
    """

    def __init__(
        self,
        rich: RichSchedule,
        owner: Sequence[int],
        rec_at: Mapping[int, OccurrenceRec],
        extent: Callable[[Index], int],
        axes: Mapping[int, tuple[int, ...]],
        results: Mapping[int, Sequence[tuple[OccurrenceRec, tuple[Index, ...]]]],
    ) -> None:
        self.rich, self.owner, self.rec_at = rich, owner, rec_at
        self.extent, self.axes, self.results = extent, axes, results
        self.readers: dict[int, list[tuple[int, int, OccurrenceRec]]] = {}
        for cell in rich.cells:
            if cell.is_leaf or not cell.occurrences:
                continue
            first = cell.occurrences[0]
            for k, p in enumerate(first.operand_points):
                self.readers.setdefault(owner[p], []).append((cell.value_id, k, rec_at[p]))

    def nbytes(self, modes: Sequence[Index]) -> int:
        """Bytes of a float64 array with these modes at full extents."""
        size = 8
        for ix in modes:
            size *= self.extent(ix)
        return size

    def stored(self, occ: OccurrenceRec) -> tuple[Index, ...]:
        """An operand's modes in its stored order (node order when not lowered yet)."""
        v = self.owner[occ.point]
        cell = self.rich.cells[v]
        if cell.node is not None and cell.node.kind is NodeKind.SCALAR:
            return ()
        order = None if cell.is_leaf else self.axes.get(v)
        return tuple(occ.carried) if order is None else tuple(occ.carried[a] for a in order)

    def reader_plan(self, w: int, k: int, occ: OccurrenceRec, axes: tuple[int, ...]) -> tuple:
        """Reader ``w``'s best plan and operand sizes with ``v`` (its operand ``k``) in ``axes``."""
        first = self.rich.cells[w].occurrences[0]
        mine = tuple(occ.carried[a] for a in axes)
        other = self.stored(self.rec_at[first.operand_points[1 - k]])
        labels = (mine, other) if k == 0 else (other, mine)
        sizes = (self.nbytes(labels[0]), self.nbytes(labels[1]))
        return plan_gemm(*labels, first.carried, sizes), sizes

    def wanted(self, v: int, axes: tuple[int, ...]) -> list[tuple[int, ...]]:
        """The orders product readers transpose ``v`` into when it is stored in ``axes``."""
        out = []
        for w, k, occ in self.readers.get(v, ()):
            if self.rich.cells[w].occurrences[0].node.kind is not NodeKind.PRODUCT:
                continue
            plan, _ = self.reader_plan(w, k, occ, axes)
            if plan is not None and plan.perms[k] is not None:
                out.append(tuple(occ.carried.index(ix) for ix in plan.labels[k]))
        return out

    def cost(self, v: int, axes: tuple[int, ...], hops: int = 0) -> int:
        """Bytes the readers of ``v`` copy when ``v`` is stored in order ``axes``.

        ``axes`` gives, per stored axis, the position of its mode in the node's order.
        """
        total = 0
        for w, k, occ in self.readers.get(v, ()):
            mine = tuple(occ.carried[a] for a in axes)
            first = self.rich.cells[w].occurrences[0]
            assert first.node is not None
            if first.node.kind is NodeKind.PRODUCT:
                total += copied_bytes(*self.reader_plan(w, k, occ, axes))
            elif hops < SUM_HOPS:
                total += self.cost(w, tuple(first.carried.index(ix) for ix in mine), hops + 1)
        for occ, wanted in self.results.get(v, ()):
            if tuple(occ.carried[a] for a in axes) != wanted:
                total += self.nbytes(wanted)
        return total
