"""The lowered program's memory model (lower/memory.py) against XLA's memory_analysis()."""

from __future__ import annotations

import numpy as np
import pytest

import sq_jax as sq
from sq_jax.forest.factor import unfactored
from sq_jax.forest.inputs import input_specs
from sq_jax.lower.ir import Loop
from sq_jax.lower.memory import ALIGNMENT, LOOP_STATE, memory_model


def _xla_bytes(prog, seed=0):
    rng = np.random.default_rng(seed)
    forest = prog.schedule.annotated.forest
    inputs = {s.block_key: rng.standard_normal(s.shape) for s in input_specs(forest)}
    ma = prog.memory_analysis(inputs)
    return ma.temp_size_in_bytes + ma.output_size_in_bytes


def _blocks(prog):
    return {lp.loop[0]: lp.block for lp in prog.lowered.loops()}


def test_one_product_is_its_output():
    prog = sq.compile("R{a1;i1} = f{a1;a2} t{a2;i1}", sq.Spaces(i=50, a=400))
    assert prog.memory_bytes == 8 * 400 * 50 + ALIGNMENT
    assert _xla_bytes(prog) == 8 * 400 * 50


def test_a_batched_product_counts_slices_partials_and_stacked_pieces():
    spaces = sq.Spaces(i=50, a=400)
    prog = sq.compile("R{a1;i1} = f{a1;a2} t{a2;i1}", spaces, batch={"a": 2})
    block = 200
    slices = 8 * block * block + 8 * block * 50  # f and t cut to the batch on use
    partial, acc, stacked = 8 * block * 50, 8 * block * 50, 8 * 400 * 50
    want = slices + partial + acc + stacked + 5 * ALIGNMENT + 2 * LOOP_STATE
    assert prog.memory_bytes == want
    # XLA agrees up to its own loop bookkeeping
    assert 0 <= prog.memory_bytes - _xla_bytes(prog) <= 2 * LOOP_STATE + 5 * ALIGNMENT


def test_a_sum_chain_keeps_its_products_alive():
    # XLA fuses the adds of a sum into one loop: every product is alive at the end.
    terms = " + ".join(f"f{{a1;a{k}}} t{{a{k};i1}}" for k in range(2, 6))
    prog = sq.compile(f"R{{a1;i1}} = {terms}", sq.Spaces(i=50, a=400))
    # the four products share one value (CSE) but each term reads it: still 1 product
    assert prog.memory_bytes <= 2 * (8 * 400 * 50 + ALIGNMENT)
    distinct = " + ".join(f"f{{a1;a2}} {t}{{a2;i1}}" for t in "tuvw")
    with unfactored():  # factored, the four products are one: f (t + u + v + w)
        prog = sq.compile(f"R{{a1;i1}} = {distinct}", sq.Spaces(i=50, a=400))
    # 4 products; the sum writes over the first (same shape, dead after the add)
    assert prog.memory_bytes == 4 * (8 * 400 * 50 + ALIGNMENT)
    assert 0.95 <= prog.memory_bytes / _xla_bytes(prog) <= 1.05


def test_uneven_batches_cost_extra_only_when_uneven():
    spaces = sq.Spaces(i=6, a=16)
    prog = sq.compile(
        "R{a1;i1} = f{a1;a2} t{a2;i1}", spaces, batch={"a": {"batches": 4, "roles": "external"}}
    )
    model = memory_model(prog.lowered)
    even, uneven = model.peak({"a": 4}), model.peak({"a": 5})
    assert uneven > even  # block 5 of 16: one stacked piece too many, and a copy to cut it


@pytest.mark.parametrize("batches", [3, 4], ids=["uneven", "even"])
def test_contracted_loops_summed_into_one_result_within_15_percent(batches):
    # Three contracted loops whose sums feed one fused sum. With 3 batches of 40 the
    # last batch (12) runs after each loop, and its partial product lives until the
    # fused sum; the two loops that start from zeros of one shape share one array of
    # zeros. The model missed the partial products (0.69x XLA before they were charged).
    text = (
        "R{a1,a2;i1,i2} = g{a1,a2;i1,i2} + f{a1;a3} t{a3,a2;i1,i2}"
        " + t{a1,a3;i1,i2} f{a3;a2} + u{a1,a3;i1,i2} h{a3;a2}"
    )
    plan = {"a": {"batches": batches, "roles": "contracted"}}
    prog = sq.compile(text, sq.Spaces(i=10, a=40), batch=plan)
    assert [lp.peel for lp in prog.lowered.loops()] == [batches == 3] * 3
    ratio = prog.memory_bytes / _xla_bytes(prog)
    assert 0.85 <= ratio <= 1.15, ratio


@pytest.mark.parametrize(
    "plan",
    [None, {"a": 2}, {"i": 2}, {"a": {"batches": 3, "roles": "external"}}],
    ids=["unbatched", "a2", "i2", "a3-external"],
)
def test_ccsd_prediction_within_15_percent_of_xla(plan):
    from sq_jax.cc.equations import load_equations

    prog = sq.compile(sq.parse(load_equations("ccsd_so")), sq.Spaces(i=6, a=16), batch=plan)
    measured = _xla_bytes(prog)
    assert 0.85 <= prog.memory_bytes / measured <= 1.15, (prog.memory_bytes, measured)
    assert prog.memory_bytes == memory_model(prog.lowered).peak(_blocks(prog))
    # SeQuant's static peak profile counts each value once: far below what XLA holds
    assert prog.peak_bytes < prog.memory_bytes


@pytest.mark.parametrize("sums", ["fused", "sequenced"])
def test_whole_inputs_transposed_inside_a_loop_are_not_hoisted(sums):
    # XLA's loop-invariant code motion leaves a transpose of a whole input inside the
    # loop (made per batch, dying at its product); only cuts to an outer loop's batch
    # move out. Charging the transposes for the whole loop over-predicted these hoisted
    # external plans by 1.15-1.16x (spin-orbital CCSD at i=6, a=16).
    from sq_jax.cc.equations import load_equations

    plan = sq.BatchPlan.of(
        {"a": {"batches": 8, "roles": "external"}},
        external_modes="first",
        hoist="invariant",
        sums=sums,
    )
    prog = sq.compile(
        load_equations("ccsd_so"), sq.Spaces(i=6, a=16), pair_symmetry=True, batch=plan
    )
    # fused: the antisymmetrizer's chain of sums (one per Y, each after its loop; XLA
    # keeps that order) measured 0.91x, the model missing about half an o²v² buffer at
    # the chain; sequenced: 1.0x while the last loop stacked its Y whole (the binding
    # point), 0.86x since it adds Y into R2 (lower/adds.py: the model drops one o²v²
    # buffer there, XLA's figure only 0.3 of one; likely XLA's temporaries that used
    # R2's output allocation while R2 was made late, not proven)
    low = 0.90 if sums == "fused" else 0.85
    assert low <= prog.memory_bytes / _xla_bytes(prog) <= 1.06
    model = memory_model(prog.lowered)
    hoisted = {name for point in model.points for name, _ in point if "made before loop" in name}
    assert not any(name.startswith("transposed copy of") and "[" not in name for name in hoisted)


def test_a_value_carried_out_of_nested_loops_is_one_buffer():
    # Both spaces cut, a loop per result index: results are carried out of the loops of
    # the other space, nested four deep. XLA gives the carries and the value made inside
    # one buffer; charged once per loop, the model was 2.02x XLA's figure, now 1.18x.
    from sq_jax.cc.equations import load_equations

    prog = sq.compile(
        load_equations("ccsd_so"),
        sq.Spaces(i=6, a=16),
        pair_symmetry=True,
        batch=sq.BatchPlan.of({"a": 2, "i": 2}),
    )

    def name(v, lp):
        return f"v{v} (carried out of loop {lp.loop[0]}#{lp.loop[1]})"

    pairs = [  # (outer, inner) names of one value carried out of two nested loops
        (name(v, lp), name(v, sub))
        for lp in prog.lowered.loops()
        for sub in lp.body
        if isinstance(sub, Loop)
        for v, _ in sub.carries
        if v in {w for w, _ in lp.carries}
    ]
    assert pairs  # the premise
    for point in memory_model(prog.lowered).points:
        names = {n for n, _ in point}
        assert not any(outer in names and inner in names for outer, inner in pairs)
    assert 0.85 <= prog.memory_bytes / _xla_bytes(prog) <= 1.3


@pytest.mark.parametrize("batches", [2, 3])
def test_a_result_moved_into_place_is_an_output_beside_its_stacked_batches(batches):
    # Closed-shell CCSD with `i` in external batches around contracted `a` loops: R2's
    # batches are stacked along an axis that is not its first and moved into R2 after
    # the loop. XLA allocates R2 (an output) apart from its temporaries and counts it
    # whole, beside the stacked batches and the loop's own buffers. Charged only after
    # the loop, the model was 0.83x (3 batches) and 0.91x (2) XLA's figure here, and
    # 0.68x at benzene/cc-pVDZ sizes (o=21, v=93, `i` in 7 batches); now 1.00x, 1.02x.
    from sq_jax.cc.equations import load_equations

    plan = sq.BatchPlan.of(
        {
            "a": {"batches": 2, "roles": "contracted"},
            "i": {"batches": batches, "roles": "external"},
        },
        external_site="top",
        sums="sequenced",
    )
    prog = sq.compile(
        load_equations("ccsd_cs"), sq.Spaces(i=6, a=16), pair_symmetry=True, batch=plan
    )
    r2 = {r.name: r.read.value_id for r in prog.lowered.results}["R2"]
    moved = [  # the premise: R2 scattered along another axis than its first
        p for lp in prog.lowered.body if isinstance(lp, Loop) for v, p, _ in lp.scatters if v == r2
    ]
    assert moved and all(p != 0 for p in moved)
    model = memory_model(prog.lowered)
    assert any(f"v{r2} (output buffer" in name for name, _ in model.items_at(model.binding()))
    assert 0.95 <= prog.memory_bytes / _xla_bytes(prog) <= 1.1


def test_batches_stacked_into_an_enclosing_loops_carry_along_any_axis_are_one_buffer():
    # One external loop per space, both spaces cut: a value carried out of an outer `a`
    # loop is stacked by a nested loop along its second axis. XLA writes those batches
    # into the outer loop's carried buffer in place, along any axis; charged as a
    # buffer of their own when not along the first axis, the model was 1.31x XLA's
    # figure here (1.40x at i = 10), now 1.11x.
    from sq_jax.cc.equations import load_equations

    plan = sq.BatchPlan.of({"a": 2, "i": 2}, external_modes="first")
    prog = sq.compile(
        load_equations("ccsd_so"), sq.Spaces(i=6, a=16), pair_symmetry=True, batch=plan
    )
    pairs = [  # (carried by the outer loop, stacked by the inner one) for one value
        (
            f"v{v} (carried out of loop {lp.loop[0]}#{lp.loop[1]})",
            f"v{v} (stacked batches of loop {sub.loop[0]}#{sub.loop[1]})",
        )
        for lp in prog.lowered.loops()
        for sub in lp.body
        if isinstance(sub, Loop)
        for v, p, _ in sub.scatters
        if p != 0 and v in {w for w, _ in lp.carries}
    ]
    assert pairs  # the premise
    model = memory_model(prog.lowered)
    for point in range(len(model.points)):
        names = {n for n, _ in model.items_at(point)}  # at the plan's block sizes
        assert not any(outer in names and inner in names for outer, inner in pairs)
    assert 0.9 <= prog.memory_bytes / _xla_bytes(prog) <= 1.2


def test_loops_written_after_the_largest_loop_run_after_it():
    # Closed-shell DF-CCSD with `a` in contracted batches: XLA's scheduler ran the loops
    # written after the ladder's loop (which makes the largest values) before it, so
    # all of R2's terms waited through the ladder: XLA needed 8.58 MiB here, 0.65 of
    # the model's walk in the written order. Those loops now start from a zero made
    # from the ladder's result (`loop_done`): XLA needs 6.06 MiB, 0.92 of the model.
    from sq_jax.cc.equations import load_equations
    from sq_jax.lower.execute import largest_loop

    plan = {"a": {"batches": 4, "roles": "contracted"}}
    spaces = sq.Spaces({"Κ": 60}, i=6, a=40)
    prog = sq.compile(load_equations("ccsd_cs_df"), spaces, pair_symmetry=True, batch=plan)
    body = prog.lowered.body
    largest = largest_loop(body)
    assert any(isinstance(ins, Loop) for ins in body[largest + 1 :])  # the premise
    assert 0.85 <= prog.memory_bytes / _xla_bytes(prog) <= 1.15
