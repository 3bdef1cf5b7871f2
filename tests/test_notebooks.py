"""The example notebooks run from top to bottom, and the committed copies show their plots.

Two kinds of checks:

* the committed notebooks (read as JSON, no Jupyter needed) have every code cell executed,
  no error outputs, and at least one ``image/png`` output each, so the rendered copies
  (GitHub, the docs) show their pictures;
* every notebook is executed with nbclient, from a clean slate, in a fresh kernel that
  runs *this* interpreter (a temporary kernelspec pointing at ``sys.executable``, so an
  installed ``python3`` kernelspec or ``PATH`` cannot pick another environment), with the
  notebooks folder as the working directory and a timeout per cell; no cell may raise, no
  Python warning may be printed, and the executed notebook must again produce an
  ``image/png``.

Executing all five takes about 3-4 minutes on two cores (191 s in a run of 2026-12-05,
most of it XLA compilation), so those tests are marked ``slow``. To refresh the committed
outputs after editing a notebook:

    python tests/test_notebooks.py --inplace notebooks/*.ipynb && ruff format notebooks
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

# jupyter_core warns about its path migration unless told which convention to use; the
# test suite turns warnings into errors.
os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
EXPECTED = (
    "01_quickstart",
    "02_ccsd_pyscf",
    "03_derivatives",
    "04_new_method",
    "05_any_cc_model",
)
CELL_TIMEOUT_S = 300
_PYTHON_WARNING = re.compile(r"\b\w*Warning: ")


def _ids(path: Path) -> str:
    return path.stem


def _code_cells(nb: dict) -> list[dict]:
    return [cell for cell in nb["cells"] if cell["cell_type"] == "code"]


def _source(cell: dict) -> str:
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def _text(value: str | list[str]) -> str:
    return value if isinstance(value, str) else "".join(value)


def _outputs(nb: dict) -> list[dict]:
    return [out for cell in _code_cells(nb) for out in cell.get("outputs", [])]


def _png_count(nb: dict) -> int:
    return sum("image/png" in out.get("data", {}) for out in _outputs(nb))


def _errors(nb: dict) -> list[str]:
    return [
        f"{out.get('ename')}: {out.get('evalue')}"
        for out in _outputs(nb)
        if out["output_type"] == "error"
    ]


def _printed_warnings(nb: dict) -> list[str]:
    return [
        line
        for out in _outputs(nb)
        if out["output_type"] == "stream" and out["name"] == "stderr"
        for line in _text(out["text"]).splitlines()
        if _PYTHON_WARNING.search(line)
    ]


def test_every_notebook_is_present_and_listed():
    present = {p.stem for p in NOTEBOOKS}
    assert set(EXPECTED) <= present, f"missing notebooks: {sorted(set(EXPECTED) - present)}"
    readme = (NOTEBOOKS_DIR / "README.md").read_text(encoding="utf-8")
    unlisted = sorted(name for name in present if f"{name}.ipynb" not in readme)
    assert not unlisted, f"notebooks/README.md does not list {unlisted}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_committed_notebook_has_its_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    unexecuted = [
        i for i, cell in enumerate(_code_cells(nb)) if cell.get("execution_count") is None
    ]
    assert not unexecuted, f"{path.name}: code cells {unexecuted} were not executed"
    assert not _errors(nb), f"{path.name} was committed with errors: {_errors(nb)}"
    assert _png_count(nb) >= 1, f"{path.name} was committed without its image/png outputs"


def _kernel_manager(kernels_dir: Path):
    """A kernel manager whose kernel is ``sys.executable -m ipykernel_launcher``."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    name = "sq-jax-notebooks"
    spec_dir = kernels_dir / name
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({sys.executable})",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    specs = KernelSpecManager(kernel_dirs=[str(kernels_dir)])
    return KernelManager(kernel_name=name, kernel_spec_manager=specs)


def execute_notebook(path: Path, output: Path, timeout: int = CELL_TIMEOUT_S) -> None:
    """Execute ``path`` from a clean slate in a fresh kernel and write the result to ``output``.

    The kernel runs this interpreter, with the notebooks folder as its working directory.
    Raises ``nbclient.exceptions.CellExecutionError`` when a cell raises.
    """
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    with tempfile.TemporaryDirectory() as kernels_dir:
        client = nbclient.NotebookClient(
            nb,
            km=_kernel_manager(Path(kernels_dir)),
            timeout=timeout,
            resources={"metadata": {"path": str(NOTEBOOKS_DIR)}},
        )
        client.execute()
    nbformat.write(nb, output)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_executes(path, tmp_path):
    for module in ("nbformat", "nbclient", "ipykernel", "matplotlib"):
        pytest.importorskip(module)
    nb = json.loads(path.read_text(encoding="utf-8"))
    if any("pyscf" in _source(cell) for cell in _code_cells(nb)):
        pytest.importorskip("pyscf", reason="PySCF is the optional `chem` extra")
    # A child process drives the kernel: jupyter_client's ZMQ sockets and event loop stay
    # out of this process (they leave ResourceWarnings behind, errors under pytest).
    output = tmp_path / path.name
    proc = subprocess.run(
        [sys.executable, __file__, str(path), "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=len(_code_cells(nb)) * CELL_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, f"{path.name} failed to execute:\n{proc.stderr[-6000:]}"
    executed = json.loads(output.read_text(encoding="utf-8"))
    assert not _errors(executed)
    assert not _printed_warnings(executed), f"{path.name} printed warnings"
    assert _png_count(executed) >= 1, f"{path.name} produced no image/png output"


def main(argv: list[str] | None = None) -> None:
    """``.venv/bin/python tests/test_notebooks.py NOTEBOOK... [--inplace | --output FILE]``."""
    parser = argparse.ArgumentParser(description="Execute notebooks in a fresh kernel.")
    parser.add_argument("notebooks", nargs="+", type=Path)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--inplace", action="store_true", help="overwrite each notebook")
    where.add_argument("--output", type=Path, help="where to write the (single) notebook")
    args = parser.parse_args(argv)
    if args.output is not None and len(args.notebooks) != 1:
        parser.error("--output takes exactly one notebook")
    for path in args.notebooks:
        start = time.perf_counter()
        execute_notebook(path, path if args.inplace else args.output)
        print(f"{path}: executed in {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
