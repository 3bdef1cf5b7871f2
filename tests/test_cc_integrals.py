"""Integrals: the shipped default system, SeQuant's data-file format, and PySCF import."""

from __future__ import annotations

import numpy as np
import pytest

from sq_jax import InputError
from sq_jax.cc.integrals import (
    SpatialIntegrals,
    SpinOrbitalIntegrals,
    default_reference,
    default_spatial_system,
    default_system,
    read_sequant_tensor,
    spin_orbital_from_spatial,
    write_sequant_tensor,
)


@pytest.fixture(scope="module")
def so() -> SpinOrbitalIntegrals:
    return default_system()


@pytest.fixture(scope="module")
def spatial() -> SpatialIntegrals:
    return default_spatial_system()


def test_default_system_shapes_and_dtypes(so, spatial):
    assert (so.nocc, so.nvirt, so.nmo) == (10, 4, 14)
    assert (spatial.nocc, spatial.nvirt) == (5, 2)
    assert so.fock.shape == (14, 14) and so.eri.shape == (14,) * 4
    assert spatial.fock.shape == (7, 7) and spatial.eri.shape == (7,) * 4
    for a in (so.fock, so.eri, spatial.fock, spatial.eri, so.mo_energies):
        assert a.dtype == np.float64


def test_spin_orbital_eri_symmetries(so):
    g = so.eri
    assert np.array_equal(g, -g.transpose(0, 1, 3, 2))
    np.testing.assert_allclose(g, -g.transpose(1, 0, 2, 3), atol=1e-14)
    np.testing.assert_allclose(g, g.transpose(1, 0, 3, 2), atol=1e-14)  # (pq)(rs) swap
    np.testing.assert_allclose(g, g.transpose(2, 3, 0, 1), atol=1e-14)  # real orbitals
    # α/β interleaved: <01||01> couples opposite spins (no exchange), <02||02> equal spins.
    v = default_spatial_system().eri
    assert g[0, 1, 0, 1] == pytest.approx(v[0, 0, 0, 0])
    assert g[0, 2, 0, 2] == pytest.approx(v[0, 1, 0, 1] - v[0, 1, 1, 0])
    assert g[0, 3, 1, 2] == pytest.approx(-v[0, 1, 1, 0])


def test_fock_is_canonical_and_ordered(so):
    f = so.fock
    assert np.abs(f - np.diag(np.diag(f))).max() < 1e-8
    e = so.mo_energies
    np.testing.assert_array_equal(e[0::2], e[1::2])  # α and β degenerate
    assert e[: so.nocc].max() < 0 < e[so.nocc :].min()
    assert np.all(np.diff(e) >= 0)


def test_hartree_fock_energy_from_integrals(so):
    """E_HF = Σ_i f_ii − ½ Σ_ij ⟨ij‖ij⟩ + E_nuc reproduces PySCF's RHF energy."""
    ref = default_reference()
    o = slice(0, so.nocc)
    e_elec = np.trace(so.fock[o, o]) - 0.5 * np.einsum("ijij->", so.eri[o, o, o, o])
    assert e_elec + ref["e_nuc"] == pytest.approx(ref["e_hf"], abs=1e-10)
    assert so.e_hf == pytest.approx(ref["e_hf"], abs=1e-12)


def test_default_reference_contents():
    ref = default_reference()
    assert ref["basis"] == "sto-3g"
    assert ref["e_corr_gccsd"] == pytest.approx(-0.0494385630, abs=1e-9)
    assert ref["e_corr_rccsd"] == pytest.approx(ref["e_corr_gccsd_tight"], abs=1e-11)
    assert ref["pyscf_gccsd_cycles"] > 0
    with pytest.raises(TypeError):
        ref["e_hf"] = 0.0  # read-only


def test_denominators_and_mp2_guess(so):
    d1, d2 = so.denominators()
    e = np.diag(so.fock)
    assert d1[1, 3] == e[3] - e[so.nocc + 1]
    assert d2[0, 1, 2, 3] == e[2] + e[3] - e[so.nocc] - e[so.nocc + 1]
    t1, t2 = so.mp2_amplitudes()
    np.testing.assert_allclose(t2 * d2, so.eri[so.nocc :, so.nocc :, : so.nocc, : so.nocc])
    np.testing.assert_allclose(t1 * d1, so.fock[so.nocc :, : so.nocc])


def test_spin_orbital_from_spatial_matches_default(spatial, so):
    again = spin_orbital_from_spatial(spatial)
    np.testing.assert_array_equal(again.eri, so.eri)
    np.testing.assert_array_equal(again.fock, so.fock)


def test_bad_integrals_raise_input_error(spatial):
    with pytest.raises(InputError, match="square rank-4"):
        SpatialIntegrals(
            fock=spatial.fock,
            eri=spatial.eri[:3],
            mo_energies=spatial.mo_energies,
            nocc=5,
            nvirt=2,
            e_hf=0.0,
        )
    with pytest.raises(InputError, match="add up"):
        SpatialIntegrals(
            fock=spatial.fock,
            eri=spatial.eri,
            mo_energies=spatial.mo_energies,
            nocc=5,
            nvirt=3,
            e_hf=0.0,
        )


# --------------------------------------------------------------------------------------
# SeQuant data files


def test_sequant_format_round_trip_is_exact(tmp_path, so):
    for name, array in (("fock", so.fock), ("eri", so.eri)):
        path = tmp_path / f"{name}.dat"
        write_sequant_tensor(path, array, so.nocc, so.nvirt, f"sto-3g H2O {name}")
        lines = path.read_text().splitlines()
        assert lines[0] == f"{array.ndim} 10 4 # sto-3g H2O {name}"
        assert len(lines) == 1 + array.size
        back, nocc, nvirt = read_sequant_tensor(path)
        assert (nocc, nvirt) == (10, 4)
        np.testing.assert_array_equal(back, array)


def test_sequant_format_row_major(tmp_path):
    path = tmp_path / "t.dat"
    path.write_text("2 1 1 # rank, nocc, nvirt\n1\n2\n3\n4\n\n")
    array, nocc, nvirt = read_sequant_tensor(path)
    assert array.tolist() == [[1.0, 2.0], [3.0, 4.0]] and (nocc, nvirt) == (1, 1)


@pytest.mark.parametrize(
    ("text", "line", "expected"),
    [
        ("", 1, "header"),
        ("2 1 x # bad\n1\n2\n3\n4\n", 1, "three non-negative integers"),
        ("2 1 1\n1\n2\n3\n", 5, "exactly 4 value lines"),
        ("2 1 1\n1\n2\n3\n4\n5\n", 6, "exactly 4 value lines"),
        ("2 1 1\n1\n2\nthree\n4\n", 4, "one floating-point number"),
    ],
)
def test_bad_sequant_files_name_file_and_line(tmp_path, text, line, expected):
    path = tmp_path / "bad.dat"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        read_sequant_tensor(path)
    msg = str(err.value)
    assert str(path) in msg and f"line {line}:" in msg and expected in msg


def test_missing_sequant_file(tmp_path):
    with pytest.raises(InputError, match="Cannot read"):
        read_sequant_tensor(tmp_path / "nope.dat")


def test_write_rejects_wrong_shape(tmp_path):
    with pytest.raises(InputError, match="nocc\\+nvirt = 3"):
        write_sequant_tensor(tmp_path / "x.dat", np.zeros((2, 2)), 1, 2)


# --------------------------------------------------------------------------------------
# PySCF (optional dependency: these tests need the `chem` extra)


@pytest.fixture(scope="module")
def h2o_rhf():
    pyscf = pytest.importorskip("pyscf", reason="PySCF is the optional `chem` extra")
    from pyscf import gto, scf

    ref = default_reference()
    mol = gto.M(atom=ref["geometry_angstrom"], basis=ref["basis"], verbose=0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scf.hf, "MUTE_CHKFILE", True)  # no temporary chkfile to leak
        mf = scf.RHF(mol)
        mf.conv_tol = 1e-12
        mf.kernel()
    del pyscf
    return mf


def test_pyscf_integrals_match_shipped_default(h2o_rhf, so, spatial):
    from sq_jax.cc.integrals import spatial_integrals, spin_orbital_integrals

    got = spatial_integrals(h2o_rhf)
    np.testing.assert_allclose(got.fock, spatial.fock, atol=1e-9)
    # MO phases are arbitrary: compare magnitudes, and invariants such as the HF energy.
    np.testing.assert_allclose(np.abs(got.eri), np.abs(spatial.eri), atol=1e-9)
    assert got.e_hf == pytest.approx(spatial.e_hf, abs=1e-9)
    so_got = spin_orbital_integrals(h2o_rhf)
    assert (so_got.nocc, so_got.nvirt) == (so.nocc, so.nvirt)
    np.testing.assert_allclose(np.abs(so_got.eri), np.abs(so.eri), atol=1e-9)


def test_pyscf_rejects_non_rhf(h2o_rhf, monkeypatch):
    from pyscf import scf

    from sq_jax.cc.integrals import spin_orbital_integrals

    monkeypatch.setattr(scf.hf, "MUTE_CHKFILE", True)

    with pytest.raises(InputError, match="RHF"):
        spin_orbital_integrals(scf.GHF(h2o_rhf.mol))
    with pytest.raises(InputError, match="UHF object has no orbitals"):
        spin_orbital_integrals(scf.UHF(h2o_rhf.mol))
    with pytest.raises(InputError, match="mo_coeff is None"):
        spin_orbital_integrals(scf.RHF(h2o_rhf.mol))
