"""The ordered schedule: loop instances realized as nested blocks of ordered steps.

:func:`build_ordered_schedule` lowers a rich schedule and its legality into an
:class:`~sq_jax.schedule.ir.OrderedSchedule` (V2 semantics; ``docs/schedule.md``, "Ordered
schedule"; SeQuant's design, re-derived here):

1. **Loop tree** (:mod:`~sq_jax.schedule.loop_tree`). Loop instances are ordered
   (``mode_order``, then the required ``loop_order`` pairs) and nested: each loop's
   parent is the innermost earlier loop that must enclose it. Loops that need not nest
   become sibling blocks; each top-level loop starts a *nest*. (SeQuant realizes a
   co-occurrence cluster as one linear chain; a tree avoids nesting every term's loop
   inside every other's.)
2. **Passes.** :func:`forced_split_levels` gives every value a pass: a reader of a
   ``LoopCarried`` value, or of a ``Reduction`` value from inside that reduction's loop,
   runs in a later pass. A nest holding several passes becomes one sibling nest per pass
   (``latitude`` = pass).
3. **Placement.** A value whose roles are all ``LoopLocal`` is a ``BuildStep`` in its
   innermost local loop (root if none). A value with a ``Reduction``/``LoopCarried`` role
   escapes: an output (``Sum``/``Scatter``) of every such loop, raw production at the
   innermost. Rule 4: a loop-local value read by a later pass of its own nest is also
   scattered out of each of its local loops (and keeps its ``BuildStep``); so is a
   result that another tree reads inside a loop (results are returned whole).
4. **Depths.** ``level.depth`` is a loop's 1-based position in the order of step 1: a
   stable identity, not the nesting depth.
5. **Order.** Each block's steps are topologically sorted on the value dependencies
   (a child block requires everything its subtree needs from outside), ties broken by
   ``first_use``; the result is re-checked, then
   :func:`~sq_jax.schedule.wellformed.well_formed` is asserted.

Leaves are inputs and never scheduled. A nest may contain work that is invariant to
one of its loops (it shares the nest with values that are not); such a value crosses
that loop without an output entry (SeQuant's residency + produce-if-absent), see
:func:`sq_jax.schedule.wellformed.crossings`.

Example:
    >>> from sq_jax.schedule.rich import RichSchedule
    >>> from sq_jax.schedule.legality import LegalitySchedule
    >>> print(build_ordered_schedule(RichSchedule((), 0), LegalitySchedule(())))
    root
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .._errors import (
    InternalScheduleError,
    LaterPassReaderError,
    MalformedScheduleError,
    PartialSumReadError,
    StepCycleError,
    UnescapedNonLocalError,
)
from ..expr.nodes import Index
from ..plan.batch import LoopKind
from .ir import (
    BuildStep,
    LoopId,
    OrderedSchedule,
    OutputKind,
    ScopeBlock,
    ScopeLevel,
    Step,
    loop_name,
)
from .legality import LegalitySchedule, LoopRole
from .loop_tree import LoopEntry, LoopTree, build_loop_tree
from .rich import RichSchedule
from .wellformed import well_formed_violations

__all__ = [
    "build_ordered_schedule",
    "forced_split_levels",
]

_SUM, _SCATTER = OutputKind.ACCUMULATE_SUM, OutputKind.ACCUMULATE_SCATTER


def forced_split_levels(
    depends_on: Sequence[Sequence[int]],
    carried: set[int],
    reduction_sources: set[int],
    inside: Callable[[int, int], bool] | None = None,
    skip: set[int] | None = None,
) -> tuple[int, ...]:
    """The pass of every value (value ids must be topologically ordered).

    A forward sweep gives each value the largest pass of its operands, plus one across a
    *bumping* edge: the operand is ``LoopCarried`` (``carried``), or a ``Reduction``
    (``reduction_sources``) read from inside its loop (``inside(reader, source)``). The
    sources of bumping edges are pinned; a reverse sweep lifts every other value that
    has readers to the smallest pass of its readers. Every edge then points to an equal
    or earlier pass, every bumping edge to a strictly earlier one.

    Args:
        depends_on: operand value ids per value.
        carried: values with a ``LoopCarried`` role.
        reduction_sources: values with a ``Reduction`` role.
        inside: ``inside(reader, source)``; ``None`` means never.
        skip: values that take no part (leaves); they keep pass 0.

    Returns:
        The pass per value.

    Example:
        >>> deps = [(), (), (), (), (1, 3), (0, 1, 2)]  # Pu=4 reads 1,3; Wc=5 reads 0,1,2
        >>> forced_split_levels(deps, carried={0, 5}, reduction_sources=set())
        (0, 0, 1, 0, 0, 1)
    """
    n = len(depends_on)
    skip = skip or set()
    base = [0] * n
    pinned: set[int] = set()
    readers: list[list[int]] = [[] for _ in range(n)]
    for v in range(n):
        if v in skip:
            continue
        for o in depends_on[v]:
            if o in skip:
                continue
            readers[o].append(v)
            bump = o in carried or (o in reduction_sources and inside is not None and inside(v, o))
            if bump:
                pinned.add(o)
            base[v] = max(base[v], base[o] + (1 if bump else 0))
    level = list(base)
    for v in range(n - 1, -1, -1):
        if v in skip or v in pinned or not readers[v]:
            continue
        level[v] = max(base[v], min(level[r] for r in readers[v]))
    return tuple(level)


@dataclass(slots=True)
class _Place:
    build: LoopId | None = None  # the BuildStep's loop, _ROOT_LOOP, or None (no BuildStep)
    escapes: dict[LoopId, OutputKind] = field(default_factory=dict)


_ROOT_LOOP: LoopId = ("", -1)


def _place(
    rich: RichSchedule,
    ents: list[list[LoopEntry]],
    tree: LoopTree,
    deps: Sequence[Sequence[int]],
    cons: Sequence[Sequence[int]],
) -> tuple[list[_Place], tuple[int, ...]]:
    n = len(rich.cells)
    leaves = {v for v in range(n) if rich.cells[v].is_leaf}
    prod: list[LoopId | None] = []
    for v, es in enumerate(ents):
        loops = sorted({e.loop for e in es if e.loop is not None}, key=tree.pos.__getitem__)
        for outer, inner in itertools.pairwise(loops):
            if not tree.contains(outer, inner):
                raise InternalScheduleError(
                    f"the loops of value {rich.value_name(v)} do not nest on one path"
                )
        prod.append(loops[-1] if loops else None)

    def nest_of(lp: LoopId | None) -> LoopId | None:
        return None if lp is None else tree.nest(lp)

    def inside(reader: int, source: int) -> bool:
        pr = prod[reader]
        return pr is not None and any(
            e.role is LoopRole.REDUCTION and e.loop is not None and tree.contains(e.loop, pr)
            for e in ents[source]
        )

    carried = {v for v, es in enumerate(ents) if any(e.role is LoopRole.LOOP_CARRIED for e in es)}
    reductions = {v for v, es in enumerate(ents) if any(e.role is LoopRole.REDUCTION for e in es)}
    passes = forced_split_levels(deps, carried, reductions, inside, leaves)

    places = [_Place() for _ in range(n)]
    # a root value is local to a loop only when another tree reads it inside that loop
    results = set(rich.root_values)
    for v in range(n):
        if v in leaves:
            continue
        es, pl = ents[v], places[v]
        local = [e.loop for e in es if e.role is LoopRole.LOOP_LOCAL and e.loop is not None]
        for e in es:
            if e.role is not LoopRole.LOOP_LOCAL and e.loop is not None:
                kind = _SCATTER if e.role is LoopRole.LOOP_CARRIED else _SUM
                if pl.escapes.get(e.loop) is not _SCATTER:
                    pl.escapes[e.loop] = kind
        if pl.escapes and local:
            deepest = tree.deepest(list(pl.escapes))
            if tree.pos[tree.deepest(local)] > tree.pos[deepest]:
                raise InternalScheduleError(
                    f"value {rich.value_name(v)} escapes loop {loop_name(deepest)} but must stay "
                    f"inside the deeper loop {loop_name(tree.deepest(local))}."
                )
        materialized = False
        if v in results:  # a result is returned whole: scatter it out of its local loops
            for lp in local:
                if lp not in pl.escapes:
                    materialized = True
                    pl.escapes[lp] = _SCATTER
        later = [r for r in cons[v] if passes[r] > passes[v]]
        mine = prod[v]
        if local and later and mine is not None:
            same = [r for r in later if nest_of(prod[r]) == tree.nest(mine)]
            if same:
                for e in es:
                    if e.loop is None:
                        continue
                    if e.role is LoopRole.LOOP_LOCAL:
                        if e.loop not in pl.escapes:
                            materialized = True
                        pl.escapes[e.loop] = _SCATTER
                    elif e.loop not in pl.escapes:
                        raise UnescapedNonLocalError(
                            f"value {rich.value_name(v)} is read by "
                            f"{rich.value_name(same[0])} in a later pass of its nest, but its "
                            f"{e.role} loop "
                            f"{loop_name(e.loop)} has no escape to materialize it through."
                        )
            unescaped = [lp for lp in local if lp not in pl.escapes]
            other = [
                r for r in later if prod[r] is not None and nest_of(prod[r]) != tree.nest(mine)
            ]
            if unescaped and other:
                raise LaterPassReaderError(
                    f"value {rich.value_name(v)} stays inside loop {loop_name(unescaped[0])} "
                    f"(LoopLocal), but {rich.value_name(other[0])} reads it in a later pass from "
                    f"another nest (loop {loop_name(prod[other[0]])}). Batch the two "  # type: ignore[arg-type]
                    "consumers with one loop, or do not batch this value's mode."
                )
        for lp, kind in pl.escapes.items():
            if kind is not _SUM:
                continue
            for r in cons[v]:
                pr = prod[r]
                if passes[r] == passes[v] and pr is not None and tree.contains(lp, pr):
                    raise PartialSumReadError(
                        f"{rich.value_name(r)} reads {rich.value_name(v)} inside loop "
                        f"{loop_name(lp)} in the same pass, but that value is a sum over the "
                        "loop's batches and is complete only after the loop."
                    )
        if pl.escapes:
            pl.build = tree.deepest(list(pl.escapes)) if materialized else None
        else:
            pl.build = tree.deepest(local) if local else _ROOT_LOOP
    return places, passes


@dataclass(slots=True)
class _Item:
    step: Step
    produced: frozenset[int]
    requires: frozenset[int]
    tie: int


def _topo(items: list[_Item], rich: RichSchedule, where: str) -> list[Step]:
    owner: dict[int, int] = {}
    for k, it in enumerate(items):
        for v in it.produced:
            owner.setdefault(v, k)
    preds: list[set[int]] = [
        {owner[v] for v in it.requires if v in owner and owner[v] != k}
        for k, it in enumerate(items)
    ]
    succ: list[list[int]] = [[] for _ in items]
    for k, ps in enumerate(preds):
        for p in ps:
            succ[p].append(k)
    indeg = [len(ps) for ps in preds]
    ready = [(it.tie, k) for k, it in enumerate(items) if indeg[k] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append(k)
        for s in succ[k]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, (items[s].tie, s))
    if len(order) != len(items):
        stuck = [k for k in range(len(items)) if indeg[k] > 0]
        unsatisfied = sum(indeg[k] for k in stuck)
        names = ", ".join(_step_name(items[k].step, rich) for k in stuck[:6])
        raise StepCycleError(
            f"the steps of {where} cannot be ordered: {unsatisfied} dependency edge(s) stay "
            f"unsatisfied among {names}. Their loops would have to run both before and "
            "after each other; split the batching of the values involved."
        )
    at = {k: n for n, k in enumerate(order)}
    for k, ps in enumerate(preds):
        if any(at[p] > at[k] for p in ps):
            raise InternalScheduleError(f"topological order of {where} violates an edge")
    return [items[k].step for k in order]


def _step_name(step: Step, rich: RichSchedule) -> str:
    if isinstance(step, BuildStep):
        return rich.value_name(step.value_id)
    return f"loop {loop_name(step.loop)}"


def _assemble(
    rich: RichSchedule,
    legs: Sequence[Sequence[int]],
    tree: LoopTree,
    members: list[LoopId],
    builds: dict[LoopId, list[int]],
    outs: dict[LoopId, list[tuple[int, OutputKind]]],
    latitude: int,
    kinds: dict[LoopId, LoopKind],
) -> _Item | None:
    """Build one nest (its loops: ``members``) from one pass's items.

    Innermost loops first; loops with nothing inside them are dropped. None if the whole
    nest is empty.
    """
    made: dict[LoopId, list[_Item]] = {}
    for lp in sorted(members, key=tree.pos.__getitem__, reverse=True):
        b, o = builds.get(lp, []), outs.get(lp, [])
        kids = made.pop(lp, [])
        if not b and not o and not kids:
            continue
        items = [_build_item(v, rich, legs) for v in b] + kids
        produced = set(b) | {v for v, _ in o}
        needs: set[int] = set()
        for v in b + [v for v, _ in o]:
            needs.update(legs[v])
        for kid in kids:
            produced |= kid.produced
            needs |= kid.requires
        blk = ScopeBlock(
            axis=_axis_of(rich, lp, b + [v for v, _ in o] + sorted(produced)),
            level=ScopeLevel(tree.pos[lp] + 1, lp[0], lp[1], latitude),
            kind=kinds.get(lp, LoopKind.CONTRACTED),
            steps=tuple(_topo(items, rich, f"loop {loop_name(lp)}")),
            outputs=tuple(sorted(o, key=lambda t: rich.cells[t[0]].first_use)),
        )
        tie = min(rich.cells[v].first_use for v in produced)
        item = _Item(blk, frozenset(produced), frozenset(needs - produced), tie)
        par = tree.parent[lp]
        if par is None:
            return item
        made.setdefault(par, []).append(item)
    return None


def _axis_of(rich: RichSchedule, lp: LoopId, vids: list[int]) -> Index:
    """The loop's mode as labelled at the first value that carries or sums it."""
    for v in vids:
        first = rich.cells[v].occurrences[0]
        for ix, slot in zip(first.carried, first.loop_slot, strict=False):
            if ix.space == lp[0] and slot == lp[1]:
                return ix
        for ix, slot in first.reduced_slot:
            if ix.space == lp[0] and slot == lp[1]:
                return ix
        for ix, slot in zip(first.ectx, first.ectx_slot, strict=False):
            if ix.space == lp[0] and slot == lp[1]:
                return ix
    return Index(lp[0], 0)


def _build_item(v: int, rich: RichSchedule, legs: Sequence[Sequence[int]]) -> _Item:
    return _Item(BuildStep(v), frozenset({v}), frozenset(legs[v]), rich.cells[v].first_use)


def build_ordered_schedule(
    rich: RichSchedule, legality: LegalitySchedule, mode_order: Sequence[str] = ()
) -> OrderedSchedule:
    """Realize the loop instances as nested blocks of ordered steps (module docstring).

    Args:
        rich: the rich schedule.
        legality: its legality (same cells, same order).
        mode_order: space keys, outermost first; a tie-break only (required nesting
            pairs win).

    Returns:
        The ordered schedule; it is :func:`well_formed`.

    Raises:
        LoopOrderCycleError: the required loop nesting pairs are cyclic.
        ReductionWithoutSlotError: a reduction with no loop instance.
        LaterPassReaderError: a later-pass reader in another nest needs a loop-local value.
        UnescapedNonLocalError: rule 4 found a non-local role with no escape.
        PartialSumReadError: a same-pass read of a sum from inside its loop.
        StepCycleError: the steps of one block cannot be ordered.
        MalformedScheduleError: the result breaks :func:`well_formed` (a bug).

    Example:
        >>> from sq_jax.schedule.rich import RichSchedule
        >>> build_ordered_schedule(RichSchedule((), 0), LegalitySchedule(())).num_values
        0
    """
    if len(legality.cells) != len(rich.cells):
        raise InternalScheduleError(
            f"legality has {len(legality.cells)} records for {len(rich.cells)} rich values."
        )
    ents, tree = build_loop_tree(rich, legality, mode_order)  # step 1
    deps, cons = rich.dependencies()
    leaves = {v for v, c in enumerate(rich.cells) if c.is_leaf}
    deps_nl = [tuple(o for o in ds if o not in leaves) for ds in deps]
    places, passes = _place(rich, ents, tree, deps_nl, cons)

    root_items: list[_Item] = []
    per_nest: dict[tuple[int, int], tuple[dict, dict]] = {}
    for v, pl in enumerate(places):
        if v in leaves:
            continue
        if pl.build == _ROOT_LOOP:
            root_items.append(_build_item(v, rich, deps_nl))
            continue
        sites = list(pl.escapes) + ([pl.build] if pl.build is not None else [])
        top = tree.nest(sites[0])
        builds, outs = per_nest.setdefault((tree.pos[top], passes[v]), ({}, {}))
        if pl.build is not None:
            builds.setdefault(pl.build, []).append(v)
        for lp, kind in pl.escapes.items():
            outs.setdefault(lp, []).append((v, kind))
    nests: dict[LoopId, list[LoopId]] = {}
    for lp in tree.order:
        nests.setdefault(tree.nest(lp), []).append(lp)
    kinds = dict(rich.loop_kind)
    for (top_pos, p), (builds, outs) in sorted(per_nest.items()):
        for vs in builds.values():
            vs.sort(key=lambda v: rich.cells[v].first_use)
        members = nests[tree.order[top_pos]]
        item = _assemble(rich, deps_nl, tree, members, builds, outs, p, kinds)
        if item is not None:
            root_items.append(item)
    root = ScopeBlock(steps=tuple(_topo(root_items, rich, "the root block")))
    owner = rich.point_owner()
    legs = tuple(tuple(owner[p] for p in c.occurrences[0].operand_points) for c in rich.cells)
    sched = OrderedSchedule(root, len(rich.cells), legs)
    problems = well_formed_violations(sched)
    if problems:
        raise MalformedScheduleError(
            "the ordered schedule is not well formed (a scheduler bug):\n- "
            + "\n- ".join(problems)
            + "\n"
            + str(sched)
        )
    return sched
