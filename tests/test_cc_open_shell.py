"""Open-shell references (UHF, ROHF) and frozen orbitals against PySCF on the same orbitals.

Every energy is compared with PySCF's own CCSD (UCCSD for UHF and ROHF, which PySCF runs
on the ROHF orbitals converted to UHF; RCCSD for RHF) with the same ``frozen``, both
sides converged to |ΔE| < 1e-11, to 1e-9 Eh. The amplitudes' layout (``run.t1``,
``run.t2``) is checked against PySCF's amplitudes block by block. UHF and ROHF run the
spin-blocked unrestricted equations (``ccsd_uhf``) by default; density fitting and
``equations="ccsd_so"`` the spin-orbital ones (see also ``test_cc_unrestricted.py``).
"""

from __future__ import annotations

import numpy as np
import pytest

from sq_jax import InputError, cc
from sq_jax.cc import drivers
from sq_jax.cc.cli import main

pyscf = pytest.importorskip("pyscf", reason="PySCF is the optional `chem` extra")
from pyscf import cc as pyscf_cc  # noqa: E402
from pyscf import gto, scf  # noqa: E402

TIGHT = {"e_tol": 1e-11, "t_tol": 1e-9}
OH = "O 0 0 0; H 0 0 0.97"
CH2 = "C 0 0 0.1; H 0 0.99 -0.55; H 0 -0.99 -0.55"
H2O = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"


def _scf(kind, atom, basis, spin=0, charge=0):
    mol = gto.M(atom=atom, basis=basis, spin=spin, charge=charge, verbose=0)
    mf = kind(mol)
    mf.conv_tol = 1e-12
    mf.kernel()
    assert mf.converged
    return mf


def _pyscf_ccsd(mf, frozen=None, kind=None):
    ref = (kind or pyscf_cc.CCSD)(mf, frozen=frozen)
    ref.conv_tol, ref.conv_tol_normt = 1e-11, 1e-9
    ref.kernel()
    assert ref.converged
    return ref


@pytest.fixture(scope="module")
def oh_uhf():
    return _scf(scf.UHF, OH, "6-31g", spin=1)


@pytest.fixture(scope="module")
def h2o_rhf():
    return _scf(scf.RHF, H2O, "6-31g")


def test_uhf_ccsd_equals_pyscf_uccsd_with_its_amplitudes(oh_uhf):
    ref = _pyscf_ccsd(oh_uhf)
    run = cc.ccsd(oh_uhf, **TIGHT)
    assert run.converged and run.equations == "ccsd_uhf"
    assert abs(run.e_corr - ref.e_corr) < 1e-9
    assert abs(run.e_tot - ref.e_tot) < 1e-9
    # Spin-orbital order: occupied α, occupied β, virtual α, virtual β.
    (noa, nob), (nva, nvb) = ref.nocc, (ref.nmo[0] - ref.nocc[0], ref.nmo[1] - ref.nocc[1])
    assert run.t1.shape == (noa + nob, nva + nvb) and (run.nocc, run.nvirt) == run.t1.shape
    t1a, t1b = ref.t1
    t2aa, t2ab, t2bb = ref.t2
    ours = run.unrestricted_amplitudes()
    for got, want in zip((*ours[0], *ours[1]), (t1a, t1b, t2aa, t2ab, t2bb), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-7)
    oa, ob, va, vb = slice(0, noa), slice(noa, None), slice(0, nva), slice(nva, None)
    np.testing.assert_allclose(run.t1[oa, va], t1a, atol=1e-7)
    np.testing.assert_allclose(run.t1[ob, vb], t1b, atol=1e-7)
    assert np.abs(run.t1[oa, vb]).max() == 0.0 and np.abs(run.t1[ob, va]).max() == 0.0
    np.testing.assert_allclose(run.t2[oa, oa, va, va], t2aa, atol=1e-7)
    np.testing.assert_allclose(run.t2[oa, ob, va, vb], t2ab, atol=1e-7)
    np.testing.assert_allclose(run.t2[ob, ob, vb, vb], t2bb, atol=1e-7)


def test_uhf_frozen_core_equals_pyscf(oh_uhf):
    ref = _pyscf_ccsd(oh_uhf, frozen=1)
    run = cc.ccsd(oh_uhf, frozen=1, **TIGHT)
    assert (run.nocc, run.nvirt) == (7, 13)
    assert abs(run.e_corr - ref.e_corr) < 1e-9 and abs(run.e_tot - ref.e_tot) < 1e-9


def test_density_fitted_uhf_frozen_core_equals_pyscf_df_uccsd():
    mf = _scf(lambda mol: scf.UHF(mol).density_fit(), OH, "sto-3g", spin=1)
    ref = _pyscf_ccsd(mf, frozen=1)  # PySCF's dfuccsd: the SCF's fitting basis throughout
    run = cc.ccsd(mf, df=True, frozen=1, **TIGHT)
    assert run.equations == "ccsd_so_df"
    assert abs(run.e_corr - ref.e_corr) < 1e-9 and abs(run.e_tot - ref.e_tot) < 1e-9


def test_ch2_triplet_uhf_equals_pyscf():
    mf = _scf(scf.UHF, CH2, "sto-3g", spin=2)
    ref = _pyscf_ccsd(mf)
    run = cc.ccsd(mf, **TIGHT)
    assert abs(run.e_corr - ref.e_corr) < 1e-9 and abs(run.e_tot - ref.e_tot) < 1e-9


def test_rohf_ccsd_equals_pyscf_rohf_route():
    mf = _scf(scf.ROHF, OH, "sto-3g", spin=1)
    ref = _pyscf_ccsd(mf)  # PySCF: the ROHF object converted to UHF, then UCCSD
    run = cc.ccsd(mf, **TIGHT)
    assert abs(run.e_corr - ref.e_corr) < 1e-9 and abs(run.e_tot - ref.e_tot) < 1e-9
    assert np.abs(run.t1).max() > 1e-3  # the Fock's occupied-virtual block drives T1


def test_per_spin_frozen_lists_with_a_frozen_virtual():
    mf = _scf(scf.UHF, OH, "sto-3g", spin=1)
    frozen = [[0], [0, 5]]  # α: the O 1s; β: the O 1s and the highest virtual
    ref = _pyscf_ccsd(mf, frozen=frozen)
    run = cc.ccsd(mf, frozen=frozen, **TIGHT)
    assert (run.nocc, run.nvirt) == (7, 2)
    assert abs(run.e_corr - ref.e_corr) < 1e-9


@pytest.mark.parametrize("closed_shell", [True, False])
def test_rhf_frozen_core_equals_pyscf_on_both_routes(h2o_rhf, closed_shell):
    ref = _pyscf_ccsd(h2o_rhf, frozen=1)
    run = cc.ccsd(h2o_rhf, frozen=1, closed_shell=closed_shell, **TIGHT)
    assert abs(run.e_corr - ref.e_corr) < 1e-9 and abs(run.e_tot - ref.e_tot) < 1e-9
    if closed_shell:  # PySCF's RCCSD layout: t1[i, a], t2[i, j, a, b]
        t1, t2 = run.t1, run.t2
        with pytest.raises(InputError, match="a closed-shell run"):
            run.unrestricted_amplitudes()
    else:  # α/β interleaved; RCCSD's amplitudes are the α and αβ blocks
        (t1, t1b), (t2aa, t2, _) = run.unrestricted_amplitudes()
        np.testing.assert_allclose(t1b, t1, atol=1e-12)
        np.testing.assert_allclose(t2aa, t2 - t2.transpose(0, 1, 3, 2), atol=1e-12)
    np.testing.assert_allclose(t1, ref.t1, atol=1e-7)
    np.testing.assert_allclose(t2, ref.t2, atol=1e-7)


@pytest.mark.parametrize(("closed_shell", "df"), [(True, True), (False, False)])
def test_frozen_list_on_the_shipped_system_equals_pyscf(closed_shell, df):
    # The shipped H2O/STO-3G is PySCF's RHF; its DF factors are exact, so DF changes nothing.
    mf = _scf(scf.RHF, H2O, "sto-3g")
    frozen = [0, 6]  # the O 1s and the highest virtual
    ref = _pyscf_ccsd(mf, frozen=frozen)
    run = cc.ccsd(None, frozen=frozen, closed_shell=closed_shell, df=df, **TIGHT)
    assert (run.nocc, run.nvirt) == ((4, 1) if closed_shell else (8, 2))
    assert abs(run.e_corr - ref.e_corr) < 1e-9


class _ReachedCompile(Exception):
    pass


@pytest.fixture
def no_compile(monkeypatch):
    def refuse(*args, **kwargs):
        raise _ReachedCompile

    monkeypatch.setattr(drivers, "compile_program", refuse)


@pytest.mark.parametrize(
    ("frozen", "words"),
    [
        (-1, ["frozen=-1", "a count from 0 to 4"]),
        (5, ["frozen=5", "a count from 0 to 4"]),
        ([0, 0], ["frozen=[0, 0]", "an index repeats"]),
        ([99], ["frozen=[99]", "index 99 is outside 0..6"]),
        ("core", ["frozen='core'", "expected a count or a list"]),
        ([[0], [1]], ["frozen=[[0], [1]]", "expected integers"]),
        ([5, 6], ["frozen=[5, 6]", "no virtual orbital"]),
        (1.0, ["frozen=1.0", "expected a count or a list"]),
    ],
)
def test_bad_frozen_is_refused_before_compiling(frozen, words, no_compile):
    with pytest.raises(InputError) as err:
        cc.ccsd(frozen=frozen, closed_shell=True)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_open_shell_reference_on_the_closed_shell_route_is_refused(no_compile):
    mf = _scf(scf.UHF, OH, "sto-3g", spin=1)
    with pytest.raises(InputError, match=r"closed-shell .* need an RHF reference") as err:
        cc.ccsd(mf, closed_shell=True)
    assert "UHF" in str(err.value) and "closed_shell=False" in str(err.value)


def test_cli_spin_and_frozen_run_uhf_as_pyscf(capsys):
    mf = _scf(scf.UHF, H2O, "sto-3g", spin=1, charge=1)
    ref = _pyscf_ccsd(mf, frozen=1)
    argv = ["ccsd", "--molecule", "h2o", "--charge", "1", "--spin", "1", "--frozen", "1"]
    assert main([*argv, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "(UHF, 2S=1), unrestricted (spin-blocked): 7 occupied (1 frozen per spin)" in out
    energy = float(out.split("E(CCSD)")[1].split("=")[1].split()[0])
    assert abs(energy - ref.e_tot) < 1e-8  # the CLI's own tolerances (e_tol 1e-10)
    assert main([*argv, "--spin-orbital", "--quiet"]) == 0  # the spin-orbital route
    out = capsys.readouterr().out
    assert "(UHF, 2S=1), spin-orbital: 7 occupied (1 frozen per spin), 5 virtual" in out
    energy = float(out.split("E(CCSD)")[1].split("=")[1].split()[0])
    assert abs(energy - ref.e_tot) < 1e-8


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--molecule", "h2o", "--spin", "1"], "--spin 1 does not fit the 10 electrons"),
        (["--molecule", "h2o", "--spin", "2", "--closed-shell"], "drop --closed-shell"),
        (["--spin", "2"], "--spin needs --molecule"),
        (["--molecule", "h2o", "--frozen", "x"], "expected a whole number >= 0, got 'x'"),
        (["--molecule", "h2o", "--charge", "1"], "--spin 1 (a UHF reference)"),
        (["--molecule", "h2o", "--rohf", "--dry-run"], "--dry-run sizes an all-electron"),
    ],
)
def test_cli_open_shell_errors(capsys, extra, message):
    assert main(["ccsd", *extra]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("frozen", [None, 1])
def test_open_shell_spin_orbital_integrals_give_pyscf_ump2(oh_uhf, frozen):
    from pyscf import mp

    from sq_jax.cc.integrals import spin_orbital_integrals

    ints = spin_orbital_integrals(oh_uhf, frozen=frozen)
    g = ints.eri
    assert np.abs(g + g.transpose(1, 0, 2, 3)).max() < 1e-12
    assert np.abs(g - g.transpose(2, 3, 0, 1)).max() < 1e-12
    o, v = slice(0, ints.nocc), slice(ints.nocc, None)
    e = ints.mo_energies
    d = e[o, None, None, None] + e[None, o, None, None] - e[None, None, v, None] - e[v]
    e_mp2 = 0.25 * np.sum(g[o, o, v, v] ** 2 / d)
    assert abs(e_mp2 - mp.UMP2(oh_uhf, frozen=frozen).kernel()[0]) < 1e-10
