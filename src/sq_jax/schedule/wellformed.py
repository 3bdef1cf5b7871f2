"""Checks and analyses of an ordered schedule's structure.

:func:`well_formed_violations` lists the V2 structural rules a block tree breaks (the
builder asserts none); :func:`crossings` finds the values that leave a loop block
without an output entry (what a lowering must carry out of the loop).

Example:
    >>> well_formed(OrderedSchedule(ScopeBlock(steps=(BuildStep(0),)), 1))
    True
"""

from __future__ import annotations

from collections.abc import Sequence

from .ir import BuildStep, OrderedSchedule, ScopeBlock

__all__ = ["crossings", "well_formed", "well_formed_violations"]


def well_formed_violations(sched: OrderedSchedule) -> list[str]:
    """Every V2 structural rule ``sched`` breaks (empty when well formed).

    Rules: (1) build ids in range; (2) sibling blocks differ in
    ``(depth, loop_slot, latitude)``; (3) output ids in range; (4a) no value built twice;
    (4b) a built value is an output only at its build block or an ancestor of it;
    (4c) a value's escape sites lie on one root-to-block path, at distinct depths.

    Example:
        >>> well_formed_violations(OrderedSchedule(ScopeBlock(steps=(BuildStep(5),)), 1))
        ['build of v5 is out of range (num_values=1)']
    """
    n = sched.num_values
    problems: list[str] = []
    built: dict[int, int] = {}  # value -> block number
    escapes: dict[int, list[int]] = {}
    blocks = sched.walk()
    anc_ids: list[set[int]] = []
    ids = {id(b): k for k, (b, _) in enumerate(blocks)}
    for k, (blk, anc) in enumerate(blocks):
        anc_ids.append({ids[id(a)] for a in anc})
        keys = [c.level.key for c in blk.blocks()]
        if len(set(keys)) != len(keys):
            problems.append(f"sibling blocks repeat a (depth, loop_slot, latitude): {keys}")
        for step in blk.steps:
            if isinstance(step, BuildStep):
                v = step.value_id
                if not 0 <= v < n:
                    problems.append(f"build of v{v} is out of range (num_values={n})")
                elif v in built:
                    problems.append(f"v{v} is built twice")
                else:
                    built[v] = k
        seen: set[int] = set()
        for v, _ in blk.outputs:
            if not 0 <= v < n:
                problems.append(f"output v{v} is out of range (num_values={n})")
                continue
            if v in seen:
                problems.append(f"v{v} is an output of one block twice")
            seen.add(v)
            escapes.setdefault(v, []).append(k)
    for v, sites in escapes.items():
        if v in built:
            b = built[v]
            for s in sites:
                if s != b and s not in anc_ids[b]:
                    problems.append(f"v{v} is built in one block and output by an unrelated one")
        for s in sites:
            for t in sites:
                if s < t and s not in anc_ids[t]:
                    problems.append(f"v{v} escapes from two blocks not on one nesting path")
    return problems


def well_formed(sched: OrderedSchedule) -> bool:
    """Whether ``sched`` satisfies every V2 structural rule (:func:`well_formed_violations`).

    Example:
        >>> well_formed(OrderedSchedule(ScopeBlock(steps=(BuildStep(0),)), 1))
        True
    """
    return not well_formed_violations(sched)


def crossings(
    sched: OrderedSchedule, root_values: Sequence[int] = ()
) -> dict[tuple[int, ...], tuple[int, ...]]:
    """Values that leave a loop block without an output entry there (invariant crossings).

    Keyed by the block's path (positions in ``steps``, from the root); the values are
    produced inside the block (by a ``BuildStep``, or raw at the deepest block that
    outputs them), read outside it — by a build, an output or, for ``root_values``
    (the results), the root — and not listed in its ``outputs``. The loop does not
    touch them: a lowering keeps the value of one iteration.

    Example:
        >>> from sq_jax.expr.nodes import Index
        >>> from sq_jax.plan import LoopKind
        >>> from sq_jax.schedule.ir import ScopeLevel
        >>> loop = ScopeBlock(Index("i", 1), ScopeLevel(1, "i", 0, 0), LoopKind.EXTERNAL,
        ...                   (BuildStep(1),))
        >>> sched = OrderedSchedule(ScopeBlock(steps=(loop, BuildStep(2))), 3, ((), (0,), (1,)))
        >>> crossings(sched), crossings(OrderedSchedule(ScopeBlock(), 0))
        ({(0,): (1,)}, {})
    """
    blocks: dict[tuple[int, ...], ScopeBlock] = {}
    producer: dict[int, tuple[int, ...]] = {}
    readers: dict[int, list[tuple[int, ...]]] = {}
    deepest_out: dict[int, tuple[int, ...]] = {}

    def read_by(v: int, path: tuple[int, ...]) -> None:
        for o in sched.operand_vids[v] if sched.operand_vids else ():
            readers.setdefault(o, []).append(path)

    stack: list[tuple[tuple[int, ...], ScopeBlock]] = [((), sched.root)]
    while stack:
        path, blk = stack.pop()
        blocks[path] = blk
        for k, s in enumerate(blk.steps):
            if isinstance(s, BuildStep):
                producer[s.value_id] = path
                read_by(s.value_id, path)
            else:
                stack.append(((*path, k), s))
        for v, _ in blk.outputs:
            if v not in deepest_out or len(path) > len(deepest_out[v]):
                deepest_out[v] = path
    for v, path in deepest_out.items():
        if v not in producer:  # no BuildStep: produced raw at its deepest escape
            producer[v] = path
            read_by(v, path)
    for v in root_values:
        readers.setdefault(v, []).append(())
    out: dict[tuple[int, ...], set[int]] = {}
    for v, ppath in producer.items():
        for rpath in readers.get(v, ()):
            common = 0
            while common < min(len(ppath), len(rpath)) and ppath[common] == rpath[common]:
                common += 1
            for depth in range(common + 1, len(ppath) + 1):  # blocks left on the way out
                if v not in {w for w, _ in blocks[ppath[:depth]].outputs}:
                    out.setdefault(ppath[:depth], set()).add(v)
    return {path: tuple(sorted(vs)) for path, vs in sorted(out.items())}
