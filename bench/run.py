"""sq_jax benchmarks W1–W5 of ``BENCHMARKS.md``, side by side in one process.

Run::

    /work/venv/bin/python bench/run.py                  # full default (~10 min)
    /work/venv/bin/python bench/run.py --quick          # STO-3G + 6-31G only (~2 min)
    /work/venv/bin/python bench/run.py --systems h2o-631g --out /tmp/bench
    /work/venv/bin/python bench/run.py --large          # + cc-pVTZ, (H2O)2, benzene (hours)

Writes ``latest.json`` and ``latest.md`` to ``--out`` (default ``bench/results``).
Competitors of each timed figure run interleaved (round robin, after a warm-up) and the
figures are medians and ratios measured in this run; absolute seconds on this shared
machine are only context. Nothing here fails on a time. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax
import jax.numpy as jnp
import numpy as np
import workloads as wl

import sq_jax as sq
from sq_jax.cc.equations import load_equations
from sq_jax.lower.aot import compiler_options

SQ_XLA = compiler_options()
"""The XLA options sq_jax programs compile with (what a top-level call uses)."""

TARGETS = {
    "w1_ratio_pyscf": ("<=", 0.25),
    "w2_ratio_pyscf": ("<=", 0.5),
    "flop_rate_ratio": (">=", 0.6),
    "compile_s": ("<=", 10.0),
    "w3_time_ratio": ("<=", 1.15),
    "w3_peak_over_budget": ("<=", 1.0),
    "static_over_xla": ("within", 0.15),
    "w4_grad_over_forward": ("<=", 3.0),
    "w4_remat_temp_ratio": ("<=", 1.5),
    "w5_iter_ratio": ("<=", 1.0),
    "e_diff": ("<=", 1e-9),
}


def meets(key: str, value: float | None) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "–"
    op, t = TARGETS[key]
    ok = value <= t if op == "<=" else value >= t if op == ">=" else abs(value - 1.0) <= t
    return "yes" if ok else "**no**"


def log(*a: Any) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


# --------------------------------------------------------------------------------------
# timing


def interleaved(fns: dict[str, Callable[[], Any]], reps: int, warm: int = 1) -> dict:
    """Round-robin ``reps`` timed calls of every function (after ``warm`` untimed rounds);
    returns per name the median, min and all samples (seconds, block_until_ready)."""
    for _ in range(warm):
        for f in fns.values():
            jax.block_until_ready(f())
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(reps):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))  # no fixed first/last slot
        for k in order:
            t0 = time.perf_counter()
            jax.block_until_ready(fns[k]())
            samples[k].append(time.perf_counter() - t0)
    return {
        k: {"median_s": statistics.median(v), "min_s": min(v), "samples": [round(x, 5) for x in v]}
        for k, v in samples.items()
    }


def matmul_fn(n: int = 2000) -> tuple[Callable[[], Any], int]:
    x = jnp.asarray(np.random.default_rng(0).standard_normal((n, n)))
    f = jax.jit(lambda a: a @ a).lower(x).compile()
    return (lambda: f(x)), 2 * n**3


def compile_timed(
    compile_fn: Callable[[], Any],
    jitted_of: Callable[[Any], Any],
    args_of: Callable[[Any], tuple],
    options: dict | None = None,
) -> dict:
    """Phases of a compile: sq_jax passes (``compile_fn``), jax lower, XLA compile (with
    XLA ``options``), first call; returns the compiled executable and the times."""
    t0 = time.perf_counter()
    obj = compile_fn()
    t1 = time.perf_counter()
    args = args_of(obj)
    lowered = jitted_of(obj).lower(*args)
    t2 = time.perf_counter()
    compiled = lowered.compile(options)
    t3 = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    t4 = time.perf_counter()
    ma = compiled.memory_analysis()
    try:
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list | tuple) else cost
        xla_flops = float(cost.get("flops", float("nan")))
    except Exception:
        xla_flops = float("nan")
    return {
        "obj": obj,
        "compiled": compiled,
        "args": args,
        "passes_s": t1 - t0,
        "lower_s": t2 - t1,
        "xla_compile_s": t3 - t2,
        "first_call_s": t4 - t3,
        "compile_s": t3 - t0,  # passes + lower + XLA compile
        "total_first_s": t4 - t0,  # ... + first call
        "xla_temp": int(ma.temp_size_in_bytes),
        "xla_output": int(ma.output_size_in_bytes),
        "xla_argument": int(ma.argument_size_in_bytes),
        "xla_flops": xla_flops,
    }


def strip(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in ("obj", "compiled", "args")}


def maxdiff(a: dict, b: dict, keys=("R1", "R2")) -> float:
    return max(float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k])))) for k in keys)


# --------------------------------------------------------------------------------------
# W1 / W2: one iteration


def iteration(
    system: wl.System, closed_shell: bool, reps: int, mm: Callable, mm_flops: int, batch: dict
) -> dict:
    ints = system.cs if closed_shell else system.so
    eq_name = "ccsd_cs" if closed_shell else "ccsd_so"
    o, v = ints.nocc, ints.nvirt
    spaces = sq.Spaces(i=o, a=v)
    text = load_equations(eq_name)
    blocks = wl.all_blocks(ints)
    rec: dict[str, Any] = {
        "system": system.name,
        "equations": eq_name,
        "o": o,
        "v": v,
        "batch": batch,
    }

    def for_prog(p):
        return (wl.inputs_for(p, blocks),)

    sq_u = compile_timed(lambda: sq.compile(text, spaces), lambda p: p.jitted, for_prog, SQ_XLA)
    sq_b = compile_timed(
        lambda: sq.compile(text, spaces, batch=batch), lambda p: p.jitted, for_prog, SQ_XLA
    )
    plain_fn, n_einsums, keys = wl.plain_jax_function(eq_name, o, v)
    plain = compile_timed(
        lambda: jax.jit(plain_fn), lambda f: f, lambda f: ({k: blocks[k] for k in keys},)
    )
    if closed_shell:
        py_call, py_res = wl.pyscf_rccsd(system.mf, system.cs)
    else:
        py_call, py_res = wl.pyscf_gccsd(system.so)

    def call(c):
        return lambda: c["compiled"](*c["args"])

    out_u = call(sq_u)()
    rec["check"] = {
        "max|R_sq - R_pyscf|": maxdiff(out_u, py_res()),
        "max|R_sq_batched - R_sq|": maxdiff(call(sq_b)(), out_u),
        "max|R_plain - R_sq|": maxdiff(call(plain)(), out_u, ("E", "R1", "R2")),
    }
    fns = {
        "pyscf": py_call,
        "plain_jax": call(plain),
        "sq_jax": call(sq_u),
        "sq_jax_batched": call(sq_b),
        "jax_matmul_2000": mm,
    }
    t = interleaved(fns, reps)
    mm_rate = mm_flops / t["jax_matmul_2000"]["median_s"]
    py = t["pyscf"]["median_s"]
    rec["times"] = t
    rec["matmul_gflops"] = mm_rate / 1e9
    for key, c in (("sq_jax", sq_u), ("sq_jax_batched", sq_b), ("plain_jax", plain)):
        s = t[key]["median_s"]
        flops = c["obj"].flops if key.startswith("sq") else None
        rec[key] = {
            **strip(c),
            "s_per_iter": s,
            "ratio_pyscf": s / py,
            "static_flops": flops,
            "static_peak": c["obj"].peak_bytes if key.startswith("sq") else None,
            "static_over_xla": (c["obj"].peak_bytes / (c["xla_temp"] + c["xla_output"]))
            if key.startswith("sq")
            else None,
            "predicted": c["obj"].memory_bytes if key.startswith("sq") else None,
            "predicted_over_xla": (c["obj"].memory_bytes / (c["xla_temp"] + c["xla_output"]))
            if key.startswith("sq")
            else None,
            "gflops_achieved": (flops / s / 1e9) if flops else c["xla_flops"] / s / 1e9,
            "flop_rate_ratio": (flops / s / mm_rate) if flops else None,
        }
    rec["plain_jax"]["einsum_calls"] = n_einsums
    rec["pyscf"] = {"s_per_iter": py}
    rec["batched_flop_overhead"] = sq_b["obj"].flops / sq_u["obj"].flops
    rec["batched_xla_flop_overhead"] = sq_b["xla_flops"] / sq_u["xla_flops"]
    rec["_unbatched_compiled"] = sq_u  # reused by W3 (dropped from the JSON)
    return rec


# --------------------------------------------------------------------------------------
# W1 profile: every instruction of the unbatched program timed alone


def _flops_of(spec: str, shapes: list[tuple[int, ...]]) -> int:
    ins, _ = spec.split("->")
    dims: dict[str, int] = {}
    for sub, shp in zip(ins.split(","), shapes, strict=True):
        dims.update(zip(sub, shp, strict=True))
    return 2 * int(np.prod([dims[c] for c in dims]))


def profile_w1(system: wl.System, reps: int) -> dict:
    """Time each Contract/Combine of the unbatched ccsd_so program alone (jitted)."""
    from sq_jax.lower.execute import contract as _contract
    from sq_jax.lower.ir import Combine, Contract

    ints = system.so
    spaces = sq.Spaces(i=ints.nocc, a=ints.nvirt)
    prog = sq.compile(load_equations("ccsd_so"), spaces)
    blocks = wl.block_inputs(prog, ints)
    env: dict[int, Any] = {}

    def rd(r):
        return blocks[r.input_key] if r.input_key else env[r.value_id]

    def timed(f, *a):
        jax.block_until_ready(f(*a))
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            jax.block_until_ready(f(*a))
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    rows = []
    for ins in prog.lowered.body:
        if isinstance(ins, Contract):
            a, b = (rd(r) for r in ins.operands)
            f = jax.jit(lambda x, y, ins=ins: _contract(ins, [x, y]))  # as the program runs it
            t = timed(f, a, b)
            env[ins.value_id] = f(a, b)
            rows.append(
                {
                    "op": "einsum",
                    "spec": ins.spec,
                    "gemm": str(ins.gemm),
                    "copies": ins.gemm.copies if ins.gemm is not None else 2,
                    "shapes": [a.shape, b.shape],
                    "flops": _flops_of(ins.spec, [a.shape, b.shape]),
                    "s": t,
                }
            )
        elif isinstance(ins, Combine):
            xs = [rd(r) if r.scalar is None else jnp.asarray(1.0) for r in ins.operands]
            (p0, p1), (c0, c1) = ins.perms, ins.coefs
            f = jax.jit(
                lambda x, y, p0=p0, p1=p1, c0=c0, c1=c1: (
                    c0 * jnp.transpose(x, p0) + c1 * jnp.transpose(y, p1)
                )
            )
            t = timed(f, *xs)
            env[ins.value_id] = f(*xs)
            ident = tuple(range(len(p0)))
            rows.append(
                {
                    "op": "combine",
                    "spec": f"{c0:g}*x{p0}+{c1:g}*y{p1}",
                    "shapes": [xs[0].shape, xs[1].shape],
                    "flops": 0,
                    "s": t,
                    "transposes": int(p0 != ident) + int(p1 != ident),
                }
            )
    con = [x for x in rows if x["op"] == "einsum"]
    com = [x for x in rows if x["op"] == "combine"]
    top = sorted(con, key=lambda x: -x["s"])[:10]
    for row in rows:
        row["gflops"] = row["flops"] / row["s"] / 1e9 if row["flops"] else None
        row["shapes"] = [list(x) for x in row["shapes"]]
    hlo = prog.compiled(blocks).as_text()
    counts = {
        k: hlo.count(f" {k}(")
        for k in ("dot", "transpose", "copy", "fusion", "add", "multiply", "dynamic-slice")
    }
    slow = [x for x in con if x["flops"] / x["s"] < 2e9]
    return {
        "system": system.name,
        "program_flops": prog.flops,
        "n_einsum": len(con),
        "n_combine": len(com),
        "einsum_s": sum(x["s"] for x in con),
        "combine_s": sum(x["s"] for x in com),
        "combine_with_transpose": sum(1 for x in com if x["transposes"]),
        "slow_einsums": len(slow),
        "slow_einsum_s": sum(x["s"] for x in slow),
        "slow_einsum_flops": sum(x["flops"] for x in slow),
        "einsum_with_copies": sum(1 for x in con if x["copies"]),
        "einsum_with_copies_s": sum(x["s"] for x in con if x["copies"]),
        "top": top,
        "hlo_op_counts": counts,
        "rows": rows,
    }


# --------------------------------------------------------------------------------------
# W3: memory budgets


def w3(system: wl.System, reps: int, base: dict | None) -> dict:
    ints = system.so
    spaces = sq.Spaces(i=ints.nocc, a=ints.nvirt)
    text = load_equations("ccsd_so")
    if base is None:  # W1 not run for this system: compile the unbatched program here
        base = compile_timed(
            lambda: sq.compile(text, spaces),
            lambda p: p.jitted,
            lambda p: (wl.block_inputs(p, ints),),
            SQ_XLA,
        )
    unb = base["obj"]
    (xb,) = base["args"]  # blocks: XLA temp holds no sliced copies of f and g
    x0 = base["xla_temp"] + base["xla_output"]  # the unbatched peak, as XLA measures it
    rec: dict[str, Any] = {
        "system": system.name,
        "equations": "ccsd_so",
        "inputs": "blocks",
        "unbatched": {
            **strip(base),
            "static_peak": unb.peak_bytes,
            "predicted": unb.memory_bytes,
            "xla_measured": x0,
            "flops": unb.flops,
            "static_over_xla": unb.peak_bytes / x0,
            "predicted_over_xla": unb.memory_bytes / x0,
        },
        "budgets": [],
    }
    fns = {"unbatched": lambda: base["compiled"](xb)}
    for label, div in (("1/4", 4), ("1/8", 8)):
        budget = x0 // div
        row: dict[str, Any] = {"budget": label, "budget_bytes": budget}
        try:
            c = compile_timed(
                lambda b=budget: sq.compile(text, spaces, memory_budget=b),
                lambda p: p.jitted,
                lambda p: (xb,),
                SQ_XLA,
            )
        except sq.MemoryBudgetError as err:
            row["error"] = f"MemoryBudgetError: {err}"
            row["smallest_feasible"] = getattr(err, "smallest_feasible", None)
            rec["budgets"].append(row)
            log(f"W3 {label}: MemoryBudgetError (smallest feasible {row['smallest_feasible']})")
            continue
        p = c["obj"]
        measured = c["xla_temp"] + c["xla_output"]
        row.update(strip(c))
        row.update(
            {
                "plan": str(p.schedule.annotated.plan)
                if hasattr(p.schedule.annotated, "plan")
                else None,
                "static_peak": p.peak_bytes,
                "predicted": p.memory_bytes,
                "flops": p.flops,
                "flops_ratio": p.flops / unb.flops,
                "xla_measured": measured,
                "peak_over_budget": measured / budget,
                "static_over_budget": p.peak_bytes / budget,
                "static_over_xla": p.peak_bytes / measured,
                "predicted_over_xla": p.memory_bytes / measured,
                "max|R - R_unbatched|": maxdiff(c["compiled"](xb), base["compiled"](xb)),
            }
        )
        fns[label] = lambda cc=c["compiled"]: cc(xb)
        rec["budgets"].append(row)
    t = interleaved(fns, reps)
    rec["times"] = t
    for row in rec["budgets"]:
        if row["budget"] in t:
            row["s_per_iter"] = t[row["budget"]]["median_s"]
            row["time_ratio"] = t[row["budget"]]["median_s"] / t["unbatched"]["median_s"]
    rec["unbatched"]["s_per_iter"] = t["unbatched"]["median_s"]
    return rec


# --------------------------------------------------------------------------------------
# W4: gradient through the batched program


def w4(system: wl.System, reps: int, batch: dict) -> dict:
    ints = system.so
    o, v = ints.nocc, ints.nvirt
    spaces = sq.Spaces(i=o, a=v)
    text = load_equations("ccsd_so")
    rng = np.random.default_rng(7)
    lam = {
        "R1": jnp.asarray(rng.standard_normal((v, o))),
        "R2": jnp.asarray(rng.standard_normal((v, v, o, o))),
    }
    rec: dict[str, Any] = {
        "system": system.name,
        "equations": "ccsd_so",
        "batch": batch,
        "scalar": "L = E + <λ1,R1> + <λ2,R2> (fixed random λ)",
    }
    fns = {}
    for remat in (False, True):
        prog = sq.compile(text, spaces, batch=batch, remat=remat)
        xb = wl.block_inputs(prog, ints)
        t = {k: xb[k] for k in (wl.T1, wl.T2)}
        fixed = {k: a for k, a in xb.items() if k not in t}
        key = "remat" if remat else "no_remat"
        if not remat:
            fwd = compile_timed(
                lambda p=prog: p, lambda p: p.jitted, lambda p, xb=xb: (xb,), SQ_XLA
            )
            rec["forward"] = strip(fwd)
            fns["forward"] = lambda c=fwd["compiled"], xb=xb: c(xb)
        g = compile_timed(
            lambda p=prog: jax.jit(jax.grad(wl.lagrangian(p, lam))),
            lambda f: f,
            lambda f, t=t, fixed=fixed: (t, fixed),
            SQ_XLA,  # as the forward program: memory figures on the same footing
        )
        rec[f"grad_{key}"] = strip(g)
        fns[f"grad_{key}"] = lambda c=g["compiled"], t=t, fixed=fixed: c(t, fixed)
        log(f"W4 grad remat={remat}: compile {g['compile_s']:.1f} s, temp {g['xla_temp']}")
    tm = interleaved(fns, reps)
    rec["times"] = tm
    fwd_s, fwd_temp = tm["forward"]["median_s"], rec["forward"]["xla_temp"]
    for key in ("no_remat", "remat"):
        rec[f"grad_{key}"]["s"] = tm[f"grad_{key}"]["median_s"]
        rec[f"grad_{key}"]["time_over_forward"] = tm[f"grad_{key}"]["median_s"] / fwd_s
        rec[f"grad_{key}"]["temp_over_forward"] = rec[f"grad_{key}"]["xla_temp"] / fwd_temp
    return rec


# --------------------------------------------------------------------------------------
# W5: solves


def w5(system: wl.System, closed_shell: bool, solvers: tuple[str, ...], py: dict) -> dict:
    from sq_jax import cc

    ints = system.cs if closed_shell else system.so
    rec: dict[str, Any] = {
        "system": system.name,
        "closed_shell": closed_shell,
        "pyscf": py,
        "solvers": {},
    }
    for solver in solvers:
        t0 = time.perf_counter()
        run = cc.solve_cc(
            ints, method="ccsd", closed_shell=closed_shell, solver=solver, e_tol=1e-10, t_tol=1e-8
        )
        wall = time.perf_counter() - t0
        res = run.result
        hist = res.history
        rec["solvers"][solver] = {
            "converged": bool(res.converged),
            "iterations": int(res.iterations),
            "linear_steps": int(sum(h.linear_steps for h in hist)),
            "e_corr": float(res.energy),
            "total_s": wall,  # includes both compiles (residual + energy program)
            "solver_total_s": float(res.timings.total),
            "first_iteration_s": float(res.timings.first_iteration),
            "per_iteration_s": float(res.timings.per_iteration),
            "iter_ratio_pyscf": res.iterations / py["iterations"],
            "e_diff_pyscf": abs(float(res.energy) - py["e_corr"]),
        }
        log(
            f"W5 {system.name} {'cs' if closed_shell else 'so'} {solver}: "
            f"{res.iterations} it, {wall:.1f} s, E {float(res.energy):.12f}"
        )
    return rec


# --------------------------------------------------------------------------------------
# report


def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    import jaxlib
    import pyscf

    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "ram_gib": mem,
        "cpu": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "numpy": np.__version__,
        "pyscf": pyscf.__version__,
        "sq_jax": sq.__version__,
        "jax_backend": jax.default_backend(),
        "x64": bool(jax.config.jax_enable_x64),
        "loadavg_start": load,
    }


def f3(x: Any, fmt: str = ".3f") -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and not np.isfinite(x):
        return "–"
    return format(x, fmt)


def mib(b: Any) -> str:
    return "–" if b is None else f"{b / 2**20:.2f} MiB"


def markdown(r: dict) -> str:
    m = r["meta"]
    L = [
        "# sq_jax benchmarks (W1–W5)",
        "",
        f"{m['date']} · {m['cores']} cores, {m['ram_gib']} GiB, {m['cpu']} · "
        f"load average at start {m['loadavg_start']} (shared machine) · Python {m['python']}, "
        f"jax {m['jax']}, jaxlib {m['jaxlib']}, numpy {m['numpy']}, pyscf {m['pyscf']}, "
        f"sq_jax {m['sq_jax']}, backend {m['jax_backend']}, x64 {m['x64']}.",
        "",
        f"Command: `{r['command']}` · wall {r['wall_s']:.0f} s · reps {r['reps']} "
        "(interleaved, medians) · all times in seconds.",
        "",
        "## Figures against targets",
        "",
        "| figure | workload | value | target | met |",
        "|---|---|---|---|---|",
    ]
    for f in r["figures"]:
        L.append(f"| {f['figure']} | {f['where']} | {f['value']} | {f['target']} | {f['met']} |")
    for key, title in (
        ("W1", "W1 spin-orbital CCSD iteration (R1, R2, E)"),
        ("W2", "W2 closed-shell CCSD iteration"),
    ):
        if not r.get(key):
            continue
        ref = "GCCSD" if key == "W1" else "RCCSD"
        L += [
            "",
            f"## {title}",
            "",
            f"| system | o, v | PySCF {ref} s/it | plain JAX s/it (×PySCF) | sq_jax s/it "
            "(×PySCF) | sq_jax batched s/it (×PySCF) | sq_jax GFLOP/s (/matmul) | "
            "matmul GFLOP/s | static FLOPs unb. / batched | compile s unb. / batched / "
            "plain (XLA part) | max|ΔR| vs PySCF |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for w in r[key]:
            if "error" in w:
                L.append(f"| {w['system']} | error: {w['error'][:200]} |")
                continue
            u, b, p = w["sq_jax"], w["sq_jax_batched"], w["plain_jax"]
            L.append(
                f"| {w['system']} | {w['o']}, {w['v']} | {w['pyscf']['s_per_iter']:.4f} | "
                f"{p['s_per_iter']:.4f} ({p['ratio_pyscf']:.2f}) | "
                f"{u['s_per_iter']:.4f} ({u['ratio_pyscf']:.2f}) | "
                f"{b['s_per_iter']:.4f} ({b['ratio_pyscf']:.2f}) | "
                f"{u['gflops_achieved']:.2f} ({u['flop_rate_ratio']:.3f}) | "
                f"{w['matmul_gflops']:.1f} | {u['static_flops']:.3g} / "
                f"{b['static_flops']:.3g} ({w['batched_flop_overhead']:.2f}×) | "
                f"{u['compile_s']:.1f} ({u['xla_compile_s']:.1f}) / {b['compile_s']:.1f} "
                f"({b['xla_compile_s']:.1f}) / {p['compile_s']:.1f} | "
                f"{w['check']['max|R_sq - R_pyscf|']:.1e} |"
            )
    pr = r.get("W1_profile")
    if pr and "top" in pr:
        t1 = next(
            (
                w["sq_jax"]["s_per_iter"]
                for w in r.get("W1", [])
                if w.get("system") == pr["system"] and "sq_jax" in w
            ),
            float("nan"),
        )
        L += [
            "",
            f"## W1 profile ({pr['system']}, unbatched ccsd_so, each instruction "
            "jitted and timed alone, median of 3)",
            "",
            f"{pr['n_einsum']} einsums: {pr['einsum_s']:.3f} s in all; {pr['n_combine']} "
            f"sums (Combine, {pr['combine_with_transpose']} with a transpose): "
            f"{pr['combine_s']:.3f} s; whole program in W1: {t1:.3f} s. Einsums below "
            f"2 GFLOP/s: {pr['slow_einsums']}, {pr['slow_einsum_s']:.3f} s for "
            f"{pr['slow_einsum_flops'] / 1e6:.0f} MFLOP (of {pr['program_flops'] / 1e6:.0f}). "
            f"Contractions that transpose an operand first: {pr['einsum_with_copies']}, "
            f"{pr['einsum_with_copies_s']:.3f} s. Compiled HLO op counts: "
            f"{pr['hlo_op_counts']}.",
            "",
            "| contraction (stored orders) | as run | shapes | MFLOP | ms | GFLOP/s |",
            "|---|---|---|---|---|---|",
        ]
        for x in pr["top"]:
            L.append(
                f"| `{x['spec']}` | {x['gemm']} | {x['shapes'][0]} × {x['shapes'][1]} | "
                f"{x['flops'] / 1e6:.1f} | {x['s'] * 1e3:.2f} | {x['gflops']:.2f} |"
            )
    if r.get("W3"):
        w = r["W3"]
        u = w["unbatched"]
        L += [
            "",
            f"## W3 memory budgets ({w['system']}, ccsd_so, inputs passed as blocks)",
            "",
            "Budgets are fractions of the unbatched program's XLA temp+output. *Predicted*: "
            "the lowered program's memory model (`program.memory_bytes`); *profile*: the "
            "schedule's peak profile (SeQuant's model, one footprint per value).",
            "",
            f"Unbatched: XLA temp+output {mib(u['xla_measured'])}, predicted "
            f"{mib(u['predicted'])} (÷ XLA {u['predicted_over_xla']:.2f}), profile "
            f"{mib(u['static_peak'])} (÷ XLA {u['static_over_xla']:.2f}), "
            f"{u.get('s_per_iter', float('nan')):.4f} s/it, compile {u['compile_s']:.1f} s.",
            "",
            "| budget | bytes | plan | predicted | XLA temp+out | XLA / budget | "
            "predicted / XLA | profile / XLA | FLOPs / unb. | s/it | time / unb. | compile s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in w["budgets"]:
            if "error" in row:
                L.append(
                    f"| {row['budget']} | {row['budget_bytes']} | "
                    f"{row['error'][:300].replace('|', '/')} | smallest feasible "
                    f"{row['smallest_feasible']} | | | | | | | | |"
                )
                continue
            L.append(
                f"| {row['budget']} | {row['budget_bytes']} | {row['plan']} | "
                f"{mib(row['predicted'])} | {mib(row['xla_measured'])} | "
                f"{row['peak_over_budget']:.2f} | {row['predicted_over_xla']:.2f} | "
                f"{row['static_over_xla']:.2f} | "
                f"{row['flops_ratio']:.2f} | {row.get('s_per_iter', float('nan')):.4f} | "
                f"{row.get('time_ratio', float('nan')):.2f} | {row['compile_s']:.1f} |"
            )
    if r.get("W4"):
        w = r["W4"]
        f = w["forward"]
        L += [
            "",
            f"## W4 gradient ({w['system']}, batch {w['batch']}, {w['scalar']})",
            "",
            "| program | s | ×forward | XLA temp | temp ×forward | compile s |",
            "|---|---|---|---|---|---|",
            f"| forward | {w['times']['forward']['median_s']:.4f} | 1 | "
            f"{mib(f['xla_temp'])} | 1 | {f['compile_s']:.1f} |",
        ]
        for key in ("grad_no_remat", "grad_remat"):
            g = w[key]
            L.append(
                f"| {key} | {g['s']:.4f} | {g['time_over_forward']:.2f} | "
                f"{mib(g['xla_temp'])} | {g['temp_over_forward']:.2f} | "
                f"{g['compile_s']:.1f} |"
            )
    if r.get("W5"):
        L += [
            "",
            "## W5 full solves (e_tol 1e-10, t_tol 1e-8; PySCF conv_tol 1e-10, "
            "conv_tol_normt 1e-8, MP2 start)",
            "",
            "| system | equations | PySCF it / s | solver | it (×PySCF) | GMRES cycles | "
            "total s (incl. compile) | s/it | E_corr | |ΔE| vs PySCF | |ΔE| vs table |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for w in r["W5"]:
            py = w["pyscf"]
            for name, s in w["solvers"].items():
                L.append(
                    f"| {w['system']} | {'RCCSD (cs)' if w['closed_shell'] else 'GCCSD (so)'}"
                    f" | {py['iterations']} / {py['total_s']:.1f} | {name} | "
                    f"{s['iterations']} ({s['iter_ratio_pyscf']:.2f}) | {s['linear_steps']} | "
                    f"{s['total_s']:.1f} | {f3(s['per_iteration_s'], '.4f')} | "
                    f"{s['e_corr']:.12f} | {s['e_diff_pyscf']:.1e} | "
                    f"{f3(s.get('e_diff_table'), '.1e')} |"
                )
    if r.get("not_run"):
        L += ["", "## Not run", ""]
        L += [f"* {x}" for x in r["not_run"]]
    if r.get("errors"):
        L += ["", "## Errors", ""]
        L += [f"* {x}" for x in r["errors"]]
    return "\n".join(L) + "\n"


def figures(r: dict) -> list[dict]:
    out = []

    def add(fig, where, value, key, fmt=".3f"):
        op, t = TARGETS[key]
        target = f"{op} {t:g}" if op != "within" else f"1 ± {t:g}"
        out.append(
            {
                "figure": fig,
                "where": where,
                "value": f3(value, fmt),
                "target": target,
                "met": meets(key, value),
                "raw": value,
            }
        )

    for w in r.get("W1", []):
        if "error" in w:
            continue
        add(
            "time/iter ÷ PySCF GCCSD",
            f"W1 {w['system']} sq_jax",
            w["sq_jax"]["ratio_pyscf"],
            "w1_ratio_pyscf",
        )
        add(
            "time/iter ÷ PySCF GCCSD",
            f"W1 {w['system']} sq_jax batched {w['batch']}",
            w["sq_jax_batched"]["ratio_pyscf"],
            "w1_ratio_pyscf",
        )
        add(
            "time/iter ÷ PySCF GCCSD",
            f"W1 {w['system']} plain JAX",
            w["plain_jax"]["ratio_pyscf"],
            "w1_ratio_pyscf",
        )
        add(
            "FLOP rate ÷ JAX matmul rate",
            f"W1 {w['system']} sq_jax",
            w["sq_jax"]["flop_rate_ratio"],
            "flop_rate_ratio",
        )
        add(
            "compile s (passes+lower+XLA)",
            f"W1 {w['system']} sq_jax",
            w["sq_jax"]["compile_s"],
            "compile_s",
            ".1f",
        )
        add(
            "compile s (passes+lower+XLA)",
            f"W1 {w['system']} sq_jax batched",
            w["sq_jax_batched"]["compile_s"],
            "compile_s",
            ".1f",
        )
    for w in r.get("W2", []):
        if "error" in w:
            continue
        add(
            "time/iter ÷ PySCF RCCSD",
            f"W2 {w['system']} sq_jax",
            w["sq_jax"]["ratio_pyscf"],
            "w2_ratio_pyscf",
        )
        add(
            "time/iter ÷ PySCF RCCSD",
            f"W2 {w['system']} sq_jax batched",
            w["sq_jax_batched"]["ratio_pyscf"],
            "w2_ratio_pyscf",
        )
        add(
            "time/iter ÷ PySCF RCCSD",
            f"W2 {w['system']} plain JAX",
            w["plain_jax"]["ratio_pyscf"],
            "w2_ratio_pyscf",
        )
        add(
            "FLOP rate ÷ JAX matmul rate",
            f"W2 {w['system']} sq_jax",
            w["sq_jax"]["flop_rate_ratio"],
            "flop_rate_ratio",
        )
    if r.get("W3"):
        w = r["W3"]
        add(
            "static prediction ÷ XLA temp+out",
            f"W3 {w['system']} unbatched",
            w["unbatched"]["predicted_over_xla"],
            "static_over_xla",
        )
        for row in w["budgets"]:
            if "error" in row:
                out.append(
                    {
                        "figure": "budget feasible",
                        "where": f"W3 {row['budget']}",
                        "value": "MemoryBudgetError",
                        "target": "plan exists",
                        "met": "**no**",
                        "raw": None,
                    }
                )
                continue
            add(
                "batched time ÷ unbatched",
                f"W3 {w['system']} budget {row['budget']}",
                row.get("time_ratio"),
                "w3_time_ratio",
            )
            add(
                "XLA temp+out ÷ budget",
                f"W3 {w['system']} budget {row['budget']}",
                row["peak_over_budget"],
                "w3_peak_over_budget",
            )
            add(
                "static prediction ÷ XLA temp+out",
                f"W3 {w['system']} budget {row['budget']}",
                row["predicted_over_xla"],
                "static_over_xla",
            )
    if r.get("W4"):
        w = r["W4"]
        add(
            "grad time ÷ forward",
            f"W4 {w['system']} no remat",
            w["grad_no_remat"]["time_over_forward"],
            "w4_grad_over_forward",
        )
        add(
            "grad time ÷ forward",
            f"W4 {w['system']} remat",
            w["grad_remat"]["time_over_forward"],
            "w4_grad_over_forward",
        )
        add(
            "grad XLA temp (remat) ÷ forward temp",
            f"W4 {w['system']}",
            w["grad_remat"]["temp_over_forward"],
            "w4_remat_temp_ratio",
        )
    for w in r.get("W5", []):
        tag = "cs" if w["closed_shell"] else "so"
        for name, s in w["solvers"].items():
            add(
                "iterations ÷ PySCF",
                f"W5 {w['system']} {tag} {name}",
                s["iter_ratio_pyscf"],
                "w5_iter_ratio",
                ".2f",
            )
            add(
                "|E_corr − PySCF|",
                f"W5 {w['system']} {tag} {name}",
                s["e_diff_pyscf"],
                "e_diff",
                ".1e",
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="STO-3G + 6-31G, 3 reps, no W4 and no Newton solves"
    )
    ap.add_argument(
        "--systems",
        default=None,
        help="comma list of " + ", ".join(wl.SYSTEMS) + "; default h2o-ccpvdz "
        "(--quick: h2o-sto3g,h2o-631g)",
    )
    ap.add_argument(
        "--large",
        action="store_true",
        help="add H2O/cc-pVTZ, (H2O)2/cc-pVDZ, benzene/cc-pVDZ (hours; W1/W2/W5)",
    )
    ap.add_argument(
        "--w3-system", default=None, help="system for W3 (default: the last of --systems)"
    )
    ap.add_argument(
        "--w4-system",
        default="h2o-631g",
        help="system for W4 (default h2o-631g: the XLA compile of one batched "
        "cc-pVDZ gradient takes ~2 min on this machine)",
    )
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--batch", default="a=2", help="batch plan for 'sq_jax batched', W4")
    ap.add_argument("--no-newton-so", action="store_true")
    ap.add_argument("--skip", default="", help="comma list of workloads to skip, e.g. W4,W5")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args()

    t_start = time.perf_counter()
    if args.systems:
        names = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    else:
        names = wl.QUICK_SYSTEMS if args.quick else wl.DEFAULT_SYSTEMS
    if args.large:
        names += tuple(n for n, s in wl.SYSTEMS.items() if s.large and n not in names)
    reps = args.reps or (3 if args.quick else 7)
    batch = {k: int(v) for k, v in (kv.split("=") for kv in args.batch.split(","))}
    skip = {s.strip().upper() for s in args.skip.split(",") if s.strip()}
    w3_sys = args.w3_system or names[-1]
    w4_sys = args.w4_system
    if args.quick:
        skip |= {"W4", "NEWTON"}

    r: dict[str, Any] = {
        "meta": machine(),
        "command": " ".join(["python", *sys.argv]),
        "reps": reps,
        "systems": {},
        "errors": [],
        "not_run": [],
    }
    log("machine", r["meta"])
    if not args.large:
        r["not_run"].append(
            "H2O/cc-pVTZ (GCCSD 6.2 s/it, 4.2 GB in PySCF), (H2O)2/cc-pVDZ and "
            "benzene/cc-pVDZ: too big for this machine's time budget today; they are "
            "behind `--large` and were not run."
        )
    mm, mm_flops = matmul_fn()
    systems = {}
    for n in dict.fromkeys((*names, w3_sys, *(() if "W4" in skip else (w4_sys,)))):
        s = wl.load_system(n)
        systems[n] = s
        r["systems"][n] = {
            "basis": s.spec.basis,
            "so_o": s.so.nocc,
            "so_v": s.so.nvirt,
            "cs_o": s.cs.nocc,
            "cs_v": s.cs.nvirt,
            "e_hf": s.so.e_hf,
            "scf_s": s.scf_s,
        }
        log(f"system {n}: so o={s.so.nocc} v={s.so.nvirt}")

    def guarded(label: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as err:
            r["errors"].append(f"{label}: {type(err).__name__}: {err}"[:2000])
            log(f"ERROR {label}\n{traceback.format_exc()}")
            return {"system": label, "error": f"{type(err).__name__}: {err}"}

    for key, cs in (("W1", False), ("W2", True)):
        if key in skip:
            continue
        r[key] = []
        for n in names:
            log(f"{key} {n}")
            r[key].append(
                guarded(
                    f"{key} {n}",
                    lambda n=n, cs=cs: iteration(systems[n], cs, reps, mm, mm_flops, batch),
                )
            )
            gc.collect()
    if "PROFILE" not in skip and not args.quick:
        log(f"W1 profile {names[-1]}")
        r["W1_profile"] = guarded("W1 profile", lambda: profile_w1(systems[names[-1]], 3))
        gc.collect()
    reuse = {
        w["system"]: w.pop("_unbatched_compiled")
        for w in r.get("W1", [])
        if "_unbatched_compiled" in w
    }
    for w in r.get("W2", []):
        w.pop("_unbatched_compiled", None)
    if "W3" not in skip:
        log(f"W3 {w3_sys}")
        r["W3"] = guarded(f"W3 {w3_sys}", lambda: w3(systems[w3_sys], reps, reuse.get(w3_sys)))
    reuse.clear()
    gc.collect()
    if "W4" not in skip:
        log(f"W4 {w4_sys}")
        r["W4"] = guarded(f"W4 {w4_sys}", lambda: w4(systems[w4_sys], reps, batch))
    elif args.quick:
        r["not_run"].append(
            "W4 (gradient): skipped by --quick (batched-gradient XLA compiles take minutes)."
        )
    if "W5" not in skip:
        r["W5"] = []
        for n in names:
            s = systems[n]
            for cs in (False, True):
                py = wl.pyscf_solve(s, closed_shell=cs, conv_tol=1e-10, conv_tol_normt=1e-8)
                log(
                    f"W5 PySCF {n} {'cs' if cs else 'so'}: {py['iterations']} it, "
                    f"{py['total_s']:.1f} s"
                )
                solvers = ("diis",) if "NEWTON" in skip else ("diis", "newton")
                if "NEWTON" in skip and not cs:
                    r["not_run"].append(f"W5 Newton–Krylov solves for {n}: skipped by --quick.")
                if not cs and "NEWTON" not in skip and (args.no_newton_so or s.so.nvirt > 20):
                    solvers = ("diis",)
                    r["not_run"].append(
                        f"W5 Newton–Krylov for spin-orbital {n}: ~100 JVPs of the o²v⁴ program "
                        "(minutes); closed-shell Newton is run instead."
                    )
                w = guarded(f"W5 {n}", lambda s=s, cs=cs, py=py, so=solvers: w5(s, cs, so, py))
                if "solvers" in w:
                    ref = s.spec.ref_rccsd if cs else (s.spec.ref_gccsd or s.spec.ref_rccsd)
                    for sv in w["solvers"].values():
                        sv["e_diff_table"] = None if ref is None else abs(sv["e_corr"] - ref)
                    w["pyscf"]["e_diff_table"] = None if ref is None else abs(py["e_corr"] - ref)
                r["W5"].append(w)
    r["wall_s"] = time.perf_counter() - t_start
    r["meta"]["loadavg_end"] = os.getloadavg()
    r["figures"] = figures(r)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(r, indent=1, default=float) + "\n")
    (args.out / "latest.md").write_text(markdown(r))
    log(f"wrote {args.out / 'latest.json'} and latest.md in {r['wall_s']:.0f} s")
    print(markdown(r))


if __name__ == "__main__":
    main()
