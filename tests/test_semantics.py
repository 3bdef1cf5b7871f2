"""Library semantics (issue 14 items 1-4, 10): one test per item, with the issue's inputs.

Every expected value is computed independently with ``numpy.einsum`` on the same arrays.
"""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import sq_jax as sq

SPACES = sq.Spaces(i=2, a=3)
RNG = np.random.default_rng(7)
F = RNG.random((5, 5))  # full f over p = i then a
G = RNG.random((3, 3, 3, 3))  # g{a,a;a,a}, not symmetric
T2 = RNG.random((3, 3, 2, 2))  # t{a,a;i,i}
T1 = RNG.random((3, 2))  # t{a;i}


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


# -- item 1: equations are a program ------------------------------------------------------

TWO = "X{a1;i1} = 2 f{a1;i1}\nR{a1;i1} = X{a1;i1}"


@pytest.mark.parametrize("batch", [None, {"a": 2}, {"i": 2}])
def test_later_equation_reads_the_computed_result(batch):
    prog = sq.compile(TWO, SPACES, batch=batch)
    out = prog({"f": F})
    want = 2 * F[2:, :2]
    _close(out["X"], want)
    _close(out["R"], want)
    ref = sq.evaluate_reference(TWO, SPACES, {"f": F})
    _close(ref["R"], want)
    assert [s.block_key for s in sq.forest.inputs.input_specs(prog.schedule.annotated.forest)] == [
        "f{a;i}"
    ]  # X is not asked for


PERMUTED = "X{a1,a2;i1,i2} = g{a1,a2;a3,a4} t{a3,a4;i1,i2}\nR{a1,a2;i1,i2} = X{a2,a1;i1,i2}"


@pytest.mark.parametrize("batch", [None, {"a": 2}])
def test_permuted_read(batch):
    x = np.einsum("abcd,cdij->abij", G, T2)
    inputs = {"g{a,a;a,a}": G, "t{a,a;i,i}": T2}
    out = sq.compile(PERMUTED, SPACES, batch=batch)(inputs)
    _close(out["X"], x)
    _close(out["R"], x.transpose(1, 0, 2, 3))
    _close(sq.evaluate_reference(PERMUTED, SPACES, inputs)["R"], x.transpose(1, 0, 2, 3))


CHAIN3 = (
    "X{a1;i1} = f{a1;a2} t{a2;i1}\n"
    "Y{a2;i1} = 1/2 f{a2;a1} X{a1;i1} + t{a2;i1}\n"  # X's summed a2 meets the reader's a2
    "Z{a1;i2} = f{i1;a2} Y{a2;i1} X{a1;i2}"
)
CHAIN = (
    "X{a1;i1} = f{a1;a2} t{a2;i1}\n"
    "Y{a2;i1} = 1/2 f{a2;a1} X{a1;i1} + t{a2;i1}\n"
    "E = f{i1;a1} Y{a1;i1}\n"  # a scalar result, read as a variable below
    "Z{a1;i1} = E X{a1;i1} - Y{a1;i1}"
)


def _chain_values():
    faa, fia = F[2:, 2:], F[:2, 2:]
    x = faa @ T1
    y = 0.5 * faa @ x + T1
    e = np.einsum("ia,ai->", fia, y)
    return {"X": x, "Y": y, "E": e, "Z": e * x - y, "Z3": e * x}


@pytest.mark.parametrize("batch", [None, {"a": 2}, {"i": 2}, {"i": 2, "a": 3}])
def test_chain_of_three_equations(batch):
    want = _chain_values()
    inputs = {"f": F, "t{a;i}": T1}
    out = sq.compile(CHAIN3, SPACES, batch=batch)(inputs)
    ref = sq.evaluate_reference(CHAIN3, SPACES, inputs)
    assert sorted(out) == sorted(ref) == ["X", "Y", "Z"]
    for name in ("X", "Y"):
        _close(out[name], want[name])
        _close(ref[name], want[name])
    _close(out["Z"], want["Z3"])
    _close(ref["Z"], want["Z3"])


@pytest.mark.parametrize("batch", [None, {"a": 2}, {"i": 2, "a": 3}])
def test_chain_with_a_scalar_result_and_internal_intermediates(batch):
    want = _chain_values()
    inputs = {"f": F, "t{a;i}": T1}
    out = sq.compile(CHAIN, SPACES, batch=batch, outputs=("Z",))(inputs)
    assert list(out) == ["Z"]
    _close(out["Z"], want["Z"])
    ref = sq.evaluate_reference(CHAIN, SPACES, inputs)
    assert list(ref) == ["X", "Y", "E", "Z"]
    for name in ("X", "Y", "E", "Z"):
        _close(ref[name], want[name])
    unbatched = sq.compile(CHAIN, SPACES)(inputs)
    for name in ("X", "Y", "E", "Z"):
        _close(unbatched[name], want[name])


@pytest.mark.parametrize(
    "batch", [{"a": 2}, {"a": {"batches": 2, "roles": "external"}}, {"a": 3, "i": 2}]
)
@pytest.mark.parametrize("by_hand", [False, True])
def test_root_value_that_is_also_a_summand_of_another_root_batched(batch, by_hand):
    # Y is a result and a term of Z's sum: built once per batch inside Z's loop, it is
    # also scattered out of that loop so that the result Y is returned whole
    z = (
        "f{a1;a2} t{a2;i1} - 1/2 f{a1;a2} f{a2;a3} t{a3;i1} - t{a1;i1}"
        if by_hand
        else "f{a1;a2} t{a2;i1} - (1/2 f{a1;a2} f{a2;a3} t{a3;i1} + t{a1;i1})"
    )
    text = f"Y{{a1;i1}} = 1/2 f{{a1;a2}} f{{a2;a3}} t{{a3;i1}} + t{{a1;i1}}\nZ{{a1;i1}} = {z}"
    inputs = {"f": F, "t{a;i}": T1}
    out = sq.compile(text, SPACES, batch=batch)(inputs)
    ref = sq.evaluate_reference(text, SPACES, inputs)
    _close(out["Y"], ref["Y"])
    _close(out["Z"], ref["Z"])


def test_outputs_restrict_what_is_returned():
    inputs = {"f": F, "t{a;i}": T1}
    prog = sq.compile(CHAIN, SPACES, outputs=("Z",), batch={"a": 2})
    out = prog(inputs)
    assert list(out) == ["Z"]
    full = sq.evaluate_reference(CHAIN, SPACES, inputs)
    _close(out["Z"], full["Z"])
    ref = sq.evaluate_reference(CHAIN, SPACES, inputs, outputs=["E", "Z"])
    assert list(ref) == ["E", "Z"]
    # an internal intermediate is one value of the forest, not a root
    assert [r.name for r in prog.schedule.annotated.forest.roots] == ["Z"]
    with pytest.raises(sq.PlanError, match=r"'W'.*known results: `X`, `Y`, `E`, `Z`"):
        sq.compile(CHAIN, SPACES, outputs=("W",))
    with pytest.raises(sq.PlanError, match=r"sequence of result labels"):
        sq.compile(CHAIN, SPACES, outputs="Z")
    with pytest.raises(sq.PlanError, match=r"outputs=\(\) returns nothing"):
        sq.evaluate_reference(CHAIN, SPACES, inputs, outputs=())


def test_reads_of_later_or_own_results_are_errors():
    with pytest.raises(sq.ExpressionError) as err:
        sq.parse("R{a1;i1} = X{a1;i1}\nX{a1;i1} = 2 f{a1;i1}")
    msg = str(err.value)
    assert "equation `R` (#1) reads `X{a_1;i_1}`" in msg
    assert "computed later, by equation `X` (#2)" in msg
    with pytest.raises(sq.ExpressionError, match=r"`R` \(#1\) reads `R\{a_1;i_1\}`, its own"):
        sq.parse("R{a1;i1} = R{a1;i1}")
    # the forest checks Python IR that was never validated
    eqs = sq.parse("R{a1;i1} = R{a1;i1}", validate=False)
    with pytest.raises(sq.ExpressionError, match=r"its own result"):
        sq.build_forest(eqs, SPACES)


def test_read_with_other_spaces_is_an_error():
    with pytest.raises(sq.ExpressionError, match=r"slot spaces \(i, a\).*computes `X\{a_1;i_1\}`"):
        sq.parse("X{a1;i1} = f{a1;i1}\nR{i1;a1} = X{i1;a1}")
    with pytest.raises(sq.ExpressionError, match=r"repeated index `i_1`"):
        sq.parse("X{i1;i2} = f{i1;i2}\nE = X{i1;i1}")
    with pytest.raises(sq.ExpressionError, match=r"raises the computed result `E` to a power"):
        sq.parse("E = f{i1;i1}\nF = E^(2)")


# -- item 3: ambiguous and malformed inputs -----------------------------------------------

FT = "E = f{i1;a1} t{a1;i1}"


def test_block_and_full_tensor_of_one_label_is_an_error():
    inputs = {"f": F, "f{i;a}": F[:2, 2:], "t{a;i}": T1}
    for run in (
        lambda: sq.evaluate_reference(FT, SPACES, inputs),
        lambda: sq.compile(FT, SPACES)(inputs),
    ):
        with pytest.raises(sq.InputError, match=r"'f\{i;a\}' and 'f' give the same tensor twice"):
            run()
    want = np.einsum("ia,ai->", F[:2, 2:], T1)
    _close(sq.compile(FT, SPACES)({"f{i;a}": F[:2, 2:], "t{a;i}": T1})["E"], want)


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ({1: F, "f": F, "t{a;i}": T1}, r"key\(s\) 1 \(int\) are not strings"),
        ({"f": F.astype(object), "t{a;i}": T1}, r"'f' has dtype object; expected a floating"),
        ({"f": np.full((5, 5), "x"), "t{a;i}": T1}, r"'f' has dtype <U1; expected a floating"),
        ({"f": F.astype(ml_dtypes.bfloat16), "t{a;i}": T1}, r"'f' has dtype bfloat16; expected"),
    ],
)
def test_bad_input_keys_and_dtypes(bad, words):
    with pytest.raises(sq.InputError, match=words):
        sq.evaluate_reference(FT, SPACES, bad)
    with pytest.raises(sq.InputError, match=words):
        sq.compile(FT, SPACES)(bad)


# -- item 4: plans are never silently ignored ---------------------------------------------

RFT = "R{a1;i1} = f{a1;a2} t{a2;i1}"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"batch": {"p": 2}}, r"space `p`.*union of i, a, and a loop.*batch its members instead"),
        ({"batch": {"a": 1000}}, r"space `a` has extent 3, but the plan cuts it into 1000"),
        ({"mode_order": ("z",)}, r"mode_order=\('z',\): 'z' is not a known index space"),
        ({"batch": "a=2"}, r"batch must be a mapping.*for 'a=2' write \{'a': 2\}"),
        ({"batch": {"q": 2}}, r"unknown space"),
        ({"batch": {"a": {"batch": 2}}}, r"unknown field\(s\) 'batch'"),
    ],
)
def test_bad_plans_are_plan_errors(kwargs, words):
    with pytest.raises(sq.PlanError, match=words):
        sq.compile(RFT, SPACES, **kwargs)


def test_one_batch_is_the_unbatched_program():
    spaces = sq.Spaces(i=4, a=10)
    text = "R{a1,a2;i1,i2} = 1/2 g{a1,a2;a3,a4} t{a3,a4;i1,i2}"
    plain = sq.compile(text, spaces)
    for one in ({"a": 1}, {"a": {"block": 10}}, {"i": 1, "a": 1}):
        prog = sq.compile(text, spaces, batch=one)
        assert (prog.memory_bytes, prog.flops) == (plain.memory_bytes, plain.flops)
        assert str(prog.schedule.ordered) == str(plain.schedule.ordered)


# -- item 2: numbers with exponents ---------------------------------------------------------


def test_numbers_with_exponents():
    got = [sq.parse_expr(f"{n} x").scalar for n in ("2e3", "1e-3", "1.5E+2", ".5e1")]
    assert got == [Fraction(2000), Fraction(1, 1000), Fraction(150), Fraction(5)]
    # `e3` is a name wherever it is not glued to a number
    spaces = sq.Spaces(i=2)
    (eq,) = sq.parse("E = 2 e3 + e3{i1;i1} + 2e3x", spaces=spaces, validate=False)
    first, second, third = eq.rhs.terms
    assert (first.scalar, first.factors[0].name) == (2, "e3")
    assert second.label == "e3"
    assert (third.scalar, third.factors[0].name) == (2000, "x")
    out = sq.evaluate_reference("E = 2e-1 e3{i1;i1}", spaces, {"e3{i;i}": np.eye(2)})
    assert float(out["E"]) == pytest.approx(0.4, rel=1e-15)
    for bad in ("E = 2e f{i1;i1}", "E = 2e+ x", "E = 3ex"):
        with pytest.raises(sq.ParseError, match=r"starts an exponent, but no digits follow"):
            sq.parse(bad)


# -- item 10: SeQuant's standard spaces are known ------------------------------------------


def test_sequant_standard_spaces_parse_and_evaluate_as_is():
    text = "R{e1;m1} = f{e1;e2} t{e2;m1} + g{e1;o1} t{o1;m1}"  # SR convention letters
    (eq,) = sq.parse(text)  # no registration needed
    assert {ix.space for ix in eq.lhs.indices} == {"e", "m"}
    spaces = sq.Spaces(o=1, i=2, a=3, g=1)  # p = o, i, a, g: 7 orbitals
    f, g = RNG.random((7, 7)), RNG.random((7, 7))
    t_em, t_om = RNG.random((4, 3)), RNG.random((1, 3))
    inputs = {"f": f, "g": g, "t{e;m}": t_em, "t{o;m}": t_om}
    want = f[3:, 3:] @ t_em + g[3:, :1] @ t_om  # e = a, g is p[3:7]; o is p[0:1]
    _close(sq.evaluate_reference(text, spaces, inputs)["R"], want)
    _close(sq.compile(text, spaces, batch={"e": 2, "m": 2})(inputs)["R"], want)
    with pytest.raises(sq.PlanError, match=r"no index of the equations is in space `x`"):
        sq.compile(text, spaces, batch={"x": 2})  # x = i, a: loops batch a space, not its parts
    with pytest.raises(sq.PlanError, match=r"indices in `e` \(which hold `a`\).*batch `e` instead"):
        sq.compile(text, spaces, batch={"a": 2})
    # a base space the equations do not touch is allowed (one plan, several equation sets)
    _close(sq.compile(text, spaces, batch={"e": 2, "Κ": 2})(inputs)["R"], want)
    # empty-by-default members: with only i and a set, p and x are i then a
    small = sq.Spaces(i=2, a=3)
    assert (small.extent("p"), small.extent("x"), small.offset_in("a", "p")) == (5, 5, 2)
    with pytest.raises(sq.SpaceError, match=r"'o' has no extent \(it is empty by default"):
        small.extent("o")
    with pytest.raises(sq.SpaceError, match=r"'c' \(g, α'\) has no elements"):
        small.extent("c")
    keys = sq.Spaces().keys()
    assert {"o", "i", "a", "g", "α'", "m", "e", "x", "p", "h", "c", "α", "H", "κ"} <= set(keys)
    assert {"κ↑", "α'↓", "Κ", "μ̃"} <= set(keys)
    with pytest.raises(sq.SpaceError, match=r"'e' is already registered \(virtual: a then g"):
        sq.Spaces().with_space("e")
