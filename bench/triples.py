"""The (T) figure of ``bench_large.py``: sq_jax's compiled (T) against PySCF's ``ccsd_t``.

Both read the same RHF orbitals and sq_jax's converged closed-shell CCSD amplitudes
(PySCF's kernel takes ``t1, t2``); PySCF gets its own ``ao2mo`` integrals, sq_jax the
blocks its (T) program reads (``cc.triples``). Measured: interleaved median times of the
compiled (T) call (unbatched, and under a memory budget of 1/10 of what XLA allocates for
the unbatched program, or of its prediction where it cannot run, capped at a quarter of
this machine's memory: the orbit loops of ``cc.triples_orbits``) and of
``pyscf.cc.ccsd_t.kernel``; XLA's temporaries + outputs of each program
(``memory_analysis``) against the budget; the process's peak RSS; |ΔE(T)|.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from _timing import log

from sq_jax import cc
from sq_jax.cc.triples import (
    ccsd_t,
    default_memory_budget,
    triples_inputs,
    triples_orbits,
    triples_program,
)


def _xla_bytes(program: Any, inputs: dict) -> int:
    ma = program.memory_analysis(inputs)
    return int(ma.temp_size_in_bytes + ma.output_size_in_bytes)


def _energy(out: Any) -> Any:
    """E(T) from a program's outputs (a dict) or the orbit loops' (the scalar)."""
    return out["E"] if isinstance(out, dict) else out


def triples_figure(mf: Any, reps: int, fraction: int = 10) -> dict:
    """(T) of ``mf``'s closed-shell CCSD: sq_jax unbatched and batched, and PySCF.

    The batched program's budget is 1/``fraction`` of the unbatched program's memory
    (XLA's figure when it runs; else the prediction), capped at ``ccsd_t``'s default
    budget, a quarter of this machine's memory (``default_memory_budget``). An unbatched
    program predicted above that cap is not run (benzene/cc-pVDZ: 222 GiB).
    """
    from large import peak_rss, timed_pair
    from pyscf import cc as pyscf_cc
    from pyscf.cc import ccsd_t as pyscf_ccsd_t

    t0 = time.perf_counter()
    run = cc.ccsd(mf, closed_shell=True, e_tol=1e-10, t_tol=1e-8)
    ccsd_s = time.perf_counter() - t0
    log("triples", f"CCSD {ccsd_s:.1f} s, o={run.nocc}, v={run.nvirt}")
    t1, t2 = np.ascontiguousarray(run.t1), np.ascontiguousarray(run.t2)
    mycc = pyscf_cc.CCSD(mf)
    eris = mycc.ao2mo()
    rec: dict[str, Any] = {"o": run.nocc, "v": run.nvirt, "ccsd_s": ccsd_s}
    cap = default_memory_budget()
    programs = {}
    for name in ("unbatched", "batched"):
        t0 = time.perf_counter()
        budget = None
        if name == "unbatched":
            program = triples_program(run)
            if program.memory_bytes > cap:  # cannot run here: the prediction is the figure
                rec[name] = {
                    "ran": False,
                    "predicted_bytes": program.memory_bytes,
                    "flops": program.flops,
                }
                log("triples", name, rec[name])
                continue
        else:
            unbatched = rec["unbatched"]
            need = unbatched.get("xla_bytes", unbatched["predicted_bytes"])
            budget = min(need // fraction, cap)
            program = triples_orbits(run, memory_budget=budget)
        e_t = ccsd_t(run, program=program)  # compiles and runs once
        compile_s = time.perf_counter() - t0
        orbits = name == "batched"
        inputs = triples_inputs(run, program.base if orbits else program)
        programs[name] = (program.evaluate if orbits else program, inputs)
        rec[name] = {
            "ran": True,
            "budget_bytes": budget,
            "loops": program.orbit_count if orbits else len(program.lowered.loops()),
            "plan": (
                f"{program}, {program.workers} concurrent workers"
                if orbits
                else str(program.schedule.annotated.plan)
            ),
            "flops": program.flops,
            "predicted_bytes": program.memory_bytes,
            # the orbit loops' figure is one worker's; the workers run at once
            "xla_bytes": _xla_bytes(program, inputs) * (program.workers if orbits else 1),
            "compile_and_first_call_s": compile_s,
            "e_t": e_t,
        }
        log("triples", name, rec[name])
    b = rec["batched"]
    need = rec["unbatched"].get("xla_bytes", rec["unbatched"]["predicted_bytes"])
    b["budget_fraction"] = need / b["budget_bytes"]
    e_ref = pyscf_ccsd_t.kernel(mycc, eris, t1, t2, verbose=0)
    rec["pyscf_e_t"] = e_ref
    rec["abs_de_t"] = max(abs(rec[k]["e_t"] - e_ref) for k in programs)
    fns = {
        "pyscf": lambda: pyscf_ccsd_t.kernel(mycc, eris, t1, t2, verbose=0),
        **{
            f"sq_jax_{k}": (lambda p=p, x=x: _energy(p(x)).block_until_ready())
            for k, (p, x) in programs.items()
        },
    }
    rec.update(timed_pair(fns, reps, warm=1))
    t = rec["times"]
    for k in programs:
        rec[f"ratio_{k}"] = t[f"sq_jax_{k}"]["median_s"] / t["pyscf"]["median_s"]
    rec["batched_xla_over_budget"] = b["xla_bytes"] / b["budget_bytes"]
    rec["peak_rss_bytes"] = peak_rss()
    return rec
