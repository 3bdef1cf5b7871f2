import re

import pytest

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
        (["ccsd", "--molecule", "unobtainium"], "is neither a known name (h2o) nor an .xyz"),
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
    out = capsys.readouterr().out
    assert out.startswith("sq-jax: error: ")
    assert message in out
    assert out.count("\n") == 1
    assert "Traceback" not in out


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
    assert "--plot expects a .png file name" in capsys.readouterr().out
