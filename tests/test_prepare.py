"""Programs prepared with fixed inputs (``Program.prepare``, :mod:`sq_jax.lower.prepare`):
the prologue holds what reads only the fixed inputs, each call does the rest, and the
results and derivatives equal the one-call program's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sq_jax as sq
import sq_jax.lower.pairs as pairs_module
from sq_jax.cc.equations import load_equations
from sq_jax.lower.ir import Contract, Loop
from sq_jax.lower.prepare import VALUE_PREFIX, split_prologue
from tests.helpers.symmetric import symmetric_inputs


def _split(blocks: dict) -> tuple[dict, dict]:
    fixed = {k: jnp.asarray(x) for k, x in blocks.items() if not k.startswith("t{")}
    return fixed, {k: jnp.asarray(x) for k, x in blocks.items() if k.startswith("t{")}


def _contracts(body) -> list[Contract]:
    out = []
    for ins in body:
        out += _contracts(ins.body) if isinstance(ins, Loop) else [ins]
    return [i for i in out if isinstance(i, Contract)]


@pytest.mark.parametrize(
    ("name", "plan"),
    [("ccsd_cs", None), ("ccsd_so", None), ("ccsd_so", {"a": 2})],
    ids=["cs", "so", "so-a2"],
)
def test_prepared_programs_equal_the_one_call_program_with_their_derivatives(
    name, plan, monkeypatch
):
    # every pair packed, so that the prologue makes packed copies too (the gate packs
    # nothing at these sizes)
    monkeypatch.setattr(pairs_module, "GATHER_RATE", float("inf"))
    monkeypatch.setattr(pairs_module, "INPUT_GATHER_RATE", float("inf"))
    spaces = sq.Spaces(i=3, a=5)
    text = load_equations(name)
    plain = sq.compile(text, spaces)
    prog = sq.compile(text, spaces, batch=plan, pair_symmetry=True, fixed_inputs=["f", "g"])
    blocks = symmetric_inputs(plain.schedule.annotated.forest, seed=5)
    fixed, t = _split(blocks)
    step = prog.prepare(fixed)
    assert step.prepared_keys, "integral blocks are copied or summed once"
    if plan is None:  # (batched: the copies of blocks read whole inside the loops)
        assert any(VALUE_PREFIX in k for k in step.prepared_keys)  # e.g. 2 g - g.T
        assert any(".ready[" in k for k in step.prepared_keys)  # g packed for the ladder
    want = sq.evaluate_reference(sq.parse(text, spaces=spaces), spaces, blocks)
    got = step(t)
    for k in want:
        tol = 1e-12 * (1 + np.abs(want[k]).max())
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=tol)
    if name != "ccsd_so" or plan is not None:
        return  # derivatives through ready copies: unbatched spin-orbital (the split's
        # derivatives are those of test_pairs, which exercises the same custom JVP)
    # derivatives in the amplitudes along directions without their symmetry: the plain
    # program's (what Newton-Krylov, lambda and EOM rely on)
    rng = np.random.default_rng(6)
    dt = {k: jnp.asarray(rng.standard_normal(x.shape)) for k, x in t.items()}

    def one_call(amps):
        return plain({**fixed, **amps})

    (_, want_dot), (_, got_dot) = jax.jvp(one_call, (t,), (dt,)), jax.jvp(step, (t,), (dt,))
    for k in want_dot:
        tol = 1e-12 * (1 + np.abs(want_dot[k]).max())
        np.testing.assert_allclose(got_dot[k], want_dot[k], rtol=0, atol=tol)
    bar = {k: jnp.asarray(rng.standard_normal(np.shape(x))) for k, x in want.items()}
    want_bar = jax.vjp(one_call, t)[1](bar)[0]
    got_bar = jax.vjp(step, t)[1](bar)[0]
    for k in t:
        tol = 1e-12 * (1 + np.abs(want_bar[k]).max())
        np.testing.assert_allclose(got_bar[k], want_bar[k], rtol=0, atol=tol)


def test_the_rest_reads_no_fixed_block_through_a_copy_it_makes_per_call():
    spaces = sq.Spaces(i=3, a=5)
    prog = sq.compile(load_equations("ccsd_cs"), spaces)
    fixed_keys = {k for k in prog.lowered.input_keys if not k.startswith("t{")}
    prologue, rest = split_prologue(prog.lowered, fixed_keys)
    made = set(prologue.keys)
    assert made and made <= set(rest.input_keys)
    for ins in _contracts(rest.body):
        for k, read in enumerate(ins.operands):
            if read.input_key in fixed_keys | made and ins.gemm is not None:
                assert ins.gemm.perms[k] is None, str(ins)
    # a value of fixed blocks only (closed-shell CCSD's 2 g - g.T) is computed once
    assert prologue.values
    left = {i.value_id for i in rest.body}
    assert all(ins.value_id not in left for ins in prologue.values)


def test_operands_cut_to_a_batch_are_not_copied_whole():
    spaces = sq.Spaces(i=4, a=6)
    prog = sq.compile(load_equations("ccsd_so"), spaces, batch={"a": 3})
    fixed_keys = {k for k in prog.lowered.input_keys if not k.startswith("t{")}
    prologue, rest = split_prologue(prog.lowered, fixed_keys)
    copied = {c.key for c in prologue.copies}
    sliced = [r for lp in rest.loops() for i in _contracts(lp.body) for r in i.operands if r.slices]
    assert sliced and not any(r.input_key in copied for r in sliced)


def test_fixed_inputs_price_their_packing_as_made_once():
    # at o = 3 packing g's summed pair (a3 < a4) writes half of g per call, more than
    # it saves; made once, it is free, and the summed pair is packed as well
    text = "R{a1,a2;i1,i2} = g{a1,a2;a3,a4}:A t{a3,a4;i1,i2}:A"
    spaces = sq.Spaces(i=3, a=40)
    per_call = sq.compile(text, spaces, pair_symmetry=True).lowered.body[0].pairs
    once = sq.compile(text, spaces, pair_symmetry=True, fixed_inputs=["g"]).lowered.body[0].pairs
    assert per_call.summed is None and once.summed is not None
    assert once.fraction < per_call.fraction


def test_bad_fixed_inputs_and_bound_inputs_given_again_are_reported():
    text = "R{a1;i1} = f{a1;a2} t{a2;i1}"
    spaces = sq.Spaces(i=2, a=3)
    with pytest.raises(sq.InputError, match=r"fixed_inputs \['h'\].*expected some of \['f', 't'\]"):
        sq.compile(text, spaces, fixed_inputs=["h"])
    prog = sq.compile(text, spaces)
    step = prog.prepare({"f{a;a}": np.eye(3)})
    with pytest.raises(sq.InputError, match=r"'f\{a;a\}' were bound by Program.prepare"):
        step({"f{a;a}": np.eye(3), "t{a;i}": np.ones((3, 2))})
    with pytest.raises(sq.InputError, match="missing input for `t"):
        step({})
    with pytest.raises(sq.InputError, match="not read by any leaf"):
        prog.prepare({"h": np.eye(3)})


def test_the_memory_model_prices_a_prepared_call_as_xla_allocates():
    spaces = sq.Spaces(i=6, a=14)
    prog = sq.compile(load_equations("ccsd_so"), spaces, pair_symmetry=True, fixed_inputs=["g"])
    blocks = symmetric_inputs(prog.schedule.annotated.forest, seed=7)
    fixed, t = _split(blocks)
    step = prog.prepare(fixed)
    ma = step.compiled(t).memory_analysis()
    xla = ma.temp_size_in_bytes + ma.output_size_in_bytes
    assert 0.85 <= step.memory_bytes / xla <= 1.15
    assert step.prepared_bytes == sum(x.nbytes for x in step.prepared.values()) > 0
