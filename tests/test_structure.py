"""A plan given by its counts gets the leanest loop structure of about the fewest FLOPs.

``sq.compile(..., batch={"a": 2, "i": 2})`` fixes the counts; the external loops per space
and the hoisting are chosen (:mod:`sq_jax.budget.structure`). The oracle for the values is
the unbatched program; for the choice, the schedule's own FLOP count and the predicted
memory of every structure, computed here one by one.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

import sq_jax as sq
from sq_jax.budget.explain import required_bytes
from sq_jax.budget.structure import COST_TOLERANCE, STRUCTURES, cheapest_structure
from sq_jax.cc.equations import load_equations
from sq_jax.forest.symmetry import symmetric_random_inputs
from sq_jax.schedule import schedule_forest
from sq_jax.schedule.cost import schedule_flops

SPACES = sq.Spaces(i=6, a=8)
TEXT = load_equations("ccsd_so")


@pytest.fixture(scope="module")
def forest():
    return sq.build_forest(sq.parse(TEXT), SPACES)


def _structures(forest, counts):
    """Every structure of STRUCTURES for ``counts``: (plan, FLOPs, predicted bytes)."""
    out = []
    for modes, hoist in STRUCTURES:
        plan = sq.BatchPlan.of(counts, external_modes=modes, hoist=hoist)
        sf = schedule_forest(forest, plan)
        out.append((plan, schedule_flops(sf), required_bytes(sf)))
    return out


COUNTS = [
    {"a": 2, "i": 2},
    {"a": 2},
    {"a": 4},
    {"i": 3},
    {"a": {"batches": 2, "roles": "external"}},
]


@pytest.mark.parametrize("counts", COUNTS)
def test_the_structure_chosen_is_the_leanest_of_the_nearly_cheapest(forest, counts):
    structures = _structures(forest, counts)
    chosen = cheapest_structure(forest, structures[0][0], step_cost=0)  # FLOPs alone
    flops, need = schedule_flops(chosen), required_bytes(chosen)
    unbatched = required_bytes(schedule_forest(forest, sq.BatchPlan()))
    # candidates: the caller's defaults, and the others predicted below the unbatched need
    fits = [structures[0]] + [s for s in structures[1:] if s[2] < unbatched]
    fewest = min(f for _, f, _ in fits)
    assert flops <= COST_TOLERANCE * fewest
    assert need == min(b for _, f, b in fits if f <= COST_TOLERANCE * fewest)
    assert chosen.annotated.plan.spaces == structures[0][0].spaces  # the caller's counts


def test_two_spaces_cut_by_hand_no_longer_rebuild_the_whole_tree(forest):
    """The case that motivated it: both spaces cut, defaults rebuild values per batch."""
    counts = {"a": 2, "i": 2}
    (_, default_flops, _), *_ = _structures(forest, counts)
    prog = sq.compile(TEXT, SPACES, batch=counts)
    plan = prog.schedule.annotated.plan
    assert plan.hoist == "invariant"
    assert schedule_flops(prog.schedule) < default_flops / 4
    assert schedule_flops(prog.schedule) < 1.2 * prog.schedule.annotated.forest.flops
    # it still saves memory: predicted below the unbatched program (not below the
    # defaults, which rebuild values per batch to hold less at once)
    unbatched = required_bytes(schedule_forest(prog.schedule.annotated.forest, sq.BatchPlan()))
    assert required_bytes(prog.schedule) < unbatched
    inputs = symmetric_random_inputs(prog.schedule.annotated.forest, seed=3, scale=0.1)
    want = sq.compile(TEXT, SPACES)(inputs)
    got = prog(inputs)
    for name in want:
        np.testing.assert_allclose(np.asarray(got[name]), np.asarray(want[name]), atol=1e-12)


def test_a_batch_plan_given_whole_is_kept_as_it_is():
    plan = sq.BatchPlan.of({"a": 2, "i": 2})
    prog = sq.compile(TEXT, SPACES, batch=plan)
    assert prog.schedule.annotated.plan == plan


def test_the_defaults_are_kept_where_they_are_about_as_cheap_and_the_leanest(forest):
    counts = {"a": 2}
    (default_plan, default_flops, default_bytes), *others = _structures(forest, counts)
    fewest = min(f for _, f, _ in others)
    if default_flops > COST_TOLERANCE * fewest or any(b < default_bytes for *_, b in others):
        pytest.fail("the premise changed: pick counts whose defaults are cheap and leanest")
    chosen = cheapest_structure(forest, default_plan, step_cost=0)  # priced as above
    assert chosen.annotated.plan == default_plan


def test_a_mesh_keeps_the_structure_the_sharding_was_measured_with():
    counts = {"a": {"batches": 2, "roles": "external"}, "i": 2}
    prog = sq.compile(TEXT, SPACES, batch=counts, devices=jax.devices()[:1])
    assert prog.schedule.annotated.plan == sq.BatchPlan.of(counts)


def test_no_structure_predicted_to_need_the_unbatched_memory_replaces_the_callers():
    """At H2O/cc-pVDZ sizes, pairs packed, the hoisted structures of ``a: 2, i: 2`` are
    predicted above the unbatched program (their i-invariant values are large): they are
    passed over, though hoisting would cost far fewer FLOPs, for the cheapest of the
    structures predicted below it."""
    big = sq.build_forest(sq.parse(TEXT), sq.Spaces(i=10, a=38))
    big = dataclasses.replace(big, pair_symmetry=True)  # as sq.compile(pair_symmetry=True)
    structures = _structures(big, {"a": 2, "i": 2})
    unbatched = required_bytes(schedule_forest(big, sq.BatchPlan()))
    hoisted = [s for s in structures if s[0].hoist == "invariant"]
    assert all(need >= unbatched for _, _, need in hoisted)  # the premise
    fewest = min(flops for _, flops, _ in structures)
    assert all(flops < 1.1 * fewest for _, flops, _ in hoisted)
    chosen = cheapest_structure(big, structures[0][0], step_cost=0)  # FLOPs alone
    assert chosen.annotated.plan.hoist == "none"
    assert required_bytes(chosen) < unbatched
    fits = [s for s in structures if s[2] < unbatched]
    assert schedule_flops(chosen) <= COST_TOLERANCE * min(flops for _, flops, _ in fits)
