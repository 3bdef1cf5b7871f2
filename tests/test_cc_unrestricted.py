"""The spin-blocked unrestricted equations (``ccsd_uhf``, ``ccd_uhf``) and their integrals.

* The derivation: on a random unrestricted system (random AO integrals, two random orbital
  sets, a non-canonical spin-diagonal Fock matrix, random amplitudes), the compiled
  spin-blocked residuals and energy equal the blocks of the hand-written spin-orbital
  oracle's (``tests.helpers.cc_oracle``), to 1e-12.
* Batching: a residual program that loops over the virtual spaces gives the unbatched
  program's residuals.
* The integral blocks built from a PySCF UHF object equal the blocks of the full
  spin-orbital ⟨pq‖rs⟩ of the spin-orbital route; energies vs PySCF are in
  ``test_cc_open_shell.py`` (which now runs this route by default).
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources

import numpy as np
import pytest

import sq_jax as sq
from sq_jax import InputError, cc
from sq_jax.cc.equations import load_equations
from sq_jax.cc.unrestricted import AMPLITUDES, RESIDUAL_OF, spin_block_builder
from sq_jax.forest.inputs import input_specs
from tests.conftest import REPO_ROOT
from tests.helpers import cc_oracle
from tests.helpers.uhf_blocks import block_of, random_unrestricted, spin_orbital_positions

SIZES = (3, 2, 2, 3)  # occupied α, occupied β, virtual α, virtual β


def _spaces(oa, ob, va, vb):
    return sq.Spaces({"i↑": oa, "i↓": ob, "a↑": va, "a↓": vb})


def _inputs(program, f, g, t1, t2, positions, nocc):
    out = {}
    for spec in input_specs(program.schedule.annotated.forest):
        key = spec.block_key
        full = {"f": f, "g": g}.get(spec.label)
        if full is not None:
            out[key] = block_of(full, key, positions, 0)
        else:
            out[key] = block_of(t1 if key.count(",") == 0 else t2, key, positions, nocc)
    return out


def _residual_block(full, amplitude_key, positions, nocc):
    return block_of(full, amplitude_key, positions, nocc)


@pytest.mark.parametrize("method", ["ccsd", "ccd"])
def test_spin_blocked_residuals_equal_the_spin_orbital_oracle_blocks(method):
    oa, ob, _, _ = SIZES
    f, g, t1, t2 = random_unrestricted(7, *SIZES)
    if method == "ccd":
        t1 = np.zeros_like(t1)
    nocc, positions = oa + ob, spin_orbital_positions(*SIZES)
    spaces = _spaces(*SIZES)
    program = sq.compile(sq.parse(load_equations(f"{method}_uhf"), spaces=spaces), spaces)
    got = program(_inputs(program, f, g, t1, t2, positions, nocc))
    if method == "ccsd":
        r1, r2 = cc_oracle.ccsd_residuals(f, g, t1, t2, nocc)
        want = {"R1a": r1, "R1b": r1, "R2aa": r2, "R2ab": r2, "R2bb": r2}
        energy = cc_oracle.ccsd_energy(f, g, t1, t2, nocc)
    else:
        r2 = cc_oracle.ccd_residual(f, g, t2, nocc)
        want = {"R2aa": r2, "R2ab": r2, "R2bb": r2}
        energy = cc_oracle.ccsd_energy(f, g, t1, t2, nocc)
    assert set(got) == {*want, "E"}
    assert abs(float(got["E"]) - energy) < 1e-12
    for name, full in want.items():
        block = _residual_block(full, RESIDUAL_OF[name], positions, nocc)
        assert np.abs(block).max() > 1e-2  # a block that is really there
        np.testing.assert_allclose(np.asarray(got[name]), block, rtol=0, atol=1e-12)


def test_batched_residual_program_equals_the_unbatched_one():
    """Loops over both virtual spaces (a plan given; the memory_budget search over the
    four spin spaces takes minutes at these tiny extents, too long for CI)."""
    sizes = (3, 2, 3, 4)
    oa, ob, _, _ = sizes
    f, g, t1, t2 = random_unrestricted(3, *sizes)
    nocc, positions = oa + ob, spin_orbital_positions(*sizes)
    spaces = _spaces(*sizes)
    eqs = [eq for eq in sq.parse(load_equations("ccsd_uhf"), spaces=spaces) if eq.name != "E"]
    whole = sq.compile(eqs, spaces)
    batched = sq.compile(eqs, spaces, batch={"a↑": 3, "a↓": 2})
    assert {b.space for b in batched.schedule.annotated.plan.spaces} == {"a↑", "a↓"}
    inputs = _inputs(whole, f, g, t1, t2, positions, nocc)
    want, got = whole(inputs), batched(inputs)
    for name in RESIDUAL_OF:
        np.testing.assert_allclose(np.asarray(got[name]), np.asarray(want[name]), atol=1e-12)


def test_shipped_system_on_the_unrestricted_route_equals_the_spin_orbital_route():
    """An RHF reference serves both spins: the same energy and amplitudes as ccsd_so."""
    blocked = cc.ccsd(equations="ccsd_uhf", e_tol=1e-11, t_tol=1e-9)
    spin_orbital = cc.ccsd(e_tol=1e-11, t_tol=1e-9)
    assert blocked.spin_blocked and not spin_orbital.spin_blocked
    assert abs(blocked.e_corr - spin_orbital.e_corr) < 1e-9
    for got, want in zip(
        sum(blocked.unrestricted_amplitudes(), ()),
        sum(spin_orbital.unrestricted_amplitudes(), ()),
        strict=True,
    ):
        np.testing.assert_allclose(got, want, atol=1e-7)


def test_ccd_on_the_unrestricted_route_equals_spin_orbital_ccd():
    blocked = cc.ccd(equations="ccd_uhf", e_tol=1e-11, t_tol=1e-9)
    spin_orbital = cc.ccd(e_tol=1e-11, t_tol=1e-9)
    assert abs(blocked.e_corr - spin_orbital.e_corr) < 1e-9
    (t1a, t1b), (_, t2ab, _) = blocked.unrestricted_amplitudes()
    assert t1a.shape == (5, 2) and not t1a.any() and not t1b.any() and not blocked.t1.any()
    np.testing.assert_allclose(t2ab, spin_orbital.unrestricted_amplitudes()[1][1], atol=1e-7)


@pytest.mark.parametrize("name", ["ccsd_uhf", "ccd_uhf"])
def test_shipped_files_are_what_the_derivation_script_writes(name):
    script = REPO_ROOT / "scripts" / "spin_block_uhf.py"
    argv = [sys.executable, str(script), *(["--ccd"] if name == "ccd_uhf" else [])]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    written = subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout
    shipped = (resources.files("sq_jax.cc") / "equations" / f"{name}.txt").read_text("utf-8")
    assert written == shipped


def test_equations_option_is_checked_before_any_work():
    with pytest.raises(InputError, match="not shipped"):
        cc.ccsd(equations="ccsd_xyz")
    with pytest.raises(InputError, match="not ccd equations"):
        cc.ccd(equations="ccsd_uhf")
    with pytest.raises(InputError, match="closed_shell=True asks"):
        cc.ccsd(equations="ccsd_uhf", closed_shell=True)
    with pytest.raises(InputError, match="df=True asks"):
        cc.ccsd(equations="ccsd_uhf", df=True)
    with pytest.raises(InputError, match="auxbasis='cc-pvdz-ri' applies only"):
        cc.ccsd(equations="ccsd_uhf", auxbasis="cc-pvdz-ri")


def test_spin_block_keys_outside_the_conventions_are_refused():
    builder = spin_block_builder(None)
    for key in ("g{i↑,a↓;a↓,i↑}", "f{a↑;i↓}", "g{i,a;i,a}", "t{a↑;i↑}"):
        with pytest.raises(InputError, match="cannot build the spin block"):
            builder.build([key])


def test_uhf_blocks_equal_the_full_spin_orbital_integrals_and_fock():
    pytest.importorskip("pyscf", reason="PySCF is the optional `chem` extra")
    from pyscf import gto, scf

    from sq_jax.cc.blocks import integral_source

    mol = gto.M(atom="O 0 0 0; H 0 0 0.97", basis="sto-3g", spin=1, verbose=0)
    mf = scf.ROHF(mol).run(conv_tol=1e-12)  # ROHF: non-canonical Fock, f{a;i} ≠ 0
    source = integral_source(mf, frozen=1)
    nocc, nmo = source.nocc, source.nmo
    g_full = source.chem(("p",) * 4)
    g_full = g_full.transpose(0, 2, 1, 3) - g_full.transpose(0, 2, 3, 1)
    builder = spin_block_builder(mf, frozen=1)
    (oa, ob), (va, vb) = builder.nocc, builder.nvirt
    positions = spin_orbital_positions(oa, ob, va, vb)
    assert nocc == oa + ob and nmo == oa + ob + va + vb
    keys = ["g{i↑,i↑;a↑,a↑}", "g{a↑,i↓;i↑,a↓}", "g{p↓,a↓;i↓,p↓}", "g{a↑,a↓;a↑,a↓}", "f{a↑;i↑}"]
    ints = builder.build(keys)
    for key in keys[:4]:
        want = block_of(g_full, key, positions, 0)
        np.testing.assert_allclose(ints.blocks[key], want, atol=1e-12)
    fock = block_of(source.fock, "f{a↑;i↑}", positions, 0)
    np.testing.assert_allclose(ints.blocks["f{a↑;i↑}"], fock, atol=1e-12)
    assert np.abs(fock).max() > 1e-3
    d = ints.denominators()
    assert [d[k].shape for k in AMPLITUDES] == [
        (va, oa),
        (vb, ob),
        (va, va, oa, oa),
        (va, vb, oa, ob),
        (vb, vb, ob, ob),
    ]


def test_spin_orbital_route_stays_reachable_and_lambda_refuses_the_blocked_run():
    pytest.importorskip("pyscf", reason="PySCF is the optional `chem` extra")
    from pyscf import gto, scf

    mol = gto.M(atom="O 0 0 0; H 0 0 0.97", basis="sto-3g", spin=1, verbose=0)
    mf = scf.UHF(mol).run(conv_tol=1e-12)
    blocked = cc.ccsd(mf, e_tol=1e-11, t_tol=1e-9)
    spin_orbital = cc.ccsd(mf, equations="ccsd_so", e_tol=1e-11, t_tol=1e-9)
    assert (blocked.equations, spin_orbital.equations) == ("ccsd_uhf", "ccsd_so")
    assert abs(blocked.e_corr - spin_orbital.e_corr) < 1e-9
    np.testing.assert_allclose(blocked.t2, spin_orbital.t2, atol=1e-7)
    with pytest.raises(InputError, match="equations='ccsd_so'"):
        cc.solve_lambda(blocked)
