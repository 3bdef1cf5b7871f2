"""Facts kept once computed (the budget planner asks for them millions of times) stay
true: a kept value never outlives what it was derived from, and never changes equality."""

from __future__ import annotations

import dataclasses
import pickle
import sys

import sq_jax as sq
from sq_jax.expr.nodes import Index
from sq_jax.expr.spaces import Spaces
from sq_jax.forest.nodes import EvalNode, NodeKind, stable_hash
from sq_jax.forest.symmetry import value_symmetries
from sq_jax.lower.accumulate import reads_of
from sq_jax.lower.gemm import plan_gemm
from sq_jax.lower.ir import Contract, Loop, Read
from sq_jax.plan.batch import LoopKind


def test_extents_follow_the_spaces_they_were_read_from():
    spaces = Spaces(i=2, a=3)
    assert spaces.extent("a") == 3 and spaces.extent("p") == 5
    wider = spaces.with_extents(a=7)
    assert wider.extent("a") == 7 and wider.extent("p") == 9
    assert spaces.extent("a") == 3 and spaces.extent("p") == 5
    grown = spaces.with_space("w", members=("i", "a"))
    assert grown.extent("w") == 5
    assert Spaces(i=2, a=3) == spaces  # the kept extents are not part of equality
    assert pickle.loads(pickle.dumps(wider)).extent("p") == 9


def test_index_equality_and_hash_agree():
    i1, i1_again, a1 = Index("i", 1), Index("i", 1), Index("a", 1)
    pno = Index("a", 1, (i1, Index("i", 2)))
    assert i1 == i1_again and hash(i1) == hash(i1_again)
    assert i1 != a1 and a1 != pno and pno == Index("a", 1, (Index("i", 1), Index("i", 2)))
    assert i1 != "i_1" and (i1 == 1) is False
    assert {i1: "x"}[i1_again] == "x" and len({i1, i1_again, a1, pno}) == 3
    back = pickle.loads(pickle.dumps(pno))
    assert back == pno and hash(back) == hash(pno)
    # interned: equal indices are one object, however they were made
    assert i1 is i1_again and back is pno and pno.protos[0] is i1
    assert dataclasses.replace(a1, space="i") is i1 and Index(space="i", ordinal=1) is i1
    assert Index("i", True) is i1 and type(i1.ordinal) is int  # the first one's fields


def test_indices_made_by_threads_at_once_are_one_object():
    from concurrent.futures import ThreadPoolExecutor

    ordinals = range(10_000, 10_400)  # new indices: each one made by several threads

    def make(_):
        return [Index("q", n) for n in ordinals]

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between the lookup and the insert
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            made = list(pool.map(make, range(8)))
    finally:
        sys.setswitchinterval(interval)
    for k in range(len(ordinals)):
        assert len({id(run[k]) for run in made}) == 1


def test_eval_node_keeps_its_hash_and_summed_labels_until_replaced():
    i, j, k = Index("i", 1), Index("i", 2), Index("a", 1)
    left = EvalNode(NodeKind.LEAF, (i, k), "L")
    right = EvalNode(NodeKind.LEAF, (k, j), "R")
    node = EvalNode(NodeKind.PRODUCT, (i, j), "P", left, right)
    assert node.hash == stable_hash("P") and node.hash == stable_hash("P")
    assert node.summed_indices() == (k,) and node.summed_indices() == node.contracted_indices()
    relabelled = dataclasses.replace(node, indices=(i,), key="Q")  # j is summed now too
    assert relabelled.hash == stable_hash("Q")
    assert relabelled.summed_indices() == (k, j)


def test_value_symmetries_are_derived_once_per_forest():
    eqs = sq.parse("R{a1,a2;i1,i2} = t{a1;i1} t{a2;i2}")
    forest = sq.build_forest(eqs, sq.Spaces(i=2, a=3))
    first = value_symmetries(forest)
    assert value_symmetries(forest) is first
    other = dataclasses.replace(forest, pair_symmetry=True)
    assert other.derived == {}  # a new forest derives its own
    assert dict(value_symmetries(other)) == dict(first)


def test_a_loop_keeps_what_its_body_reads_without_changing_equality():
    a = Index("a", 1)
    body = (Contract(3, "a,a->a", (Read(1), Read(2)), ((4, ("a", 0)),)),)
    loop = Loop(("a", 0), a, LoopKind.EXTERNAL, 4, 2, body)
    twin = Loop(("a", 0), a, LoopKind.EXTERNAL, 4, 2, body)
    assert reads_of(loop) == {1, 2} and reads_of(loop) == {1, 2}
    assert loop.derived and not twin.derived
    assert loop == twin and hash(loop) == hash(twin)


def test_gemm_plans_do_not_depend_on_how_the_modes_are_passed():
    i, j, a, b = Index("i", 1), Index("i", 2), Index("a", 1), Index("a", 2)
    as_tuples = plan_gemm((a, i), (b, a, j), (b, i, j), (8, 8))
    as_lists = plan_gemm([a, i], [b, a, j], [b, i, j], [8, 8], [False, False])
    assert as_tuples == as_lists and as_tuples.perms == (None, (0, 2, 1))
