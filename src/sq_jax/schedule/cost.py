"""FLOPs of running an ordered schedule, recomputation across batches included.

:func:`schedule_flops` walks the block tree of a scheduled forest and charges every
*production* of a value — its :class:`~sq_jax.schedule.ir.BuildStep`, or, for a value
without one, the raw production at the deepest block that lists it as an output (the
bottom of its escape chain) — the FLOPs of its node
(:func:`sq_jax.forest.cost.node_flops`, opt_einsum's convention) at batch granularity,
times the number of times it runs:

* a mode the production is sliced on by an enclosing loop (a carried mode whose loop
  slot is that loop's, or a mode it sums in batches) is counted at the loop's batch
  size, once per batch;
* every other enclosing loop runs the production once per batch of its own: that is
  the recomputation a batch plan costs (a value placed inside a loop it does not depend
  on).

**Remainder batches are counted exactly.** Summed over the batches of a loop, a mode
the loop slices adds up to its extent (a last, smaller batch is charged its true size,
not the full block size), so a production costs its unbatched FLOPs times the batch
count (:meth:`~sq_jax.plan.SpaceBatch.num_batches`, remainder batch included) of every
enclosing loop that slices none of its modes. With nothing batched this is
``forest.flops``; batching never lowers it.

A generated denominator ``Δ`` (:mod:`sq_jax.forest.denominators`) is built where its
reader is produced, from the energies of the batch being read: its own term charges
``rank`` FLOPs per element, times the batch count of every enclosing loop that slices
none of its modes (it is rebuilt for each).

Not counted (memory traffic, not arithmetic, and the same convention as
:attr:`sq_jax.lower.program.Program.flops`): the adds that accumulate per-batch partial
sums into a ``Sum`` output, the writes of ``Scatter`` outputs, forwarding along escape
chains, slicing operands, and coefficients.

:func:`flop_terms` gives the same count as a polynomial in the batch counts (one term
per production), so the memory-budget planner can price every batch count of one
schedule without scheduling it again.

Known limitations: the model assumes one production per value per iteration of its
enclosing loops (what the lowering emits) and prices transposes and copies at zero.

Example:
    >>> import sq_jax as sq
    >>> from sq_jax.plan import BatchPlan
    >>> from sq_jax.schedule import schedule_forest
    >>> forest = sq.build_forest(sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1}"), sq.Spaces(i=2, a=3))
    >>> schedule_flops(schedule_forest(forest, BatchPlan())) == forest.flops == 36
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..expr.spaces import Spaces
from ..forest.cost import node_flops
from ..forest.denominators import generated_flops, is_denominator
from ..forest.nodes import NodeKind
from .driver import ScheduledForest
from .ir import BuildStep, LoopId, ScopeBlock
from .rich import ValueCell

__all__ = ["FlopTerm", "flop_terms", "schedule_flops"]


@dataclass(frozen=True, slots=True)
class FlopTerm:
    """One production of one value: ``flops * prod(num_batches(s) for s in recompute)``."""

    value_id: int
    """The value produced."""
    flops: int
    """Its unbatched FLOPs (:func:`sq_jax.forest.cost.node_flops`)."""
    recompute: tuple[str, ...]
    """Spaces of the enclosing loops that slice none of its modes (one entry per loop,
    outermost first): each multiplies the count by its number of batches."""
    loops: tuple[LoopId, ...] = ()
    """Those loops (as ``recompute``; empty where unknown)."""

    def count(self, batches: Mapping[str, int], own: Mapping[LoopId, int] | None = None) -> int:
        """The term's FLOPs for ``{space: number of batches}`` (1 for a missing space).

        ``own``: batch counts of loops that run their own
        (:attr:`~sq_jax.plan.batch.BatchPlan.loop_blocks`), instead of their space's.

        Example:
            >>> FlopTerm(0, 10, ("a", "a", "i")).count({"a": 3, "i": 2})
            180
            >>> term = FlopTerm(0, 10, ("a", "i"), (("a", 0), ("i", 1)))
            >>> term.count({"a": 3, "i": 2}, {("a", 0): 1})  # loop a#0 in one batch
            20
        """
        out = self.flops
        if own and self.loops:
            for space, loop in zip(self.recompute, self.loops, strict=True):
                out *= own.get(loop, batches.get(space, 1))
            return out
        for space in self.recompute:
            out *= batches.get(space, 1)
        return out

    def __str__(self) -> str:
        loops = "".join(f" x n_{s}" for s in self.recompute)
        return f"v{self.value_id}: {self.flops}{loops}"


class _Extents:
    """``spaces.extent`` memoized (the only method :func:`node_flops` reads)."""

    def __init__(self, spaces: Spaces) -> None:
        self._spaces = spaces
        self._memo: dict[str, int] = {}

    def extent(self, key: str) -> int:
        if key not in self._memo:
            self._memo[key] = self._spaces.extent(key)
        return self._memo[key]


def _sliced_loops(cell: ValueCell) -> frozenset[LoopId]:
    """Loop instances that slice the value: its carried positions' and its reductions'."""
    first = cell.occurrences[0]
    out = {
        (ix.space, slot)
        for ix, slot in zip(first.carried, first.loop_slot, strict=False)
        if slot >= 0
    }
    out |= {(ix.space, slot) for ix, slot in first.reduced_slot}
    return frozenset(out)


def flop_terms(scheduled: ScheduledForest) -> tuple[FlopTerm, ...]:
    """One :class:`FlopTerm` per production in the ordered schedule, by value id.

    Args:
        scheduled: the output of :func:`sq_jax.schedule.schedule_forest`.

    Returns:
        The terms; their counts under the plan's batch counts sum to
        :func:`schedule_flops`.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.plan import BatchPlan
        >>> from sq_jax.schedule import schedule_forest
        >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
        >>> [str(t) for t in flop_terms(schedule_forest(forest, BatchPlan.of({"a": 2})))]
        ['v2: 16']
    """
    cells = scheduled.rich.cells
    spaces: Any = _Extents(scheduled.annotated.forest.spaces)  # node_flops reads extents
    built: dict[int, tuple[ScopeBlock, ...]] = {}
    escapes: dict[int, tuple[ScopeBlock, ...]] = {}
    for blk, anc in scheduled.ordered.walk():
        chain = (*anc, blk)
        for step in blk.steps:
            if isinstance(step, BuildStep):
                built.setdefault(step.value_id, chain)
        for v, _ in blk.outputs:  # keep the deepest output site of the escape chain
            if v not in escapes or len(chain) > len(escapes[v]):
                escapes[v] = chain
    sites = dict(escapes)
    sites.update(built)  # a BuildStep is the production when there is one
    terms = []
    for v in sorted(sites):
        cell = cells[v]
        if cell.is_leaf or cell.node is None:
            continue
        sliced = _sliced_loops(cell)
        chain = [blk for blk in sites[v] if not blk.is_root and blk.loop not in sliced]
        recompute = tuple(blk.level.space for blk in chain)
        loops = tuple(blk.loop for blk in chain)
        terms.append(FlopTerm(v, node_flops(cell.node, spaces), recompute, loops))
        terms += _generated_terms(cell, sites[v], scheduled, spaces)
    return tuple(terms)


def _generated_terms(
    cell: ValueCell, chain: tuple[ScopeBlock, ...], scheduled: ScheduledForest, spaces: Any
) -> list[FlopTerm]:
    """Terms for building the generated denominators ``cell``'s production reads."""
    node = cell.node
    assert node is not None
    if not any(c.kind is NodeKind.LEAF and is_denominator(c.tensor) for c in node.children):
        return []
    first = cell.occurrences[0]
    recs = {o.point: o for c in scheduled.rich.cells for o in c.occurrences}
    loops = {
        (ix.space, slot): ix
        for ix, slot in zip(first.carried, first.loop_slot, strict=False)
        if slot >= 0
    }
    loops.update({(ix.space, slot): ix for ix, slot in first.reduced_slot})
    out = []
    for point in first.operand_points:
        rec = recs[point]
        if rec.node is None or not is_denominator(rec.node.tensor):
            continue
        modes = set(rec.carried)
        own = {lp for lp, ix in loops.items() if ix in modes}
        enclosing = [blk for blk in chain if not blk.is_root and blk.loop not in own]
        size = generated_flops([spaces.extent(ix.space) for ix in rec.carried])
        out.append(
            FlopTerm(
                cell.value_id,
                size,
                tuple(blk.level.space for blk in enclosing),
                tuple(blk.loop for blk in enclosing),
            )
        )
    return out


def schedule_flops(scheduled: ScheduledForest, scale: Mapping[int, float] | None = None) -> int:
    """FLOPs of executing the ordered schedule, recomputation included (module docstring).

    Args:
        scheduled: the output of :func:`sq_jax.schedule.schedule_forest`.
        scale: per value id, a factor on its productions' FLOPs (the lowering runs some
            products at a share of their plain count: :mod:`sq_jax.lower.pairs`).

    Returns:
        The FLOP count; ``forest.flops`` when nothing is batched, never below it otherwise.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.plan import BatchPlan
        >>> from sq_jax.schedule import schedule_forest
        >>> eqs = sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1}")
        >>> forest = sq.build_forest(eqs, sq.Spaces(i=2, a=3))
        >>> schedule_flops(schedule_forest(forest, BatchPlan.of({"a": 3})))
        36
    """
    ann = scheduled.annotated
    spaces = ann.forest.spaces
    # a plan may name a space the equations never touch (and that has no extent): no loop
    batches = {
        s.space: s.num_batches(spaces.extent(s.space))
        for s in ann.plan.spaces
        if spaces.has_extent(s.space)
    }
    # loops in larger batches than their space's (BatchPlan.loop_blocks) recompute less
    own = {loop: -(-spaces.extent(loop[0]) // block) for loop, block in ann.plan.loop_blocks}
    if not scale:
        return sum(t.count(batches, own) for t in flop_terms(scheduled))
    return round(
        sum(t.count(batches, own) * scale.get(t.value_id, 1) for t in flop_terms(scheduled))
    )
