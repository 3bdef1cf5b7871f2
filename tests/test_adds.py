"""Loop adds (sq_jax.lower.adds): a permuted sum built inside the loop that makes its pieces.

Every check compares against the unbatched program (an independent lowering: no loops,
no adds) or against the same schedule lowered with the pieces stacked whole.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sq_jax as sq
from sq_jax.cc.equations import load_equations
from sq_jax.lower.accumulate import produced, starts_sum
from sq_jax.lower.adds import fold_adds
from sq_jax.lower.instructions import lower_schedule
from sq_jax.lower.ir import Accumulate
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
    # the sum after a folded loop starts from the loop's sum (its buffer) instead of
    # zeros: the model lets the part die there
    text, spaces = load_equations("ccsd_cs"), sq.Spaces(i=3, a=7)
    prog = sq.compile(text, spaces, pair_symmetry=True, batch=PLANS["plain"])
    sums = {add.value_id for lp in prog.lowered.loops() for add in lp.adds}
    (acc,) = [
        i
        for i in prog.lowered.body
        if isinstance(i, Accumulate) and starts_sum(i.terms[0]) and i.terms[0].read.value_id in sums
    ]
    assert any(t.body for t in acc.terms[1:])  # a sum with instructions of its own
    model = memory_model(prog.lowered)
    names = [{name for name, _ in point} for point in model.points]
    part = f"v{acc.terms[0].read.value_id} "
    alive = [k for k, point in enumerate(names) if any(n.startswith(part) for n in point)]
    inside = [k for k, label in enumerate(model.labels) if f"{acc.value_id} +=" in label]
    assert inside and not set(alive) & set(inside)  # the part died into the sum


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
