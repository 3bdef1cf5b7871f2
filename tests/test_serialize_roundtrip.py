"""Round trip: ``parse(serialize(x)) == x`` for IR in the parser's normal form.

The parser's normal form (what :func:`sq_jax.parse_expr` returns): no ``Constant`` factor
inside a product (numbers fold into the scalar), no product of one factor with scalar 1,
no product without factors (that is a ``Constant``), no sum of one term. Nested products
and sums as factors, and sums as terms of sums, are kept.
"""

from __future__ import annotations

from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sq_jax as sq
from sq_jax import (
    Constant,
    Equation,
    Index,
    NormalOperator,
    Power,
    Product,
    Sum,
    Symmetry,
    Tensor,
    Variable,
)

SETTINGS = settings(
    derandomize=True,
    database=None,
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

SPACE_KEYS = ["i", "a", "p", "Κ", "μ̃", "i↑", "a↓", "p↓"]
TENSOR_LABELS = ["t", "g", "f", "R", "T_1", "α", "γ_1", "t¹", "t↑", "λ⁺", "δ", "A", "S", "C"]
OPERATOR_LABELS = ["a", "ã", "b", "b̃"]
VARIABLE_NAMES = ["x", "ω", "q1", "a", "b", "E_2", "δ", "α", "A"]

rationals = st.fractions(min_value=-50, max_value=50, max_denominator=64)
ordinals = st.integers(min_value=0, max_value=2000)
plain_indices = st.builds(Index, st.sampled_from(SPACE_KEYS), ordinals)
indices = st.one_of(
    plain_indices,
    st.builds(
        Index,
        st.sampled_from(SPACE_KEYS),
        ordinals,
        st.lists(plain_indices, min_size=1, max_size=3).map(tuple),
    ),
)
index_groups = st.lists(indices, max_size=3).map(tuple)
symmetries = st.builds(
    Symmetry, st.sampled_from("ASN"), st.sampled_from("CSNHA"), st.sampled_from("SN")
)
tensors = st.builds(
    Tensor, st.sampled_from(TENSOR_LABELS), index_groups, index_groups, index_groups, symmetries
)
operators = st.builds(NormalOperator, st.sampled_from(OPERATOR_LABELS), index_groups, index_groups)
variables = st.builds(Variable, st.sampled_from(VARIABLE_NAMES), st.booleans())
constants = st.builds(Constant, rationals)
powers = st.builds(Power, st.one_of(constants, variables), rationals, st.booleans())
atoms = st.one_of(tensors, operators, variables, powers)


def _product(scalar: Fraction, factors: list) -> object:
    if len(factors) == 1 and scalar == 1:
        return factors[0]
    return Product(scalar, tuple(factors))


def _extend(children):
    non_constant = children.filter(lambda e: not isinstance(e, Constant))
    products = st.builds(_product, rationals, st.lists(non_constant, min_size=1, max_size=4))
    sums = st.lists(st.one_of(children, constants), min_size=2, max_size=4).map(
        lambda terms: Sum(tuple(terms))
    )
    return st.one_of(products, sums)


expressions = st.one_of(constants, st.recursive(atoms, _extend, max_leaves=12))
lhs = st.one_of(
    st.builds(
        Tensor,
        st.sampled_from(TENSOR_LABELS),
        index_groups,
        index_groups,
        index_groups,
        symmetries,
    ),
    st.builds(Variable, st.sampled_from(VARIABLE_NAMES)),
)
equations = st.builds(Equation, lhs, expressions)


@SETTINGS
@given(expressions)
def test_expression_round_trip(e):
    text = sq.serialize(e)
    assert sq.parse_expr(text, validate=False) == e, text


@SETTINGS
@given(equations)
def test_equation_round_trip(eq):
    text = sq.serialize(eq)
    assert sq.parse(text, validate=False)[0] == eq, text


@SETTINGS
@given(expressions)
def test_round_trip_with_arrow_and_without_symmetry_defaults(e):
    # `->` is accepted for `=`; text printed without symmetry reads back with the defaults
    text = "R{} -> " + sq.serialize(e, annot_symm=False)
    (eq,) = sq.parse(text, validate=False)
    assert sq.serialize(eq.rhs, annot_symm=False) == sq.serialize(e, annot_symm=False)


def test_strategy_sanity_examples():
    # a few hand-picked normal-form values that exercise the serializer's edge cases
    x = Variable("x")
    cases = [
        Sum((Constant(Fraction(-3)), x)),
        Sum((x, Constant(Fraction(-3)))),
        Product(Fraction(-1), (Sum((x, Variable("y"))),)),
        Product(Fraction(1, 2), (Power(Constant(Fraction(3)), Fraction(1, 2)),)),
        Product(Fraction(2), (Product(Fraction(-1, 2), (x,)), x)),
        Sum((x, Sum((Product(Fraction(-1), (x,)), x)))),
        Power(Variable("x", True), Fraction(-2), True),
        Power(Constant(Fraction(-7, 3)), Fraction(1, 3)),
        Product(Fraction(0), (x,)),
        NormalOperator("ã", (), ()),
    ]
    for e in cases:
        assert sq.parse_expr(sq.serialize(e), validate=False) == e, sq.serialize(e)
