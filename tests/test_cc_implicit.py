"""Implicit (adjoint) derivatives of the converged CC energy, on the shipped H2O/STO-3G.

The oracle is a fourth-order central finite difference of converged energies,
E'(0) ≈ [E(−2h) − 8E(−h) + 8E(h) − E(2h)] / 12h, along a fixed symmetric
"dipole-like" one-electron perturbation f + εV (and a two-electron one g + εW). The same
spatial V is used for the spin-orbital (V ⊗ 1₂) and closed-shell runs, so their
derivatives must agree too. No PySCF needed.
"""

from __future__ import annotations

import dataclasses
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import pytest

from sq_jax import ConvergenceError, InputError, cc
from sq_jax.cc.implicit import ImplicitEnergy, converged_energy, implicit_energy
from sq_jax.cc.integrals import default_reference, default_spatial_system, default_system
from sq_jax.cc.solvers import CCStatus, antisymmetrize

T1, T2 = "t{a;i}", "t{a,a;i,i}"
H = 1e-3  # finite-difference step; 4th-order stencil: truncation ~H^4, noise ~1e-14/H


@dataclasses.dataclass(frozen=True)
class Case:
    run: cc.CCRun
    energy: ImplicitEnergy
    f: jax.Array
    g: jax.Array
    v: jax.Array  # one-electron perturbation direction
    w: jax.Array  # two-electron perturbation direction
    e: float  # converged energy at (f, g)
    de_v: float  # jvp along (v, 0)


def _spatial_perturbations(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(20240607)
    v = rng.standard_normal((n, n))
    w = rng.standard_normal((n,) * 4)
    return 0.1 * (v + v.T), 0.01 * w


def _make_case(closed_shell: bool) -> Case:
    ints = default_spatial_system() if closed_shell else default_system()
    n = default_spatial_system().nmo
    v, w = _spatial_perturbations(n)
    if not closed_shell:  # the same physical perturbation in the α/β-interleaved basis
        v = np.kron(v, np.eye(2))
        w = 0.1 * np.random.default_rng(11).standard_normal((2 * n,) * 4)
    run = cc.ccsd(closed_shell=closed_shell)
    energy = implicit_energy(run)
    f, g = jnp.asarray(ints.fock), jnp.asarray(ints.eri)
    e, de = jax.jvp(energy, (f, g), (jnp.asarray(v), jnp.zeros_like(g)))
    return Case(run, energy, f, g, jnp.asarray(v), jnp.asarray(w), float(e), float(de))


@pytest.fixture(scope="module")
def so():
    return _make_case(closed_shell=False)


@pytest.fixture(scope="module")
def cs():
    return _make_case(closed_shell=True)


@pytest.fixture(params=["so", "cs"])
def case(request):
    return request.getfixturevalue(request.param)


def _fd(fn, h=H):
    e = [float(fn(k * h)) for k in (-2, -1, 1, 2)]
    return (e[0] - 8 * e[1] + 8 * e[2] - e[3]) / (12 * h)


def test_energy_matches_the_run_and_pyscf(case):
    ref = default_reference()
    assert abs(case.e - ref["e_corr_gccsd_tight"]) < 1e-10
    assert abs(case.e - case.run.e_corr) < 1e-9
    sol = case.energy.solve(case.f, case.g)
    assert sol.status == CCStatus.CONVERGED
    assert int(sol.iterations) <= 6  # warm-started from the run's amplitudes


def test_fock_derivative_matches_finite_difference(case):
    fd = _fd(lambda eps: case.energy.solve(case.f + eps * case.v, case.g).energy)
    print(f"dE/dε (f + εV): jvp {case.de_v:.15e}  fd {fd:.15e}  rel {abs(fd / case.de_v - 1):.2e}")
    assert abs(case.de_v) > 1e-5
    assert abs(fd - case.de_v) <= 1e-6 * abs(case.de_v)


def test_eri_derivative_matches_finite_difference(case):
    de = jax.jvp(case.energy, (case.f, case.g), (jnp.zeros_like(case.f), case.w))[1]
    fd = _fd(lambda eps: case.energy.solve(case.f, case.g + eps * case.w).energy)
    print(f"dE/dε (g + εW): jvp {float(de):.15e}  fd {fd:.15e}  rel {abs(fd / de - 1):.2e}")
    assert abs(fd - float(de)) <= 1e-6 * abs(float(de))


def test_grad_is_finite_and_consistent_with_jvp(case):
    g_f, g_g = jax.grad(case.energy, argnums=(0, 1))(case.f, case.g)
    assert bool(jnp.isfinite(g_f).all()) and bool(jnp.isfinite(g_g).all())
    np.testing.assert_allclose(float(jnp.vdot(g_f, case.v)), case.de_v, rtol=1e-10)
    de_w = jax.jvp(case.energy, (case.f, case.g), (jnp.zeros_like(case.f), case.w))[1]
    np.testing.assert_allclose(float(jnp.vdot(g_g, case.w)), float(de_w), rtol=1e-10)
    direct = case.energy.gradient(case.f, case.g)
    np.testing.assert_allclose(direct[0], g_f, rtol=0, atol=1e-14)
    np.testing.assert_allclose(direct[1], g_g, rtol=0, atol=1e-14)


def test_spin_orbital_and_closed_shell_derivatives_agree(so, cs):
    assert abs(so.e - cs.e) < 1e-11
    assert abs(so.de_v - cs.de_v) <= 1e-9 * abs(cs.de_v)


def test_multipliers_are_physical(so, cs):
    lam = so.energy.multipliers(so.f, so.g)
    np.testing.assert_allclose(antisymmetrize(lam)[T2], lam[T2], atol=1e-14)
    lam_cs = cs.energy.multipliers(cs.f, cs.g)
    np.testing.assert_allclose(lam_cs[T2], lam_cs[T2].transpose(1, 0, 3, 2), atol=1e-14)
    assert set(lam) == {T1, T2} and float(jnp.abs(lam[T2]).max()) > 1e-3


@pytest.fixture(scope="module")
def ccd_cs():
    ints = default_spatial_system()
    return cc.ccd(closed_shell=True), jnp.asarray(ints.fock), jnp.asarray(ints.eri)


def test_failures_are_values_or_raise(ccd_cs):
    run, f, g = ccd_cs
    stuck = implicit_energy(run, max_iter=1, throw=False).solve(f + 0.05 * jnp.eye(7), g)
    assert stuck.status == CCStatus.MAX_ITERATIONS and int(stuck.iterations) == 1
    stuck_energy = implicit_energy(run, max_iter=1)
    with pytest.raises(ConvergenceError, match="CCD forward solve did not converge after 1 it"):
        stuck_energy(f + 0.05 * jnp.eye(7), g)
    with pytest.raises(ConvergenceError, match="forward solve") as err:
        jax.grad(stuck_energy)(f + 0.05 * jnp.eye(7), g)
    assert err.value.iterations == 1 and err.value.residual_norm > 0
    # Traced under jax.jit, a failure can only surface through eqx.error_if (as
    # JaxRuntimeError, or EquinoxRuntimeError under eqx.filter_jit).
    runtime_errors = (eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError)
    with pytest.raises(runtime_errors, match="forward solve did not converge"):
        jax.jit(stuck_energy)(f + 0.05 * jnp.eye(7), g)
    short_gmres = implicit_energy(run, gmres_restart=1, gmres_max_steps=1)
    with pytest.raises(
        ConvergenceError, match=r"adjoint .* did not converge after 1 restart"
    ) as err:
        short_gmres.gradient(f, g)
    # the residual GMRES left, not a placeholder, and the tolerance it missed
    assert np.isfinite(err.value.residual_norm) and err.value.residual_norm > 0
    wanted = float(re.search(r"wanted ≤ ([^;)\s]+)", str(err.value)).group(1))
    assert err.value.residual_norm > wanted > 0
    assert "lineax: " in str(err.value)  # its verdict, e.g. the maximum number of steps
    assert "not unique" not in str(err.value)  # a residual missed: not the singular case
    e = converged_energy(run, f, g)
    assert abs(float(e) - run.e_corr) < 1e-9


def test_an_adjoint_that_meets_its_residual_but_does_not_settle_says_why(ccd_cs):
    # what GMRES returns where Jᵀ is singular (UHF OH/STO-3G, one solve in three): the
    # residual below the tolerance, the iterate still moving, lineax out of steps
    run, _, _ = ccd_cs
    lam = jnp.zeros(3)
    out = (lam, lam, lam, jnp.asarray(False), jnp.asarray(50), jnp.asarray(4.85e-16))
    out += (jnp.asarray(3.77e-14), lx.RESULTS.max_steps_reached)
    with pytest.raises(ConvergenceError, match="after 50 restart cycles") as err:
        implicit_energy(run)._guard("adjoint", out)
    message = str(err.value)
    assert "left 4.85e-16, wanted ≤ 3.77e-14" in message
    assert "Λ is not unique" in message and "pass throw=False to take this Λ" in message
    assert "raise gmres_max_steps" not in message  # that hint is for a residual missed
    assert implicit_energy(run, throw=False)._guard("adjoint", out) is out


def test_bad_inputs(ccd_cs):
    run, f, g = ccd_cs
    energy = implicit_energy(run)
    with pytest.raises(InputError, match="fock of shape"):
        energy(f[:3, :3], g)
    with pytest.raises(InputError, match="finished `CCRun`"):
        implicit_energy("not a run")
    with pytest.raises(InputError, match="diis_space"):
        implicit_energy(run, diis_space=0)
    with pytest.raises(InputError, match=r"e_tol=nan: expected a positive finite number"):
        implicit_energy(run, e_tol=float("nan"))
    with pytest.raises(InputError, match=r"max_iter=-1: expected a whole number >= 0"):
        implicit_energy(run, max_iter=-1)
