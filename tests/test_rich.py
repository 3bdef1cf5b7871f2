"""The rich schedule: points, occurrences, loop identity, values (schedule/rich.py)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from sq_jax._errors import AnnotationError
from sq_jax.expr.nodes import Index
from sq_jax.plan import BatchPlan, LoopKind, annotate, annotate_by_hand
from sq_jax.schedule.ir import BuildStep
from sq_jax.schedule.loop_identity import Loops
from sq_jax.schedule.rich import build_rich_schedule
from tests.helpers.schedule_corpus import (
    SPACES,
    add,
    forest_of,
    leaf,
    mul,
    schedule_text,
    text_case,
)

EXT_I = {"i": {"batches": 2, "roles": "external"}}


def test_points_are_a_global_post_order():
    forest, plan = text_case("multi_root")
    rich = build_rich_schedule(annotate(forest, plan))
    recs = sorted((o for c in rich.cells for o in c.occurrences), key=lambda o: o.point)
    assert [o.point for o in recs] == list(range(rich.num_points))
    for o in recs:
        assert all(p < o.point for p in o.operand_points)  # children before parent
        assert o.consumer_point >= o.point
    roots = [o for o in recs if o.is_root]
    assert len(roots) == len(forest.roots) == len(rich.root_values)
    assert [rich.point_owner()[o.point] for o in roots] == list(rich.root_values)


def test_own_loop_excluded_from_ectx_and_home():
    forest, plan = text_case("df_kappa")
    rich = build_rich_schedule(annotate(forest, plan))
    top = rich.cells[rich.root_values[0]]
    (occ,) = top.occurrences
    assert occ.ectx == () and occ.home == ()
    assert occ.reduced_slot == ((Index("Κ", 1), 0),) and occ.contracted_batched == (Index("Κ", 1),)
    leaf_cell = rich.cells[0]
    assert leaf_cell.is_leaf and len(leaf_cell.occurrences) == 2
    for o in leaf_cell.occurrences:
        assert o.ectx == (Index("Κ", 1),) and o.ectx_opener_point == (occ.point,)
        assert o.read_slices() == ((2, ("Κ", 0)),)


def test_cross_iteration_two_loop_instances():
    forest, plan = text_case("cross_iteration")
    rich = build_rich_schedule(annotate(forest, plan))
    assert rich.loop_kind == ((("i", 0), LoopKind.EXTERNAL), (("i", 1), LoopKind.EXTERNAL))
    assert rich.loop_order == ()  # two External loops impose no order
    a, b = rich.cells
    assert (
        a.is_leaf
        and len(a.occurrences) == 2
        and a.divergent_modes == (Index("i", 3), Index("i", 4))
    )
    assert [o.loop_slot for o in a.occurrences] == [(0,), (1,)]
    assert b.occurrences[0].loop_slot == (0, 1) and b.home_modes == ()


def test_shared_value_folds_loops_across_trees():
    sf = schedule_text(
        "R1{i1;a1} = (f{i1;a2} + g{i1;a2}) t{a2;a1}\nR2{i1;a1} = (f{i1;a2} + g{i1;a2}) u{a2;a1}",
        EXT_I,
    )
    rich = sf.rich
    assert rich.loop_kind == ((("i", 0), LoopKind.EXTERNAL),)  # the two roots' loops fused
    shared = [c for c in rich.cells if not c.is_leaf and len(c.occurrences) == 2]
    assert len(shared) == 1 and shared[0].occurrences[0].loop_slot == (0, -1)
    (blk,) = sf.ordered.root.blocks()
    assert [s.value_id for s in blk.steps if isinstance(s, BuildStep)] == [shared[0].value_id]
    assert len(blk.outputs) == 2


def test_position_conflict_keeps_two_values():
    # The same intermediate on two different loops of one product (rule 1): not folded.
    sf = schedule_text("B{i3;i4} = (f{;i3} + g{;i3}) (f{;i4} + g{;i4})", EXT_I)
    sums = [c for c in sf.rich.cells if not c.is_leaf and c.node.kind.name == "SUM"]
    assert len(sums) == 2 and sums[0].hash == sums[1].hash and sums[0].key != sums[1].key
    assert {c.occurrences[0].loop_slot for c in sums} == {(0,), (1,)}


def test_value_key_is_hash_when_unsliced():
    forest, _ = text_case("multi_root")
    rich = build_rich_schedule(annotate(forest, BatchPlan()))
    assert all(c.key == c.hash for c in rich.cells)
    assert len({c.key for c in rich.cells}) == len(rich.cells)


def test_union_find_refusals():
    i1, i2, k1 = Index("i", 1), Index("i", 2), Index("Κ", 1)
    loops = Loops()
    a = loops.add(i1, LoopKind.EXTERNAL, 0)
    b = loops.add(k1, LoopKind.CONTRACTED, 1)
    c = loops.add(k1, LoopKind.CONTRACTED, 2)
    d = loops.add(k1, LoopKind.CONTRACTED, 3)
    e = loops.add(i2, LoopKind.EXTERNAL, 4)
    assert not loops.try_unite(a, b)  # rule 3: kinds differ
    loops.forbid[b].add(c)
    assert not loops.try_unite(b, c) and not loops.try_unite(c, b)  # rule 2: forbidden
    loops.inner[c].add(d)
    assert not loops.try_unite(d, c)  # rule 4: one must enclose the other
    loops.touch[a][7], loops.touch[e][7] = 0, 1
    assert not loops.try_unite(a, e)  # rule 1: two positions of one occurrence
    assert loops.try_unite(b, d) and loops.find(b) == loops.find(d)
    assert not loops.try_unite(b, c)  # the forbid survives the union


def test_union_find_keeps_enclosing_loops():
    # rule 5: a fold may not change which loops must enclose a loop
    i1, k1 = Index("i", 1), Index("Κ", 1)
    loops = Loops()
    outer = loops.add(i1, LoopKind.EXTERNAL, 0)
    free = loops.add(k1, LoopKind.CONTRACTED, 1)
    held = loops.add(k1, LoopKind.CONTRACTED, 2)
    held2 = loops.add(k1, LoopKind.CONTRACTED, 3)
    loops.require(outer, held)
    loops.require(outer, held2)
    assert loops.enclosers(held) == {outer} and loops.enclosers(free) == frozenset()
    assert not loops.try_unite(free, held) and not loops.try_unite(held, free)
    assert loops.try_unite(held, held2)  # same enclosers
    # enclosers are compared as union-find classes: folding the outer loops makes the
    # loops they hold equal in this respect
    other = loops.add(i1, LoopKind.EXTERNAL, 4)
    held3 = loops.add(k1, LoopKind.CONTRACTED, 5)
    loops.require(other, held3)
    assert not loops.try_unite(held, held3)
    assert loops.try_unite(outer, other) and loops.try_unite(held, held3)


def test_nesting_pairs_only_for_carried_enclosing_modes():
    # The a2 sum carries i1 (its i loop encloses it); the a3 sum carries no i mode.
    sf = schedule_text(
        "R{i1} = f{i1;a2} t{a2} + g{a3} h{a3} u{i1}",
        {"i": {"batches": 2, "roles": "external"}, "a": {"batches": 2, "roles": "contracted"}},
    )
    kinds = dict(sf.rich.loop_kind)
    (ext,) = [lp for lp, k in kinds.items() if k is LoopKind.EXTERNAL]
    inner = {b for a, b, _ in sf.rich.loop_order if a == ext}
    assert len(inner) == 1 and len([lp for lp in kinds if lp[0] == "a"]) == 2


def test_deep_sum_chain_is_iterative():
    term = mul(leaf("f", "a1", "a2"), leaf("t", "a2", "i1"))
    node = term
    for k in range(3000):
        node = add(node, mul(leaf(f"F{k}", "a1", "a2"), leaf("t", "a2", "i1")), rc=Fraction(1, 2))
    forest = forest_of(("R", node))
    rich = build_rich_schedule(annotate(forest, BatchPlan.of(EXT_I)))
    assert rich.num_points == 3001 * 3 + 3000
    assert len(rich.loop_kind) == 1


@pytest.mark.parametrize(
    "opens, match",
    [
        ({(0, 0): [("i_1", "Contracted")]}, "not summed"),
        ({(0, 0): [("Κ_1", "External")]}, "not on the node's result"),
        ({(0, 0): [("Κ_1", "Contracted"), ("Κ_1", "Contracted")]}, "opened twice"),
        ({(0, 0): [("i_1", "External")], (0, 1): [("i_1", "External")]}, "enclosing loop"),
    ],
)
def test_annotation_errors(opens, match):
    forest = forest_of(
        ("R", mul(leaf("A", "i1", "", "K1"), leaf("B", "", "", "K1"))), spaces=SPACES
    )
    ann = annotate_by_hand(forest, BatchPlan.of({"i": 2, "Κ": 2}), opens)
    with pytest.raises(AnnotationError, match=match) as err:
        build_rich_schedule(ann)
    assert "value `" in str(err.value) and "Κ_1" in str(err.value)  # names the expression


def test_summed_label_shadowing_an_enclosing_loop():
    inner = mul(leaf("A", "i1,a1"), leaf("B", "a1"))  # sums a_1
    top = mul(inner, leaf("C", "i1,a1"), "a1")  # re-uses a_1 as a result label
    forest = forest_of(("R", top))
    ann = annotate_by_hand(forest, BatchPlan.of({"a": 2}), {(0, 0): [("a_1", "External")]})
    with pytest.raises(AnnotationError, match="shadow"):
        build_rich_schedule(ann)


def test_str_is_readable():
    forest, plan = text_case("df_kappa")
    text = str(build_rich_schedule(annotate(forest, plan)))
    assert "loop Κ#0: Contracted" in text and "B{p_1,p_3;;Κ_1}" in text
