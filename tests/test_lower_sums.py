"""Long sums cut into pieces (sq_jax.lower.sums): same results, bounded XLA fusions.

The oracle is the reference evaluator of the unfactored forest; a chain of adds longer
than ``SUM_PIECE`` terms is cut (stacked terms times their coefficients; products that
contract alike as one grouped contraction), and the CC programs, whose sums are shorter,
are not cut at all unless the test lowers the piece size to force cuts through their
permuted sums and loops.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sq_jax as sq
from sq_jax.cc.equations import load_equations
from sq_jax.forest.factor import unfactored
from sq_jax.forest.reference import evaluate_forest
from sq_jax.forest.symmetry import symmetric_random_inputs
from sq_jax.lower import sums
from sq_jax.lower.aot import compiler_options
from sq_jax.lower.interpret import run_lowered
from sq_jax.lower.ir import Contract, Loop
from tests.helpers.random_sums import random_sum
from tests.helpers.schedule_corpus import random_blocks


def count_cuts(body) -> int:
    return len(sums.plan_sums(body).cuts) + sum(
        count_cuts(ins.body) for ins in body if isinstance(ins, Loop)
    )


def assert_matches_reference(prog, text, spaces, seed=0):
    with unfactored():
        flat = sq.build_forest(sq.parse(text), spaces)
    blocks = random_blocks(flat, seed=seed)
    want = evaluate_forest(flat, blocks)
    got = prog(blocks)
    assert got.keys() == want.keys()
    for name, ref in want.items():
        np.testing.assert_allclose(np.asarray(got[name]), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("batch", [None, {"a": 2}], ids=["unbatched", "a2"])
def test_a_320_term_random_sum_equals_the_reference(batch):
    text, spaces = random_sum(320, seed=7), sq.Spaces(i=2, a=3)
    prog = sq.compile(text, spaces, batch=batch)
    assert count_cuts(prog.lowered.body) >= 320 // sums.SUM_PIECE  # the chain was cut
    assert_matches_reference(prog, text, spaces)


def test_products_that_contract_alike_run_as_one_contraction_with_equal_values_and_gradients():
    # 300 products of 4 wirings: each cut groups them by contraction, so the program holds
    # a few dot_generals, not one per term; values and gradients equal the einsum oracle
    text, spaces = random_sum(300, seed=5), sq.Spaces(i=2, a=3)
    prog = sq.compile(text, spaces)
    cuts = sums.plan_sums(prog.lowered.body).cuts.values()
    grouped = sum(len(g.products) for cut in cuts for g in cut.groups)
    assert grouped >= 250, grouped
    blocks = random_blocks(prog.schedule.annotated.forest, seed=2)
    jaxpr = jax.make_jaxpr(lambda b: run_lowered(prog.lowered, b))(blocks)
    dots = sum(eqn.primitive.name == "dot_general" for eqn in jaxpr.jaxpr.eqns)
    assert dots < 300 // 10, dots
    want = sq.evaluate_reference(text, spaces, blocks)["R"]
    np.testing.assert_allclose(np.asarray(prog(blocks)["R"]), want, rtol=1e-12, atol=1e-12)
    # R is linear in each input: <grad, d> must equal loss(x + d) - loss(x) exactly
    rng = np.random.default_rng(3)
    weights = rng.standard_normal(want.shape)
    picked = ("x7{a,a;a}", "y9{i,a;i,i}", "x250{i,a;i}")  # factors of three different terms
    steps = {k: rng.standard_normal(blocks[k].shape) for k in picked}

    def loss(xs):
        return jnp.sum(weights * run_lowered(prog.lowered, {**blocks, **xs})["R"])

    grads = jax.jit(jax.grad(loss))({k: blocks[k] for k in picked})
    moved = {**blocks, **{k: blocks[k] + steps[k] for k in picked}}
    change = np.sum(weights * (sq.evaluate_reference(text, spaces, moved)["R"] - want))
    slope = sum(np.sum(np.asarray(grads[k]) * steps[k]) for k in picked)
    np.testing.assert_allclose(slope, change, rtol=1e-10)


CC_SPACES = sq.Spaces({"Κ": 4}, i=2, a=3)


@pytest.mark.parametrize("name", ["ccsd_so", "ccsd_cs", "ccsd_cs_df"])
def test_cc_programs_are_not_cut(name):
    for batch in (None, {"a": 2}):
        prog = sq.compile(sq.parse(load_equations(name)), CC_SPACES, batch=batch)
        assert count_cuts(prog.lowered.body) == 0


@pytest.mark.parametrize(
    ("name", "batch"),
    [("ccsd_so", None), ("ccsd_so", {"a": 2}), ("ccsd_cs", None), ("ccsd_cs", {"i": 1})],
)
def test_cc_sets_cut_into_pieces_of_three_equal_the_reference(monkeypatch, name, batch):
    monkeypatch.setattr(sums, "SUM_PIECE", 3)
    text = load_equations(name)
    prog = sq.compile(sq.parse(text), CC_SPACES, batch=batch)
    assert count_cuts(prog.lowered.body) > 0
    assert_matches_reference(prog, text, CC_SPACES, seed=3)


def test_memory_model_prices_the_stacked_pieces(monkeypatch):
    monkeypatch.setattr(sums, "SUM_PIECE", 64)  # two cuts and a tail, each with groups
    text, spaces = random_sum(150, seed=1), sq.Spaces(i=6, a=10)

    def predicted_and_xla():
        prog = sq.compile(text, spaces)
        with unfactored():
            flat = sq.build_forest(sq.parse(text), spaces)
        inputs = random_blocks(flat, seed=0)
        exe = prog.jitted.lower(inputs).compile(compiler_options())
        stats = exe.memory_analysis()
        return prog.memory_bytes, stats.temp_size_in_bytes + stats.output_size_in_bytes

    model, xla = predicted_and_xla()
    # product groups are charged in sum order; XLA may schedule them more cheaply
    assert 0.95 <= model / xla <= 1.10, (model, xla)
    monkeypatch.setattr(sums, "SUM_PIECE", 10**6)  # one fused chain: every product alive
    model_uncut, xla_uncut = predicted_and_xla()
    assert 0.95 <= model_uncut / xla_uncut <= 1.05, (model_uncut, xla_uncut)
    assert model < model_uncut and xla < xla_uncut


def test_grouped_products_keep_their_own_symmetric_transposes(monkeypatch):
    """A group runs with its first product's plan. ``t`` and ``w`` are pair-symmetric,
    ``u`` and ``v`` not: the products reading ``t``, ``w`` take an equal transpose
    (``GemmPlan.equal``), those reading ``u``, ``v`` may not, so they never group
    together (grouped, the result was off by about 20)."""
    monkeypatch.setattr(sums, "SUM_PIECE", 3)
    spaces = sq.Spaces(i=3, a=5)
    text = "R{a1,a2;i1,i2} = " + " + ".join(
        f"{g}{{a1,i3;a3,i1}}:N-C-N {x}{{a2,a3;i2,i3}}{'' if x in 'tw' else ':N-C-N'}"
        for g, x in zip("ghpq", "tuwv", strict=True)
    )
    prog = sq.compile(text, spaces, pair_symmetry=True)
    assert count_cuts(prog.lowered.body) > 0
    equal = {  # per amplitude-like input: the equal transposes of its product
        ins.operands[1].input_key: ins.gemm.equal
        for ins in prog.lowered.body
        if isinstance(ins, Contract)
    }
    assert equal["t{a,a;i,i}"] != equal["u{a,a;i,i}"]
    blocks = symmetric_random_inputs(prog.schedule.annotated.forest, seed=1)
    want = sq.compile(text, spaces)(blocks)["R"]
    tol = 1e-12 * (1 + np.abs(want).max())
    np.testing.assert_allclose(prog(blocks)["R"], want, rtol=0, atol=tol)
