"""Parser tests: the grammar of the SeQuant text syntax (``docs/syntax.md``),
conversion to IR, options, error messages, symmetrizer expansion, and scale."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

import sq_jax as sq
from sq_jax import (
    Constant,
    Equation,
    Index,
    NormalOperator,
    ParseError,
    ParseOptions,
    Power,
    Product,
    Sum,
    Symmetry,
    Tensor,
    Variable,
)
from sq_jax.expr.symmetrize import expand_symmetrizers

# The examples (``docs/syntax.md``, "Examples") use SeQuant's SR/test registries: `e`
# (virtual, SR convention) and `x` (active, SR convention) are in sq_jax's default
# registry; `u` (active, MR convention) is not, so the tests register it explicitly.
SR_SPACES = sq.Spaces().with_space("u", description="active")
assert SR_SPACES.space("e").members == ("a", "g") and SR_SPACES.space("x").members == ("i", "a")


def I(text: str) -> Index:  # noqa: E743
    """Index from `i_1` text (no protos)."""
    key, ordinal = text.rsplit("_", 1)
    return Index(key, int(ordinal))


def T(label, bra=(), ket=(), aux=(), symm="N-C-S"):
    return Tensor(
        label,
        tuple(I(i) for i in bra),
        tuple(I(i) for i in ket),
        tuple(I(i) for i in aux),
        Symmetry(*symm.split("-")),
    )


def expr(text: str, **kw):
    return sq.parse_expr(text, spaces=SR_SPACES, **kw)


# -- syntax examples: each parses and round-trips ---------------------------------------------

EXAMPLE_EXPRESSIONS = [
    "t{}",
    "t{;}",
    "t{;;}",
    "t^{}_{}",
    "t_{}^{}",
    "t{i1;a1}",
    "t_{i1}^{a1}",
    "t^{a1}_{i1}",
    "t{i_1; a_1;}",
    "t{i1,i2;a1,a2}",
    "+t{ i1 , i2 ; a1 , a2 }",
    "t{;;i1}",
    "t{i1,i2;a1;x1,x2}",
    "t{a1;i1}:A",
    "t{a1;i1}:S-C",
    "t{a1;i1}:N-S-N",
    "t{a1;i1}:N-H-N",
    "T_1{i_1;a_1}",
    "α{a1;i1}",
    "γ_1{i1;a1}",
    "t¹{i1;a1}",
    "t↑{i1;a1}",
    "t{a↓1;i↑1}",
    "λ⁺{a1;i1}",
    "1/2",
    "-1/2",
    ".4",
    "0.5/0.25",
    "-0",
    "01.00",
    "a",
    "α^*",
    "x^(2)",
    "2^(1/2)",
    "(-2)^(1/2)",
    "(3/2)^(1/2)",
    "((x^*)^(2))^*",
    "-1/2 g{i2,i3; i1,a2} t{a1,a2; i2,i3}",
    "-1/2 * δ * γ * t{i1;a1}",
    "f{a1;i1} - 1/2*g{i2,a1; a2,a3}t{a2,a3; i1,i2}",
    "1/2 (a + b) * c",
    "T1{}:N-N-N + T2{;;x_1}:N-N-N * T3{;;x_1}:N-N-N",
    "q1 * q2^* * q3",
    "1/2 ã{i_1;i_2} * b̃{i_3;i_4}",
    "f{i1;a1} * t{a1;i1} + g{i1,i2;a1,a2} * (1/4 * t{a1,a2;i1,i2} + 1/2 t{a1;i1} * t{a2;i2})",
    "-1 Â{i_1;a_1}:A-C-S * t{a_1,a_2;i_2,i_1}:A-C-S * f{i_2;a_2}:A-C-S",
    "Â{i_1,i_2;a_1,a_2}:A-C-S * g{i_3,i_4;a_3,a_4}:A-C-S * t{a_1,a_3;i_1,i_2}:A-C-S"
    " * t{a_2,a_4;i_3,i_4}:A-C-S",
    "3/2 Â{i_1,i_2,i_3;a_1,a_2,a_3} * g{a_1,a_2;a_4,a_5} * t{a_3,a_4,a_5;i_1,i_2,i_3}",
    "4 Ŝ{i_1,i_2;a_1,a_2}:N-C-S * g{i_1,i_2;a_1,a_2}:N-S-S",
    "-8 Ŝ{i_1,i_2;a_1,a_2}:N-C-S * f{i_2;i_3}:N-S-S * t{a_1,a_2;i_1,i_3}:N-N-S",
    "4 Ŝ{i_1,i_2;a_1,a_2}:N-C-S * g{a_3,a_4;a_1,a_2}:N-S-S * t{a_3,a_4;i_1,i_2}:N-N-S",
    "2 f{μ̃_1061;i_1}:N-S-S * C{a_1<i_1>;μ̃_1061}:N-S-S * t{a_1<i_1>;i_1}:N-N-S",
    "- 1 g{μ̃_1062;i_1;Κ_1}:N-S-S * C{a_1<i_1,i_2>;μ̃_1062}:N-S-S * g{μ̃_1063;i_2;Κ_1}:N-S-S"
    " * C{a_2<i_1,i_2>;μ̃_1063}:N-S-S * t{a_1<i_1,i_2>,a_2<i_1,i_2>;i_2,i_1}:N-N-S",
]

EXAMPLE_EQUATIONS = [
    "A = 3",
    "R{i1,i2;e1,e2}:A = f{e2;e3} t{e1,e3;i1,i2}",
    "E = f{i_1;a_1}:A-C-S * t{a_1;i_1}:A-N-S + 1/4 g{i_1,i_2;a_1,a_2}:A-C-S"
    " * t{a_1,a_2;i_1,i_2}:A-N-S + 1/2 g{i_1,i_2;a_1,a_2}:A-C-S * t{a_1;i_1}:A-N-S"
    " * t{a_2;i_2}:A-N-S",
    "R{e1;i1} -> f{e1;i1}",
]


@pytest.mark.parametrize("text", EXAMPLE_EXPRESSIONS)
def test_example_expression_parses_and_round_trips(text):
    e = expr(text)
    assert expr(sq.serialize(e)) == e


@pytest.mark.parametrize("text", EXAMPLE_EQUATIONS)
def test_example_equation_parses_and_round_trips(text):
    eqs = sq.parse(text, spaces=SR_SPACES)
    assert len(eqs) == 1
    assert sq.parse(sq.serialize(eqs[0]), spaces=SR_SPACES) == eqs


@pytest.mark.parametrize(
    "group",
    [
        ["t{i1;a1}", "t_{i1}^{a1}", "t^{a1}_{i1}", "t{i_1; a_1;}", "t { i_1 ; a_1 ; }"],
        ["t{}", "t{;}", "t{;;}", "t^{}_{}", "t_{}^{}"],
        ["t{i1,i2;a1,a2}", "+t{ i1 , i2 ; a1 , a2 }", "t{i_1,i_2;a_1,a_2;}"],
        ["t{Κ1}", "t{K1}", "t{K_1}"],
        ["1/2 * x", "1/2 x", "0.5 x", "x * 1/2", "2/4x", "1/4 * 2 * x"],
    ],
)
def test_equivalent_spellings(group):
    first = expr(group[0])
    for text in group[1:]:
        assert expr(text) == first, text


def test_tensor_groups_and_defaults():
    assert expr("t{i1;a1}") == T("t", ["i_1"], ["a_1"])
    assert expr("t{i1,i2;a1;x1,x2}") == T("t", ["i_1", "i_2"], ["a_1"], ["x_1", "x_2"])
    assert expr("t{;;i1}") == T("t", aux=["i_1"])
    assert expr("t{}") == T("t")
    assert expr("t{a1;i1}:A") == T("t", ["a_1"], ["i_1"], symm="A-C-S")
    assert expr("t{a1;i1}:S-N") == T("t", ["a_1"], ["i_1"], symm="S-N-S")
    assert expr("t{a1;i1}:N-H-N").symmetry == Symmetry("N", "H", "N")
    assert expr("t{a1;i1}:N-A-N").symmetry == Symmetry("N", "A", "N")


def test_index_labels_and_spaces():
    t = expr("t{a↓1,i↑_2,μ̃_1061,K3;p0}")
    assert t.bra == (Index("a↓", 1), Index("i↑", 2), Index("μ̃", 1061), Index("Κ", 3))
    assert t.ket == (Index("p", 0),)
    assert expr("t{i01}").bra == (Index("i", 1),)


def test_unusual_tensor_names():
    for name in ["T_1", "α", "γ_1", "t¹", "t↑", "λ⁺", "T1", "f̃", "P̂"]:
        assert expr(f"{name}{{i1}}").label == name


def test_proto_indices():
    t = expr("t{a1<i1,i2>,a_2<i_1>;i1}")
    assert t.bra == (Index("a", 1, (I("i_1"), I("i_2"))), Index("a", 2, (I("i_1"),)))


def test_unicode_whitespace_between_tokens():
    text = "\u2003t\u00a0{\ti1\u3000,\u2009i2 ;a1 ,a2\u205f}  *\u2002x\u00a0+\u00a0y\u2028"
    assert expr(text, validate=False) == expr("t{i1,i2;a1,a2} * x + y", validate=False)


# -- conversion rules ----------------------------------------------------------------------


def test_numbers_are_exact():
    assert expr(".4") == Constant(Fraction(2, 5))
    assert expr("0.5/0.25") == Constant(Fraction(2))
    assert expr("01.00") == Constant(Fraction(1))
    assert expr("-0") == Constant(Fraction(0))
    assert expr("1/3") == Constant(Fraction(1, 3))
    assert expr("0.1") == Constant(Fraction(1, 10))
    assert expr("2 3 1/4") == Constant(Fraction(3, 2))


def test_leading_minus_makes_a_product():
    t = T("t", ["i_1"], ["a_1"])
    assert expr("-t{i1;a1}") == Product(Fraction(-1), (t,))
    assert expr("+t{i1;a1}") == t
    assert expr("-1/2 t{i1;a1}") == Product(Fraction(-1, 2), (t,))


def test_numbers_fold_into_the_scalar():
    e = expr("-1/2 g{i2,i3; i1,a2} t{a1,a2; i2,i3}")
    assert isinstance(e, Product) and e.scalar == Fraction(-1, 2) and len(e.factors) == 2
    e = expr("2 x * 3 y (1/6)")
    assert e == Product(Fraction(1), (Variable("x"), Variable("y")))
    assert expr("1 * x") == Variable("x")


def test_parenthesized_products_and_sums_stay_nested():
    g, t = T("g", ["i_1"], ["a_1"]), T("t", ["a_1"], ["i_1"])
    e = expr("(-1/2)(g{i1;a1}*t{a1;i1})*(t{a1;i1})")
    assert e == Product(Fraction(-1, 2), (Product(Fraction(1), (g, t)), t))
    e = expr("1/2 (a + b) * c")
    assert e == Product(Fraction(1, 2), (Sum((Variable("a"), Variable("b"))), Variable("c")))
    assert expr("(x)") == Variable("x")
    assert expr("((x + y))") == Sum((Variable("x"), Variable("y")))
    assert expr("x + (y + z)") == Sum((Variable("x"), Sum((Variable("y"), Variable("z")))))


def test_sum_with_juxtaposition_and_constants():
    assert expr("a - 4") == Sum((Variable("a"), Constant(Fraction(-4))))
    e = expr("f{a1;i1} - 1/2*g{i2,a1; a2,a3}t{a2,a3; i1,i2}")
    assert isinstance(e, Sum) and len(e.terms) == 2
    assert e.terms[1].scalar == Fraction(-1, 2)


def test_variables_powers_and_conjugation():
    assert expr("α^*") == Variable("α", True)
    assert expr("q1 * q2^* * q3") == Product(
        Fraction(1), (Variable("q1"), Variable("q2", True), Variable("q3"))
    )
    assert expr("x^(2)") == Power(Variable("x"), Fraction(2))
    assert expr("x^(-1/2)") == Power(Variable("x"), Fraction(-1, 2))
    assert expr("2^(1/2)") == Power(Constant(Fraction(2)), Fraction(1, 2))
    assert expr("(-2)^(1/2)") == Power(Constant(Fraction(-2)), Fraction(1, 2))
    assert expr("(3/2)^(1/2)") == Power(Constant(Fraction(3, 2)), Fraction(1, 2))
    assert expr("((x^*)^(2))^*") == Power(Variable("x", True), Fraction(2), True)
    assert expr("3 x^(2)") == Product(Fraction(3), (Power(Variable("x"), Fraction(2)),))


def test_normal_operators():
    e = expr("1/2 ã{i_1;i_2} * b̃{i_3;i_4}")
    assert e == Product(
        Fraction(1, 2),
        (
            NormalOperator("ã", (I("i_1"),), (I("i_2"),)),
            NormalOperator("b̃", (I("i_3"),), (I("i_4"),)),
        ),
    )
    assert expr("a{i1;a1}") == NormalOperator("a", (I("i_1"),), (I("a_1"),))
    assert expr("b{;a1}") == NormalOperator("b", (), (I("a_1"),))
    assert expr("a") == Variable("a")
    assert expr("a * b") == Product(Fraction(1), (Variable("a"), Variable("b")))


def test_equations():
    (eq,) = sq.parse("A = 3")
    assert eq == Equation(Variable("A"), Constant(Fraction(3)))
    (eq,) = sq.parse("R{i1,i2;e1,e2}:A = f{e2;e3} t{e1,e3;i1,i2}", spaces=SR_SPACES)
    assert eq.lhs == T("R", ["i_1", "i_2"], ["e_1", "e_2"], symm="A-C-S")
    assert eq.name == "R"


def test_multiple_lines_comments_and_continuations():
    text = """
    # a comment line
    E = 1/4 g{i1,i2;a1,a2} t{a1,a2;i1,i2}

      # another
    R{a1;i1} = f{a1;i1}
        - f{i2;i1} t{a1;i2}
        + f{a1;a2}
        * t{a2;i1}
    """
    e, r = sq.parse(text)
    assert e.name == "E" and r.name == "R"
    assert r == sq.parse("R{a1;i1} = f{a1;i1} - f{i2;i1} t{a1;i2} + f{a1;a2} * t{a2;i1}")[0]


def test_windows_line_endings():
    assert len(sq.parse("E = x\r\nF = y\r\n")) == 2


def test_five_thousand_terms_on_one_line():
    n = 5000
    terms = [f"{k + 1}/7 g{{i1,i{k + 2};a1,a{k + 2}}} t{{a{k + 2};i{k + 2}}}" for k in range(n)]
    text = "R{i1;a1} = " + " + ".join(terms)
    (eq,) = sq.parse(text)
    assert isinstance(eq.rhs, Sum) and len(eq.rhs.terms) == n
    assert eq.rhs.terms[-1].scalar == Fraction(n, 7)
    assert sq.parse(sq.serialize(eq)) == (eq,)
    e = sq.parse_expr(" - ".join(["x"] * n))
    assert len(e.terms) == n


# -- options -------------------------------------------------------------------------------


def test_option_overrides_and_unknown_options():
    opts = ParseOptions(def_perm_symm="A")
    assert sq.parse_expr("t{a1;i1}", opts).symmetry == Symmetry("A", "C", "S")
    assert sq.parse_expr("t{a1;i1}", opts, def_perm_symm="S").symmetry.perm == "S"
    with pytest.raises(TypeError, match=r"unknown parse option.*'spaecs'"):
        sq.parse_expr("x", spaecs=SR_SPACES)
    with pytest.raises(TypeError, match=r"options must be a sq_jax\.ParseOptions"):
        sq.parse_expr("x", {"spaces": SR_SPACES})


def test_def_perm_symm_option_and_column_forcing():
    assert sq.parse_expr("t{a1;i1}").symmetry == Symmetry("N", "C", "S")
    assert sq.parse_expr("t{a1;i1}", def_col_symm="N").symmetry == Symmetry("N", "C", "N")
    opts = ParseOptions(def_perm_symm="A", def_braket_symm="N", def_col_symm="N")
    assert opts.def_col_symm == "S"  # forced, as SeQuant does
    assert sq.parse_expr("t{a1;i1}", opts).symmetry == Symmetry("A", "N", "S")
    assert sq.parse_expr("t{a1;i1}:S", opts).symmetry == Symmetry("S", "N", "S")
    assert sq.parse_expr("t{a1;i1}:N-C", opts).symmetry == Symmetry("N", "C", "S")
    with pytest.raises(ValueError, match=r"def_perm_symm='X' is not a symmetry letter"):
        ParseOptions(def_perm_symm="X")
    with pytest.raises(TypeError, match=r"must be a sq_jax\.Spaces"):
        ParseOptions(spaces={"i": 3})


def test_drop_proto_indices_option():
    text = "t{a1<i1,i2>,a2<i1,i2>;i1,i2}"
    kept = sq.parse_expr(text)
    assert kept.bra[0].protos == (I("i_1"), I("i_2"))
    dropped = sq.parse_expr(text, drop_proto_indices=True)
    assert dropped == sq.parse_expr("t{a1,a2;i1,i2}")
    with pytest.raises(ParseError, match="unknown index space `q`"):
        sq.parse_expr("t{a1<q1>;i1}", drop_proto_indices=True)


def test_legacy_symmetrizer_labels_option():
    # default: `A` is an ordinary tensor (SeQuant's batched export tests use it that way)
    e = sq.parse_expr("A{a1;i2} B{i1;a1}")
    assert [f.label for f in e.factors] == ["A", "B"]
    e = sq.parse_expr("A{i1,i2;a1,a2} X{i1,i2;a1,a2}", legacy_symmetrizer_labels=True)
    assert isinstance(e, Sum) and len(e.terms) == 4
    e = sq.parse_expr("S{i1,i2;a1,a2} X{i1,i2;a1,a2}", legacy_symmetrizer_labels=True)
    assert isinstance(e, Sum) and len(e.terms) == 2
    # only as the first factor of a product with other factors
    assert sq.parse_expr("A{i1;a1}", legacy_symmetrizer_labels=True) == T("A", ["i_1"], ["a_1"])
    e = sq.parse_expr("X{i1;a1} A{a1;i1}", legacy_symmetrizer_labels=True)
    assert [f.label for f in e.factors] == ["X", "A"]
    # without expansion the label is read as the antisymmetrizer
    e = sq.parse_expr(
        "A{i1;a1} X{a1;i1}", legacy_symmetrizer_labels=True, expand_symmetrizers=False
    )
    assert e.factors[0].label == "Â"


def test_expand_symmetrizers_option_off_keeps_the_operator():
    e = sq.parse_expr("Â{i1,i2;a1,a2} t{a1,a2;i1,i2}", expand_symmetrizers=False)
    assert isinstance(e, Product) and e.factors[0].label == "Â"


# -- errors: message, line, column, caret ----------------------------------------------------


def parse_error(text, *, equation=False, **kw) -> ParseError:
    with pytest.raises(ParseError) as info:
        if equation:
            sq.parse(text, **kw)
        else:
            sq.parse_expr(text, **kw)
    return info.value


def test_error_unknown_index_space():
    err = parse_error("R{a1;i1} = f{a1;q1}", equation=True)
    assert (err.line, err.column, err.length) == (1, 17, 2)
    assert "unknown index space `q` in index `q1`" in err.reason
    assert "known spaces: `i`, `a`, `p`, `Κ`" in err.reason
    assert ".with_space('q', extent=...)" in err.reason
    assert str(err).endswith("\n  R{a1;i1} = f{a1;q1}\n                  ^^")


def test_error_unknown_space_on_a_later_line():
    err = parse_error("E = x\n\n# c\nR{a1;i1} = f{a1;i1}\n  + g{a1;u1}", equation=True)
    assert (err.line, err.column) == (5, 10)
    assert err.source_line == "  + g{a1;u1}"
    assert str(err).startswith("line 5, column 10: unknown index space `u`")
    # registering the space fixes it
    assert sq.parse("R{a1;u1} = g{a1;u1}", spaces=SR_SPACES)


@pytest.mark.parametrize(
    ("text", "column", "length", "reason"),
    [
        ("(a + b", 1, 1, "unclosed '(' at column 1: expected ')' before the end of the line."),
        ("a + b)", 6, 1, "unmatched ')': there is no '(' before it."),
        ("t{i1;a1)", 8, 1, "mismatched ')': expected '}' to close the '{' at column 2."),
        ("(a + b}", 7, 1, "mismatched '}': expected ')' to close the '(' at column 1."),
        ("t{i1;a1", 2, 1, "unclosed '{' at column 2: expected '}' before the end of the line."),
        ("t{a1<i1;i1}", 8, 1, "expected ',' or '>' in the proto-indices opened at column 5"),
        ("t{a1} x }", 9, 1, "unmatched '}': there is no '{' before it."),
        ("1/ x", 1, 2, "malformed number `1/`: expected a denominator after '/', got `x`"),
        ("2 * 1/0", 5, 3, "malformed number `1/0`: division by zero."),
        ("..5", 1, 3, "malformed number `..5`: expected digits with at most one '.'"),
        ("1.2.3 x", 1, 5, "malformed number `1.2.3`"),
        ("t{i;a1}", 3, 1, "index `i` has no ordinal: an index is a space key followed by a"),
        ("t{i_;a1}", 3, 2, "index `i_` has no ordinal"),
        ("t{a1;i1}:P", 10, 1, "bad permutational symmetry letter `P` in `:P`; expected one of A"),
        ("t{a1;i1}:A-P", 12, 1, "bad bra-ket symmetry letter `P` in `:A-P`"),
        ("t{a1;i1}:A-C-A", 14, 1, "bad column symmetry letter `A` in `:A-C-A`"),
        ("t{a1;i1}:a", 10, 1, "bad permutational symmetry letter `a`"),
        ("t{a1;i1}:AC", 11, 1, "unexpected `C` in the symmetry suffix `:AC`"),
        ("t{a1;i1}:", 9, 1, "expected a symmetry letter right after ':'"),
        ("t{a1;i1} :A", 10, 1, "no space is allowed before ':' in a symmetry suffix"),
        ("t{a1} x y )", 11, 1, "unmatched ')'"),
        ("t{a1} @", 7, 1, "unexpected character '@'."),
        ("a − b", 3, 1, "unexpected character '−' (use ASCII '-' for minus)."),
        ("t{i1,,i2}", 5, 1, "empty index after ',': expected an index such as `i_1`, got `,`"),
        ("t{i1,}", 5, 1, "empty index after ','"),
        ("t_{i1;i2}^{a1}", 6, 1, "form takes one index list per brace and no ';'"),
        ("t_{i1}", 7, 1, "expected '^{…}' (the ket) after `t_{…}`"),
        ("t^{a1}", 7, 1, "expected '_{…}' (the bra) after `t^{…}`"),
        ("t{i1;a1;K1;K2}", 11, 1, "too many ';' in `t{…}`: a tensor has at most three groups"),
        ("a{i1;i2;i3}", 8, 1, "the normal operator `a{…}` has two groups"),
        ("ã{i1;i2}:A", 9, 2, "the normal operator `ã{…}` takes no symmetry suffix"),
        ("t_ {i1}", 1, 2, "the name `t_` ends with '_'; a tensor or variable name may not end"),
        ("x_ + y", 1, 2, "the name `x_` ends with '_'"),
        ("2i", 1, 2, "complex constant `2i` is not supported: sq_jax scalars are exact"),
        ("1 + 1.5j", 5, 4, "complex constant `1.5j` is not supported"),
        ("a + + b", 5, 1, "expected a term after '+', got `+`"),
        ("a *", 3, 1, "expected a factor after '*', got the end of the line."),
        ("* a", 1, 1, "expected a factor before '*'."),
        ("x^(y)", 4, 1, "power exponents must be rational numbers such as `2` or `1/2`"),
        ("(a+b)^(2)", 1, 5, "only a number or a variable can be raised to a power, got a sum"),
        ("(x)^*", 1, 5, "only a power `(x^(n))^*` can be conjugated"),
        ("t{i_1 i_2}", 7, 3, "expected ',', ';' or '}' in the index groups opened at column 2"),
        ("E = x", 3, 1, "unexpected '=': an expression has no '='"),
    ],
)
def test_parse_errors(text, column, length, reason):
    err = parse_error(text)
    assert err.line == 1
    assert (err.column, err.length) == (column, length), str(err)
    assert reason in err.reason, err.reason
    caret = " " * (column - 1) + "^" * length
    assert str(err) == f"line 1, column {column}: {err.reason}\n  {text}\n  {caret}"


def test_error_empty_input():
    for text in ["", "   ", "\n\n", "# only a comment\n"]:
        err = parse_error(text)
        assert (err.line, err.column) == (1, 1)
        assert err.reason.startswith("empty expression: expected at least one term")
    assert sq.parse("") == ()
    assert sq.parse("# nothing\n\n") == ()


def test_error_nesting_too_deep():
    err = parse_error("(" * 150 + "x" + ")" * 150)
    assert err.column == 101
    assert "parentheses nested more than 100 deep" in err.reason
    assert sq.parse_expr("(" * 50 + "x" + ")" * 50) == Variable("x")


@pytest.mark.parametrize(
    ("text", "line", "column", "reason"),
    [
        ("R{a1;i1} f{a1;i1}", 1, 10, "expected '=' or '->' after the result `R{a_1;i_1}`"),
        ("= x", 1, 1, "expected the result of the equation (a tensor such as `R{a1;i1}`"),
        ("E = x\nR{a1;i1} =", 2, 11, "missing right-hand side after '='"),
        ("+ x", 1, 1, "this line starts with '+', so it continues the previous equation"),
        ("x^* = 1", 1, 1, "got the conjugated variable `x^*`"),
        ("a{i1;i2} = 1", 1, 1, "got the normal operator `a{i_1;i_2}`"),
        ("E = x y = z", 1, 9, "unexpected '='"),
    ],
)
def test_equation_errors(text, line, column, reason):
    err = parse_error(text, equation=True)
    assert (err.line, err.column) == (line, column), str(err)
    assert reason in err.reason, err.reason


def test_parse_error_is_a_value_error_and_sq_jax_error():
    err = parse_error("t{")
    assert isinstance(err, ValueError) and isinstance(err, sq.SqJaxError)


# -- symmetrizer expansion ---------------------------------------------------------------------


def terms_of(e):
    return list(e.terms) if isinstance(e, Sum) else [e]


def scalar_of(term):
    return term.scalar if isinstance(term, Product) else Fraction(1)


@pytest.mark.parametrize(
    ("op", "nbra", "nket", "count"),
    [
        ("Â", 1, 1, 1),
        ("Â", 2, 1, 2),
        ("Â", 2, 2, 4),
        ("Â", 3, 3, 36),
        ("Ŝ", 2, 2, 2),
        ("Ŝ", 3, 3, 6),
    ],
)
def test_symmetrizer_term_counts(op, nbra, nket, count):
    bra = ",".join(f"i{k + 1}" for k in range(nbra))
    ket = ",".join(f"a{k + 1}" for k in range(nket))
    e = sq.parse_expr(f"{op}{{{bra};{ket}}} X{{{bra};{ket}}}")
    terms = terms_of(e)
    assert len(terms) == count
    signs = [scalar_of(t) for t in terms]
    if op == "Ŝ":
        assert signs == [1] * count
    else:
        assert sum(signs) == (1 if count == 1 else 0)
        assert signs[0] == 1


def test_antisymmetrizer_2x2_terms_and_order():
    e = sq.parse_expr("1/4 Â{i1,i2;a1,a2} t{a1,a2;i1,i2}")
    t = [
        T("t", ["a_1", "a_2"], ["i_1", "i_2"]),
        T("t", ["a_2", "a_1"], ["i_1", "i_2"]),
        T("t", ["a_1", "a_2"], ["i_2", "i_1"]),
        T("t", ["a_2", "a_1"], ["i_2", "i_1"]),
    ]
    q = Fraction(1, 4)
    assert e == Sum(
        (
            Product(q, (t[0],)),
            Product(-q, (t[1],)),
            Product(-q, (t[2],)),
            Product(q, (t[3],)),
        )
    )


def test_symmetrizer_relabels_columns_together_and_all_factors():
    e = sq.parse_expr("Ŝ{i1,i2;a1,a2} f{i1;a1} t{a2;i2}")
    assert sq.serialize(e, annot_symm=False) == (
        "f{i_1;a_1} * t{a_2;i_2} + f{i_2;a_2} * t{a_1;i_1}"
    )


def test_expansion_replaces_the_product_in_its_sum_in_place():
    e = sq.parse_expr("x + Â{i1,i2;a1,a2} t{a1,a2;i1,i2} + y", validate=False)
    texts = [sq.serialize(t, annot_symm=False) for t in e.terms]
    assert texts == [
        "x",
        "t{a_1,a_2;i_1,i_2}",
        "-1 t{a_2,a_1;i_1,i_2}",
        "-1 t{a_1,a_2;i_2,i_1}",
        "t{a_2,a_1;i_2,i_1}",
        "y",
    ]


def test_expansion_relabels_proto_indices_and_nested_factors():
    e = sq.parse_expr("Â{i1,i2;a1} (t{a1<i1,i2>;i1} + s{a1<i1,i2>;i1}) u{;i2}", validate=False)
    second = terms_of(e)[1]
    assert sq.serialize(second, annot_symm=False) == (
        "-1 (t{a_1<i_2,i_1>;i_2} + s{a_1<i_2,i_1>;i_2}) * u{;i_1}"
    )


def test_expand_symmetrizers_on_equations_and_identity():
    (eq,) = sq.parse("R{i1,i2;a1,a2} = Â{i1,i2;a1,a2} t{a1,a2;i1,i2}", expand_symmetrizers=False)
    expanded = expand_symmetrizers(eq)
    assert isinstance(expanded, Equation) and len(expanded.rhs.terms) == 4
    plain = sq.parse_expr("f{a1;i1} + g{a1;i1}")
    assert expand_symmetrizers(plain) is plain
    lone = T("Â", ["i_1"], ["a_1"])
    assert expand_symmetrizers(lone) == lone


def test_symmetrizer_needs_square_columns():
    with pytest.raises(sq.ExpressionError, match=r"has 2 bra and 1 ket indices"):
        sq.parse_expr("Ŝ{i1,i2;a1} X{i1,i2;a1}")


def _einsum_term(term, result_order):
    """Evaluate a one-tensor term X{...} into the layout `result_order` with numpy."""
    scalar = scalar_of(term)
    tensor = term.factors[0] if isinstance(term, Product) else term
    letters = {idx: chr(ord("a") + k) for k, idx in enumerate(result_order)}
    spec = "".join(letters[i] for i in tensor.indices) + "->" + "".join(letters.values())
    return float(scalar), spec


def test_antisymmetrizer_matches_numpy_antisymmetrization():
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((3, 3, 4, 4))
    e = sq.parse_expr("Â{i1,i2;a1,a2} X{i1,i2;a1,a2}")
    order = [I("i_1"), I("i_2"), I("a_1"), I("a_2")]
    got = np.zeros_like(x)
    for term in terms_of(e):
        scalar, spec = _einsum_term(term, order)
        got += scalar * np.einsum(spec, x)
    want = np.zeros_like(x)
    for pb in itertools.permutations(range(2)):
        for pk in itertools.permutations(range(2)):
            sign = np.linalg.det(np.eye(2)[list(pb)]) * np.linalg.det(np.eye(2)[list(pk)])
            want += sign * x.transpose(*pb, *(2 + k for k in pk))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    # the result is antisymmetric in each pair
    np.testing.assert_allclose(got, -got.transpose(1, 0, 2, 3), atol=1e-13)
    np.testing.assert_allclose(got, -got.transpose(0, 1, 3, 2), atol=1e-13)


def test_antisymmetrized_product_matches_numpy():
    rng = np.random.default_rng(99)
    f = rng.standard_normal((4, 3))  # f[a, i]
    t = rng.standard_normal((4, 3))  # t[a, i]
    e = sq.parse_expr("Â{i1,i2;a1,a2} f{a1;i1} t{a2;i2}")
    got = np.zeros((3, 3, 4, 4))
    letters = {I("i_1"): "i", I("i_2"): "j", I("a_1"): "a", I("a_2"): "b"}
    for term in terms_of(e):
        fa, ta = term.factors
        spec = (
            "".join(letters[i] for i in fa.indices)
            + ","
            + "".join(letters[i] for i in ta.indices)
            + "->ijab"
        )
        got += float(term.scalar) * np.einsum(spec, f, t)
    base = np.einsum("ai,bj->ijab", f, t)
    want = (
        base - base.transpose(1, 0, 2, 3) - base.transpose(0, 1, 3, 2) + base.transpose(1, 0, 3, 2)
    )
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
