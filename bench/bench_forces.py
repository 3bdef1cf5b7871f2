"""Orbital-relaxed CCSD nuclear gradient of H2O/cc-pVDZ: sq_jax vs pyscfad vs PySCF.

Run from the repository root (needs the ``forces`` extra, i.e. pyscfad):

    .venv/bin/python bench/bench_forces.py                    # H2O/cc-pVDZ, 5 warm rounds
    .venv/bin/python bench/bench_forces.py --basis 6-31g --reps 2 --out bench/results/forces-631g

Three ways to the same all-electron CCSD gradient, each from scratch (SCF, CC, gradient)
at the H2O geometry of ``docs/benchmarks.md``:

* **sq_jax**: ``jax.grad`` of :func:`sq_jax.cc.forces.ccsd_energy_function` (pyscfad's
  RHF with implicit SCF derivative, sq_jax's implicit CC energy). "First call" is the
  construction (one RHF, one CC solve, compiling the CC programs) plus the first
  gradient, in a fresh process state for sq_jax.
* **pyscfad**: ``jax.grad`` of pyscfad's own RHF + RCCSD energy with respect to the
  molecule, with ``pyscfad_scf_implicit_diff`` and ``pyscfad_ccsd_implicit_diff`` (its
  fastest documented route). Not ``pyscfad_moleintor_opt`` (which sq_jax uses): its
  RCCSD integral transformation needs the unpacked (s1) AO integrals that option drops.
* **PySCF**: ``scf.RHF`` + ``cc.CCSD`` + ``nuc_grad_method().kernel()`` (analytic), with
  PySCF's default OpenMP threads and again on one thread (on a loaded machine the
  threaded run can be the slower one).

First calls run once each (sq_jax, pyscfad, PySCF, in this order: pyscfad's first call
finds pyscfad's own small jitted kernels compiled by sq_jax's); warm calls run round
robin (the order reverses every round) and are reported as medians of wall and CPU
seconds (CPU: this process, steadier on a shared machine). Gradients are checked against
PySCF's (max |Δ|). Writes ``--out`` with the suffixes .json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# PySCF's OpenMP threads spin after each parallel region by default and then steal the
# cores from whatever runs next in this process (XLA's threads: sq_jax, pyscfad); set
# before PySCF loads its OpenMP runtime. Override from the environment to compare.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import jax
import numpy as np
from pyscf import cc, gto, lib, scf

H2O = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"
CONV = {"scf": 1e-12, "cc": 1e-10, "normt": 1e-8}


def log(*a: Any) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def converged_ccsd(rhf: Callable, ccsd: Callable, mol: Any) -> Any:
    """RHF then CCSD on ``mol`` with the classes given (PySCF's or pyscfad's), converged
    to the tolerances of ``CONV``."""
    mf = rhf(mol)
    mf.conv_tol = CONV["scf"]
    mf.kernel()
    mycc = ccsd(mf)
    mycc.conv_tol, mycc.conv_tol_normt = CONV["cc"], CONV["normt"]
    mycc.kernel()
    return mycc


def pyscf_gradient(mol: Any) -> np.ndarray:
    return np.asarray(converged_ccsd(scf.RHF, cc.CCSD, mol).nuc_grad_method().kernel())


def pyscf_one_thread(mol: Any) -> np.ndarray:
    """PySCF's gradient on one OpenMP thread (no oversubscription on a loaded machine)."""
    threads = lib.num_threads()
    lib.num_threads(1)
    try:
        return pyscf_gradient(mol)
    finally:
        lib.num_threads(threads)


def pyscfad_gradient_fn(mol: Any) -> Callable[[], np.ndarray]:
    from pyscfad import config_update
    from pyscfad import gto as adgto
    from pyscfad.cc import rccsd
    from pyscfad.scf import hf

    admol = adgto.Mole(atom=mol._atom, unit="Bohr", basis=mol._basis, verbose=0)
    admol.build(trace_exp=False, trace_ctr_coeff=False)

    def energy(m: Any) -> Any:
        return converged_ccsd(hf.RHF, rccsd.RCCSD, m).e_tot

    def gradient() -> np.ndarray:
        with (
            config_update("pyscfad_scf_implicit_diff", True),
            config_update("pyscfad_ccsd_implicit_diff", True),
        ):
            return np.asarray(jax.grad(energy)(admol).coords)

    return gradient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--basis", default="cc-pvdz")
    parser.add_argument("--reps", type=int, default=5, help="warm rounds (medians)")
    parser.add_argument("--out", default="bench/results/forces")
    parser.add_argument("--skip-pyscfad", action="store_true")
    args = parser.parse_args()

    from sq_jax.cc.forces import ccsd_energy_function

    scf.hf.MUTE_CHKFILE = True
    mol = gto.M(atom=H2O, basis=args.basis, verbose=0)
    load0 = os.getloadavg()
    log(f"H2O/{args.basis}: nao={mol.nao}, load {load0}")
    wall0 = time.perf_counter()

    # ---- first calls (compiles included), one each --------------------------------------
    first: dict[str, dict[str, float]] = {}
    holder: dict[str, Any] = {}

    def ours_first() -> np.ndarray:
        holder["energy"] = energy = ccsd_energy_function(
            mol, conv_tol=CONV["scf"], e_tol=CONV["cc"], t_tol=CONV["normt"]
        )
        return np.asarray(jax.grad(energy)(energy.coords))

    grads: dict[str, np.ndarray] = {}
    grads["sq_jax"], w, c = timed(ours_first)
    first["sq_jax"] = {"wall_s": w, "cpu_s": c}
    log(f"sq_jax first {w:.1f} s (cpu {c:.1f})")
    energy = holder["energy"]
    fns: dict[str, Callable[[], np.ndarray]] = {
        "sq_jax": lambda: np.asarray(jax.grad(energy)(energy.coords)),
        "PySCF": lambda: pyscf_gradient(mol),
        "PySCF 1 thread": lambda: pyscf_one_thread(mol),
    }
    if not args.skip_pyscfad:
        fns["pyscfad"] = pyscfad_gradient_fn(mol)
        grads["pyscfad"], w, c = timed(fns["pyscfad"])
        first["pyscfad"] = {"wall_s": w, "cpu_s": c}
        log(f"pyscfad first {w:.1f} s (cpu {c:.1f})")
    for name in ("PySCF", "PySCF 1 thread"):
        grads[name], w, c = timed(fns[name])
        first[name] = {"wall_s": w, "cpu_s": c}
        log(f"{name} first {w:.1f} s (cpu {c:.1f})")

    # ---- warm calls, interleaved ---------------------------------------------------------
    samples: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in fns}
    for r in range(args.reps):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))
        for k in order:
            _, w, c = timed(fns[k])
            samples[k]["wall"].append(w)
            samples[k]["cpu"].append(c)
            log(f"round {r} {k}: {w:.2f} s (cpu {c:.2f})")
    warm = {
        k: {
            "wall_median_s": statistics.median(v["wall"]),
            "cpu_median_s": statistics.median(v["cpu"]),
            "wall_samples": [round(x, 3) for x in v["wall"]],
            "cpu_samples": [round(x, 3) for x in v["cpu"]],
        }
        for k, v in samples.items()
    }
    maxdiff = {k: float(np.max(np.abs(g - grads["PySCF"]))) for k, g in grads.items()}
    record = {
        "system": f"H2O/{args.basis}",
        "nao": mol.nao,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}",
        "load_average_start": load0,
        "load_average_end": os.getloadavg(),
        "versions": _versions(),
        "pyscf_threads": lib.num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "convergence": CONV,
        "reps": args.reps,
        "first": first,
        "warm": warm,
        "max_abs_diff_vs_pyscf": maxdiff,
        "wall_total_s": time.perf_counter() - wall0,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    out.with_suffix(".md").write_text(_markdown(record, args))
    log(f"wrote {out.with_suffix('.md')}")


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    names = ("jax", "jaxlib", "numpy", "pyscf", "pyscfad", "sq_jax")
    out = {}
    for n in names:
        try:
            out[n] = md.version(n)
        except md.PackageNotFoundError:
            out[n] = "-"
    return out


def _markdown(rec: dict, args: argparse.Namespace) -> str:
    warm, first = rec["warm"], rec["first"]
    ref = warm["PySCF"]
    lines = [
        f"# Orbital-relaxed CCSD gradient, {rec['system']} (nao {rec['nao']})",
        "",
        f"{rec['date']} · {rec['machine']} · load average {rec['load_average_start']} at "
        f"start, {rec['load_average_end']} at end (shared machine: absolute seconds are "
        f"context, ratios within the run) · "
        + ", ".join(f"{k} {v}" for k, v in rec["versions"].items())
        + f" · PySCF threads {rec['pyscf_threads']}, OMP_WAIT_POLICY "
        f"{rec['omp_wait_policy']}.",
        "",
        f"Command: `.venv/bin/python bench/bench_forces.py --basis {args.basis} --reps "
        f"{args.reps} --out {args.out}` · wall {rec['wall_total_s']:.0f} s · convergence "
        f"{rec['convergence']} · warm = median of {rec['reps']} interleaved rounds.",
        "",
        "| code | first call s (cpu) | warm s (cpu) | warm ÷ PySCF (cpu) | warm ÷ pyscfad "
        "(cpu) | max abs diff vs PySCF Eh/Bohr |",
        "|---|---|---|---|---|---|",
    ]
    for k in warm:
        w = warm[k]
        ad = warm.get("pyscfad")
        vs_ad = (
            f"{w['wall_median_s'] / ad['wall_median_s']:.2f} "
            f"({w['cpu_median_s'] / ad['cpu_median_s']:.2f})"
            if ad
            else "-"
        )
        lines.append(
            f"| {k} | {first[k]['wall_s']:.1f} ({first[k]['cpu_s']:.1f}) | "
            f"{w['wall_median_s']:.2f} ({w['cpu_median_s']:.2f}) | "
            f"{w['wall_median_s'] / ref['wall_median_s']:.2f} "
            f"({w['cpu_median_s'] / ref['cpu_median_s']:.2f}) | {vs_ad} | "
            f"{rec['max_abs_diff_vs_pyscf'][k]:.1e} |"
        )
    lines += [
        "",
        "Targets (issue 18): sq_jax warm ≤ 0.25× pyscfad warm and ≤ 1.0× PySCF. "
        "Ratios are to the first PySCF row (default threads).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
