"""Reporting of the benchmarks: the machine, the figures against their targets
(``docs/benchmarks.md``, "Figures and targets") and the markdown tables of ``latest.md``.
"""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path
from typing import Any

import jax
import numpy as np

import sq_jax as sq

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
    "w4_compile_ratio": ("<=", 2.0),
    "w5_iter_ratio": ("<=", 1.0),
    "e_diff": ("<=", 1e-9),
}


def meets(key: str, value: float | None) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "–"
    op, t = TARGETS[key]
    ok = value <= t if op == "<=" else value >= t if op == ">=" else abs(value - 1.0) <= t
    return "yes" if ok else "**no**"


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


def _md_header(r: dict) -> list[str]:
    """Title, machine, command and the table of figures against targets."""
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
    return L


def _md_iteration(r: dict, key: str, title: str) -> list[str]:
    """The W1 or W2 table: one row per system."""
    if not r.get(key):
        return []
    ref = "GCCSD" if key == "W1" else "RCCSD"
    L = [
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
    return L


def _md_profile(r: dict) -> list[str]:
    """The W1 profile: totals and the ten slowest contractions."""
    pr = r.get("W1_profile")
    if not (pr and "top" in pr):
        return []
    t1 = next(
        (
            w["sq_jax"]["s_per_iter"]
            for w in r.get("W1", [])
            if w.get("system") == pr["system"] and "sq_jax" in w
        ),
        float("nan"),
    )
    L = [
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
    return L


def _md_w3(r: dict) -> list[str]:
    """The W3 table: one row per memory budget."""
    if not r.get("W3"):
        return []
    w = r["W3"]
    u = w["unbatched"]
    L = [
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
    return L


def _cpu(rec: dict) -> str:
    """A compile's CPU seconds (records written before they were kept: "–")."""
    return f"{rec['compile_cpu_s']:.1f}" if "compile_cpu_s" in rec else "–"


def _md_w4(r: dict) -> list[str]:
    """The W4 table: forward and gradients."""
    if not r.get("W4"):
        return []
    w = r["W4"]
    f = w["forward"]
    L = [
        "",
        f"## W4 gradient ({w['system']}, batch {w['batch']}, {w['scalar']})",
        "",
        "| program | s | ×forward | XLA temp | temp ×forward | compile s (CPU s), median "
        "| compile ×forward (CPU) |",
        "|---|---|---|---|---|---|---|",
        f"| forward | {w['times']['forward']['median_s']:.4f} | 1 | "
        f"{mib(f['xla_temp'])} | 1 | {f['compile_s']:.1f} ({_cpu(f)}) | 1 |",
    ]
    for key in ("grad_no_remat", "grad_remat"):
        g = w[key]
        ratio = g.get("compile_over_forward", float("nan"))
        cpu_ratio = g.get("compile_cpu_over_forward", float("nan"))
        L.append(
            f"| {key} | {g['s']:.4f} | {g['time_over_forward']:.2f} | "
            f"{mib(g['xla_temp'])} | {g['temp_over_forward']:.2f} | "
            f"{g['compile_s']:.1f} ({_cpu(g)}) | {ratio:.2f} ({cpu_ratio:.2f}) |"
        )
    if "compile_samples" in f:
        L += [
            "",
            f"Compile times: medians of {len(f['compile_samples'])} compiles of each "
            "program, in rotating order; all of them (s, wall):",
            "",
        ]
        L += [f"* {key}: {w[key]['compile_samples']}" for key in _W4_PROGRAMS]
    return L


_W4_PROGRAMS = ("forward", "grad_no_remat", "grad_remat")


def _md_w5(r: dict) -> list[str]:
    """The W5 table: one row per system, equations and solver."""
    if not r.get("W5"):
        return []
    L = [
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
    return L


def _md_tail(r: dict) -> list[str]:
    """What was not run, and the errors."""
    L: list[str] = []
    if r.get("not_run"):
        L += ["", "## Not run", ""]
        L += [f"* {x}" for x in r["not_run"]]
    if r.get("errors"):
        L += ["", "## Errors", ""]
        L += [f"* {x}" for x in r["errors"]]
    return L


def markdown(r: dict) -> str:
    """The whole report ``latest.md``."""
    L = _md_header(r)
    L += _md_iteration(r, "W1", "W1 spin-orbital CCSD iteration (R1, R2, E)")
    L += _md_iteration(r, "W2", "W2 closed-shell CCSD iteration")
    for section in (_md_profile, _md_w3, _md_w4, _md_w5, _md_tail):
        L += section(r)
    return "\n".join(L) + "\n"


class _Figures:
    """The rows of the "Figures against targets" table, in the order they are added."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, fig: str, where: str, value: Any, key: str, fmt: str = ".3f") -> None:
        op, t = TARGETS[key]
        target = f"{op} {t:g}" if op != "within" else f"1 ± {t:g}"
        self.rows.append(
            {
                "figure": fig,
                "where": where,
                "value": f3(value, fmt),
                "target": target,
                "met": meets(key, value),
                "raw": value,
            }
        )


def _iteration_figures(out: _Figures, r: dict, key: str) -> None:
    """W1 (GCCSD) or W2 (RCCSD): time ratios, FLOP rate and (W1) compile times."""
    ref, target = ("GCCSD", "w1_ratio_pyscf") if key == "W1" else ("RCCSD", "w2_ratio_pyscf")
    for w in r.get(key, []):
        if "error" in w:
            continue
        tag = f"{key} {w['system']}"
        batched = f" {w['batch']}" if key == "W1" else ""
        ratio = f"time/iter ÷ PySCF {ref}"
        out.add(ratio, f"{tag} sq_jax", w["sq_jax"]["ratio_pyscf"], target)
        out.add(ratio, f"{tag} sq_jax batched{batched}", w["sq_jax_batched"]["ratio_pyscf"], target)
        out.add(ratio, f"{tag} plain JAX", w["plain_jax"]["ratio_pyscf"], target)
        if "sq_jax_one_call" in w:  # every input passed on each call, nothing prepared
            one = w["sq_jax_one_call"]["ratio_pyscf"]
            out.add(ratio, f"{tag} sq_jax one call (no prologue)", one, target)
        rate = "FLOP rate ÷ JAX matmul rate"
        out.add(rate, f"{tag} sq_jax", w["sq_jax"]["flop_rate_ratio"], "flop_rate_ratio")
        if key == "W1":
            comp = "compile s (passes+lower+XLA)"
            out.add(comp, f"{tag} sq_jax", w["sq_jax"]["compile_s"], "compile_s", ".1f")
            out.add(
                comp, f"{tag} sq_jax batched", w["sq_jax_batched"]["compile_s"], "compile_s", ".1f"
            )


def _w3_figures(out: _Figures, w: dict) -> None:
    pred = "static prediction ÷ XLA temp+out"
    out.add(
        pred, f"W3 {w['system']} unbatched", w["unbatched"]["predicted_over_xla"], "static_over_xla"
    )
    for row in w["budgets"]:
        if "error" in row:
            out.rows.append(
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
        where = f"W3 {w['system']} budget {row['budget']}"
        out.add("batched time ÷ unbatched", where, row.get("time_ratio"), "w3_time_ratio")
        out.add("XLA temp+out ÷ budget", where, row["peak_over_budget"], "w3_peak_over_budget")
        out.add(pred, where, row["predicted_over_xla"], "static_over_xla")


def _w4_figures(out: _Figures, w: dict) -> None:
    sysname = w["system"]
    for key, tag in (("grad_no_remat", "no remat"), ("grad_remat", "remat")):
        where = f"W4 {sysname} {tag}"
        out.add("grad time ÷ forward", where, w[key]["time_over_forward"], "w4_grad_over_forward")
        if "compile_over_forward" in w[key]:  # passes + lower + XLA, both programs
            out.add(
                "grad compile ÷ forward compile",
                where,
                w[key]["compile_over_forward"],
                "w4_compile_ratio",
            )
    out.add(
        "grad XLA temp (remat) ÷ forward temp",
        f"W4 {sysname}",
        w["grad_remat"]["temp_over_forward"],
        "w4_remat_temp_ratio",
    )


def _w5_figures(out: _Figures, r: dict) -> None:
    for w in r.get("W5", []):
        tag = "cs" if w["closed_shell"] else "so"
        for name, s in w["solvers"].items():
            where = f"W5 {w['system']} {tag} {name}"
            out.add("iterations ÷ PySCF", where, s["iter_ratio_pyscf"], "w5_iter_ratio", ".2f")
            out.add("|E_corr − PySCF|", where, s["e_diff_pyscf"], "e_diff", ".1e")


def figures(r: dict) -> list[dict]:
    """Every figure of the run against its target (the first table of ``latest.md``)."""
    out = _Figures()
    _iteration_figures(out, r, "W1")
    _iteration_figures(out, r, "W2")
    if r.get("W3"):
        _w3_figures(out, r["W3"])
    if r.get("W4"):
        _w4_figures(out, r["W4"])
    _w5_figures(out, r)
    return out.rows
