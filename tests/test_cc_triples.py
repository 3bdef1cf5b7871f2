"""(T) compiled from sq_jax's own equations, against PySCF and a dense NumPy oracle.

Energies are compared with PySCF's (T) kernels on the *same* amplitudes (sq_jax's
converged ones, passed to PySCF), so the comparison is exact up to rounding: 1e-9 Eh.
Each (T) is run unbatched and under a memory budget that forces loops. The generated
denominator ``Δ`` is checked against the reference evaluator and an einsum oracle, with
its memory and FLOP charges.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

import sq_jax as sq
from sq_jax import InputError, cc
from sq_jax.cc.cli import main
from sq_jax.cc.integrals import default_spatial_system
from sq_jax.cc.triples import ccsd_t, triples_program
from sq_jax.forest.denominators import build_denominator
from sq_jax.lower.memory import memory_model
from tests.helpers.triples_oracle import closed_shell_triples

pyscf = pytest.importorskip("pyscf", reason="PySCF is the optional `chem` extra")
from pyscf import cc as pyscf_cc  # noqa: E402
from pyscf import gto, scf  # noqa: E402
from pyscf.cc import ccsd_t as pyscf_ccsd_t  # noqa: E402
from pyscf.cc import uccsd_t as pyscf_uccsd_t  # noqa: E402

TIGHT = {"e_tol": 1e-10, "t_tol": 1e-8}
H2O = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"
OH = "O 0 0 0; H 0 0 0.97"


def _scf(kind, atom, spin=0):
    mf = kind(gto.M(atom=atom, basis="6-31g", spin=spin, verbose=0))
    mf.conv_tol = 1e-11
    mf.kernel()
    assert mf.converged
    return mf


def _batched(run, fraction=4):
    """(T) under a budget of 1/fraction of the unbatched program's predicted memory."""
    whole = triples_program(run)
    budget = whole.memory_bytes // fraction
    program = triples_program(run, memory_budget=budget)
    assert program.lowered.loops(), "the budget should force batch loops"
    assert program.memory_bytes <= budget
    return ccsd_t(run, program=program)


def _orbits(run, fraction=4):
    """(T) over orbits of occupied blocks, under 1/fraction of the unbatched memory."""
    budget = triples_program(run).memory_bytes // fraction
    orbits = cc.triples_orbits(run, memory_budget=budget)
    assert orbits.block < run.nvirt and orbits.memory_bytes <= budget
    return ccsd_t(run, program=orbits)


@pytest.fixture(scope="module")
def rhf_run():
    mf = _scf(scf.RHF, H2O)
    run = cc.ccsd(mf, closed_shell=True, **TIGHT)
    assert run.converged
    mycc = pyscf_cc.RCCSD(mf)
    t1, t2 = np.ascontiguousarray(run.t1), np.ascontiguousarray(run.t2)
    reference = pyscf_ccsd_t.kernel(mycc, mycc.ao2mo(), t1, t2, verbose=0)
    return run, reference


def test_rhf_triples_equals_pyscf_unbatched_and_batched(rhf_run):
    run, reference = rhf_run
    e_t = run.ccsd_t()  # the default route: orbit loops under a quarter of the memory
    assert run.e_t == e_t
    assert abs(e_t - reference) < 1e-9
    assert abs(ccsd_t(run, program=triples_program(run)) - reference) < 1e-9  # plain
    assert abs(_batched(run) - reference) < 1e-9
    assert abs(_orbits(run) - reference) < 1e-9


@pytest.fixture(scope="module")
def shipped_run():
    """The shipped H2O/STO-3G closed-shell CCSD and the dense oracle's E(T) on it."""
    spatial = default_spatial_system()
    run = cc.ccsd(closed_shell=True, **TIGHT)
    chem = np.asarray(spatial.eri).transpose(0, 2, 1, 3)  # ⟨pq|rs⟩ -> (pq|rs)
    return run, closed_shell_triples(run.t1, run.t2, chem, np.asarray(spatial.fock))


def test_rhf_triples_equals_dense_oracle(shipped_run):
    run, oracle = shipped_run
    assert abs(run.ccsd_t(batch={"a": 2, "i": 2}) - oracle) < 1e-11
    assert abs(run.ccsd_t(block=2) - oracle) < 1e-11  # orbit loops, the last block padded
    with pytest.raises(sq.PlanError, match="at most one of batch=, memory_budget= and block="):
        run.ccsd_t(batch={"i": 2}, block=2)


def test_uhf_triples_equals_pyscf_uccsd_t(tmp_path):
    mf = _scf(scf.UHF, OH, spin=1)
    with pytest.raises(sq.InputError, match="equations='ccsd_so'"):
        cc.ccsd(mf, max_iter=1).ccsd_t()  # the spin-blocked route has no (T) yet
    run = cc.ccsd(mf, equations="ccsd_so", **TIGHT)
    assert run.converged
    t1, t2 = (tuple(np.ascontiguousarray(x) for x in xs) for xs in run.unrestricted_amplitudes())
    mycc = pyscf_cc.UCCSD(mf)
    reference = pyscf_uccsd_t.kernel(mycc, mycc.ao2mo(), t1, t2, verbose=0)
    assert abs(run.ccsd_t() - reference) < 1e-9
    assert abs(ccsd_t(run, program=triples_program(run)) - reference) < 1e-9  # plain
    assert abs(_batched(run, fraction=3) - reference) < 1e-9
    assert abs(_orbits(run, fraction=3) - reference) < 1e-9


def test_triples_refuses_ccd_and_non_canonical_orbitals():
    with pytest.raises(InputError, match="corrects CCSD"):
        cc.ccd(closed_shell=True).ccsd_t()
    spatial = default_spatial_system()
    fock = np.array(spatial.fock)
    fock[0, 1] = fock[1, 0] = 1e-3  # an occupied-occupied coupling
    bent = type(spatial)(
        fock, spatial.eri, spatial.mo_energies, spatial.nocc, spatial.nvirt, spatial.e_hf
    )
    run = cc.ccsd(bent, closed_shell=True, max_iter=2)
    with pytest.raises(InputError, match="canonical orbitals"):
        run.ccsd_t()


def test_cli_triples_prints_e_t(shipped_run):
    _, oracle = shipped_run
    out = io.StringIO()
    args = ["ccsd", "--closed-shell", "--triples", "--quiet", "--batch", "a=2"]
    with contextlib.redirect_stdout(out):
        status = main([*args, "--max-iter", "100"])
    assert status == 0
    lines = dict(line.split("=", 1) for line in out.getvalue().splitlines() if "=" in line)
    assert abs(float(lines["E(T)               "]) - oracle) < 1e-9  # CLI's default tolerances
    out = io.StringIO()
    args = [
        "ccsd",
        "--closed-shell",
        "--triples",
        "--quiet",
        "--memory",
        "1MiB",
    ]  # (T) and CCSD both fit whole
    with contextlib.redirect_stdout(out):
        assert main([*args, "--max-iter", "100"]) == 0
    lines = dict(line.split("=", 1) for line in out.getvalue().splitlines() if "=" in line)
    assert abs(float(lines["E(T)               "]) - oracle) < 1e-9
    assert "orbits of" in lines["(T) time           "]
    out = io.StringIO()  # neither --batch nor --memory: the orbit loops by default
    with contextlib.redirect_stdout(out):
        assert main(["ccsd", "--closed-shell", "--triples", "--quiet", "--max-iter", "100"]) == 0
    lines = dict(line.split("=", 1) for line in out.getvalue().splitlines() if "=" in line)
    assert abs(float(lines["E(T)               "]) - oracle) < 1e-9
    assert "orbits of" in lines["(T) time           "]
    assert main(["ccd", "--triples"]) == 2


# -- the generated denominator ---------------------------------------------------------

EQS = """R{a1,a2;i1} = Δ{a1,a2;i1} h{a1,a2;i1}
S{a1,a2;i1} = Δ{a1;i1} h{a1,a2;i1}
E = h{a1,a2;i1} R{a1,a2;i1}
"""


@pytest.fixture(scope="module")
def random_system():
    rng = np.random.default_rng(7)
    o, v = 3, 5
    eps = np.concatenate([np.sort(rng.uniform(-2, -1, o)), np.sort(rng.uniform(0.5, 2, v))])
    return sq.Spaces(i=o, a=v), {"ε": eps, "h{a,a;i}": rng.normal(size=(v, v, o))}


def _oracle(x, o):
    eo, ev, h = x["ε"][:o], x["ε"][o:], x["h{a,a;i}"]
    d3 = 1 / (eo[None, None, :] - ev[:, None, None] - ev[None, :, None])
    d2 = 1 / (eo[None, :] - ev[:, None])
    r = d3 * h
    return {"R": r, "S": np.einsum("ai,abi->abi", d2, h), "E": np.einsum("abi,abi->", h, r)}


@pytest.mark.parametrize("batch", [None, {"a": 2}, {"a": 3, "i": 2}])
def test_denominator_program_matches_reference_and_oracle(random_system, batch):
    spaces, x = random_system
    ref = sq.evaluate_reference(EQS, spaces, x)
    want = _oracle(x, spaces.extent("i"))
    out = sq.compile(EQS, spaces, batch=batch)(x)
    for name, value in want.items():
        np.testing.assert_allclose(ref[name], value, rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(np.asarray(out[name]), value, rtol=1e-12, atol=1e-13)


def test_denominator_is_charged_by_memory_model_and_flops(random_system):
    spaces, _ = random_system
    o, v = spaces.extent("i"), spaces.extent("a")
    eqs = "S{a1,a2;i1} = Δ{a1;i1} h{a1,a2;i1}"
    whole = sq.compile(eqs, spaces)
    product = v * v * o  # the Hadamard product over (a1, i1), outer in a2
    assert whole.flops == product + 2 * v * o  # Δ{a;i}: 2 FLOPs per element, built once
    # a BatchPlan given whole keeps its defaults: a loop per result index of `a`
    plan = sq.BatchPlan.of({"a": {"batches": 5, "roles": "external"}})
    cut = sq.compile(eqs, spaces, batch=plan)
    assert len(cut.lowered.loops()) == 2  # over a1 and a2
    assert cut.flops == product + 5 * 2 * v * o  # rebuilt for each batch of a2
    names = [n for point in memory_model(cut.lowered).points for n, _ in point]
    assert any("Δ{a;i}" in n and "generated" in n for n in names)


def test_denominator_builds_one_batch_and_refuses_dense_input(random_system):
    spaces, x = random_system
    o = spaces.extent("i")
    energies = {"ε{i}": x["ε"][:o], "ε{a}": x["ε"][o:]}
    whole = build_denominator(np, "Δ{a,a;i}", energies)
    part = build_denominator(np, "Δ{a,a;i}", energies, {1: (2, 2), 2: (1, 1)})
    np.testing.assert_array_equal(part, whole[:, 2:4, 1:2])
    with pytest.raises(InputError, match="generated denominator"):
        sq.evaluate_reference(EQS, spaces, {**x, "Δ{a,a;i}": np.ones((5, 5, 3))})
