"""Why a budget cannot be met: the smallest feasible budget and what dominates it.

Example:
    >>> import sq_jax as sq
    >>> from sq_jax.plan import BatchPlan
    >>> from sq_jax.schedule import schedule_forest
    >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
    >>> required_bytes(schedule_forest(forest, BatchPlan()))
    250
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import replace

from .._errors import MemoryBudgetError
from .._units import format_bytes
from ..forest.dump import expr_text
from ..forest.nodes import NodeKind
from ..lower.instructions import lower_schedule
from ..lower.ir import LoweredProgram
from ..lower.memory import memory_model
from ..plan.batch import BatchPlan
from ..schedule import ScheduledForest
from ..schedule.peak import dag_path, peak_profile_sweep
from .model import XLA_HEADROOM, SearchPoint

__all__ = ["infeasible_error", "required_bytes", "with_counts"]


def _describe(sf: ScheduledForest, value_id: int) -> str:
    """A value as text: the result's name, or its expression (a sum chain by its size)."""
    for root, v in zip(sf.annotated.forest.roots, sf.rich.root_values, strict=False):
        if v == value_id:
            modes = ",".join(map(str, root.indices))
            return f"the result `{root.name}[{modes}]`"
    if value_id >= len(sf.rich.cells):  # made by the lowering: a part of a chained sum
        return f"a partial sum (v{value_id}) of a sum run in parts"
    node = sf.rich.cells[value_id].node
    if node is None:
        return f"value v{value_id}"
    terms = 1
    while node.kind is NodeKind.SUM and node.left is not None:
        terms, node = terms + 1, node.left
    text = f"`{expr_text(node, 100)}`"
    return text if terms == 1 else f"a sum of {terms} terms starting with {text}"


def required_bytes(sf: ScheduledForest, lowered: LoweredProgram | None = None) -> int:
    """The smallest ``memory_budget`` a scheduled forest fits in.

    The lowered program's predicted XLA memory (:func:`sq_jax.lower.memory.memory_model`)
    times :data:`XLA_HEADROOM` (the schedule's peak profile is not a bound:
    :meth:`~sq_jax.budget.model.BudgetModel.peak`). ``lowered``: ``sf`` lowered, where
    the caller has it (``lower_schedule(sf)``).

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.plan import BatchPlan
        >>> forest = sq.build_forest(sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1}"), sq.Spaces(i=2, a=4))
        >>> from sq_jax.schedule import schedule_forest
        >>> sf = schedule_forest(forest, BatchPlan())
        >>> sf.peak.peak_bytes, required_bytes(sf)  # 64 B + 64 B of alignment, +25%
        (64, 160)
    """
    xla = memory_model(lower_schedule(sf) if lowered is None else lowered).peak()
    return math.ceil(xla * XLA_HEADROOM)


def _dominant(sf: ScheduledForest) -> str:
    """The largest buffer live where the peak binds, as text."""
    model = memory_model(lower_schedule(sf))
    blocks = dict(model.blocks)
    at = model.binding(blocks)
    items = model.items_at(at, blocks)
    if not items:
        return "nothing (the peak is 0 bytes)"
    name, size = items[0]
    match = re.match(r"v(\d+)(.*)", name)
    what = name if match is None else _describe(sf, int(match.group(1))) + match.group(2)
    if match is not None and int(match.group(1)) in sf.rich.root_values:
        what += " (results are never batched in memory)"
    return (
        f"{what}: {format_bytes(size)} of the {format_bytes(model.peak(blocks))} the lowered "
        f"program holds there ({len(items)} buffer(s), while running {model.labels[at]})"
    )


def with_counts(sf: ScheduledForest, plan: BatchPlan) -> ScheduledForest:
    """``sf`` (scheduled for the same roles) re-priced with ``plan``'s batch counts.

    The structure of a schedule depends on which spaces are batched in which roles, not
    on the counts, so only the peak (block sizes) changes.
    """
    ann = replace(sf.annotated, plan=plan.resolved(sf.annotated.forest.spaces))
    return replace(sf, annotated=ann, peak=peak_profile_sweep(dag_path(sf.rich, ann)))


def infeasible_error(
    budget: int,
    floor: tuple[SearchPoint, ScheduledForest] | None,
    spaces: Sequence[str],
    all_spaces: Sequence[str],
    max_batches: int | None,
) -> MemoryBudgetError:
    """The error for a budget no plan fits: the smallest budget found and how to fix it.

    ``floor`` is the configuration and counts with the smallest peak seen (``None`` when
    no configuration could be scheduled).
    """
    if floor is None:
        return MemoryBudgetError(
            f"memory_budget={format_bytes(budget)} ({budget} bytes): no batch plan over "
            f"spaces {list(spaces)} could be scheduled. Fix: allow other spaces "
            "(spaces_allowed=None), or pass memory_budget=None to run unbatched."
        )
    point, sf = floor
    plan = point.config.plan(point.counts)
    sf = with_counts(sf, plan)
    need = required_bytes(sf)
    fixes = [f"raise the budget to memory_budget>={need} ({format_bytes(need)})"]
    others = [s for s in all_spaces if s not in spaces]
    if others:
        fixes.append(f"allow batching over {', '.join(f'`{s}`' for s in others)} (spaces_allowed)")
    if max_batches is not None:
        fixes.append(f"raise max_batches={max_batches}")
    err = MemoryBudgetError(
        f"memory_budget={format_bytes(budget)} ({budget} bytes) is below the memory of every "
        f"batch plan. The smallest found is {format_bytes(need)} ({need} bytes), with {plan}. "
        f"At its peak the largest buffer is {_dominant(sf)}. The budget counts what the "
        "program allocates (intermediates, operand copies, results, with "
        f"{XLA_HEADROOM:g}x headroom for XLA's buffer packing), not the inputs. "
        f"Fix: {'; or '.join(fixes)}."
    )
    err.requested = budget  # type: ignore[attr-defined]
    err.smallest_feasible = need  # type: ignore[attr-defined]
    err.plan = plan  # type: ignore[attr-defined]
    return err
