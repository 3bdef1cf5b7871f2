"""The ordered schedule: blocks, placement, passes, order, well_formed (schedule/ordered.py)."""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sq_jax as sq
from sq_jax._errors import (
    InternalScheduleError,
    LaterPassReaderError,
    LoopOrderCycleError,
    ReductionWithoutSlotError,
    StepCycleError,
)
from sq_jax.expr.nodes import Index, Variable
from sq_jax.forest.canon import scalar_node, sum_node
from sq_jax.forest.factor import unfactored
from sq_jax.plan import BatchPlan, LoopKind, annotate
from sq_jax.schedule import ScheduledForest, schedule_annotated, schedule_forest
from sq_jax.schedule.ir import BuildStep, OrderedSchedule, OutputKind, ScopeBlock, ScopeLevel
from sq_jax.schedule.legality import (
    AxisClass,
    CellLegality,
    LegalitySchedule,
    LoopRole,
    analyze_legality,
)
from sq_jax.schedule.ordered import build_ordered_schedule, forced_split_levels
from sq_jax.schedule.peak import dag_path, peak_profile_sweep
from sq_jax.schedule.rich import OccurrenceRec, RichSchedule, ValueCell, build_rich_schedule
from sq_jax.schedule.wellformed import crossings, well_formed
from tests.helpers.hand_schedules import hand_ac12
from tests.helpers.schedule_corpus import (
    CC_PLANS,
    CC_SETS,
    SPACES,
    TEXT_CASES,
    assert_matches_reference,
    cc_forest,
    check_invariants,
    forest_of,
    leaf,
    mul,
    random_blocks,
    random_case,
    run_schedule,
    schedule_text,
    text_case,
)

SUM, SCATTER = OutputKind.ACCUMULATE_SUM, OutputKind.ACCUMULATE_SCATTER
I1, I2, K1 = Index("i", 1), Index("i", 2), Index("Κ", 1)
GOLDEN = Path(__file__).parent / "golden" / "schedule"


def _blk(axis, slot=0, steps=(), outputs=(), depth=1, latitude=0, kind=LoopKind.EXTERNAL):
    return ScopeBlock(
        axis, ScopeLevel(depth, axis.space, slot, latitude), kind, tuple(steps), tuple(outputs)
    )


def _root(*steps):
    return ScopeBlock(steps=tuple(steps))


def _builds(block):
    return [s.value_id for s in block.steps if isinstance(s, BuildStep)]


# -- AC-8 --------------------------------------------------------------------------------


def test_ac8_well_formed_unit_cases():
    """AC-8 with V2 rule 2: sibling blocks are keyed by (depth, loop_slot, latitude)."""
    ok = _root(BuildStep(0), _blk(I1, steps=[BuildStep(1)], outputs=[(2, SUM)]))
    assert well_formed(OrderedSchedule(ok, 3))
    assert not well_formed(OrderedSchedule(_root(BuildStep(5)), 1))
    same = _root(_blk(I1, steps=[BuildStep(0)]), _blk(I2, steps=[BuildStep(1)]))
    assert not well_formed(OrderedSchedule(same, 2))
    passes = _root(_blk(I1, steps=[BuildStep(0)]), _blk(I2, steps=[BuildStep(1)], latitude=1))
    assert well_formed(OrderedSchedule(passes, 2))
    assert not well_formed(OrderedSchedule(_root(_blk(I1, outputs=[(7, SCATTER)])), 1))
    assert not well_formed(OrderedSchedule(_root(BuildStep(0), _blk(I1, outputs=[(0, SUM)])), 1))


def test_v2_single_producer_rules():
    # (b) a built value may be output at its build block or an ancestor of it
    inner = _blk(K1, steps=[BuildStep(0)], outputs=[(0, SCATTER)], depth=2)
    chain = _root(_blk(I1, steps=[inner], outputs=[(0, SCATTER)]))
    assert well_formed(OrderedSchedule(chain, 1))
    bad_b = _root(_blk(I1, steps=[BuildStep(0)]), _blk(I2, slot=1, depth=2, outputs=[(0, SCATTER)]))
    assert not well_formed(OrderedSchedule(bad_b, 1))
    # (c) escape sites must lie on one nesting path
    bad_c = _root(_blk(I1, outputs=[(0, SUM)]), _blk(I2, slot=1, depth=2, outputs=[(0, SUM)]))
    assert not well_formed(OrderedSchedule(bad_c, 1))
    twice = _root(_blk(I1, steps=[BuildStep(0), BuildStep(0)]))
    assert not well_formed(OrderedSchedule(twice, 1))


# -- AC-10 -------------------------------------------------------------------------------


def test_ac10_both_ordering_directions():
    """AC-10 with leaves as inputs: `R` and `Z` are computed (root-homed) values.

    G, H are inputs read sliced on Κ; V = G·R is LoopLocal on Κ (built in the block); W =
    V·H reduces Κ (Sum output); R must come before the block, Top after it.
    """
    r = mul(leaf("P", "a1", "a5"), leaf("Q", "a5", "a2"))
    v = mul(leaf("G", "", "", "K1,a1"), r, "K1,a2")
    w = mul(v, leaf("H", "", "", "K1,a3"), "a2,a3")
    z = mul(leaf("M", "a3", "a6"), leaf("N", "a6", "a4"))
    top = mul(w, z, "a2,a4")
    forest = forest_of(("Top", top))
    sf = schedule_forest(forest, BatchPlan.of({"Κ": {"batches": 2, "roles": "contracted"}}))
    check_invariants(sf)
    assert_matches_reference(sf)
    vid = {c.node.key: c.value_id for c in sf.rich.cells}
    root = sf.ordered.root
    (blk,) = root.blocks()
    assert blk.level.space == "Κ" and blk.kind is LoopKind.CONTRACTED
    assert blk.outputs == ((vid[w.key], SUM),) and _builds(blk) == [vid[v.key]]
    order = [s.value_id if isinstance(s, BuildStep) else "blk" for s in root.steps]
    assert order.index(vid[r.key]) < order.index("blk") < order.index(vid[top.key])
    assert vid[w.key] not in _builds(root) and vid[z.key] in _builds(root)


# -- AC-11 -------------------------------------------------------------------------------


def test_ac11_cross_iteration_nests_both_loops():
    """AC-11 under V2, leaves as inputs: `A` is an input read sliced on use, so nothing
    forces a split; `B` opens two External loops that nest (batch count = product) and
    scatters out of both (an escape chain: raw production in the inner loop)."""
    forest, plan = text_case("cross_iteration")
    sf = schedule_forest(forest, plan)
    check_invariants(sf)
    assert_matches_reference(sf)
    (outer,) = sf.ordered.root.blocks()
    (inner,) = outer.blocks()
    assert outer.loop == ("i", 0) and inner.loop == ("i", 1)
    assert outer.outputs == ((1, SCATTER),) == inner.outputs
    assert _builds(outer) == _builds(inner) == []
    assert sf.annotated.num_batches(outer.axis) * sf.annotated.num_batches(inner.axis) == 4


def _is_gt(cell) -> bool:
    return not cell.is_leaf and cell.carried[:2] == (Index("i", 3), Index("i", 4))


def _demoted(name: str, pick=_is_gt) -> ScheduledForest:
    forest, plan = text_case(name)
    ann = annotate(forest, plan)
    rich = build_rich_schedule(ann)
    target = next(c for c in rich.cells if pick(c))
    leg = analyze_legality(rich, forest, demotion_source=lambda _: [(target.key, "i")])
    ordered = build_ordered_schedule(rich, leg)
    return ScheduledForest(ann, rich, leg, ordered, peak_profile_sweep(dag_path(rich, ann)))


def test_ac11_forced_split_realizes_sibling_pass_blocks():
    """AC-11's forced-split shape in V2 terms: demoting an intermediate of the doubles
    residual to LoopCarried on `i` makes its readers a later pass; the nest becomes two
    sibling `i` nests, producer (latitude 0, Scatter outputs only) before consumer."""
    sf = _demoted("doubles_occ")
    g_t = next(c for c in sf.rich.cells if _is_gt(c))
    check_invariants(sf)
    assert_matches_reference(sf)
    nests = sf.ordered.root.blocks()
    assert [b.level.latitude for b in nests] == [0, 1]
    assert {b.level.space for b in nests} == {"i"} and len({b.loop for b in nests}) == 1
    producer, consumer = nests

    def outs(b):
        got = list(b.outputs)
        for c in b.blocks():
            got += outs(c)
        return got

    assert {k for _, k in outs(producer)} == {SCATTER}
    assert {v for v, _ in outs(producer)} == {g_t.value_id}
    assert g_t.value_id not in {v for v, _ in outs(consumer)}


def test_ac12_in_pass_terms():
    """AC-12 in V2 pass terms: Vsole joins the consumer pass, Vboth stays in the producer
    pass and is materialized across the split (rule 4: BuildStep + Scatter output)."""
    rich, leg = hand_ac12()
    deps, _ = rich.dependencies()
    assert forced_split_levels(deps, {0, 5}, set()) == (0, 0, 1, 0, 0, 1)
    sched = build_ordered_schedule(rich, leg)
    assert well_formed(sched)
    p0, p1 = sched.root.blocks()
    assert (p0.level.latitude, p1.level.latitude) == (0, 1)
    assert sorted(_builds(p0)) == [1, 3, 4] and _builds(p1) == [2]
    assert dict(p0.outputs) == {0: SCATTER, 1: SCATTER} and dict(p1.outputs) == {5: SCATTER}


# -- AC-14 -------------------------------------------------------------------------------


def test_ac14_executor_facing_shape():
    forest, plan = text_case("df_kappa")
    sf = schedule_forest(forest, plan)
    (blk,) = sf.ordered.root.blocks()
    assert blk.axis.space == "Κ" and blk.kind in (LoopKind.CONTRACTED, LoopKind.EXTERNAL)
    for v, kind in blk.outputs:
        assert v < len(sf.rich.cells) and kind in (SUM, SCATTER)
    keys = {n.hash for r in forest.roots for n in _nodes(r.node)}
    for v in _produced(sf.ordered.root):
        assert v < len(sf.rich.cells) and sf.rich.cells[v].value_id == v
        assert sf.rich.cells[v].hash in keys


def _nodes(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


def _produced(block):
    got = _builds(block) + [v for v, _ in block.outputs]
    for b in block.blocks():
        got += _produced(b)
    return got


# -- AC-21 -------------------------------------------------------------------------------


def _scalar_forest(*roots):
    return Forest_of_scalars(roots)


def Forest_of_scalars(roots):
    return forest_of(*roots, spaces=SPACES)


def test_ac21_multi_root_scalars():
    """AC-21: `a*b` shared by two roots is one value, built once; roots are not summed."""
    a, b, c, d = (scalar_node(Variable(x)) for x in "abcd")
    ab = mul(a, b, "")
    x = sum_node(scalar_node(Variable("c")), Fraction(1), ab, Fraction(1), ())
    y = sum_node(
        d,
        Fraction(1),
        mul(scalar_node(Variable("a")), scalar_node(Variable("b")), ""),
        Fraction(1),
        (),
    )
    sf = schedule_forest(Forest_of_scalars([("X", x), ("Y", y)]), BatchPlan())
    check_invariants(sf)
    products = [
        cl for cl in sf.rich.cells if not cl.is_leaf and cl.node.kind is sq.NodeKind.PRODUCT
    ]
    assert len(products) == 1 and len(products[0].occurrences) == 2
    assert _produced(sf.ordered.root).count(products[0].value_id) == 1
    values = {"a": 2.0, "b": -3.5, "c": 7.25, "d": -1.5}
    got = run_schedule(sf, values)
    assert float(got["X"]) == 0.25 and float(got["Y"]) == -8.5
    # ((a*b)+c)*(a*b) and (a*b)*d, d = 1.5: no in-place sum into the shared a*b
    e = mul(sum_node(ab, Fraction(1), c, Fraction(1), ()), ab, "")
    sf2 = schedule_forest(Forest_of_scalars([("E", e), ("F", mul(ab, d, ""))]), BatchPlan())
    got2 = run_schedule(sf2, {**values, "d": 1.5})
    assert float(got2["E"]) == -1.75 and float(got2["F"]) == -10.5


# -- refusals ----------------------------------------------------------------------------


def _cell(v, points, carried=(I1,), slots=(0,), reduced=()):
    recs = tuple(
        OccurrenceRec(p, c, carried=carried, loop_slot=slots, reduced_slot=reduced)
        for p, c in points
    )
    return ValueCell(
        v,
        100 + v,
        100 + v,
        False,
        carried,
        (),
        (),
        (),
        min(p for p, _ in points),
        max(c for _, c in points),
        -1,
        recs,
    )


def _leg(v, *entries):
    per = tuple(AxisClass(ix, role) for ix, role in entries)
    local = tuple(a.axis for a in per if a.role is LoopRole.LOOP_LOCAL)
    carried = tuple(a.axis for a in per if a.role is LoopRole.LOOP_CARRIED)
    return CellLegality(100 + v, tuple(a.axis for a in per), per, local, carried)


LL, RED, LC = LoopRole.LOOP_LOCAL, LoopRole.REDUCTION, LoopRole.LOOP_CARRIED


def test_loop_order_cycle_names_constraints_and_witnesses():
    cells = (_cell(0, [(0, 1)], (I1, K1), (0, 0)), _cell(1, [(1, 1)], (I1, K1), (0, 0)))
    rich = RichSchedule(cells, 2, loop_order=((("i", 0), ("Κ", 0), 0), (("Κ", 0), ("i", 0), 1)))
    leg = LegalitySchedule((_leg(0, (I1, LL), (K1, LL)), _leg(1, (I1, LC), (K1, LC))))
    with pytest.raises(LoopOrderCycleError) as err:
        build_ordered_schedule(rich, leg)
    msg = str(err.value)
    assert "i#0 outside Κ#0" in msg and "Κ#0 outside i#0" in msg and "witness v0" in msg


def test_reduction_without_slot():
    rich = RichSchedule((_cell(0, [(0, 0)], (), ()),), 1)
    with pytest.raises(ReductionWithoutSlotError, match="reduces `Κ_1`"):
        build_ordered_schedule(rich, LegalitySchedule((_leg(0, (K1, RED)),)))


def test_step_cycle_reports_unsatisfied_edges():
    # X (root) reads Y (in the i loop); Z (in the same loop) reads X: the loop must run
    # both before and after X.
    cells = (
        _cell(0, [(0, 1)]),  # Y, read by X
        _cell(1, [(1, 2)], (), ()),  # X, read by Z
        _cell(2, [(2, 2)]),  # Z
    )
    rich = RichSchedule(cells, 3)
    leg = LegalitySchedule((_leg(0, (I1, LL)), _leg(1), _leg(2, (I1, LL))))
    with pytest.raises(StepCycleError, match="unsatisfied"):
        build_ordered_schedule(rich, leg)


def test_later_pass_reader_in_another_nest():
    # V stays inside loop i#0 (LoopLocal) and scatters out of Κ#0 (LoopCarried); r, in the
    # nest of loop i#1, reads V in a later pass: V never leaves i#0, so r cannot see it.
    i2 = Index("i", 2)
    cells = (
        _cell(0, [(0, 2)], (I1, K1), (0, 0)),  # V
        _cell(1, [(1, 2)], (i2,), (1,)),  # C: LoopCarried on i#1
        _cell(2, [(2, 2)], (i2,), (1,)),  # r: reads V and C
    )
    leg = LegalitySchedule((_leg(0, (I1, LL), (K1, LC)), _leg(1, (i2, LC)), _leg(2, (i2, LL))))
    with pytest.raises(LaterPassReaderError, match="later pass from another nest") as err:
        build_ordered_schedule(RichSchedule(cells, 3), leg)
    assert "loop i#0" in str(err.value) and "v0" in str(err.value)


def test_legality_from_another_schedule_is_refused():
    forest, plan = text_case("df_kappa")
    rich = build_rich_schedule(annotate(forest, plan))
    other = build_rich_schedule(annotate(*text_case("doubles_occ")))
    leg = analyze_legality(other)
    with pytest.raises(InternalScheduleError):
        build_ordered_schedule(rich, leg)


# -- corpus, random forests, numerical oracle ----------------------------------------------


@pytest.mark.parametrize("name", sorted(TEXT_CASES))
def test_text_cases(name):
    forest, plan = text_case(name)
    sf = schedule_forest(forest, plan)
    check_invariants(sf)
    assert_matches_reference(sf)
    assert sf.dump() == schedule_forest(forest, plan).dump()  # deterministic


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=10**6))
def test_random_forests_and_plans(seed):
    forest, plan = random_case(seed)
    sf = schedule_forest(forest, plan)
    check_invariants(sf)
    assert_matches_reference(sf, seed)


def test_tree_of_loops_not_a_chain():
    """Independent contraction loops of different terms are sibling blocks."""
    with unfactored():  # factored, the two terms are one contraction (F0 + F1) t
        sf = schedule_text(
            "R{a1;i1} = F0{a1;a2} t{a2;i1} + F1{a1;a2} t{a2;i1}",
            {"i": {"batches": 2, "roles": "external"}, "a": {"batches": 2, "roles": "contracted"}},
        )
    (outer,) = sf.ordered.root.blocks()
    assert [b.level.space for b in outer.blocks()] == ["a", "a"]
    assert all(not b.blocks() for b in outer.blocks())
    assert crossings(sf.ordered, sf.rich.root_values) == {}


def test_shared_value_inside_and_outside_a_loop():
    sf = schedule_text(
        "R{i1;a1} = (f{i1;i2} + g{i1;i2}) t{a1;i2}\nE = (f{i1;i2} + g{i1;i2}) h{i2;i1}",
        {"i": {"batches": 2, "roles": "external"}},
    )
    check_invariants(sf)
    assert_matches_reference(sf)
    sums = [c.value_id for c in sf.rich.cells if not c.is_leaf and c.node.kind is sq.NodeKind.SUM]
    (blk,) = sf.ordered.root.blocks()
    assert len(sums) == 2 and sums[0] in _builds(blk) and sums[1] in _builds(sf.ordered.root)


# -- regressions: the CCSD residuals batched over the virtual space -------------------------


def _top_blocks(sf: ScheduledForest) -> list[ScopeBlock]:
    return list(sf.ordered.root.blocks())


def test_invariant_sum_runs_outside_the_external_loops():
    """A batched sum that carries no External mode is not nested in the External loops.

    ``Σ_a3 t{a3;i2} g{i3,i4;i1,a3}`` sits under the root's a1 and a2 loops in the tree but
    carries neither mode, so no nesting pair ties its a3 loop to them (it used to be
    nested in both, inside the reader's loop: a StepCycleError).
    """
    forest, plan = text_case("hoist_invariant_sum")
    sf = schedule_forest(forest, plan)
    check_invariants(sf)
    assert_matches_reference(sf)
    kinds = dict(sf.rich.loop_kind)
    (con,) = [lp for lp, k in kinds.items() if k is LoopKind.CONTRACTED]
    assert all(inner != con for _, inner, _ in sf.rich.loop_order)
    top = _top_blocks(sf)
    assert [b.kind for b in top] == [LoopKind.CONTRACTED, LoopKind.EXTERNAL]
    assert top[0].loop == con and not top[0].blocks()
    (inner,) = top[1].blocks()  # the two External loops still nest (one value uses both)
    assert inner.kind is LoopKind.EXTERNAL and not inner.blocks()


def test_fold_refused_when_it_would_change_enclosing_loops():
    """The shared `(t{a4;i2} g{i3,i4;a3,a4})` becomes two values, one per a3 loop.

    Its a3 loop is free in the first term (whose a3 sum carries no External mode) and
    inside the a1 loop in the second (whose a3 sum carries a1). Folding the two a3 loops
    would put the first term's sum inside the a1 loop although its reader runs outside
    it (rule 5 of rich.py refuses it).
    """
    forest, plan = text_case("fold_keeps_enclosers")
    sf = schedule_forest(forest, plan)
    check_invariants(sf)
    assert_matches_reference(sf)
    shared = [
        c
        for c in sf.rich.cells
        if not c.is_leaf
        and c.node.kind is sq.NodeKind.PRODUCT
        and len(c.node.indices) == 4
        and {ix.space for ix in c.node.indices} == {"i", "a"}
        and c.node.left.is_leaf
        and c.node.right.is_leaf
    ]
    assert len(shared) == 2 and shared[0].hash == shared[1].hash
    assert shared[0].key != shared[1].key
    a3_loops = {o.enclosing_slot(o.carried[-1]) for c in shared for o in c.occurrences}
    assert len(a3_loops) == 2  # two loop instances, not one


@pytest.mark.parametrize("site", ["root", "term"])
@pytest.mark.parametrize("plan", sorted(CC_PLANS))
@pytest.mark.parametrize("name", CC_SETS)
def test_cc_equation_sets_schedule(name, plan, site):
    """E, R1 and R2 together at realistic extents: schedules, all invariants hold."""
    forest = cc_forest(name, 10, 38)
    sf = schedule_forest(forest, BatchPlan.of(CC_PLANS[plan], external_site=site))
    check_invariants(sf)


_DEEP = {"a4_i2", "a3_i3"}  # nested loops over both spaces: tens of thousands of steps
_EXECUTE = [
    pytest.param(name, plan, marks=pytest.mark.slow) if plan in _DEEP else (name, plan)
    for name in CC_SETS
    for plan in sorted(CC_PLANS)
    # the deep nests interpret for half a minute each on CCSD; CCD's nests are the same
    # loops over fewer terms, and lowered CCSD runs under nested plans in test_budget
    if not (plan in _DEEP and name == "ccsd_so")
]


@pytest.mark.parametrize("name, plan", _EXECUTE)
def test_cc_equation_sets_execute(name, plan):
    """E, R1 and R2 at small extents: the interpreted schedule equals the reference."""
    forest = cc_forest(name, 4, 6)
    sf = schedule_forest(forest, BatchPlan.of(CC_PLANS[plan]))
    check_invariants(sf)
    blocks = random_blocks(forest, seed=3)
    got = run_schedule(sf, blocks)
    want = sq.evaluate_reference(forest, None, blocks)
    assert set(got) == set(want) and {"E", "R2"} <= set(want)
    for key, ref in want.items():
        np.testing.assert_allclose(got[key], ref, rtol=1e-12, atol=1e-12, err_msg=key)


# -- golden dumps --------------------------------------------------------------------------

GOLDEN_CASES = {
    "df_kappa": lambda: schedule_forest(*text_case("df_kappa")),
    "doubles_occ": lambda: schedule_forest(*text_case("doubles_occ")),
    "cross_iteration": lambda: schedule_forest(*text_case("cross_iteration")),
    "shared_in_out": lambda: schedule_text(
        "R{i1;a1} = (f{i1;i2} + g{i1;i2}) t{a1;i2}\nE = (f{i1;i2} + g{i1;i2}) h{i2;i1}",
        {"i": {"batches": 2, "roles": "external"}},
    ),
    "two_space": lambda: schedule_forest(*text_case("two_space")),
    "df_inside_occ": lambda: schedule_forest(*text_case("df_inside_occ")),
    "forced_split": lambda: _demoted("doubles_occ"),
}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_dump(name):
    """Regenerate with ``SQ_JAX_REGEN_GOLDEN=1 pytest tests/test_ordered.py -k golden``."""
    text = GOLDEN_CASES[name]().dump() + "\n"
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("SQ_JAX_REGEN_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; run with SQ_JAX_REGEN_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


def test_schedule_annotated_by_hand_matches_plan():
    forest, plan = text_case("df_kappa")
    from sq_jax.plan import annotate_by_hand

    by_hand = annotate_by_hand(forest, plan, {(0, 0): [("Κ_1", "Contracted")]})
    assert schedule_annotated(by_hand).dump() == schedule_forest(forest, plan).dump()
    assert np.isfinite(schedule_annotated(by_hand).peak.peak_bytes)
