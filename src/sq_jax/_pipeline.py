"""The compile driver: equations in, one jitted program out (one line per pass).

Example:
    >>> import numpy as np, sq_jax as sq
    >>> prog = compile("R{a1;i1} = f{a1;a2} t{a2;i1}", sq.Spaces(i=2, a=3), batch={"a": 2})
    >>> x = {"f{a;a}": np.eye(3), "t{a;i}": np.ones((3, 2))}
    >>> prog(x)["R"].tolist()
    [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ._errors import InputError, PlanError
from ._units import parse_bytes
from .budget import fit_to_budget
from .budget.structure import cheapest_structure
from .expr.nodes import Equation
from .expr.parse import parse
from .expr.spaces import Spaces
from .forest.build import build_forest
from .forest.inputs import input_specs
from .forest.nodes import Forest
from .lower.instructions import lower_schedule
from .lower.program import Program, make_program
from .lower.shard import make_shard_plan
from .plan.batch import BatchPlan, check_mode_order
from .schedule import ScheduledForest, schedule_forest

__all__ = ["BUDGET_PLANS_KEPT", "clear_budget_plans", "compile"]


def _user_plan(batch: BatchPlan | Mapping[str, Any] | None, forest: Forest) -> BatchPlan:
    """The caller's batch plan, checked strictly: nothing in it is silently ignored."""
    if batch is None:
        return BatchPlan()
    plan = batch if isinstance(batch, BatchPlan) else BatchPlan.of(batch)
    used = {ix.space for node in forest.distinct() for ix in node.indices}
    plan.resolved(forest.spaces, used)
    return plan


def _input_labels(forest: Forest, names: Collection[str]) -> frozenset[str]:
    """``names`` checked to be labels of the forest's inputs."""
    if isinstance(names, str):
        names = (names,)
    labels = {spec.label for spec in input_specs(forest)}
    unknown = sorted(set(names) - labels)
    if unknown:
        raise InputError(
            f"fixed_inputs {unknown} are not labels of the equations' inputs; expected some "
            f"of {sorted(labels)} (labels, such as 'g', not block keys)."
        )
    return frozenset(names)


def compile(
    equations: str | Sequence[Equation],
    spaces: Spaces,
    *,
    batch: BatchPlan | Mapping[str, Any] | None = None,
    remat: bool = False,
    mode_order: Sequence[str] = (),
    memory_budget: int | str | None = None,
    mesh: Any = None,
    devices: Sequence[Any] | None = None,
    outputs: Sequence[str] | None = None,
    dress: bool = False,
    pair_symmetry: bool = False,
    fixed_inputs: Collection[str] = (),
) -> Program:
    """Compile equations into one jit-compiled, differentiable, memory-bounded program.

    Args:
        equations: SeQuant text (one equation per line) or parsed equations.
        spaces: index spaces with extents, e.g. ``sq.Spaces(i=10, a=38)``.
        batch: the batch plan: ``None`` (unbatched), a mapping for
            :meth:`~sq_jax.plan.BatchPlan.of` such as ``{"a": 4}``, or a ``BatchPlan``.
            A mapping gives the counts (and roles); the loop structure
            (``external_modes``, ``hoist``) is then chosen: of those within 1.25x the
            fewest FLOPs, the one predicted to need the least memory
            (:func:`~sq_jax.budget.structure.cheapest_structure`; not with a ``mesh``).
            A ``BatchPlan`` is used as it is.
        remat: bounded reverse-mode memory: batches are recomputed in a backward pass
            written out over the loops (:mod:`sq_jax.lower.reverse`), one cotangent
            accumulator per array. A JVP then recomputes the forward program.
        mode_order: spaces, outermost loop first (a tie-break for the loop nesting).
        memory_budget: bytes (or text such as ``"2 GiB"``) for what the compiled program
            allocates — intermediates, XLA's operand copies, loop buffers and results, as
            predicted by ``program.memory_bytes`` with 25% headroom; inputs excluded: the
            cheapest batch plan that fits it (FLOPs plus a price per executed step) is chosen
            (:func:`~sq_jax.budget.plan_for_budget`; products whose contracted loops it
            does not need are kept whole, :mod:`sq_jax.budget.trim`), then compiled and
            held to XLA's own ``memory_analysis()`` for its input blocks, planning
            tighter while XLA measures over the budget
            (:func:`~sq_jax.budget.fit_to_budget`). Exclusive with ``batch``. The same
            request again in this process takes the plan chosen then, without searching
            (:data:`BUDGET_PLANS_KEPT`; :func:`clear_budget_plans`).
        mesh: a one-axis ``jax.sharding.Mesh``: the batches of the outermost loop of
            each nest are split over its devices (``docs/sharding.md``); inputs and
            results are replicated. ``None``: one device.
        devices: a list of devices to build that 1-D mesh from (exclusive with ``mesh``).
        outputs: the result labels the program returns, e.g. ``("R",)``; ``None`` (the
            default) returns every equation's result. A result read by a later equation
            and not in ``outputs`` stays internal: it is computed inside the trees that
            read it (batched and fused with them) and never materialised as an output.
        dress: fold shared inner sums into dressed factors where that saves FLOPs, at the
            price of larger intermediates (:func:`~sq_jax.forest.build.build_forest`).
        pair_symmetry: trust the symmetries the inputs declare (SeQuant's default
            annotation ``N-C-S`` makes every tensor column-symmetric:
            ``g{p,q;r,s} = g{q,p;s,r}``) and compute products over symmetric pairs of
            modes, such as CCSD's ladder, at a half or a quarter of the FLOPs
            (:mod:`sq_jax.lower.pairs`); derivatives stay exact in every direction.
            The results are wrong for inputs without their declared symmetries.
        fixed_inputs: labels of inputs that stay the same from call to call, such as
            the integrals of an amplitude solve, where the program is called through
            :meth:`~sq_jax.lower.program.Program.prepare`, which copies and packs them
            once: with ``pair_symmetry``, packing them is then priced as free.

    Returns:
        The :class:`~sq_jax.lower.program.Program`; call it with a dict of inputs.

    Raises:
        ParseError: bad equation text.
        ExpressionError: invalid tensor equations.
        PlanError: a batch plan that names unknown spaces or bad counts, or both
            ``batch`` and ``memory_budget`` given, a bad ``mesh``/``devices``, an
            unknown space in ``mode_order``, or ``outputs`` naming an unknown result.
        MemoryBudgetError: no plan fits ``memory_budget`` (the message gives the
            smallest feasible budget and the value that dominates the peak).
        ScheduleError: the batching cannot be expressed (the message names the value).
        InputError: ``fixed_inputs`` naming something that is not an input's label.

    Example:
        >>> import sq_jax as sq
        >>> prog = compile("E = f{i1;a1} t{a1;i1}", sq.Spaces(i=4, a=6), batch={"i": 2})
        >>> print(prog.schedule)
        schedule: 3 values (2 inputs), 1 loop blocks, 0 builds, 1 outputs
        root
          loop i#0 (i_1) depth 1 pass 0 Contracted x2
            output Sum v2 [] = (f{i_1;a_1} * t{a_1;i_1})
    """
    shard = make_shard_plan(mesh, devices)  # validate the mesh before any work
    eqs = parse(equations, spaces=spaces) if isinstance(equations, str) else tuple(equations)
    forest = build_forest(
        eqs, spaces, outputs=outputs, dress=dress
    )  # binarize + fold common subexpressions
    if pair_symmetry:
        forest = dataclasses.replace(forest, pair_symmetry=True)
    if fixed_inputs:
        forest = dataclasses.replace(forest, fixed_inputs=_input_labels(forest, fixed_inputs))
    mode_order = check_mode_order(mode_order, spaces)

    def build(plan: BatchPlan, scheduled: ScheduledForest | None = None) -> Program:
        if scheduled is None:
            scheduled = schedule_forest(forest, plan, mode_order=mode_order)  # annotate + schedule
        lowered = lower_schedule(scheduled)  # must follow the schedule: reads its block tree
        return make_program(scheduled, lowered, remat=remat, shard=shard)  # one jax.jit

    if memory_budget is None:
        plan = _user_plan(batch, forest)  # the user's batching (or none)
        if isinstance(batch, Mapping) and shard is None:
            # counts only: the leanest loop structure of about the fewest FLOPs
            return build(plan, cheapest_structure(forest, plan, mode_order=mode_order))
        return build(plan)
    if batch is not None:
        raise PlanError(
            f"got both batch={batch!r} and memory_budget={memory_budget!r}; pass one: "
            "batch= fixes the plan, memory_budget= lets sq_jax choose it."
        )
    # the planner's choice, held to XLA's own figures (tightened while it measures over);
    # the same request again in this process takes the plan it chose (the search and
    # XLA's checks are deterministic), and only builds it
    key = None
    if shard is None:
        key = (
            equations if isinstance(equations, str) else eqs,
            spaces,
            remat,
            mode_order,
            parse_bytes(memory_budget),
            None if outputs is None else tuple(outputs),
            dress,
            pair_symmetry,
            frozenset(fixed_inputs),
        )
        plan = _BUDGET_PLANS.get(key)
        if plan is not None:
            return build(plan)
    program = fit_to_budget(forest, memory_budget, build, widen=shard is None)
    if key is not None:
        while len(_BUDGET_PLANS) >= BUDGET_PLANS_KEPT:
            del _BUDGET_PLANS[next(iter(_BUDGET_PLANS))]  # the oldest first
        _BUDGET_PLANS[key] = program.schedule.annotated.plan
    return program


BUDGET_PLANS_KEPT = 64
"""Budgeted compiles whose plans this process remembers. A compile with the same
equations, spaces, options and ``memory_budget`` as one before takes the plan chosen
then: no search, no XLA check (both are deterministic for one process), only the build;
a CC calculation repeated at the same sizes (a scan over geometries, a notebook cell run
again) pays the planner once. ``clear_budget_plans`` forgets them."""

_BUDGET_PLANS: dict[tuple, BatchPlan] = {}


def clear_budget_plans() -> None:
    """Forget the plans budgeted compiles chose (the next ones search again).

    Example:
        >>> import sq_jax as sq
        >>> sq.clear_budget_plans()
        >>> len(_BUDGET_PLANS)
        0
    """
    _BUDGET_PLANS.clear()
