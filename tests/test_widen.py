"""Loops in blocks of their own (``BatchPlan.loop_blocks``) and the pass that widens them.

Checked against the unbatched program (the einsum oracle is tested against it
elsewhere), the memory model's own pricing at the plain blocks, and the schedule's FLOPs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import jax
import numpy as np
import pytest

import sq_jax as sq
from sq_jax.budget.explain import required_bytes
from sq_jax.budget.widen import loop_steps, widen_loops
from sq_jax.cc.equations import load_equations
from sq_jax.forest.symmetry import symmetric_random_inputs
from sq_jax.lower.instructions import lower_schedule
from sq_jax.lower.memory import memory_model
from sq_jax.lower.program import make_program
from sq_jax.plan.annotate import LoopKind
from sq_jax.schedule import schedule_forest
from sq_jax.schedule.cost import schedule_flops

SPACES = sq.Spaces(i=4, a=12)


def _forest(name: str = "ccsd_so", spaces: sq.Spaces = SPACES, pairs: bool = True):
    forest = sq.build_forest(sq.parse(load_equations(name)), spaces)
    return dataclasses.replace(forest, pair_symmetry=pairs)


def _program(forest, plan: sq.BatchPlan):
    sf = schedule_forest(forest, plan)
    return make_program(sf, lower_schedule(sf))


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k])))) for k in a)


def _inputs(forest):
    return {k: jax.numpy.asarray(v) for k, v in symmetric_random_inputs(forest, 3).items()}


PLAN = sq.BatchPlan.of({"a": 6}, external_modes="first", sums="sequenced")


def _loops(forest, plan):
    return lower_schedule(schedule_forest(forest, plan)).loops()


def test_own_blocks_give_the_unbatched_results():
    # every loop, contracted and external, in blocks of 4 and 6 (3 and 2 batches of 12)
    forest = _forest()
    loops = _loops(forest, PLAN)
    kinds = {lp.kind for lp in loops}
    assert kinds == {LoopKind.CONTRACTED, LoopKind.EXTERNAL}
    own = frozenset((lp.loop, 4 if k % 2 else 6) for k, lp in enumerate(loops))
    widened = _program(forest, replace(PLAN, loop_blocks=own))
    blocks = {lp.loop: lp.block for lp in widened.lowered.loops()}
    assert all(blocks[loop] == block for loop, block in own)
    assert all(lp.own_block for lp in widened.lowered.loops())
    x = _inputs(forest)
    unbatched = _program(forest, sq.BatchPlan())
    assert _max_diff(widened(x), unbatched(x)) < 1e-12


def test_own_blocks_with_uneven_last_batches_and_gradients():
    # blocks of 5 over 12 elements: a smaller last batch in every widened loop
    forest = _forest("ccd_so", pairs=False)
    loops = _loops(forest, PLAN)
    own = frozenset((lp.loop, 5) for lp in loops[::2])
    widened = _program(forest, replace(PLAN, loop_blocks=own))
    plain = _program(forest, sq.BatchPlan())
    x = _inputs(forest)
    assert _max_diff(widened(x), plain(x)) < 1e-12

    def energy_like(program, t2):
        out = program({**x, "t{a,a;i,i}": t2})
        return jax.numpy.sum(out["R2"] ** 2)

    t2 = x["t{a,a;i,i}"]
    g_wide = jax.grad(lambda t: energy_like(widened, t))(t2)
    g_plain = jax.grad(lambda t: energy_like(plain, t))(t2)
    assert float(np.max(np.abs(g_wide - g_plain))) < 1e-10


def test_memory_model_prices_an_own_block_apart_from_its_space():
    forest = _forest()
    loops = _loops(forest, PLAN)
    first = loops[0]
    widened = lower_schedule(
        schedule_forest(forest, replace(PLAN, loop_blocks=frozenset({(first.loop, 6)})))
    )
    model = memory_model(widened)
    # the own loop is a variable of its own, kept when the space is priced at other sizes
    assert dict(model.fixed) == {f"a#{first.loop[1]}": 6}
    assert dict(model.blocks)["a"] == 2
    # with every loop a variable, the same program at the same blocks: the same figures
    per_loop = memory_model(widened, per_loop=True)
    assert per_loop.peak() == model.peak()
    assert per_loop.profile() == model.profile()
    # and the plain program's model at block 2 prices the loop at 2 again
    plain = memory_model(lower_schedule(schedule_forest(forest, PLAN)))
    per_loop_plain = memory_model(lower_schedule(schedule_forest(forest, PLAN)), per_loop=True)
    assert per_loop_plain.profile() == plain.profile()
    blocks = {**dict(per_loop_plain.blocks), f"a#{first.loop[1]}": 6}
    assert per_loop_plain.profile(blocks) == model.profile()


def test_widen_keeps_the_peak_and_the_flops_and_cuts_the_steps():
    forest = _forest("ccsd_so", sq.Spaces(i=4, a=16))
    plan = sq.BatchPlan.of({"a": 8}, external_modes="first", sums="sequenced")
    sf = schedule_forest(forest, plan)
    need = required_bytes(sf)
    widened = widen_loops(forest, sf, need)
    assert widened.loop_blocks, "nothing widened: the test needs a plan with room"
    assert str(widened).endswith(f"{len(widened.loop_blocks)} loops in larger batches)")
    wsf = schedule_forest(forest, widened)
    assert required_bytes(wsf) <= need
    assert schedule_flops(wsf) <= schedule_flops(sf)
    for _, block in widened.loop_blocks:
        assert 16 % block == 0 and 2 <= 16 // block < 8  # even blocks, two batches or more

    def total(lowered):
        steps = loop_steps(lowered)
        batches = {lp.loop: lp.num_batches for lp in lowered.loops()}
        return sum(runs * batches[lp] * k for lp, (runs, k) in steps.items())

    assert total(lower_schedule(wsf)) < total(lower_schedule(sf))
    x = _inputs(forest)
    assert _max_diff(_program(forest, widened)(x), _program(forest, plan)(x)) < 1e-12


def test_widen_leaves_a_plan_without_room_alone():
    forest = _forest("ccsd_so", sq.Spaces(i=4, a=16))
    plan = sq.BatchPlan.of({"a": 8}, external_modes="first", sums="sequenced")
    sf = schedule_forest(forest, plan)
    # a cap below the plan's own need: no loop may grow
    assert widen_loops(forest, sf, required_bytes(sf) // 2) == plan


def test_widening_recomputation_lowers_the_flops():
    # a product inside a loop it does not depend on is made once per batch of it: in
    # one batch fewer, it is made fewer times (the counts follow the loop's own blocks)
    forest = _forest("ccsd_so", pairs=False)
    plan = sq.BatchPlan.of({"a": 6})
    sf = schedule_forest(forest, plan)
    loops = lower_schedule(sf).loops()
    own = frozenset((lp.loop, 6) for lp in loops)
    wsf = schedule_forest(forest, replace(plan, loop_blocks=own))
    with_two = schedule_forest(forest, sq.BatchPlan.of({"a": 2}))
    assert schedule_flops(wsf) == schedule_flops(with_two) < schedule_flops(sf)


def test_budgeted_compile_keeps_a_widened_plan_within_budget():
    # closed-shell CCSD at a quarter of its memory: XLA confirms a widened plan
    spaces = sq.Spaces(i=4, a=16)
    forest = _forest("ccsd_cs", spaces)
    text = load_equations("ccsd_cs")
    unbatched = sq.compile(text, spaces, pair_symmetry=True)
    x = _inputs(forest)
    stats = unbatched.memory_analysis(x)
    budget = (stats.temp_size_in_bytes + stats.output_size_in_bytes) // 4
    prog = sq.compile(text, spaces, pair_symmetry=True, memory_budget=budget)
    assert prog.schedule.annotated.plan.loop_blocks
    stats = prog.memory_analysis(x)
    assert stats.temp_size_in_bytes + stats.output_size_in_bytes <= budget
    assert _max_diff(prog(x), unbatched(x)) < 1e-12


@pytest.mark.parametrize(
    "bad",
    [{(("a", 0), 0)}, {("a", 3)}, frozenset({(("a", "0"), 2)}), {((1, 0), 2)}],
)
def test_bad_loop_blocks_are_refused(bad):
    with pytest.raises(sq.PlanError, match="loop_blocks must be a frozenset"):
        sq.BatchPlan(loop_blocks=frozenset(bad) if not isinstance(bad, frozenset) else bad)


def test_a_loop_the_schedule_lacks_is_named():
    forest = _forest()
    plan = replace(PLAN, loop_blocks=frozenset({(("a", 999), 4)}))
    with pytest.raises(sq.PlanError, match=r"names loop\(s\) a#999 that the schedule"):
        _program(forest, plan)


@pytest.mark.parametrize("miss", [2.0, 1.0])
def test_fit_to_budget_tries_the_widened_plan_then_the_plain_one(monkeypatch, miss):
    # XLA "measures" the widened first try over the budget: far above its prediction
    # (2x), the same plan with its space's blocks comes next and fits; within the
    # model's usual miss (TRIM_MISS), that plan would measure the same: it is skipped
    from functools import partial

    from sq_jax.budget import verify

    forest = _forest("ccsd_so", SPACES)
    budget = verify.xla_bytes(_program(forest, sq.BatchPlan())) // 4
    seen = []

    def over_once(program, measure_only=False):
        seen.append(program.schedule.annotated.plan)
        if len(seen) == 1:
            return max(budget + 1, round(miss * program.memory_bytes))
        return budget - 1

    monkeypatch.setattr(verify, "xla_bytes", over_once)
    prog = verify.fit_to_budget(forest, budget, partial(_program, forest))
    assert len(seen) == 2 and seen[0].loop_blocks
    plain = replace(seen[0], loop_blocks=frozenset())
    assert (seen[1] == plain) == (miss > verify.TRIM_MISS)
    assert prog.schedule.annotated.plan == seen[1]
    seen.clear()
    verify.fit_to_budget(forest, budget, partial(_program, forest), widen=False)
    assert not seen[0].loop_blocks
