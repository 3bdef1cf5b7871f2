"""Contracted loops a budgeted plan does without (budget/trim.py, ``BatchPlan.whole``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import sq_jax as sq
from sq_jax._errors import PlanError
from sq_jax.budget import plan_for_budget, required_bytes, trim, verify
from sq_jax.cc.equations import load_equations
from sq_jax.forest.inputs import input_specs
from sq_jax.forest.symmetry import symmetric_random_inputs
from sq_jax.lower.instructions import lower_schedule
from sq_jax.lower.ir import Loop
from sq_jax.lower.program import make_program
from sq_jax.plan import BatchPlan, LoopKind, SpaceBatch, annotate
from sq_jax.schedule import schedule_forest
from sq_jax.schedule.cost import schedule_flops

TWO_PRODUCTS = "R{a1;i1} = g{a1,a2;i1,i2} t{a2;i2} + f{a1;a2} t{a2;i1}"


def _contracted_loops(prog: sq.Program) -> int:
    return sum(lp.kind is LoopKind.CONTRACTED for lp in prog.lowered.loops())


def _adds_no_flops(trimmed, untrimmed) -> bool:
    """What a trim keeps: no FLOPs added by the plain count or by the program's."""
    return schedule_flops(trimmed) <= schedule_flops(untrimmed) or trim.program_flops(
        trimmed
    ) <= trim.program_flops(untrimmed)


def test_a_whole_product_opens_no_contracted_loop():
    forest = sq.build_forest(sq.parse(TWO_PRODUCTS), sq.Spaces(i=3, a=5))
    plan = BatchPlan.of({"a": {"batches": 2, "roles": "contracted"}})
    summed = [
        occ
        for occ, opens in annotate(forest, plan).opens
        if any(o.kind is LoopKind.CONTRACTED for o in opens)
    ]
    assert len(summed) == 2  # both products sum over a_2
    sums = forest.roots[0].node
    products = [sums.left, sums.right]
    for k, product in enumerate(products):
        whole = replace(plan, whole=frozenset([product.hash]))
        left = [
            occ
            for occ, opens in annotate(forest, whole).opens
            if any(o.kind is LoopKind.CONTRACTED for o in opens)
        ]
        assert len(left) == 1, k
        assert str(whole).endswith("; 1 product whole)")
        rng = np.random.default_rng(k)
        inputs = {s.block_key: rng.standard_normal(s.shape) for s in input_specs(forest)}
        got = sq.compile(TWO_PRODUCTS, sq.Spaces(i=3, a=5), batch=whole)(inputs)
        want = sq.evaluate_reference(forest, None, inputs)
        np.testing.assert_allclose(np.asarray(got["R"]), want["R"], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("bad", [{1, 2}, frozenset({"x"}), frozenset({True}), (1,)])
def test_whole_must_be_a_frozenset_of_node_hashes(bad):
    with pytest.raises(PlanError, match="whole must be a frozenset of node hashes"):
        BatchPlan(whole=bad)


def test_accumulated_elements_count_every_batch_of_every_enclosing_loop():
    # R{i1,i2} = f{i1;a1} g{a1;i2}, R is 4 x 4: a in 3 batches adds 3 whole results; with
    # i1 also cut in 2 external batches around it, 2 x 3 halves of R: the same elements
    text, spaces = "R{i1;i2} = f{i1;a1} g{a1;i2}", sq.Spaces(i=4, a=6)
    forest = sq.build_forest(sq.parse(text), spaces)
    summed = BatchPlan.of({"a": {"batches": 3, "roles": "contracted"}})
    nested = BatchPlan.of(
        {"a": {"batches": 3, "roles": "contracted"}, "i": 2}, external_modes="first"
    )
    outer, inner = sq.compile(text, spaces, batch=nested).lowered.loops()
    assert (outer.kind, inner.kind) == (LoopKind.EXTERNAL, LoopKind.CONTRACTED)
    assert (outer.num_batches, inner.num_batches) == (2, 3)
    for plan in (summed, nested):
        (elements,) = trim.accumulated_elements(schedule_forest(forest, plan)).values()
        assert elements == 3 * 4 * 4


@pytest.fixture(scope="module")
def closed_shell():
    spaces = sq.Spaces(i=4, a=9)
    text = load_equations("ccsd_cs")
    base = sq.compile(text, spaces, pair_symmetry=True)
    forest = base.schedule.annotated.forest
    inputs = symmetric_random_inputs(forest, seed=3, scale=0.05)
    return text, spaces, forest, base, inputs


def test_the_planner_keeps_products_whole_within_the_budget(closed_shell, monkeypatch):
    text, spaces, forest, base, inputs = closed_shell
    limit = required_bytes(base.schedule) // 4
    trials = []
    real = trim.schedule_forest
    monkeypatch.setattr(trim, "schedule_forest", lambda *a, **k: trials.append(1) or real(*a, **k))
    plan = plan_for_budget(forest, limit, extended=False)  # the extended phases: seconds more
    assert plan.whole and 0 < len(trials) <= trim.MAX_TRIALS
    full = replace(plan, whole=frozenset())
    trimmed_sf, full_sf = schedule_forest(forest, plan), schedule_forest(forest, full)
    assert required_bytes(trimmed_sf) <= limit
    assert _adds_no_flops(trimmed_sf, full_sf)
    assert sum(trim.accumulated_elements(trimmed_sf).values()) < sum(
        trim.accumulated_elements(full_sf).values()
    )
    prog = sq.compile(text, spaces, batch=plan, pair_symmetry=True)
    untrimmed = sq.compile(text, spaces, batch=full, pair_symmetry=True)
    assert _contracted_loops(prog) < _contracted_loops(untrimmed)
    # program_flops counts as the program does (packed products at their share)
    assert (prog.flops, untrimmed.flops) == tuple(map(trim.program_flops, (trimmed_sf, full_sf)))
    got, want = prog(inputs), base(inputs)
    for name in want:
        np.testing.assert_allclose(
            np.asarray(got[name]), np.asarray(want[name]), rtol=1e-12, atol=1e-13
        )


def test_a_trim_never_leaves_the_budget(closed_shell):
    # at the plan's own requirement (no slack) only products that cost no memory go
    text, spaces, forest, _, _ = closed_shell
    plan = BatchPlan((SpaceBatch("a", batches=3),), external_modes="first", sums="sequenced")
    sf = schedule_forest(forest, plan)
    need = required_bytes(sf)
    for limit in (need, need + need // 10):
        trimmed = trim.trim_contracted_loops(forest, sf, limit)
        assert required_bytes(schedule_forest(forest, trimmed)) <= limit
        assert _adds_no_flops(schedule_forest(forest, trimmed), sf)
    # never above the plan's own requirement, however large the budget
    generous = trim.trim_contracted_loops(forest, sf, 10**15)
    assert generous.whole <= frozenset(trim.accumulated_elements(sf))
    assert required_bytes(schedule_forest(forest, generous)) <= need
    everything = replace(plan, whole=frozenset(trim.accumulated_elements(sf)))
    assert not any(
        lp.kind is LoopKind.CONTRACTED
        for lp in sq.compile(text, spaces, batch=everything, pair_symmetry=True).lowered.loops()
        if isinstance(lp, Loop)
    )


def test_fit_to_budget_takes_the_untrimmed_plan_where_xla_measures_the_trimmed_over(
    monkeypatch,
):
    forest = sq.build_forest(sq.parse(TWO_PRODUCTS), sq.Spaces(i=20, a=100))
    budget = 1_600_000  # the first try, 1.25x: `a` in 25 batches, f t whole
    # XLA "measures" every trimmed plan over the budget
    prog, seen = _fit_where_xla_measures_over(monkeypatch, forest, budget, lambda p: p.whole)
    first, second = seen[:2]
    assert first.whole and second == replace(first, whole=frozenset())
    assert not prog.schedule.annotated.plan.whole and verify.xla_bytes(prog) <= budget


def _fit_where_xla_measures_over(monkeypatch, forest, budget, over):
    """``fit_to_budget`` where XLA "measures" the plans ``over`` selects at twice the
    budget (far above their predictions: a trimmed one's fallbacks follow); the program
    and every plan measured, in order."""
    real, seen = verify.xla_bytes, []

    def measured(program, measure_only=False):
        plan = program.schedule.annotated.plan
        seen.append(plan)
        return 2 * budget if over(plan) else real(program, measure_only=measure_only)

    monkeypatch.setattr(verify, "xla_bytes", measured)

    def build(plan):
        scheduled = schedule_forest(forest, plan)
        return make_program(scheduled, lower_schedule(scheduled))

    # widen=False: no widened twin before each plan (tests/test_widen.py)
    prog = verify.fit_to_budget(forest, budget, build, widen=False)
    monkeypatch.setattr(verify, "xla_bytes", real)
    return prog, seen


# a third product summed over `a` whose result is a scalar: its loop accumulates 25 elements
# in 25 batches, the other two 50,000 each
WITH_A_LIGHT_PRODUCT = TWO_PRODUCTS + " + x{a1;i1} y{;a3} u{a3}"


def test_heavy_products_only_drops_the_light_products():
    forest = sq.build_forest(sq.parse(WITH_A_LIGHT_PRODUCT), sq.Spaces(i=20, a=100))
    plan = BatchPlan.of({"a": {"batches": 25, "roles": "contracted"}})
    every_loop = schedule_forest(forest, plan)
    saved = trim.accumulated_elements(every_loop)
    assert sorted(saved.values()) == [25, 50_000, 50_000]  # 25 batches of 1 or of 20 x 100
    light = min(saved, key=saved.get)
    both = replace(plan, whole=frozenset(saved))
    heavy = trim.heavy_products_only(forest, both)
    assert heavy == replace(plan, whole=frozenset(saved) - {light})
    # nothing to drop: all heavy, or only light ones whole
    assert trim.heavy_products_only(forest, heavy) is None
    assert trim.heavy_products_only(forest, replace(plan, whole=frozenset({light}))) is None
    ref = sq.compile(WITH_A_LIGHT_PRODUCT, sq.Spaces(i=20, a=100))
    x = symmetric_random_inputs(forest, seed=3)
    got = sq.compile(WITH_A_LIGHT_PRODUCT, sq.Spaces(i=20, a=100), batch=heavy)(x)
    np.testing.assert_allclose(got["R"], ref(x)["R"], rtol=0, atol=1e-12)


def test_fit_to_budget_keeps_the_heavy_products_whole_where_xla_measures_the_light_over(
    monkeypatch,
):
    forest = sq.build_forest(sq.parse(WITH_A_LIGHT_PRODUCT), sq.Spaces(i=20, a=100))
    budget = 1_600_000  # the first try, 1.25x: `a` in 25 contracted batches, 2 products whole
    saved = trim.accumulated_elements(schedule_forest(forest, BatchPlan.of({"a": 25})))
    light = min(saved, key=saved.get)
    # XLA "measures" a plan with the light product whole over the budget
    prog, seen = _fit_where_xla_measures_over(
        monkeypatch, forest, budget, lambda plan: light in plan.whole
    )
    first, second = seen[:2]
    assert light in first.whole and len(first.whole) == 2  # and one heavy product
    assert second == replace(first, whole=first.whole - {light})
    assert prog.schedule.annotated.plan == second and verify.xla_bytes(prog) <= budget


# one light product (25 accumulated elements) and ten heavy ones (50,000 each)
TEN_HEAVY = "R{a1;i1} = x{a1;i1} y{;a3} u{a3}" + "".join(
    f" + P{name}{{a1;a2}} Q{name}{{a2;i1}}" for name in "bcdefhklmn"
)


@pytest.mark.parametrize("bad_at", [0, 7])
def test_with_room_the_heavy_products_go_whole_in_doubling_groups(monkeypatch, bad_at):
    forest = sq.build_forest(sq.parse(TEN_HEAVY), sq.Spaces(i=20, a=100))
    sf = schedule_forest(forest, BatchPlan.of({"a": {"batches": 25, "roles": "contracted"}}))
    saved = trim.accumulated_elements(sf)
    heavy = sorted((h for h in saved if saved[h] > 25), key=lambda h: (-saved[h], h))
    assert len(heavy) == 10 and len(saved) == 11
    bad = heavy[bad_at]  # every set with this product whole "needs" more than the budget
    real, tried = trim.required_bytes, []

    def required(trial, lowered=None):
        whole = trial.annotated.plan.whole
        tried.append(whole)
        return 10**12 if bad in whole else real(trial)

    monkeypatch.setattr(trim, "required_bytes", required)
    trimmed = trim.trim_contracted_loops(forest, sf, 10**11, need=10**11)
    # what one trial per heavy product keeps, in fewer trials: all of them together, the
    # light one, then groups of 1, 2, 4 ... (after a group that does not fit, from 1 again)
    assert trimmed.whole == frozenset(saved) - {bad}
    assert len(tried) == {0: 7, 7: 9}[bad_at] < 2 + len(heavy)
    assert [len(w) for w in tried[:3]] == [11, 1, 2]
    x = symmetric_random_inputs(forest, seed=5)
    got = sq.compile(TEN_HEAVY, sq.Spaces(i=20, a=100), batch=trimmed)(x)
    want = sq.compile(TEN_HEAVY, sq.Spaces(i=20, a=100))(x)
    np.testing.assert_allclose(got["R"], want["R"], rtol=0, atol=1e-12)


def test_a_trim_keeps_a_product_whole_that_adds_flops_unpacked_where_the_program_runs_fewer():
    # closed-shell CCSD at benzene/cc-pVDZ sizes, `a` in 3 contracted batches: with 13
    # products whole the lowering packs a product over symmetric pairs it did not pack
    # before, so the trimmed program runs fewer FLOPs, though it counts more unpacked (the
    # old trim's price, which kept 12)
    text, spaces = load_equations("ccsd_cs"), sq.Spaces(i=21, a=93)
    forest = sq.compile(text, spaces, pair_symmetry=True).schedule.annotated.forest
    plan = BatchPlan.of({"a": {"batches": 3, "roles": "contracted"}}, sums="sequenced")
    sf = schedule_forest(forest, plan)
    trimmed = schedule_forest(forest, trim.trim_contracted_loops(forest, sf, 10**12))
    assert len(trimmed.annotated.plan.whole) == 13
    assert schedule_flops(trimmed) > schedule_flops(sf)
    assert trim.program_flops(trimmed) < 0.99 * trim.program_flops(sf)
    prog = sq.compile(text, spaces, pair_symmetry=True, batch=trimmed.annotated.plan)
    assert prog.flops == trim.program_flops(trimmed)
    assert required_bytes(trimmed) <= required_bytes(sf)


def test_a_trim_keeps_a_product_whole_that_loses_its_packing_but_recomputes_nothing():
    # spin-orbital CCSD at H2O/cc-pVDZ sizes, W3's plan at an eighth of the memory: the
    # products kept whole run 1.2x the FLOPs that the program with every loop runs (a
    # packed product now runs unpacked), and none more by the plain count; measured,
    # 4.3-4.9x the unbatched time against 5.6-6.2x for the trim that refuses them
    # (bench/README.md)
    text, spaces = load_equations("ccsd_so"), sq.Spaces(i=10, a=38)
    forest = sq.compile(text, spaces, pair_symmetry=True).schedule.annotated.forest
    roles = {"a": {"batches": 10, "roles": "both"}, "i": {"batches": 2, "roles": "contracted"}}
    sf = schedule_forest(forest, BatchPlan.of(roles, external_modes="first", sums="sequenced"))
    trimmed = schedule_forest(forest, trim.trim_contracted_loops(forest, sf, 10**12))
    assert trimmed.annotated.plan.whole
    assert schedule_flops(trimmed) <= schedule_flops(sf)
    assert trim.program_flops(trimmed) > 1.1 * trim.program_flops(sf)
    assert required_bytes(trimmed) <= required_bytes(sf)
