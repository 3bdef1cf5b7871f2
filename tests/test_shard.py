"""Sharding: the outermost batch loop split over a 1-D device mesh changes no result.

The main test process has initialised JAX with one CPU device, so the multi-device checks
run in ONE subprocess with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
(this file run as a script). It compiles every program once without a mesh and once on
4 and on 3 devices (outermost batch counts 2, 4, 5 and 6: divisible, not divisible,
fewer batches than devices, an overlapping remainder batch; cases that run the same
program share it) and prints a JSON summary that the tests below parse:

* the whole corpus (``tests/corpus.py``) as one system, against the single-device program;
* a spin-orbital CCSD residual (i=4, a=6, random inputs), given as blocks (split ones
  held split over the devices) and as full tensors (replicated);
* ``jax.grad`` of a scalar of the sharded program against the single-device gradient,
  with respect to every input (split and replicated): nested loops, Sum and Scatter
  escapes, a remainder, ``remat``; and the same for a batched CCSD residual; the values
  the differentiated sharded program returns equal the single-device ones too;
* per-device memory: the static figure, and XLA's argument bytes, which must equal the
  replicated inputs plus ``1/D`` of each zero-padded split block, exactly.

In-process tests cover the 1-device mesh, which blocks are split (a block read only by
the nested loop included, against an einsum oracle), and argument errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sq_jax as sq
from sq_jax import PlanError

RTOL = 1e-12
DEVICES = (4, 3)


def _max_rel(got: dict, want: dict) -> float:
    """max over outputs of max|got - want| / max(1, max|want|)."""
    worst = 0.0
    for name, ref in want.items():
        ref, val = np.asarray(ref), np.asarray(got[name])
        if ref.shape != val.shape:
            return float("inf")
        scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
        err = float(np.max(np.abs(val - ref))) if ref.size else 0.0
        worst = max(worst, err / scale)
    return worst


# -- the subprocess ------------------------------------------------------------------------


def _child() -> dict:
    """All multi-device checks; run with 4 forced host devices."""
    import time

    from sq_jax.cc.equations import load_equations
    from sq_jax.forest.inputs import bind_inputs
    from sq_jax.lower.shard import xla_bytes_per_device
    from tests.helpers.corpus import COMBINED, SPACES
    from tests.helpers.schedule_corpus import random_blocks

    devices = jax.devices()
    out: dict = {"device_count": len(devices), "forward": [], "grad": [], "memory": []}
    cpu: dict[str, float] = {}
    out["cpu_seconds"] = cpu
    progs: dict = {}

    def lap(name: str) -> None:
        cpu[name] = round(time.process_time() - sum(cpu.values()), 1)

    compiled: dict = {}

    def compile_once(text: str, spaces: sq.Spaces, plan: dict, d: int | None, **kw) -> sq.Program:
        """One program per (equations, spaces, plan, devices, options): cases share them."""
        key = (text, str(spaces), json.dumps(plan, sort_keys=True), d, tuple(sorted(kw.items())))
        if key not in compiled:
            on = {} if d is None else {"devices": devices[:d]}
            compiled[key] = sq.compile(text, spaces, batch=plan, **on, **kw)
        return compiled[key]

    def compare(tag: str, text: str, spaces: sq.Spaces, plan: dict, x: dict, want=None) -> dict:
        """The program on 4 and on 3 devices against the single-device values ``want``
        (default: the single-device program run on ``x``); returns ``want``."""
        ref_prog = compile_once(text, spaces, plan, None)
        if want is None:
            want = ref_prog(x)
        progs[tag, 1] = ref_prog
        for d in DEVICES:
            prog = progs[tag, d] = compile_once(text, spaces, plan, d)
            roots = [lp.num_batches for lp in prog.lowered.body if hasattr(lp, "body")]
            out["forward"].append(
                {
                    "case": tag,
                    "devices": d,
                    "batches": sorted(set(roots)),
                    "err": _max_rel(prog(x), want),
                }
            )
        return want

    # the corpus as one system: 4 batches (all roles), 5 (contracted Κ), 2 with remainder
    forest = sq.build_forest(sq.parse(COMBINED, spaces=SPACES), SPACES)
    x = random_blocks(forest, seed=5)
    compare("corpus a:4", COMBINED, SPACES, {"a": {"block": 1}}, x)
    compare("corpus K:5", COMBINED, SPACES, {"Κ": {"block": 1, "roles": "contracted"}}, x)
    lap("corpus")

    # a CCSD residual: 6 batches of the outermost virtual loop, R1 and R2 scattered
    text = load_equations("ccsd_so")
    spaces = sq.Spaces(i=4, a=6)
    rng = np.random.default_rng(7)
    n = 10
    cc = {
        "f": rng.standard_normal((n, n)),
        "g": rng.standard_normal((n, n, n, n)),
        "t{a;i}": 0.1 * rng.standard_normal((6, 4)),
        "t{a,a;i,i}": 0.1 * rng.standard_normal((6, 6, 4, 4)),
    }
    cc_plan = {"a": {"block": 1, "roles": "external"}}
    cc_forest = sq.build_forest(sq.parse(text, spaces=spaces), spaces)
    cc_blocks = {k: np.asarray(v) for k, v in bind_inputs(cc_forest, cc).items()}
    ccsd_values = compare("ccsd a:6", text, spaces, cc_plan, cc_blocks)
    # full tensors bind to the same blocks: the single-device values above are the reference
    compare("ccsd a:6 full tensors", text, spaces, cc_plan, cc, want=ccsd_values)
    # 3 batches of 3 over a=7 (a remainder; on 4 devices one idles), i=3: 10 orbitals
    cc7_spaces = sq.Spaces(i=3, a=7)
    cc7 = {
        "f": cc["f"],
        "g": cc["g"],
        "t{a;i}": 0.1 * rng.standard_normal((7, 3)),
        "t{a,a;i,i}": 0.1 * rng.standard_normal((7, 7, 3, 3)),
    }
    cc7_forest = sq.build_forest(sq.parse(text, spaces=cc7_spaces), cc7_spaces)
    cc7_blocks = {k: np.asarray(v) for k, v in bind_inputs(cc7_forest, cc7).items()}
    cc7_plan = {"a": {"batches": 3, "roles": "external"}}
    # (its forward comparison follows its gradient, which gives the single-device values)
    lap("ccsd")

    # gradients: nested loops (external i outside, contracted a inside), Sum + Scatter
    gtext = "\n".join(
        [
            "E = 1/4 g{i1,i2;a1,a2} t{a1,a2;i1,i2}",
            "R{a1,a2;i1,i2} = 1/2 g{a1,a2;a3,a4} t{a3,a4;i1,i2}",
            "S{a1;i1} = f{a1;i1} + g{i2,a1;a2,i1} t{a2;i2}"
            " - 1/2 g{i2,i3;a2,a3} t{a2,a3;i1,i3} t{a1;i2}",
        ]
    )
    gforest = sq.build_forest(sq.parse(gtext, spaces=SPACES), SPACES)
    gx = random_blocks(gforest, seed=9)
    # i=3 in blocks of 2: 2 batches (fewer than devices), the last one overlapping
    plan = {"i": {"block": 2, "roles": "external"}, "a": {"block": 3, "roles": "contracted"}}

    def loss(r):
        return r["E"] + jnp.sum(r["R"] ** 2) + jnp.sum(jnp.sin(r["S"]))

    def values_and_grad(prog, x, loss_):
        """The program's values and the gradient of ``loss_`` of them (one differentiation)."""

        def f(v):
            r = prog(v)
            return loss_(r), r

        (_, r), g = jax.value_and_grad(f, has_aux=True)(x)
        return r, g

    def grad_rows(tag, text_, spaces_, plan_, x, loss_, devices_=DEVICES, **kw) -> dict:
        """Gradients (and the values they differentiate) against single-device ones;
        returns the single-device values."""
        ref_prog = compile_once(text_, spaces_, plan_, None, **kw)
        values, want = values_and_grad(ref_prog, x, loss_)
        for d in devices_:
            prog = compile_once(text_, spaces_, plan_, d, **kw)
            r, got = values_and_grad(prog, x, loss_)
            roots = [lp.num_batches for lp in prog.lowered.body if hasattr(lp, "body")]
            out["grad"].append(
                {
                    "case": tag,
                    "devices": d,
                    "batches": sorted(set(roots)),
                    "split": [s.key for s in prog.split_inputs],
                    "err": _max_rel(got, want),
                    "value_err": _max_rel(r, values),
                }
            )
        return values

    grad_rows("mixed", gtext, SPACES, plan, gx, loss, remat=True)

    # a batched CC residual: E + <l1, R1> + <l2, R2> with fixed random l (R1 and R2 have
    # the shapes of t1 and t2)
    lam = {
        k: rng.standard_normal(cc7[t].shape) for k, t in (("R1", "t{a;i}"), ("R2", "t{a,a;i,i}"))
    }

    def cc_loss(r):
        return r["E"] + jnp.vdot(lam["R1"], r["R1"]) + jnp.vdot(lam["R2"], r["R2"])

    # on 4 devices only (one idles): the mixed case above covers 3 and 4, and a batched
    # CCSD gradient costs ~20 s of compilation per device count
    cc7_values = grad_rows("ccsd a:3 of 7", text, cc7_spaces, cc7_plan, cc7_blocks, cc_loss, (4,))
    lap("grad")
    # the forward program on 4 and 3 devices against the single-device values just computed
    compare("ccsd a:3 of 7", text, cc7_spaces, cc7_plan, cc7_blocks, want=cc7_values)
    lap("ccsd a:3 of 7")

    # memory per device (the CCSD programs above): static model and XLA's figures; the
    # argument bytes a device holds: replicated inputs whole, split ones 1/D of the padded
    for d in (1, *DEVICES):
        prog = progs["ccsd a:6", d]
        mem = prog.memory_analysis(cc_blocks)
        split = {s.key: s for s in prog.split_inputs}
        expected = 0
        for key, v in cc_blocks.items():
            if key in split:
                expected += v.nbytes // v.shape[split[key].position] * split[key].padded // d
            else:
                expected += v.nbytes
        out["memory"].append(
            {
                "devices": d,
                "static": prog.peak_bytes_per_device,
                "static_single": prog.peak_bytes,
                "xla_total": xla_bytes_per_device(mem),
                "xla_argument": int(mem.argument_size_in_bytes),
                "expected_argument": expected,
                "split_bytes": sum(cc_blocks[k].nbytes for k in split),
                "input_bytes": sum(v.nbytes for v in cc_blocks.values()),
            }
        )
    lap("memory")
    return out


@pytest.fixture(scope="module")
def summary() -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.test_shard"],  # as a module: `tests.helpers` imports
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_subprocess_sees_four_devices(summary):
    assert summary["device_count"] == 4


def test_forward_equals_single_device(summary):
    rows = summary["forward"]
    assert {r["devices"] for r in rows} == set(DEVICES)
    assert {b for r in rows for b in r["batches"]} >= {4, 5, 6}
    bad = [r for r in rows if not r["err"] <= RTOL]
    assert not bad, bad


def test_gradients_equal_single_device(summary):
    rows = summary["grad"]
    assert {(r["case"], r["devices"]) for r in rows} == {
        *(("mixed", d) for d in DEVICES),
        ("ccsd a:3 of 7", 4),
    }
    # a remainder batch, fewer batches than devices
    assert all(r["batches"] == [2] for r in rows if r["case"] == "mixed")
    # the gradient reaches inputs held split over the devices
    assert all("g{a,a;a,a}" in r["split"] for r in rows if r["case"] == "ccsd a:3 of 7")
    # ... and inputs read by the nested loop, fetched window by window (on 4 devices
    # with a padded batch slot, which then runs; the nested loop's last batch overlaps)
    assert all("g{i,a;a,i}" in r["split"] for r in rows if r["case"] == "ccsd a:3 of 7")
    # the gradient and the values it differentiates
    bad = [r for r in rows if not (r["err"] <= RTOL and r["value_err"] <= RTOL)]
    assert not bad, bad


def test_memory_per_device(summary):
    rows = {r["devices"]: r for r in summary["memory"]}
    assert set(rows) == {1, *DEVICES}
    for r in rows.values():
        # the static model: a split Scatter escape is charged its share per device
        assert 0 < r["static"] <= r["static_single"]
        assert r["xla_total"] >= r["xla_argument"]
        # each device holds the replicated inputs and its share of the split ones
        assert r["xla_argument"] == r["expected_argument"]
    assert rows[1]["static"] == rows[1]["static_single"]  # no mesh: the plain peak
    assert rows[1]["xla_argument"] == rows[1]["input_bytes"]
    assert rows[4]["static"] <= rows[3]["static"] < rows[1]["static"]
    # most of the CCSD inputs (the g blocks with three or four virtual modes) are split;
    # 6 batches pad to 8 slots on 4 devices and to 6 on 3: the same share per device
    assert rows[4]["split_bytes"] > 0.5 * rows[4]["input_bytes"]
    assert rows[4]["xla_argument"] == rows[3]["xla_argument"] < 0.65 * rows[1]["xla_argument"]


# -- in-process (one device) ---------------------------------------------------------------


def test_one_device_mesh_equals_plain_program():
    text = "R{a1;i1} = f{a1;a2} t{a2;i1}\nE = f{i1;a1} t{a1;i1}"
    spaces = sq.Spaces(i=2, a=5)
    rng = np.random.default_rng(1)
    x = {"f": rng.standard_normal((7, 7)), "t{a;i}": rng.standard_normal((5, 2))}
    plan = {"a": {"block": 2}}
    want = sq.compile(text, spaces, batch=plan)(x)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("x",))
    for prog in (
        sq.compile(text, spaces, batch=plan, mesh=mesh),
        sq.compile(text, spaces, batch=plan, devices=jax.devices()[:1]),
    ):
        assert prog.mesh is not None and prog.mesh.size == 1
        assert _max_rel(prog(x), want) <= RTOL
        assert "shard_map" in str(prog.make_jaxpr(x))
        # prepared on a mesh: the whole program runs per call, also through .jitted
        step = prog.prepare({"f": x["f"]})
        t = {"t{a;i}": x["t{a;i}"]}
        assert _max_rel(step(t), want) <= RTOL
        assert _max_rel(step.jitted(step.fixed, step.prepared, t), want) <= RTOL
        grad = jax.grad(lambda t, step=step: step(t)["E"])(t)["t{a;i}"]
        assert np.allclose(grad, x["f"][:2, 2:].T, rtol=1e-12)


def test_split_inputs_are_the_blocks_only_batches_read():
    from sq_jax.cc.equations import load_equations

    prog = sq.compile(
        load_equations("ccsd_so"),
        sq.Spaces(i=3, a=7),
        batch={"a": {"batches": 3, "roles": "external"}},
        devices=jax.devices()[:1],
    )
    split = {s.key: s for s in prog.split_inputs}
    # read only cut to a batch of an outermost loop: split (7 padded to 3 batches of 3)
    assert split["g{a,a;a,a}"].position == 0
    assert (split["g{a,a;a,a}"].extent, split["g{a,a;a,a}"].padded) == (7, 9)
    # read cut by the outermost loop and by a loop nested in it: split (windows fetched)
    assert split["g{i,a;a,i}"].position == 1
    # read whole inside a loop, or at the root: replicated
    assert "t{a,a;i,i}" not in split and "g{i,i;a,a}" not in split


NESTED = "R{a1,a2;i1,i2} = f{a2;a3} t{a1,a3;i1,i2} + g{a1,a2;i1,i2}"
"""The outer loop walks a2 (f, g cut by it), the nested one a1: t is read only there."""
NESTED_PLAN = {"a": {"block": 2, "roles": "external"}}


def _nested_inputs() -> dict:
    rng = np.random.default_rng(3)
    return {
        "f{a;a}": rng.standard_normal((5, 5)),
        "t{a,a;i,i}": rng.standard_normal((5, 5, 2, 2)),
        "g{a,a;i,i}": rng.standard_normal((5, 5, 2, 2)),
    }


def _nested_oracle(x: dict) -> jax.Array:
    return jnp.einsum("bc,acij->abij", x["f{a;a}"], x["t{a,a;i,i}"]) + x["g{a,a;i,i}"]


def test_block_read_by_nested_loop_is_split_and_exact():
    # one device: the fetch is a psum over one device; 3 and 4 devices, gradients
    # included: g{i,a;a,i} of the CCSD case in the subprocess above
    prog = sq.compile(NESTED, sq.Spaces(i=2, a=5), batch=NESTED_PLAN, devices=jax.devices()[:1])
    split = {s.key: (s.position, s.padded) for s in prog.split_inputs}
    assert split == {"f{a;a}": (0, 6), "g{a,a;i,i}": (1, 6), "t{a,a;i,i}": (0, 6)}
    x = _nested_inputs()
    assert _max_rel(prog(x), {"R": _nested_oracle(x)}) <= RTOL  # gradients: subprocess


def test_split_block_of_wrong_shape_is_an_input_error():
    prog = sq.compile(
        "R{a1;i1} = f{a1;a2} t{a2;i1}",
        sq.Spaces(i=2, a=5),
        batch={"a": {"batches": 2, "roles": "external"}},
        devices=jax.devices()[:1],
    )
    assert [s.key for s in prog.split_inputs] == ["f{a;a}"]
    t = np.ones((5, 2))
    for bad in (np.ones((5, 4)), np.ones((4, 5)), np.ones(5)):
        with pytest.raises(sq.InputError, match=r"input 'f\{a;a\}' has shape"):
            prog({"f{a;a}": bad, "t{a;i}": t})
    got = prog({"f{a;a}": np.eye(5), "t{a;i}": t})["R"]
    np.testing.assert_array_equal(np.asarray(got), t)


def test_plain_program_has_no_mesh():
    prog = sq.compile("E = f{i1;i1}", sq.Spaces(i=3))
    assert prog.mesh is None and prog.peak_bytes_per_device == prog.peak_bytes


def test_mesh_errors():
    dev = jax.devices()[:1]
    with pytest.raises(PlanError, match="both mesh= and devices="):
        sq.compile(
            "E = f{i1;i1}",
            sq.Spaces(i=3),
            mesh=jax.sharding.Mesh(np.array(dev), ("b",)),
            devices=dev,
        )
    with pytest.raises(PlanError, match="exactly one axis"):
        mesh2 = jax.sharding.Mesh(np.array(dev).reshape(1, 1), ("x", "y"))
        sq.compile("E = f{i1;i1}", sq.Spaces(i=3), mesh=mesh2)
    with pytest.raises(PlanError, match="non-empty list"):
        sq.compile("E = f{i1;i1}", sq.Spaces(i=3), devices=[])
    with pytest.raises(PlanError, match=r"must be a jax\.sharding\.Mesh"):
        sq.compile("E = f{i1;i1}", sq.Spaces(i=3), mesh="cpu:4")


if __name__ == "__main__":
    print(json.dumps(_child()))
