"""Build the shipped default system of ``sq_jax.cc``: H2O / STO-3G, all electrons, RHF.

Writes ``src/sq_jax/cc/data/h2o_sto3g.npz`` (closed-shell MO integrals: Fock matrix and
physicist ⟨pq|rs⟩, float64, occupied orbitals first) and ``h2o_sto3g.json`` (reference
energies and PySCF's iteration counts at the thresholds used by the sq_jax solver tests).

Needs PySCF. Run from the repository root:

    .venv/bin/python scripts/make_default_system.py
"""

from __future__ import annotations

import argparse
import json
import pathlib

import numpy as np
import pyscf
from pyscf import cc, gto, scf

from sq_jax.cc.integrals import spatial_integrals

GEOMETRY = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"
BASIS = "sto-3g"
SCF_CONV_TOL = 1e-12
CC_CONV_TOL = 1e-10  # |ΔE| threshold, PySCF's conv_tol
CC_CONV_TOL_NORMT = 1e-8  # ‖Δt‖ threshold, PySCF's conv_tol_normt


def main() -> None:
    root = pathlib.Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=root / "src" / "sq_jax" / "cc" / "data", type=pathlib.Path)
    args = parser.parse_args()

    mol = gto.M(atom=GEOMETRY, basis=BASIS, unit="Angstrom", verbose=0)
    mf = scf.RHF(mol)
    mf.conv_tol = SCF_CONV_TOL
    mf.kernel()
    assert mf.converged, "RHF did not converge"
    ints = spatial_integrals(mf)

    rcc = cc.RCCSD(mf)
    rcc.conv_tol, rcc.conv_tol_normt = CC_CONV_TOL, CC_CONV_TOL_NORMT
    rcc.kernel()
    gcc = cc.GCCSD(scf.addons.convert_to_ghf(mf))
    gcc.conv_tol, gcc.conv_tol_normt = CC_CONV_TOL, CC_CONV_TOL_NORMT
    gcc.kernel()
    tight = cc.GCCSD(scf.addons.convert_to_ghf(mf))
    tight.conv_tol, tight.conv_tol_normt, tight.max_cycle = 1e-13, 1e-11, 200
    tight.kernel()
    assert rcc.converged and gcc.converged and tight.converged, "PySCF CCSD did not converge"

    args.out.mkdir(parents=True, exist_ok=True)
    np.savez(
        args.out / "h2o_sto3g.npz",
        fock=np.asarray(ints.fock, dtype=np.float64),
        eri=np.asarray(ints.eri, dtype=np.float64),
        nocc=np.int64(ints.nocc),
        nvirt=np.int64(ints.nvirt),
        e_hf=np.float64(ints.e_hf),
    )
    reference = {
        "system": "H2O",
        "geometry_angstrom": GEOMETRY,
        "basis": BASIS,
        "frozen_core": False,
        "scf_conv_tol": SCF_CONV_TOL,
        "e_hf": float(mf.e_tot),
        "e_nuc": float(mol.energy_nuc()),
        "e_corr_rccsd": float(rcc.e_corr),
        "e_corr_gccsd": float(gcc.e_corr),
        "e_corr_gccsd_tight": float(tight.e_corr),
        "tight_conv_tol": 1e-13,
        "tight_conv_tol_normt": 1e-11,
        "cc_conv_tol": CC_CONV_TOL,
        "cc_conv_tol_normt": CC_CONV_TOL_NORMT,
        "pyscf_diis_space": int(gcc.diis_space),
        "pyscf_diis_start_cycle": int(gcc.diis_start_cycle),
        "pyscf_rccsd_cycles": int(rcc.cycles),
        "pyscf_gccsd_cycles": int(gcc.cycles),
        "pyscf_version": pyscf.__version__,
        "note": "E_corr from PySCF cc.RCCSD / cc.GCCSD (GHF from scf.addons.convert_to_ghf), "
        "started from MP2 amplitudes; cycles = PySCF's iteration count at the thresholds.",
    }
    (args.out / "h2o_sto3g.json").write_text(json.dumps(reference, indent=2) + "\n")
    print(json.dumps(reference, indent=2))


if __name__ == "__main__":
    main()
