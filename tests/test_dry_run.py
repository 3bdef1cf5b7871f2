"""The dry run: sizes, plan, memory, FLOPs and time of a CC run, with no SCF and no integrals.

Oracles: PySCF's own RHF occupations and density-fitting factors for the sizes, and
programs compiled independently with ``sq.compile`` for the plan, memory and FLOPs.
"""

import dataclasses
import re

import numpy as np
import pytest
from pyscf import gto, scf

import sq_jax as sq
from sq_jax.budget import plan_for_budget, required_bytes
from sq_jax.cc import dry_run
from sq_jax.cc.cli import main
from sq_jax.cc.df import df_integrals
from sq_jax.cc.drivers import PREPARE_MIN_FLOPS, prepared_inputs
from sq_jax.cc.equations import load_equations
from sq_jax.cc.forecast import measure_gemm_rate
from sq_jax.cc.xyz import molecule_geometry
from sq_jax.lower.aot import AotJit

H2O = molecule_geometry("h2o").pyscf_atoms()


@pytest.fixture(scope="module")
def h2o_dz_rhf():
    return scf.RHF(gto.M(atom=H2O, basis="cc-pvdz", verbose=0)).run(conv_tol=1e-10)


def _programs(name, spaces, **plan):
    """The residual and energy programs, compiled as the drivers do."""
    eqs = sq.parse(load_equations(name), spaces=spaces)
    residual = sq.compile([e for e in eqs if e.name != "E"], spaces, pair_symmetry=True, **plan)
    energy = sq.compile([e for e in eqs if e.name == "E"], spaces)
    return residual, energy


def test_molecule_sizes_are_those_of_the_rhf_it_would_run(h2o_dz_rhf):
    occupied = int(np.count_nonzero(h2o_dz_rhf.mo_occ > 0))
    virtual = len(h2o_dz_rhf.mo_occ) - occupied
    assert (occupied, virtual) == (5, 19)
    cs = dry_run(H2O, "cc-pvdz", closed_shell=True, gemm_rate=1e9)
    assert (cs.nocc, cs.nvirt, cs.naux) == (occupied, virtual, None)
    assert (cs.equations, cs.system) == ("ccsd_cs", "H2O/cc-pvdz")
    so = dry_run(h2o_dz_rhf.mol, method="ccd", gemm_rate=1e9)  # a Mole; spin-orbital
    assert (so.nocc, so.nvirt, so.equations) == (2 * occupied, 2 * virtual, "ccd_so")


def test_df_naux_is_that_of_the_factors_df_integrals_builds(h2o_dz_rhf):
    report = dry_run(H2O, "cc-pvdz", closed_shell=True, df=True, gemm_rate=1e9)
    dfi = df_integrals(h2o_dz_rhf)
    assert (report.nocc, report.nvirt, report.naux) == (dfi.nocc, dfi.nvirt, dfi.naux)
    assert report.equations == "ccsd_cs_df"
    assert "naux = " + str(dfi.naux) in str(report)


@pytest.mark.parametrize(
    ("options", "name", "plan"),
    [
        ({"closed_shell": True}, "ccsd_cs", {}),
        ({"closed_shell": False, "batch": {"a": 2}}, "ccsd_so", {"batch": {"a": 2}}),
        (  # CCD: the planner searches CCSD's plans 4x slower
            {"closed_shell": True, "method": "ccd", "memory_budget": "10 kB"},
            "ccd_cs",
            {"memory_budget": 10_000},
        ),
    ],
)
def test_plan_memory_and_flops_equal_the_compiled_programs(options, name, plan):
    report = dry_run(nocc=2, nvirt=5, gemm_rate=1e9, **options)
    n = 1 if options["closed_shell"] else 2
    spaces = sq.Spaces(i=2 * n, a=5 * n)
    if "memory_budget" in plan:
        # the planner's plan with its headroom, on the forest compile() plans on (a run
        # first tries a cheaper plan the model fits without it, if XLA confirms it)
        eqs = [e for e in sq.parse(load_equations(name), spaces=spaces) if e.name != "E"]
        forest = dataclasses.replace(sq.build_forest(eqs, spaces), pair_symmetry=True)
        plan = {"batch": plan_for_budget(forest, plan["memory_budget"])}
    residual, energy = _programs(name, spaces, **plan)
    assert (report.nocc, report.nvirt) == (2 * n, 5 * n)
    assert report.plan == residual.schedule.annotated.plan
    assert report.memory_bytes == residual.memory_bytes
    assert report.peak_bytes == residual.peak_bytes
    assert report.required_bytes == required_bytes(residual.schedule)
    assert report.flops_per_iteration == residual.flops + energy.flops
    if "memory_budget" in options:
        assert report.fits is True and report.plan != sq.BatchPlan()  # planned to fit
        assert report.required_bytes <= 10_000 < report.unbatched_required_bytes
    else:
        assert report.fits is None


def test_unbatched_flops_are_the_packed_programs_not_the_forests():
    # the drivers pack the ladder's pairs (pair_symmetry=True): fewer FLOPs than the forest
    # (at sizes where the ladder's saved FLOPs pay for its gather: lower/pairs.py)
    report = dry_run(nocc=10, nvirt=40, closed_shell=True, gemm_rate=1e9)
    spaces = sq.Spaces(i=10, a=40)
    residual, energy = _programs("ccsd_cs", spaces)
    forests = [
        sq.build_forest(
            [e for e in sq.parse(load_equations("ccsd_cs"), spaces=spaces) if pick(e)], spaces
        )
        for pick in (lambda e: e.name != "E", lambda e: e.name == "E")
    ]
    assert report.flops_per_iteration == residual.flops + energy.flops
    assert report.flops_per_iteration < sum(f.flops for f in forests)


def test_a_large_run_is_priced_as_the_solve_prepares_it():
    # From PREPARE_MIN_FLOPS up a solve binds the integrals once (fixed_inputs): packing
    # them is then free, so the prepared program is what an iteration runs
    spaces = sq.Spaces(i=12, a=80)
    eqs = sq.parse(load_equations("ccsd_cs"), spaces=spaces)
    residual, energy = _programs("ccsd_cs", spaces)
    assert residual.flops >= PREPARE_MIN_FLOPS
    fixed = prepared_inputs(residual, eqs)
    assert fixed == ["f", "g"]
    prepared = sq.compile(
        [e for e in eqs if e.name != "E"], spaces, pair_symmetry=True, fixed_inputs=fixed
    )
    report = dry_run(nocc=12, nvirt=80, closed_shell=True, gemm_rate=1e9)
    assert report.flops_per_iteration == prepared.flops + energy.flops
    assert report.flops_per_iteration < residual.flops + energy.flops
    assert report.memory_bytes == prepared.memory_bytes
    # under a budget nothing is prepared (held copies would be memory it did not plan)
    assert prepared_inputs(residual, eqs, memory_budget="1 GiB") == []


def test_time_estimate_is_flops_over_the_injected_rate():
    report = dry_run(nocc=2, nvirt=5, closed_shell=True, gemm_rate=2.5e9)
    assert report.gemm_rate == 2.5e9
    assert report.seconds_per_iteration == report.flops_per_iteration / 2.5e9
    text = str(report)
    assert "GEMM rate  2.5 GFLOP/s" in text
    assert f">= {report.flops_per_iteration / 2.5e9:.3g} s per iteration" in text


def test_measured_gemm_rate_is_positive_and_finite():
    rate = measure_gemm_rate(n=64, seconds=0.02)
    assert 0 < rate < float("inf")


def test_a_budget_that_cannot_fit_is_answered_not_raised():
    spaces = sq.Spaces(i=2, a=5)
    eqs = [e for e in sq.parse(load_equations("ccd_cs"), spaces=spaces) if e.name != "E"]
    with pytest.raises(sq.MemoryBudgetError) as info:
        sq.compile(eqs, spaces, memory_budget=2000)
    options = {"nocc": 2, "nvirt": 5, "method": "ccd", "closed_shell": True, "gemm_rate": 1e9}
    report = dry_run(memory_budget=2000, **options)
    assert report.fits is False and report.memory_budget == 2000
    assert report.smallest_feasible_bytes == info.value.smallest_feasible
    assert report.plan == info.value.plan
    assert report.required_bytes == info.value.smallest_feasible  # figures of that plan
    assert "memory_budget=" in report.message
    text = str(report)
    assert "does not fit: smallest feasible budget" in text
    assert f"({info.value.smallest_feasible} bytes)" in text
    # The smallest feasible budget is met.
    again = dry_run(memory_budget=report.smallest_feasible_bytes, **options)
    assert again.fits is True and "fits" in str(again)


def test_a_given_plan_is_checked_against_the_budget():
    report = dry_run(nocc=2, nvirt=5, batch={"a": 2}, memory_budget="1 kB", gemm_rate=1e9)
    assert report.fits is False and report.smallest_feasible_bytes is None
    assert report.required_bytes > 1000
    assert "does not fit: this plan needs" in str(report)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "needs a molecule, or both nocc= and nvirt="),
        ((H2O, "sto-3g"), {"nocc": 5}, "not both"),
        ((H2O,), {}, "without a basis"),
        ((H2O, "no-such-basis"), {}, "PySCF could not build molecule"),
        ((H2O, "sto-3g"), {"df": True, "closed_shell": True, "auxbasis": "no-fit"}, "'no-fit'"),
        ((), {"nocc": 0, "nvirt": 3}, "nocc must be a positive int, got 0"),
        ((), {"nocc": 2, "nvirt": 3, "df": True, "closed_shell": True}, "needs naux="),
        ((), {"nocc": 2, "nvirt": 3, "naux": 9}, "only used with df=True"),
        (
            (),
            {"nocc": 2, "nvirt": 3, "df": True, "naux": 9, "method": "ccd"},
            "density fitting needs",
        ),
        ((), {"nocc": 2, "nvirt": 3, "method": "ccsdtq"}, "method='ccsdtq'"),
        ((), {"nocc": 2, "nvirt": 3, "gemm_rate": -1.0}, "gemm_rate must be a positive"),
        ((42,), {}, "got int"),
    ],
)
def test_bad_input_is_one_input_error(args, kwargs, message):
    with pytest.raises(sq.InputError, match=re.escape(message)):
        dry_run(*args, **kwargs)


def test_open_shell_molecule_is_refused():
    mol = gto.M(atom="O 0 0 0; H 0 0 0.97", basis="sto-3g", spin=1, verbose=0)
    with pytest.raises(sq.InputError, match="closed-shell"):
        dry_run(mol)


@pytest.fixture()
def nothing_runs(monkeypatch):
    """No SCF, no integrals, no compiled sq_jax program."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("the dry run ran something it must not")

    monkeypatch.setattr(scf, "RHF", refuse)
    monkeypatch.setattr(AotJit, "compiled", refuse)
    monkeypatch.setattr("sq_jax.cc.drivers.solve_cc", refuse)


def test_cli_dry_run_prints_the_report_without_scf(capsys, nothing_runs):
    argv = ["ccsd", "--molecule", "h2o", "--basis", "cc-pvdz", "--closed-shell", "--dry-run"]
    assert main([*argv, "--memory", "8GiB"]) == 0
    out = capsys.readouterr().out
    expected = dry_run(H2O, "cc-pvdz", closed_shell=True, memory_budget="8GiB", gemm_rate=1.0)
    assert "o = 5, v = 19 (spatial orbitals)" in out
    assert f"plan       {expected.plan}" in out
    assert "budget     8.00 GiB: fits" in out
    memory = re.search(r"memory     ([0-9.]+) MiB predicted", out).group(1)
    assert float(memory) == pytest.approx(expected.memory_bytes / 2**20, abs=0.01)
    # printed to 4 significant digits: compare the text (rel=1e-4 held only by luck)
    assert f"FLOPs      {expected.flops_per_iteration:.4g} per iteration" in out
    flops = float(re.search(r"FLOPs      (\S+) per iteration", out).group(1))
    rate = float(re.search(r"GEMM rate  (\S+) GFLOP/s", out).group(1)) * 1e9
    seconds = float(re.search(r"time       >= (\S+) s per iteration", out).group(1))
    assert seconds == pytest.approx(flops / rate, rel=1e-2)  # each printed to 3-4 digits


def test_cli_dry_run_that_does_not_fit_exits_1(capsys, nothing_runs):
    assert main(["ccd", "--dry-run", "--memory", "100"]) == 1  # the shipped H2O/STO-3G
    out = capsys.readouterr().out
    assert "CCD dry run on H2O/STO-3G (shipped), spin-orbital (ccd_so)" in out
    assert "o = 10, v = 4 (spin-orbitals)" in out
    assert "100 B: does not fit: smallest feasible budget" in out
    assert "Traceback" not in out


def test_cli_dry_run_bad_budget_is_one_line(capsys):
    assert main(["ccsd", "--dry-run", "--memory", "lots"]) == 2
    out = capsys.readouterr().err  # errors go to stderr
    assert out.startswith("sq-jax: error: ") and out.count("\n") == 1
    assert "'lots'" in out
