"""The eval-forest builder: structure, canonical keys, walks, cost, dump and errors."""

from __future__ import annotations

import sys
from fractions import Fraction

import numpy as np
import pytest

import sq_jax as sq
from sq_jax.expr.nodes import (
    Constant,
    Equation,
    Index,
    NormalOperator,
    Product,
    Sum,
    Tensor,
    Variable,
)
from sq_jax.forest.canon import leaf_node, product_node, sum_node
from sq_jax.forest.nodes import NodeKind
from tests.helpers.corpus import CASES, SPACES
from tests.helpers.dense_eval import evaluate_direct, evaluate_roots


def build(text: str, **extents: int) -> sq.Forest:
    return sq.build_forest(sq.parse(text), sq.Spaces(**(extents or {"i": 3, "a": 4})))


def root_key(text: str, **extents: int) -> str:
    return build(text, **extents).roots[0].node.key


# -- structure -----------------------------------------------------------------------------


def test_single_term_root_carries_the_coefficient():
    forest = build("E = 1/4 g{i1,i2;a1,a2} t{a1,a2;i1,i2}")
    (root,) = forest.roots
    assert (root.name, root.coef, root.lhs_is_tensor, root.indices) == (
        "E",
        Fraction(1, 4),
        False,
        (),
    )
    assert root.node.kind is NodeKind.PRODUCT
    assert root.node.indices == ()
    assert {str(ix) for ix in root.node.contracted_indices()} == {"i_1", "i_2", "a_1", "a_2"}


def test_sum_is_a_left_deep_chain_with_term_coefficients():
    forest = build("R{a1;i1} = f{a1;i1} - 1/2 g{a1;a2} t{a2;i1} + 3 h{i1;a1} + 2 ω f{a1;i1}")
    root = forest.roots[0]
    assert root.coef == 1
    assert [str(ix) for ix in root.indices] == ["a_1", "i_1"]
    chain, node = [], root.node
    while node.kind is NodeKind.SUM:
        chain.append((node.right_coef, node.right.kind))
        left = node
        node = node.left
    assert left.left_coef == 1 and node.kind is NodeKind.LEAF  # f{a1;i1}, coefficient 1
    assert chain[::-1] == [
        (Fraction(-1, 2), NodeKind.PRODUCT),
        (Fraction(3), NodeKind.LEAF),
        (Fraction(2), NodeKind.PRODUCT),
    ]
    inner = [n for n in forest.occurrences() if n.kind is NodeKind.SUM]
    assert all(n.left_coef == 1 for n in inner[1:])


def test_sum_result_order_is_the_first_terms_canonical_order():
    forest = build("R{i1;a1} = f{a1;i1} + h{i1;a1}")
    root = forest.roots[0]
    assert [str(ix) for ix in root.node.indices] == ["a_1", "i_1"]
    assert [str(ix) for ix in root.indices] == ["i_1", "a_1"]


def test_nested_products_are_flattened_and_constants_folded():
    i1, a1, a2 = Index("i", 1), Index("a", 1), Index("a", 2)
    f, t = Tensor("f", (a1,), (a2,)), Tensor("t", (a2,), (i1,))
    rhs = Product(Fraction(2), (Constant(Fraction(3)), Product(Fraction(-1, 4), (f,)), t))
    forest = sq.build_forest([Equation(Tensor("R", (a1,), (i1,)), rhs)], sq.Spaces(i=2, a=3))
    root = forest.roots[0]
    assert root.coef == Fraction(-3, 2)
    assert root.node.kind is NodeKind.PRODUCT
    assert {c.tensor.label for c in root.node.children} == {"f", "t"}


def test_nested_sum_is_one_operand_with_its_own_chain():
    text = "E = f{i1;a1} t{a1;i1} + g{i1,i2;a1,a2} (1/4 t{a1,a2;i1,i2} + 1/2 t{a1;i1} t{a2;i2})"
    forest = build(text)
    sums = [v for v in forest.values() if v.kind is NodeKind.SUM]
    inner = next(s for s in sums if s.indices)
    assert {ix.space for ix in inner.indices} == {"i", "a"} and len(inner.indices) == 4
    assert (inner.left_coef, inner.right_coef) == (Fraction(1, 4), Fraction(1, 2))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_forest_computes_the_equations(case):
    # independent of sq_jax's reference evaluator: test_cse's tiny evaluator and one
    # direct einsum per term (cases with a nested sum are compared through their oracle
    # form in test_reference)
    forest = sq.build_forest(sq.parse(case.text, spaces=SPACES), SPACES)
    bank: dict = {}
    variables = {"ω": 0.7}
    got = evaluate_roots(forest, bank, variables)
    for eq in sq.parse(case.text, spaces=SPACES):
        if any(isinstance(f, Sum) for t in _terms(eq.rhs) for f in _factors(t)):
            continue
        want = evaluate_direct(eq, SPACES, bank, variables)
        np.testing.assert_allclose(got[eq.name], want, rtol=1e-12, atol=1e-12)


def _terms(expr):
    return expr.terms if isinstance(expr, Sum) else (expr,)


def _factors(term):
    return term.factors if isinstance(term, Product) else (term,)


def test_nested_sum_numerics():
    forest = build("E = g{i1,i2;a1,a2} (1/4 t{a1,a2;i1,i2} + 1/2 t{a1;i1} t{a2;i2})")
    bank: dict = {}
    got = evaluate_roots(forest, bank, {})["E"]
    flat = sq.parse("E = 1/4 g{i1,i2;a1,a2} t{a1,a2;i1,i2} + 1/2 g{i1,i2;a1,a2} t{a1;i1} t{a2;i2}")
    want = evaluate_direct(flat[0], forest.spaces, bank, {})
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_hadamard_and_trace():
    forest = build("R{a1;i1} = f{a1;i1} t{a1;i1} g{i2;i2}")
    bank: dict = {}
    got = evaluate_roots(forest, bank, {})["R"]
    eq = sq.parse("R{a1;i1} = f{a1;i1} t{a1;i1} g{i2;i2}")[0]
    np.testing.assert_allclose(got, evaluate_direct(eq, forest.spaces, bank, {}), rtol=1e-12)
    hadamard = [n for n in forest.values() if set(n.left.indices) & set(n.indices)]
    assert hadamard  # a1, i1 stay on the product of f and t
    trace = build("E = f{i1;i1} - 1/2 g{i1,i2;i1,i2}")
    leaves = trace.leaves()
    assert [len(set(n.indices)) for n in leaves] == [1, 2]  # repeats kept on the leaf
    assert all(v.kind is not NodeKind.LEAF for v in trace.values())


def test_variable_only_and_constant_terms():
    forest = build("E = ω + 1/2")
    root = forest.roots[0]
    assert root.node.kind is NodeKind.SUM
    assert root.node.left.kind is NodeKind.SCALAR and root.node.right.kind is NodeKind.SCALAR
    assert root.node.right_coef == Fraction(1, 2)
    assert root.node.right.scalar == Constant(Fraction(1))


# -- canonical keys ------------------------------------------------------------------------


def test_keys_ignore_free_and_summed_labels():
    a = root_key("R{a1;i1} = g{i2,a1;a2,i1} t{a2;i2}")
    b = root_key("R{a7;i3} = g{i9,a7;a5,i3} t{a5;i9}")
    c = root_key("R{a1;i1} = t{a2;i2} g{i2,a1;a2,i1}")
    assert a == b == c
    big = "R{a1,a2;i1,i2} = 1/2 g{i3,i4;a3,a4} t{a1,a3;i1,i3} t{a2,a4;i2,i4}"
    renamed = "R{a5,a6;i5,i6} = 1/2 t{a6,a8;i6,i8} g{i7,i8;a7,a8} t{a5,a7;i5,i7}"
    assert root_key(big) == root_key(renamed)


def test_keys_differ_when_structure_differs():
    assert root_key("E = g{i1,i2;a1,a2} t{a1,a2;i1,i2}") != root_key(
        "E = g{i1,i2;a1,a2} t{a2,a1;i1,i2}"
    )
    assert root_key("E = f{i1;a1} t{a1;i1}") != root_key("E = f{i1;i2} t{i2;i1}")
    assert root_key("R{a1;i1} = f{a1;i1} + 1/2 h{a1;i1}") != root_key(
        "R{a1;i1} = f{a1;i1} + 1/3 h{a1;i1}"
    )
    assert root_key("R{a1;i1} = f{a1;i1} + h{a1;i1}") != root_key("R{a1;i1} = f{a1;i1} + h{i1;a1}")
    assert root_key("E = f{i1;i1}") != root_key("E = f{i1;i2} x{i2;i1}")
    assert root_key("R{a1;i1} = f{a1;a2} t{a2;i1}") != root_key("R{a1;i1} = f{a2;a1} t{a2;i1}")
    # same tensors, but which labels are kept differs
    assert root_key("R{a1} = f{a1;i1} t{i1}") != root_key("R{a1;i1} = f{a1;i1} t{i1}")


def test_leaf_keys_use_symmetry_signature_and_repeats():
    i1, i2 = Index("i", 1), Index("i", 2)
    base = leaf_node(Tensor("f", (i1,), (i2,)))
    assert base.key == leaf_node(Tensor("f", (i2,), (i1,))).key
    assert base.key != leaf_node(Tensor("f", (i1, i2))).key
    assert base.key != leaf_node(Tensor("f", (i1,), (i1,))).key
    assert base.key != leaf_node(Tensor("f", (i1,), (i2,), symmetry=sq.Symmetry("A"))).key


def test_product_node_orders_result_canonically():
    i1, a1, a2 = Index("i", 1), Index("a", 1), Index("a", 2)
    g = leaf_node(Tensor("g", (a1,), (a2,)))
    t = leaf_node(Tensor("t", (a2,), (i1,)))
    p, q = product_node(g, t, [i1, a1]), product_node(t, g, [a1, i1])
    assert p.key == q.key and p.indices == q.indices
    assert p.left.key == q.left.key
    with pytest.raises(sq.ExpressionError, match="distinct modes of its operands"):
        product_node(g, t, [Index("a", 9)])


def test_sum_node_checks_operands():
    i1, a1 = Index("i", 1), Index("a", 1)
    f = leaf_node(Tensor("f", (a1,), (i1,)))
    x = leaf_node(Tensor("x", (a1,)))
    s = sum_node(f, Fraction(1), f, Fraction(2), (i1, a1))
    assert s.indices == (i1, a1) and s.key.startswith("Σ#")
    assert s.key != sum_node(f, Fraction(1), f, Fraction(2), (a1, i1)).key
    with pytest.raises(sq.ExpressionError, match="every term of a sum"):
        sum_node(f, Fraction(1), x, Fraction(1), (a1, i1))


def test_keys_are_deterministic_across_processes():
    import subprocess

    # a sum, and a 9-operand product (ordered by opt_einsum's "dp")
    chain = " ".join(f"x{{i{k};a{k}}} y{{a{k};i{k + 1}}}" for k in range(1, 5)) + " z{i5;i1}"
    code = (
        "import sq_jax as sq;"
        "f = sq.build_forest(sq.parse('R{a1;i1} = f{a1;i1} + g{a1;a2} t{a2;i1}'),"
        " sq.Spaces(i=2, a=3)); print(f.roots[0].node.key, f.roots[0].node.hash);"
        f"f = sq.build_forest(sq.parse('E = {chain}'), sq.Spaces(i=3, a=3));"
        "print(f.roots[0].node.key)"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(seed), "JAX_PLATFORMS": "cpu"},
        ).stdout
        for seed in (1, 2)
    }
    assert len(outs) == 1


# -- walks, cost, dump ---------------------------------------------------------------------


def test_values_leaves_and_occurrences():
    forest = build("R{a1;i1} = f{a1;a2} t{a2;i1} + 2 f{a1;a3} t{a3;i1}\nS{a1;i1} = ω f{a1;i1}")
    kinds = [n.kind for n in forest.values()]
    assert kinds == [NodeKind.PRODUCT, NodeKind.SUM, NodeKind.PRODUCT]
    assert [n.tensor.label for n in forest.leaves()] == ["f", "t", "f"]
    assert [str(n.scalar) for n in forest.scalars()] == ["ω"]
    occ = forest.occurrences()
    assert len(occ) == 3 + 3 + 1 + 3
    counts = forest.num_occurrences
    assert sum(counts.values()) == len(occ)
    assert counts[forest.values()[0].key] == 2
    # post-order: every operand before its consumer
    pos = {id(n): k for k, n in enumerate(occ)}
    assert all(pos[id(c)] < pos[id(n)] for n in occ for c in n.children)


def test_flops_and_bytes():
    forest = build("R{a1;i1} = f{a1;a2} t{a2;i1} + 2 f{a1;a3} t{a3;i1}", i=2, a=5)
    product, total = forest.values()
    assert forest.node_flops(product) == 2 * 5 * 5 * 2
    assert forest.node_flops(total) == 5 * 2
    assert forest.flops == 100 + 10  # the shared product counted once
    assert forest.node_bytes(product) == 80
    assert forest.node_bytes(product, itemsize=4) == 40
    assert forest.node_flops(forest.leaves()[0]) == 0
    hadamard = build("R{a1;i1} = f{a1;i1} t{a1;i1}", i=2, a=5)
    assert hadamard.flops == 10  # nothing summed: one multiply per element


def test_dump_is_readable_and_deterministic():
    text = "R{a1;i1} = f{a1;a2} t{a2;i1} - 1/2 f{a1;a3} t{a3;i1}"
    dump = str(build(text, i=2, a=5))
    assert dump == str(build(text, i=2, a=5))
    assert dump.splitlines() == [
        "forest: 1 equation, 2 leaves, 0 scalars, 2 values, 110 flops",
        "%0 = leaf f{a_1;a_2}:N-C-S",
        "%1 = leaf t{a_2;i_1}:N-C-S",
        "%2 = product %0[a_1,a_2] * %1[a_2,i_1] -> [a_1,i_1]  flops=100",
        "%3 = sum 1 * %2[a_1,i_1] + -1/2 * %2[a_1,i_1] -> [a_1,i_1]  flops=10",
        "R[a_1,i_1] = %3[a_1,i_1]",
    ]


# -- scale: no recursion anywhere ----------------------------------------------------------


def synthetic(nterms: int) -> Equation:
    """R{a1;i1} = sum of nterms 3-factor products over a few tensors, distinct dummies."""
    i1, a1 = Index("i", 1), Index("a", 1)
    labels = ("f", "g", "h", "t", "u")
    terms = []
    for k in range(nterms):
        ad, ie = Index("a", 10 + k), Index("i", 10 + k)
        x, y, z = labels[k % 5], labels[(k // 5) % 5], labels[(k // 25) % 5]
        factors = (Tensor(x, (a1,), (ad,)), Tensor(y, (ad,), (ie,)), Tensor(z, (ie,), (i1,)))
        terms.append(Product(Fraction(k % 7 - 3, 1 + k % 4), factors))
    return Equation(Tensor("R", (a1,), (i1,)), Sum(tuple(terms)))


def test_two_thousand_terms_build():
    forest = sq.build_forest([synthetic(2000)], sq.Spaces(i=3, a=4))
    assert len(forest.occurrences()) == 2000 * 5 + 1999
    assert sum(v.kind is NodeKind.SUM for v in forest.values()) == 1999
    assert len(str(forest).splitlines()) > 1999
    assert forest.flops > 0


def test_five_thousand_deep_chain_builds_and_walks():
    i1, a1 = Index("i", 1), Index("a", 1)
    terms = tuple(Product(Fraction(k + 1), (Tensor("f", (a1,), (i1,)),)) for k in range(5000))
    eq = Equation(Tensor("R", (a1,), (i1,)), Sum(terms))
    forest = sq.build_forest(eq, sq.Spaces(i=2, a=2))
    assert len(forest.values()) == 4999
    assert forest.flops == 4999 * 4
    assert len(str(forest).splitlines()) == 1 + 1 + 4999 + 1
    assert forest.num_occurrences[forest.leaves()[0].key] == 5000
    repr(forest.roots[0])  # shallow: no RecursionError
    bank: dict = {}
    got = evaluate_roots(forest, bank, {})["R"]
    np.testing.assert_allclose(got, sum(range(1, 5001)) * bank[("f", (1, 1, 0), ("a", "i"))])


# -- errors --------------------------------------------------------------------------------

I1, I2, A1, A2 = Index("i", 1), Index("i", 2), Index("a", 1), Index("a", 2)
SP = sq.Spaces(i=2, a=3)


def _raises(eq, error, *fragments):
    with pytest.raises(error) as info:
        sq.build_forest([eq], SP)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def test_error_normal_operator():
    op = NormalOperator("ã", (I1,), (A1,))
    eq = Equation(Variable("E"), Product(Fraction(1), (op, Tensor("t", (A1,), (I1,)))))
    _raises(eq, sq.ExpressionError, "equation `E`", "term `", "normal operator `ã", "vacuum")


def test_error_unexpanded_antisymmetrizer():
    factors = (Tensor("Â", (I1,), (A1,)), Tensor("f", (A1,), (I1,)))
    eq = Equation(Tensor("R", (I1,), (A1,)), Product(Fraction(1), factors))
    _raises(eq, sq.ExpressionError, "`Â` (antisymmetrizer) is not expanded", "equation `R`")
    factors = (Tensor("Ŝ", (I1,), (A1,)), Tensor("f", (A1,), (I1,)))
    eq = Equation(Tensor("R", (I1,), (A1,)), Product(Fraction(1), factors))
    _raises(eq, sq.ExpressionError, "`Ŝ` (symmetrizer)")


def test_error_proto_indices():
    pno = Index("a", 1, (I1, I2))
    eq = Equation(Variable("E"), Tensor("f", (pno,), (pno,)))
    _raises(eq, sq.ExpressionError, "`a_1<i_1,i_2>` has proto-indices", "drop_proto_indices=True")


def test_error_space_without_extent():
    eq = Equation(Variable("E"), Product(Fraction(1), (Tensor("f", (Index("Κ", 1),)),) * 2))
    _raises(eq, sq.SpaceError, "index `Κ_1`", "has no extent", "term `")
    eq = Equation(Variable("E"), Tensor("f", (Index("q", 1),), (Index("q", 1),)))
    _raises(eq, sq.SpaceError, "index `q_1`", "unknown index space 'q'")


def test_error_index_on_one_factor_only():
    eq = Equation(
        Tensor("R", (A1,), (I1,)),
        Product(Fraction(1), (Tensor("f", (A1,), (I2,)), Tensor("t", (A2,), (I1,)))),
    )
    _raises(eq, sq.ExpressionError, "equation `R`", "`i_2`", "`a_2`", "on one factor only")


def test_error_result_index_missing_from_a_term():
    rhs = Sum((Tensor("f", (A1,), (I1,)), Tensor("x", (A1,), (A1,))))
    _raises(Equation(Tensor("R", (A1,), (I1,)), rhs), sq.ExpressionError, "`i_1` does not appear")


def test_error_repeated_lhs_index_and_empty_sum():
    eq = Equation(Tensor("R", (I1,), (I1,)), Tensor("f", (I1,), (I1,)))
    _raises(eq, sq.ExpressionError, "left-hand side", "repeated")
    _raises(Equation(Variable("E"), Sum(())), sq.ExpressionError, "no terms")


def test_errors_are_collected_in_one_message():
    pno = Index("a", 1, (I1,))
    factors = (Tensor("Â", (pno,), (I1,)), NormalOperator("ã", (I1,), ()))
    eq = Equation(Variable("E"), Product(Fraction(1), factors))
    with pytest.raises(sq.ExpressionError) as info:
        sq.build_forest([eq], SP)
    assert str(info.value).count("\n- ") == 3
