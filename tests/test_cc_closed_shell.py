"""The closed-shell (spin-adapted) CCSD/CCD text equations ``ccsd_cs`` and ``ccd_cs``.

Checks: term counts; the hand-written closed-shell oracle (``cc_oracle_cs``) equals the αβ
block of the spin-orbital oracle (``cc_oracle``) on spin-expanded amplitudes; the parsed
text evaluated by ``sq_jax.evaluate_reference`` equals the oracle for random amplitudes
and a non-canonical Fock matrix; DIIS solves with residuals from
``sq_jax.evaluate_reference_jax`` reproduce PySCF's RCCSD energies (shipped H2O/STO-3G
without PySCF; with PySCF also the residual against ``RCCSD.update_amps`` and H2O/6-31G).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import sq_jax as sq
from sq_jax.cc.equations import available, load_equations
from sq_jax.cc.integrals import (
    SpatialIntegrals,
    default_reference,
    default_spatial_system,
    spin_orbital_from_spatial,
)
from sq_jax.cc.solvers import solve_diis
from tests.helpers import cc_oracle as so_oracle
from tests.helpers import cc_oracle_cs as oracle

T1, T2 = "t{a;i}", "t{a,a;i,i}"
H2O = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"
# docs/benchmarks.md, "Reference numbers": PySCF 2.14 RCCSD, all electrons.
E_RCCSD_631G = -0.13537949962050


@pytest.fixture(scope="module")
def ints():
    return default_spatial_system()


@pytest.fixture(scope="module")
def random_inputs(ints):
    """Random T1, pair-symmetric T2 (T2[a,b,i,j] = T2[b,a,j,i]) and a non-canonical Fock."""
    rng = np.random.default_rng(7)
    nocc, nvirt, n = ints.nocc, ints.nvirt, ints.nmo
    fock = ints.fock + 0.05 * (lambda x: x + x.T)(rng.standard_normal((n, n)))
    t1 = 0.1 * rng.standard_normal((nvirt, nocc))
    t2 = 0.1 * rng.standard_normal((nvirt, nvirt, nocc, nocc))
    t2 = t2 + t2.transpose(1, 0, 3, 2)
    return {"f": fock, "g": ints.eri, T1: t1, T2: t2}


def _n_terms(expr) -> int:
    return len(expr.terms) if isinstance(expr, sq.Sum) else 1


def _mp2(f, g, nocc):
    return oracle.mp2_guess(f, g, nocc)


def _solve_text(name, f, g, nocc, *, e_tol=1e-12, t_tol=1e-10):
    """DIIS with residuals and energy from the parsed text via evaluate_reference_jax."""
    nvirt = f.shape[0] - nocc
    forest = sq.build_forest(sq.parse(load_equations(name)), sq.Spaces(i=nocc, a=nvirt))
    fj, gj = jnp.asarray(f), jnp.asarray(g)

    def evaluate(t):
        return sq.evaluate_reference_jax(forest, None, {"f": fj, "g": gj, T1: t[T1], T2: t[T2]})

    def residual(t):
        out = evaluate(t)
        return {T1: out["R1"], T2: out["R2"]}

    d1, d2 = oracle.denominators(f, nocc)
    t1, t2 = _mp2(f, g, nocc)
    return solve_diis(
        residual,
        lambda t: evaluate(t)["E"],
        {T1: t1, T2: t2},
        {T1: d1, T2: d2},
        e_tol=e_tol,
        t_tol=t_tol,
        max_iter=200,
    )


def test_sets_are_listed():
    assert {"ccsd_cs", "ccd_cs"} <= set(available())


@pytest.mark.parametrize(
    ("name", "counts"),
    [("ccsd_cs", {"E": 5, "R1": 26, "R2": 55}), ("ccd_cs", {"E": 2, "R2": 20})],
)
def test_term_counts(name, counts):
    eqs = sq.parse(load_equations(name), expand_symmetrizers=False)
    got = {getattr(eq.lhs, "label", str(eq.lhs)): _n_terms(eq.rhs) for eq in eqs}
    assert got == counts
    # Every R2 term is Ŝ-led; expanding Ŝ{i_1,i_2;a_1,a_2} doubles the count.
    r2 = next(eq for eq in eqs if getattr(eq.lhs, "label", None) == "R2")
    assert all(t.factors[0].label == "Ŝ" for t in r2.rhs.terms)
    assert _n_terms(sq.parse(load_equations(name))[-1].rhs) == 2 * counts["R2"]


def _spin_expand(t1, t2):
    """Spin-orbital T1, T2 (α/β interleaved) of closed-shell amplitudes."""
    e2 = np.eye(2)
    big = np.einsum("abij,xz,yw->axbyizjw", t2, e2, e2)
    nv, no = t1.shape
    big = big.reshape(2 * nv, 2 * nv, 2 * no, 2 * no)
    return np.kron(t1, e2), big - big.transpose(0, 1, 3, 2)


def test_oracle_equals_spin_orbital_alpha_beta_block(ints, random_inputs):
    f, g, t1, t2 = (random_inputs[k] for k in ("f", "g", T1, T2))
    spatial = SpatialIntegrals(
        fock=f, eri=g, mo_energies=np.diag(f).copy(), nocc=ints.nocc, nvirt=ints.nvirt, e_hf=0.0
    )
    so = spin_orbital_from_spatial(spatial)
    s1, s2 = _spin_expand(t1, t2)
    r1_so, r2_so = so_oracle.ccsd_residuals(so.fock, so.eri, s1, s2, so.nocc)
    r1, r2 = oracle.ccsd_residuals(f, g, t1, t2, ints.nocc)
    np.testing.assert_allclose(r1, r1_so[0::2, 0::2], rtol=0, atol=1e-12)
    np.testing.assert_allclose(r2, r2_so[0::2, 1::2, 0::2, 1::2], rtol=0, atol=1e-12)
    e_so = so_oracle.ccsd_energy(so.fock, so.eri, s1, s2, so.nocc)
    assert abs(oracle.ccsd_energy(f, g, t1, t2, ints.nocc) - e_so) < 1e-12
    # The residual keeps the pair symmetry of T2.
    np.testing.assert_allclose(r2, r2.transpose(1, 0, 3, 2), rtol=0, atol=1e-12)


def test_ccsd_text_equals_oracle(ints, random_inputs):
    spaces = sq.Spaces(i=ints.nocc, a=ints.nvirt)
    out = sq.evaluate_reference(sq.parse(load_equations("ccsd_cs")), spaces, random_inputs)
    f, g, t1, t2 = (random_inputs[k] for k in ("f", "g", T1, T2))
    r1, r2 = oracle.ccsd_residuals(f, g, t1, t2, ints.nocc)
    assert abs(float(out["E"]) - oracle.ccsd_energy(f, g, t1, t2, ints.nocc)) < 1e-12
    np.testing.assert_allclose(out["R1"], r1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["R2"], r2, rtol=0, atol=1e-12)
    assert np.abs(r2).max() > 1.0  # the comparison is not vacuous


def test_ccd_text_equals_oracle(ints, random_inputs):
    spaces = sq.Spaces(i=ints.nocc, a=ints.nvirt)
    inputs = {k: v for k, v in random_inputs.items() if k != T1}
    out = sq.evaluate_reference(sq.parse(load_equations("ccd_cs")), spaces, inputs)
    f, g, t2 = inputs["f"], inputs["g"], inputs[T2]
    np.testing.assert_allclose(out["R2"], oracle.ccd_residual(f, g, t2, ints.nocc), atol=1e-12)
    t1 = np.zeros_like(random_inputs[T1])
    assert abs(float(out["E"]) - oracle.ccsd_energy(f, g, t1, t2, ints.nocc)) < 1e-12


def test_oracle_solve_matches_pyscf_reference(ints):
    e, *_, converged = oracle.solve_ccsd(ints.fock, ints.eri, ints.nocc)
    assert converged
    assert abs(e - default_reference()["e_corr_rccsd"]) < 1e-9


def test_diis_with_text_equations_matches_pyscf(ints):
    ref = default_reference()
    res = _solve_text("ccsd_cs", np.asarray(ints.fock), np.asarray(ints.eri), ints.nocc)
    assert res.converged, res.message
    assert abs(float(res.energy) - ref["e_corr_rccsd"]) < 1e-9


# ----------------------------------------------------------------------------------------
# With PySCF


@pytest.fixture(scope="module")
def pyscf_h2o_sto3g():
    pyscf = pytest.importorskip("pyscf")
    from pyscf import gto, scf

    mol = gto.M(atom=H2O, basis="sto-3g", verbose=0)
    mf = scf.RHF(mol)
    mf.conv_tol = 1e-12
    mf.run()
    return pyscf, mf


def test_oracle_residual_equals_pyscf_update_amps(pyscf_h2o_sto3g):
    """R = (t_new − t)·D with PySCF's Jacobi step t_new = RCCSD.update_amps(t)."""
    _, mf = pyscf_h2o_sto3g
    from pyscf import cc

    from sq_jax.cc.integrals import spatial_integrals

    ints = spatial_integrals(mf)
    mycc = cc.RCCSD(mf)
    eris = mycc.ao2mo()
    rng = np.random.default_rng(3)
    t1 = 0.05 * rng.standard_normal((ints.nvirt, ints.nocc))
    t2 = 0.05 * rng.standard_normal((ints.nvirt, ints.nvirt, ints.nocc, ints.nocc))
    t2 = t2 + t2.transpose(1, 0, 3, 2)
    new1, new2 = mycc.update_amps(t1.T.copy(), t2.transpose(2, 3, 0, 1).copy(), eris)
    d1, d2 = ints.denominators()
    r1, r2 = oracle.ccsd_residuals(ints.fock, ints.eri, t1, t2, ints.nocc)
    np.testing.assert_allclose((new1.T - t1) * d1, r1, rtol=0, atol=1e-12)
    np.testing.assert_allclose((new2.transpose(2, 3, 0, 1) - t2) * d2, r2, rtol=0, atol=1e-12)
    assert np.abs(r2).max() > 0.1


def test_h2o_631g_text_equations_match_benchmark():
    pytest.importorskip("pyscf")
    from pyscf import gto, scf

    from sq_jax.cc.integrals import spatial_integrals

    mol = gto.M(atom=H2O, basis="6-31g", verbose=0)
    mf = scf.RHF(mol)
    mf.conv_tol = 1e-12
    mf.run()
    ints = spatial_integrals(mf)
    assert (ints.nocc, ints.nvirt) == (5, 8)
    res = _solve_text("ccsd_cs", np.asarray(ints.fock), np.asarray(ints.eri), ints.nocc)
    assert res.converged, res.message
    assert abs(float(res.energy) - E_RCCSD_631G) < 1e-9
