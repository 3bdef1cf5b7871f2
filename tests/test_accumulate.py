"""Sequenced sums (``BatchPlan(sums="sequenced")``, :mod:`sq_jax.lower.accumulate`).

A long sum run term by term must give the fused program's results and derivatives, hold
less memory in XLA's own figures (predicted within the memory model's tolerance), and be
what the budget planner picks when it fits a budget without extra FLOPs.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sq_jax as sq
from sq_jax import PlanError
from sq_jax.budget import plan_for_budget, required_bytes
from sq_jax.cc.equations import load_equations
from sq_jax.forest.symmetry import symmetric_random_inputs
from sq_jax.lower.ir import Accumulate, Loop, walk
from sq_jax.plan import BatchPlan
from sq_jax.schedule import schedule_forest
from tests.helpers.corpus import COMBINED, SPACES
from tests.helpers.schedule_corpus import random_blocks
from tests.helpers.symmetric import symmetric_inputs

CC = {"ccsd_so": sq.Spaces(i=4, a=6), "ccsd_cs": sq.Spaces(i=3, a=5)}


def _close(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key, ref in want.items():
        np.testing.assert_allclose(got[key], ref, rtol=1e-12, atol=1e-12, err_msg=key)


def _accumulates(prog: sq.Program) -> int:
    return sum(isinstance(ins, Accumulate) for ins in prog.lowered.body)


@pytest.mark.parametrize("batch", [{}, {"a": {"batches": 2, "roles": "external"}}])
@pytest.mark.parametrize("name", sorted(CC))
def test_cc_sets_sequenced_equal_fused(name, batch):
    text, spaces = load_equations(name), CC[name]
    fused = sq.compile(text, spaces, pair_symmetry=True, batch=BatchPlan.of(batch))
    seq = sq.compile(text, spaces, pair_symmetry=True, batch=BatchPlan.of(batch, sums="sequenced"))
    x = symmetric_inputs(fused.schedule.annotated.forest, seed=3)
    assert "sequenced sum of" in str(seq.lowered)
    _close(seq(x), fused(x))


def test_corpus_sequenced_equals_fused():
    fused = sq.compile(COMBINED, SPACES)
    seq = sq.compile(COMBINED, SPACES, batch=BatchPlan(sums="sequenced"))
    x = random_blocks(fused.schedule.annotated.forest, seed=5)
    _close(seq(x), fused(x))


# a sum of computed terms, batched in a loop under the plan {"a": 2}
DERIV_TEXT = "\n".join(
    [
        "R{a1;i1} = f{a1;a2} t{a2;i1} - f{i2;i1} t{a1;i2} + g{i2,a1;a2,i1} t{a2;i2}"
        " + g{a1,a2;i1,i2} t{a2;i2}",
        "E = f{i1;a1} t{a1;i1} + g{i1,i2;a1,a2} t{a1;i1} t{a2;i2} + h{i1;a1} t{a1;i1}",
    ]
)


@pytest.mark.parametrize("batch", [{}, {"a": 2}])
def test_derivatives_equal_fused(batch):
    spaces = sq.Spaces(i=3, a=4)
    fused = sq.compile(DERIV_TEXT, spaces, batch=batch)
    seq = sq.compile(DERIV_TEXT, spaces, batch=BatchPlan.of(batch, sums="sequenced"))
    inside = sum(isinstance(i, Accumulate) for lp in seq.lowered.loops() for i in lp.body)
    assert _accumulates(seq) + inside >= 1
    x = {k: jnp.asarray(v) for k, v in random_blocks(fused.schedule.annotated.forest, 7).items()}
    tangent = {k: jnp.asarray(np.cos(np.arange(v.size)).reshape(v.shape)) for k, v in x.items()}

    def loss(prog):
        return lambda v: jnp.sum(jnp.sin(prog(v)["R"])) + prog(v)["E"] ** 2

    _, want = jax.jvp(loss(fused), (x,), (tangent,))
    _, got = jax.jvp(loss(seq), (x,), (tangent,))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    _close(jax.grad(loss(seq))(x), jax.grad(loss(fused))(x))


def test_sequenced_sums_hold_less_and_are_predicted():
    """XLA's temporaries + outputs, spin-orbital CCSD at i=6, a=16 (R2 sums 20 terms)."""
    text, spaces = load_equations("ccsd_so"), sq.Spaces(i=6, a=16)
    fused = sq.compile(text, spaces, pair_symmetry=True)
    seq = sq.compile(text, spaces, pair_symmetry=True, batch=BatchPlan(sums="sequenced"))
    x = symmetric_inputs(fused.schedule.annotated.forest, seed=1)
    xla = {}
    for name, prog in (("fused", fused), ("sequenced", seq)):
        stats = prog.memory_analysis(x)
        xla[name] = stats.temp_size_in_bytes + stats.output_size_in_bytes
    assert _accumulates(seq) >= 2
    # measured 0.66 here (fused sums run the antisymmetrizer's sum in sequence too)
    assert xla["sequenced"] < 0.75 * xla["fused"]
    assert 0.85 <= seq.memory_bytes / xla["sequenced"] <= 1.15
    assert seq.flops == fused.flops


def _led_sums(prog: sq.Program) -> list[Accumulate]:
    """The sums with term instructions whose first term is a read-only sum."""
    sums = [ins for ins in walk(prog.lowered.body) if isinstance(ins, Accumulate)]
    read_only = {s.value_id for s in sums if not any(t.body for t in s.terms)}
    return [
        s for s in sums if any(t.body for t in s.terms) and s.terms[0].read.value_id in read_only
    ]


def test_terms_made_before_a_sequenced_sum_are_added_first(monkeypatch):
    """The terms a sum reads from values made before it run as a read-only sum first.

    Closed-shell CCSD, ``a`` in 3 external batches: the loop inside the batch makes two
    ring products together, which a sequenced sum read in the middle of its terms; as
    operands of the sum's loop, they were alive through all of it."""
    import sq_jax.lower.accumulate as accumulate

    text, spaces = load_equations("ccsd_cs"), sq.Spaces(i=4, a=12)
    plan = BatchPlan.of({"a": 3}, external_modes="first", sums="sequenced")
    base = sq.compile(text, spaces, pair_symmetry=True)
    first = sq.compile(text, spaces, pair_symmetry=True, batch=plan)
    with monkeypatch.context() as patch:
        patch.setattr(accumulate, "_made_first", lambda work, value, fresh: work)
        in_turn = sq.compile(text, spaces, pair_symmetry=True, batch=plan)
    # the premise: more sums with term instructions start from a read-only sum
    assert len(_led_sums(first)) > len(_led_sums(in_turn))
    x = symmetric_inputs(base.schedule.annotated.forest, seed=2)
    xla = {}
    for name, prog in (("first", first), ("in turn", in_turn)):
        stats = prog.memory_analysis(x)
        xla[name] = stats.temp_size_in_bytes + stats.output_size_in_bytes
    assert xla["first"] < 0.9 * xla["in turn"]  # measured 0.83
    assert 0.85 <= first.memory_bytes / xla["first"] <= 1.15
    assert first.flops == in_turn.flops
    _close(first(x), base(x))


def test_fused_sums_run_only_an_antisymmetrizer_in_sequence():
    """Fused, XLA would recompute Y's terms for every layout Σ_π ±π(Y) reads it in (and
    hold them all at once): that one sum runs term by term, the others stay fused. It
    runs as a chain, one part per Y, each part right after its Y and adding into the
    previous part, so no two Ys need to be alive together."""
    text, spaces = load_equations("ccsd_so"), sq.Spaces(i=6, a=16)
    fused = sq.compile(text, spaces, pair_symmetry=True)
    body = fused.lowered.body
    parts = [(k, ins) for k, ins in enumerate(body) if isinstance(ins, Accumulate)]
    (r2,) = [r for r in fused.lowered.results if r.name == "R2"]
    assert parts[-1][1].value_id == r2.read.value_id
    assert len(parts) == 3  # Y1 (4 layouts), Y2 and Y3 (2 layouts each)
    made_at = {ins.value_id: k for k, ins in enumerate(body)}
    previous = None
    layouts: dict[int, set] = {}
    for k, acc in parts:
        assert all(not t.body for t in acc.terms)  # each Y is made (fused) before its part
        reads = [t.read.value_id for t in acc.terms]
        if previous is not None:
            assert reads[0] == previous and acc.terms[0].coef == 1.0  # the chain
            reads = reads[1:]
        (y,) = set(reads)  # one Y per part ...
        assert made_at[y] == k - 1  # ... run right after it is made
        layouts[y] = {t.perm for t in acc.terms[previous is not None :]}
        previous = acc.value_id
    assert sorted(len(p) for p in layouts.values()) == [2, 2, 4]  # P(i1 i2), P(a1 a2), both
    x = symmetric_inputs(fused.schedule.annotated.forest, seed=4)
    stats = fused.memory_analysis(x)
    assert 0.85 <= fused.memory_bytes / (stats.temp_size_in_bytes + stats.output_size_in_bytes)
    assert fused.memory_bytes / (stats.temp_size_in_bytes + stats.output_size_in_bytes) <= 1.15
    want = sq.evaluate_reference(sq.parse(text, spaces=spaces), spaces, x)
    _close(fused(x), want)
    grads = jax.grad(lambda t: fused({**x, "t{a,a;i,i}": t})["R2"].sum() ** 2)
    ref = jax.grad(
        lambda t: (
            sq.evaluate_reference_jax(
                sq.parse(text, spaces=spaces), spaces, {**x, "t{a,a;i,i}": t}
            )["R2"].sum()
            ** 2
        )
    )
    np.testing.assert_allclose(grads(x["t{a,a;i,i}"]), ref(x["t{a,a;i,i}"]), rtol=1e-10)


def test_planner_runs_the_sums_in_sequence_before_it_batches():
    spaces = sq.Spaces(i=6, a=16)
    forest = sq.build_forest(sq.parse(load_equations("ccsd_so")), spaces)
    forest = dataclasses.replace(forest, pair_symmetry=True)
    fused = required_bytes(schedule_forest(forest, BatchPlan()))
    seq = required_bytes(schedule_forest(forest, BatchPlan(sums="sequenced")))
    assert seq < fused
    plan = plan_for_budget(forest, (seq + fused) // 2)
    assert plan == BatchPlan(sums="sequenced")  # no loop, no extra FLOP


def test_bad_sums_option_is_refused():
    with pytest.raises(PlanError, match="sums must be 'fused' or 'sequenced', got 'lazy'"):
        BatchPlan(sums="lazy")
    with pytest.raises(PlanError, match="sums must be"):
        BatchPlan.of({"a": 2}, sums="lazy")


def test_prepared_and_one_device_mesh_programs_run_sequenced_sums():
    """The prologue split (integrals made ready once) and the mesh runner both see the
    sums' branches: the same results as the fused one-call program."""
    text, spaces = load_equations("ccsd_so"), CC["ccsd_so"]
    fused = sq.compile(text, spaces, pair_symmetry=True)
    x = symmetric_inputs(fused.schedule.annotated.forest, seed=11)
    want = fused(x)
    plan = BatchPlan.of({"a": {"batches": 2, "roles": "external"}}, sums="sequenced")
    seq = sq.compile(text, spaces, pair_symmetry=True, batch=plan, fixed_inputs=["f", "g"])
    fixed = {k: v for k, v in x.items() if k.startswith(("f", "g"))}
    prepared = seq.prepare(fixed)
    _close(prepared({k: v for k, v in x.items() if k not in fixed}), want)
    mesh = sq.compile(text, spaces, pair_symmetry=True, batch=plan, devices=jax.devices()[:1])
    _close(mesh(x), want)


def test_loops_inside_terms_are_listed_and_run():
    """``lowered.loops()`` reaches the loops a term's branch runs (the memory model
    reads every batched space's block size from them)."""
    text, spaces = load_equations("ccsd_so"), CC["ccsd_so"]
    plan = BatchPlan.of({"i": {"batches": 2, "roles": "contracted"}}, sums="sequenced")
    seq = sq.compile(text, spaces, pair_symmetry=True, batch=plan)
    top = [ins for ins in seq.lowered.body if isinstance(ins, Loop)]
    inside = [
        ins
        for acc in seq.lowered.body
        if isinstance(acc, Accumulate)
        for term in acc.terms
        for ins in term.body
        if isinstance(ins, Loop)
    ]
    assert inside and len(seq.lowered.loops()) >= len(top) + len(inside)
    assert {lp.loop[0] for lp in seq.lowered.loops()} == {"i"}
    fused = sq.compile(text, spaces, pair_symmetry=True)
    x = symmetric_inputs(fused.schedule.annotated.forest, seed=2)
    _close(seq(x), fused(x))


def test_a_loop_whose_loops_sit_in_a_sequenced_term_overlaps_its_last_batch():
    # peeling it would trace the whole nest twice; its last batch overlaps the one before
    text, spaces = load_equations("ccsd_cs"), sq.Spaces(i=3, a=5)  # a in blocks of 3, 2
    plan = BatchPlan.of({"a": 2}, external_modes="first", sums="sequenced")
    prog = sq.compile(text, spaces, batch=plan, pair_symmetry=True)
    inside_terms = [
        lp
        for lp in prog.lowered.loops()
        if lp.remainder and not any(isinstance(i, Loop) for i in lp.body) and lp.holds_loops
    ]
    assert inside_terms and not any(lp.peel for lp in inside_terms)
    assert any(isinstance(i, Accumulate) for lp in inside_terms for i in lp.body)
    base = sq.compile(text, spaces, pair_symmetry=True)
    forest = base.schedule.annotated.forest
    inputs = {
        k: jnp.asarray(v) for k, v in symmetric_random_inputs(forest, seed=5, scale=0.1).items()
    }
    got, want = prog(inputs), base(inputs)
    for name in want:
        np.testing.assert_allclose(
            np.asarray(got[name]), np.asarray(want[name]), rtol=1e-12, atol=1e-14
        )
