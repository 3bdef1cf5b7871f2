"""A deterministic, readable text dump of an ordered schedule.

:func:`dump_schedule` prints the block tree with, for every loop block, its space, slot,
pass, kind and batch count, and for every step and output the value's modes and
expression. The same input always gives the same text, byte for byte (the golden files
in ``tests/golden/schedule`` rely on it).

Example:
    >>> from sq_jax.schedule.ir import OrderedSchedule, ScopeBlock
    >>> from sq_jax.schedule.rich import RichSchedule
    >>> print(dump_schedule(OrderedSchedule(ScopeBlock(), 0), RichSchedule((), 0)))
    schedule: 0 values (0 inputs), 0 loop blocks, 0 builds, 0 outputs
    root
"""

from __future__ import annotations

from ..forest.dump import expr_text
from ..plan.annotate import AnnotatedForest
from .ir import BuildStep, OrderedSchedule, ScopeBlock
from .rich import RichSchedule

__all__ = ["dump_schedule"]


def _value(rich: RichSchedule, v: int, width: int) -> str:
    cell = rich.cells[v]
    modes = ",".join(map(str, cell.carried))
    text = expr_text(cell.node, width) if cell.node is not None else f"#{cell.key:x}"
    return f"v{v} [{modes}] = {text}"


def dump_schedule(
    sched: OrderedSchedule,
    rich: RichSchedule,
    ann: AnnotatedForest | None = None,
    *,
    width: int = 100,
) -> str:
    """Render ``sched`` as indented text.

    Args:
        sched: the ordered schedule.
        rich: the rich schedule it was built from (names the values).
        ann: the annotated forest; when given, each loop shows its batch count.
        width: longest expression text per value before it is cut.

    Returns:
        The dump, one line per block, step and output (no trailing newline).

    Example:
        >>> from sq_jax.schedule.ir import BuildStep
        >>> from sq_jax.schedule.rich import RichSchedule
        >>> print(dump_schedule(OrderedSchedule(ScopeBlock(), 0), RichSchedule((), 0), width=10))
        schedule: 0 values (0 inputs), 0 loop blocks, 0 builds, 0 outputs
        root
    """
    n_blocks = n_builds = n_outs = 0
    lines: list[str] = []
    stack: list[tuple[ScopeBlock | str, int]] = [(sched.root, 0)]
    while stack:
        item, depth = stack.pop()
        pad = "  " * depth
        if isinstance(item, str):
            lines.append(pad + item)
            continue
        blk = item
        if blk.is_root:
            lines.append("root")
        else:
            n_blocks += 1
            lv = blk.level
            count = f" x{ann.num_batches(blk.axis)}" if ann is not None and blk.axis else ""
            lines.append(
                f"{pad}loop {lv.space}#{lv.loop_slot} ({blk.axis}) depth {lv.depth} "
                f"pass {lv.latitude} {blk.kind}{count}"
            )
        pending: list[tuple[ScopeBlock | str, int]] = []
        for step in blk.steps:
            if isinstance(step, BuildStep):
                n_builds += 1
                pending.append((f"build {_value(rich, step.value_id, width)}", depth + 1))
            else:
                pending.append((step, depth + 1))
        for v, kind in blk.outputs:
            n_outs += 1
            pending.append((f"output {kind} {_value(rich, v, width)}", depth + 1))
        stack.extend(reversed(pending))
    inputs = sum(1 for c in rich.cells if c.is_leaf)
    head = (
        f"schedule: {sched.num_values} values ({inputs} inputs), {n_blocks} loop blocks, "
        f"{n_builds} builds, {n_outs} outputs"
    )
    return "\n".join([head, *lines])
