"""Step 1 of the ordered schedule: the loop instances ordered and nested into a tree.

Loop instances ``(space, slot)`` found in any value's roles are ordered — spaces by
``mode_order`` then alphabetically, slots ascending, adjusted by Kahn's algorithm to
satisfy every required ``loop_order`` pair (a cycle raises :class:`LoopOrderCycleError`)
— and each loop's parent is the innermost earlier loop that must enclose it (both slice
one value, or a nesting pair says so), closed so that every value's loops lie on one
nesting path. Loops that need not nest become sibling blocks; each top-level loop
starts a *nest*.

Example:
    >>> from sq_jax.schedule.legality import LegalitySchedule
    >>> from sq_jax.schedule.rich import RichSchedule
    >>> ents, tree = build_loop_tree(RichSchedule((), 0), LegalitySchedule(()), ())
    >>> ents, tree.order
    ([], [])
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from .._errors import InternalScheduleError, LoopOrderCycleError, ReductionWithoutSlotError
from ..expr.nodes import Index
from .ir import LoopId, loop_name
from .legality import LegalitySchedule, LoopRole
from .rich import RichSchedule, ValueCell

__all__ = ["LoopEntry", "LoopTree", "build_loop_tree"]


@dataclass(frozen=True, slots=True)
class LoopEntry:
    """One loop role of one value: its axis, role and loop instance."""

    axis: Index
    role: LoopRole
    loop: LoopId | None  # None: no slot resolved


def _fusion_slot(cell: ValueCell, axis: Index) -> int:
    first = cell.occurrences[0]
    if axis in first.carried:
        p = first.carried.index(axis)
        return first.loop_slot[p] if first.loop_slot else -1
    for ix, slot in first.reduced_slot:
        if ix == axis:
            return slot
    return -1


def _entries(rich: RichSchedule, legality: LegalitySchedule) -> list[list[LoopEntry]]:
    out: list[list[LoopEntry]] = []
    for v, (cell, leg) in enumerate(zip(rich.cells, legality.cells, strict=True)):
        if leg.key != cell.key:
            raise InternalScheduleError(
                f"legality record {v} (key #{leg.key:x}) does not belong to rich value "
                f"{rich.value_name(v)} (key #{cell.key:x}); analyse the same rich schedule."
            )
        ents = []
        for ac in [] if cell.is_leaf else leg.per_axis:
            slot = _fusion_slot(cell, ac.axis)
            if slot < 0 and ac.role is LoopRole.REDUCTION:
                raise ReductionWithoutSlotError(
                    f"value {rich.value_name(v)} reduces `{ac.axis}` in batches, but no loop "
                    f"instance of space `{ac.axis.space}` is assigned to that reduction. "
                    "Open a Contracted loop for it at this node (or do not batch it)."
                )
            if slot < 0 and ac.role is LoopRole.LOOP_CARRIED:
                slot = 0
            loop = (ac.axis.space, slot) if slot >= 0 else None
            ents.append(LoopEntry(ac.axis, ac.role, loop))
        out.append(ents)
    return out


def _chain(
    rich: RichSchedule, ents: list[list[LoopEntry]], mode_order: Sequence[str]
) -> list[LoopId]:
    loops = {e.loop for es in ents for e in es if e.loop is not None}
    rank = {s: k for k, s in enumerate(mode_order)}
    default = sorted(loops, key=lambda lp: (rank.get(lp[0], len(rank)), lp[0], lp[1]))
    pos = {lp: k for k, lp in enumerate(default)}
    edges = [(a, b, w) for a, b, w in rich.loop_order if a in pos and b in pos]
    succ: dict[LoopId, list[LoopId]] = {lp: [] for lp in default}
    indeg = dict.fromkeys(default, 0)
    for a, b, _ in edges:
        succ[a].append(b)
        indeg[b] += 1
    ready = [pos[lp] for lp in default if indeg[lp] == 0]
    heapq.heapify(ready)
    order: list[LoopId] = []
    while ready:
        lp = default[heapq.heappop(ready)]
        order.append(lp)
        for b in succ[lp]:
            indeg[b] -= 1
            if indeg[b] == 0:
                heapq.heappush(ready, pos[b])
    if len(order) != len(default):
        placed = set(order)
        bad = [
            f"{loop_name(a)} outside {loop_name(b)} (witness {rich.value_name(w)})"
            for a, b, w in edges
            if a not in placed and b not in placed
        ]
        raise LoopOrderCycleError(
            "the required loop nesting is cyclic; these constraints cannot all hold:\n- "
            + "\n- ".join(bad)
            + "\nTwo loop instances were fused although they nest in opposite orders in "
            "different values; annotate the loops consistently (same nesting everywhere)."
        )
    return order


@dataclass(slots=True)
class LoopTree:
    """The loop instances as a forest of nests.

    Each loop's parent is the innermost loop that must enclose it (they meet on a value,
    or a required nesting pair says so).
    """

    order: list[LoopId]
    pos: dict[LoopId, int]
    parent: dict[LoopId, LoopId | None]

    def contains(self, outer: LoopId, inner: LoopId) -> bool:
        """Whether ``outer`` is ``inner`` or one of its ancestors."""
        cur: LoopId | None = inner
        while cur is not None:
            if cur == outer:
                return True
            cur = self.parent[cur]
        return False

    def nest(self, lp: LoopId) -> LoopId:
        """The top-level loop whose nest holds ``lp``."""
        while self.parent[lp] is not None:
            lp = self.parent[lp]  # type: ignore[assignment]
        return lp

    def deepest(self, loops: Sequence[LoopId]) -> LoopId:
        """The innermost of loops that lie on one nesting path."""
        return max(loops, key=self.pos.__getitem__)


def _loop_tree(ents: list[list[LoopEntry]], order: list[LoopId], rich: RichSchedule) -> LoopTree:
    pos = {lp: k for k, lp in enumerate(order)}
    req: dict[LoopId, set[LoopId]] = {lp: set() for lp in order}
    for es in ents:
        loops = sorted({e.loop for e in es if e.loop is not None}, key=pos.__getitem__)
        for k, lp in enumerate(loops):
            req[lp].update(loops[:k])
    for a, b, _ in rich.loop_order:
        if a in pos and b in pos:
            req[b].add(a)
    parent: dict[LoopId, LoopId | None] = {}
    for lp in reversed(order):  # a loop's requirements are final before it is visited
        if req[lp]:
            par = max(req[lp], key=pos.__getitem__)
            req[par] |= req[lp] - {par}
            parent[lp] = par
        else:
            parent[lp] = None
    return LoopTree(order, pos, parent)


def build_loop_tree(
    rich: RichSchedule, legality: LegalitySchedule, mode_order: Sequence[str]
) -> tuple[list[list[LoopEntry]], LoopTree]:
    """Every value's loop entries, and the loop instances as a forest of nests.

    Raises:
        InternalScheduleError: ``legality`` was analysed on another rich schedule.
        ReductionWithoutSlotError: a value reduces a batched mode no loop is assigned to.
        LoopOrderCycleError: the required loop nesting pairs contradict each other.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.plan import BatchPlan
        >>> from sq_jax.schedule import schedule_forest
        >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
        >>> sf = schedule_forest(forest, BatchPlan.of({"a": 2, "i": 2}))
        >>> ents, tree = build_loop_tree(sf.rich, sf.legality, ())
        >>> tree.order, tree.parent
        ([('i', 0), ('a', 0)], {('a', 0): ('i', 0), ('i', 0): None})
    """
    ents = _entries(rich, legality)
    return ents, _loop_tree(ents, _chain(rich, ents, mode_order), rich)
