"""Block-wise integrals (``sq_jax.cc.blocks``), ``ccsd_so_df`` and the ``df=True`` drivers.

Checks: ``ccsd_so_df`` evaluated on spin-orbital factors B equals ``ccsd_so`` on the
⟨pq‖rs⟩ those factors give (H2O/6-31G, exact factors); every block the builders make
equals the slice of the full tensor the old all-at-once builders make; the builders ask
PySCF only for the orbital blocks they need (never four full orbital sets, never ao2mo for
DF); ``cc.ccsd(mf, df=True)`` on both routes equals PySCF's DF-CCSD, also with an explicit
auxiliary basis; the CLI's ``--df``.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

import sq_jax as sq
from sq_jax import InputError, cc
from sq_jax.cc.blocks import block_builder, read_blocks
from sq_jax.cc.cli import main
from sq_jax.cc.df import df_from_spatial, df_integrals
from sq_jax.cc.equations import load_equations
from sq_jax.cc.integrals import (
    default_reference,
    default_spatial_system,
    spatial_integrals,
    spin_orbital_from_spatial,
    spin_orbital_integrals,
)

pyscf = pytest.importorskip("pyscf")
from pyscf import ao2mo, df, gto, scf  # noqa: E402
from pyscf import cc as pyscf_cc  # noqa: E402

H2O = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"
T1, T2 = "t{a;i}", "t{a,a;i,i}"
TIGHT = {"e_tol": 1e-12, "t_tol": 1e-10}
SO_SHIPPED = spin_orbital_from_spatial(default_spatial_system())


@pytest.fixture(scope="module")
def mf_631g():
    mf = scf.RHF(gto.M(atom=H2O, basis="6-31g", verbose=0))
    mf.conv_tol = 1e-12
    return mf.run()


@pytest.fixture(scope="module")
def df_sto3g():
    """A density-fitted SCF and PySCF's DF-RCCSD on it (cc.CCSD of a DF SCF)."""
    mf = scf.RHF(gto.M(atom=H2O, basis="sto-3g", verbose=0)).density_fit()
    mf.conv_tol = 1e-12
    mf.run()
    mycc = pyscf_cc.CCSD(mf)
    mycc.conv_tol, mycc.conv_tol_normt = 1e-12, 1e-10
    mycc.run()
    assert mycc.converged
    return mf, mycc.e_corr


def _slot_spaces(key: str) -> list[str]:
    body = key[key.index("{") + 1 : -1]
    return [s for s in body.replace(";", ",").split(",") if s in ("i", "a")]


def _cut(full: np.ndarray, key: str, nocc: int) -> np.ndarray:
    cuts = {"i": slice(0, nocc), "a": slice(nocc, None)}
    return full[tuple(cuts[s] for s in _slot_spaces(key))]


def _spin_factor(b: np.ndarray) -> np.ndarray:
    """Oracle: B[P, Q, K] = B[p, q, K] δ_σPσQ through a Kronecker product per K."""
    return np.stack([np.kron(b[:, :, k], np.eye(2)) for k in range(b.shape[2])], axis=2)


def _random_inputs(fock, nocc, nvirt, seed=3):
    rng = np.random.default_rng(seed)
    n = fock.shape[0]
    noise = rng.standard_normal((n, n))
    t1 = 0.1 * rng.standard_normal((nvirt, nocc))
    t2 = 0.1 * rng.standard_normal((nvirt, nvirt, nocc, nocc))
    t2 = t2 - t2.transpose(1, 0, 2, 3)
    t2 = t2 - t2.transpose(0, 1, 3, 2)
    return {"f": fock + 0.05 * (noise + noise.T), T1: t1, T2: t2}


def test_so_df_text_is_so_text_with_g_split():
    so, so_df = load_equations("ccsd_so"), load_equations("ccsd_so_df")
    assert "g{" not in so_df
    assert so_df.count("B{") == 4 * so.count("g{")
    terms = [len(eq.rhs.terms) for eq in sq.parse(so_df, expand_symmetrizers=False)]
    dense = [len(eq.rhs.terms) for eq in sq.parse(so, expand_symmetrizers=False)]
    assert terms == [d + line.count("g{") for d, line in zip(dense, so.splitlines(), strict=True)]
    assert terms == [5, 23, 58]


def test_so_df_equals_so_on_exact_factors(mf_631g):
    """ccsd_so_df on B == ccsd_so on ⟨pq‖rs⟩ = Σ B B − Σ B B (energy and residuals)."""
    dfi = df_from_spatial(spatial_integrals(mf_631g))
    g = spin_orbital_from_spatial(dfi.to_spatial()).eri  # the ⟨pq‖rs⟩ B reproduces
    assert np.abs(g - spin_orbital_integrals(mf_631g).eri).max() < 1e-9  # and it is H2O's
    builder = block_builder(dfi, spin_orbital=True, df=True)
    spaces = builder.spaces()
    eqs_df = sq.parse(load_equations("ccsd_so_df"))
    ints = builder.build(read_blocks(sq.build_forest(eqs_df, spaces)))
    inputs = _random_inputs(ints.fock, ints.nocc, ints.nvirt)
    out_df = sq.evaluate_reference(eqs_df, spaces, {**inputs, **ints.blocks})
    out = sq.evaluate_reference(
        sq.parse(load_equations("ccsd_so")),
        sq.Spaces(i=ints.nocc, a=ints.nvirt),
        {**inputs, "g": g},
    )
    for key in ("E", "R1", "R2"):
        np.testing.assert_allclose(out_df[key], out[key], rtol=0, atol=1e-12)
    assert np.abs(out["R2"]).max() > 0.1 and abs(float(out["E"])) > 1e-3


@pytest.mark.parametrize("name", ["ccsd_so", "ccsd_cs", "ccsd_so_df", "ccsd_cs_df"])
def test_blocks_equal_slices_of_the_full_tensors(mf_631g, name):
    spin_orbital, fitted = "_so" in name, name.endswith("_df")
    builder = block_builder(mf_631g, spin_orbital=spin_orbital, df=fitted)
    keys = read_blocks(sq.build_forest(sq.parse(load_equations(name)), builder.spaces()))
    ints = builder.build(keys)
    guess = "B{a,i;;Κ}" if fitted else "g{a,a;i,i}"
    assert set(ints.blocks) == set(keys) | {guess}
    if fitted:
        b = df_integrals(mf_631g).b
        full = _spin_factor(b) if spin_orbital else b
    else:
        full = (spin_orbital_integrals if spin_orbital else spatial_integrals)(mf_631g).eri
    for key, block in ints.blocks.items():
        np.testing.assert_allclose(block, _cut(full, key, ints.nocc), rtol=0, atol=1e-12)
    assert ints.nbytes < full.nbytes or fitted
    t1, t2 = ints.mp2_amplitudes()
    o = ints.nocc
    d1, d2 = ints.denominators()
    vvoo = np.einsum("aiK,bjK->abij", full[o:, :o], full[o:, :o]) if fitted else None
    if fitted and spin_orbital:
        vvoo = vvoo - vvoo.transpose(0, 1, 3, 2)
    np.testing.assert_allclose(t2 * d2, full[o:, o:, :o, :o] if vvoo is None else vvoo, atol=1e-12)
    np.testing.assert_allclose(t1 * d1, ints.fock[o:, :o], atol=1e-14)


def test_builders_request_only_the_orbital_blocks_they_need(mf_631g, monkeypatch):
    requests: list[tuple[int, ...]] = []
    real_general = ao2mo.general

    def recording_general(eri_or_mol, mo_coeffs, *args, **kwargs):
        requests.append(tuple(c.shape[1] for c in mo_coeffs))
        return real_general(eri_or_mol, mo_coeffs, *args, **kwargs)

    def refuse(*args, **kwargs):
        raise AssertionError("the block builders must not transform all orbitals at once")

    monkeypatch.setattr(ao2mo, "general", recording_general)
    monkeypatch.setattr(ao2mo, "full", refuse)
    monkeypatch.setattr(ao2mo, "kernel", refuse)
    nmo = mf_631g.mo_coeff.shape[1]
    nocc = int((mf_631g.mo_occ > 0).sum())
    builder = block_builder(mf_631g, spin_orbital=True)
    keys = read_blocks(sq.build_forest(sq.parse(load_equations("ccsd_so")), builder.spaces()))
    ints = builder.build(keys)
    assert requests and all(set(r) <= {nocc, nmo - nocc} for r in requests)
    assert len(requests) == len(set(requests)) == 6  # each chemist block class once
    assert max(b.nbytes for b in ints.blocks.values()) == (2 * (nmo - nocc)) ** 4 * 8
    assert ints.nbytes < (2 * nmo) ** 4 * 8  # less than the full ⟨pq‖rs⟩

    requests.clear()
    monkeypatch.setattr(ao2mo, "general", refuse)  # density fitting never goes four-index
    dfb = block_builder(mf_631g, spin_orbital=True, df=True)
    fitted = dfb.build(["B{i,a;;Κ}", "B{a,a;;Κ}", "B{i,i;;Κ}"])
    naux = dfb.spaces().extent("Κ")
    assert {b.shape for b in fitted.blocks.values()} == {
        (2 * nocc, 2 * (nmo - nocc), naux),
        (2 * (nmo - nocc), 2 * nocc, naux),
        (2 * (nmo - nocc), 2 * (nmo - nocc), naux),
        (2 * nocc, 2 * nocc, naux),
    }


@pytest.mark.parametrize("closed_shell", [True, False])
def test_df_ccsd_matches_pyscf_df_ccsd(df_sto3g, closed_shell):
    mf, e_ref = df_sto3g
    run = cc.ccsd(mf, df=True, closed_shell=closed_shell, **TIGHT)
    assert run.result.converged
    assert abs(run.e_corr - e_ref) < 1e-9
    assert abs(e_ref - default_reference()["e_corr_rccsd"]) > 1e-6  # DF changes the energy
    read = read_blocks(run.residual_program, run.energy_program)
    assert read and all(key.startswith("B{") for key in read)
    assert run.nocc == (5 if closed_shell else 10)


def test_explicit_auxbasis_matches_pyscf(df_sto3g):
    mol = df_sto3g[0].mol
    mf = scf.RHF(mol)
    mf.conv_tol = 1e-12
    mf.run()
    aux = df.make_auxbasis(mol, mp2fit=True)
    mycc = pyscf_cc.RCCSD(mf).density_fit(auxbasis=aux)
    mycc.conv_tol, mycc.conv_tol_normt = 1e-12, 1e-10
    mycc.run()
    run = cc.ccsd(mf, df=True, closed_shell=True, auxbasis=aux, **TIGHT)
    assert abs(run.e_corr - mycc.e_corr) < 1e-9
    assert abs(run.e_corr - df_sto3g[1]) > 1e-7  # another auxiliary basis, another energy


def test_mean_field_route_without_df_matches_pyscf():
    mf = scf.RHF(gto.M(atom=H2O, basis="sto-3g", verbose=0))
    mf.conv_tol = 1e-12
    run = cc.ccsd(mf.run(), **TIGHT)
    assert abs(run.e_corr - default_reference()["e_corr_gccsd"]) < 1e-9
    assert all(key.startswith("g{") for key in read_blocks(run.residual_program))


def test_cli_df_on_the_shipped_system():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["ccsd", "--df", "--closed-shell", "--quiet", "--max-iter", "60"])
    assert status == 0, out.getvalue()
    line = next(ln for ln in out.getvalue().splitlines() if ln.startswith("E_corr"))
    # The shipped integrals are factorized exactly, so DF gives the dense energy.
    assert abs(float(line.split("=")[1]) - default_reference()["e_corr_rccsd"]) < 1e-8
    assert "closed-shell, DF" in out.getvalue()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: cc.ccd(df=True), "no shipped equations for ccd"),
        (lambda: cc.ccsd(auxbasis="weigend"), "auxbasis='weigend' applies only"),
        (lambda: cc.ccsd(SO_SHIPPED, df=True), "refactored"),
        (lambda: block_builder(None, spin_orbital=True).build(["g{i,x;a,a}"]), "g{i,x;a,a}"),
        (lambda: block_builder(None, spin_orbital=False, df=True).build(["g{i,i;a,a}"]), "B{X,Y"),
    ],
)
def test_bad_block_requests_are_refused(call, message):
    with pytest.raises(InputError, match=message):
        call()


def test_cli_auxbasis_needs_df_and_a_molecule():
    out = io.StringIO()
    with contextlib.redirect_stderr(out):
        assert main(["ccsd", "--auxbasis", "weigend"]) == 2
    assert "--auxbasis 'weigend' needs --df and --molecule" in out.getvalue()


def test_implicit_energy_refuses_a_density_fitted_run():
    from sq_jax.cc.implicit import implicit_energy

    run = cc.ccsd(closed_shell=True, df=True, max_iter=3)  # the shipped system, exact factors
    with pytest.raises(InputError, match="do not read g"):
        implicit_energy(run)
