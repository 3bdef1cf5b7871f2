"""Leave out the contracted loops a budgeted plan does not need.

A plan batches a space in the contracted role for every product summed over it
(:mod:`sq_jax.plan.annotate`, rule 2), though the budget binds in a few places only.
Each such loop costs beyond its FLOPs: its operands are sliced (and transposed) per
batch, its products are smaller, and its partial sums are added into an accumulator
(``n`` reads and writes of the result for ``n`` batches). In closed-shell CCSD at
benzene/cc-pVDZ sizes, time grew with the batch count at equal FLOPs: ``a`` in 2, 3, 5
and 8 batches ran 1.05, 1.11, 1.24 and 1.50x the unbatched time, with 2.0 to 7.2 GB
added into partial sums per call.

:func:`trim_contracted_loops` puts products in :attr:`BatchPlan.whole
<sq_jax.plan.batch.BatchPlan.whole>` (no contracted loop) while the plan still fits the
budget and needs no more than it did:
all products are tried together; then, ranked by the elements their loops accumulate,
those below ``1/HEAVY`` of the total as one group (left in their loops where it does
not fit), and the others one by one (the budget needs some of them: at benzene sizes, a
quarter of the memory, 7 of the 19 heavy ones) or, where the light group fitted, in
groups that double after each fit; at most :data:`MAX_TRIALS` schedules in all.
A trial is kept only where it adds no FLOPs by the plain count (no value recomputed
more) or by the program's (:func:`program_flops`: products over symmetric pairs at their
share). There, 29 of 36 products went whole: XLA's compile took 5.2-5.9 s instead of
9.2, a call 1.30x the unbatched time instead of 1.36x.

Example:
    >>> import sq_jax as sq
    >>> from sq_jax.budget import plan_for_budget
    >>> eqs = sq.parse("R{a1;i1} = g{a1,a2;i1,i2} t{a2;i2} + f{a1;a2} t{a2;i1}")
    >>> forest = sq.build_forest(eqs, sq.Spaces(i=20, a=100))
    >>> print(plan_for_budget(forest, "3 MB", spaces_allowed=["a"]))
    BatchPlan(a: 15 batches [contracted]; 1 product whole)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from .._errors import ScheduleError
from ..forest.nodes import Forest
from ..lower.instructions import lower_schedule
from ..lower.ir import Accumulate, Instr, Loop, LoweredProgram
from ..lower.pairs import pair_shares
from ..plan.annotate import LoopKind
from ..plan.batch import BatchPlan
from ..schedule import ScheduledForest, schedule_forest
from ..schedule.cost import schedule_flops
from .explain import required_bytes

__all__ = [
    "HEAVY",
    "MAX_TRIALS",
    "accumulated_elements",
    "heavy_products_only",
    "trim_contracted_loops",
]

MAX_TRIALS = 24
"""At most this many trial schedules per trim (each one schedules, lowers and prices the
whole program: about 0.04 s for closed-shell CCSD at benzene/cc-pVDZ sizes)."""

HEAVY = 100
"""A product whose loops accumulate at least ``1/HEAVY`` of all the elements is tried
alone; the others go in groups."""


def accumulated_elements(sf: ScheduledForest) -> dict[int, int]:
    """Elements each product's contracted loops add into partial sums per call.

    Keyed by the product's node hash; a loop of ``n`` batches inside loops run ``m``
    times adds ``n * m`` blocks of the product's result.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.plan import BatchPlan
        >>> forest = sq.build_forest(sq.parse("R{i1} = f{i1;a1} t{a1}"), sq.Spaces(i=3, a=4))
        >>> list(accumulated_elements(schedule_forest(forest, BatchPlan.of({"a": 2}))).values())
        [6]
    """
    cells = sf.rich.cells
    out: dict[int, int] = {}

    def visit(body: Sequence[Instr], blocks: dict, runs: int) -> None:
        for ins in body:
            if isinstance(ins, Loop):
                inner = {**blocks, ins.loop: ins.block}
                n = runs * ins.num_batches
                if ins.kind is LoopKind.CONTRACTED:
                    for value_id, dims in ins.sums:
                        node = cells[value_id].node
                        if node is not None:
                            size = math.prod(e if lp is None else inner[lp] for e, lp in dims)
                            out[node.hash] = out.get(node.hash, 0) + n * size
                visit(ins.body, inner, n)
            elif isinstance(ins, Accumulate):
                for term in ins.terms:
                    visit(term.body, blocks, runs)

    visit(lower_schedule(sf, sequence=False).body, {}, 1)
    return out


def program_flops(sf: ScheduledForest) -> int:
    """The FLOPs of ``sf``'s program: products over symmetric pairs at their share.

    What :attr:`Program.flops <sq_jax.lower.program.Program.flops>` counts. Making a
    product whole can change which products the lowering packs: closed-shell CCSD at
    benzene/cc-pVDZ sizes, a quarter of the memory, with 13 products whole instead of
    12 counts 861 kFLOP more than with every loop unpacked (of 191.7 GFLOP), but runs
    1.7% fewer (140.9 GFLOP of 143.3), and the trim keeps it.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.plan import BatchPlan
        >>> text = "R{a1,a2;i1,i2} = g{a1,a2;a3,a4} t{a3,a4;i1,i2}"
        >>> forest = sq.build_forest(sq.parse(text), sq.Spaces(i=3, a=40))
        >>> sf = schedule_forest(forest, BatchPlan())
        >>> program_flops(sf) == schedule_flops(sf)  # nothing packed without pair_symmetry
        True
    """
    return schedule_flops(sf, pair_shares(lower_schedule(sf)))


def _adds_flops(
    trial: ScheduledForest, plain: int, program: int
) -> tuple[bool, LoweredProgram | None]:
    """Whether ``trial`` adds FLOPs by both counts, and its lowering where one was made.

    ``plain`` and ``program`` are the plan's FLOPs without and with the packing
    (:func:`program_flops`). No FLOPs added by the plain count means nothing is
    recomputed more, though a product whole may lose its packing: spin-orbital CCSD at
    H2O/cc-pVDZ sizes, an eighth of the memory, 7 products whole ran 4.3-4.9x the
    unbatched time at 1.20x the FLOPs the program with every loop runs, the 6 whole
    that add none by the program's count 5.6-6.2x (a product packed in small blocks
    inside loops runs at a fraction of the whole product's rate). Only where the plain
    count rises is the trial lowered, to see whether the lowering packs more.
    """
    if schedule_flops(trial) <= plain:
        return False, None
    lowered = lower_schedule(trial)
    return schedule_flops(trial, pair_shares(lowered)) > program, lowered


def trim_contracted_loops(
    forest: Forest, sf: ScheduledForest, limit: int, need: int | None = None
) -> BatchPlan:
    """``sf``'s plan with the products whose contracted loops it can do without.

    Args:
        forest: the eval forest ``sf`` was scheduled from.
        sf: the chosen plan's schedule (its counts set).
        limit: the budget the plan was chosen for (as :func:`required_bytes` counts).
        need: ``required_bytes(sf)`` where the caller has it (else computed here).

    Returns:
        The plan with :attr:`~sq_jax.plan.batch.BatchPlan.whole` set: every trial kept
        needs at most ``limit`` and at most what ``sf`` needs, with at most ``sf``'s
        FLOPs by the plain count or by :func:`program_flops`. The plan itself when no
        product can go whole.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.plan import BatchPlan
        >>> eqs = sq.parse("R{a1;i1} = g{a1,a2;i1,i2} t{a2;i2} + f{a1;a2} t{a2;i1}")
        >>> forest = sq.build_forest(eqs, sq.Spaces(i=20, a=100))
        >>> plan = BatchPlan.of({"a": {"batches": 15, "roles": "contracted"}})
        >>> sf = schedule_forest(forest, plan)
        >>> trimmed = trim_contracted_loops(forest, sf, required_bytes(sf))
        >>> print(trimmed)
        BatchPlan(a: 15 batches [contracted]; 1 product whole)
        >>> required_bytes(schedule_forest(forest, trimmed)) <= required_bytes(sf)
        True
    """
    plan = sf.annotated.plan
    # never above the plan's own requirement: XLA held the untrimmed plans to the model
    # within a few percent, and a trim that filled the budget's headroom measured over it
    # (spin-orbital CCSD at H2O/cc-pVDZ sizes, a quarter of the memory: 4.2 MiB for 4.0)
    limit = min(limit, required_bytes(sf) if need is None else need)
    saved = accumulated_elements(sf)
    order = sorted(saved, key=lambda h: (-saved[h], h))
    plain, flops = schedule_flops(sf), program_flops(sf)
    trials = 0

    def fits(whole: Sequence[int]) -> bool:
        nonlocal trials
        trials += 1
        try:
            trial = schedule_forest(forest, replace(plan, whole=plan.whole | frozenset(whole)))
        except ScheduleError:
            return False
        adds, lowered = _adds_flops(trial, plain, flops)
        return not adds and required_bytes(trial, lowered) <= limit

    chosen: list[int] = []
    if order and fits(order):
        chosen.extend(order)
    else:
        total = sum(saved.values())
        # the light products together (most often one trial); where they do not fit, they
        # stay in their loops: halving the group spent the trials on products that save
        # little (benzene sizes, an eighth of the memory: 2% of the accumulated elements
        # in 24 trials, where the heavy ones one by one save 31%)
        light = [h for h in order if saved[h] * HEAVY < total]
        roomy = bool(light) and fits(light)
        if roomy:
            chosen.extend(light)
        # the heavy ones (the budget needs some) one by one; where the light group fitted
        # the budget has room and most of them fit too, so in groups that double after
        # each fit (after a group that does not fit, from one again): spin-orbital CCSD
        # at H2O/cc-pVDZ sizes, a quarter of the memory, kept the same 20 of 21 in 20
        # trials, 14 of them priced, instead of 23 and 21 (trials that add FLOPs, which
        # no trial of all 45 products does, cut many groups short)
        heavy = [h for h in order if saved[h] * HEAVY >= total]
        k, step = 0, 1
        while k < len(heavy) and trials < MAX_TRIALS:
            group = heavy[k : k + step]
            if fits([*chosen, *group]):
                chosen.extend(group)
                k += len(group)
                step = 2 * step if roomy else 1
            elif len(group) > 1:
                step = 1
            else:
                k += 1
    return replace(plan, whole=plan.whole | frozenset(chosen)) if chosen else plan


def heavy_products_only(forest: Forest, plan: BatchPlan) -> BatchPlan | None:
    """``plan`` with only its heavy products whole: the trim's second choice.

    A product is heavy when, with every loop in place, its contracted loops accumulate at
    least ``1/HEAVY`` of all the elements; the light ones save little time when whole.
    XLA may pack a trimmed plan's buffers less tightly than the memory model counts them:
    spin-orbital CCSD at H2O/cc-pVDZ sizes, a quarter of the memory, with 42 products
    whole measured 1.055x the budget (predicted 0.993x; one light product made the
    difference), the 18 heavy ones alone 0.988x and ran 4.8x the unbatched time, against
    8.9x with every loop (4.2x with all 42).
    :func:`~sq_jax.budget.fit_to_budget` tries this plan before the untrimmed one.

    Returns:
        The plan, or ``None`` when it would keep the same products whole as ``plan`` or
        none, or would run more FLOPs than ``plan`` with every loop by both the plain
        count and :func:`program_flops`.

    Example:
        >>> import sq_jax as sq
        >>> eqs = sq.parse("R{a1;i1} = g{a1,a2;i1,i2} t{a2;i2} + f{a1;a2} t{a2;i1}")
        >>> forest = sq.build_forest(eqs, sq.Spaces(i=20, a=100))
        >>> plan = BatchPlan.of({"a": {"batches": 15, "roles": "contracted"}})
        >>> trimmed = trim_contracted_loops(forest, schedule_forest(forest, plan), 10**9)
        >>> print(heavy_products_only(forest, trimmed))  # both products are heavy
        None
    """
    every_loop = schedule_forest(forest, replace(plan, whole=frozenset()))
    saved = accumulated_elements(every_loop)
    total = sum(saved.values())
    heavy = frozenset(h for h in plan.whole if saved.get(h, 0) * HEAVY >= total)
    if not heavy or heavy == plan.whole:
        return None
    lighter = replace(plan, whole=heavy)
    try:
        trial = schedule_forest(forest, lighter)
    except ScheduleError:
        return None
    adds, _ = _adds_flops(trial, schedule_flops(every_loop), program_flops(every_loop))
    return None if adds else lighter
