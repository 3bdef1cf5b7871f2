"""Whole operands inside loops (:mod:`sq_jax.lower.copies`).

Transposed copies of whole inputs made once before a loop (``BatchPlan(copies=
"hoisted")``) and sums stored in the layout of their one reader in a loop must give the
per-batch program's results and derivatives, and the memory model must charge the
hoisted copies as XLA allocates them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sq_jax as sq
from sq_jax.budget import xla_bytes
from sq_jax.cc.equations import load_equations
from sq_jax.forest.reference import evaluate_reference
from sq_jax.lower.ir import Combine, Contract
from sq_jax.lower.prepare import split_prologue
from sq_jax.plan import BatchPlan
from tests.helpers.symmetric import symmetric_inputs

SPACES = sq.Spaces(i=4, a=6)
BATCHES = {"a": {"batches": 3, "roles": "external"}}


def _plan(copies: str) -> BatchPlan:
    return BatchPlan.of(BATCHES, external_modes="first", hoist="invariant", copies=copies)


@pytest.fixture(scope="module")
def ccsd() -> tuple[sq.Program, sq.Program, dict]:
    text = load_equations("ccsd_so")
    per_batch = sq.compile(text, SPACES, pair_symmetry=True, batch=_plan("per batch"))
    hoisted = sq.compile(text, SPACES, pair_symmetry=True, batch=_plan("hoisted"))
    x = symmetric_inputs(per_batch.schedule.annotated.forest, seed=11)
    return per_batch, hoisted, x


def test_hoisted_copies_are_made_once_and_read_whole(ccsd):
    _, hoisted, _ = ccsd
    made = [lp for lp in hoisted.lowered.loops() if lp.copies]
    assert made, str(hoisted.lowered)
    for lp in made:
        assert all(key in hoisted.lowered.input_keys for key, _ in lp.copies)
    assert "hoisted copies" in str(hoisted.schedule.annotated.plan)


def test_hoisted_copies_equal_the_reference_and_the_per_batch_program(ccsd):
    per_batch, hoisted, x = ccsd
    forest = per_batch.schedule.annotated.forest
    want = evaluate_reference(forest, None, x)
    for prog in (per_batch, hoisted):
        got = prog(x)
        for key, ref in want.items():
            np.testing.assert_allclose(got[key], ref, rtol=1e-12, atol=1e-12, err_msg=key)


def test_hoisted_copies_keep_derivatives_in_every_direction(ccsd):
    # the copied inputs (g, t2) get arbitrary tangents: no symmetry is assumed
    per_batch, hoisted, x = ccsd
    rng = np.random.default_rng(5)
    tangents = {k: rng.standard_normal(np.shape(v)) for k, v in x.items()}

    def loss(prog, inputs):
        r = prog(inputs)
        return r["E"] + jnp.sum(r["R1"] ** 2) + jnp.sum(jnp.sin(r["R2"]))

    for fn in (jax.grad, lambda f: lambda v: jax.jvp(f, (v,), (tangents,))[1]):
        want = fn(lambda v: loss(per_batch, v))(x)
        got = fn(lambda v: loss(hoisted, v))(x)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)


def test_the_memory_model_charges_hoisted_copies_as_xla_does(ccsd):
    per_batch, hoisted, _ = ccsd
    for prog in (per_batch, hoisted):
        measured = xla_bytes(prog)
        assert measured is not None
        assert 0.85 <= prog.memory_bytes / measured <= 1.15, (prog.memory_bytes, measured)


def test_a_sum_read_by_one_product_in_a_loop_is_stored_as_it_reads_it(ccsd):
    # spin-orbital CCSD: g + P(g) does not carry the loop's index; made once before the
    # loop, it is read whole by one product inside it (the ring term), untransposed
    per_batch, _, _ = ccsd
    sums = {ins.value_id for ins in per_batch.lowered.body if isinstance(ins, Combine)}
    reads = [
        ins.gemm.perms[k]
        for lp in per_batch.lowered.loops()
        for ins in lp.body
        if isinstance(ins, Contract) and ins.gemm is not None
        for k, r in enumerate(ins.operands)
        if r.input_key is None and r.value_id in sums and not r.slices
    ]
    assert reads and all(perm is None for perm in reads), str(per_batch.lowered)


def test_a_prepared_program_makes_only_the_copies_of_what_changes(ccsd):
    # the integrals' copies are made once by the prologue; t2's stay before the loop
    _, hoisted, x = ccsd
    fixed = {k: v for k, v in x.items() if k.startswith(("f", "g"))}
    _, rest = split_prologue(hoisted.lowered, set(fixed))
    made = {key for lp in rest.loops() for key, _ in lp.copies}
    assert made and not made & set(fixed), made
    step = hoisted.prepare(fixed)
    got = step({k: v for k, v in x.items() if k not in fixed})
    for key, want in hoisted(x).items():
        np.testing.assert_allclose(got[key], want, rtol=1e-12, atol=1e-12, err_msg=key)
