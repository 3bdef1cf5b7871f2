"""Fixtures shared by several test files.

The tests form the package ``tests`` (see ``tests/__init__.py``): pytest's default import
mode puts the repository root on ``sys.path``, so ``from tests.helpers... import ...``
works for a whole run, under pytest-xdist workers and for a single file alike.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's top directory (the one holding ``pyproject.toml``)."""
    return REPO_ROOT


# Where the project's own files live, for a checkout without git (e.g. an unpacked sdist).
_PROJECT_PARTS = (".ci", "README.md", "bench", "docs", "notebooks", "pyproject.toml", "scripts")
_PROJECT_PARTS += ("src", "tests")


@pytest.fixture(scope="session")
def tracked_files(repo_root: Path) -> list[Path]:
    """Every file of the project, relative to the root: ``git ls-files`` in a git checkout,
    else every file under the project's own directories (caches left out).
    """
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=repo_root, capture_output=True, check=True
        ).stdout
        return [Path(p) for p in out.decode("utf-8").split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for part in _PROJECT_PARTS:
            top = repo_root / part
            found = [top] if top.is_file() else sorted(top.rglob("*"))
            files += [
                f.relative_to(repo_root)
                for f in found
                if f.is_file() and "__pycache__" not in f.parts
            ]
        return files
