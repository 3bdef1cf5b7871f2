import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sq_jax import ConvergenceError, InputError, cc
from sq_jax.budget import xla_bytes
from sq_jax.cc import drivers
from sq_jax.cc.integrals import default_reference, default_system
from sq_jax.lower.aot import AotJit
from tests.helpers import cc_oracle as oracle


@pytest.fixture(scope="module")
def ref():
    return default_reference()


@pytest.fixture(scope="module")
def unbatched():
    return cc.ccsd()


def test_ccsd_matches_pyscf(unbatched, ref):
    run = unbatched
    assert run.result.converged
    assert abs(run.e_corr - ref["e_corr_gccsd_tight"]) < 1e-9
    assert abs(run.e_tot - (ref["e_hf"] + ref["e_corr_gccsd_tight"])) < 1e-9
    assert run.result.iterations <= 1.1 * ref["pyscf_gccsd_cycles"]
    assert run.residual_program.peak_bytes > 0 and run.residual_program.flops > 0


def test_batched_ccsd_equals_unbatched(unbatched):
    run = cc.ccsd(batch={"a": 3})  # 4 virtual spin-orbitals in batches of 2, 2
    assert run.result.converged
    assert abs(run.e_corr - unbatched.e_corr) < 1e-10
    np.testing.assert_allclose(
        run.result.amplitudes["t{a,a;i,i}"],
        unbatched.result.amplitudes["t{a,a;i,i}"],
        atol=1e-8,
    )
    assert run.residual_program.peak_bytes < unbatched.residual_program.peak_bytes


def test_a_budgeted_solve_runs_the_program_xla_measured(unbatched, monkeypatch):
    """Under ``memory_budget`` the iterations call the residual program's own executable
    for the blocks ``fit_to_budget`` measured (compiled there, or at the first call where
    it was only measured), on the integrals cut into its blocks once: not traced into the
    solver's own jit (compiled again, packed anew)."""
    calls = []
    call = AotJit.__call__

    def spy(self, *args):
        calls.append((self, any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(args))))
        return call(self, *args)

    monkeypatch.setattr(AotJit, "__call__", spy)
    budget = xla_bytes(unbatched.residual_program) // 2
    run = cc.ccsd(memory_budget=budget)
    prog = run.residual_program
    assert str(prog.schedule.annotated.plan) != "BatchPlan()"  # batched, to fit
    traced = [t for aot, t in calls if aot is prog.aot]
    assert len(traced) >= run.result.iterations and not any(traced)
    assert len(prog.aot._executables) == 1  # one, for the measured input blocks
    assert xla_bytes(prog) <= budget
    assert run.result.converged and abs(run.e_corr - unbatched.e_corr) < 1e-10


def test_newton_krylov_converges(ref):
    run = cc.ccsd(solver="newton")
    assert run.result.converged
    assert run.result.iterations <= 15
    assert abs(run.e_corr - ref["e_corr_gccsd_tight"]) < 1e-9


def test_ccd_converges():
    run = cc.ccd()
    assert run.result.converged
    assert -0.06 < run.e_corr < -0.04


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "cisd"}, "unknown method 'cisd'"),
        ({"method": "ccsdt", "closed_shell": True}, "no shipped equations for ccsdt"),
        ({"solver": "bfgs"}, "unknown solver 'bfgs'"),
        ({"system": 42}, "system must be None"),
    ],
)
def test_bad_driver_arguments(kwargs, message):
    with pytest.raises(InputError, match=message):
        cc.solve_cc(**kwargs)


def test_closed_shell_ccsd_matches_pyscf_rccsd(ref):
    run = cc.ccsd(closed_shell=True)
    assert run.result.converged
    assert abs(run.e_corr - ref["e_corr_rccsd"]) < 1e-9
    assert run.result.iterations <= 1.1 * ref["pyscf_rccsd_cycles"]
    assert run.nocc == 5 and run.nvirt == 2


# ----------------------------------------------------------------------------------------
# Input hardening: references, option names and values, zero iterations, failures


class _ReachedCompile(Exception):
    """Raised in place of compiling: the inputs passed every check before any work."""


@pytest.fixture
def no_compile(monkeypatch):
    def refuse(*args, **kwargs):
        raise _ReachedCompile

    monkeypatch.setattr(drivers, "compile_program", refuse)


@pytest.fixture
def pyscf_modules(monkeypatch):
    pytest.importorskip("pyscf", reason="PySCF is the optional `chem` extra")
    from pyscf import dft, gto, scf

    monkeypatch.setattr(scf.hf, "MUTE_CHKFILE", True)  # no temporary chkfile to leak
    return gto, scf, dft


def test_dft_reference_is_refused(pyscf_modules, no_compile):
    gto, _, dft = pyscf_modules
    mf = dft.RKS(gto.M(atom="H 0 0 0; H 0 0 0.74", basis="sto-3g", verbose=0))
    mf.xc = "pbe"  # refused as it is, run or not: the check needs no orbitals
    with pytest.raises(InputError, match="Hartree–Fock reference") as err:
        cc.ccsd(mf)
    assert "RKS" in str(err.value) and "'pbe'" in str(err.value)
    assert "scf.RHF(mol).run()" in str(err.value) and "mf.to_hf().run()" in str(err.value)


def test_one_electron_system_is_refused(pyscf_modules, no_compile):
    gto, scf, _ = pyscf_modules
    mf = scf.RHF(gto.M(atom="H 0 0 0", basis="sto-3g", spin=1, verbose=0))  # PySCF: HF1e
    with pytest.raises(InputError, match="no electron correlation") as err:
        cc.ccsd(mf)
    assert "HF1e" in str(err.value) and "1 electron" in str(err.value)
    assert "at least 2 electrons" in str(err.value)


def test_one_electron_integrals_are_refused(no_compile):
    ints = default_system()
    one = dataclasses.replace(ints, nocc=1, nvirt=ints.nvirt + ints.nocc - 1)
    with pytest.raises(InputError, match="no electron correlation"):
        cc.ccsd(one)


def test_max_iter_zero_returns_the_mp2_start():
    ints = default_system()
    run = cc.ccsd(max_iter=0)
    assert run.result.iterations == 0 and not run.result.converged
    assert "iteration limit" in run.result.message and run.result.history == ()
    t1, t2 = ints.mp2_amplitudes()
    e_start = oracle.ccsd_energy(ints.fock, ints.eri, t1, t2, ints.nocc)
    assert abs(run.e_corr - e_start) < 1e-12
    np.testing.assert_array_equal(run.result.amplitudes["t{a,a;i,i}"], jnp.asarray(t2))


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"max_iter": -1}, ["max_iter=-1", "whole number >= 0"]),
        ({"max_cycle": -3}, ["max_iter=-3", "whole number >= 0"]),
        ({"e_tol": float("nan")}, ["e_tol=nan", "positive finite"]),
        ({"t_tol": float("nan")}, ["t_tol=nan", "positive finite"]),
        ({"t_tol": -1e-8}, ["t_tol=-1e-08", "positive finite"]),
        ({"conv_tol_normt": 0.0}, ["t_tol=0.0", "positive finite"]),
        ({"diis_space": 0}, ["diis_space=0", ">= 1"]),
        ({"solver": "newton", "forcing": 2.0}, ["forcing=2.0", "(0, 1)"]),
    ],
)
def test_bad_option_values_are_refused_before_compiling(options, words, no_compile):
    with pytest.raises(InputError) as err:
        cc.ccsd(**options)
    assert all(w in str(err.value) for w in words), str(err.value)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"tol": 1e-8}, ["'tol'", "accepted: diis_space, diis_start, e_tol", "conv_tol (= e_tol)"]),
        ({"r_tol": 1e-6}, ["'r_tol'", "t_tol", "conv_tol_normt (= t_tol)"]),
        ({"solver": "newton", "diis_space": 4}, ["'diis_space'", "solver='newton'", "forcing"]),
        ({"project": None}, ["'project'", "accepted:"]),
        ({"conv_tol": 1e-8, "e_tol": 1e-8}, ["both conv_tol= and e_tol="]),
    ],
)
def test_bad_option_names_are_refused_before_compiling(options, words, no_compile):
    with pytest.raises(InputError) as err:
        cc.ccsd(**options)
    assert all(w in str(err.value) for w in words), str(err.value)


@pytest.mark.parametrize("frozen", [0, None, []])
def test_no_frozen_orbitals_is_accepted(frozen, no_compile):
    with pytest.raises(_ReachedCompile):
        cc.ccsd(frozen=frozen)


def test_pyscf_option_names_mean_ours(unbatched):
    run = cc.ccsd(conv_tol=1e-10, conv_tol_normt=1e-8, max_cycle=100)  # ours' defaults
    assert run.result.converged
    assert run.result.iterations == unbatched.result.iterations
    assert run.e_corr == unbatched.e_corr


def test_throw_raises_convergence_error():
    with pytest.raises(ConvergenceError, match="CCD solve did not converge after 2 it") as err:
        cc.ccd(max_iter=2, throw=True)
    history = err.value.result.history
    assert err.value.iterations == 2 and len(history) == 2
    assert err.value.residual_norm == history[-1].residual_norm > 0
    assert f"{err.value.residual_norm:.3g}" in str(err.value)
