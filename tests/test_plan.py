"""Batch plans and loop placement (plan/)."""

from __future__ import annotations

import numpy as np
import pytest

import sq_jax as sq
from sq_jax.expr.nodes import Index
from sq_jax.plan import (
    BatchPlan,
    LoopKind,
    LoopOpen,
    OccurrenceId,
    SpaceBatch,
    annotate,
    annotate_by_hand,
    preorder,
    summed_indices,
)
from sq_jax.plan.annotate import permuted_summands
from sq_jax.schedule import schedule_forest
from sq_jax.schedule.cost import schedule_flops
from tests.helpers.schedule_corpus import SPACES, forest_of, leaf, mul, random_blocks, text_case


def test_space_batch_sizes_with_remainders():
    s = SpaceBatch("i", batches=2)
    assert (s.block_size(5), s.num_batches(5)) == (3, 2)
    b = SpaceBatch("a", block=3)
    assert (b.block_size(7), b.num_batches(7)) == (3, 3)
    assert SpaceBatch("a", batches=10).num_batches(7) == 7  # never more batches than elements


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, "exactly one of"),
        ({"batches": 2, "block": 3}, "exactly one of"),
        ({"batches": 0}, "positive int"),
        ({"block": True}, "positive int"),
        ({"batches": 2, "external": False, "contracted": False}, "at least one role"),
    ],
)
def test_space_batch_rejects(kwargs, match):
    with pytest.raises(sq.PlanError, match=match):
        SpaceBatch("i", **kwargs)


def test_plan_of_and_errors():
    plan = BatchPlan.of({"i": 2, "K": {"block": 4, "roles": "contracted"}})
    assert str(plan) == "BatchPlan(i: 2 batches [external, contracted]; K: block 4 [contracted])"
    assert plan.resolved(SPACES).batch_for("Κ") is not None
    with pytest.raises(sq.PlanError, match="roles"):
        BatchPlan.of({"i": {"batches": 2, "roles": "sideways"}})
    with pytest.raises(sq.PlanError, match="given twice"):
        BatchPlan((SpaceBatch("i", batches=2), SpaceBatch("i", batches=3)))
    with pytest.raises(sq.PlanError, match="external_site"):
        BatchPlan((), external_site="leaf")
    with pytest.raises(sq.PlanError, match="unknown space"):
        BatchPlan.of({"zz": 2}).resolved(SPACES)


def test_external_loops_open_at_root_one_per_index():
    forest, plan = text_case("doubles_occ")
    ann = annotate(forest, plan)
    assert ann.opens == (
        (
            OccurrenceId(0, 0),
            (
                LoopOpen(Index("i", 1), LoopKind.EXTERNAL),
                LoopOpen(Index("i", 2), LoopKind.EXTERNAL),
            ),
        ),
    )
    assert ann.num_batches(Index("i", 1)) * ann.num_batches(Index("i", 2)) == 4


def test_contracted_loops_open_where_summed():
    forest, plan = text_case("df_kappa")
    ann = annotate(forest, plan)
    assert ann.opens == ((OccurrenceId(0, 0), (LoopOpen(Index("Κ", 1), LoopKind.CONTRACTED),)),)
    assert ann.block_of(Index("Κ", 1)) == 3


def test_external_before_contracted_at_one_node():
    forest = sq.build_forest(sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1}"), SPACES)
    ann = annotate(forest, BatchPlan.of({"a": 2}))
    ((_, opens),) = ann.opens
    assert [o.kind for o in opens] == [LoopKind.EXTERNAL, LoopKind.CONTRACTED]


def test_external_site_term_opens_at_each_summand():
    forest = sq.build_forest(
        sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1} + f{i2;i1} t{a1;i2} + g{a1;i1}"), SPACES
    )
    ann = annotate(
        forest, BatchPlan.of({"i": {"batches": 2, "roles": "external"}}, external_site="term")
    )
    nodes = dict(preorder(forest.roots[0].node))
    sites = [occ.position for occ, _ in ann.opens]
    assert len(sites) == 3
    assert all(nodes[p].kind is not sq.NodeKind.SUM for p in sites)
    assert annotate(forest, BatchPlan.of({"i": 2}, external_site="term")) == annotate(
        forest, BatchPlan.of({"i": 2}, external_site="term")
    )


def test_unbatched_plan_opens_nothing():
    forest, _ = text_case("doubles_occ")
    assert annotate(forest, BatchPlan()).opens == ()


def test_summed_indices_and_preorder():
    a, b = leaf("A", "i1,K1"), leaf("B", "K1")
    top = mul(a, b)
    assert summed_indices(top) == (Index("Κ", 1),)
    assert summed_indices(a) == ()
    assert next(n.key for _, n in preorder(top)) == top.key
    assert {n.key for _, n in preorder(top)} == {top.key, a.key, b.key}


def test_annotate_by_hand_and_errors():
    forest = forest_of(("R", mul(leaf("A", "i1,K1"), leaf("B", "K1"))))
    plan = BatchPlan.of({"Κ": 2})
    ann = annotate_by_hand(forest, plan, {(0, 0): [("K_1", "Contracted")]})
    assert ann.opens == ((OccurrenceId(0, 0), (LoopOpen(Index("Κ", 1), LoopKind.CONTRACTED),)),)
    with pytest.raises(sq.PlanError, match="does not exist"):
        annotate_by_hand(forest, plan, {(0, 9): [("Κ_1", "Contracted")]})
    with pytest.raises(sq.PlanError, match="unknown loop kind"):
        annotate_by_hand(forest, plan, {(0, 0): [("Κ_1", "Sideways")]})
    with pytest.raises(sq.PlanError, match="not in the plan"):
        annotate_by_hand(forest, plan, {(0, 0): [("i_1", "External")]})
    assert "root 0 @0: Κ_1 Contracted" in str(ann)


def test_a_sum_with_a_lone_summand_opens_at_the_permuted_reads():
    """``Â(f g) + f h``: ``f g`` is read under two labelings, ``f h`` once. Opened at the
    root, an external loop over ``a`` needs ``f g`` batched in both orientations and
    builds it twice; opened at the summands, once (FLOPs equal the unbatched count).
    """
    text = "R{a1,a2;i1} = Â{;a1,a2} f{a1;a3} g{a3,a2;i1} + f{a1;a3} h{a3,a2;i1}"
    spaces = sq.Spaces(i=2, a=8)
    forest = sq.build_forest(sq.parse(text), spaces)
    assert len(permuted_summands(forest.roots[0].node)) == 3  # f g twice, f h once
    x = random_blocks(forest, seed=3)
    want = sq.evaluate_reference(forest, None, x)["R"]
    flops = {}
    for site in ("root", "top"):
        plan = BatchPlan.of({"a": {"batches": 4, "roles": "external"}}, external_site=site)
        flops[site] = schedule_flops(schedule_forest(forest, plan))
        got = sq.compile(text, spaces, batch=plan)(x)["R"]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert flops["root"] == forest.flops < flops["top"]
