import numpy as np
import pytest

from sq_jax import InputError, cc
from sq_jax.cc.integrals import default_reference


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
        ({"method": "ccsdt"}, "unknown method 'ccsdt'"),
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
