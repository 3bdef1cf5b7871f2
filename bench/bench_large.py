"""Large CCSD workloads against the PySCF code a user would pick instead (issue 12 item 5).

Run from the repository root with the README's virtual environment; one figure per
subcommand, each printing a markdown table and writing ``large-<figure>.json`` and
``.md`` to ``--out`` (default ``bench/results``; ``--tiny`` adds ``-tiny`` to the names)::

    .venv/bin/python bench/bench_large.py scale   # (a) DF-CCSD benzene/cc-pVTZ, 8 GiB budget
    .venv/bin/python bench/bench_large.py so      # (b) (H2O)2/cc-pVDZ vs PySCF GCCSD
    .venv/bin/python bench/bench_large.py so-tz   # (b') H2O/cc-pVTZ vs PySCF GCCSD
    .venv/bin/python bench/bench_large.py cs      # (c) benzene/cc-pVDZ vs PySCF cc.CCSD
    .venv/bin/python bench/bench_large.py w3      # (d) budgets 1/4, 1/8: H2O and benzene
    .venv/bin/python bench/bench_large.py uccsd   # (e) CH2 triplet/cc-pVDZ vs PySCF UCCSD
    .venv/bin/python bench/bench_large.py pyscf-df-setup   # PySCF DF-CCSD setup + 1 update
    .venv/bin/python bench/bench_large.py triples # (f) (T) benzene/cc-pVDZ vs PySCF ccsd_t
    .venv/bin/python bench/bench_large.py cs --tiny        # any of them on H2O, seconds

``scale`` runs in a fresh subprocess so that the peak RSS it reports is its own. Timings
are interleaved medians of sq_jax's residual evaluation and PySCF's ``update_amps`` at
the MP2 amplitudes; the checks compare sq_jax's Jacobi update t + R/D with PySCF's new
amplitudes (``large.py``). See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import large
import large_uhf
import measure
import triples
import workloads as wl
from _timing import log, matmul_fn
from report import f3, machine

from sq_jax._units import format_bytes

BENZENE_TZ = (wl.BENZENE, "cc-pvtz")
# figure -> (full size, --tiny): systems of workloads.SYSTEMS, budgets as sq_jax reads them
SIZES: dict[str, tuple[Any, Any]] = {
    "scale": ((*BENZENE_TZ, "8 GiB"), (wl.H2O, "sto-3g", "40 KiB")),
    "so": ("h2o2-ccpvdz", "h2o-sto3g"),
    "so-tz": ("h2o-ccpvtz", "h2o-sto3g"),
    "cs": ("benzene-ccpvdz", "h2o-631g"),
    "w3": (("h2o-ccpvdz", "benzene-ccpvdz"), ("h2o-sto3g", "h2o-631g")),
    "pyscf-df-setup": (("benzene-ccpvdz",), ("h2o-631g",)),
    "triples": ("benzene-ccpvdz", "h2o-ccpvdz"),
    "uccsd": (
        ("CH2 triplet", large_uhf.CH2, "cc-pvdz", 2),
        ("OH radical", large_uhf.OH, "sto-3g", 1),
    ),
}
TARGETS = {"scale": 1.0, "so": 0.25, "so-tz": 0.25, "cs": 0.30, "triples": 1.0, "uccsd": 0.5}


def size(b: Any) -> str:
    return "–" if b is None else format_bytes(int(b))


def _timing_cells(rec: dict) -> list[str]:
    t = rec["times"]
    return [f3(t["pyscf"]["median_s"], ".4f"), f3(t["sq_jax"]["median_s"], ".4f")]


def _check_cells(c: dict) -> list[str]:
    return [f"{c['max_rel']:.1e}", f"{c['abs_e_diff']:.1e}"]


def md_scale(r: dict) -> list[str]:
    s, rss = r["sq_jax"], r["peak_rss"]
    return [
        "| o, v, naux | budget | (ab\\|cd) would be | peak RSS after SCF / sq_jax / PySCF | "
        "sq_jax XLA temp+out (÷ budget) / predicted | PySCF s/it | sq_jax s/it | "
        "×PySCF (target ≤ 1.0) | max rel. Δ (update, R) | abs ΔE (Eh) | compile s (passes / XLA) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {s['o']}, {s['v']}, {s['naux']} | {s['budget']} | {size(r['vvvv_bytes'])} | "
        f"{size(rss['after_scf'])} / {size(rss['after_sq_jax'])} / {size(rss['after_pyscf'])} | "
        f"{size(s['xla_temp_plus_output'])} "
        f"({s['xla_temp_plus_output'] / s['budget_bytes']:.2f}) / {size(s['predicted_bytes'])} | "
        + " | ".join(_timing_cells(r))
        + f" | {r['ratio_pyscf']:.3f} | "
        + " | ".join(_check_cells(r["check"]))
        + f" | {s['passes_s']:.1f} / {s['xla_compile_s']:.1f} |",
        "",
        f"PySCF: `{r['pyscf']['class']}`, ao2mo {r['pyscf']['ao2mo_s']:.1f} s; sq_jax blocks "
        f"{s['blocks_s']:.1f} s ({size(s['block_bytes'])}), auxiliary basis {s['auxbasis']}; "
        f"SCF {r['scf_s']:.1f} s.",
    ]


def md_so(r: dict) -> list[str]:
    return [
        "| system | o, v | PySCF GCCSD s/it | sq_jax s/it | ×PySCF (target ≤ 0.25) | "
        "max rel. Δ (update, R) | abs ΔE (Eh) | compile s (passes / XLA) | GFLOP/s |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {r['system']} | {r['o']}, {r['v']} | "
        + " | ".join(_timing_cells(r))
        + f" | {r['ratio_pyscf']:.3f} | "
        + " | ".join(_check_cells(r["check"]))
        + f" | {r['passes_s']:.1f} / {r['xla_compile_s']:.1f} | "
        f"{r['flops'] / r['times']['sq_jax']['median_s'] / 1e9:.2f} |",
    ]


def md_cs(r: dict) -> list[str]:
    s = r["sq_jax"]
    return [
        "| system | o, v | PySCF s/it | sq_jax s/it | ×PySCF (target ≤ 0.30) | "
        "sq_jax GFLOP/s (÷ matmul, target ≥ 0.6) | matmul GFLOP/s | FLOPs (÷ hand count) "
        "| max rel. Δ (update, R) | abs ΔE (Eh) |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {r['system']} | {s['o']}, {s['v']} | "
        + " | ".join(_timing_cells(r))
        + f" | {r['ratio_pyscf']:.3f} | {r['sq_jax_gflops']:.2f} ({r['flop_rate_ratio']:.3f}) | "
        f"{r['matmul_gflops']:.1f} | {s['flops']:.3e} ({r['flops_over_hand_count']:.2f}) | "
        + " | ".join(_check_cells(r["check"]))
        + " |",
        "",
        f"PySCF: `{r['pyscf']['class']}`. Hand count {r['hand_count_flops']:.3e} "
        '(bench/README.md, "FLOP counts").',
    ]


def _steps(row: dict) -> str:
    """Where a budgeted compile went (the ``sq_jax.budget`` log), as table text."""
    if "search_s" not in row:
        return ""
    return (
        f": {row['searches']} in {row['search_s']:.1f} s; "
        f"{row['xla_checks']} in {row['xla_checks_s']:.1f} s"
    )


def md_w3(records: list[dict]) -> list[str]:
    lines = [
        "| system | budget | plan | FLOPs ÷ unb. | time ÷ unb. | XLA temp+out ÷ budget | "
        "predicted ÷ XLA | compile s (÷ unb.): searches; XLA figures | max abs ΔR |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for w in records:
        u = w["unbatched"]
        lines.append(
            f"| {w['system']} ({w['equations']}) | none: {size(u['xla_measured'])} | – | 1 | "
            f"1 ({u['s_per_iter']:.4f} s) | – | {u['predicted_over_xla']:.2f} | "
            f"{u['compile_s']:.1f} | – |"
        )
        for b in w["budgets"]:
            if "error" in b:
                smallest = size(b.get("smallest_feasible"))
                lines.append(
                    f"| {w['system']} | {b['budget']} ({size(b['budget_bytes'])}) | "
                    f"MemoryBudgetError, smallest feasible {smallest} |||||||"
                )
                continue
            lines.append(
                f"| {w['system']} | {b['budget']} ({size(b['budget_bytes'])}) | {b['plan']} | "
                f"{b['flops_ratio']:.2f} | {b['time_ratio']:.2f} | "
                f"{b['peak_over_budget']:.2f} | {b['predicted_over_xla']:.2f} | "
                f"{b['compile_s']:.1f} ({b['compile_s'] / u['compile_s']:.2f}){_steps(b)} | "
                f"{b['max|R - R_unbatched|']:.1e} |"
            )
    return lines


def md_uccsd(r: dict) -> list[str]:
    s = r["sq_jax"]
    (oa, ob), (va, vb) = s["nocc"], s["nvirt"]
    return [
        "| system | o (α, β), v (α, β) | PySCF UCCSD s/it | sq_jax s/it | "
        "×PySCF (target ≤ 0.5) | FLOPs ÷ spin-orbital program | max rel. Δ (update, R) | "
        "abs ΔE (Eh) | compile s (passes / XLA) |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {r['system']}/{r['basis']} | ({oa}, {ob}), ({va}, {vb}) | "
        + " | ".join(_timing_cells(r))
        + f" | {r['ratio_pyscf']:.3f} | {s['flops']:.3e} ÷ {s['so_flops']:.3e} = "
        f"{s['flops'] / s['so_flops']:.2f} | "
        + " | ".join(_check_cells(r["check"]))
        + f" | {s['passes_s']:.1f} / {s['xla_compile_s']:.1f} |",
        "",
        f"PySCF: `{r['pyscf']['class']}`, ao2mo {r['pyscf']['ao2mo_s']:.1f} s; sq_jax "
        f"spin blocks {s['blocks_s']:.1f} s ({size(s['block_bytes'])}); UHF {r['scf_s']:.1f} s. "
        f"Geometry (Å): `{r['atom']}`, 2S = {r['spin']}.",
    ]


def md_setup(r: dict) -> list[str]:
    keys = ("class", "nocc", "nvir", "naux", "scf_s", "ao2mo_s", "mp2_s", "update_amps_s")
    return [
        "| " + " | ".join(keys) + " | peak RSS |",
        "|" + "---|" * (len(keys) + 1),
        "| "
        + " | ".join(f3(r[k], ".1f") if k.endswith("_s") else str(r[k]) for k in keys)
        + f" | {size(r['peak_rss'])} |",
    ]


def md_triples(r: dict) -> list[str]:
    u, b, t = r["unbatched"], r["batched"], r["times"]
    ran = u["ran"]
    unb_time = f"{t['sq_jax_unbatched']['median_s']:.4f}" if ran else "not run"
    unb_ratio = f"{r['ratio_unbatched']:.2f}" if ran else "–"
    unb_mem = size(u["xla_bytes"]) if ran else f"{size(u['predicted_bytes'])} predicted"
    return [
        "| system | o, v | PySCF ccsd_t s | sq_jax (T) s unbatched / batched | ×PySCF "
        "(target ≤ 1.0) | XLA temp+out unbatched / batched (budget = unb. ÷ k, ÷ budget) | "
        "predicted batched | peak RSS | batched orbits | FLOPs unb. / batched | abs ΔE(T) (Eh) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {r['system']} | {r['o']}, {r['v']} | {t['pyscf']['median_s']:.4f} | "
        f"{unb_time} / {t['sq_jax_batched']['median_s']:.4f} | "
        f"{unb_ratio} / {r['ratio_batched']:.2f} | "
        f"{unb_mem} / {size(b['xla_bytes'])} ({size(b['budget_bytes'])}, k = "
        f"{b['budget_fraction']:.0f}; {r['batched_xla_over_budget']:.2f}) | "
        f"{size(b['predicted_bytes'])} | {size(r['peak_rss_bytes'])} | {b['loops']} | "
        f"{u['flops']:.3e} / {b['flops']:.3e} | {r['abs_de_t']:.1e} |",
        "",
        f'Batched: {b["plan"]} ("orbit loops", `cc.triples_orbits`). Compile + first call: '
        + (f"unbatched {u['compile_and_first_call_s']:.1f} s, " if ran else "")
        + f"batched {b['compile_and_first_call_s']:.1f} s.",
    ]


def run_figure(figure: str, args: argparse.Namespace) -> tuple[Any, list[str]]:
    """The record and markdown lines of one figure at the size ``args`` asks for."""
    size = SIZES[figure][1 if args.tiny else 0]
    if figure == "scale":
        atom, basis, budget = size
        rec = large.scale_demo(atom, basis, args.budget or budget, args.reps)
        return rec, md_scale(rec)
    if figure in ("so", "so-tz"):
        rec = large.spin_orbital_iteration(size, args.reps)
        return rec, md_so(rec)
    if figure == "cs":
        spec = wl.SYSTEMS[size]
        mf = large.run_scf(spec.atom, spec.basis, density_fit=False)
        rec = large.closed_shell_iteration(mf, args.reps, matmul_fn(500 if args.tiny else 2000))
        rec["system"] = size
        return rec, md_cs(rec)
    if figure == "w3":
        so_name, cs_name = size
        recs = [
            measure.w3_on(so_name, "ccsd_so", wl.load_system(so_name).so, args.reps),
            measure.w3_on(
                cs_name, "ccsd_cs", wl.load_system(cs_name, spin_orbital=False).cs, args.reps
            ),
        ]
        return recs, md_w3(recs)
    if figure == "triples":
        spec = wl.SYSTEMS[size]
        mf = large.run_scf(spec.atom, spec.basis, density_fit=False)
        rec = triples.triples_figure(mf, args.reps)
        rec["system"] = size
        return rec, md_triples(rec)
    if figure == "uccsd":
        rec = large_uhf.unrestricted_iteration(*size, args.reps)
        return rec, md_uccsd(rec)
    spec = wl.SYSTEMS[size[0]]
    rec = large.pyscf_df_setup(spec.atom, spec.basis)
    return rec, md_setup(rec)


def in_child(args: argparse.Namespace) -> dict:
    """``scale`` in a fresh Python process (its peak RSS is then its own)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "record.json"
        cmd = [sys.executable, __file__, *sys.argv[1:], "--child", str(path)]
        subprocess.run(cmd, check=True)
        return json.loads(path.read_text())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("figure", choices=list(SIZES))
    ap.add_argument("--tiny", action="store_true", help="H2O systems: checks the script, seconds")
    ap.add_argument("--reps", type=int, default=3, help="timed rounds (interleaved)")
    ap.add_argument("--budget", default=None, help="scale: memory budget (default 8 GiB)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    ap.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    """Run one figure; write JSON + markdown to ``--out``; return the whole record."""
    args = parse_args(argv)
    t0 = time.perf_counter()
    if args.child is not None:  # inside the scale subprocess: record only
        rec, _ = run_figure(args.figure, args)
        args.child.write_text(json.dumps(rec, default=float))
        return rec
    meta = machine()
    log(args.figure, "tiny" if args.tiny else "full size", meta)
    if args.figure == "scale" and argv is None:
        rec = in_child(args)
        lines = md_scale(rec)
    else:
        rec, lines = run_figure(args.figure, args)
    name = f"large-{args.figure}{'-tiny' if args.tiny else ''}"
    command = " ".join(["python bench/bench_large.py", *(sys.argv[1:] if argv is None else argv)])
    full = {"meta": meta, "command": command, "figure": args.figure}
    full.update(wall_s=time.perf_counter() - t0, target=TARGETS.get(args.figure), result=rec)
    md = [
        f"# {name}",
        "",
        f"{meta['date']} · {meta['cores']} cores, {meta['ram_gib']} GiB · load average at start "
        f"{meta['loadavg_start']} · jax {meta['jax']}, pyscf {meta['pyscf']} · "
        f"wall {full['wall_s']:.0f} s · reps {args.reps} (interleaved medians, seconds)",
        "",
        f"Command: `{command}`",
        "",
        *lines,
        "",
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(full, indent=1, default=float) + "\n")
    (args.out / f"{name}.md").write_text("\n".join(md))
    print("\n".join(md))
    return full


if __name__ == "__main__":
    main()
