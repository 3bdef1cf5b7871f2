"""Λ, the CCSD one-particle density and EOM-EE-CCSD, against PySCF and finite differences.

H2O/6-31G (10 occupied, 16 virtual spin orbitals), spin-orbital CCSD converged tightly:

* λ equals PySCF's RCCSD ``solve_lambda`` expanded to spin orbitals (l2 = 4 λ2), and the
  symmetrized 1-RDM summed over spin equals RCCSD ``make_rdm1``, both to 1e-8; the
  unsymmetrized ov block is λ1 exactly (⟨a†i⟩ = λ_ia);
* the 5 lowest EOM-EE roots equal PySCF's ``EOMEETriplet``/``EOMEESinglet`` roots (each
  triplet three times) to 1e-7 Eh.

H2O/STO-3G: the Davidson roots equal the lowest eigenvalues of the dense Jacobian on the
unique amplitudes (no spurious or missed roots), and the derivative of the lowest root
(a triplet cluster) and of a singlet with respect to a z-dipole field equals central
finite differences (h = 1e-4) of re-converged CCSD + EOM to 1e-6 relative.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from sq_jax import InputError, cc
from sq_jax.cc._davidson import davidson
from sq_jax.cc.implicit import ImplicitEnergy
from sq_jax.cc.integrals import spin_orbital_integrals

pyscf = pytest.importorskip("pyscf")
from pyscf import cc as pyscf_cc  # noqa: E402
from pyscf import gto, scf  # noqa: E402
from pyscf.cc import eom_rccsd  # noqa: E402

H2O = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"
TIGHT = {"e_tol": 1e-12, "t_tol": 1e-10, "max_iter": 200}


def _rhf(basis: str):
    mf = scf.RHF(gto.M(atom=H2O, basis=basis, verbose=0))
    mf.conv_tol = 1e-12
    return mf.run()


def _spin_orbital_1(x: np.ndarray) -> np.ndarray:
    """Closed-shell [i, a] → our spin-orbital [A, I] (α/β interleaved)."""
    no, nv = x.shape
    out = np.zeros((2 * nv, 2 * no))
    out[0::2, 0::2] = out[1::2, 1::2] = x.T
    return out


def _spin_orbital_2(x: np.ndarray) -> np.ndarray:
    """Closed-shell [i, j, a, b] (αβ block) → our antisymmetric spin-orbital [A, B, I, J]."""
    no, nv = x.shape[0], x.shape[2]
    out = np.zeros((2 * nv, 2 * nv, 2 * no, 2 * no))
    same = (x - x.transpose(0, 1, 3, 2)).transpose(2, 3, 0, 1)
    for s in (0, 1):
        out[s::2, s::2, s::2, s::2] = same
        out[s::2, 1 - s :: 2, s::2, 1 - s :: 2] = x.transpose(2, 3, 0, 1)
        out[s::2, 1 - s :: 2, 1 - s :: 2, s::2] = -x.transpose(2, 3, 1, 0)
    return out


@pytest.fixture(scope="module")
def h2o_631g():
    mf = _rhf("6-31g")
    run = cc.ccsd(spin_orbital_integrals(mf), **TIGHT)
    ref = pyscf_cc.RCCSD(mf)
    ref.conv_tol, ref.conv_tol_normt = 1e-12, 1e-10
    ref.kernel()
    return mf, run, ref


def test_lambda_and_rdm1_equal_pyscf(h2o_631g):
    _, run, ref = h2o_631g
    l1, l2 = ref.solve_lambda()  # to conv_tol_normt = 1e-10
    lam = cc.solve_lambda(run)
    t1, t2 = run.result.amplitudes["t{a;i}"], run.result.amplitudes["t{a,a;i,i}"]
    assert np.abs(_spin_orbital_1(ref.t1) - t1).max() < 1e-8  # same orbitals, same t
    assert np.abs(_spin_orbital_2(ref.t2) - t2).max() < 1e-8
    assert np.abs(_spin_orbital_1(l1) - lam["t{a;i}"]).max() < 1e-8
    assert np.abs(_spin_orbital_2(l2) - 4 * lam["t{a,a;i,i}"]).max() < 1e-8
    d = cc.rdm1(run, lam)
    o, v = slice(0, run.nocc), slice(run.nocc, None)
    assert np.abs(d[o, v] - np.asarray(lam["t{a;i}"]).T).max() < 1e-12  # ⟨a†i⟩ = λ_ia
    assert abs(np.trace(d) - 10.0) < 1e-10
    spin_summed = d[0::2, 0::2] + d[1::2, 1::2]
    dm = ref.make_rdm1(l1=l1, l2=l2)
    assert np.abs(0.5 * (spin_summed + spin_summed.T) - dm).max() < 1e-8


def test_eom_ee_equals_pyscf_singlets_and_triplets(h2o_631g):
    _, run, ref = h2o_631g
    singlet, triplet = eom_rccsd.EOMEESinglet(ref), eom_rccsd.EOMEETriplet(ref)
    singlet.conv_tol = triplet.conv_tol = 1e-10
    singlets = np.atleast_1d(singlet.kernel(nroots=1)[0])
    triplets = np.atleast_1d(triplet.kernel(nroots=2)[0])
    expected = np.sort(np.concatenate([singlets, np.repeat(triplets, 3)]))[:5]
    eom = cc.eom_ee(run, nroots=5)
    assert np.abs(eom.energies - expected).max() < 1e-7, (eom.energies, expected)
    r = eom.amplitudes(3)  # the singlet: α and β parts equal, R2 antisymmetric
    assert np.abs(r["t{a;i}"][0::2, 0::2] - r["t{a;i}"][1::2, 1::2]).max() < 1e-6
    r2 = r["t{a,a;i,i}"]
    assert np.abs(r2 + r2.transpose(1, 0, 2, 3)).max() == 0.0


@pytest.fixture(scope="module")
def h2o_sto3g():
    mf = _rhf("sto-3g")
    ints = spin_orbital_integrals(mf)
    run = cc.ccsd(ints, **TIGHT)
    return mf, ints, run, cc.eom_ee(run, nroots=6, tol=1e-9)


def test_roots_equal_dense_jacobian(h2o_sto3g):
    *_, eom = h2o_sto3g
    space = eom.space
    right, _ = space.products()
    x0, columns = space.pack(space.amplitudes), jnp.eye(space.size)
    jacobian = np.column_stack([right(x0, space.integrals, e) for e in columns])
    assert jacobian.shape == (310, 310)  # 40 singles + 45·6 unique doubles
    exact = np.sort(np.linalg.eigvals(jacobian).real)[:6]
    assert exact[0] > 0.3  # no spurious (redundant, zero) roots on the unique space
    assert np.abs(eom.energies - exact).max() < 1e-9


def _roots_at(run, energy, ints, field, eps, guesses):
    f = jnp.asarray(ints.fock + eps * field)
    sol = energy.solve(f, ints.eri)
    shifted = dataclasses.replace(
        run,
        result=dataclasses.replace(run.result, amplitudes=sol.amplitudes),
        integrals={**run.integrals, "f": f},
    )
    return cc.eom_ee(shifted, nroots=4, tol=1e-9, guesses=guesses).energies


def test_root_derivatives_equal_finite_differences(h2o_sto3g):
    mf, ints, run, eom = h2o_sto3g
    c = mf.mo_coeff
    dipole_z = np.kron(c.T @ mf.mol.intor("int1e_r")[2] @ c, np.eye(2))
    energy = ImplicitEnergy(run)
    h = 1e-4
    plus, minus = (_roots_at(run, energy, ints, dipole_z, s * h, eom.vectors) for s in (1.0, -1.0))
    roots = (0, 3)  # a triplet component (3-fold cluster) and a singlet
    slopes = cc.excitation_energy_derivative(eom, dipole_z, root=roots)
    for root, slope in zip(roots, slopes, strict=True):
        fd = (plus[root] - minus[root]) / (2 * h)
        assert abs(slope - fd) < 1e-6 * abs(fd), (root, slope, fd)


def test_bad_input_is_refused(h2o_sto3g):
    *_, run, eom = h2o_sto3g
    with pytest.raises(InputError, match="nroots=0"):
        cc.eom_ee(run, nroots=0)
    stopped = dataclasses.replace(run.result, converged=False)
    with pytest.raises(InputError, match="needs converged amplitudes"):
        cc.eom_ee(dataclasses.replace(run, result=stopped))
    with pytest.raises(InputError, match="closed-shell"):
        cc.eom_ee(dataclasses.replace(run, closed_shell=True))
    with pytest.raises(InputError, match="lam must be a dict"):
        cc.rdm1(run, {"t{a;i}": np.zeros((4, 10))})
    with pytest.raises(InputError, match=r"root=6"):
        cc.excitation_energy_derivative(eom, np.zeros((14, 14)), root=6)
    with pytest.raises(InputError, match="without `result`"):
        cc.solve_lambda(object())
    with pytest.raises(InputError, match="guesses has shape"):
        davidson(lambda v: v, np.ones(4), 2, guesses=np.ones((3, 2)))


def test_unrestricted_lambda_and_rdm1_equal_pyscf_uccsd():
    """UHF OH radical/6-31G on the spin-orbital route: λ1 and the α and β 1-RDMs equal
    PySCF's UCCSD ``solve_lambda`` / ``make_rdm1`` (same UHF orbitals) to 1e-8."""
    mf = scf.UHF(gto.M(atom="O 0 0 0; H 0 0 0.97", basis="6-31g", spin=1, verbose=0))
    mf.conv_tol = 1e-12
    mf.run()
    with pytest.raises(InputError, match="spin_orbital_integrals"):
        cc.solve_lambda(cc.ccsd(mf, equations="ccsd_so", **TIGHT))  # a block-built run
    run = cc.ccsd(spin_orbital_integrals(mf), **TIGHT)  # occupied α, β, then virtual α, β
    ref = pyscf_cc.UCCSD(mf)
    ref.conv_tol, ref.conv_tol_normt = 1e-12, 1e-10
    ref.kernel()
    assert abs(run.e_corr - ref.e_corr) < 1e-9
    (l1a, l1b), l2 = ref.solve_lambda()
    lam = cc.solve_lambda(run)
    (noa, nob), nmo = mf.nelec, mf.mo_coeff[0].shape[1]
    oa, ob = np.arange(noa), noa + np.arange(nob)
    va, vb = np.arange(nmo - noa), nmo - noa + np.arange(nmo - nob)
    lam1 = np.asarray(lam["t{a;i}"])
    assert np.abs(lam1[np.ix_(va, oa)] - l1a.T).max() < 1e-8
    assert np.abs(lam1[np.ix_(vb, ob)] - l1b.T).max() < 1e-8
    d = cc.rdm1(run, lam)
    d = 0.5 * (d + d.T)
    dma, dmb = ref.make_rdm1(l1=(l1a, l1b), l2=l2)
    for occ, vir, want in ((oa, va, dma), (ob, vb, dmb)):
        orbitals = np.concatenate([occ, run.nocc + vir])  # PySCF's MO order of one spin
        assert np.abs(d[np.ix_(orbitals, orbitals)] - want).max() < 1e-8
