"""Issue 14, item 9: SeQuant's integral files as one command and one function call."""

import re

import numpy as np
import pytest

from sq_jax import cc
from sq_jax._errors import InputError
from sq_jax.cc.cli import main
from sq_jax.cc.integrals import (
    SpatialIntegrals,
    SpinOrbitalIntegrals,
    default_reference,
    default_spatial_system,
    default_system,
    write_sequant_tensor,
)
from sq_jax.cc.sequant_files import spatial_from_spin_orbital


def _write(folder, stem, ints):
    paths = folder / f"{stem}_fock.dat", folder / f"{stem}_eri.dat"
    for path, array in zip(paths, (ints.fock, ints.eri), strict=True):
        write_sequant_tensor(path, array, ints.nocc, ints.nvirt, f"H2O {stem}")
    return tuple(str(p) for p in paths)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """SeQuant files of the shipped system: spin-orbital ("so") and spatial ("cs")."""
    folder = tmp_path_factory.mktemp("sequant")
    return {
        "so": _write(folder, "so", default_system()),
        "cs": _write(folder, "cs", default_spatial_system()),
    }


def _energy(out, name):
    return float(re.search(rf"{re.escape(name)}\s+=\s+(\S+)", out).group(1))


def test_cli_runs_spin_orbital_files_to_the_reference_energy(files, capsys):
    fock, eri = files["so"]
    assert main(["ccsd", "--fock", fock, "--eri", eri, "--quiet"]) == 0
    out = capsys.readouterr().out
    ref = default_reference()
    assert "SeQuant files), spin-orbital: 10 occupied, 4 virtual" in out
    assert abs(_energy(out, "E_corr(CCSD)") - ref["e_corr_gccsd_tight"]) < 1e-9
    # no nuclear repulsion in the files: E(HF) is electronic, and the output says so
    assert abs(_energy(out, "E(HF)") - (ref["e_hf"] - ref["e_nuc"])) < 1e-9
    assert "the files carry no nuclear repulsion" in out


def test_cli_closed_shell_from_spin_orbital_files_with_e_nuc(files, capsys):
    fock, eri = files["so"]
    ref = default_reference()
    argv = ["ccsd", "--fock", fock, "--eri", eri, "--closed-shell", "--e-nuc", repr(ref["e_nuc"])]
    assert main([*argv, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "closed-shell: 5 occupied, 2 virtual" in out and "nuclear repulsion" not in out
    assert abs(_energy(out, "E(CCSD)") - (ref["e_hf"] + ref["e_corr_rccsd"])) < 1e-9


def test_load_follows_the_files(files):
    ref = default_reference()
    so, cs = default_system(), default_spatial_system()
    loaded = cc.load_sequant_system(*files["so"])
    assert isinstance(loaded, SpinOrbitalIntegrals) and (loaded.nocc, loaded.nvirt) == (10, 4)
    np.testing.assert_array_equal(loaded.eri, so.eri)
    loaded = cc.load_sequant_system(*files["cs"], e_nuc=ref["e_nuc"])
    assert isinstance(loaded, SpatialIntegrals) and (loaded.nocc, loaded.nvirt) == (5, 2)
    np.testing.assert_array_equal(loaded.fock, cs.fock)
    assert abs(loaded.e_hf - ref["e_hf"]) < 1e-9


def test_load_converts_both_ways(files):
    spatial = cc.load_sequant_system(*files["so"], closed_shell=True)
    assert isinstance(spatial, SpatialIntegrals)
    np.testing.assert_allclose(spatial.eri, default_spatial_system().eri, rtol=0, atol=1e-14)
    so = cc.load_sequant_system(*files["cs"], closed_shell=False)
    assert isinstance(so, SpinOrbitalIntegrals)
    np.testing.assert_allclose(so.eri, default_system().eri, rtol=0, atol=1e-14)
    assert abs(so.e_hf - spatial.e_hf) < 1e-9  # the same reference, computed two ways


def _so_pair(tmp_path, fock, eri, nocc, nvirt):
    paths = tmp_path / "f.dat", tmp_path / "g.dat"
    write_sequant_tensor(paths[0], fock, nocc, nvirt)
    write_sequant_tensor(paths[1], eri, nocc, nvirt)
    return paths


def _antisymmetric(rng, n):
    g = rng.standard_normal((n,) * 4)
    g = g + g.transpose(1, 0, 3, 2)  # ⟨pq|rs⟩ = ⟨qp|sr⟩
    return g - g.transpose(0, 1, 3, 2)


def test_load_errors(tmp_path, files):
    rng = np.random.default_rng(0)
    with pytest.raises(InputError, match="rank-2 Fock file and a rank-4 ERI file"):
        cc.load_sequant_system(files["so"][1], files["so"][0])
    with pytest.raises(InputError, match=r"disagree on the orbitals: .* 10, 4 and 5, 2"):
        cc.load_sequant_system(files["so"][0], files["cs"][1])
    fock = np.diag([-1.0, 0.5])
    eri = rng.standard_normal((2,) * 4)  # no symmetry at all
    with pytest.raises(InputError, match="neither antisymmetrized spin-orbital"):
        cc.load_sequant_system(*_so_pair(tmp_path, fock, eri, 1, 1))
    with pytest.raises(InputError, match="is not symmetric"):
        cc.load_sequant_system(*_so_pair(tmp_path, np.array([[-1.0, 0.1], [0.0, 0.5]]), eri, 1, 1))
    paths = _so_pair(tmp_path, fock, _antisymmetric(rng, 2), 1, 1)
    assert isinstance(cc.load_sequant_system(*paths), SpinOrbitalIntegrals)
    with pytest.raises(InputError, match="1 occupied and 1 virtual spin-orbitals"):
        cc.load_sequant_system(*paths, closed_shell=True)
    with pytest.raises(InputError, match="e_nuc must be a finite number"):
        cc.load_sequant_system(*paths, e_nuc=float("nan"))
    with pytest.raises(InputError, match="Cannot read SeQuant tensor file"):
        cc.load_sequant_system(tmp_path / "missing.dat", paths[1])


def test_unrestricted_spin_orbitals_cannot_run_closed_shell():
    so = default_system()
    eri = np.array(so.eri)
    for p, q, r, s, sign in ((0, 2, 4, 6, 1), (0, 2, 6, 4, -1), (2, 0, 6, 4, 1), (2, 0, 4, 6, -1)):
        eri[p, q, r, s] += sign * 1e-3  # an αα element that breaks α/β symmetry
    broken = SpinOrbitalIntegrals(
        fock=so.fock, eri=eri, mo_energies=so.mo_energies, nocc=10, nvirt=4, e_hf=so.e_hf
    )
    with pytest.raises(InputError, match="not those of a closed-shell"):
        spatial_from_spin_orbital(broken)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--eri", "g.dat"], "--eri needs --fock too"),
        (["--fock", "f.dat", "--eri", "g.dat", "--molecule", "h2o"], "either --molecule or --fock"),
        (["--e-nuc", "9.2"], "--e-nuc applies to --fock/--eri systems only"),
        (["--fock", "f.dat", "--eri", "g.dat", "--e-nuc", "nan"], "expected a finite number"),
        (["--fock", "f.dat", "--eri", "g.dat", "--basis", "sto-3g"], "--basis needs --molecule"),
        (["--fock", "nope.dat", "--eri", "g.dat"], "Cannot read SeQuant tensor file 'nope.dat'"),
    ],
)
def test_cli_file_option_errors(capsys, extra, message):
    assert main(["ccsd", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sq-jax: error: ") and message in err and "Traceback" not in err


def test_absurd_header_rank_is_refused_quickly(tmp_path):
    path = tmp_path / "f.dat"
    path.write_text("9999999999 1 1 # a corrupt header\n0\n")
    with pytest.raises(InputError, match=r"line 1: expected a header .* \(rank <= 8\)"):
        cc.load_sequant_system(path, path)
