"""Amplitude solvers on H2O/STO-3G, with the hand-written oracle as the residual.

The shipped default system needs no PySCF: its reference energies and PySCF's iteration
counts were stored by ``scripts/make_default_system.py``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sq_jax import ConvergenceError, InputError
from sq_jax.cc.integrals import default_reference, default_system
from sq_jax.cc.solvers import (
    DIIS,
    CCResult,
    CCStatus,
    antisymmetrize,
    solve_diis,
    solve_newton_krylov,
)
from tests.helpers import cc_oracle as oracle


@pytest.fixture(scope="module")
def system():
    ints = default_system()
    f, g, nocc = jnp.asarray(ints.fock), jnp.asarray(ints.eri), ints.nocc

    def residual(t):
        r1, r2 = oracle.ccsd_residuals(f, g, t["t1"], t["t2"], nocc, xp=jnp)
        return {"t1": r1, "t2": r2}

    def energy(t):
        return oracle.ccsd_energy(f, g, t["t1"], t["t2"], nocc, xp=jnp)

    d1, d2 = ints.denominators()
    t1, t2 = ints.mp2_amplitudes()
    return {
        "ints": ints,
        "residual": residual,
        "energy": energy,
        "d": {"t1": d1, "t2": d2},
        "t0": {"t1": t1, "t2": t2},
        "ref": default_reference(),
    }


@pytest.fixture(scope="module")
def diis_result(system) -> CCResult:
    ref = system["ref"]
    return solve_diis(
        system["residual"],
        system["energy"],
        system["t0"],
        system["d"],
        e_tol=ref["cc_conv_tol"],
        t_tol=ref["cc_conv_tol_normt"],
    )


def test_oracle_converges_to_pyscf_gccsd(system):
    ints, ref = system["ints"], system["ref"]
    e, _, _, _, converged = oracle.solve_ccsd(ints.fock, ints.eri, ints.nocc)
    assert converged
    assert abs(e - ref["e_corr_gccsd"]) < 1e-9
    assert abs(e - ref["e_corr_gccsd_tight"]) < 1e-9


def test_oracle_residuals_match_pyscf_gccsd_update(monkeypatch):
    """R = (t_new − t)·D from PySCF's GCCSD update, random amplitudes, non-canonical Fock."""
    pytest.importorskip("pyscf", reason="PySCF is the optional `chem` extra")
    from pyscf import gto, scf
    from pyscf.cc import gccsd

    monkeypatch.setattr(scf.hf, "MUTE_CHKFILE", True)  # no temporary chkfile to leak

    ints = default_system()
    nocc, nso = ints.nocc, ints.nmo
    rng = np.random.default_rng(3)
    f = ints.fock + 0.01 * (lambda x: x + x.T)(rng.standard_normal((nso, nso)))
    eris = gccsd._PhysicistsERIs()
    eris.fock, eris.mo_energy, eris.nocc, eris.e_hf = f, np.diag(f).copy(), nocc, 0.0
    o, v = slice(0, nocc), slice(nocc, nso)
    for name in ("oooo", "ooov", "oovv", "ovov", "ovvo", "ovvv", "vvvv"):
        setattr(eris, name, ints.eri[tuple(o if c == "o" else v for c in name)])
    mycc = gccsd.GCCSD(scf.GHF(gto.M(atom="He", basis="sto-3g", verbose=0)))
    t1 = 0.05 * rng.standard_normal((nso - nocc, nocc))
    t2 = rng.standard_normal((nso - nocc,) * 2 + (nocc,) * 2)
    t2 = 0.05 * np.array(antisymmetrize({"t2": t2})["t2"])
    n1, n2 = mycc.update_amps(t1.T.copy(), t2.transpose(2, 3, 0, 1).copy(), eris)
    d1, d2 = oracle.denominators(f, nocc)
    r1, r2 = oracle.ccsd_residuals(f, ints.eri, t1, t2, nocc)
    np.testing.assert_allclose(r1, (n1.T - t1) * d1, atol=1e-13)
    np.testing.assert_allclose(r2, (n2.transpose(2, 3, 0, 1) - t2) * d2, atol=1e-13)


def test_diis_matches_pyscf_energy_and_iterations(system, diis_result):
    ref = system["ref"]
    res = diis_result
    assert res.converged and bool(res.status == CCStatus.CONVERGED)
    assert abs(float(res.energy) - ref["e_corr_gccsd"]) < 1e-9
    assert abs(float(res.energy) - ref["e_corr_gccsd_tight"]) < 1e-9
    assert res.iterations <= 1.1 * ref["pyscf_gccsd_cycles"]
    assert len(res.history) == res.iterations
    last = res.history[-1]
    assert abs(last.delta_energy) < ref["cc_conv_tol"]
    assert last.amplitude_change < ref["cc_conv_tol_normt"]
    assert res.amplitudes["t2"].shape == (4, 4, 10, 10)
    assert res.timings.total > 0


def test_diis_amplitudes_solve_the_equations(system, diis_result):
    r = jax.jit(system["residual"])(diis_result.amplitudes)
    assert float(jnp.abs(r["t1"]).max()) < 1e-7 and float(jnp.abs(r["t2"]).max()) < 1e-7


def test_newton_krylov_converges(system):
    ref = system["ref"]
    res = solve_newton_krylov(
        system["residual"],
        system["energy"],
        system["t0"],
        system["d"],
        e_tol=ref["cc_conv_tol"],
        t_tol=ref["cc_conv_tol_normt"],
        project=antisymmetrize,
    )
    assert res.converged, res.message
    assert res.iterations <= 15
    assert abs(float(res.energy) - ref["e_corr_gccsd"]) < 1e-9
    assert abs(float(res.energy) - ref["e_corr_gccsd_tight"]) < 1e-9
    assert all(h.linear_steps > 0 for h in res.history)


def test_non_finite_residual_stops_with_status(system):
    def bad(t):
        r = system["residual"](t)
        return {"t1": r["t1"] * jnp.nan, "t2": r["t2"]}

    for solve in (solve_diis, solve_newton_krylov):
        res = solve(bad, system["energy"], system["t0"], system["d"])
        assert not res.converged
        assert bool(res.status == CCStatus.NON_FINITE)
        assert res.iterations == 1
        assert "non-finite" in res.message
        assert not math.isfinite(float(res.energy))


def test_throw_raises_on_failure(system):
    with pytest.raises(ConvergenceError, match="non-finite") as err:
        solve_diis(
            lambda t: {k: v * jnp.inf for k, v in system["residual"](t).items()},
            system["energy"],
            system["t0"],
            system["d"],
            throw=True,
        )
    assert err.value.iterations == 1 and "after 1 iterations" in str(err.value)
    assert bool(err.value.result.status == CCStatus.NON_FINITE)


def test_throw_names_iterations_and_residual_norm(system):
    with pytest.raises(ConvergenceError, match="CCSD solve did not converge after 3") as err:
        solve_diis(
            system["residual"], system["energy"], system["t0"], system["d"], max_iter=3, throw=True
        )
    last = err.value.result.history[-1]
    assert err.value.residual_norm == last.residual_norm > 0
    assert f"‖R‖ = {last.residual_norm:.3g}" in str(err.value)


@pytest.mark.parametrize("solve", [solve_diis, solve_newton_krylov])
def test_zero_iterations_return_the_start(system, solve):
    res = solve(system["residual"], system["energy"], system["t0"], system["d"], max_iter=0)
    assert res.iterations == 0 and res.history == () and not res.converged
    assert bool(res.status == CCStatus.MAX_ITERATIONS)
    ints = system["ints"]
    e0 = oracle.ccsd_energy(ints.fock, ints.eri, *system["t0"].values(), ints.nocc)
    assert abs(float(res.energy) - e0) < 1e-14
    np.testing.assert_array_equal(res.amplitudes["t2"], system["t0"]["t2"])


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"max_iter": -1}, ["max_iter=-1", "whole number >= 0"]),
        ({"e_tol": math.nan}, ["e_tol=nan", "positive finite"]),
        ({"t_tol": math.nan, "e_tol": -1.0}, ["options:", "t_tol=nan", "e_tol=-1.0"]),
        ({"diis_start": -2}, ["diis_start=-2"]),
    ],
)
def test_bad_option_values_are_refused_before_any_work(system, options, words):
    def never(t):
        raise AssertionError("the residual was evaluated")

    with pytest.raises(InputError) as err:
        solve_diis(never, never, system["t0"], system["d"], **options)
    assert all(w in str(err.value) for w in words), str(err.value)
    with pytest.raises(InputError, match="gmres_restart=0"):
        solve_newton_krylov(never, never, system["t0"], system["d"], gmres_restart=0)


def test_diis_object_matches_the_textbook_pulay_solution():
    """Σ c_i v_i with c from the unscaled bordered system, and only the last `space` kept."""
    rng = np.random.default_rng(7)
    vecs, errs = rng.standard_normal((5, 9)), 1e-3 * rng.standard_normal((5, 9))
    diis = DIIS(space=3)
    for v, e in zip(vecs, errs, strict=True):
        diis.push(jnp.asarray(v), jnp.asarray(e))
    kept_v, kept_e = vecs[-3:], errs[-3:]
    b = -np.ones((4, 4))
    b[3, 3] = 0.0
    b[:3, :3] = kept_e @ kept_e.T
    c = np.linalg.solve(b, np.array([0.0, 0.0, 0.0, -1.0]))[:3]
    assert len(diis) == 3 and diis.can_extrapolate
    np.testing.assert_allclose(diis.extrapolate(), c @ kept_v, rtol=1e-10, atol=1e-12)
    with pytest.raises(InputError, match="space"):
        DIIS(space=0)
    with pytest.raises(InputError, match="push"):
        DIIS(space=2).extrapolate()


def test_max_iterations_status(system):
    res = solve_diis(system["residual"], system["energy"], system["t0"], system["d"], max_iter=2)
    assert res.iterations == 2 and not res.converged
    assert bool(res.status == CCStatus.MAX_ITERATIONS)


def test_plain_jacobi_without_diis_is_slower(system, diis_result):
    res = solve_diis(
        system["residual"],
        system["energy"],
        system["t0"],
        system["d"],
        diis_space=1,
        max_iter=200,
        e_tol=system["ref"]["cc_conv_tol"],
        t_tol=system["ref"]["cc_conv_tol_normt"],
    )
    assert res.converged
    assert res.iterations > diis_result.iterations
    assert abs(float(res.energy) - float(diis_result.energy)) < 1e-9


def test_verbose_prints_pyscf_style_lines(system, capsys):
    solve_diis(
        system["residual"], system["energy"], system["t0"], system["d"], max_iter=2, verbose=True
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("cycle = 1  E_corr(CCSD) = -0.04")
    assert "dE = " in lines[0] and "norm(t1,t2) = " in lines[0]


def test_mismatched_inputs_raise(system):
    d = dict(system["d"])
    d["t2"] = d["t2"][:2]
    with pytest.raises(InputError, match="shape"):
        solve_diis(system["residual"], system["energy"], system["t0"], d)
    with pytest.raises(InputError, match="keys"):
        solve_diis(system["residual"], system["energy"], {"t1": system["t0"]["t1"]}, system["d"])
    with pytest.raises(InputError, match="non-zero"):
        solve_diis(
            system["residual"],
            system["energy"],
            system["t0"],
            {"t1": 0 * system["d"]["t1"], "t2": system["d"]["t2"]},
        )
    with pytest.raises(InputError, match="residual_fn"):
        solve_diis(lambda t: {"x": t["t1"]}, system["energy"], system["t0"], system["d"])


def test_antisymmetrize_is_a_projector():
    rng = np.random.default_rng(0)
    t = {"t1": rng.standard_normal((3, 2)), "t2": rng.standard_normal((3, 3, 2, 2))}
    p = antisymmetrize(t)
    pp = antisymmetrize(p)
    np.testing.assert_array_equal(p["t1"], t["t1"])
    np.testing.assert_allclose(pp["t2"], p["t2"], atol=1e-15)
    np.testing.assert_allclose(p["t2"], -p["t2"].transpose(1, 0, 2, 3), atol=1e-15)
    np.testing.assert_allclose(p["t2"], -p["t2"].transpose(0, 1, 3, 2), atol=1e-15)
    with pytest.raises(InputError, match="odd rank"):
        antisymmetrize({"x": np.zeros(3)})


def test_result_is_a_pytree(diis_result):
    leaves = jax.tree_util.tree_leaves(diis_result)
    assert any(getattr(x, "shape", None) == (4, 4, 10, 10) for x in leaves)


def test_diis_accepts_plain_numpy_residuals_without_jit(system):
    ints = system["ints"]
    f, g, nocc = ints.fock, ints.eri, ints.nocc

    def residual(t):
        r1, r2 = oracle.ccsd_residuals(f, g, np.asarray(t["t1"]), np.asarray(t["t2"]), nocc)
        return {"t1": r1, "t2": r2}

    def energy(t):
        return oracle.ccsd_energy(f, g, np.asarray(t["t1"]), np.asarray(t["t2"]), nocc)

    res = solve_diis(residual, energy, system["t0"], system["d"], jit=False, max_iter=3)
    assert res.iterations == 3 and bool(res.status == CCStatus.MAX_ITERATIONS)
