"""Static peak profile (schedule/peak.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sq_jax.expr.nodes import Index
from sq_jax.plan import BatchPlan, annotate
from sq_jax.schedule import schedule_forest
from sq_jax.schedule.peak import (
    PeakCell,
    PeakSchedule,
    cell_footprint,
    dag_path,
    home_depth_of,
    peak_profile_replay,
    peak_profile_sweep,
)
from sq_jax.schedule.rich import build_rich_schedule
from tests.helpers.schedule_corpus import TEXT_CASES, random_case, text_case

O1, I1, A1, X1 = Index("o", 1), Index("i", 1), Index("a", 1), Index("x", 1)


def test_ac15_home_depth_of():
    ectx = [O1, I1, A1]
    assert home_depth_of({A1}, ectx) == 2
    assert home_depth_of({O1}, ectx) == 0
    assert home_depth_of(set(), ectx) == -1
    assert home_depth_of({I1, X1}, ectx) == 1
    assert home_depth_of({O1, A1}, ectx) == 2
    assert home_depth_of({A1}, [(O1, (0, 2)), (A1, (0, 2))]) == 1  # (mode, range) entries


def test_ac15_cell_footprint():
    def ext(ix):
        return 10

    def blk(ix):
        return 2 if ix == I1 else 10

    assert cell_footprint([I1, A1], {I1}, ext, blk) == 160
    assert cell_footprint([I1, A1], set(), ext, blk) == 800
    assert cell_footprint([I1, A1], {I1}, ext, blk, divergent={I1}) == 160
    assert cell_footprint([I1, A1], {I1}, ext, blk, divergent={A1}) == 160


def test_ac16_sweep():
    s = PeakSchedule(
        (PeakCell(0, -1, 100, 0, 3), PeakCell(1, -1, 40, 1, 2), PeakCell(2, -1, 10, 2, 4)), 5
    )
    prof = peak_profile_sweep(s)
    assert (prof.peak_bytes, prof.binding_point, prof.live_at_binding) == (150, 2, (0, 1, 2))
    assert peak_profile_replay(s) == 150
    s2 = PeakSchedule((PeakCell(0, -1, 100, 0, 1), PeakCell(1, -1, 100, 2, 3)), 4)
    prof2 = peak_profile_sweep(s2)
    assert (prof2.peak_bytes, prof2.binding_point, prof2.live_at_binding) == (100, 0, (0,))
    assert peak_profile_replay(s2) == 100
    empty = peak_profile_sweep(PeakSchedule((), 3))
    assert (empty.peak_bytes, empty.binding_point) == (0, 0)


@pytest.mark.parametrize("name", sorted(TEXT_CASES))
def test_sweep_equals_replay_and_batching_does_not_raise_the_peak(name):
    forest, plan = text_case(name)
    ann = annotate(forest, plan)
    rich = build_rich_schedule(ann)
    for leaves in (False, True):
        s = dag_path(rich, ann, include_leaves=leaves)
        assert peak_profile_sweep(s).peak_bytes == peak_profile_replay(s)
    flat = annotate(forest, BatchPlan())
    flat_peak = peak_profile_sweep(dag_path(build_rich_schedule(flat), flat)).peak_bytes
    assert peak_profile_sweep(dag_path(rich, ann)).peak_bytes <= flat_peak


def test_df_footprint_uses_blocks_inside_the_loop():
    forest, plan = text_case("df_inside_occ")
    sf = schedule_forest(forest, plan)
    s = dag_path(sf.rich, sf.annotated)
    full = {c.value_id: c for c in dag_path(sf.rich, annotate(forest, BatchPlan())).cells}
    assert any(c.footprint < full[c.value_id].footprint for c in s.cells if c.value_id in full)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=10**6))
def test_random_sweep_equals_replay(seed):
    forest, plan = random_case(seed)
    sf = schedule_forest(forest, plan)
    for leaves in (False, True):
        s = dag_path(sf.rich, sf.annotated, include_leaves=leaves)
        assert peak_profile_sweep(s).peak_bytes == peak_profile_replay(s)
