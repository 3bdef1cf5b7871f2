"""The factoring pass (sq_jax.forest.factor): same results as the flat sums, fewer FLOPs.

The oracle is never factored: the reference evaluator builds its forest inside
``unfactored()``, and the random sums are also checked against ``evaluate_direct`` (one
einsum per term of the expression, no forest at all).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sq_jax as sq
from sq_jax.cc.equations import load_equations
from sq_jax.expr.nodes import Equation, Index, Product, Sum, Tensor
from sq_jax.forest.factor import factor_terms, sharing_groups, unfactored
from sq_jax.forest.inputs import bind_inputs, input_specs
from sq_jax.forest.reference import evaluate_forest
from tests.helpers import corpus
from tests.helpers.dense_eval import evaluate_direct, evaluate_roots

CC_SETS = ("ccsd_cs", "ccd_cs", "ccsd_cs_df", "ccsd_so", "ccd_so")
CC_SPACES = sq.Spaces({"Κ": 6}, i=3, a=5)


def both_forests(eqs, spaces, dress=False):
    with unfactored():
        flat = sq.build_forest(eqs, spaces)
    return flat, sq.build_forest(eqs, spaces, dress=dress)


def random_blocks(forest, seed=0):
    rng = np.random.default_rng(seed)
    return {s.block_key: rng.standard_normal(s.shape) for s in input_specs(forest)}


def assert_same(got, want):
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12)


# -- the corpus and the CC equation sets -----------------------------------------------


@pytest.mark.parametrize("case", corpus.CASES, ids=lambda c: c.name)
def test_corpus_equals_oracle_and_flops_do_not_grow(case):
    eqs = sq.parse(case.text, spaces=corpus.SPACES)
    flat, factored = both_forests(eqs, corpus.SPACES)
    assert factored.flops <= flat.flops
    inputs = corpus.inputs_for(case, corpus.make_inputs(3))
    got = evaluate_forest(factored, bind_inputs(factored, inputs))
    assert_same(got, sq.evaluate_reference(eqs, corpus.SPACES, inputs))
    assert_same(got, {k: np.asarray(v) for k, v in case.oracle(corpus.make_inputs(3)).items()})


@pytest.mark.parametrize("name", CC_SETS)
def test_cc_sets_equal_flat_forest_and_save_flops(name):
    eqs = sq.parse(load_equations(name))
    flat, factored = both_forests(eqs, CC_SPACES, dress=True)
    blocks = random_blocks(flat)
    assert_same(evaluate_forest(factored, blocks), evaluate_forest(flat, blocks))
    big = sq.Spaces({"Κ": 456}, i=21, a=93)
    flat_big, factored_big = both_forests(eqs, big, dress=True)
    assert factored_big.flops < flat_big.flops  # every set has shared factors
    assert factored.flops <= flat.flops


@pytest.mark.parametrize(
    ("name", "batch"),
    [(name, None) for name in CC_SETS] + [("ccsd_cs", {"a": 2}), ("ccsd_so", {"i": 2})],
)
def test_compiled_program_equals_reference(name, batch):
    eqs = sq.parse(load_equations(name))
    prog = sq.compile(eqs, CC_SPACES, batch=batch)
    with unfactored():
        flat = sq.build_forest(eqs, CC_SPACES)
    blocks = random_blocks(flat, seed=1)
    if batch is None:  # a batched program's FLOPs include recomputation
        assert prog.flops <= flat.flops
    assert_same({k: np.asarray(v) for k, v in prog(blocks).items()}, evaluate_forest(flat, blocks))


# -- hand-made sums ------------------------------------------------------------------


def test_shared_factor_is_pulled_out_once():
    (eq,) = sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1} - 2 f{a1;a3} u{a3;i1} + f{a1;a4} v{a4;i1}")
    spaces = sq.Spaces(i=4, a=30)
    (term,) = factor_terms(eq.rhs.terms, eq.lhs.indices, spaces)
    assert isinstance(term, Product) and isinstance(term.factors[1], Sum)
    assert [str(t.scalar) for t in term.factors[1].terms] == ["1", "-2", "1"]
    flat, factored = both_forests([eq], spaces)
    products = [v for v in factored.values() if v.kind is sq.NodeKind.PRODUCT]
    assert len(products) == 1  # three contractions became one
    assert factored.flops == 2 * 30 * 30 * 4 + 2 * 30 * 4
    assert flat.flops == 3 * 2 * 30 * 30 * 4 + 2 * 30 * 4


def test_nested_products_factor_recursively():
    # F G X + F G Y: F is pulled out, then G out of the inner sum
    text = "R{a1;i1} = f{a1;a2} g{a2;a3} x{a3;i1} + f{a1;a4} g{a4;a5} y{a5;i1}"
    eqs = sq.parse(text)
    flat, factored = both_forests(eqs, sq.Spaces(i=2, a=40))
    products = [v for v in factored.values() if v.kind is sq.NodeKind.PRODUCT]
    assert len(products) == 2 and factored.flops < flat.flops
    blocks = random_blocks(flat)
    assert_same(evaluate_forest(factored, blocks), evaluate_forest(flat, blocks))


def test_merge_that_costs_more_is_left_alone():
    # pulling f out would make each rest an (a1,a2,i1) intermediate of the big x·y chain:
    # the sum of two such (2·a²·i adds and their contractions) costs more than it saves
    text = "R{a1;i1} = f{a1;a2} x{a2;a3} y{a3;i1} + f{a1;a4} z{a4;i1}"
    (eq,) = sq.parse(text)
    spaces = sq.Spaces(i=50, a=3)
    assert factor_terms(eq.rhs.terms, eq.lhs.indices, spaces) == list(eq.rhs.terms)
    flat, factored = both_forests([eq], spaces)
    assert factored.flops == flat.flops


def test_unfactored_block_turns_the_pass_off():
    (eq,) = sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1} + f{a1;a3} u{a3;i1}")
    with unfactored():
        assert factor_terms(eq.rhs.terms, eq.lhs.indices, sq.Spaces(i=4, a=30)) == list(
            eq.rhs.terms
        )


def test_five_thousand_shared_terms_factor_fast():
    # g shared by 5000 distinct values (5000 distinct second factors)
    a1, i1 = Index("a", 1), Index("i", 1)
    terms = []
    for k in range(5000):
        d = Index("i", k + 2)
        second = Tensor(f"x{k}", (d,), (i1,))
        terms.append(Product(Fraction(k % 3 + 1), (Tensor("g", (a1,), (d,)), second)))
    eqs = [Equation(Tensor("R", (a1,), (i1,)), Sum(tuple(terms)))]
    flat, factored = both_forests(eqs, sq.Spaces(i=2, a=2))
    products = [v for v in factored.values() if v.kind is sq.NodeKind.PRODUCT]
    assert len(products) == 1 and factored.flops < flat.flops
    blocks = random_blocks(flat)
    assert_same(evaluate_forest(factored, blocks), evaluate_forest(flat, blocks))


# -- random sums with shared factors ---------------------------------------------------

A1, I1 = Index("a", 1), Index("i", 1)


@st.composite
def shared_sums(draw):
    """R{a1;i1} = sum of 2-3 factor chains a1 -> x -> y -> i1 over few labels (many shared)."""
    terms = []
    for k in range(draw(st.integers(2, 7))):
        d1 = Index("a", 10 + 2 * k)
        d2 = Index(draw(st.sampled_from("ai")), 11 + 2 * k)
        first = Tensor(draw(st.sampled_from("fg")), (A1,), (d1,))
        if draw(st.booleans()):
            factors = (first, Tensor(draw(st.sampled_from("tu")), (d1,), (I1,)))
        else:
            mid = Tensor(draw(st.sampled_from("hk")), (d1,), (d2,))
            factors = (first, mid, Tensor(draw(st.sampled_from("tu")), (d2,), (I1,)))
        order = draw(st.permutations(range(len(factors))))
        coef = Fraction(draw(st.integers(-3, 3)) or 1)
        terms.append(Product(coef, tuple(factors[n] for n in order)))
    return Equation(Tensor("R", (A1,), (I1,)), Sum(tuple(terms)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(eq=shared_sums(), extents=st.tuples(st.integers(1, 6), st.integers(1, 6)))
def test_random_shared_sums_equal_direct_evaluation(eq, extents):
    spaces = sq.Spaces(i=extents[0], a=extents[1])
    flat, factored = both_forests([eq], spaces, dress=True)
    assert factored.flops <= flat.flops
    bank: dict = {}
    want = evaluate_direct(eq, spaces, bank, {})
    got = evaluate_roots(factored, bank, {})["R"]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@st.composite
def bilinear_sums(draw):
    """R{a1;i1} = Σ_j c_j (F1 + r F2)·R_j expanded (partners sometimes dropped or rescaled)."""
    rests = draw(st.lists(st.sampled_from(["t", "tx", "u"]), min_size=2, max_size=3, unique=True))
    f2_kind = draw(st.sampled_from(["hs", "hk"]))
    ratio = Fraction(draw(st.sampled_from([-2, -1, 1, 3])))
    terms = []
    for rest_kind in rests:
        coef = Fraction(draw(st.integers(-3, 3)) or 1)
        for dressed in (False, True):
            n = 10 + 10 * len(terms)
            d, c, e, m = Index("a", n), Index("a", n + 1), Index("i", n + 2), Index("i", n + 3)
            if dressed and f2_kind == "hs":
                outer = (Tensor("h", (A1,), (d,), (e,)), Tensor("s", (e,), ()))
            elif dressed:
                outer = (Tensor("h", (A1,), (c,)), Tensor("k", (c,), (d,)))
                c = Index("a", n + 4)
            else:
                outer = (Tensor("g", (A1,), (d,)),)
            if rest_kind == "tx":
                rest = (Tensor("t", (d, c), (I1, m)), Tensor("x", (c,), (m,)))
            else:
                rest = (Tensor(rest_kind, (d,), (I1,)),)
            scale = ratio if dressed else Fraction(1)
            if dressed and draw(st.integers(0, 7)) == 0:
                scale += 1 if scale != -1 else 2  # a partner off the ratio: no block here
            factors = outer + rest
            order = draw(st.permutations(range(len(factors))))
            terms.append(Product(scale * coef, tuple(factors[k] for k in order)))
    return Equation(Tensor("R", (A1,), (I1,)), Sum(tuple(terms)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(eq=bilinear_sums(), extents=st.tuples(st.integers(1, 6), st.integers(2, 9)))
def test_random_bilinear_sums_equal_direct_evaluation(eq, extents):
    spaces = sq.Spaces(i=extents[0], a=extents[1])
    flat, factored = both_forests([eq], spaces)
    assert factored.flops <= flat.flops
    bank: dict = {}
    want = evaluate_direct(eq, spaces, bank, {})
    got = evaluate_roots(factored, bank, {})["R"]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["ccsd_cs", "ccsd_so"])
def test_permuted_sum_grouping_still_applies_to_factored_terms(name):
    from tests.helpers.permsum import sum_reads, ungrouped

    eqs = sq.parse(load_equations(name))
    spaces = sq.Spaces(i=4, a=6)
    grouped = sq.build_forest(eqs, spaces)
    with ungrouped():
        plain = sq.build_forest(eqs, spaces)
    (sums_g, moved_g), (sums_p, moved_p) = sum_reads(grouped, "R2"), sum_reads(plain, "R2")
    assert sums_g < sums_p and moved_g < 0.8 * moved_p and grouped.flops < plain.flops


def test_keys_do_not_depend_on_the_left_hand_side_order():
    a1, a2, i1, i2 = Index("a", 1), Index("a", 2), Index("i", 1), Index("i", 2)
    rhs = sq.parse_expr(
        "f{a1;a3} x{a3;a4} t{a4,a2;i1,i2} + f{a1;a5} y{a5,a2;i1,i2} - 2 f{a1;a6} z{a6,a2;i2,i1}"
    )
    spaces = sq.Spaces(i=3, a=9)
    forests = [
        sq.build_forest([Equation(Tensor("R", bra, ket), rhs)], spaces)
        for bra, ket in (((a1, a2), (i1, i2)), ((i2, i1), (a2, a1)), ((a2, i1), (a1, i2)))
    ]
    with unfactored():
        flat = sq.build_forest([Equation(Tensor("R", (a1, a2), (i1, i2)), rhs)], spaces)
    assert len({f.roots[0].node.key for f in forests}) == 1
    assert forests[0].flops < flat.flops


def test_a_value_another_sum_builds_is_shared():
    # X alone pulls g out (its first group): g·(u + t) + t·h, two contractions; Y builds
    # t·(g + h) anyway, so the second build (GroupSharing) makes X = u·g + t·(g + h)
    text = (
        "X{a1;i1} = u{a1;a4} g{a4;i1} + t{a1;a2} g{a2;i1} + t{a1;a3} h{a3;i1}\n"
        "Y{a1;i1} = t{a1;a2} g{a2;i1} + t{a1;a3} h{a3;i1}"
    )
    eqs = sq.parse(text)
    spaces = sq.Spaces(i=30, a=30)  # both groups of X are worth the same
    (pulled, _) = factor_terms(eqs[0].rhs.terms, eqs[0].lhs.indices, spaces)
    assert pulled.factors[0].label == "g"  # on its own, X factors the other way
    flat, factored = both_forests(eqs, spaces)
    products = [v for v in factored.values() if v.kind is sq.NodeKind.PRODUCT]
    assert len(products) == 2  # t·(g + h), shared, and u·g
    assert factored.flops == 2 * (2 * 30**3) + 2 * 30**2  # two contractions, two adds
    blocks = random_blocks(flat)
    assert_same(evaluate_forest(factored, blocks), evaluate_forest(flat, blocks))
    # the record, by hand: X's own sum does not price its own choice as paid
    with sharing_groups() as record:
        for eq in eqs:
            factor_terms(eq.rhs.terms, eq.lhs.indices, spaces)
    assert sorted(len(keys) for keys in record.chosen.values()) == [1, 1]
    with sharing_groups(record) as again:
        (_, shared) = factor_terms(eqs[0].rhs.terms, eqs[0].lhs.indices, spaces)
    assert shared.factors[0].label == "t" and len(again.chosen) == 1


@pytest.mark.parametrize(
    "text",
    [
        "R{a1;i1} = g{a1;a2} t{a2,a3;i1,i2} x{a3;i2} + g{a1;a2} t{a2;i1}"
        " - h{a1;a2;i3} s{i3} t{a2,a3;i1,i2} x{a3;i2} - h{a1;a2;i3} s{i3} t{a2;i1}",
        # the same sum with every term's dummies named apart (rests matched up to them)
        "R{a1;i1} = g{a1;a2} t{a2,a3;i1,i2} x{a3;i2} + g{a1;a4} t{a4;i1}"
        " - h{a1;a5;i3} s{i3} t{a5,a6;i1,i6} x{a6;i6} - h{a1;a7;i7} s{i7} t{a7;i1}",
    ],
)
def test_bilinear_block_dresses_the_shared_factor(text):
    # g·(t + t2 x) and (h s)·(t + t2 x): one (g − h s)·(t + t2 x) instead of two contractions
    eqs = sq.parse(text)
    spaces = sq.Spaces(i=8, a=9)
    flat, factored = both_forests(eqs, spaces, dress=True)
    lean = sq.build_forest(eqs, spaces)  # dressing is opt-in
    products = [v for v in factored.values() if v.kind is sq.NodeKind.PRODUCT]
    # h·s, t2·x, then (g − h s)·(t + t2 x): three contractions
    assert len(products) == 3 and factored.flops < lean.flops < flat.flops
    blocks = random_blocks(flat, seed=3)
    assert_same(evaluate_forest(factored, blocks), evaluate_forest(flat, blocks))
    assert_same(evaluate_forest(lean, blocks), evaluate_forest(flat, blocks))


def test_ccsd_cs_meets_the_textbook_count():
    # bench/README.md "FLOP counts": a hand count of the textbook factorization is 1.706e11
    eqs = sq.parse(load_equations("ccsd_cs"))
    forest = sq.build_forest(eqs, sq.Spaces(i=21, a=93), dress=True)
    assert forest.flops <= 1.1 * 1.706e11
