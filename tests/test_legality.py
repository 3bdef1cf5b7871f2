"""Legality: build sites, loop roles, the demotion fixpoint (schedule/legality.py)."""

from __future__ import annotations

import pytest

import sq_jax as sq
from sq_jax._errors import DemotionFixpointError, UnknownValueError
from sq_jax.expr.nodes import Index
from sq_jax.plan import BatchPlan, annotate
from sq_jax.schedule.legality import (
    AxisClass,
    CellLegality,
    LegalitySchedule,
    LoopRole,
    analyze_legality,
    build_site_of,
    classify_axis,
    forced_split_demotions,
    forced_split_types,
)
from sq_jax.schedule.rich import OccurrenceRec, RichSchedule, build_rich_schedule
from tests.helpers.hand_schedules import hand_ac12
from tests.helpers.schedule_corpus import SPACES, TEXT_CASES, schedule_text, text_case

I1, I2, I3, I4, A1, A3, K1 = (
    Index("i", 1),
    Index("i", 2),
    Index("i", 3),
    Index("i", 4),
    Index("a", 1),
    Index("a", 3),
    Index("Κ", 1),
)
LL, RED, LC, INV = (
    LoopRole.LOOP_LOCAL,
    LoopRole.REDUCTION,
    LoopRole.LOOP_CARRIED,
    LoopRole.LOOP_INVARIANT,
)


def _rich(text: str, plan: dict) -> RichSchedule:
    forest = sq.build_forest(sq.parse(text), SPACES)
    return build_rich_schedule(annotate(forest, BatchPlan.of(plan)))


def test_ac1_build_site_of_full_contraction():
    """AC-1 (Mode D / V2): the site comes from the node's Contracted open on `a_3`.

    Adaptation: with leaves as inputs and annotation-driven sites, a plan batching `a` in
    the contracted role opens `a_3` at the product; without the open the site is empty.
    """
    text = "E = g{i1;a3} t{a3;i1}"
    rich = _rich(text, {"a": {"batches": 2, "roles": "contracted"}})
    top = rich.cells[rich.root_values[0]]
    site = build_site_of(top)
    assert site == (A3,) and not any(ix.space == "i" for ix in site)
    assert build_site_of(_rich(text, {}).cells[-1]) == ()
    assert all(build_site_of(c) == () for c in rich.cells if c.is_leaf)


def test_ac2_classify_two_same_space_slots():
    """AC-2: type-level lockstep over every sliced same-space slot (V2-intermediate too)."""
    occ = OccurrenceRec(0, 1, carried=(I1, I2), home=(), ectx=(I1,))
    assert classify_axis((I1, I2), (), I1, [occ]) is LC
    assert classify_axis((I1, I2), (), I2, [occ]) is LC
    assert classify_axis((I1, I2), (), I1, [occ], sliced=(I1, I2)) is LC
    assert classify_axis((I1, I2), (), I1, [occ], sliced=(I1,)) is LL  # i_2 is a spectator


def test_classify_other_branches():
    occ = OccurrenceRec(0, 1, carried=(I1,), ectx=(I1,), ectx_slot=(0,), loop_slot=(0,))
    assert classify_axis((I1,), (), I1, [occ]) is LL
    assert classify_axis((), (K1,), K1, [occ]) is RED
    assert classify_axis((), (), K1, [occ]) is INV
    assert classify_axis((I1,), (), I1, []) is LC  # no enclosing loop at all
    # loop-instance aware: the enclosing i loop is another instance than the value's own
    assert classify_axis((I1,), (), I1, [occ], enclosing_slot=lambda o, ix: 1) is LC
    # deviation: a mode the value sums itself is a Reduction beside a same-space result
    assert classify_axis((I1,), (I2,), I2, [occ]) is RED


def test_ac3_forced_split_types():
    assert len(forced_split_types(CellLegality(0, forced_split_axes=(I3, I4)))) == 1
    assert forced_split_types(CellLegality(0)) == ()
    assert len(forced_split_types(CellLegality(0, forced_split_axes=(I3, I4, A1)))) == 2


def test_ac4_cross_iteration_roles():
    """AC-4 under V2 with leaves as inputs: the leaf `A` has no roles; `B` opens both loops."""
    forest, plan = text_case("cross_iteration")
    rich = build_rich_schedule(annotate(forest, plan))
    leg = analyze_legality(rich, forest)
    a, b = leg.cells
    assert a.per_axis == ()
    assert b.per_axis == (AxisClass(I3, LC), AxisClass(I4, LC))
    assert b.forced_split_axes == (I3, I4) and b.home_floor == ()


def test_ac7_all_four_roles_reachable():
    rich = _rich(TEXT_CASES["df_inside_occ"][0], TEXT_CASES["df_inside_occ"][1])
    leg = analyze_legality(rich)
    roles = {a.role for c in leg.cells for a in c.per_axis}
    assert {LL, RED, LC} <= roles
    # LoopInvariant: a value inside the Κ loop that does not touch Κ, classified directly
    cell = next(c for c in rich.cells if not c.is_leaf and "Κ" not in {i.space for i in c.carried})
    assert classify_axis(cell.carried, (), K1, cell.occurrences) in (INV, RED)
    assert classify_axis((A1,), (), K1, cell.occurrences) is INV


def _doubles():
    forest, plan = text_case("doubles_occ")
    return forest, build_rich_schedule(annotate(forest, plan))


def test_ac6_demotion_fixpoint():
    """AC-6 adapted: demote the first value LoopLocal on `i`; only its `i` roles change."""
    forest, rich = _doubles()
    base = analyze_legality(rich, forest)
    assert base == analyze_legality(rich, forest, demotion_source=lambda _: ())
    target = next(c for c in base.cells if any(a.role is LL for a in c.per_axis))
    calls = []

    def source(leg: LegalitySchedule):
        calls.append(leg)
        return [(target.key, "i")]

    got = analyze_legality(rich, forest, demotion_source=source)
    assert len(calls) >= 2 and got.rounds == 2
    for old, new in zip(base.cells, got.cells, strict=True):
        if old.key == target.key:
            assert all(a.role is LC for a in new.per_axis) and new.home_floor == ()
            assert set(new.forced_split_axes) == set(old.build_site)
        else:
            assert old == new


def test_demotion_fixpoint_cap():
    forest, rich = _doubles()
    counter = iter(range(10**6))
    with pytest.raises(DemotionFixpointError, match="did not settle") as err:
        analyze_legality(rich, forest, demotion_source=lambda _: [(next(counter), "i")])
    assert "cap" in str(err.value)


def test_unknown_value_error_names_the_value():
    _, rich = _doubles()
    other = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), SPACES)
    with pytest.raises(UnknownValueError, match="v0 `") as err:
        analyze_legality(rich, other)
    assert "g{a_1,a_2;a_3,a_4}" in str(err.value)


def test_ac12_single_sided_demotion_trigger():
    rich, leg = hand_ac12()
    assert sorted(forced_split_demotions(rich, leg)) == [(1001, "i"), (1002, "i")]


def test_invariants_over_text_cases():
    for name in TEXT_CASES:
        forest, plan = text_case(name)
        rich = build_rich_schedule(annotate(forest, plan))
        leg = analyze_legality(rich, forest)
        assert len(leg.cells) == len(rich.cells)
        for c, lc in zip(rich.cells, leg.cells, strict=True):
            assert lc.key == c.key
            assert {a.axis for a in lc.per_axis} == set(lc.build_site)
            assert INV not in {a.role for a in lc.per_axis}


def test_str():
    sf = schedule_text("g{p1,p2;p3,p4} = B{p1,p3;;K1} B{p2,p4;;K1}", {"Κ": 2})
    assert "Κ_1:Reduction" in str(sf.legality)
