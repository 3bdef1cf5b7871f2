"""Reverse mode written out (``remat=True``): gradients equal the unbatched program's.

:mod:`sq_jax.lower.reverse` differentiates a rematerialized program by its own backward
pass (one cotangent accumulator per array, batches recomputed) and
:mod:`sq_jax.lower.linear` ties it to JAX. Every case compares against the unbatched
program differentiated by JAX (an independent path), in reverse and forward mode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import sq_jax as sq
from sq_jax._pipeline import compile
from sq_jax.cc.equations import load_equations
from sq_jax.lower.ir import Loop
from tests.helpers.close import assert_rel_close as close
from tests.helpers.close import weighted_sum
from tests.helpers.schedule_corpus import CC_PLANS, TEXT_CASES, cc_forest, random_blocks

RTOL = 1e-10
SPACES = sq.Spaces(i=3, a=4, Κ=5)  # blocks that leave remainders: peeled and overlapping


def assert_rel_close(got, want, rtol=RTOL, name=""):
    close(got, want, rtol, name)


def _compare(text, spaces, plan, seed=0, wrt=None, jvp=True):
    """Gradient and JVP of the batched remat program against the unbatched program's."""
    forest = sq.build_forest(sq.parse(text), spaces)
    x = {k: jnp.asarray(v) for k, v in random_blocks(forest, seed=seed).items()}
    batched = compile(text, spaces, batch=plan, remat=True)
    plain = compile(text, spaces)
    assert any(isinstance(ins, Loop) for ins in batched.lowered.body), "no loop: not a test"
    rng = np.random.default_rng(seed + 1)
    w = {k: rng.standard_normal(np.shape(v)) for k, v in plain(x).items()}
    wrt = sorted(x) if wrt is None else wrt
    fixed = {k: v for k, v in x.items() if k not in wrt}

    def loss(prog):
        return lambda moved: weighted_sum(prog, w)({**fixed, **moved})

    moved = {k: x[k] for k in wrt}
    got = jax.jit(jax.grad(loss(batched)))(moved)
    want = jax.jit(jax.grad(loss(plain)))(moved)
    for k in wrt:
        assert_rel_close(got[k], want[k], name=f"grad {k}")
    if not jvp:
        return
    tangent = {k: jnp.asarray(rng.standard_normal(v.shape)) for k, v in moved.items()}
    _, t_b = jax.jit(lambda m, d: jax.jvp(loss(batched), (m,), (d,)))(moved, tangent)
    _, t_u = jax.jit(lambda m, d: jax.jvp(loss(plain), (m,), (d,)))(moved, tangent)
    assert_rel_close(t_b, t_u, name="jvp")


@pytest.mark.parametrize("name", sorted(k for k, (_, plan) in TEXT_CASES.items() if plan))
def test_corpus_gradients_match_unbatched(name):
    # every input differentiated: sums, scatters, invariant carries, nested loops,
    # peeled and overlapping last batches, values made in one loop and read in the next
    text, plan = TEXT_CASES[name]
    _compare(text, SPACES, plan, seed=len(name))


@pytest.mark.parametrize("plan", ["i_external"])
def test_ccsd_gradient_wrt_amplitudes_matches_unbatched(plan):
    # the Lagrangian's derivative: the integrals are fixed (their cotangents never made);
    # values made inside loops and read by the loops nested in them (pulled back at once)
    forest = cc_forest("ccsd_so", 3, 5)
    text = load_equations("ccsd_so")
    t_keys = sorted(k for k in random_blocks(forest) if k.startswith("t{"))
    _compare(text, sq.Spaces(i=3, a=5), CC_PLANS[plan], seed=3, wrt=t_keys, jvp=False)


def test_scalar_variables_and_generated_denominators_get_their_gradients():
    text = "R{a1;i1} = w f{a1;a2} t{a2;i1} + Δ{a1;i1} h{a1;i1}\nE = w f{i1;a1} t{a1;i1}"
    plan = {"a": {"batches": 2, "roles": "both"}}
    _compare(text, sq.Spaces(i=3, a=5), plan, seed=11)


def test_second_order_through_a_nested_loop():
    # JAX's derivative of the linear map's residuals: hessian-vector products and
    # check_grads of order 2 go through the written-out reverse pass
    text, plan = TEXT_CASES["two_space"]
    prog = compile(text, SPACES, batch=plan, remat=True)
    forest = sq.build_forest(sq.parse(text), SPACES)
    x = {k: jnp.asarray(v) for k, v in random_blocks(forest, seed=5).items()}

    def energy(t):
        return jnp.sum(prog({**x, "t{a;i}": t})["R"] ** 2)

    check_grads(energy, (x["t{a;i}"],), order=2, modes=("rev",))


def test_vmapped_gradient_equals_each_gradient():
    text, plan = TEXT_CASES["doubles_occ"]
    prog = compile(text, SPACES, batch=plan, remat=True)
    forest = sq.build_forest(sq.parse(text), SPACES)
    x = {k: jnp.asarray(v) for k, v in random_blocks(forest, seed=6).items()}
    ts = jnp.stack([x["t{a,a;i,i}"] * s for s in (1.0, -0.5, 2.0)])

    def loss(t):
        return jnp.sum(prog({**x, "t{a,a;i,i}": t})["R"] ** 2)

    together = jax.jit(jax.vmap(jax.grad(loss)))(ts)
    each = jax.jit(jax.grad(loss))
    for k in range(3):
        assert_rel_close(together[k], each(ts[k]), name=f"member {k}")
