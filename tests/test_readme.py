"""The README's quickstart runs as written and its results are right."""

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quickstart_block_runs(tmp_path, monkeypatch):
    block = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)[0]
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)  # our own documentation, run as written
    out, ref, grad = scope["out"], scope["ref"], scope["grad"]
    for name in ("E", "R"):
        np.testing.assert_allclose(np.asarray(out[name]), ref[name], rtol=1e-12)
    assert grad.shape == (10, 10, 4, 4) and np.isfinite(np.asarray(grad)).all()
    assert (tmp_path / "peak.png").stat().st_size > 10_000
    assert (tmp_path / "nest.png").stat().st_size > 10_000


def test_readme_commands_match_ci():
    text = README.read_text(encoding="utf-8")
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    install = re.search(r'pip install -e "(\.\[[a-z,]+\])" && \.venv/bin/pytest -q', text)
    assert install, "README must give the test command"
    assert f'pip install --quiet -e "{install.group(1)}"' in ci
    assert ".venv/bin/pytest -q" in ci
    assert "sq-jax ccsd" in text.splitlines()[4]
