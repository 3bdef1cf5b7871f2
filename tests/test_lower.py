"""Lowering: the jitted program equals the oracles under many batch plans.

* every case of ``tests/corpus.py`` unbatched, against its hand-written NumPy oracle;
* the whole corpus as one system under a sweep of plans (each space external /
  contracted, counts that divide and that do not, one loop, nested loops, term sites);
* the scheduler's text cases (``tests/schedule_corpus.py``) with their own plans;
* structure (one loop per scope block, trip counts), no retrace, input errors.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import sq_jax as sq
from sq_jax._pipeline import compile
from sq_jax.forest.inputs import input_specs
from sq_jax.forest.reference import evaluate_forest
from sq_jax.lower.ir import Loop, walk
from sq_jax.plan import BatchPlan
from tests.helpers.close import assert_rel_close as close
from tests.helpers.corpus import (
    CASES,
    COMBINED,
    COMBINED_NAMES,
    SPACES,
    inputs_for,
    make_inputs,
)
from tests.helpers.schedule_corpus import SPACES as SCHED_SPACES
from tests.helpers.schedule_corpus import TEXT_CASES, random_blocks

RTOL = 1e-12


def assert_rel_close(got, want, rtol=RTOL, name=""):
    close(got, want, rtol, name)


# -- the corpus, one case at a time, unbatched ---------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_unbatched_program_matches_handwritten_oracle(case):
    x = inputs_for(case, make_inputs(seed=3))
    prog = compile(case.text, SPACES)
    got = prog(x)
    want = case.oracle(make_inputs(seed=3))
    assert set(got) == set(want)
    for name in want:
        assert_rel_close(got[name], want[name], name=name)


# -- the whole corpus as one system, under a sweep of plans -------------------------------


# NO=3, NV=4, NK=5: blocks of 2 or 3 leave remainders; batches=2 on `a` divides.
PLANS = {
    "i_external_rem": {"i": {"block": 2, "roles": "external"}},
    "i_contracted_rem": {"i": {"block": 2, "roles": "contracted"}},
    "a_both_divides": {"a": 2},
    "K_contracted_rem": {"Κ": {"block": 2, "roles": "contracted"}},
    "i_ext_a_con_nested": {
        "i": {"block": 2, "roles": "external"},
        "a": {"block": 3, "roles": "contracted"},
    },
    "all_spaces_both": {"i": 2, "a": {"block": 3}, "Κ": {"block": 2}},
}


@pytest.fixture(scope="module")
def combined_inputs():
    forest = sq.build_forest(sq.parse(COMBINED, spaces=SPACES), SPACES)
    x = make_inputs(seed=5)
    wanted = {s.block_key if s.block_key in x else s.label for s in input_specs(forest)}
    return forest, {k: v for k, v in x.items() if k in wanted}


# term sites only change where external loops open: one nested plan is enough
SWEEP = [(p, "root") for p in PLANS] + [("i_ext_a_con_nested", "term")]


@pytest.mark.parametrize(("plan", "site"), SWEEP, ids=[f"{p}-{s}" for p, s in SWEEP])
def test_corpus_under_plans_matches_reference(plan, site, combined_inputs):
    forest, x = combined_inputs
    prog = compile(COMBINED, SPACES, batch=BatchPlan.of(PLANS[plan], external_site=site))
    assert prog.lowered.loops() or not PLANS[plan]
    got = prog(x)
    want = sq.evaluate_reference(forest, None, x)
    oracle = {}
    for case in CASES:
        oracle[case.name] = case.oracle(make_inputs(seed=5))
    for name, ref in want.items():
        assert_rel_close(got[name], ref, name=name)
        case_name, original = COMBINED_NAMES[name]
        assert_rel_close(got[name], oracle[case_name][original], name=name)


# -- the scheduler's text cases ------------------------------------------------------------


@pytest.mark.parametrize("name", list(TEXT_CASES))
def test_schedule_text_cases_match_reference(name):
    text, plan = TEXT_CASES[name]
    forest = sq.build_forest(sq.parse(text), SCHED_SPACES)
    blocks = random_blocks(forest, seed=11)
    prog = compile(text, SCHED_SPACES, batch=plan)
    got = prog(blocks)
    for key, ref in evaluate_forest(forest, blocks).items():
        assert_rel_close(got[key], ref, name=key)


def test_mode_order_changes_nesting_not_results():
    text, plan = TEXT_CASES["two_space"]
    forest = sq.build_forest(sq.parse(text), SCHED_SPACES)
    blocks = random_blocks(forest, seed=12)
    want = evaluate_forest(forest, blocks)
    for order in ((), ("a", "i"), ("i", "a")):
        got = compile(text, SCHED_SPACES, batch=plan, mode_order=order)(blocks)
        assert_rel_close(got["R"], want["R"], name=str(order))


# -- structure: the printed schedule and the traced program agree -------------------------


def _jaxpr_loops(jaxpr) -> list[tuple[str, int]]:
    """(primitive, trip count) of every scan/while in a closed jaxpr, recursively."""
    out = []
    stack = [jaxpr.jaxpr]
    while stack:
        jx = stack.pop()
        for eqn in jx.eqns:
            if eqn.primitive.name == "scan":
                out.append(("scan", eqn.params["length"]))
            elif eqn.primitive.name == "while":
                out.append(("while", -1))
            for param in eqn.params.values():
                for item in param if isinstance(param, (tuple, list)) else (param,):
                    inner = getattr(item, "jaxpr", None)
                    if inner is not None:
                        stack.append(inner if hasattr(inner, "eqns") else inner.jaxpr)
    return out


def _schedule_blocks(prog) -> list:
    return [b for b, anc in prog.schedule.ordered.walk() if not b.is_root]


@pytest.mark.parametrize("name", ["doubles_occ", "two_space", "df_inside_occ", "multi_root"])
def test_one_traced_loop_per_scope_block(name):
    text, plan = TEXT_CASES[name]
    forest = sq.build_forest(sq.parse(text), SCHED_SPACES)
    prog = compile(text, SCHED_SPACES, batch=plan)
    loops = _jaxpr_loops(prog.make_jaxpr(random_blocks(forest)))
    blocks = _schedule_blocks(prog)
    assert len(loops) == len(blocks) == len(prog.lowered.loops())
    assert all(kind == "scan" for kind, _ in loops)  # fori_loop with static bounds = scan
    want = sorted(lp.full_batches if lp.peel else lp.num_batches for lp in prog.lowered.loops())
    assert sorted(n for _, n in loops) == want
    ann = prog.schedule.annotated
    assert sorted(ann.num_batches(b.axis) for b in blocks) == sorted(
        lp.num_batches for lp in prog.lowered.loops()
    )


def test_scatter_blocks_use_scan_outputs_and_sum_blocks_carry():
    text = "R{a1;i1} = B{a1,i1;;K1} B{i2,a2;;K1} t{a2;i2}"
    prog = compile(
        text,
        SCHED_SPACES,
        batch={
            "i": {"batches": 2, "roles": "external"},
            "Κ": {"batches": 3, "roles": "contracted"},
        },
    )
    (outer,) = [lp for lp in prog.lowered.body if isinstance(lp, Loop)]
    assert outer.scatters and not outer.sums and outer.kind.value == "External"
    (inner,) = [lp for lp in outer.body if isinstance(lp, Loop)]
    assert inner.sums and not inner.scatters and inner.kind.value == "Contracted"
    assert "dynamic_update_slice" not in str(
        prog.make_jaxpr(random_blocks(sq.build_forest(sq.parse(text), SCHED_SPACES)))
    )


def test_remainder_is_exact_without_padding_inputs():
    # extent 7 in blocks of 3: two full batches, a last batch of 1
    text = "R{a1;i1} = f{a1;a2} t{a2;i1}"
    forest = sq.build_forest(sq.parse(text), SCHED_SPACES)
    blocks = random_blocks(forest, seed=2)
    prog = compile(text, SCHED_SPACES, batch={"a": {"block": 3, "roles": "contracted"}})
    (lp,) = prog.lowered.loops()
    assert (lp.full_batches, lp.remainder, lp.peel) == (2, 1, True)
    assert_rel_close(prog(blocks)["R"], evaluate_forest(forest, blocks)["R"])
    jaxpr = str(prog.make_jaxpr(blocks))
    assert " pad" not in jaxpr


def test_overlapping_last_batch_in_nested_loops():
    # outer loops hold loops, so their last batch overlaps instead of a second trace
    text = "R{a1;i1} = g{a1,a2;a3,i2} t{a3;i2} t{a2;i1}"
    forest = sq.build_forest(sq.parse(text), SCHED_SPACES)
    blocks = random_blocks(forest, seed=4)
    plan = {"i": {"block": 3, "roles": "external"}, "a": {"block": 3, "roles": "contracted"}}
    prog = compile(text, SCHED_SPACES, batch=plan)
    peel = [lp.peel for lp in prog.lowered.loops()]
    assert peel == [False, False, True]
    assert_rel_close(prog(blocks)["R"], evaluate_forest(forest, blocks)["R"])


# -- jit: one trace per shape; call-time errors --------------------------------------------


def test_no_retrace_for_same_shapes():
    text = "E = f{i1;a1} t{a1;i1} + g{i1,i2;a1,a2} t{a1;i1} t{a2;i2}"
    prog = compile(text, SPACES, batch={"a": {"block": 3}})
    x1 = {"f": make_inputs(1)["f"], "g": make_inputs(1)["g"], "t{a;i}": make_inputs(1)["t{a;i}"]}
    x2 = {"f": make_inputs(2)["f"], "g": make_inputs(2)["g"], "t{a;i}": make_inputs(2)["t{a;i}"]}
    e1, e2 = prog(x1)["E"], prog(x2)["E"]
    assert float(e1) != float(e2)
    assert len(prog.aot._executables) == 1  # one ahead-of-time executable
    prog({k: np.asarray(v) * 2 for k, v in x1.items()})
    assert len(prog.aot._executables) == 1


def test_input_errors_name_the_leaf_and_shape():
    prog = compile("R{a1;i1} = f{a1;a2} t{a2;i1}", SPACES, batch={"a": 2})
    good = {"f": np.ones((7, 7)), "t{a;i}": np.ones((4, 3))}
    with pytest.raises(sq.InputError, match=r"t\{a;i\}.*\(4, 3\)"):
        prog({"f": good["f"]})
    with pytest.raises(sq.InputError, match=r"\(4, 3\)"):
        prog({"f": good["f"], "t{a;i}": np.ones((3, 3))})
    with pytest.raises(sq.InputError, match="not read by any leaf"):
        prog(good | {"h": np.ones(2)})
    with pytest.raises(sq.InputError, match="not an array"):
        prog({"f": good["f"], "t{a;i}": "oops"})
    with pytest.raises(sq.InputError, match="mapping"):
        prog([good["f"]])


def test_compile_accepts_equations_and_plans():
    eqs = sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1}")
    x = {"f": np.eye(7), "t{a;i}": np.arange(12.0).reshape(4, 3)}
    for batch in (None, {"a": 2}, BatchPlan.of({"a": {"block": 3}})):
        out = compile(eqs, SPACES, batch=batch)(x)["R"]
        assert_rel_close(out, x["t{a;i}"])
    with pytest.raises(sq.PlanError):
        compile(eqs, SPACES, batch={"q": 2})


def test_static_figures_and_memory_analysis():
    text = "R{a1;i1} = f{a1;a2} t{a2;i1}"
    unbatched = compile(text, SPACES)
    batched = compile(text, SPACES, batch={"a": 2})
    assert unbatched.flops == batched.flops == 2 * 4 * 4 * 3
    assert batched.peak_bytes <= unbatched.peak_bytes
    x = {"f": np.eye(7), "t{a;i}": np.ones((4, 3))}
    mem = batched.memory_analysis(x)
    assert mem.output_size_in_bytes == 4 * 3 * 8
    assert "loop a#0" in str(batched.schedule)


def test_xla_operations_are_named_after_the_values_they_make():
    # profiles and XLA dumps attribute each operation to `v<id>` of `prog.lowered`:
    # the product in the loop and the sum after it carry their own ids, nothing else's
    text = "R{a1;i1} = f{a1;a2} t{a2;i1} + g{a1;i1}"
    prog = compile(text, sq.Spaces(i=3, a=4), batch={"a": 2})
    ids = {ins.value_id for ins in walk(prog.lowered.body) if hasattr(ins, "value_id")}
    blocks = {s.block_key: np.zeros(s.shape) for s in input_specs(prog.schedule.annotated.forest)}
    names = re.findall(r'op_name="([^"]*)"', prog.jitted.lower(blocks).compile().as_text())
    named = {int(v) for name in names for v in re.findall(r"/v(\d+)/", name)}
    assert named == ids
    products = [name for name in names if name.endswith("dot_general")]
    assert products and all(re.search(r"/v\d+/", name) for name in products)
    # and each loop its own scope, `loop_<space><slot>`: what runs inside it, its adds too
    loops = {lp.loop for lp in walk(prog.lowered.body) if isinstance(lp, Loop)}
    scopes = {m for name in names for m in re.findall(r"/loop_([a-z]+\d+)/", name)}
    assert scopes == {f"{space}{slot}" for space, slot in loops}
