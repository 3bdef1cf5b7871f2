"""The large-workload benchmark script (bench/bench_large.py) at tiny sizes: its checks
against PySCF hold (relative 1e-9) on each route, and they would catch a wrong residual.

The figures themselves are timings and are never asserted; what is asserted is that the
script compares the right things: sq_jax's Jacobi update t + R/D against PySCF's
``update_amps`` at the MP2 amplitudes, layouts included.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT

pytest.importorskip("pyscf")
sys.path.insert(0, str(REPO_ROOT / "bench"))

import bench_large
import large
import workloads as wl

TOL = 1e-9


def _assert_agrees(check: dict) -> None:
    assert check["max_rel"] < TOL, check
    assert check["abs_e_diff"] < TOL, check
    assert abs(check["e_pyscf"]) > 1e-3  # a real correlation energy, not two zeros


def test_scale_demo_df_matches_pyscf_dfccsd_under_a_budget():
    rec = large.scale_demo(wl.H2O, "sto-3g", "40 KiB", reps=1)
    _assert_agrees(rec["check"])
    assert rec["pyscf"]["class"] == "pyscf.cc.dfccsd.RCCSD"
    assert rec["sq_jax"]["naux"] > 0 and rec["sq_jax"]["predicted_bytes"] <= 40 * 1024
    rss = rec["peak_rss"]
    assert 0 < rss["after_scf"] <= rss["after_sq_jax"] <= rss["after_pyscf"] <= rss["end"]


def test_closed_shell_cli_writes_results_and_matches_pyscf_ccsd(tmp_path):
    mf = large.run_scf(wl.H2O, "sto-3g", density_fit=False)
    rec = large.closed_shell_iteration(mf, 1, bench_large.matmul_fn(64))
    _assert_agrees(rec["check"])
    assert rec["pyscf"]["class"] == "pyscf.cc.ccsd.CCSD"
    assert rec["hand_count_flops"] == large.hand_count_ccsd_cs(5, 2)
    # the command line: so --tiny (H2O/STO-3G against GCCSD), files written
    full = bench_large.main(["so", "--tiny", "--reps", "1", "--out", str(tmp_path)])
    _assert_agrees(full["result"]["check"])
    saved = json.loads((tmp_path / "large-so-tiny.json").read_text())
    assert saved["result"]["check"]["max_rel"] == full["result"]["check"]["max_rel"]
    assert "GCCSD" in (tmp_path / "large-so-tiny.json").with_suffix(".md").read_text()


def test_uccsd_figure_matches_pyscf_uccsd_update_per_spin_block(tmp_path):
    full = bench_large.main(["uccsd", "--tiny", "--reps", "1", "--out", str(tmp_path)])
    check = full["result"]["check"]
    _assert_agrees(check)
    assert {k for k in check if k.startswith("rel_update_")} == {
        f"rel_update_{n}" for n in ("t1a", "t1b", "t2aa", "t2ab", "t2bb")
    }
    assert full["result"]["pyscf"]["class"] == "pyscf.cc.uccsd.UCCSD"
    assert "UCCSD" in (tmp_path / "large-uccsd-tiny.json").with_suffix(".md").read_text()


def test_compare_catches_a_wrong_residual_or_layout():
    rng = np.random.default_rng(3)
    amps = {wl.T1: rng.standard_normal((2, 3)), wl.T2: rng.standard_normal((2, 2, 3, 3))}
    dens = (-1.0 - rng.random((2, 3)), -2.0 - rng.random((2, 2, 3, 3)))
    out = {"R1": rng.standard_normal((2, 3)), "R2": rng.standard_normal((2, 2, 3, 3)), "E": 0.5}
    new = {k: amps[k] + r / d for k, r, d in zip(amps, (out["R1"], out["R2"]), dens, strict=True)}
    pyscf_new = (new[wl.T1].T, new[wl.T2].transpose(2, 3, 0, 1))
    assert large.compare(out, amps, dens, pyscf_new, 0.5)["max_rel"] < 1e-14
    wrong = {**out, "R2": out["R2"] * (1 + 1e-7)}
    assert large.compare(wrong, amps, dens, pyscf_new, 0.5)["max_rel"] > 1e-8
    swapped = (new[wl.T1].T, new[wl.T2].transpose(3, 2, 0, 1))  # i, j exchanged
    assert large.compare(out, amps, dens, swapped, 0.5)["max_rel"] > 1e-3


def test_hand_count_is_the_table_of_docs_benchmarks():
    # bench/README.md, "FLOP counts": textbook closed-shell CCSD on benzene/cc-pVDZ
    assert large.hand_count_ccsd_cs(21, 93) == pytest.approx(1.706e11, rel=1e-3)
