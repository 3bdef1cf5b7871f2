"""Differentiability: gradients through batched programs equal the unbatched ones."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import sq_jax as sq
from sq_jax._pipeline import compile
from tests.helpers.close import assert_rel_close as close
from tests.helpers.close import weighted_sum
from tests.helpers.schedule_corpus import TEXT_CASES, random_blocks

RTOL = 1e-10
SPACES = sq.Spaces(i=3, a=4, Κ=5)


def assert_rel_close(got, want, rtol=RTOL, name=""):
    close(got, want, rtol, name)


CASES = {
    # scalar energy, nested contracted loops with remainders (i=3 in 2s, a=4 in 3s)
    "energy_nested": (
        "E = f{i1;a1} t{a1;i1} + g{i1,i2;a1,a2} (1/4 t{a1,a2;i1,i2} + 1/2 t{a1;i1} t{a2;i2})",
        {"i": {"block": 2}, "a": {"block": 3, "roles": "contracted"}},
    ),
    # tensor result: external occupied loops (scatter) around contracted DF loops (sum)
    "df_inside_occ": TEXT_CASES["df_inside_occ"],
    "doubles_occ": TEXT_CASES["doubles_occ"],
}


@pytest.mark.parametrize(
    ("name", "remat"),
    [
        ("energy_nested", False),
        ("energy_nested", True),
        ("df_inside_occ", False),
        ("doubles_occ", True),
    ],
)
def test_grad_and_jvp_match_unbatched(name, remat):
    text, plan = CASES[name]
    forest = sq.build_forest(sq.parse(text), SPACES)
    x = {k: jnp.asarray(v) for k, v in random_blocks(forest, seed=21).items()}
    batched = compile(text, SPACES, batch=plan, remat=remat)
    plain = compile(text, SPACES)
    rng = np.random.default_rng(22)
    w = {k: rng.standard_normal(np.shape(v)) for k, v in plain(x).items()}
    g_b = jax.jit(jax.grad(weighted_sum(batched, w)))(x)
    g_u = jax.jit(jax.grad(weighted_sum(plain, w)))(x)
    for k in x:
        assert_rel_close(g_b[k], g_u[k], name=k)
    tangent = {k: jnp.asarray(rng.standard_normal(v.shape)) for k, v in x.items()}
    _, t_b = jax.jit(lambda x, t: jax.jvp(batched, (x,), (t,)))(x, tangent)
    _, t_u = jax.jit(lambda x, t: jax.jvp(plain, (x,), (t,)))(x, tangent)
    for k in t_u:
        assert_rel_close(t_b[k], t_u[k], name=k)


@pytest.mark.parametrize("remat", [False, True], ids=["plain", "remat"])
def test_check_grads_second_order(remat):
    text = "E = g{i1,i2;a1,a2} t{a1;i1} t{a2;i2}"
    spaces = sq.Spaces(i=3, a=4)
    plan = {"i": {"block": 2, "roles": "contracted"}}
    prog = compile(text, spaces, batch=plan, remat=remat)
    rng = np.random.default_rng(3)
    g = jnp.asarray(rng.standard_normal((3, 3, 4, 4)))

    def energy(t):
        return prog({"g{i,i;a,a}": g, "t{a;i}": t})["E"]

    check_grads(energy, (jnp.asarray(rng.standard_normal((4, 3))),), order=2, modes=("fwd", "rev"))


def test_grad_wrt_full_tensor_input():
    # inputs given as full tensors are cut into blocks inside the jitted program
    text = "R{a1;i1} = f{a1;a2} t{a2;i1} - f{i2;i1} t{a1;i2}"
    spaces = sq.Spaces(i=3, a=4)
    batched = compile(text, spaces, batch={"a": {"block": 3}, "i": 2})
    plain = compile(text, spaces)
    rng = np.random.default_rng(5)
    f = jnp.asarray(rng.standard_normal((7, 7)))
    t = jnp.asarray(rng.standard_normal((4, 3)))

    def loss(prog):
        return lambda f: jnp.sum(prog({"f": f, "t{a;i}": t})["R"] ** 2)

    assert_rel_close(jax.grad(loss(batched))(f), jax.grad(loss(plain))(f))


def test_loop_accumulators_start_as_zeros_that_depend_on_what_the_loop_reads():
    # JAX differentiates a loop by a fixpoint over which carries depend on the inputs;
    # an accumulator starting as a constant zero costs a second pass per nesting level
    # (2^depth for a nest). The zeros a loop starts from are exactly zero in value and
    # depend, for JAX, on what the loop reads and nothing else.
    from sq_jax.lower.execute import RunSettings, dependent_zeros
    from sq_jax.lower.ir import Read

    def start(x, y):
        run = RunSettings({"x": x, "y": y}, jnp.float64)
        (zeros,) = dependent_zeros([(2, 3)], [Read(0, "x")], {}, {}, run)
        return zeros

    x, y = jnp.full((4,), jnp.inf), jnp.ones((5,))
    np.testing.assert_array_equal(start(x, y), np.zeros((2, 3)))  # no inf * 0
    _, along_x = jax.linearize(lambda x: start(x, y), x)
    _, along_y = jax.linearize(lambda y: start(x, y), y)
    ops_x = [e.primitive.name for e in jax.make_jaxpr(along_x)(x).eqns]
    ops_y = [e.primitive.name for e in jax.make_jaxpr(along_y)(y).eqns]
    assert "select_n" in ops_x  # a tangent computed from x's: not a symbolic zero
    assert "select_n" not in ops_y  # the loop does not read y: no derivative work
