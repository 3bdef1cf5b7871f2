"""The measurements of ``bench_large.py``: one CCSD iteration of sq_jax against the PySCF
code a user would pick instead, on the same orbitals and the same (MP2) amplitudes.

PySCF's ``update_amps`` returns new amplitudes, not residuals. sq_jax's solvers take the
Jacobi step t ← t + R/D (D1 = f_ii − f_aa, D2 = f_ii + f_jj − f_aa − f_bb, the Fock
diagonal, as PySCF's ``eris.mo_energy``; ``cc/solvers.py``), so the check compares
sq_jax's t + R/D with PySCF's new amplitudes, and sq_jax's R with PySCF's (t_new − t)·D,
each relative to its largest element. Layouts: sq_jax T1[a, i], T2[a, b, i, j]; PySCF
t1[i, a], t2[i, j, a, b] (closed shell and spin-orbital alike).

Every competitor gets the arrays it would get in a user's run: sq_jax the integral blocks
its programs read (``cc.blocks``, as ``cc.ccsd(mf, ...)`` builds them), PySCF its own
``ao2mo`` (DF and conventional closed shell). For GCCSD both read sq_jax's
antisymmetrized spin-orbital integrals (``workloads.pyscf_gccsd``, as W1), so that the
spin-orbital order is the same.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import workloads as wl
from _timing import SQ_XLA, interleaved, log

import sq_jax as sq
from sq_jax._units import parse_bytes
from sq_jax.cc.blocks import block_builder, read_blocks
from sq_jax.cc.equations import load_equations
from sq_jax.forest.inputs import input_specs

T1, T2 = wl.T1, wl.T2


def peak_rss() -> int:
    """This process's peak resident set size so far, in bytes (Linux: ru_maxrss in KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def run_scf(atom: str, basis: str, *, density_fit: bool) -> Any:
    """RHF, all electrons, conv_tol 1e-12; density-fitted (PySCF's default JK-fitting
    basis) when asked, so that sq_jax's and PySCF's DF-CCSD read the same factors and
    the same Fock matrix."""
    from pyscf import gto, scf

    mf = scf.RHF(gto.M(atom=atom, basis=basis, verbose=0))
    if density_fit:
        mf = mf.density_fit()
    mf.conv_tol = 1e-12
    return mf.run()


def _read_by(program: sq.Program, arrays: dict[str, Any]) -> dict[str, Any]:
    names = set()
    for spec in input_specs(program.schedule.annotated.forest):
        names.update((spec.label, spec.block_key))
    return {k: jnp.asarray(v) for k, v in arrays.items() if k in names}


def sq_iteration(mf: Any, *, df: bool, budget: Any = None) -> dict[str, Any]:
    """Compile closed-shell CCSD (E, R1, R2; DF with ``df``) for ``mf`` under ``budget``,
    build exactly the blocks it reads and the MP2 amplitudes, compile for XLA and call it
    once. Returns the executable, its inputs, outputs, amplitudes and the phase times."""
    t0 = time.perf_counter()
    builder = block_builder(mf, spin_orbital=False, df=df)
    spaces = builder.spaces()
    text = load_equations("ccsd_cs_df" if df else "ccsd_cs")
    options = {} if budget is None else {"memory_budget": budget}
    # as cc.ccsd compiles: without a budget, the integrals fixed and prepared once
    solved = wl.as_solved(text, spaces) if budget is None else {"pair_symmetry": True}
    prog = sq.compile(text, spaces, **solved, **options)
    t1 = time.perf_counter()
    ints = builder.build(read_blocks(prog))
    m1, m2 = ints.mp2_amplitudes()
    amps = {T1: np.ascontiguousarray(m1), T2: np.ascontiguousarray(m2)}
    inputs = _read_by(prog, {**ints.inputs(), **amps})
    prologue_s = prepared_bytes = None
    if budget is None:  # as cc.ccsd prepares a large unbudgeted program
        p0 = time.perf_counter()
        run = wl.prepared(prog, inputs)
        jax.block_until_ready(run.step.prepared)
        prologue_s, prepared_bytes = time.perf_counter() - p0, run.step.prepared_bytes
        jitted, args = run.jitted, wl.prepared_args(run)
    else:
        jitted, args = prog.jitted, (inputs,)
    t2 = time.perf_counter()
    exe = jitted.lower(*args).compile(SQ_XLA)
    t3 = time.perf_counter()
    out = jax.block_until_ready(exe(*args))
    t4 = time.perf_counter()
    ma = exe.memory_analysis()
    return {
        "program": prog,
        "call": lambda: exe(*args),
        "out": {k: np.asarray(v) for k, v in out.items()},
        "amps": amps,
        "dens": ints.denominators(),
        "record": {
            "o": ints.nocc,
            "v": ints.nvirt,
            "naux": ints.naux,
            "auxbasis": ints.auxbasis,
            "budget": None if budget is None else str(budget),
            "budget_bytes": None if budget is None else parse_bytes(budget),
            "block_bytes": ints.nbytes,
            "flops": prog.flops,
            "predicted_bytes": prog.memory_bytes,
            "xla_temp_plus_output": int(ma.temp_size_in_bytes + ma.output_size_in_bytes),
            "xla_argument": int(ma.argument_size_in_bytes),
            "passes_s": t1 - t0,
            "blocks_s": t2 - t1,
            "xla_compile_s": t3 - t2,
            "first_call_s": t4 - t3,
            "prologue_s": prologue_s,
            "prepared_bytes": prepared_bytes,
        },
    }


def pyscf_ao2mo(mycc: Any) -> tuple[Any, Any, float, float]:
    """``mycc`` quiet, with room for its blocks, and its ``ao2mo()``: (mycc, eris, start
    and end times of ``ao2mo``)."""
    from pyscf import lib

    mycc.verbose = 0
    # PySCF sizes its blocks by max_memory minus what the process holds already (sq_jax's
    # arrays and XLA's heap when it runs second): give it its default on top of that.
    mycc.max_memory = lib.current_memory()[0] + mycc.max_memory
    t0 = time.perf_counter()
    eris = mycc.ao2mo()
    return mycc, eris, t0, time.perf_counter()


def pyscf_closed_shell(mf: Any, amps: dict[str, np.ndarray]) -> dict[str, Any]:
    """PySCF's ``cc.CCSD(mf)`` (``dfccsd.RCCSD`` for a density-fitted ``mf``, else
    ``ccsd.CCSD``): its own ``ao2mo``, one ``update_amps`` and the energy at ``amps``."""
    from pyscf import cc

    mycc, eris, t0, t1 = pyscf_ao2mo(cc.CCSD(mf))
    t1_, t2_ = amps[T1].T.copy(), amps[T2].transpose(2, 3, 0, 1).copy()
    new = mycc.update_amps(t1_, t2_, eris)
    t2 = time.perf_counter()
    return {
        "call": lambda: mycc.update_amps(t1_, t2_, eris),
        "new": new,
        "energy": float(mycc.energy(t1_, t2_, eris)),
        "record": {
            "class": f"{type(mycc).__module__}.{type(mycc).__name__}",
            "max_memory_mb": float(mycc.max_memory),
            "ao2mo_s": t1 - t0,
            "first_update_s": t2 - t1,
        },
    }


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def compare(out: dict, amps: dict, dens: tuple, new_pyscf: tuple, e_pyscf: float) -> dict:
    """sq_jax's Jacobi update and residuals against PySCF's new amplitudes (module doc)."""
    res = {T1: np.asarray(out["R1"]), T2: np.asarray(out["R2"])}
    py_new = {T1: new_pyscf[0].T, T2: new_pyscf[1].transpose(2, 3, 0, 1)}
    d = dict(zip((T1, T2), dens, strict=True))
    rec = {}
    for key, name in ((T1, "t1"), (T2, "t2")):
        rec[f"rel_update_{name}"] = _rel(amps[key] + res[key] / d[key], py_new[key])
        rec[f"rel_residual_{name}"] = _rel(res[key], (py_new[key] - amps[key]) * d[key])
    rec["e_sq_jax"] = float(out["E"])
    rec["e_pyscf"] = e_pyscf
    rec["abs_e_diff"] = abs(float(out["E"]) - e_pyscf)
    rec["max_rel"] = max(v for k, v in rec.items() if k.startswith("rel_"))
    return rec


def timed_pair(fns: dict[str, Callable[[], Any]], reps: int, warm: int) -> dict:
    """Interleaved medians; the ratio sq_jax ÷ PySCF when both are there."""
    t = interleaved(fns, reps, warm=warm)
    rec = {"times": t, "reps": reps}
    if "sq_jax" in t and "pyscf" in t:
        rec["ratio_pyscf"] = t["sq_jax"]["median_s"] / t["pyscf"]["median_s"]
    return rec


# --------------------------------------------------------------------------------------
# (a) scale demonstration: DF-CCSD under a memory budget, peak RSS of its own process


def scale_demo(atom: str, basis: str, budget: Any, reps: int) -> dict:
    """One DF-CCSD iteration under ``budget``: peak RSS after each phase (sq_jax runs
    before PySCF, so the peak after sq_jax is sq_jax's), the check against PySCF's
    DF-CCSD ``update_amps`` at the MP2 amplitudes and interleaved times."""
    rss = {"start": peak_rss()}
    t0 = time.perf_counter()
    mf = run_scf(atom, basis, density_fit=True)
    rec: dict[str, Any] = {"scf_s": time.perf_counter() - t0, "e_hf": float(mf.e_tot)}
    rss["after_scf"] = peak_rss()
    log(f"scale: SCF {rec['scf_s']:.1f} s, peak RSS {rss['after_scf'] / 2**30:.2f} GiB")
    sq_run = sq_iteration(mf, df=True, budget=budget)
    rss["after_sq_jax"] = peak_rss()
    rec["sq_jax"] = sq_run["record"]
    o, v = sq_run["record"]["o"], sq_run["record"]["v"]
    rec["vvvv_bytes"] = 8 * v**4  # the (ab|cd) block that is never built
    log(f"scale: sq_jax o={o} v={v}: {rec['sq_jax']}, peak RSS {rss['after_sq_jax'] / 2**30:.2f}")
    py = pyscf_closed_shell(mf, sq_run["amps"])
    rss["after_pyscf"] = peak_rss()
    rec["pyscf"] = py["record"]
    rec["check"] = compare(sq_run["out"], sq_run["amps"], sq_run["dens"], py["new"], py["energy"])
    log(f"scale: PySCF {py['record']}; check {rec['check']}")
    rec.update(timed_pair({"pyscf": py["call"], "sq_jax": sq_run["call"]}, reps, warm=0))
    rss["end"] = peak_rss()
    rec["peak_rss"] = rss
    return rec


def pyscf_df_setup(atom: str, basis: str) -> dict:
    """How long PySCF's DF-CCSD takes to set up (DF-SCF, ``ao2mo``) and to run one
    ``update_amps`` at the MP2 amplitudes, and its peak RSS: for planning a run."""
    from pyscf import cc

    t0 = time.perf_counter()
    mf = run_scf(atom, basis, density_fit=True)
    t1 = time.perf_counter()
    mycc = cc.CCSD(mf)
    mycc.verbose = 0
    eris = mycc.ao2mo()
    t2 = time.perf_counter()
    _, t1_, t2_ = mycc.init_amps(eris)
    t3 = time.perf_counter()
    mycc.update_amps(t1_, t2_, eris)
    t4 = time.perf_counter()
    return {
        "class": f"{type(mycc).__module__}.{type(mycc).__name__}",
        "nocc": int(t1_.shape[0]),
        "nvir": int(t1_.shape[1]),
        "naux": int(mycc.with_df.get_naoaux()),
        "scf_s": t1 - t0,
        "ao2mo_s": t2 - t1,
        "mp2_s": t3 - t2,
        "update_amps_s": t4 - t3,
        "peak_rss": peak_rss(),
    }


# --------------------------------------------------------------------------------------
# (b) spin-orbital, (c) closed shell


def spin_orbital_iteration(name: str, reps: int) -> dict:
    """sq_jax ``ccsd_so`` (E, R1, R2) against PySCF GCCSD ``update_amps``, same integrals."""
    system = wl.load_system(name)
    so = system.so
    text = load_equations("ccsd_so")
    t0 = time.perf_counter()
    spaces = sq.Spaces(i=so.nocc, a=so.nvirt)
    prog = sq.compile(text, spaces, **wl.as_solved(text, spaces))  # as cc.ccsd compiles
    t1 = time.perf_counter()
    run = wl.prepared(prog, wl.all_blocks(so))  # the integrals' copies made once
    jax.block_until_ready(run.step.prepared)
    args = wl.prepared_args(run)
    t2 = time.perf_counter()
    exe = run.jitted.lower(*args).compile(SQ_XLA)
    rec: dict[str, Any] = {"system": name, "o": so.nocc, "v": so.nvirt, "flops": prog.flops}
    rec.update(passes_s=t1 - t0, prologue_s=t2 - t1, xla_compile_s=time.perf_counter() - t2)
    rec["prepared_bytes"] = run.step.prepared_bytes
    out = {k: np.asarray(x) for k, x in exe(*args).items()}
    py_call, _ = wl.pyscf_gccsd(so)
    amps = wl.amplitudes(so)
    rec["check"] = compare(out, amps, so.denominators(), py_call(), _gccsd_energy(so, amps))
    rec.update(timed_pair({"pyscf": py_call, "sq_jax": lambda: exe(*args)}, reps, warm=0))
    return rec


def _gccsd_energy(so: Any, amps: dict) -> float:
    """PySCF's GCCSD energy function at ``amps`` (it reads only ``fock`` and ``oovv``)."""
    from types import SimpleNamespace

    from pyscf.cc import gccsd

    o = so.nocc
    eris = SimpleNamespace(fock=np.asarray(so.fock), oovv=np.asarray(so.eri)[:o, :o, o:, o:])
    t1, t2 = amps[T1].T, amps[T2].transpose(2, 3, 0, 1)
    return float(gccsd.energy(None, t1, t2, eris))


def hand_count_ccsd_cs(o: int, v: int) -> float:
    """The textbook closed-shell CCSD FLOPs per iteration of bench/README.md ("FLOP
    counts"): per class o^m v^n, the number of contractions × 2·o^m·v^n."""
    classes = {(2, 4): 1, (3, 3): 6, (4, 2): 2, (2, 3): 6, (1, 4): 1, (3, 2): 7}
    return float(sum(n * 2 * o**m * v**k for (m, k), n in classes.items()))


def closed_shell_iteration(mf: Any, reps: int, matmul: tuple[Callable, int]) -> dict:
    """sq_jax ``ccsd_cs`` against PySCF's ``cc.CCSD(mf)`` ``update_amps`` on the same
    orbitals, with the FLOP rate over a JAX matmul timed in the same loop."""
    sq_run = sq_iteration(mf, df=False)
    py = pyscf_closed_shell(mf, sq_run["amps"])
    rec: dict[str, Any] = {"sq_jax": sq_run["record"], "pyscf": py["record"]}
    rec["check"] = compare(sq_run["out"], sq_run["amps"], sq_run["dens"], py["new"], py["energy"])
    mm, mm_flops = matmul
    fns = {"pyscf": py["call"], "sq_jax": sq_run["call"], "jax_matmul": mm}
    rec.update(timed_pair(fns, reps, warm=1))
    t = rec["times"]
    mm_rate = mm_flops / t["jax_matmul"]["median_s"]
    sq_rate = sq_run["record"]["flops"] / t["sq_jax"]["median_s"]
    o, v = sq_run["record"]["o"], sq_run["record"]["v"]
    rec["matmul_gflops"] = mm_rate / 1e9
    rec["sq_jax_gflops"] = sq_rate / 1e9
    rec["flop_rate_ratio"] = sq_rate / mm_rate
    rec["hand_count_flops"] = hand_count_ccsd_cs(o, v)
    rec["flops_over_hand_count"] = sq_run["record"]["flops"] / rec["hand_count_flops"]
    return rec
