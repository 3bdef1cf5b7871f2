"""The scheduler's driver: place the loops, run the passes in order, keep every stage.

Example:
    >>> import sq_jax as sq
    >>> from sq_jax.plan import BatchPlan
    >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
    >>> sf = schedule_forest(forest, BatchPlan.of({"a": 2}))
    >>> type(sf.rich).__name__, type(sf.ordered).__name__
    ('RichSchedule', 'OrderedSchedule')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..forest.nodes import Forest
from ..plan.annotate import AnnotatedForest, annotate
from ..plan.batch import BatchPlan
from .dump import dump_schedule
from .ir import OrderedSchedule
from .legality import LegalitySchedule, analyze_legality
from .ordered import build_ordered_schedule
from .peak import PeakProfile, dag_path, peak_profile_sweep
from .rich import RichSchedule, build_rich_schedule

__all__ = ["ScheduledForest", "ordered_schedule", "schedule_annotated", "schedule_forest"]


@dataclass(frozen=True, slots=True)
class ScheduledForest:
    """Every stage of scheduling one forest (what a lowering needs)."""

    annotated: AnnotatedForest
    """The forest with its loop openings (and the resolved plan)."""
    rich: RichSchedule
    """Values, occurrences (with per-position loop slots) and loop instances."""
    legality: LegalitySchedule
    """Per-value loop roles."""
    ordered: OrderedSchedule
    """The block tree."""
    peak: PeakProfile
    """Static peak of the intermediates (inputs excluded)."""

    def dump(self) -> str:
        """The readable text dump of the ordered schedule (:func:`dump_schedule`)."""
        return dump_schedule(self.ordered, self.rich, self.annotated)

    def __str__(self) -> str:
        return self.dump()


def schedule_annotated(
    annotated: AnnotatedForest, *, mode_order: Sequence[str] = ()
) -> ScheduledForest:
    """Schedule a forest whose loops were placed already (e.g. by hand).

    Example:
        >>> from sq_jax.expr.spaces import Spaces
        >>> empty = AnnotatedForest(Forest((), Spaces()), BatchPlan())
        >>> schedule_annotated(empty).ordered.num_values
        0
    """
    rich = build_rich_schedule(annotated)
    legality = analyze_legality(rich, annotated)  # must follow rich: it classifies its cells
    ordered = build_ordered_schedule(rich, legality, mode_order)  # places values by role
    peak = peak_profile_sweep(dag_path(rich, annotated))
    return ScheduledForest(annotated, rich, legality, ordered, peak)


def schedule_forest(
    forest: Forest, plan: BatchPlan, *, mode_order: Sequence[str] = ()
) -> ScheduledForest:
    """Place the plan's loops on ``forest`` and schedule it, keeping every stage.

    Args:
        forest: the eval forest (:func:`sq_jax.build_forest`).
        plan: the batch plan.
        mode_order: spaces, outermost first (a tie-break for the loop nesting).

    Returns:
        Every stage; ``.ordered`` is the schedule.

    Raises:
        PlanError: the plan names an unknown space.
        ScheduleError: (a subclass, :mod:`sq_jax._errors`) the batching
            cannot be expressed.

    Example:
        >>> import sq_jax as sq
        >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
        >>> schedule_forest(forest, BatchPlan.of({"a": 2})).peak.peak_bytes
        8
    """
    return schedule_annotated(annotate(forest, plan), mode_order=mode_order)


def ordered_schedule(
    forest: Forest, plan: BatchPlan, *, mode_order: Sequence[str] = ()
) -> OrderedSchedule:
    """The ordered schedule of ``forest`` under ``plan`` (see :func:`schedule_forest`).

    Example:
        >>> import sq_jax as sq
        >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
        >>> print(ordered_schedule(forest, BatchPlan()))
        root
          build v2
    """
    return schedule_forest(forest, plan, mode_order=mode_order).ordered
