"""Grouping permuted copies in sums (forest/_permsum.py): fewer transposed reads, same sum.

The oracles here are independent of the grouping: hand-written ``numpy.einsum`` with the
(anti)symmetrizer applied to the arrays, the per-term evaluator of ``test_cse`` (one
einsum per expanded term), and the same forest built with the grouping switched off.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sq_jax as sq
from sq_jax.cc.equations import load_equations
from sq_jax.expr.nodes import Equation, Index, Product, Sum, Tensor
from sq_jax.forest._permsum import group_permuted, relabel_node
from sq_jax.forest.canon import leaf_node
from sq_jax.forest.factor import unfactored
from sq_jax.forest.inputs import input_specs
from sq_jax.forest.nodes import NodeKind
from sq_jax.lower.instructions import lower_schedule
from sq_jax.lower.ir import Accumulate, Combine, Loop
from sq_jax.plan import BatchPlan
from sq_jax.schedule import schedule_forest
from sq_jax.schedule.cost import schedule_flops
from tests.helpers.dense_eval import (
    evaluate_direct,
    evaluate_occurrences,
    evaluate_roots,
    occurrences_by_key,
)
from tests.helpers.permsum import sum_reads, ungrouped

A1, A2, A3 = Index("a", 1), Index("a", 2), Index("a", 3)
I1, I2, I3 = Index("i", 1), Index("i", 2), Index("i", 3)


def build_both(eqs, spaces):
    # the flat expansion: these tests count the grouping's reads of each permuted copy,
    # which the factoring pass (tests/test_factor.py) would merge first
    with unfactored():
        grouped = sq.build_forest(eqs, spaces)
        with ungrouped():
            plain = sq.build_forest(eqs, spaces)
    return grouped, plain


def random_inputs(forest, seed=0):
    rng = np.random.default_rng(seed)
    return {s.block_key: rng.standard_normal(s.shape) for s in input_specs(forest)}


def combines(forest):
    """(adds, those that transpose an operand) of the unbatched lowering: its Combine
    instructions, and the terms of its sequenced sums (n terms: n - 1 adds)."""
    adds, moved = 0, 0
    stack = list(lower_schedule(schedule_forest(forest, BatchPlan())).body)
    while stack:
        ins = stack.pop()
        if isinstance(ins, Loop):
            stack += ins.body
        elif isinstance(ins, Accumulate):
            stack += [i for t in ins.terms for i in t.body]
            adds += len(ins.terms) - 1
            moved += sum(t.perm != tuple(range(len(t.perm))) for t in ins.terms)
        elif isinstance(ins, Combine):
            adds += 1
            moved += any(p != tuple(range(len(p))) for p in ins.perms)
    return adds, moved


# -- CCSD: the transposed reads of R2 --------------------------------------------------------


def test_ccsd_so_r2_reads_each_permutation_once():
    eqs = sq.parse(load_equations("ccsd_so"))
    grouped, plain = build_both(eqs, sq.Spaces(i=4, a=6))
    sums_before, moved_before = sum_reads(plain, "R2")
    sums_after, moved_after = sum_reads(grouped, "R2")
    assert sums_before == 123 and moved_before >= 100  # 124 terms, most copies transposed
    assert moved_after <= 35 and sums_after < 45
    # the lowering sees the same: fewer Combines, far fewer of them transposing
    (n_before, t_before), (n_after, t_after) = combines(plain), combines(grouped)
    assert n_after < n_before // 2 and t_after <= 40 and t_before >= 2 * t_after
    # and fewer FLOPs (each grouped permutation is added once)
    assert grouped.flops < plain.flops


def test_ccsd_cs_r2_symmetrizer_pairs_are_grouped():
    eqs = sq.parse(load_equations("ccsd_cs"))
    grouped, plain = build_both(eqs, sq.Spaces(i=4, a=6))
    sums_before, moved_before = sum_reads(plain, "R2")
    sums_after, moved_after = sum_reads(grouped, "R2")
    assert sums_after < sums_before * 0.6 and moved_after < moved_before * 0.6


@pytest.mark.parametrize("name", ["ccsd_so", "ccsd_cs"])
def test_ccsd_grouped_equals_ungrouped(name):
    eqs = sq.parse(load_equations(name))
    grouped, plain = build_both(eqs, sq.Spaces(i=2, a=3))
    inputs = random_inputs(grouped, seed=1)
    got = sq.evaluate_reference(grouped, None, inputs)
    want = sq.evaluate_reference(plain, None, inputs)
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-12, atol=1e-12, err_msg=key)


# -- hand oracles ----------------------------------------------------------------------------


def antisymmetrize(x, *axis_groups):
    """Σ over independent permutations of each group of axes, with their signs."""
    out = np.zeros_like(x)
    for perms in itertools.product(*(itertools.permutations(g) for g in axis_groups)):
        axes, sign = list(range(x.ndim)), 1
        for group, perm in zip(axis_groups, perms, strict=True):
            for src, dst in zip(group, perm, strict=True):
                axes[src] = dst
            sign *= (-1) ** sum(a > b for a, b in itertools.combinations(perm, 2))
        out += sign * np.transpose(x, axes)
    return out


def check(text, spaces, oracle, seed=0):
    (eq,) = sq.parse(text)
    grouped, plain = build_both([eq], spaces)
    inputs = random_inputs(grouped, seed)
    got = sq.evaluate_reference(grouped, None, inputs)[eq.name]
    np.testing.assert_allclose(got, oracle(inputs), rtol=1e-12, atol=1e-12)
    want = sq.evaluate_reference(plain, None, inputs)[eq.name]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    return grouped, plain


def test_antisymmetrizer_families_plain_term_and_partial_operator():
    text = (
        "R{a1,a2;i1,i2} = Â{i1,i2;a1,a2} f{a2;a3} t{a1,a3;i1,i2}"
        " - 1/2 Â{i1,i2;a1,a2} f{i3;i2} t{a1,a2;i1,i3}"
        " + 1/4 Â{i1,i2;a1,a2} g{a1,a2;a3,a4} t{a3,a4;i1,i2}"
        " + g{a1,a2;i1,i2}"
        " + Â{i1,i2;} f{i3;i1} t{a1,a2;i3,i2}"
        " + 2 Â{i1,i2;} v{a1;i1} v{a2;i2}"
        " - 3 Â{i1,i2;} w{a1,a2;i3,i1} u{i3;i2}"
    )

    def oracle(x):
        f_aa, f_ii, t = x["f{a;a}"], x["f{i;i}"], x["t{a,a;i,i}"]
        full = (
            np.einsum("bc,acij->abij", f_aa, t)
            - 0.5 * np.einsum("kj,abik->abij", f_ii, t)
            + 0.25 * np.einsum("abcd,cdij->abij", x["g{a,a;a,a}"], t)
        )
        part = (
            np.einsum("ki,abkj->abij", f_ii, t)
            + 2 * np.einsum("ai,bj->abij", x["v{a;i}"], x["v{a;i}"])
            - 3 * np.einsum("abki,kj->abij", x["w{a,a;i,i}"], x["u{i;i}"])
        )
        return antisymmetrize(full, (0, 1), (2, 3)) + x["g{a,a;i,i}"] + antisymmetrize(part, (2, 3))

    grouped, plain = check(text, sq.Spaces(i=3, a=4), oracle)
    assert sum_reads(grouped, "R")[1] < sum_reads(plain, "R")[1]


def test_symmetrizer_families_with_an_unsymmetrized_term():
    text = (
        "R{a1,a2;i1,i2} = Ŝ{i1,i2;a1,a2} f{a1;a3} t{a3,a2;i1,i2}"
        " + 1/2 Ŝ{i1,i2;a1,a2} g{a1,a2;a3,a4} t{a3,a4;i1,i2}"
        " - Ŝ{i1,i2;a1,a2} f{i3;i1} t{a1,a2;i3,i2}"
        " + 3 g{a1,a2;i1,i2}"
    )

    def oracle(x):
        t = x["t{a,a;i,i}"]
        y = (
            np.einsum("ac,cbij->abij", x["f{a;a}"], t)
            + 0.5 * np.einsum("abcd,cdij->abij", x["g{a,a;a,a}"], t)
            - np.einsum("ki,abkj->abij", x["f{i;i}"], t)
        )
        return y + y.transpose(1, 0, 3, 2) + 3 * x["g{a,a;i,i}"]

    grouped, plain = check(text, sq.Spaces(i=3, a=4), oracle)
    assert sum_reads(grouped, "R")[0] < sum_reads(plain, "R")[0]


def test_triples_antisymmetrizer_and_copies_that_coincide():
    # v v v under a simultaneous permutation of the (a, i) columns is the same product:
    # such copies of one orientation count as one, and u u u is a family of that pattern
    text = (
        "R{a1,a2,a3;i1,i2,i3} = Â{i1,i2,i3;a1,a2,a3} f{a3;a4} t{a1,a2,a4;i1,i2,i3}"
        " - 1/2 Â{i1,i2,i3;a1,a2,a3} f{i4;i3} t{a1,a2,a3;i1,i2,i4}"
        " + 1/6 Â{i1,i2,i3;a1,a2,a3} v{a1;i1} v{a2;i2} v{a3;i3}"
        " - 1/3 Â{i1,i2,i3;a1,a2,a3} u{a1;i1} u{a2;i2} u{a3;i3}"
    )

    def oracle(x):
        t, v = x["t{a,a,a;i,i,i}"], x["v{a;i}"]
        y = np.einsum("cd,abdijk->abcijk", x["f{a;a}"], t) - 0.5 * np.einsum(
            "lk,abcijl->abcijk", x["f{i;i}"], t
        )
        u = x["u{a;i}"]
        vvv = np.einsum("ai,bj,ck->abcijk", v, v, v) / 6
        uuu = np.einsum("ai,bj,ck->abcijk", u, u, u) / 3
        return antisymmetrize(y + vvv - uuu, (0, 1, 2), (3, 4, 5))

    grouped, plain = check(text, sq.Spaces(i=2, a=3), oracle)
    assert sum_reads(grouped, "R")[1] < sum_reads(plain, "R")[1] / 3  # 42 of 143 here


def test_partial_pattern_chooses_a_valid_representative():
    # 3 of the 4 signed permutations: not a group, so only one member of each family
    # represents it with that pattern; the w family is the h pattern seen from a2 a1
    text = (
        "R{a1,a2;i1,i2} = 2 h{a1,a2;i1,i2} - 2 h{a2,a1;i1,i2} - 2 h{a1,a2;i2,i1}"
        " + w{a2,a1;i1,i2} - w{a1,a2;i1,i2} - w{a2,a1;i2,i1}"
    )

    def oracle(x):
        h, w = x["h{a,a;i,i}"], x["w{a,a;i,i}"]
        y = 2 * h + w.transpose(1, 0, 2, 3)
        return y - y.transpose(1, 0, 2, 3) - y.transpose(0, 1, 3, 2)

    grouped, plain = check(text, sq.Spaces(i=2, a=3), oracle)
    assert (sum_reads(plain, "R")[0], sum_reads(grouped, "R")[0]) == (5, 3)


def test_keys_do_not_depend_on_the_left_hand_side_order():
    rhs = sq.parse_expr(
        "Â{i1,i2;a1,a2} f{a2;a3} t{a1,a3;i1,i2} + Â{i1,i2;a1,a2} f{i3;i2} t{a1,a2;i1,i3}"
    )
    spaces = sq.Spaces(i=3, a=4)
    keys = {
        sq.build_forest([Equation(Tensor("R", bra, ket), rhs)], spaces).roots[0].node.key
        for bra, ket in (((A1, A2), (I1, I2)), ((I2, I1), (A2, A1)), ((A2, I1), (A1, I2)))
    }
    assert len(keys) == 1


def test_group_permuted_merges_copies_and_leaves_lone_or_cancelling_families():
    def leaf(label, bra):
        return leaf_node(Tensor(label, bra, (I1, I2)))

    result = (A1, A2, I1, I2)
    f, f_swapped = leaf("f", (A1, A2)), leaf("f", (A2, A1))
    h, h_swapped = leaf("h", (A1, A2)), leaf("h", (A2, A1))
    one = Fraction(1)
    # one family only: nothing to share
    lone = [(f, one), (f_swapped, -one), (f, 3 * one), (f_swapped, 2 * one)]
    assert group_permuted(lone, result) == lone
    # copies of one orientation count as one: f + f - 2 f^(a1a2) joins 2 h - 2 h^(a1a2)
    terms = [(f, one), (h, 2 * one), (f, one), (f_swapped, -2 * one), (h_swapped, -2 * one)]
    (y, c0), (y_swapped, c1) = group_permuted(terms, result)
    assert (c0, c1) == (1, -1) and y_swapped.key == y.key
    assert (y.left, y.left_coef, y.right, y.right_coef) == (f, 2, h, 2)
    assert y_swapped.indices == (A2, A1, I1, I2)
    # orientations that cancel: that family is left as it is, so h has no partner
    cancelling = [(f, one), (f, -one), (f_swapped, one), (h, one), (h_swapped, -one)]
    assert group_permuted(cancelling, result) == cancelling
    # scalars have nothing to permute
    e = leaf_node(Tensor("e"))
    assert group_permuted([(e, one)] * 4, ()) == [(e, one)] * 4


def test_relabel_node_keeps_keys_and_is_iterative():
    text = " + ".join(f"{k + 1} f{{a1;a2}} t{{a2;i1}}" for k in range(3000))
    forest = sq.build_forest(sq.parse(f"R{{a1;i1}} = {text}"), sq.Spaces(i=2, a=3))
    node = forest.roots[0].node
    copy = relabel_node(node, {A1: Index("a", 7), I1: Index("i", 9)})
    assert copy.key == node.key
    assert [str(ix) for ix in copy.indices] == ["a_7", "i_9"]


# -- randomized: sums of permuted terms ------------------------------------------------------

TEMPLATES = (
    "f{A1;a3} t{a3,A2;I1,I2}",
    "g{A1,A2;a3,a4} t{a3,a4;I1,I2}",
    "f{i3;I1} t{A1,A2;i3,I2}",
    "v{A1;I1} v{A2;I2}",
    "w{A1,I1;A2,I2}",
    "v{A2;i3} t{A1,a3;I1,I2} u{a3;i3}",
    "x{A1,A2;I1,I2}",
)
SPACE_PERMS = tuple(
    {"A1": a[0], "A2": a[1], "I1": i[0], "I2": i[1]}
    for a in (("a1", "a2"), ("a2", "a1"))
    for i in (("i1", "i2"), ("i2", "i1"))
)
COEFS = (Fraction(1), Fraction(-1), Fraction(1, 2), Fraction(-2), Fraction(3))


def compose(outer, inner):
    """The relabeling ``outer ∘ inner`` of the placeholders (as result label names)."""
    back = {"a1": "A1", "a2": "A2", "i1": "I1", "i2": "I2"}
    return {k: outer[back[v]] for k, v in inner.items()}


def term(template, labels, coef):
    text = template
    for k, v in labels.items():
        text = text.replace(k, v)
    return Product(coef, (sq.parse_expr(text),))


@st.composite
def permuted_sums(draw):
    terms = []
    for _ in range(draw(st.integers(1, 3))):  # patterns shared by a few families each
        perms = draw(st.lists(st.sampled_from(range(4)), min_size=1, max_size=4, unique=True))
        ratios = [draw(st.sampled_from(COEFS)) for _ in perms]
        for _ in range(draw(st.integers(1, 3))):
            template = draw(st.sampled_from(TEMPLATES))
            twist = SPACE_PERMS[draw(st.sampled_from(range(4)))]
            coef = draw(st.sampled_from(COEFS))
            for p, r in zip(perms, ratios, strict=True):
                terms.append(term(template, compose(SPACE_PERMS[p], twist), coef * r))
    for _ in range(draw(st.integers(0, 3))):  # loose terms
        labels = SPACE_PERMS[draw(st.sampled_from(range(4)))]
        terms.append(term(draw(st.sampled_from(TEMPLATES)), labels, draw(st.sampled_from(COEFS))))
    terms = draw(st.permutations(terms))
    lhs = draw(st.sampled_from([((A1, A2), (I1, I2)), ((I1, A2), (A1, I2))]))
    return Equation(Tensor("R", *lhs), Sum(tuple(terms)) if len(terms) > 1 else terms[0])


@settings(
    derandomize=True,
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(eq=permuted_sums())
def test_grouped_sums_are_the_same_sums(eq):
    spaces = sq.Spaces(i=2, a=3)
    grouped, plain = build_both([eq], spaces)
    bank: dict = {}
    arrays = evaluate_occurrences([r.node for r in grouped.roots], spaces, bank, {})
    for key, nodes in occurrences_by_key(grouped).items():  # the relabeled Y's are sound
        for other in nodes[1:]:
            np.testing.assert_array_equal(arrays[id(other)], arrays[id(nodes[0])], err_msg=key)
    got = evaluate_roots(grouped, bank, {})["R"]
    np.testing.assert_allclose(got, evaluate_direct(eq, spaces, bank, {}), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, evaluate_roots(plain, bank, {})["R"], rtol=1e-12, atol=1e-12)
    assert sum_reads(grouped, "R")[0] <= sum_reads(plain, "R")[0]  # never more additions


# -- scheduling: Y is built once, and its repeats neither keep operands alive nor split it --


def test_repeats_of_a_grouped_sum_do_not_keep_its_operands_alive():
    (eq,) = sq.parse("R{i1;i2} = f{i1;i3} g{i3;i2} + h{i1;i2} + f{i2;i3} g{i3;i1} + h{i2;i1}")
    forest = sq.build_forest([eq], sq.Spaces(i=3))
    root = forest.roots[0].node
    y, y_swapped = root.left, root.right  # R = Y + Y^(i1 i2): one value, two occurrences
    assert y.key == y_swapped.key and y.kind is NodeKind.SUM
    rich = schedule_forest(forest, BatchPlan()).rich
    cell = {c.hash: c for c in rich.cells}
    fg = cell[y.left.hash]  # f g, built for Y; Y^(i1 i2) repeats it but is never built
    assert len(fg.occurrences) == 2 and len(cell[y.hash].occurrences) == 2
    assert fg.last_use == cell[y.hash].first_use < fg.occurrences[1].consumer_point


def test_ccsd_grouped_static_peaks():
    # realistic extents: with o close to v, the o⁴ intermediates that Y and its batched
    # copies share weigh as much as the o²v² terms and the batched peaks differ more
    eqs = sq.parse(load_equations("ccsd_so"))
    grouped, plain = build_both(eqs, sq.Spaces(i=10, a=38))
    ys = grouped_sums(grouped, "R2")
    assert len(ys) == 2  # the Â{i1,i2;a1,a2} families, and those that only permute i1 i2
    for batch in ({}, {"a": 2}, {"i": 2}):
        plan = BatchPlan.of(batch) if batch else BatchPlan()
        sf, sf_plain = schedule_forest(grouped, plan), schedule_forest(plain, plan)
        # one value per batch layout: swapping the labels of a space that is not batched
        # reads the same value (the i swap under a batching of a, and vice versa)
        for y in ys:
            assert len([c for c in sf.rich.cells if c.hash == y.hash]) <= (2 if batch else 1)
        # shared intermediates live from Y to its batched copies
        assert sf.peak.peak_bytes <= 1.15 * sf_plain.peak.peak_bytes
        # unbatched, Y's adds are saved; batched, Y is built once per batch layout while
        # each ungrouped copy is built in its own orientation (measured: a in 2, 1.10x;
        # i in 2, 1.005x) — in exchange the grouped program's memory falls with the batch
        # size (the ungrouped copies each leave a whole result-sized value)
        limit = 1.0 if not batch else 1.15
        assert schedule_flops(sf) <= limit * schedule_flops(sf_plain)


def grouped_sums(forest, name):
    """The SUM values read under two labelings or more by a SUM read under one: the Y's."""
    root = next(r for r in forest.roots if r.name == name)
    labelings, parents, first = defaultdict(set), defaultdict(set), {}
    stack = [(root.node, None)]
    while stack:
        node, parent = stack.pop()
        if node.kind is not NodeKind.SUM:
            continue
        labelings[node.key].add(node.indices)
        first.setdefault(node.key, node)
        if parent is not None:
            parents[node.key].add(parent)
        stack += [(node.left, node.key), (node.right, node.key)]
    return [
        first[k]
        for k in first
        if len(labelings[k]) > 1 and any(len(labelings[p]) == 1 for p in parents[k])
    ]
