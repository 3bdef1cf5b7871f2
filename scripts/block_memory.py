"""Bytes of the integral blocks each CCSD route builds, against the full tensors.

For H2O in a basis (default cc-pVDZ) and each of ccsd_so, ccsd_cs, ccsd_so_df and
ccsd_cs_df, prints the blocks the compiled equations read, their bytes, the peak that
tracemalloc sees while building them, and the bytes of the full ⟨pq‖rs⟩ (spin-orbital) or
⟨pq|rs⟩ (spatial) tensor; then the peaks of the all-at-once builders for comparison.

Usage (from the repository root, with PySCF installed):
    python scripts/block_memory.py [basis]
"""

import sys
import tracemalloc

import sq_jax as sq
from sq_jax.cc.blocks import block_builder, read_blocks
from sq_jax.cc.df import df_integrals
from sq_jax.cc.equations import load_equations
from sq_jax.cc.integrals import spatial_integrals, spin_orbital_integrals

H2O = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"


def traced(fn):
    tracemalloc.start()
    value = fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return value, peak


def main() -> None:
    from pyscf import gto, scf

    basis = sys.argv[1] if len(sys.argv) > 1 else "cc-pvdz"
    mf = scf.RHF(gto.M(atom=H2O, basis=basis, verbose=0)).run(conv_tol=1e-10)
    n = mf.mo_coeff.shape[1]
    print(f"H2O/{basis}: {n} orbitals; MiB = 2**20 bytes")
    print(f"{'route':<12}{'blocks':>7}{'built MiB':>11}{'peak MiB':>10}{'full g MiB':>12}")
    for name in ("ccsd_so", "ccsd_cs", "ccsd_so_df", "ccsd_cs_df"):
        spin_orbital = "_so" in name
        builder = block_builder(mf, spin_orbital=spin_orbital, df=name.endswith("_df"))
        forest = sq.build_forest(sq.parse(load_equations(name)), builder.spaces())
        keys = read_blocks(forest)
        ints, peak = traced(lambda b=builder, k=keys: b.build(k))
        full = ((2 if spin_orbital else 1) * n) ** 4 * 8
        mib = [x / 2**20 for x in (ints.nbytes, peak, full)]
        print(f"{name:<12}{len(keys):>7}{mib[0]:>11.2f}{mib[1]:>10.2f}{mib[2]:>12.2f}")
    for fn in (spin_orbital_integrals, spatial_integrals, df_integrals):
        _, peak = traced(lambda f=fn: f(mf))
        print(f"all-at-once {fn.__name__}: peak {peak / 2**20:.2f} MiB")


if __name__ == "__main__":
    main()
