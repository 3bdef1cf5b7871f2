"""Density-fitted closed-shell CCSD: ``ccsd_cs_df`` and ``sq_jax.cc.df``.

Checks: the DF text equations, evaluated with three-index factors B, equal the non-DF
``ccsd_cs`` equations evaluated on g = Σ_K B B (and the oracle) for random amplitudes; the
exact factorization of the shipped integrals; input errors; with PySCF, B from PySCF's
density fitting reproduces PySCF's DF-RCCSD energy through a DIIS solve of the text
equations.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import sq_jax as sq
from sq_jax import InputError
from sq_jax.cc.df import DFIntegrals, df_from_spatial, df_integrals
from sq_jax.cc.equations import load_equations
from sq_jax.cc.integrals import default_reference, default_spatial_system
from sq_jax.cc.solvers import solve_diis
from tests.helpers import cc_oracle_cs as oracle

T1, T2 = "t{a;i}", "t{a,a;i,i}"
H2O = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"


def _random_amplitudes(nocc, nvirt, seed):
    rng = np.random.default_rng(seed)
    t1 = 0.1 * rng.standard_normal((nvirt, nocc))
    t2 = 0.1 * rng.standard_normal((nvirt, nvirt, nocc, nocc))
    return t1, t2 + t2.transpose(1, 0, 3, 2)


def _df_vs_dense(dfi: DFIntegrals, seed: int = 11, fock_noise: float = 0.05):
    """Evaluate ccsd_cs_df on B and ccsd_cs on Σ B B; return both outputs and the inputs."""
    rng = np.random.default_rng(seed)
    n = dfi.nmo
    fock = np.asarray(dfi.fock) + fock_noise * (lambda x: x + x.T)(rng.standard_normal((n, n)))
    t1, t2 = _random_amplitudes(dfi.nocc, dfi.nvirt, seed)
    spaces = sq.Spaces({"Κ": dfi.naux}, i=dfi.nocc, a=dfi.nvirt)
    out_df = sq.evaluate_reference(
        sq.parse(load_equations("ccsd_cs_df")),
        spaces,
        {"f": fock, "B": np.asarray(dfi.b), T1: t1, T2: t2},
    )
    g = dfi.eri()
    out = sq.evaluate_reference(
        sq.parse(load_equations("ccsd_cs")),
        sq.Spaces(i=dfi.nocc, a=dfi.nvirt),
        {"f": fock, "g": g, T1: t1, T2: t2},
    )
    return out_df, out, (fock, g, t1, t2)


def test_df_term_counts_and_structure():
    eqs = sq.parse(load_equations("ccsd_cs_df"), expand_symmetrizers=False)
    dense = sq.parse(load_equations("ccsd_cs"), expand_symmetrizers=False)
    for eq, ref in zip(eqs, dense, strict=True):
        assert len(eq.rhs.terms) == len(ref.rhs.terms)
    text = load_equations("ccsd_cs_df")
    assert "g{" not in text
    assert text.count("B{") == 2 * load_equations("ccsd_cs").count("g{")


def test_exact_factorization_of_shipped_integrals():
    ints = default_spatial_system()
    dfi = df_from_spatial(ints)
    assert np.abs(dfi.eri() - ints.eri).max() < 1e-10
    np.testing.assert_array_equal(dfi.b, dfi.b.transpose(1, 0, 2))
    spatial = dfi.to_spatial()
    assert (spatial.nocc, spatial.nvirt, spatial.e_hf) == (ints.nocc, ints.nvirt, ints.e_hf)


def test_df_text_equals_dense_text_and_oracle_without_pyscf():
    dfi = df_from_spatial(default_spatial_system())
    out_df, out, (f, g, t1, t2) = _df_vs_dense(dfi)
    for key in ("E", "R1", "R2"):
        np.testing.assert_allclose(out_df[key], out[key], rtol=0, atol=1e-12)
    r1, r2 = oracle.ccsd_residuals(f, g, t1, t2, dfi.nocc)
    np.testing.assert_allclose(out_df["R1"], r1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out_df["R2"], r2, rtol=0, atol=1e-12)
    assert np.abs(r2).max() > 1.0


def test_bad_inputs_are_refused():
    with pytest.raises(InputError, match="shape"):
        DFIntegrals(fock=np.eye(3), b=np.ones((3, 2, 4)), nocc=1, nvirt=2)
    with pytest.raises(InputError, match="nocc"):
        DFIntegrals(fock=np.eye(3), b=np.ones((3, 3, 4)), nocc=3, nvirt=0)
    with pytest.raises(InputError, match="PySCF"):  # not an RHF object, or no PySCF
        df_integrals(object())
    ints = default_spatial_system()
    bad = ints.__class__(
        fock=ints.fock,
        eri=-np.asarray(ints.eri),
        mo_energies=ints.mo_energies,
        nocc=ints.nocc,
        nvirt=ints.nvirt,
        e_hf=ints.e_hf,
    )
    with pytest.raises(InputError, match="positive semidefinite"):
        df_from_spatial(bad)


def _solve_df_text(dfi: DFIntegrals, *, e_tol=1e-12, t_tol=1e-10):
    spaces = sq.Spaces({"Κ": dfi.naux}, i=dfi.nocc, a=dfi.nvirt)
    forest = sq.build_forest(sq.parse(load_equations("ccsd_cs_df")), spaces)
    fj, bj = jnp.asarray(dfi.fock), jnp.asarray(dfi.b)

    def evaluate(t):
        return sq.evaluate_reference_jax(forest, None, {"f": fj, "B": bj, T1: t[T1], T2: t[T2]})

    def residual(t):
        out = evaluate(t)
        return {T1: out["R1"], T2: out["R2"]}

    d1, d2 = dfi.denominators()
    t1, t2 = dfi.mp2_amplitudes()
    return solve_diis(
        residual,
        lambda t: evaluate(t)["E"],
        {T1: t1, T2: t2},
        {T1: d1, T2: d2},
        e_tol=e_tol,
        t_tol=t_tol,
        max_iter=200,
    )


# ----------------------------------------------------------------------------------------
# With PySCF


@pytest.fixture(scope="module")
def df_h2o_sto3g():
    pytest.importorskip("pyscf")
    from pyscf import cc, gto, scf

    mol = gto.M(atom=H2O, basis="sto-3g", verbose=0)
    mf = scf.RHF(mol).density_fit()
    mf.conv_tol = 1e-12
    mf.run()
    mycc = cc.RCCSD(mf)  # a density-fitted SCF gives PySCF's DF-RCCSD (dfccsd)
    mycc.conv_tol = 1e-12
    mycc.conv_tol_normt = 1e-10
    mycc.run()
    assert mycc.converged
    return mf, mycc


def test_df_integrals_match_pyscf_eris(df_h2o_sto3g):
    mf, mycc = df_h2o_sto3g
    dfi = df_integrals(mf)
    assert dfi.naux == mf.with_df.get_naoaux()
    eris = mycc.ao2mo()
    o = dfi.nocc
    chem = dfi.eri().transpose(0, 2, 1, 3)  # (pq|rs)
    np.testing.assert_allclose(np.asarray(eris.ovov), chem[:o, o:, :o, o:], rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(eris.fock), dfi.fock, rtol=0, atol=1e-12)


def test_df_text_residual_equals_dense_text_on_pyscf_factors(df_h2o_sto3g):
    mf, _ = df_h2o_sto3g
    out_df, out, _ = _df_vs_dense(df_integrals(mf), seed=5)
    for key in ("E", "R1", "R2"):
        np.testing.assert_allclose(out_df[key], out[key], rtol=0, atol=1e-12)


def test_df_text_solve_matches_pyscf_df_rccsd(df_h2o_sto3g):
    mf, mycc = df_h2o_sto3g
    res = _solve_df_text(df_integrals(mf))
    assert res.converged, res.message
    assert abs(float(res.energy) - mycc.e_corr) < 1e-9
    # Density fitting changes the energy measurably (the test is not the dense one).
    assert abs(mycc.e_corr - default_reference()["e_corr_rccsd"]) > 1e-6


def test_explicit_auxbasis_on_a_conventional_scf(df_h2o_sto3g):
    from pyscf import df, scf

    mf_df, _ = df_h2o_sto3g
    mf = scf.RHF(mf_df.mol)
    mf.conv_tol = 1e-12
    mf.run()
    ri = df_integrals(mf, auxbasis=df.make_auxbasis(mf.mol, mp2fit=True))
    jk = df_integrals(mf)
    assert ri.naux != jk.naux or ri.auxbasis != jk.auxbasis
    from sq_jax.cc.integrals import spatial_integrals

    dense = spatial_integrals(mf)
    np.testing.assert_allclose(ri.fock, dense.fock, rtol=0, atol=1e-12)
    assert np.abs(ri.eri() - dense.eri).max() < 1e-2  # a fit, not exact
