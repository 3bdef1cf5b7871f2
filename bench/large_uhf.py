"""One unrestricted CCSD iteration: sq_jax's spin-blocked ``ccsd_uhf`` against PySCF's
``cc.UCCSD(mf).update_amps``, on the same UHF orbitals and the same (MP2) amplitudes.

As in ``large.py``, PySCF returns new amplitudes, so the check compares sq_jax's Jacobi
step t + R/D (per spin block, D from the Fock diagonal of each orbital's spin) with
PySCF's new amplitudes, and sq_jax's R with PySCF's (t_new − t)·D, each relative to its
largest element. sq_jax reads the spin blocks its program reads (``cc.unrestricted``, as
``cc.ccsd(mf)`` builds them), PySCF its own ``ao2mo``. The spin-orbital program's FLOPs
(``ccsd_so`` over the same orbitals, sq_jax passes only) are reported next to the
spin-blocked one's.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _timing import SQ_XLA, log
from large import pyscf_ao2mo, timed_pair

import sq_jax as sq
from sq_jax.cc.equations import load_equations
from sq_jax.cc.unrestricted import AMPLITUDES, RESIDUAL_OF, read_spin_blocks, spin_block_builder
from sq_jax.forest.inputs import input_specs

OH = "O 0 0 0; H 0 0 0.97"
CH2 = "C 0 0 0.1; H 0 0.99 -0.55; H 0 -0.99 -0.55"  # triplet CH2, Å (as the tests)
NAMES = ("t1a", "t1b", "t2aa", "t2ab", "t2bb")


def run_uhf(atom: str, basis: str, spin: int) -> Any:
    """UHF, all electrons, conv_tol 1e-12."""
    from pyscf import gto, scf

    mf = scf.UHF(gto.M(atom=atom, basis=basis, spin=spin, verbose=0))
    mf.conv_tol = 1e-12
    return mf.run()


def sq_uhf_iteration(mf: Any) -> dict[str, Any]:
    """Compile ``ccsd_uhf`` (E and the five residuals) for ``mf``, build exactly the blocks
    it reads and the MP2 amplitudes, compile for XLA and call once."""
    t0 = time.perf_counter()
    builder = spin_block_builder(mf)
    spaces = builder.spaces()
    prog = sq.compile(load_equations("ccsd_uhf"), spaces)
    t1 = time.perf_counter()
    ints = builder.build(read_spin_blocks(prog))
    amps = {k: np.ascontiguousarray(v) for k, v in ints.mp2_amplitudes().items()}
    reads = {s.block_key for s in input_specs(prog.schedule.annotated.forest)}
    inputs = {k: jnp.asarray(v) for k, v in {**ints.inputs(), **amps}.items() if k in reads}
    t2 = time.perf_counter()
    exe = prog.jitted.lower(inputs).compile(SQ_XLA)
    t3 = time.perf_counter()
    out = jax.block_until_ready(exe(inputs))
    t4 = time.perf_counter()
    (oa, ob), (va, vb) = builder.nocc, builder.nvirt
    so_spaces = sq.Spaces(i=oa + ob, a=va + vb)
    so_flops = sq.compile(load_equations("ccsd_so"), so_spaces).flops
    return {
        "call": lambda: exe(inputs),
        "out": {k: np.asarray(v) for k, v in out.items()},
        "amps": amps,
        "dens": ints.denominators(),
        "record": {
            "nocc": [oa, ob],
            "nvirt": [va, vb],
            "flops": prog.flops,
            "so_flops": so_flops,
            "block_bytes": int(sum(b.nbytes for b in ints.blocks.values())),
            "passes_s": t1 - t0,
            "blocks_s": t2 - t1,
            "xla_compile_s": t3 - t2,
            "first_call_s": t4 - t3,
        },
    }


def pyscf_uccsd(mf: Any, amps: dict[str, np.ndarray]) -> dict[str, Any]:
    """PySCF's ``cc.UCCSD(mf)``: its own ``ao2mo``, one ``update_amps`` and the energy at
    ``amps`` (converted to its layouts t1[i, a], t2[i, j, a, b])."""
    from pyscf import cc

    mycc, eris, t0, t1 = pyscf_ao2mo(cc.UCCSD(mf))
    a1, b1, aa, ab, bb = (amps[k] for k in AMPLITUDES)
    t1_ = (a1.T.copy(), b1.T.copy())
    t2_ = tuple(x.transpose(2, 3, 0, 1).copy() for x in (aa, ab, bb))
    new = mycc.update_amps(t1_, t2_, eris)
    t2 = time.perf_counter()
    return {
        "call": lambda: mycc.update_amps(t1_, t2_, eris),
        "new": (*new[0], *new[1]),
        "energy": float(mycc.energy(t1_, t2_, eris)),
        "record": {
            "class": f"{type(mycc).__module__}.{type(mycc).__name__}",
            "ao2mo_s": t1 - t0,
            "first_update_s": t2 - t1,
        },
    }


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    """max |a − b| over max |b|; absolute where b vanishes (below 1e-10: a block zero by
    symmetry, such as t2αα with one α virtual)."""
    if a.size == 0:
        return 0.0
    scale = float(np.max(np.abs(b)))
    return float(np.max(np.abs(a - b))) / (scale if scale > 1e-10 else 1.0)


def compare_uhf(out: dict, amps: dict, dens: dict, new_pyscf: tuple, e_pyscf: float) -> dict:
    """sq_jax's Jacobi update and residuals per block against PySCF's new amplitudes."""
    of_key = {v: k for k, v in RESIDUAL_OF.items()}
    rec = {}
    for key, name, new in zip(AMPLITUDES, NAMES, new_pyscf, strict=True):
        res = np.asarray(out[of_key[key]])
        py = new.T if new.ndim == 2 else new.transpose(2, 3, 0, 1)
        rec[f"rel_update_{name}"] = _rel(amps[key] + res / dens[key], py)
        rec[f"rel_residual_{name}"] = _rel(res, (py - amps[key]) * dens[key])
    rec["e_sq_jax"] = float(out["E"])
    rec["e_pyscf"] = e_pyscf
    rec["abs_e_diff"] = abs(float(out["E"]) - e_pyscf)
    rec["max_rel"] = max(v for k, v in rec.items() if k.startswith("rel_"))
    return rec


def unrestricted_iteration(name: str, atom: str, basis: str, spin: int, reps: int) -> dict:
    """sq_jax ``ccsd_uhf`` against PySCF ``UCCSD.update_amps``, interleaved medians."""
    t0 = time.perf_counter()
    mf = run_uhf(atom, basis, spin)
    scf_s = time.perf_counter() - t0
    log("UHF done", f"{scf_s:.1f} s")
    sq_run = sq_uhf_iteration(mf)
    log("sq_jax compiled", sq_run["record"])
    py = pyscf_uccsd(mf, sq_run["amps"])
    rec: dict[str, Any] = {"sq_jax": sq_run["record"], "pyscf": py["record"], "scf_s": scf_s}
    rec.update(system=name, atom=atom, basis=basis, spin=spin)
    rec["check"] = compare_uhf(
        sq_run["out"], sq_run["amps"], sq_run["dens"], py["new"], py["energy"]
    )
    rec.update(timed_pair({"pyscf": py["call"], "sq_jax": sq_run["call"]}, reps, warm=1))
    return rec
