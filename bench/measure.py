"""The measurements of workloads W1–W5 (``docs/benchmarks.md``): each returns one JSON-ready
record; ``run.py`` calls them and ``report.py`` turns the records into tables.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import workloads as wl
from _timing import SQ_XLA, compile_timed, interleaved, log, maxdiff, median_alone, strip

import sq_jax as sq
from sq_jax.budget import budget_steps
from sq_jax.cc.equations import load_equations

# --------------------------------------------------------------------------------------
# W1 / W2: one iteration


def _competitors(system: wl.System, closed_shell: bool, batch: dict) -> dict[str, Any]:
    """Compile sq_jax (unbatched and batched) and plain JAX; build PySCF's update call."""
    ints = system.cs if closed_shell else system.so
    eq_name = "ccsd_cs" if closed_shell else "ccsd_so"
    spaces = sq.Spaces(i=ints.nocc, a=ints.nvirt)
    text = load_equations(eq_name)
    blocks = wl.all_blocks(ints)

    def for_prog(p):
        return (wl.inputs_for(p, blocks),)

    def solved(**options):
        # as cc.ccsd runs a large residual: the inputs' declared symmetries trusted, the
        # integrals fixed and prepared once (their copies and packs made before the solve)
        prog = sq.compile(text, spaces, **wl.as_solved(text, spaces), **options)
        return wl.prepared(prog, blocks)

    sq_u = compile_timed(solved, lambda p: p.jitted, wl.prepared_args, SQ_XLA)
    # BatchPlan.of: the plan's defaults, as this figure has always been measured (a mapping
    # would get the structure sq.compile picks for its counts: bench_structure.py)
    plan = sq.BatchPlan.of(batch)
    sq_b = compile_timed(lambda: solved(batch=plan), lambda p: p.jitted, wl.prepared_args, SQ_XLA)
    # one call with every input (what W3's budgeted programs are compared with)
    sq_one = compile_timed(
        lambda: sq.compile(text, spaces, pair_symmetry=True), lambda p: p.jitted, for_prog, SQ_XLA
    )
    plain_fn, n_einsums, keys = wl.plain_jax_function(eq_name, ints.nocc, ints.nvirt)
    plain = compile_timed(
        lambda: jax.jit(plain_fn), lambda f: f, lambda f: ({k: blocks[k] for k in keys},)
    )
    if closed_shell:
        py_call, py_res = wl.pyscf_rccsd(system.mf, system.cs)
    else:
        py_call, py_res = wl.pyscf_gccsd(system.so)
    return {
        "eq_name": eq_name,
        "ints": ints,
        "sq_jax": sq_u,
        "sq_jax_batched": sq_b,
        "sq_jax_one_call": sq_one,
        "plain_jax": plain,
        "n_einsums": n_einsums,
        "py_call": py_call,
        "py_res": py_res,
    }


def _call(c: dict) -> Callable[[], Any]:
    return lambda: c["compiled"](*c["args"])


def _program_record(key: str, c: dict, s: float, py: float, mm_rate: float) -> dict:
    """One competitor's row of W1/W2: its compile phases, time, ratios and memory figures."""
    is_sq = key.startswith("sq")
    flops = c["obj"].flops if is_sq else None
    xla = c["xla_temp"] + c["xla_output"]
    return {
        **strip(c),
        "s_per_iter": s,
        "ratio_pyscf": s / py,
        "static_flops": flops,
        "static_peak": c["obj"].peak_bytes if is_sq else None,
        "static_over_xla": (c["obj"].peak_bytes / xla) if is_sq else None,
        "predicted": c["obj"].memory_bytes if is_sq else None,
        "predicted_over_xla": (c["obj"].memory_bytes / xla) if is_sq else None,
        "gflops_achieved": (flops / s / 1e9) if flops else c["xla_flops"] / s / 1e9,
        "flop_rate_ratio": (flops / s / mm_rate) if flops else None,
    }


def iteration(
    system: wl.System, closed_shell: bool, reps: int, mm: Callable, mm_flops: int, batch: dict
) -> dict:
    """W1 (spin-orbital) or W2 (closed-shell): one CCSD iteration, four competitors."""
    c = _competitors(system, closed_shell, batch)
    sq_u, sq_b, plain = c["sq_jax"], c["sq_jax_batched"], c["plain_jax"]
    rec: dict[str, Any] = {
        "system": system.name,
        "equations": c["eq_name"],
        "o": c["ints"].nocc,
        "v": c["ints"].nvirt,
        "batch": batch,
    }
    out_u = _call(sq_u)()
    rec["check"] = {
        "max|R_sq - R_pyscf|": maxdiff(out_u, c["py_res"]()),
        "max|R_sq_batched - R_sq|": maxdiff(_call(sq_b)(), out_u),
        "max|R_sq_one_call - R_sq|": maxdiff(_call(c["sq_jax_one_call"])(), out_u),
        "max|R_plain - R_sq|": maxdiff(_call(plain)(), out_u, ("E", "R1", "R2")),
    }
    fns = {
        "pyscf": c["py_call"],
        "plain_jax": _call(plain),
        "sq_jax": _call(sq_u),
        "sq_jax_batched": _call(sq_b),
        "sq_jax_one_call": _call(c["sq_jax_one_call"]),
        "jax_matmul_2000": mm,
    }
    t = interleaved(fns, reps)
    mm_rate = mm_flops / t["jax_matmul_2000"]["median_s"]
    py = t["pyscf"]["median_s"]
    rec["times"] = t
    rec["matmul_gflops"] = mm_rate / 1e9
    for key in ("sq_jax", "sq_jax_batched", "sq_jax_one_call", "plain_jax"):
        rec[key] = _program_record(key, c[key], t[key]["median_s"], py, mm_rate)
    rec["plain_jax"]["einsum_calls"] = c["n_einsums"]
    rec["pyscf"] = {"s_per_iter": py}
    rec["batched_flop_overhead"] = sq_b["obj"].flops / sq_u["obj"].flops
    rec["batched_xla_flop_overhead"] = sq_b["xla_flops"] / sq_u["xla_flops"]
    rec["_unbatched_compiled"] = c["sq_jax_one_call"]  # reused by W3 (dropped from the JSON)
    return rec


# --------------------------------------------------------------------------------------
# W1 profile: every instruction of the unbatched program timed alone


def _flops_of(spec: str, shapes: list[tuple[int, ...]]) -> int:
    ins, _ = spec.split("->")
    dims: dict[str, int] = {}
    for sub, shp in zip(ins.split(","), shapes, strict=True):
        dims.update(zip(sub, shp, strict=True))
    return 2 * int(np.prod([dims[c] for c in dims]))


def _contract_row(ins: Any, a: Any, b: Any, reps: int, env: dict) -> dict:
    from sq_jax.lower.execute import contract as _contract

    f = jax.jit(lambda x, y, ins=ins: _contract(ins, [x, y]))  # as the program runs it
    t = median_alone(f, reps, a, b)
    env[ins.value_id] = f(a, b)
    packed = ins.pairs is not None  # a share of the plain FLOPs (sq_jax.lower.pairs)
    return {
        "op": "einsum",
        "spec": ins.spec,
        "gemm": f"pairs {ins.pairs}" if packed else str(ins.gemm),
        "copies": sum(map(bool, ins.pairs.packs))
        if packed
        else (ins.gemm.copies if ins.gemm is not None else 2),
        "shapes": [a.shape, b.shape],
        "flops": round(
            _flops_of(ins.spec, [a.shape, b.shape]) * (ins.pairs.fraction if packed else 1)
        ),
        "s": t,
    }


def _combine_row(ins: Any, xs: list, reps: int, env: dict) -> dict:
    (p0, p1), (c0, c1) = ins.perms, ins.coefs
    f = jax.jit(
        lambda x, y, p0=p0, p1=p1, c0=c0, c1=c1: (
            c0 * jnp.transpose(x, p0) + c1 * jnp.transpose(y, p1)
        )
    )
    t = median_alone(f, reps, *xs)
    env[ins.value_id] = f(*xs)
    ident = tuple(range(len(p0)))
    return {
        "op": "combine",
        "spec": f"{c0:g}*x{p0}+{c1:g}*y{p1}",
        "shapes": [xs[0].shape, xs[1].shape],
        "flops": 0,
        "s": t,
        "transposes": int(p0 != ident) + int(p1 != ident),
    }


def _instruction_rows(prog: Any, blocks: dict, reps: int) -> list[dict]:
    from sq_jax.lower.ir import Combine, Contract

    env: dict[int, Any] = {}

    def rd(r):
        return blocks[r.input_key] if r.input_key else env[r.value_id]

    rows = []
    for ins in prog.lowered.body:
        if isinstance(ins, Contract):
            a, b = (rd(r) for r in ins.operands)
            rows.append(_contract_row(ins, a, b, reps, env))
        elif isinstance(ins, Combine):
            xs = [rd(r) if r.scalar is None else jnp.asarray(1.0) for r in ins.operands]
            rows.append(_combine_row(ins, xs, reps, env))
    for row in rows:
        row["gflops"] = row["flops"] / row["s"] / 1e9 if row["flops"] else None
        row["shapes"] = [list(x) for x in row["shapes"]]
    return rows


def profile_w1(system: wl.System, reps: int) -> dict:
    """Time each Contract/Combine of the unbatched ccsd_so program alone (jitted)."""
    ints = system.so
    spaces = sq.Spaces(i=ints.nocc, a=ints.nvirt)
    prog = sq.compile(load_equations("ccsd_so"), spaces, pair_symmetry=True)  # as W1 runs
    blocks = wl.block_inputs(prog, ints)
    rows = _instruction_rows(prog, blocks, reps)
    con = [x for x in rows if x["op"] == "einsum"]
    com = [x for x in rows if x["op"] == "combine"]
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
        "top": sorted(con, key=lambda x: -x["s"])[:10],
        "hlo_op_counts": counts,
        "rows": rows,
    }


# --------------------------------------------------------------------------------------
# W3: memory budgets


def _unbatched_record(base: dict) -> dict:
    unb = base["obj"]
    x0 = base["xla_temp"] + base["xla_output"]  # the unbatched peak, as XLA measures it
    return {
        **strip(base),
        "static_peak": unb.peak_bytes,
        "predicted": unb.memory_bytes,
        "xla_measured": x0,
        "flops": unb.flops,
        "static_over_xla": unb.peak_bytes / x0,
        "predicted_over_xla": unb.memory_bytes / x0,
    }


def _budget_row(text: str, spaces: sq.Spaces, base: dict, label: str, div: int) -> tuple:
    """One W3 budget: the row of the table and the compiled program (None on error)."""
    (xb,) = base["args"]
    budget = (base["xla_temp"] + base["xla_output"]) // div
    row: dict[str, Any] = {"budget": label, "budget_bytes": budget}
    try:
        with budget_steps() as steps:  # where the compile goes: the searches, XLA's figures
            c = compile_timed(
                lambda b=budget: sq.compile(text, spaces, memory_budget=b, pair_symmetry=True),
                lambda p: p.jitted,
                lambda p: (xb,),
                SQ_XLA,
                aot=True,  # what a user's first call compiles (here: nothing more)
            )
    except sq.MemoryBudgetError as err:
        row["error"] = f"MemoryBudgetError: {err}"
        row["smallest_feasible"] = getattr(err, "smallest_feasible", None)
        log(f"W3 {label}: MemoryBudgetError (smallest feasible {row['smallest_feasible']})")
        return row, None
    row.update(
        search_s=sum(steps.searches),
        searches=len(steps.searches),
        xla_checks_s=sum(steps.figures),
        xla_checks=len(steps.figures),
    )
    p, unb = c["obj"], base["obj"]
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
    return row, c["compiled"]


def w3(system: wl.System, reps: int, base: dict | None) -> dict:
    """W3: spin-orbital CCSD under budgets of 1/4 and 1/8 of the unbatched XLA memory."""
    return w3_on(system.name, "ccsd_so", system.so, reps, base)


def w3_on(name: str, eq_name: str, ints: Any, reps: int, base: dict | None = None) -> dict:
    """W3 for equations ``eq_name`` on integrals ``ints`` (spin-orbital or spatial): the
    unbatched program (``base``, compiled here when None) and budgets of 1/4 and 1/8 of
    its XLA temp + output, timed interleaved."""
    spaces = sq.Spaces(i=ints.nocc, a=ints.nvirt)
    text = load_equations(eq_name)
    if base is None:  # W1 not run for this system: compile the unbatched program here
        base = compile_timed(
            lambda: sq.compile(text, spaces, pair_symmetry=True),
            lambda p: p.jitted,
            lambda p: (wl.block_inputs(p, ints),),
            SQ_XLA,
            aot=True,  # as the budgets below
        )
    (xb,) = base["args"]  # blocks: XLA temp holds no sliced copies of f and g
    rec: dict[str, Any] = {
        "system": name,
        "equations": eq_name,
        "inputs": "blocks",
        "unbatched": _unbatched_record(base),
        "budgets": [],
    }
    fns = {"unbatched": lambda: base["compiled"](xb)}
    for label, div in (("1/4", 4), ("1/8", 8)):
        row, compiled = _budget_row(text, spaces, base, label, div)
        if compiled is not None:
            fns[label] = lambda cc=compiled: cc(xb)
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


def w4(system: wl.System, reps: int, batch: dict, compile_reps: int = 3) -> dict:
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
    batch = sq.BatchPlan.of(batch)  # the defaults, as W4 has always been measured
    fwd_args: dict = {}

    def forward():
        return compile_timed(
            lambda: sq.compile(text, spaces, batch=batch),
            lambda p: p.jitted,
            lambda p: fwd_args.setdefault("xb", (wl.block_inputs(p, ints),)),
            SQ_XLA,
        )

    # a W4-only run would otherwise charge the process's first trace and XLA compile
    # (imports, backend start) to the forward: one compile, discarded
    forward()
    xb = fwd_args["xb"][0]
    t = {k: xb[k] for k in (wl.T1, wl.T2)}
    fixed = {k: a for k, a in xb.items() if k not in t}

    def gradient(remat: bool):
        # sq_jax's passes are inside both compiles: a gradient program needs them too
        return compile_timed(
            lambda: jax.jit(
                jax.grad(wl.lagrangian(sq.compile(text, spaces, batch=batch, remat=remat), lam))
            ),
            lambda f: f,
            lambda f: (t, fixed),
            SQ_XLA,  # as the forward program: memory figures on the same footing
        )

    makers = {
        "forward": forward,
        "grad_no_remat": lambda: gradient(False),
        "grad_remat": lambda: gradient(True),
    }
    # one compile time is noisy (±20% on this machine, and a compile right after a
    # bigger one is slower): each program is compiled ``compile_reps`` times, in
    # rotating order, and the medians are quoted
    laps: dict[str, list[dict]] = {k: [] for k in makers}
    for r in range(compile_reps):
        order = list(makers)[r % len(makers) :] + list(makers)[: r % len(makers)]
        for key in order:
            laps[key].append(makers[key]())
            log(f"W4 {key} compile {laps[key][-1]['compile_s']:.1f} s (round {r + 1})")
    for key, runs in laps.items():
        last = runs[-1]
        rec[key] = strip(last)
        for c in ("compile_s", "compile_cpu_s", "passes_s", "lower_s", "xla_compile_s"):
            rec[key][c] = statistics.median(x[c] for x in runs)
            rec[key][c.replace("_s", "_samples")] = [round(x[c], 3) for x in runs]
    fns["forward"] = lambda c=laps["forward"][-1]["compiled"]: c(xb)
    for key in ("grad_no_remat", "grad_remat"):
        fns[key] = lambda c=laps[key][-1]["compiled"]: c(t, fixed)
    tm = interleaved(fns, reps)
    rec["times"] = tm
    fwd_s, fwd_temp = tm["forward"]["median_s"], rec["forward"]["xla_temp"]
    for key in ("no_remat", "remat"):
        rec[f"grad_{key}"]["s"] = tm[f"grad_{key}"]["median_s"]
        rec[f"grad_{key}"]["time_over_forward"] = tm[f"grad_{key}"]["median_s"] / fwd_s
        rec[f"grad_{key}"]["temp_over_forward"] = rec[f"grad_{key}"]["xla_temp"] / fwd_temp
        for c in ("compile_s", "compile_cpu_s"):
            rec[f"grad_{key}"][c.replace("_s", "_over_forward")] = (
                rec[f"grad_{key}"][c] / rec["forward"][c]
            )
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
