"""Run loops whose nests leave room under the budget in fewer, larger batches.

A plan cuts a space into one batch count, chosen for the nest where the memory binds;
every other loop of that space runs as many batches, though its nest would fit whole or
in a few batches. Each batch costs steps beyond its FLOPs (a loop iteration, the
slices of its operands, small products): spin-orbital CCSD at H2O/cc-pVDZ sizes, an
eighth of the memory, ``a`` in 19 batches of 2 in 45 loops, ran 12x the unbatched time
at 1.2x its FLOPs.

:func:`widen_loops` gives such loops blocks of their own
(:attr:`BatchPlan.loop_blocks <sq_jax.plan.batch.BatchPlan.loop_blocks>`) while the
memory model's peak stays within the budget and within the plan's own: the model is
built with every loop's block a variable of its own (:func:`~sq_jax.lower.memory.memory_model`
with ``per_loop``), so a loop's blocks are priced without lowering the program again.
The loops whose batches run the most steps go first, each at the largest block that
fits, divides its extent and leaves two batches at least; where a nest runs before a
result is made, the result's buffer counts beside it (XLA counts its outputs whole for
the whole program). Loops over block pairs keep their blocks (both loops of such a nest
share one). XLA has the last word: :func:`~sq_jax.budget.fit_to_budget` tries the
widened plan first, then the plan as it is.

Measured (``python bench/bench_large.py w3``, two runs): closed-shell CCSD at
benzene/cc-pVDZ sizes, an eighth of the memory, 24 of the plan's loops widened (``a`` in
3 batches instead of 6): 1.15-1.28x the unbatched time (1.37-1.48x before), at the same
XLA memory; a quarter of the memory, 9 loops: 1.07-1.08x (1.14-1.17x); spin-orbital
CCSD at H2O/cc-pVDZ sizes, an eighth, 30 loops: 6.3-7.2x (11.4-13.6x).

Example: :func:`widen_loops`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from .._errors import ScheduleError
from ..forest.nodes import Forest
from ..lower.instructions import lower_schedule
from ..lower.ir import Accumulate, Instr, Loop, LoweredProgram
from ..lower.memory import MemoryModel, Monomial, memory_model, monomial_value
from ..plan.batch import BatchPlan
from ..schedule import ScheduledForest, schedule_forest
from ..schedule.cost import schedule_flops
from ..schedule.ir import LoopId
from .explain import required_bytes
from .model import XLA_HEADROOM

__all__ = ["loop_steps", "widen_loops"]


def loop_steps(lowered: LoweredProgram) -> dict[LoopId, tuple[int, int]]:
    """Per loop, ``(runs, steps)``: how often it starts, and the steps one batch runs.

    A step is one instruction run once (a product, a sum, a term of a sequenced sum);
    a nested loop's steps are its batches' times its own.

    Example:
        >>> import sq_jax as sq
        >>> prog = sq.compile("R{a1;i1} = f{a1;a2} t{a2;i1}", sq.Spaces(i=2, a=4), batch={"a": 2})
        >>> print(prog.lowered)
        loop a#0 extent 4 block 2 External
          loop a#1 extent 4 block 2 Contracted
            v2 = gemm(ab,bc->ac) f{a;a}[0:a#0,1:a#1] t{a;i}[0:a#1]... sums v2... scatters v2@0
        result R = v2
        >>> sorted(loop_steps(prog.lowered).items())  # a#1 starts in each batch of a#0
        [(('a', 0), (1, 2)), (('a', 1), (2, 1))]
    """
    out: dict[LoopId, tuple[int, int]] = {}

    def steps(body: Sequence[Instr], runs: int) -> int:
        total = 0
        for ins in body:
            if isinstance(ins, Loop):
                inner = steps(ins.body, runs * ins.num_batches)
                before = out.get(ins.loop, (0, 0))
                out[ins.loop] = (before[0] + runs, max(before[1], inner))
                total += ins.num_batches * inner
            elif isinstance(ins, Accumulate):
                total += sum(1 + steps(term.body, runs) for term in ins.terms)
            else:
                total += 1
        return total

    steps(lowered.body, 1)
    return out


def widen_loops(
    forest: Forest, sf: ScheduledForest, limit: int, need: int | None = None
) -> BatchPlan:
    """``sf``'s plan with its loops in the largest batches the budget leaves room for.

    Args:
        forest: the eval forest ``sf`` was scheduled from.
        sf: the chosen plan's schedule.
        limit: the budget the plan was chosen for (as :func:`required_bytes` counts).
        need: ``required_bytes(sf)`` where the caller has it (else computed here).

    Returns:
        The plan with :attr:`~sq_jax.plan.batch.BatchPlan.loop_blocks` set, needing at
        most ``limit`` and at most what ``sf`` needs, with at most ``sf``'s FLOPs; the
        plan itself when no loop can run fewer batches.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.cc.equations import load_equations
        >>> from sq_jax.schedule import schedule_forest
        >>> forest = sq.build_forest(sq.parse(load_equations("ccd_so")), sq.Spaces(i=4, a=16))
        >>> sf = schedule_forest(forest, sq.BatchPlan.of({"a": 8}))  # blocks of 2
        >>> widened = widen_loops(forest, sf, required_bytes(sf))  # no more than the plan needs
        >>> print(widened)
        BatchPlan(a: 8 batches [external, contracted]; 9 loops in larger batches)
        >>> sorted({block for _, block in widened.loop_blocks})  # 2 or 4 batches of 16
        [4, 8]
        >>> required_bytes(schedule_forest(forest, widened)) <= required_bytes(sf)
        True
    """
    plan = sf.annotated.plan
    lowered = lower_schedule(sf)
    model = memory_model(lowered, per_loop=True)
    monos, coefs = model.totals()
    if not monos:
        return plan
    extents = dict(model.extents)
    blocks = dict(model.blocks)
    fixed = _fixed_loops(lowered)
    table = np.asarray(coefs, dtype=np.float64)  # monomial x point

    def value(mono: Monomial, at: dict[str, int]) -> float:
        return float(monomial_value(mono, at, extents))

    uses: dict[str, list[int]] = {}
    for m, (powers, cond) in enumerate(monos):
        for var in {v for v, _ in powers} | ({cond} if cond is not None else set()):
            uses.setdefault(var, []).append(m)
    values = np.array([value(m, blocks) for m in monos])
    profile = values @ table
    if need is None:  # required_bytes(sf), from the model at hand (the same peak)
        need = math.ceil(round(profile.max()) * XLA_HEADROOM)
    cap = min(limit, need)
    ceiling = cap / XLA_HEADROOM  # the model's own figure (required_bytes adds the headroom)
    # XLA counts its output buffers whole, for the whole program: at a point before a
    # result is made, a widened nest's buffers sit beside it (spin-orbital CCSD at
    # H2O/cc-pVDZ sizes, an eighth of the memory: a nest before R2 widened to the
    # plan's peak measured 1.12x it)
    room = ceiling - _outputs_not_made(lowered, model, blocks)
    steps = loop_steps(lowered)
    order = sorted(
        (lp for lp in steps if f"{lp[0]}#{lp[1]}" in blocks and lp not in fixed),
        key=lambda lp: (-steps[lp][0] * steps[lp][1] * _batches(extents, blocks, lp), lp),
    )
    own: dict[LoopId, int] = {}
    for lp in order:
        var = f"{lp[0]}#{lp[1]}"
        extent, block = extents[var], blocks[var]
        rows = uses.get(var, [])
        # two batches at least: XLA inlines a loop of one, and its scheduler then moves
        # the nest's buffers beside others (spin-orbital CCSD at H2O/cc-pVDZ sizes, an
        # eighth of the memory: 1.41x the model's figure); blocks that divide the
        # extent only: a smaller last batch runs after the loop (Loop.peel) and the
        # model missed those nests by up to 25% (closed-shell CCSD, benzene/cc-pVDZ
        # sizes, an eighth of the memory: 93 in blocks of 47)
        for count in range(2, -(-extent // block)):
            wider = -(-extent // count)
            if wider <= block:
                break
            if extent % wider:
                continue
            trial = {**blocks, var: wider}
            new = np.array([value(monos[m], trial) for m in rows])
            changed = profile + (new - values[rows]) @ table[rows]
            raised = changed > profile
            if changed.max() <= ceiling and not (changed[raised] > room[raised]).any():
                blocks, profile = trial, changed
                values[rows] = new
                own[lp] = wider
                break
    if not own:
        return plan
    widened = replace(plan, loop_blocks=frozenset(own.items()))
    try:
        check = schedule_forest(forest, widened)
    except ScheduleError:
        return plan
    if required_bytes(check) > cap or schedule_flops(check) > schedule_flops(sf):
        return plan  # the lowering at these blocks differs from the model's (peeled batches)
    return widened


def _outputs_not_made(
    lowered: LoweredProgram, model: MemoryModel, blocks: dict[str, int]
) -> np.ndarray:
    """Per point of ``model``, the bytes of results whose buffers are not live there.

    A result's buffer is its value's, or the buffer a loop's adds start from and build it
    in (``LoopAdd.start``, along the chain).
    """
    results = {r.read.value_id for r in lowered.results if r.read.input_key is None}
    adds = [add for lp in lowered.loops() for add in lp.adds if add.start is not None]
    grown = True
    while grown:
        more = {add.start for add in adds if add.value_id in results} - results
        results |= more  # type: ignore[arg-type]
        grown = bool(more)
    total = sum(8 * math.prod(e for e, _ in r.read.dims) for r in lowered.results)
    out = np.empty(len(model.points))
    for k in range(len(model.points)):
        live = 0
        for name, size in model.items_at(k, blocks):
            match = re.match(r"v(\d+) ", name)
            if name.startswith("result ") or (match and int(match[1]) in results):
                live += size
        out[k] = max(total - live, 0)
    return out


def _batches(extents: dict[str, int], blocks: dict[str, int], loop: LoopId) -> int:
    var = f"{loop[0]}#{loop[1]}"
    return -(-extents[var] // blocks[var])


def _fixed_loops(lowered: LoweredProgram) -> set[LoopId]:
    """Loops that keep their blocks: both loops of every nest over block pairs."""
    out: set[LoopId] = set()
    for lp in lowered.loops():
        nest = lp.block_pair_nest
        if nest is not None:
            out |= {lp.loop, nest[0].loop}
    return out
