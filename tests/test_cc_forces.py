"""Orbital-relaxed CCSD forces, dipoles and geometries (pyscfad + sq_jax) against PySCF.

Oracles, all independent of sq_jax and pyscfad: PySCF's analytic CCSD gradient
(``mycc.nuc_grad_method().kernel()``, all electrons), central finite differences of
PySCF's CCSD energy in a uniform field, and a BFGS minimisation (SciPy) driven by PySCF's
analytic gradient. Each molecule's relaxed energy is built (compiled) once per module.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from pyscf import cc, gto, lib, scf
from scipy.optimize import minimize

from sq_jax import InputError
from sq_jax.cc.forces import ccsd_energy_function, relaxed_dipole
from sq_jax.cc.geomopt import optimize_geometry

H2O = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"
# No symmetry, off the axes: every dipole component is non-zero, the gradient too.
NH3 = "N 0.1 0.2 0.3; H 1.05 0.35 0.05; H -0.25 1.12 0.10; H -0.15 0.05 -0.62"
BOHR = 0.52917721092  # Å


@pytest.fixture(autouse=True, scope="module")
def _quiet_pyscf():
    """No temporary chkfile (left unclosed: ResourceWarning, an error here); one thread
    for PySCF, which otherwise oversubscribes a shared CI machine.
    """
    threads = lib.num_threads()
    lib.num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scf.hf, "MUTE_CHKFILE", True)
        yield
    lib.num_threads(threads)


def pyscf_ccsd(mol, field=None, frozen=None):
    """Tightly converged PySCF RHF + CCSD, in a uniform field (h += F·r) if given."""
    mf = scf.RHF(mol)
    mf.conv_tol = 1e-13
    if field is not None:
        h = mf.get_hcore() + np.einsum("x,xij->ij", field, mol.intor("int1e_r", comp=3))
        mf.get_hcore = lambda *args: h
    mf.kernel()
    mycc = cc.CCSD(mf, frozen=frozen)
    mycc.conv_tol, mycc.conv_tol_normt = 1e-13, 1e-11
    mycc.incore_complete = True  # DIIS in memory: no temporary file
    mycc.kernel()
    return mycc


def pyscf_field_energy(mol, field):
    """The CCSD energy with the nuclear-dipole term −F·Σ Z_A R_A (as the relaxed energy)."""
    nuclear = mol.atom_charges() @ mol.atom_coords()
    return pyscf_ccsd(mol, field).e_tot - field @ nuclear


@pytest.fixture(scope="module")
def h2o():
    mol = gto.M(atom=H2O, basis="6-31g", verbose=0)
    energy = ccsd_energy_function(mol)
    e, (grad, dfield) = jax.value_and_grad(energy, argnums=(0, 1))(energy.coords, jnp.zeros(3))
    return mol, energy, float(e), np.asarray(grad), -np.asarray(dfield)


@pytest.fixture(scope="module")
def nh3():
    mol = gto.M(atom=NH3, basis="sto-3g", verbose=0)
    return mol, ccsd_energy_function(mol)


def test_h2o_631g_energy_and_gradient_match_pyscf(h2o):
    mol, _, e, grad, _ = h2o
    mycc = pyscf_ccsd(mol)
    reference = mycc.nuc_grad_method().kernel()
    assert abs(e - mycc.e_tot) < 1e-9
    np.testing.assert_allclose(grad, reference, rtol=0, atol=1e-7)


def test_nh3_sto3g_gradient_matches_pyscf(nh3):
    mol, energy = nh3
    e, grad = jax.value_and_grad(energy)(energy.coords)
    mycc = pyscf_ccsd(mol)
    assert abs(float(e) - mycc.e_tot) < 1e-9
    np.testing.assert_allclose(grad, mycc.nuc_grad_method().kernel(), rtol=0, atol=1e-7)


def test_nh3_sto3g_spin_orbital_gradient_matches_pyscf(nh3):
    mol, _ = nh3
    energy = ccsd_energy_function(mol, closed_shell=False)
    grad = jax.grad(energy)(energy.coords)
    reference = pyscf_ccsd(mol).nuc_grad_method().kernel()
    np.testing.assert_allclose(grad, reference, rtol=0, atol=1e-7)


def test_nh3_sto3g_frozen_core_gradient_matches_pyscf(nh3):
    mol, _ = nh3
    energy = ccsd_energy_function(mol, frozen=1)  # N 1s uncorrelated, still relaxed
    e, grad = jax.value_and_grad(energy)(energy.coords)
    mycc = pyscf_ccsd(mol, frozen=1)
    assert abs(float(e) - mycc.e_tot) < 1e-9
    np.testing.assert_allclose(grad, mycc.nuc_grad_method().kernel(), rtol=0, atol=1e-7)


def finite_field_dipole(mol, axes, h=1e-3):
    """−dE/dF_k by the 4-point central difference (error O(h⁴))."""
    out = []
    for k in axes:
        step = np.zeros(3)
        step[k] = h
        e = {s: pyscf_field_energy(mol, s * step) for s in (-2, -1, 1, 2)}
        out.append(-(8 * (e[1] - e[-1]) - (e[2] - e[-2])) / (12 * h))
    return np.array(out)


def test_h2o_relaxed_dipole_matches_finite_field(h2o):
    mol, _, _, _, dipole = h2o
    np.testing.assert_allclose(dipole[2], finite_field_dipole(mol, [2])[0], atol=1e-6)
    np.testing.assert_allclose(dipole[:2], 0.0, atol=1e-9)  # C2v: along the axis only


def test_nh3_relaxed_dipole_matches_finite_field(nh3):
    mol, energy = nh3
    dipole = np.asarray(relaxed_dipole(energy))
    assert np.all(np.abs(dipole) > 1e-2)  # a generic orientation: all three components
    np.testing.assert_allclose(dipole, finite_field_dipole(mol, range(3)), rtol=0, atol=1e-6)


def distances(coords):
    x = np.asarray(coords).reshape(-1, 3)
    return np.linalg.norm(x[:, None] - x[None, :], axis=-1)[np.triu_indices(len(x), 1)]


def test_h2o_631g_geometry_optimisation_matches_pyscf(h2o):
    mol, energy, *_ = h2o
    ours = optimize_geometry(energy, gtol=1e-6)

    def pyscf_energy_and_gradient(x):
        mycc = pyscf_ccsd(mol.set_geom_(x.reshape(-1, 3), unit="Bohr", inplace=False))
        return mycc.e_tot, mycc.nuc_grad_method().kernel().ravel()

    start = np.asarray(mol.atom_coords()).ravel()
    reference = minimize(
        pyscf_energy_and_gradient, start, jac=True, method="BFGS", options={"gtol": 1e-6}
    )
    assert ours.converged and np.max(np.abs(reference.jac)) < 1e-6
    np.testing.assert_allclose(
        distances(ours.coords) * BOHR, distances(reference.x) * BOHR, rtol=0, atol=1e-4
    )
    assert abs(ours.energy - reference.fun) < 1e-8


def test_refuses_jit_and_bad_shapes(h2o):
    _, energy, *_ = h2o
    with pytest.raises(InputError, match="concrete coordinates"):
        jax.jit(energy)(energy.coords)
    with pytest.raises(InputError, match=r"shape \(3, 3\)"):
        energy(jnp.zeros((2, 3)))
    with pytest.raises(InputError, match=r"field must be"):
        energy(energy.coords, jnp.zeros(2))


def test_refuses_unknown_method_and_options_before_any_work():
    mol = gto.M(atom="H 0 0 0; H 0 0 0.74", basis="sto-3g", verbose=0)
    with pytest.raises(InputError) as err:
        ccsd_energy_function(mol, method="ccsdt", frozen=1, e_tool=1e-8)
    message = str(err.value)
    assert "method='ccsdt'" in message and "e_tool=: unknown" in message
    assert "frozen=1: expected" in message  # H2 has one occupied orbital: none to freeze
    with pytest.raises(InputError, match="spin=2"):
        ccsd_energy_function(gto.M(atom="O 0 0 0; O 0 0 1.2", spin=2, verbose=0))
