"""Fixtures shared by several test files.

The tests form the package ``tests`` (see ``tests/__init__.py``): pytest's default import
mode puts the repository root on ``sys.path``, so ``from tests.helpers... import ...``
works for a whole run, under pytest-xdist workers and for a single file alike.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
_CACHE_KEY = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """One JAX compilation cache for the whole run, shared by every process of it.

    Many tests compile the same program (the CCSD residual of H2O/6-31G, say) in separate
    ``sq.compile`` calls, on both pytest-xdist workers and in the subprocesses of the CLI,
    notebook and sharding tests; XLA compiled each again (a new jitted function is a new
    cache entry in memory). JAX's persistent cache is keyed by the computation and the
    compiler's options, so a hit runs the very executable XLA would build: a run took
    12% less time with it (985 s -> 871 s, the whole suite on two cores). The directory
    is new for every run (the controller makes it and its environment reaches the workers
    and subprocesses) and removed at the end; a cache the user set is left alone.
    """
    if hasattr(config, "workerinput") or os.environ.get(_CACHE_ENV):
        return  # a worker: the controller's environment already names the run's cache
    path = tempfile.mkdtemp(prefix="sq_jax_tests_xla_cache_")
    config.stash[_CACHE_KEY] = path
    os.environ[_CACHE_ENV] = path
    # every compile, the eager single operations too: each CLI subprocess compiled the
    # same few hundred of them (DIIS, PySCF glue) again (CLI and open-shell tests: 6% less)
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    import jax  # a single-process run (-n0) may have imported JAX before this hook

    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


def pytest_unconfigure(config: pytest.Config) -> None:
    path = config.stash.get(_CACHE_KEY, None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
        os.environ.pop(_CACHE_ENV, None)


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
