"""Validation of parsed equations: one ExpressionError with a bullet per violation."""

from __future__ import annotations

from fractions import Fraction

import pytest

import sq_jax as sq
from sq_jax import Equation, ExpressionError, Index, Product, Tensor, Variable
from sq_jax.expr.validate import validate


def problems(text: str, **kw) -> list[str]:
    """The bullets of the ExpressionError that validating `text` raises."""
    eqs = sq.parse(text, validate=False)
    with pytest.raises(ExpressionError) as info:
        validate(eqs, **kw)
    lines = str(info.value).splitlines()
    n = len(lines) - 1
    assert lines[0] == f"{n} problem{'s' if n > 1 else ''} in the equations:"
    assert all(line.startswith("  - ") for line in lines[1:])
    return [line[4:] for line in lines[1:]]


@pytest.mark.parametrize(
    "text",
    [
        "E = 1/4 g{i1,i2;a1,a2} t{a1,a2;i1,i2}",
        "E = f{i1;i1}",  # trace
        "R{a1;i1} = f{a1;i1} t{a1;i1}",  # Hadamard: twice and in the result
        "R{a1;i1} = f{a1;i1} + g{i2,a1;a2,i1} t{a2;i2}"
        " - 1/2 g{i2,i3;a2,a3} t{a2,a3;i1,i3} t{a1;i2}",
        "E = f{i1;a1} t{a1;i1} + g{i1,i2;a1,a2} (1/4 t{a1,a2;i1,i2} + 1/2 t{a1;i1} t{a2;i2})",
        "R{a1;i1} = ω f{a1;i1}\nS{a1;i1} = R{a1;i1} + g{i3,a1;a3,i1} t{a3;i3}",
        "R{a1;i1} = t{a1;i1}\nS{a1,a2;i1,i2} = t{a1,a2;i1,i2}",  # t overloaded: legal by default
        "V{p1,p2;p3,p4} = B{p1,p3;;Κ1} B{p2,p4;;Κ1}",
        "R{a1<i1>;i1} = 2 f{μ̃_1;i1} C{a1<i1>;μ̃_1} t{a1<i1>;i1}",
        "E = x^(2) + 2^(1/2) y^* - 3",
        "E = 1/2 ã{i_1;i_2} * b̃{i_2;i_1}",  # normal operators: structure only
        "R{i1,i2;a1,a2} = Â{i1,i2;a1,a2} t{a1,a2;i1,i2}",  # expanded by parse
    ],
)
def test_valid_equations_pass(text):
    validate(sq.parse(text))


def test_unexpanded_symmetrizer_is_not_an_error():
    eqs = sq.parse("R{i1,i2;a1,a2} = Â{i1,i2;a1,a2} t{a1,a2;i1,i2}", expand_symmetrizers=False)
    validate(eqs)


def test_index_more_than_twice_in_a_product():
    (p,) = problems("E = f{i1;a1} g{i1;a1} h{i1;i2} s{i2}")
    assert p == (
        "equation `E` (#1): index `i_1` occurs 3 times in the term "
        "`f{i_1;a_1} * g{i_1;a_1} * h{i_1;i_2} * s{i_2}`; an index may occur at most twice "
        "in a product (once if it is free, twice if it is summed or a Hadamard index of "
        "the result). Rename the extra occurrences."
    )


def test_nested_sum_counts_its_free_indices_once():
    validate(sq.parse("R{a1;i1} = f{a1;i2} (t{i2;i1} + s{i2;i3} u{i3;i1})"))
    (p,) = problems("R{a1;i1} = f{a1;i2} (t{i2;i1} + s{i2;i1}) v{i2}")
    assert "index `i_2` occurs 3 times in the term `f{a_1;i_2} * (t{i_2;i_1}" in p


def test_terms_disagree_with_the_result():
    (p,) = problems("R{a1;i1} = f{a1;i1} + g{a1;i2}")
    assert p == (
        "equation `R` (#1): the term `g{a_1;i_2}` has free indices {a_1, i_2}, but the "
        "result has {a_1, i_1}; make the term's uncontracted indices match the result's."
    )


def test_single_term_disagrees_with_the_result():
    (p,) = problems("R{a1;i1} = f{a1;i2} t{a2;i1}")
    assert p == (
        "equation `R` (#1): the right-hand side `f{a_1;i_2} * t{a_2;i_1}` has free indices "
        "{a_1, a_2, i_1, i_2}, but the result `R{a_1;i_1}` has {a_1, i_1}; make the "
        "uncontracted indices match the result's."
    )


def test_terms_of_a_nested_sum_disagree_with_each_other():
    (p,) = problems("R{a1;i1} = f{a1;i2} (t{i2;i1} + s{i3;i1})")
    assert p == (
        "equation `R` (#1): the term `s{i_3;i_1}` has free indices {i_1, i_3}, but the "
        "first term `t{i_2;i_1}` of the same sum has {i_1, i_2}; every term of a sum needs "
        "the same free indices."
    )


def test_scalar_result_with_free_indices():
    (p,) = problems("E = f{i1;a1}")
    assert "has free indices {a_1, i_1}, but the result `E` has {} (none)" in p


def test_bare_expression_terms_must_agree():
    with pytest.raises(ExpressionError) as info:
        sq.parse_expr("f{a1;i1} + g{a1;i2}")
    assert "the expression: the term `g{a_1;i_2}` has free indices {a_1, i_2}" in str(info.value)
    validate(sq.parse_expr("f{a1;i1} + g{a1;i2} h{i2;i1}"))


def test_repeated_result_index():
    ps = problems("R{i1;i1} = f{i1;i1}")
    assert (
        "equation `R` (#1): the result `R{i_1;i_1}` repeats index `i_1`; a result's indices "
        "must be distinct." in ps
    )


def test_label_used_as_tensor_and_variable():
    (p,) = problems("E = x{i1;i1} + x")
    assert p == (
        "label `x` is used as a tensor (`x{i_1;i_1}` in equation `E` (#1)) and as a variable "
        "(in equation `E` (#1)); rename one of them."
    )
    (p,) = problems("E = 2\nF = E{i1;i1}")
    assert "label `E` is used as a tensor (`E{i_1;i_1}` in equation `F` (#2))" in p


def test_label_defined_twice():
    (p,) = problems("R{a1;i1} = f{a1;i1}\nE = 1\nR{a1;i1} = g{a1;i1}")
    assert p == (
        "label `R` is defined by 2 equations (equation `R` (#1), equation `R` (#3)); each "
        "result needs exactly one equation (add the right-hand sides into one sum)."
    )


def test_result_used_later_with_another_signature():
    (p,) = problems("R{a1;i1} = f{a1;i1}\nE = R{a1,a2;i1,i2} g{i1,i2;a1,a2}")
    assert p == (
        "equation `E` (#2): reads `R{a_1,a_2;i_1,i_2}` with (bra, ket, aux) = (2, 2, 0), but "
        "equation `R` (#1) defines `R` as `R{a_1;i_1}` with (1, 1, 0); use the defined shape "
        "or rename the input."
    )
    # equations are a program: a read *before* the definition is an error naming both
    (p,) = problems("E = R{a1;i1} g{i1;a1}\nR{a1;i1} = f{a1;i1}")
    assert p.startswith("equation `E` (#1) reads `R{a_1;i_1}`, but `R` is computed later, by ")
    assert "equation `R` (#2)" in p


def test_rank_overloading_can_be_forbidden():
    text = "R{a1;i1} = t{a1;i1}\nS{a1,a2;i1,i2} = t{a1,a2;i1,i2}"
    validate(sq.parse(text))
    (p,) = problems(text, allow_rank_overloading=False)
    assert p == (
        "label `t` is used with 2 (bra, ket, aux) signatures (`t{a_1;i_1}` in equation `R` "
        "(#1); `t{a_1,a_2;i_1,i_2}` in equation `S` (#2)) but allow_rank_overloading=False; "
        "rename all but one, or allow rank overloading."
    )
    with pytest.raises(ExpressionError, match="allow_rank_overloading=False"):
        sq.parse(text, allow_rank_overloading=False)
    # symmetrizers of several ranks are not overloading
    validate(
        sq.parse(
            "R{i1;a1} = Â{i1;a1} f{i1;a1}\nS{i1,i2;a1,a2} = Â{i1,i2;a1,a2} g{i1,i2;a1,a2}",
            expand_symmetrizers=False,
        ),
        allow_rank_overloading=False,
    )


def test_unknown_space_in_hand_built_ir():
    i1, q1 = Index("i", 1), Index("q", 1)
    eq = Equation(
        Variable("E"), Product(Fraction(1), (Tensor("f", (i1,), (q1,)), Tensor("g", (q1,), (i1,))))
    )
    with pytest.raises(ExpressionError) as info:
        validate([eq])
    msg = str(info.value)
    assert "index `q_1` in `f{i_1;q_1}` is in space `q`, which the registry does not know" in msg
    assert "register it with `spaces.with_space('q', extent=...)`" in msg
    validate([eq], sq.Spaces().with_space("q"))


def test_all_violations_are_collected_in_one_error():
    ps = problems("R{a1;i1} = f{a1;i2}\nR{a1;i1} = x{a1;i1} + x\nE = R{a1} R{a1}")
    assert len(ps) == 6
    assert ps[0].startswith("equation `R` (#1): the right-hand side `f{a_1;i_2}`")
    assert any(p.startswith("label `x` is used as a tensor") for p in ps)
    assert any(p.startswith("label `R` is defined by 2 equations") for p in ps)
    assert any(p.startswith("equation `E` (#3): reads `R{a_1}`") for p in ps)


def test_long_lists_of_violations_are_truncated():
    text = "R{a1;i1} = " + " + ".join(f"g{{a1;i{k + 2}}}" for k in range(40))
    eqs = sq.parse(text, validate=False)
    with pytest.raises(ExpressionError) as info:
        validate(eqs)
    lines = str(info.value).splitlines()
    assert lines[0] == "40 problems in the equations:"
    assert lines[-1] == "  … and 15 more."


def test_validate_accepts_one_equation_and_rejects_other_objects():
    (eq,) = sq.parse("E = x")
    validate(eq)
    with pytest.raises(TypeError, match="item 1 is a str"):
        validate(["E = x"])


def test_five_thousand_term_sum_validates():
    terms = " + ".join(f"g{{a1;i{k + 2}}} t{{i{k + 2};i1}}" for k in range(5000))
    validate(sq.parse(f"R{{a1;i1}} = {terms}", validate=False))
