"""The loop structure of a plan given by its batch counts: near the fewest FLOPs.

A plan given as a mapping (``sq.compile(..., batch={"a": 2, "i": 2})``) says how finely
each space is cut. It does not say how many external loops a result opens per space
(``BatchPlan.external_modes``) or whether loop-invariant operands are built once before
the loops (``BatchPlan.hoist``). The defaults of :class:`~sq_jax.plan.BatchPlan` (a loop
per batched result index, nothing hoisted) hold the least memory, at any FLOP cost: they
rebuild a value for every batch of a loop whose index it does not carry, and with two
spaces cut that compounds (``bench/results/structure/``, ``ccsd_so`` at i = 10, a = 16,
pairs packed; XLA's temporaries + outputs, time per call):

====================  ================  ============  =================  ===========
counts                structure         FLOPs ÷ unb.  XLA memory ÷ unb.  time ÷ unb.
====================  ================  ============  =================  ===========
``{"a": 4, "i": 2}``  defaults          2316          0.37               10,794
``{"a": 4, "i": 2}``  first, invariant  1.40          0.63               5.3
``{"a": 2, "i": 2}``  defaults          56.8          0.51               152
``{"a": 2, "i": 2}``  first, invariant  1.40          0.79               3.9
``{"a": 4}``          defaults          1.81          0.39               4.9
``{"a": 4}``          first, none       1.20          0.50               3.1
====================  ================  ============  =================  ===========

:func:`cheapest_structure` prices the structures of :data:`STRUCTURES` for the caller's
counts as the budget planner prices a plan (FLOPs, recomputation included, plus
:func:`~sq_jax.budget.search.default_step_cost` per executed step). Those within
:data:`COST_TOLERANCE` of the cheapest are taken as equally fast, and of them the one
predicted to need the least memory (:func:`~sq_jax.budget.explain.required_bytes`, the
model ``memory_budget=`` is held to; ties keep the caller's) is compiled. A structure
predicted to need as much as the unbatched program is not a candidate (the caller's
own always is): batching is asked for to save memory. So counts given by hand never
cost much more than the best structure for them, and they keep the defaults wherever
those are about as cheap. The memory is then not the least possible for the counts (the
table: up to 0.28 of the unbatched program's more): a caller who needs that, at any FLOP
cost, passes ``BatchPlan.of(counts)``, which is compiled as it is; a caller with a hard
limit passes ``memory_budget=``, which is held to XLA's own figures.

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
from .model import cost_polynomials, evaluate
from .search import default_step_cost

__all__ = ["COST_TOLERANCE", "STRUCTURES", "cheapest_structure"]

STRUCTURES = (("all", "none"), ("all", "invariant"), ("first", "none"), ("first", "invariant"))
"""``(BatchPlan.external_modes, BatchPlan.hoist)`` pairs :func:`cheapest_structure`
chooses from; the first is :class:`~sq_jax.plan.BatchPlan`'s default. ``hoist="all"``
is left out: it also keeps whole the values read under two labelings, which costs about
the unbatched program's memory."""

COST_TOLERANCE = 1.25
"""Structures whose cost is at most this times the cheapest one's count as equally
cheap; of them, the least predicted memory wins. A margin for the cost model's own
error (a price per step, FLOPs that ignore the packed pairs of :mod:`sq_jax.lower.pairs`),
not a measured optimum."""


def _cost(sf: ScheduledForest, step_cost: float) -> float:
    """FLOPs plus ``step_cost`` per executed step, as the budget planner prices a plan."""
    extents = sf.annotated.forest.spaces
    batched = sf.annotated.plan.spaces
    flops, steps = cost_polynomials(sf, [s.space for s in batched])
    counts = [s.num_batches(extents.extent(s.space)) for s in batched]
    return evaluate(flops, counts) + step_cost * evaluate(steps, counts)


def cheapest_structure(
    forest: Forest,
    plan: BatchPlan,
    *,
    mode_order: Sequence[str] = (),
    step_cost: float | None = None,
) -> ScheduledForest:
    """``plan``'s counts under the leanest structure of about the fewest FLOPs.

    Args:
        forest: the eval forest (:func:`sq_jax.build_forest`).
        plan: the caller's counts and roles; its own ``external_modes`` and ``hoist``
            are one of the candidates, and win the ties.
        mode_order: as for :func:`~sq_jax.schedule.schedule_forest`.
        step_cost: FLOPs charged per executed step (default
            :func:`~sq_jax.budget.search.default_step_cost`).

    Returns:
        The scheduled forest of the structure chosen (module docstring): of the
        candidates predicted to need less than the unbatched program (``plan`` always
        is one), those whose cost is at most :data:`COST_TOLERANCE` times the cheapest
        one's; of them, the one with the least
        :func:`~sq_jax.budget.explain.required_bytes`.

    Raises:
        ScheduleError: when ``plan`` itself cannot be expressed (the others are then not
            tried: the error names the value of the caller's plan).

    Example:
        >>> import sq_jax as sq
        >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
        >>> str(cheapest_structure(forest, sq.BatchPlan.of({"a": 2})).annotated.plan)
        'BatchPlan(a: 2 batches [external, contracted])'
    """
    base = schedule_forest(forest, plan, mode_order=mode_order)
    if not plan.spaces or schedule_flops(base) <= forest.flops:
        return base  # nothing is rebuilt: no structure can save a FLOP
    price = default_step_cost() if step_cost is None else step_cost
    candidates = [(_cost(base, price), -1, base)]
    for rank, (modes, hoist) in enumerate(STRUCTURES):
        other = replace(plan, external_modes=modes, hoist=hoist)
        if other == plan:
            continue
        try:
            sf = schedule_forest(forest, other, mode_order=mode_order)
        except ScheduleError:
            continue  # this structure cannot express the counts: not a candidate
        candidates.append((_cost(sf, price), rank, sf))
    # priced in order of cost, so the memory model (a lowering each) runs only for the
    # structures that can still win, not for a costly default's deep nests
    candidates.sort(key=lambda c: c[:2])
    need: dict[int, int] = {}

    def memory(rank: int, sf: ScheduledForest) -> int:
        if rank not in need:
            need[rank] = required_bytes(sf)
        return need[rank]

    unbatched: list[int] = []

    def fits(rank: int, sf: ScheduledForest) -> bool:
        # batching is asked for to save memory: a structure predicted to need as much as
        # the unbatched program is no candidate (the caller's own always is)
        if rank == -1:
            return True
        if not unbatched:
            whole = schedule_forest(forest, BatchPlan(), mode_order=mode_order)
            unbatched.append(required_bytes(whole))
        return memory(rank, sf) < unbatched[0]

    cheapest = next(cost for cost, rank, sf in candidates if fits(rank, sf))
    near = [
        (rank, sf)
        for cost, rank, sf in candidates
        if cost <= COST_TOLERANCE * cheapest and fits(rank, sf)
    ]
    if len(near) == 1:
        return near[0][1]
    return min(near, key=lambda c: (memory(*c), c[0]))[1]
