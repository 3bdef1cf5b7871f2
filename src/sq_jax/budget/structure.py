"""The loop structure of a plan given by its batch counts: the cheapest one no larger.

A plan given as a mapping (``sq.compile(..., batch={"a": 2, "i": 2})``) says how finely
each space is cut. It does not say how many external loops a result opens per space
(``BatchPlan.external_modes``) or whether loop-invariant operands are built once before
the loops (``BatchPlan.hoist``). The defaults of :class:`~sq_jax.plan.BatchPlan` (a loop
per batched result index, nothing hoisted) have the smallest static peak, but they can
rebuild a value for every batch of a loop whose index it does not carry:

=======================================  ============  ===========  =========
``ccsd_so``, i = 10, a = 16, ``a: 2, i: 2``  FLOPs ÷ unb.  static peak  predicted
=======================================  ============  ===========  =========
defaults                                 40.3          0.61 MB      3.92 MB
``hoist="invariant"``                    1.14          0.82 MB      2.18 MB
… and ``external_modes="first"``         1.03          0.87 MB      2.77 MB
=======================================  ============  ===========  =========

The predicted figure is what the compiled program allocates
(:func:`~sq_jax.budget.explain.required_bytes`, the measure ``memory_budget=`` is held
to): the rebuilt values' operand copies and loop buffers cost more than the hoisted
values do. :func:`cheapest_structure` prices the four structures of
:data:`STRUCTURES` for the caller's counts, as the budget planner prices a plan (FLOPs,
recomputation included, plus :func:`~sq_jax.budget.search.default_step_cost` per
executed step), and keeps the cheapest whose predicted memory is at most the defaults'.
So a plan given by its counts never needs more memory than the defaults would, and
often needs far fewer FLOPs. A :class:`~sq_jax.plan.BatchPlan` given whole is kept as it
is: its fields are the caller's choice.

Example:
    >>> import sq_jax as sq
    >>> from sq_jax.cc.equations import load_equations
    >>> forest = sq.build_forest(sq.parse(load_equations("ccsd_so")), sq.Spaces(i=10, a=16))
    >>> sf = cheapest_structure(forest, sq.BatchPlan.of({"a": 2, "i": 2}))
    >>> want = sq.BatchPlan.of({"a": 2, "i": 2}, external_modes="first", hoist="invariant")
    >>> sf.annotated.plan == want
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .._errors import ScheduleError
from ..forest.nodes import Forest
from ..plan.batch import BatchPlan
from ..schedule import ScheduledForest, schedule_forest
from ..schedule.cost import schedule_flops
from .explain import required_bytes
from .model import step_terms

__all__ = ["STRUCTURES", "cheapest_structure"]

STRUCTURES = (("all", "none"), ("all", "invariant"), ("first", "none"), ("first", "invariant"))
"""``(BatchPlan.external_modes, BatchPlan.hoist)`` pairs :func:`cheapest_structure`
chooses from; the first is :class:`~sq_jax.plan.BatchPlan`'s default. ``hoist="all"``
is left out: it also keeps whole the values read under two labelings, which costs about
the unbatched program's memory."""


def _cost(sf: ScheduledForest, step_cost: float) -> float:
    """FLOPs plus ``step_cost`` per executed step, as the budget planner prices a plan."""
    plan = sf.annotated.plan
    extents = sf.annotated.forest.spaces
    counts = {s.space: s.num_batches(extents.extent(s.space)) for s in plan.spaces}
    spaces = tuple(counts)
    steps = 0
    for exps, coefficient in step_terms(sf, spaces).items():
        term = coefficient
        for space, e in zip(spaces, exps, strict=True):
            term *= counts[space] ** e
        steps += term
    return schedule_flops(sf) + step_cost * steps


def cheapest_structure(
    forest: Forest,
    plan: BatchPlan,
    *,
    mode_order: Sequence[str] = (),
    step_cost: float | None = None,
) -> ScheduledForest:
    """``plan``'s counts under the cheapest structure whose memory is at most ``plan``'s.

    Args:
        forest: the eval forest (:func:`sq_jax.build_forest`).
        plan: the caller's counts and roles; its ``external_modes`` and ``hoist`` are
            the reference the others must not exceed in memory.
        mode_order: as for :func:`~sq_jax.schedule.schedule_forest`.
        step_cost: FLOPs charged per executed step (default
            :func:`~sq_jax.budget.search.default_step_cost`).

    Returns:
        The scheduled forest of the chosen plan (``plan`` itself when no other structure
        is cheaper at no more memory; ties keep ``plan``).

    Raises:
        ScheduleError: when ``plan`` itself cannot be expressed (the others are then not
            tried: the error names the value of the caller's plan).

    Example:
        >>> import sq_jax as sq
        >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
        >>> str(cheapest_structure(forest, sq.BatchPlan.of({"a": 2})).annotated.plan)
        'BatchPlan(a: 2 batches [external, contracted])'
    """
    from .search import default_step_cost  # search imports this module's neighbours

    base = schedule_forest(forest, plan, mode_order=mode_order)
    if not plan.spaces or schedule_flops(base) <= forest.flops:
        return base  # nothing is rebuilt: no structure can save a FLOP
    price = default_step_cost() if step_cost is None else step_cost
    base_cost = _cost(base, price)
    cheaper: list[tuple[float, int, ScheduledForest]] = []
    for rank, (modes, hoist) in enumerate(STRUCTURES):
        other = replace(plan, external_modes=modes, hoist=hoist)
        if other == plan:
            continue
        try:
            sf = schedule_forest(forest, other, mode_order=mode_order)
        except ScheduleError:
            continue  # this structure cannot express the counts: not a candidate
        cost = _cost(sf, price)
        if cost < base_cost:
            cheaper.append((cost, rank, sf))
    if not cheaper:
        return base
    limit = required_bytes(base)
    for _, _, sf in sorted(cheaper, key=lambda c: c[:2]):
        if required_bytes(sf) <= limit:
            return sf
    return base
