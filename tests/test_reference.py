import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sq_jax as sq
from sq_jax.forest.inputs import bind_inputs, input_specs
from tests.helpers.corpus import CASES, SPACES, inputs_for, make_inputs


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_reference_matches_handwritten_einsum(case):
    x = make_inputs(seed=1)
    got = sq.evaluate_reference(case.text, SPACES, inputs_for(case, x))
    want = case.oracle(x)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_jax_twin_matches_numpy_reference(case):
    x = inputs_for(case, make_inputs(seed=2))
    want = sq.evaluate_reference(case.text, SPACES, x)
    got = jax.jit(lambda inp: sq.evaluate_reference_jax(case.text, SPACES, inp))(x)
    for name in want:
        assert got[name].dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(got[name]), want[name], rtol=1e-12, atol=1e-12)


CCSD_ENERGY = """
E = f{i_1;a_1}:A-C-S * t{a_1;i_1}:A-N-S
  + 1/4 g{i_1,i_2;a_1,a_2}:A-C-S * t{a_1,a_2;i_1,i_2}:A-N-S
  + 1/2 g{i_1,i_2;a_1,a_2}:A-C-S * t{a_1;i_1}:A-N-S * t{a_2;i_2}:A-N-S
""".strip().replace("\n ", "")


def test_spin_orbital_ccsd_energy_equals_handwritten_einsum():
    rng = np.random.default_rng(7)
    no, nv = 6, 9
    spaces = sq.Spaces(i=no, a=nv)
    n = no + nv
    f = rng.standard_normal((n, n))
    g = rng.standard_normal((n, n, n, n))
    g = g - g.transpose(0, 1, 3, 2)  # antisymmetric like <pq||rs>
    t1 = rng.standard_normal((nv, no))
    t2 = rng.standard_normal((nv, nv, no, no))
    o, v = slice(0, no), slice(no, n)
    want = (
        np.einsum("ia,ai->", f[o, v], t1)
        + 0.25 * np.einsum("ijab,abij->", g[o, o, v, v], t2)
        + 0.5 * np.einsum("ijab,ai,bj->", g[o, o, v, v], t1, t1)
    )
    got = sq.evaluate_reference(
        CCSD_ENERGY, spaces, {"f": f, "g": g, "t{a;i}": t1, "t{a,a;i,i}": t2}
    )["E"]
    assert abs(got - want) <= 1e-12 * max(1.0, abs(want))


def test_jax_twin_gradient_matches_finite_differences():
    spaces = sq.Spaces(i=2, a=3)
    forest = sq.build_forest(sq.parse(CCSD_ENERGY, spaces=spaces), spaces)
    rng = np.random.default_rng(3)
    x = {
        "f": rng.standard_normal((5, 5)),
        "g": rng.standard_normal((5, 5, 5, 5)),
        "t{a;i}": rng.standard_normal((3, 2)),
        "t{a,a;i,i}": rng.standard_normal((3, 3, 2, 2)),
    }

    def energy(t1):
        return sq.evaluate_reference_jax(forest, None, {**x, "t{a;i}": t1})["E"]

    from jax.test_util import check_grads

    check_grads(energy, (jnp.asarray(x["t{a;i}"]),), order=2, modes=("fwd", "rev"))


def test_each_distinct_value_is_computed_once(monkeypatch):
    text = "R{a1;i1} = g{i2,a1;a2,i1} t{a2;i2} + 2 g{i3,a1;a3,i1} t{a3;i3}"
    forest = sq.build_forest(sq.parse(text, spaces=SPACES), SPACES)
    calls = []
    real = np.einsum
    monkeypatch.setattr(np, "einsum", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    x = make_inputs(0)
    out = sq.evaluate_reference(forest, None, {"g": x["g"], "t{a;i}": x["t{a;i}"]})
    assert len(calls) == 1  # the two terms are one value
    want = 3 * real("kaci,ck->ai", x["g"][0:3, 3:7, 3:7, 0:3], x["t{a;i}"])
    np.testing.assert_allclose(out["R"], want, rtol=1e-12)


def test_input_naming_full_tensor_and_blocks():
    spaces = sq.Spaces(i=2, a=3)
    forest = sq.build_forest(sq.parse("E = g{i1,i2;a1,a2} t{a1,a2;i1,i2}", spaces=spaces), spaces)
    specs = input_specs(forest)
    assert [(s.block_key, s.shape) for s in specs] == [
        ("g{i,i;a,a}", (2, 2, 3, 3)),
        ("t{a,a;i,i}", (3, 3, 2, 2)),
    ]
    g = np.arange(5.0**4).reshape(5, 5, 5, 5)
    blocks = bind_inputs(forest, {"g": g, "t{a,a;i,i}": np.zeros((3, 3, 2, 2))})
    np.testing.assert_array_equal(blocks["g{i,i;a,a}"], g[:2, :2, 2:, 2:])
    # a block together with the full tensor of its label is ambiguous: pass one
    blk = np.ones((2, 2, 3, 3))
    with pytest.raises(sq.InputError, match=r"'g\{i,i;a,a\}' and 'g' give the same tensor twice"):
        bind_inputs(forest, {"g": g, "g{i,i;a,a}": blk, "t{a,a;i,i}": np.zeros((3, 3, 2, 2))})
    blocks = bind_inputs(forest, {"g{i,i;a,a}": blk, "t{a,a;i,i}": np.zeros((3, 3, 2, 2))})
    np.testing.assert_array_equal(blocks["g{i,i;a,a}"], blk)


def test_input_errors_name_the_leaf_and_shape():
    spaces = sq.Spaces(i=2, a=3)
    forest = sq.build_forest(sq.parse("E = g{i1,i2;a1,a2} t{a1,a2;i1,i2}", spaces=spaces), spaces)
    t2 = np.zeros((3, 3, 2, 2))
    with pytest.raises(sq.InputError) as err:
        bind_inputs(forest, {"t{a,a;i,i}": t2})
    assert str(err.value) == (
        "missing input for `g{i_1,i_2;a_1,a_2}:N-C-S`: pass the block "
        "inputs['g{i,i;a,a}'] with shape (2, 2, 3, 3), or the full tensor inputs['g']."
    )
    with pytest.raises(
        sq.InputError,
        match=r"input 't\{a,a;i,i\}' has shape \(3, 3, 2\), "
        r"expected \(3, 3, 2, 2\)",
    ):
        bind_inputs(forest, {"g": np.zeros((5,) * 4), "t{a,a;i,i}": np.zeros((3, 3, 2))})
    with pytest.raises(
        sq.InputError,
        match=r"input 'g' axis 2 has length 4.*space 'a'.*a \(3\), "
        r"p \(5\)",
    ):
        bind_inputs(forest, {"g": np.zeros((5, 5, 4, 5)), "t{a,a;i,i}": t2})
    with pytest.raises(sq.InputError, match=r"input 'g' has rank 2"):
        bind_inputs(forest, {"g": np.zeros((5, 5)), "t{a,a;i,i}": t2})
    with pytest.raises(sq.InputError, match=r"input\(s\) 'tt' are not read by any leaf"):
        bind_inputs(forest, {"g": np.zeros((5,) * 4), "t{a,a;i,i}": t2, "tt": 1.0})
    with pytest.raises(sq.InputError, match=r"dtype <U1; expected a floating-point array"):
        bind_inputs(forest, {"g": np.full((5,) * 4, "x"), "t{a,a;i,i}": t2})
