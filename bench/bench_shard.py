"""Per-device memory and time of a sharded CCSD residual on 1, 2 and 4 forced CPU devices.

Each device count runs in its own subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (JAX fixes the device count when
it starts). For each it reports the static per-device peak
(``program.peak_bytes_per_device``), XLA's per-device figures
(``program.memory_analysis``: arguments, outputs, temporaries), the compile time and the
median call time.

This is NOT a speed-up measurement: forced host devices share the same CPU cores (and
XLA's CPU thread pool), so more devices mostly add collectives and padding. It checks
that the sharded program runs, stays exact, and what each device holds.

Usage::

    .venv/bin/python bench/bench_shard.py            # i=8, a=24, a in 8 batches
    .venv/bin/python bench/bench_shard.py --nocc 6 --nvirt 16 --batches 8 --repeat 3 \\
        --json bench/bench_shard.json
    # memory only (compile, no call): the W3 1/4 plan of H2O/cc-pVDZ sizes
    .venv/bin/python bench/bench_shard.py --nocc 10 --nvirt 38 --batches 4 --repeat 0 \\
        --devices 0 1 2 4

Inputs are passed as blocks (as in W3): a block read only in batches of the split loop
is held split over the devices; "÷ first row" is XLA temp + arguments per device over
the first row's. Device count 0 is the plain program without a mesh.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _one(nocc: int, nvirt: int, batches: int, repeat: int, mesh: bool) -> dict:
    """Run in a subprocess whose device count is already forced."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import sq_jax as sq
    from sq_jax.cc.equations import load_equations
    from sq_jax.forest.inputs import bind_inputs

    devices = jax.devices()
    text = load_equations("ccsd_so")
    spaces = sq.Spaces(i=nocc, a=nvirt)
    n = nocc + nvirt
    rng = np.random.default_rng(0)
    full = {
        "f": rng.standard_normal((n, n)),
        "g": rng.standard_normal((n, n, n, n)),
        "t{a;i}": 0.1 * rng.standard_normal((nvirt, nocc)),
        "t{a,a;i,i}": 0.1 * rng.standard_normal((nvirt, nvirt, nocc, nocc)),
    }
    plan = {"a": {"batches": batches, "roles": "external"}}
    prog = sq.compile(text, spaces, batch=plan, devices=devices if mesh else None)
    # inputs as blocks (like W3): a block read only in batches of the split loop is held
    # split over the devices; a full tensor would be replicated
    x = {k: np.asarray(v) for k, v in bind_inputs(prog.schedule.annotated.forest, full).items()}
    mem = prog.memory_analysis(x)
    if repeat == 0:  # memory only: compile, do not run
        return {"devices": len(devices) if mesh else 0, **_memory(prog, mem)}
    t0 = time.perf_counter()
    out = jax.block_until_ready(prog(x))
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(prog(x))
        times.append(time.perf_counter() - t0)
    norm = float(jnp.linalg.norm(out["R2"]))
    return {
        "devices": len(devices) if mesh else 0,
        "nocc": nocc,
        "nvirt": nvirt,
        "batches": batches,
        **_memory(prog, mem),
        "compile_and_first_call_s": round(first, 2),
        "call_s_median": round(sorted(times)[len(times) // 2], 4),
        "energy": float(out["E"]),
        "r2_norm": norm,
    }


def _memory(prog: Any, mem: Any) -> dict:
    """The static and XLA per-device memory figures of a compiled program."""
    from sq_jax.lower.shard import xla_bytes_per_device

    return {
        "split_inputs": [s.key for s in prog.split_inputs],
        "static_peak_single": prog.peak_bytes,
        "static_peak_per_device": prog.peak_bytes_per_device,
        "xla_argument_per_device": int(mem.argument_size_in_bytes),
        "xla_output_per_device": int(mem.output_size_in_bytes),
        "xla_temp_per_device": int(mem.temp_size_in_bytes),
        "xla_total_per_device": xla_bytes_per_device(mem),
        "xla_temp_plus_argument_per_device": int(
            mem.temp_size_in_bytes + mem.argument_size_in_bytes
        ),
    }


def _table(rows: list[dict]) -> str:
    head = (
        "| devices | static peak/dev | XLA args/dev | XLA temp/dev | temp+args/dev "
        "| ÷ first row | compile+1st (s) | call (s) |"
    )
    lines = [head, "|" + "---|" * 8]
    base = rows[0]["xla_temp_plus_argument_per_device"]
    for r in rows:
        both = r["xla_temp_plus_argument_per_device"]
        lines.append(
            f"| {r['devices']} | {r['static_peak_per_device']:,} | "
            f"{r['xla_argument_per_device']:,} | {r['xla_temp_per_device']:,} | "
            f"{both:,} | {both / base:.3f} | {r.get('compile_and_first_call_s', '-')} | "
            f"{r.get('call_s_median', '-')} |"
        )
    return "\n".join(lines)


def main() -> None:
    """Parse arguments, run each device count in a subprocess, print a table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nocc", type=int, default=8)
    ap.add_argument("--nvirt", type=int, default=24)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--devices", type=int, nargs="+", default=[1, 2, 4], help="0: no mesh (plain program)"
    )
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mesh = args.devices != [0]
        print(json.dumps(_one(args.nocc, args.nvirt, args.batches, args.repeat, mesh)))
        return
    rows = []
    for d in args.devices:
        env = dict(os.environ)
        env["XLA_FLAGS"] = (
            env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={max(d, 1)}"
        ).strip()
        env["JAX_PLATFORMS"] = "cpu"
        cmd = [sys.executable, __file__, "--child", "--nocc", str(args.nocc)]
        cmd += ["--nvirt", str(args.nvirt), "--batches", str(args.batches)]
        cmd += ["--repeat", str(args.repeat), "--devices", str(d)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            sys.exit(proc.stderr[-4000:])
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    print(_table(rows))
    energies = {r["energy"] for r in rows if "energy" in r}
    if energies:
        print(f"energy spread across device counts: {max(energies) - min(energies):.2e}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
