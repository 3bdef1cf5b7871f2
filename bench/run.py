"""sq_jax benchmarks W1–W5 of ``docs/benchmarks.md``, side by side in one process.

Run from the repository root, with the virtual environment of the README
(``.venv/bin/pip install -e ".[test,chem]"``)::

    .venv/bin/python bench/run.py                  # full default (~10 min)
    .venv/bin/python bench/run.py --quick          # STO-3G + 6-31G only (~2 min)
    .venv/bin/python bench/run.py --systems h2o-631g --out bench/results/h2o-631g
    .venv/bin/python bench/run.py --large          # + cc-pVTZ, (H2O)2, benzene (hours)

Writes ``latest.json`` and ``latest.md`` to ``--out`` (default ``bench/results``).
Competitors of each timed figure run interleaved (round robin, after a warm-up) and the
figures are medians and ratios measured in this run; absolute seconds on this shared
machine are only context. Nothing here fails on a time. See ``bench/README.md``.

The measurements are in ``measure.py``, the timing primitives in ``_timing.py``, the
systems and competitors in ``workloads.py`` and the tables in ``report.py``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import measure
import workloads as wl
from _timing import log, matmul_fn
from report import figures, machine, markdown


def parse_args() -> argparse.Namespace:
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
    ap.add_argument(
        "--compile-reps",
        type=int,
        default=3,
        help="W4: compiles of each program, in rotating order; medians are quoted",
    )
    ap.add_argument("--batch", default="a=2", help="batch plan for 'sq_jax batched', W4")
    ap.add_argument("--no-newton-so", action="store_true")
    ap.add_argument("--skip", default="", help="comma list of workloads to skip, e.g. W4,W5")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    return ap.parse_args()


class Run:
    """One benchmark run: its settings, loaded systems and the record ``r`` it fills."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        if args.systems:
            names = tuple(s.strip() for s in args.systems.split(",") if s.strip())
        else:
            names = wl.QUICK_SYSTEMS if args.quick else wl.DEFAULT_SYSTEMS
        if args.large:
            names += tuple(n for n, s in wl.SYSTEMS.items() if s.large and n not in names)
        self.names = names
        self.reps = args.reps or (3 if args.quick else 7)
        self.batch = {k: int(v) for k, v in (kv.split("=") for kv in args.batch.split(","))}
        self.skip = {s.strip().upper() for s in args.skip.split(",") if s.strip()}
        self.w3_sys = args.w3_system or names[-1]
        self.w4_sys = args.w4_system
        if args.quick:
            self.skip |= {"W4", "NEWTON"}
        self.r: dict[str, Any] = {
            "meta": machine(),
            "command": " ".join(["python", *sys.argv]),
            "reps": self.reps,
            "systems": {},
            "errors": [],
            "not_run": [],
        }
        self.systems: dict[str, wl.System] = {}

    def guarded(self, label: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, or an error record (logged, and listed in the report) if it raises."""
        try:
            return fn()
        except Exception as err:
            self.r["errors"].append(f"{label}: {type(err).__name__}: {err}"[:2000])
            log(f"ERROR {label}\n{traceback.format_exc()}")
            return {"system": label, "error": f"{type(err).__name__}: {err}"}

    def load_systems(self) -> None:
        w4 = () if "W4" in self.skip else (self.w4_sys,)
        for n in dict.fromkeys((*self.names, self.w3_sys, *w4)):
            s = wl.load_system(n)
            self.systems[n] = s
            self.r["systems"][n] = {
                "basis": s.spec.basis,
                "so_o": s.so.nocc,
                "so_v": s.so.nvirt,
                "cs_o": s.cs.nocc,
                "cs_v": s.cs.nvirt,
                "e_hf": s.so.e_hf,
                "scf_s": s.scf_s,
            }
            log(f"system {n}: so o={s.so.nocc} v={s.so.nvirt}")

    def iterations(self) -> None:
        """W1, W2 for every system, then the W1 profile of the last one."""
        mm, mm_flops = matmul_fn()
        for key, cs in (("W1", False), ("W2", True)):
            if key in self.skip:
                continue
            self.r[key] = []
            for n in self.names:
                log(f"{key} {n}")
                s = self.systems[n]
                self.r[key].append(
                    self.guarded(
                        f"{key} {n}",
                        lambda s=s, cs=cs: measure.iteration(
                            s, cs, self.reps, mm, mm_flops, self.batch
                        ),
                    )
                )
                gc.collect()
        if "PROFILE" not in self.skip and not self.args.quick:
            last = self.systems[self.names[-1]]
            log(f"W1 profile {self.names[-1]}")
            self.r["W1_profile"] = self.guarded("W1 profile", lambda: measure.profile_w1(last, 3))
            gc.collect()

    def budgets_and_gradients(self) -> None:
        """W3 (reusing W1's unbatched compile of its system when there is one), then W4."""
        r = self.r
        reuse = {
            w["system"]: w.pop("_unbatched_compiled")
            for w in r.get("W1", [])
            if "_unbatched_compiled" in w
        }
        for w in r.get("W2", []):
            w.pop("_unbatched_compiled", None)
        if "W3" not in self.skip:
            s, base = self.systems[self.w3_sys], reuse.get(self.w3_sys)
            log(f"W3 {self.w3_sys}")
            r["W3"] = self.guarded(f"W3 {self.w3_sys}", lambda: measure.w3(s, self.reps, base))
        reuse.clear()
        gc.collect()
        if "W4" not in self.skip:
            s = self.systems[self.w4_sys]
            log(f"W4 {self.w4_sys}")
            reps, compiles = self.reps, self.args.compile_reps
            r["W4"] = self.guarded(
                f"W4 {self.w4_sys}", lambda: measure.w4(s, reps, self.batch, compiles)
            )
        elif self.args.quick:
            r["not_run"].append(
                "W4 (gradient): skipped by --quick (batched-gradient XLA compiles take minutes)."
            )

    def _solvers(self, n: str, s: wl.System, cs: bool) -> tuple[str, ...]:
        if "NEWTON" in self.skip:
            if not cs:
                self.r["not_run"].append(f"W5 Newton–Krylov solves for {n}: skipped by --quick.")
            return ("diis",)
        if not cs and (self.args.no_newton_so or s.so.nvirt > 20):
            self.r["not_run"].append(
                f"W5 Newton–Krylov for spin-orbital {n}: ~100 JVPs of the o²v⁴ program "
                "(minutes); closed-shell Newton is run instead."
            )
            return ("diis",)
        return ("diis", "newton")

    def solves(self) -> None:
        """W5: PySCF's solve, then each solver's, per system and equations."""
        if "W5" in self.skip:
            return
        self.r["W5"] = []
        for n in self.names:
            s = self.systems[n]
            for cs in (False, True):
                py = wl.pyscf_solve(s, closed_shell=cs, conv_tol=1e-10, conv_tol_normt=1e-8)
                log(
                    f"W5 PySCF {n} {'cs' if cs else 'so'}: {py['iterations']} it, "
                    f"{py['total_s']:.1f} s"
                )
                so = self._solvers(n, s, cs)
                w = self.guarded(
                    f"W5 {n}", lambda s=s, cs=cs, py=py, so=so: measure.w5(s, cs, so, py)
                )
                if "solvers" in w:
                    ref = s.spec.ref_rccsd if cs else (s.spec.ref_gccsd or s.spec.ref_rccsd)
                    for sv in w["solvers"].values():
                        sv["e_diff_table"] = None if ref is None else abs(sv["e_corr"] - ref)
                    w["pyscf"]["e_diff_table"] = None if ref is None else abs(py["e_corr"] - ref)
                self.r["W5"].append(w)


def main() -> None:
    args = parse_args()
    t_start = time.perf_counter()
    run = Run(args)
    r = run.r
    log("machine", r["meta"])
    if not args.large:
        r["not_run"].append(
            "H2O/cc-pVTZ (GCCSD 6.2 s/it, 4.2 GB in PySCF), (H2O)2/cc-pVDZ and "
            "benzene/cc-pVDZ: too big for this machine's time budget today; they are "
            "behind `--large` and were not run."
        )
    run.load_systems()
    run.iterations()
    run.budgets_and_gradients()
    run.solves()
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
