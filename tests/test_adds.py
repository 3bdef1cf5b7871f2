"""Loop adds (sq_jax.lower.adds): a permuted sum built inside the loop that makes its pieces.

Every check compares against the unbatched program (an independent lowering: no loops,
no adds) or against the same schedule lowered with the pieces stacked whole.
"""

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sq_jax as sq
from sq_jax.cc.equations import load_equations
from sq_jax.lower.accumulate import produced, starts_sum
from sq_jax.lower.adds import fold_adds
from sq_jax.lower.instructions import lower_schedule
from sq_jax.lower.ir import Accumulate, Contract, LoweredProgram, Read, Result, Term, walk
from sq_jax.lower.memory import memory_model
from sq_jax.lower.program import make_program
from sq_jax.plan import BatchPlan
from tests.helpers.symmetric import symmetric_inputs

# external `a` loops at the reads of R2's permuted values (one loop per space), with a
# contracted `i` loop inside: the loops of the budget planner's 1/8 plan for benzene
NESTED = {"a": {"batches": 3, "roles": "both"}, "i": {"batches": 2, "roles": "contracted"}}
PLANS = {
    "nested": BatchPlan.of(NESTED, external_modes="first", sums="sequenced"),
    "plain": BatchPlan.of(
        {"a": {"batches": 3, "roles": "external"}}, external_modes="first", sums="sequenced"
    ),
    "terms": BatchPlan.of(
        {"a": {"batches": 2, "roles": "external"}},
        external_modes="first",
        sums="sequenced",
        external_site="term",
    ),
}


def _adds(prog_or_lowered) -> int:
    lowered = getattr(prog_or_lowered, "lowered", prog_or_lowered)
    return sum(len(lp.adds) for lp in lowered.loops())


def _close(got: dict, want: dict, rtol: float = 1e-12) -> None:
    assert set(got) == set(want)
    for key, ref in want.items():
        scale = float(np.max(np.abs(np.asarray(ref)))) or 1.0
        err = float(np.max(np.abs(np.asarray(got[key]) - np.asarray(ref))))
        assert err <= rtol * scale, (key, err, scale)


@pytest.mark.parametrize("plan", sorted(PLANS))
@pytest.mark.parametrize("name", ["ccsd_cs", "ccsd_so", "ccd_so"])
def test_folded_programs_equal_the_unbatched_one(name, plan):
    # a = 7 in 3 batches: blocks of 3 and a last one of 1, run peeled (a loop without
    # loops inside) or overlapping the one before (a loop holding loops)
    text, spaces = load_equations(name), sq.Spaces(i=3, a=7)
    base = sq.compile(text, spaces, pair_symmetry=True)
    prog = sq.compile(text, spaces, pair_symmetry=True, batch=PLANS[plan])
    assert _adds(prog) >= 1
    assert _adds(lower_schedule(prog.schedule, adds=False)) == 0
    x = symmetric_inputs(base.schedule.annotated.forest, seed=3)
    _close(prog(x), base(x))


def test_both_uneven_last_batches_are_added_once():
    text, spaces = load_equations("ccsd_cs"), sq.Spaces(i=3, a=7)
    peeled = sq.compile(text, spaces, pair_symmetry=True, batch=PLANS["plain"])
    overlapping = sq.compile(text, spaces, pair_symmetry=True, batch=PLANS["nested"])
    assert any(lp.adds and lp.peel for lp in peeled.lowered.loops())
    assert any(lp.adds and lp.remainder and not lp.peel for lp in overlapping.lowered.loops())
    base = sq.compile(text, spaces, pair_symmetry=True)
    x = symmetric_inputs(base.schedule.annotated.forest, seed=4)
    _close(peeled(x), base(x))
    _close(overlapping(x), base(x))


def test_a_stacked_value_becomes_a_piece_and_the_sum_a_loop_output():
    text, spaces = load_equations("ccsd_cs"), sq.Spaces(i=3, a=7)
    prog = sq.compile(text, spaces, pair_symmetry=True, batch=PLANS["nested"])
    stacked = lower_schedule(prog.schedule, adds=False)
    assert fold_adds(stacked) == prog.lowered
    adds = [(lp, add) for lp in prog.lowered.loops() for add in lp.adds]
    # Y + P(Y) in Y's loop, then each term that stacked a value in a loop of its own
    assert [len(add.parts) for _, add in adds] == [2, 1, 1]
    for lp, add in adds:
        assert add.piece not in {v for v, _, _ in lp.scatters}  # no longer stacked
        assert any(add.piece in produced(ins) for ins in lp.body)  # made per batch
    # the chain: each loop's sum starts from the one before, the last is R2's value
    assert adds[0][1].start is None
    assert [add.start for _, add in adds[1:]] == [add.value_id for _, add in adds[:-1]]
    r2 = next(r for r in prog.lowered.results if r.name == "R2")
    assert adds[-1][1].value_id == r2.read.value_id
    assert not any(
        isinstance(ins, Accumulate) and ins.value_id == r2.read.value_id
        for ins in prog.lowered.body
    )


def test_derivatives_equal_the_unbatched_ones():
    # spin-orbital CCD: R2's two permuted sums, each added in by its loop (the closed-shell
    # CCSD gradient of this plan takes 100 s to compile)
    text, spaces = load_equations("ccd_so"), sq.Spaces(i=2, a=5)
    base = sq.compile(text, spaces, pair_symmetry=True)
    prog = sq.compile(text, spaces, pair_symmetry=True, batch=PLANS["nested"])
    assert _adds(prog) == 2
    x = {k: jnp.asarray(v) for k, v in symmetric_inputs(base.schedule.annotated.forest, 5).items()}
    t2 = "t{a,a;i,i}"
    direction = jnp.cos(jnp.arange(x[t2].size, dtype=jnp.float64)).reshape(x[t2].shape)
    direction = direction + direction.transpose(1, 0, 3, 2)  # keep t2's pair symmetry

    def loss(p):
        def f(t):
            out = p({**x, t2: t})
            return jnp.sum(jnp.sin(out["R2"])) + out["E"] ** 2

        return f

    _, want = jax.jvp(loss(base), (x[t2],), (direction,))
    _, got = jax.jvp(loss(prog), (x[t2],), (direction,))
    np.testing.assert_allclose(got, want, rtol=1e-11)
    g_want = jax.grad(loss(base))(x[t2])
    g_got = jax.grad(loss(prog))(x[t2])
    np.testing.assert_allclose(g_got, g_want, rtol=1e-11, atol=1e-13)


def test_remat_runs_the_stacked_lowering():
    # remat's backward pass (lower/reverse.py) differentiates loops that stack
    text, spaces = load_equations("ccd_so"), sq.Spaces(i=2, a=5)
    plan = BatchPlan.of(
        {"a": {"batches": 2, "roles": "external"}}, external_modes="first", sums="sequenced"
    )
    prog = sq.compile(text, spaces, batch=plan)
    remat = sq.compile(text, spaces, batch=plan, remat=True)
    assert _adds(prog) >= 1 and _adds(remat) == 0
    x = {k: jnp.asarray(v) for k, v in symmetric_inputs(prog.schedule.annotated.forest, 6).items()}

    def loss(p):
        return lambda t: jnp.sum(p({**x, "t{a,a;i,i}": t})["R2"] ** 2)

    g_remat = jax.grad(loss(remat))(x["t{a,a;i,i}"])
    np.testing.assert_allclose(g_remat, jax.grad(loss(prog))(x["t{a,a;i,i}"]), rtol=1e-12)


def test_a_chain_part_starts_the_next_sum():
    # a sequenced sum whose first term reads a previous part of a chain as is starts
    # from it (its buffer) instead of zeros: the model lets the part die there
    dims = ((300, None),)

    def product(v, key):
        return Contract(v, "ab,b->a", (Read(0, key), Read(0, "t")), dims)

    part, second, third = product(1, "f"), product(2, "g"), product(3, "h")
    terms = (
        Term((), Read(1), (0,), 1.0),
        Term((second,), Read(2), (0,), 1.0),
        Term((third,), Read(3), (0,), -1.0),
    )
    acc = Accumulate(4, terms, dims)
    assert starts_sum(terms[0]) and not starts_sum(terms[2])
    lowered = LoweredProgram((part, acc), (Result("R", Read(4), (0,), 1.0),), ("f", "g", "h", "t"))
    model = memory_model(lowered)
    inside = [k for k, point in enumerate(model.points) if "v4 (sequenced sum)" in dict(point)]
    assert len(inside) == 3  # the first term, then each product
    assert not any("v1" in dict(model.points[k]) for k in inside)
    zeros = replace(acc, terms=(Term((), Read(1), (0,), 2.0), *terms[1:]))  # not as is
    model = memory_model(replace(lowered, body=(part, zeros)))
    assert all("v1" in dict(point) for point in model.points if "v4 (sequenced sum)" in dict(point))


def test_a_sum_started_from_its_first_term_equals_the_unbatched_program():
    # loops at R2's top: a sequenced sum inside them starts from a previous part
    text, spaces = load_equations("ccsd_so"), sq.Spaces(i=3, a=7)
    plan = BatchPlan.of(
        {"a": {"batches": 3, "roles": "external"}},
        external_site="top",
        external_modes="first",
        sums="sequenced",
    )
    prog = sq.compile(text, spaces, pair_symmetry=True, batch=plan)
    assert any(
        isinstance(i, Accumulate) and starts_sum(i.terms[0]) and any(t.body for t in i.terms)
        for i in walk(prog.lowered.body)
    )
    base = sq.compile(text, spaces, pair_symmetry=True)
    x = symmetric_inputs(base.schedule.annotated.forest, seed=9)
    _close(prog(x), base(x))


def test_folding_lowers_xla_memory_and_is_predicted():
    """XLA's temporaries + outputs, closed-shell CCSD at o=10, v=40, `a` in 4 batches."""
    text, spaces = load_equations("ccsd_cs"), sq.Spaces(i=10, a=40)
    plan = BatchPlan.of(
        {"a": {"batches": 4, "roles": "both"}, "i": {"batches": 3, "roles": "contracted"}},
        external_modes="first",
        sums="sequenced",
    )
    prog = sq.compile(text, spaces, pair_symmetry=True, batch=plan)
    stacked = make_program(prog.schedule, lower_schedule(prog.schedule, adds=False))
    assert _adds(prog) == 3 and _adds(stacked) == 0
    x = symmetric_inputs(prog.schedule.annotated.forest, seed=2)
    xla = {}
    for name, p in (("folded", prog), ("stacked", stacked)):
        stats = p.memory_analysis(x)
        xla[name] = stats.temp_size_in_bytes + stats.output_size_in_bytes
    # measured: 3.45 MiB against 4.98 (R2's Y and a second permuted value stacked whole)
    assert xla["folded"] < 0.8 * xla["stacked"]
    predicted = memory_model(prog.lowered).peak()
    assert 0.9 * xla["folded"] <= predicted <= 1.1 * xla["folded"]  # measured 0.996


@pytest.mark.parametrize("sums", ["sequenced", "fused"])
def test_a_terms_own_instructions_run_before_its_loop_when_sums_are_sequenced(sums):
    # closed-shell CCSD, `a` external alone: two terms of R2's sum make a value, then run
    # the loop that stacks theirs; with sequenced sums those instructions and the loop
    # leave the sum (the loop adds into it), with fused sums the terms stay (4096
    # elements in R2: with fused sums only such a permuted sum is sequenced)
    text, spaces = load_equations("ccsd_cs"), sq.Spaces(i=4, a=16)
    plan = BatchPlan.of(
        {"a": {"batches": 3, "roles": "external"}}, external_modes="first", sums=sums
    )
    prog = sq.compile(text, spaces, pair_symmetry=True, batch=plan)
    stacked = lower_schedule(prog.schedule, adds=False)
    r2 = next(r.read.value_id for r in stacked.results if r.name == "R2")
    (chain,) = [i for i in stacked.body if isinstance(i, Accumulate) and i.value_id == r2]
    with_own = [t for t in chain.terms if len(t.body) > 1]
    assert len(with_own) == 2  # each: a value of its own, then the loop stacking its read
    lifted = [
        ins
        for ins in prog.lowered.body
        if any(add.piece in {t.read.value_id for t in with_own} for add in getattr(ins, "adds", ()))
    ]
    assert len(lifted) == (2 if sums == "sequenced" else 0)
    for lp in lifted:  # its term's other instructions run just before it
        k = prog.lowered.body.index(lp)
        term = next(t for t in with_own if t.read.value_id == lp.adds[0].piece)
        assert prog.lowered.body[k - len(term.body) + 1 : k] == term.body[:-1]
    base = sq.compile(text, spaces, pair_symmetry=True)
    x = symmetric_inputs(base.schedule.annotated.forest, seed=8)
    _close(prog(x), base(x))
