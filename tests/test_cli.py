import re

import pytest

import sq_jax as sq
from sq_jax.budget import XLA_HEADROOM
from sq_jax.cc.cli import main
from sq_jax.cc.integrals import default_reference


def test_ccsd_main_job_prints_the_reference_energy(capsys):
    assert main(["ccsd", "--quiet"]) == 0
    out = capsys.readouterr().out
    e_corr = float(re.search(r"E_corr\(CCSD\)\s+=\s+(\S+)", out).group(1))
    e_tot = float(re.search(r"E\(CCSD\)\s+=\s+(\S+)", out).group(1))
    ref = default_reference()
    assert abs(e_corr - ref["e_corr_gccsd_tight"]) < 1e-9
    assert abs(e_tot - (ref["e_hf"] + ref["e_corr_gccsd_tight"])) < 1e-9
    assert "iterations         = " in out and "(converged)" in out
    assert re.search(r"memory\s+= [0-9.]+ KiB predicted \(XLA temporaries", out)
    assert "cycle =" not in out  # --quiet


def test_a_memory_budget_prints_the_fitting_steps_unless_quiet(capsys):
    # the search and XLA's figure of each budgeted compile, as they happen; the energy is
    # the reference's (a budget this large batches nothing)
    assert main(["ccsd", "--memory", "1 GiB"]) == 0
    out = capsys.readouterr().out
    steps = [line for line in out.splitlines() if line.startswith("budget: ")]
    assert any(line.startswith("budget: planned BatchPlan() for ") for line in steps)
    assert any(
        re.match(r"budget: XLA: BatchPlan\(\) measured .* of the budget", line) for line in steps
    )
    assert "budget: kept BatchPlan()" in steps
    e_corr = float(re.search(r"^E_corr\(CCSD\)\s+=\s+(\S+)", out, re.M).group(1))
    assert abs(e_corr - default_reference()["e_corr_gccsd_tight"]) < 1e-9
    # the time line says what the fitting took (the compile happened there)
    logged = sum(float(t) for t in re.findall(r"^budget: .* in ([0-9.]+) s$", out, re.M))
    fitting = re.search(r"fitting the memory budget ([0-9.]+) s, first iteration", out)
    assert fitting and abs(float(fitting.group(1)) - logged) < 0.05  # each line rounds
    sq.clear_budget_plans()  # else the same request takes the plan chosen above, unlogged
    assert main(["ccsd", "--memory", "1 GiB", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "budget: " not in out and "fitting the memory budget" in out


def test_ccsd_prints_progress_lines_by_default(capsys):
    assert main(["ccd", "--max-iter", "3"]) == 1  # not converged in 3 iterations
    out = capsys.readouterr().out
    assert out.count("cycle = ") == 3
    assert "iteration limit was reached" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ccsd", "--solver", "bfgs"], "argument --solver: invalid choice: 'bfgs'"),
        (["ccsd", "--batch", "a4"], "--batch expects space=count pairs"),
        (["ccsd", "--batch", "q=4"], "unknown index space 'q'"),
        (
            ["ccsd", "--molecule", "unobtainium"],
            "is neither a known name (h2o) nor an existing .xyz",
        ),
        (
            ["schedule", "R{a1;i1} = f{a1;q1}", "--spaces", "i=2,a=3"],
            "line 1, column 17: unknown index space `q`",
        ),
        (["schedule", "E = f{i1;i1}", "--spaces", "i=2", "--batch", "i=0"], "batches"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_arguments_give_one_line_and_status_2(capsys, argv, message):
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert captured.out == ""  # errors go to stderr only
    assert err.startswith("sq-jax: error: ")
    assert message in err
    assert err.count("\n") == (1 if "column" not in message else 3)  # parse errors: + caret
    assert "Traceback" not in err


def test_schedule_command_prints_dump_peak_and_flops(capsys):
    text = "R{a1,a2;i1,i2} = 1/2 g{a1,a2;a3,a4} t{a3,a4;i1,i2}"
    assert main(["schedule", text, "--spaces", "i=3,a=8", "--batch", "a=2"]) == 0
    out = capsys.readouterr().out
    assert "loop a#" in out and "x2" in out
    assert re.search(r"static peak: [0-9.]+ (B|KiB)", out)
    flops = int(re.search(r"FLOPs: (\d+)", out).group(1))
    assert flops >= 2 * 8**4 * 3**2  # at least the unbatched contraction


def _is_png(path):
    data = path.read_bytes()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_schedule_plot_writes_two_pngs(tmp_path, capsys):
    target = tmp_path / "ladder.png"
    text = "R{a1,a2;i1,i2} = 1/2 g{a1,a2;a3,a4} t{a3,a4;i1,i2}"
    argv = ["schedule", text, "--spaces", "i=3,a=8", "--batch", "a=2", "--plot", str(target)]
    assert main(argv) == 0
    assert _is_png(target) and _is_png(tmp_path / "ladder-nest.png")
    assert "plots: " in capsys.readouterr().out


def test_schedule_memory_budget_chooses_a_plan(capsys):
    text = "R{a1,a2;i1,i2} = B{a1,a3;;K1} B{a2,a4;;K1} t{a3,a4;i1,i2}"
    spaces = ["--spaces", "i=3,a=8,K=10"]
    assert main(["schedule", text, *spaces]) == 0
    unbatched = capsys.readouterr().out
    assert "0 loop blocks" in unbatched and "static peak: 36.50 KiB" in unbatched
    assert "predicted XLA memory: 68.69 KiB" in unbatched
    assert main(["schedule", text, *spaces, "--memory", "60 KiB"]) == 0
    out = capsys.readouterr().out
    assert "loop a#" in out
    predicted = re.search(r"predicted XLA memory: ([0-9.]+) KiB", out)
    assert float(predicted.group(1)) * XLA_HEADROOM <= 60  # the budget holds it, headroom too


def test_plot_needs_png_name(capsys):
    assert main(["schedule", "E = f{i1;i1}", "--spaces", "i=2", "--plot", "x.pdf"]) == 2
    assert "--plot expects a .png file name" in capsys.readouterr().err


# --------------------------------------------------------------------------------------
# Issue 14, item 8: every expected failure is a message on stderr with status 2


H2O_XYZ = "3\nwater\nO 0 0 0.1173\nH 0 0.7572 -0.4692\nH 0 -0.7572 -0.4692\n"


def _error(capsys, argv, status=2):
    """Run ``argv``, check the status and that stderr holds one message, no traceback."""
    assert main(argv) == status
    captured = capsys.readouterr()
    assert captured.err.startswith("sq-jax: error: ")
    assert "Traceback" not in captured.err + captured.out
    return captured.err


@pytest.fixture
def no_solve(monkeypatch):
    """Fail the test if the CLI gets as far as building a system or solving."""

    def refuse(*args, **kwargs):
        raise AssertionError("the CLI started real work before checking its arguments")

    monkeypatch.setattr("sq_jax.cc.cli.cc_system", refuse)
    monkeypatch.setattr("sq_jax.cc.drivers.solve_cc", refuse)


def test_xyz_without_header_is_refused_with_line_number(tmp_path, capsys):
    path = tmp_path / "water.xyz"
    path.write_text("".join(H2O_XYZ.splitlines(keepends=True)[2:]))  # the two header lines gone
    err = _error(capsys, ["ccsd", "--molecule", str(path)])
    assert "line 1: expected the number of atoms" in err and "found 'O 0 0 0.1173'" in err


def test_xyz_atom_count_must_match(tmp_path, capsys):
    path = tmp_path / "water.xyz"
    path.write_text(H2O_XYZ.replace("3\n", "4\n", 1))
    err = _error(capsys, ["ccsd", "--molecule", str(path)])
    assert "line 1 announces 4 atoms but 3 atom lines follow" in err


def test_basis_without_molecule_names_the_fix(capsys, no_solve):
    err = _error(capsys, ["ccsd", "--basis", "cc-pvdz"])
    assert "--basis needs --molecule" in err and "--molecule h2o --basis cc-pvdz" in err


def test_unknown_basis(tmp_path, capsys):
    path = tmp_path / "water.xyz"
    path.write_text(H2O_XYZ)
    err = _error(capsys, ["ccsd", "--molecule", str(path), "--basis", "nosuchbasis"])
    assert "--basis 'nosuchbasis': PySCF has no such basis" in err
    assert err.count("\n") == 1  # and PySCF's warnings are not shown


def test_malformed_geometry_names_line_and_token(tmp_path, capsys):
    path = tmp_path / "water.xyz"
    path.write_text(H2O_XYZ.replace("H 0 -0.7572", "Xx 0 -0.7572"))
    err = _error(capsys, ["ccsd", "--molecule", str(path)])
    assert f"{path}, line 5: expected an element symbol" in err and "found 'Xx'" in err


def test_odd_electron_count_says_what_is_needed(tmp_path, capsys):
    path = tmp_path / "oh.xyz"
    path.write_text("2\nhydroxyl\nO 0 0 0\nH 0 0 0.97\n")
    err = _error(capsys, ["ccsd", "--molecule", str(path)])
    assert "has 9 electrons" in err and "needs an even number" in err
    assert "--charge 1 or --charge -1" in err
    out = _error(capsys, ["ccsd", "--molecule", "h2o", "--charge", "1"])
    assert "has 9 electrons" in out


def test_plot_folder_is_checked_before_any_work(capsys, no_solve):
    err = _error(capsys, ["ccsd", "--molecule", "h2o", "--plot", "/missing/dir/p.png"])
    assert "the folder '/missing/dir' does not exist" in err
    err = _error(capsys, ["schedule", "ccsd_so", "--spaces", "i=2,a=3", "--plot", "/x/y/p.png"])
    assert "the folder '/x/y' does not exist" in err


def test_multi_line_errors_are_shown_whole_on_stderr(capsys):
    text = "R{a1;i1} = f{a1;a2} t{a2;i2}\nE = g{i1;i1} t{a1;i1}"
    err = _error(capsys, ["schedule", text, "--spaces", "i=2,a=3"])
    lines = err.splitlines()
    assert lines[0] == "sq-jax: error: 3 problems in the equations:"
    assert len(lines) == 4 and all(line.startswith("  - equation `") for line in lines[1:])


def test_schedule_argument_that_names_nothing_is_an_error(capsys):
    err = _error(capsys, ["schedule", "nosuchset", "--spaces", "i=2,a=3"])
    assert "'nosuchset' is not a shipped equation set (ccd_cs, ccd_so, ccd_uhf, ccsd_cs" in err
    assert "not an existing file, and not equation text (which contains '='" in err


def test_scf_that_does_not_converge_is_refused(monkeypatch, capsys):
    monkeypatch.setattr("sq_jax.cc._cli_system.SCF_MAX_CYCLE", 1)
    monkeypatch.setattr("sq_jax.cc.drivers.solve_cc", None)  # never reached
    err = _error(capsys, ["ccsd", "--molecule", "h2o"], status=1)
    assert "the RHF of --molecule 'h2o' (sto-3g) did not converge in 1 cycles" in err


def test_help_exits_0(capsys):
    assert main(["ccsd", "--help"]) == 0
    assert "--fock" in capsys.readouterr().out


def test_xyz_molecule_runs_with_pyscf(tmp_path, capsys):
    path = tmp_path / "water.xyz"
    path.write_text(H2O_XYZ)  # the shipped system's geometry and basis
    assert main(["ccsd", "--molecule", str(path), "--closed-shell", "--quiet"]) == 0
    out = capsys.readouterr().out
    ref = default_reference()
    e_hf = float(re.search(r"E\(HF\)\s+=\s+(\S+)", out).group(1))
    e_corr = float(re.search(r"E_corr\(CCSD\)\s+=\s+(\S+)", out).group(1))
    assert abs(e_hf - ref["e_hf"]) < 1e-9 and abs(e_corr - ref["e_corr_rccsd"]) < 1e-9
    assert f"CCSD on {path}/sto-3g, closed-shell: 5 occupied, 2 virtual" in out


@pytest.mark.parametrize(
    ("xyz", "extra", "message"),
    [
        ("1\nHe\nHe 0 0 0\n", [], "gives 1 orbitals for 1 doubly occupied ones"),
        ("1\nH\nH 0 0 0\n", ["--charge", "1"], "has 0 electrons"),
        (H2O_XYZ, ["--basis", " "], "--basis needs a basis-set name"),
        (H2O_XYZ, ["--charge", "one"], "argument --charge: expected an integer, got 'one'"),
    ],
)
def test_more_molecule_errors(tmp_path, capsys, xyz, extra, message):
    path = tmp_path / "m.xyz"
    path.write_text(xyz)
    assert message in _error(capsys, ["ccsd", "--molecule", str(path), *extra])


def test_charge_suggestions_leave_at_least_two_electrons(tmp_path, capsys):
    path = tmp_path / "h.xyz"
    path.write_text("1\nH atom\nH 0 0 0\n")
    err = _error(capsys, ["ccsd", "--molecule", str(path)])
    assert "has 1 electrons" in err and err.rstrip().endswith(": --charge -1, or another geometry")
    err = _error(capsys, ["ccsd", "--molecule", "h2o", "--charge", "99"])
    assert "has -89 electrons" in err and err.rstrip().endswith(": lower --charge")
