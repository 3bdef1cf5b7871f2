"""Hold a budgeted program to XLA's own memory figures, tightening the plan if it is over.

:func:`~sq_jax.budget.plan_for_budget` prices plans with the static model of
:mod:`sq_jax.lower.memory` plus :data:`~sq_jax.budget.XLA_HEADROOM`. The model does not
see how XLA packs its heap: with many small loops XLA's temporaries can exceed it
(measured 1.35x the prediction for spin-orbital CCSD at i=10, a=16 with ``a`` in 2
contracted batches and ``i`` in 5 external batches opened at the top). A budget is a
promise to the user, so :func:`fit_to_budget` checks the chosen program with XLA
itself: it compiles the program for the input blocks its forest reads (float64
placeholders of their shapes: no data is needed) and reads ``memory_analysis()``. The
first plan it tries is the cheapest the model fits *without* the headroom: the check
is the arbiter, and those plans can be much faster (spin-orbital CCSD, H2O/cc-pVDZ at a
quarter of its memory: ``a`` in 6 external batches, 1.5-1.9x the unbatched time, where
the headroom chose a plan at 3.0-5.5x). Over the budget, it plans for that first target
scaled by ``budget / measured`` (where that is looser than the headroom), then with the
headroom, then, while XLA's temporaries + outputs still exceed the budget, for the
budget scaled by ``budget / measured``. A failed try costs one more XLA compile (the planner's
schedules are reused: :class:`~sq_jax.budget.search.PlanCache`). Each plan is tried
first with the loops its nests leave room for in larger blocks
(:func:`~sq_jax.budget.widen.widen_loops`): measured over the budget far beyond the
model's usual miss (:data:`TRIM_MISS`), the plan with its space's blocks follows; within
it, that plan (the same predicted peak) is not measured. A plan the model
predicts well inside the budget (:data:`LIKELY_FIT`) is compiled for running, and the
executable kept by the program: a later call with exactly those blocks (as the CC
drivers pass them) runs it without compiling again. One predicted close to the budget
is measured with a compile that only reads XLA's figures (:func:`xla_bytes`'s
``measure_only``: LLVM's lowest optimization, the same buffers, 2-4x faster), and
compiled for running at its first call: a plan measured over the budget then costs a
third of a compile.

Each step is logged to the ``sq_jax.budget`` logger (:mod:`logging`, level ``INFO``):
every search with its target, plan and seconds, every XLA figure with its plan, its
share of the budget, the model's prediction and the seconds its compile took, and the
plan kept. ``logging.basicConfig(level=logging.INFO)`` prints them: where a budgeted
``sq.compile`` spends its time (spin-orbital CCSD at H2O/cc-pVDZ sizes, an eighth of the
memory: five XLA figures beside the search).

Known limitation: programs over a device mesh are not checked (their figures are per
device), and a backend without ``memory_analysis()`` is taken at the model's word (with
its headroom: the first try is skipped there).

Example:
    >>> import sq_jax as sq
    >>> from sq_jax._pipeline import compile as compile_program
    >>> prog = compile_program(
    ...     "R{a1;i1} = f{a1;a2} t{a2;i1}", sq.Spaces(i=50, a=400), memory_budget="600 KiB"
    ... )
    >>> xla_bytes(prog) <= 600 * 1024
    True
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import jax
import numpy as np

from .._errors import MemoryBudgetError
from .._units import format_bytes, parse_bytes
from ..forest.inputs import input_specs
from ..forest.nodes import Forest
from ..lower.aot import measure_options
from ..lower.program import Program
from ..plan.batch import BatchPlan
from ..schedule import schedule_forest
from .model import XLA_HEADROOM
from .search import PlanCache, plan_for_budget
from .trim import heavy_products_only
from .widen import widen_loops

__all__ = ["BudgetSteps", "budget_steps", "fit_to_budget", "xla_bytes"]

_log = logging.getLogger("sq_jax.budget")


@dataclass
class BudgetSteps:
    """The steps of the budgeted compiles made while :func:`budget_steps` listened."""

    searches: list[float] = field(default_factory=list)
    """Seconds of each plan search (:func:`~sq_jax.budget.plan_for_budget`)."""
    figures: list[float] = field(default_factory=list)
    """Seconds of each compile that read XLA's memory figures (:func:`xla_bytes`)."""

    @property
    def seconds(self) -> float:
        """The searches and XLA's figures together: what fitting the budget took."""
        return sum(self.searches) + sum(self.figures)


class _Listener(logging.Handler):
    def __init__(self, steps: BudgetSteps, show: Callable[[str], None] | None) -> None:
        super().__init__(logging.INFO)
        self.steps, self.show = steps, show

    def emit(self, record: logging.LogRecord) -> None:
        seconds = getattr(record, "sq_jax_seconds", None)
        kind = getattr(record, "sq_jax_step", None)
        if seconds is not None:
            (self.steps.searches if kind == "plan" else self.steps.figures).append(seconds)
        if self.show is not None:
            self.show(record.getMessage())


@contextlib.contextmanager
def budget_steps(show: Callable[[str], None] | None = None) -> Iterator[BudgetSteps]:
    """Listen to :func:`fit_to_budget`'s log (``sq_jax.budget``) for the duration.

    Args:
        show: called with each step's message as it happens (``print``, say); by default
            the steps are only recorded.

    Yields:
        The :class:`BudgetSteps`, filled while the block runs.

    Example:
        >>> import sq_jax as sq
        >>> with budget_steps() as steps:
        ...     prog = sq.compile("R{a1;i1} = g{a1,a2;i1,i2} t{a2;i2}", sq.Spaces(i=20, a=100),
        ...                       memory_budget="1 MiB")
        >>> len(steps.searches) >= 1 and len(steps.figures) >= 1 and steps.seconds > 0
        True
    """
    steps = _Listener(BudgetSteps(), show)
    level = _log.level
    _log.addHandler(steps)
    _log.setLevel(logging.INFO)
    try:
        yield steps.steps
    finally:
        _log.removeHandler(steps)
        _log.setLevel(level)


MAX_ATTEMPTS = 6
"""Plans tried (the second at the first's target, the rest each tighter than the last)
before the budget is declared infeasible."""

_MARGIN = 0.97
"""Tighten a little beyond the measured ratio: XLA's figures move in steps."""

TRIM_MISS = 1.15
"""A plan with products kept whole that XLA measures over the budget is followed by its
fallbacks (:func:`_plan_and_fallbacks`) only where XLA measured it above this times the
model's prediction: XLA then packed the trimmed plan its own way, and the fallbacks
can fit (spin-orbital CCSD at H2O/cc-pVDZ sizes, a quarter of the memory: 1.27x the
prediction with 42 products whole, 0.86 of the budget with the 18 heavy ones). Within
the model's usual miss, the fallbacks measured no better: 1.077 of the budget with 5
products whole and with the heavy ones (1.08x the prediction, an eighth of the
memory), 1.082 and 1.016 at benzene/cc-pVDZ sizes (1.10x); the next plan at the same
target is tried instead."""

LIKELY_FIT = 0.9
"""A plan the model predicts at most this share of the budget is compiled for running
when XLA measures it (it will most likely be kept: XLA measured W3's chosen plans at
0.99-1.12x their predictions); closer to the budget, it is measured with
:func:`~sq_jax.lower.aot.measure_options` (2-4x faster to compile) and compiled for
running at its first call only if it fits. Three of W3's four first plans, predicted at
0.965-0.997 of their budgets, measured over them."""


def xla_bytes(program: Program, *, measure_only: bool = False) -> int | None:
    """XLA's temporaries + outputs of ``program`` for its input blocks (``None``: unknown).

    Args:
        program: a compiled :class:`~sq_jax.lower.program.Program` without a mesh.
        measure_only: compile with :func:`~sq_jax.lower.aot.measure_options` (the same
            figures, compiled 2-4x faster) and keep nothing; by default the executable
            a call with those blocks runs is compiled, and kept by the program.

    Returns:
        ``temp_size_in_bytes + output_size_in_bytes`` of the executable a call with the
        forest's input blocks runs, or ``None`` when the backend does not report them.

    Example:
        >>> import sq_jax as sq
        >>> prog = sq.compile("R{a1;i1} = f{a1;a2} t{a2;i1}", sq.Spaces(i=50, a=400))
        >>> xla_bytes(prog), xla_bytes(prog, measure_only=True)  # the 400 x 50 result
        (160000, 160000)
    """
    blocks = {
        spec.block_key: jax.ShapeDtypeStruct(spec.shape, np.float64)
        for spec in input_specs(program.schedule.annotated.forest)
    }
    options = measure_options() if measure_only else None
    if options is None:
        executable = program.aot.compiled(blocks)
    else:
        executable = program.aot.lowered(blocks).compile(options)
    stats = executable.memory_analysis()
    if stats is None:
        return None
    return int(stats.temp_size_in_bytes + stats.output_size_in_bytes)


def fit_to_budget(
    forest: Forest,
    budget: int | str,
    build: Callable[[BatchPlan], Program],
    *,
    widen: bool = True,
) -> Program:
    """The program of the cheapest plan whose XLA memory fits ``budget``.

    Args:
        forest: the eval forest to plan.
        budget: bytes (or text such as ``"2 GiB"``) for XLA's temporaries + outputs.
        build: makes the program of a plan (schedule, lower, jit).
        widen: first try each plan with its loops widened where their nests leave room
            (:func:`~sq_jax.budget.widen.widen_loops`); ``sq.compile`` leaves it out
            for a program over a device mesh, whose root loops are split over devices.

    Returns:
        The program; ``xla_bytes(program) <= budget`` where XLA reports its figures.

    Raises:
        MemoryBudgetError: no plan fits (from the planner, or, when the planner's plans
            all measure over the budget in XLA, naming the last plan and its figures).

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax._pipeline import compile as compile_program
        >>> text = "R{a1;i1} = g{a1,a2;i1,i2} t{a2;i2}"  # unbatched: a 32 MB copy of g
        >>> prog = compile_program(text, sq.Spaces(i=20, a=100), memory_budget="1 MiB")
        >>> str(prog.schedule.annotated.plan), xla_bytes(prog) <= 2**20
        ('BatchPlan(a: 34 batches [external])', True)
    """
    limit = parse_bytes(budget)
    # First the model's own figure, without its headroom: XLA's check below is the
    # arbiter, and the cheaper plans it admits ran 2x faster (spin-orbital CCSD, H2O at a
    # quarter of its memory). Over the budget, the same target without the plans
    # measured over, then that target scaled by what XLA measured, the usual headroom,
    # then tighter. Plans measured over are never planned again.
    first = math.floor(limit * XLA_HEADROOM)
    tried: list[tuple[int, Program]] = []  # (XLA bytes, program) of every plan over it
    built: dict[BatchPlan, Program] = {}
    over: set[BatchPlan] = set()
    target = limit
    cache = PlanCache()  # each new target only searches the counts again
    figures: dict[str, int | None] = {}  # XLA's figure per lowered program, as text
    for attempt in range(MAX_ATTEMPTS):
        if attempt == 0:
            target = first
        elif attempt == 1 and tried:
            # the same target, without the plans XLA measured over: the model ranks, XLA
            # decides (spin-orbital CCSD at H2O/cc-pVDZ sizes, 1/8 of its memory: the
            # cheapest plan measured 1.08x the budget, the next one 0.97x at 1.22x the
            # unbatched FLOPs, where the scaled target below chose 2.30x)
            pass
        elif attempt == 2 and tried:
            # tightened by what XLA measured, while that is looser than the headroom
            # (closed-shell CCSD at benzene/cc-pVDZ sizes, 1/8 of its memory: XLA 1.08x
            # the budget; with the headroom the plan cost 3.2x the unbatched FLOPs)
            target = max(limit, int(first * limit / tried[-1][0] * _MARGIN))
        elif target > limit or not tried:
            target = limit
        else:
            target = int(target * limit / tried[-1][0] * _MARGIN)
        try:
            exclude = {replace(p, whole=frozenset(), loop_blocks=frozenset()) for p in over}
            start = time.perf_counter()
            plan = plan_for_budget(forest, target, cache=cache, exclude=exclude)
            seconds = time.perf_counter() - start
            _log.info(
                "planned %s for %s in %.2f s",
                plan,
                format_bytes(target),
                seconds,
                extra={"sq_jax_step": "plan", "sq_jax_seconds": seconds},
            )
        except MemoryBudgetError as err:
            if attempt == 0:
                continue  # nothing fits even by the model alone: the usual headroom says why
            if not tried:
                raise
            raise _over_budget(limit, tried, err) from err
        # a plan with products kept whole (budget/trim.py), then, where XLA measures
        # it over, the same plan with its heavy products whole, then with all its loops:
        # the model held them all under the target, but XLA packs a trimmed plan's
        # buffers its own way (spin-orbital CCSD at H2O/cc-pVDZ sizes, a quarter of the
        # memory: 4.2 MiB for 4.0 with 42 products whole, 3.9 with the 18 heavy ones or
        # with none; its memory-usage report holds the same large buffers either way)
        plain_over: set[BatchPlan] = set()  # plans whose widened twin measured over
        for each in _plan_and_fallbacks(forest, plan, target if widen else None):
            if each in over or each in plain_over:
                continue  # measured over the budget already (or its widened twin was)
            if each not in built:  # a mesh program's first try is built, never measured
                built[each] = build(each)
            program = built[each]
            measured = None
            if program.mesh is None:
                # another plan may lower to a program measured already (hoisting nothing
                # that loops cut, say): its figure stands, with no second compile
                text = str(program.lowered)
                if text not in figures:
                    unsure = program.memory_bytes > LIKELY_FIT * limit
                    start = time.perf_counter()
                    figures[text] = xla_bytes(program, measure_only=unsure)
                    _measured(program, figures[text], limit, time.perf_counter() - start)
                measured = figures[text]
            if measured is None and attempt == 0:
                break  # unchecked: only the model with its headroom is taken at its word
            if measured is None or measured <= limit:
                _log.info("kept %s", program.schedule.annotated.plan)
                return program
            tried.append((measured, program))
            over.add(each)
            usual_miss = measured <= TRIM_MISS * program.memory_bytes
            base = replace(each, loop_blocks=frozenset())
            if each.loop_blocks and usual_miss:
                # the model's usual miss: the plan with its space's blocks, at the same
                # predicted peak, measured the same (spin-orbital CCSD at H2O/cc-pVDZ
                # sizes, an eighth of the memory: 1.077 of the budget either way)
                plain_over.add(base)
            if base == plan and each.whole and usual_miss:
                break  # its fallbacks are no better (TRIM_MISS)
    raise _over_budget(limit, tried, None)  # the second try always builds: tried is full


def _measured(program: Program, measured: int | None, limit: int, seconds: float) -> None:
    """Log one XLA figure (``sq_jax.budget``, ``INFO``)."""
    figure = "unknown" if measured is None else format_bytes(measured)
    share = "" if measured is None else f" ({measured / limit:.3f} of the budget)"
    _log.info(
        "XLA: %s measured %s%s, predicted %s, in %.2f s",
        program.schedule.annotated.plan,
        figure,
        share,
        format_bytes(program.memory_bytes),
        seconds,
        extra={"sq_jax_step": "xla", "sq_jax_seconds": seconds},
    )


def _plan_and_fallbacks(
    forest: Forest, plan: BatchPlan, widen_to: int | None
) -> Iterator[BatchPlan]:
    """``plan``, then with only its heavy products whole, then with none: each widened first.

    The widened plans where ``widen_to`` is given (the target the plan was chosen for) and
    a loop widens (:func:`~sq_jax.budget.widen.widen_loops`); then, where XLA measures
    one over, the plan with its space's blocks. Each is made only when asked for (one
    more schedule), the fallbacks only when ``plan`` keeps products whole.
    """

    def and_widened(each: BatchPlan) -> Iterator[BatchPlan]:
        if widen_to is not None:
            widened = widen_loops(forest, schedule_forest(forest, each), widen_to)
            if widened.loop_blocks:
                yield widened
        yield each

    yield from and_widened(plan)
    if plan.whole:
        heavy = heavy_products_only(forest, plan)
        if heavy is not None:
            yield from and_widened(heavy)
        yield from and_widened(replace(plan, whole=frozenset()))


def _over_budget(
    limit: int, tried: list[tuple[int, Program]], cause: MemoryBudgetError | None
) -> MemoryBudgetError:
    measured, program = min(tried, key=lambda item: item[0])
    plans = "; ".join(
        f"{p.schedule.annotated.plan} measured {format_bytes(m)} "
        f"(predicted {format_bytes(p.memory_bytes)})"
        for m, p in tried
    )
    err = MemoryBudgetError(
        f"memory_budget={format_bytes(limit)}: every plan the memory model fits measures "
        f"over the budget in XLA's own figures (temporaries + outputs): {plans}. Fix: "
        f"raise memory_budget to at least {format_bytes(measured)}, or pass batch= with a "
        "plan of your own."
        + (f"\nThe planner at the tightened budget: {cause}" if cause is not None else "")
    )
    err.requested = limit  # type: ignore[attr-defined]
    err.smallest_feasible = measured  # type: ignore[attr-defined]
    err.plan = program.schedule.annotated.plan  # type: ignore[attr-defined]
    return err
