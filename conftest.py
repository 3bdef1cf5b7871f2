"""Settings for the whole test run: ``tests/`` and the doctests of ``src/sq_jax``.

XLA compiles the test programs at backend optimisation level 0. Compiling dominates the
suite (hundreds of small programs, each run a few times), and level 0 cut the CPU time
of ``tests/test_cc_open_shell.py`` by a quarter. It changes how XLA's CPU backend
generates machine code, not what a program computes: the HLO, its buffers (what
``memory_analysis`` reports) and the values are the same, and every check keeps its
tolerance. Benchmarks (``bench/``) and users get XLA's default level.

XLA's CPU fusion emitters are off for every compilation of the run
(``--xla_cpu_use_fusion_emitters=false``, where the installed XLA knows the flag).
sq_jax compiles its own top-level programs that way for users too
(``sq_jax/lower/aot.py``), so the XLA memory figures the tests check are the ones users
get; the flag extends it to what JAX compiles without sq_jax's options (eager
operations, programs traced inside ``jax.grad``). ``tests/test_accumulate.py`` alone
took 36 s instead of 58 s, the whole suite 528 s instead of 672-943 s.

One JAX compilation cache serves the whole run. Many tests compile the same program (the
CCSD residual of H2O/6-31G, say) in separate ``sq.compile`` calls, on both pytest-xdist
workers and in the subprocesses of the CLI, notebook and sharding tests, and each CLI
subprocess compiles the same few hundred eager operations (DIIS, PySCF glue); XLA
compiled each again, as a new jitted function is a new entry of JAX's in-memory cache.
The persistent cache is keyed by the computation and the compiler's options, so a hit
runs the executable XLA would have built. The directory is new for every run (made by
the controller, removed at its end) and every compile is kept; a cache named by the
user's ``JAX_COMPILATION_CACHE_DIR`` is used as it is.

NumPy's BLAS and PySCF's OpenMP loops get the cores divided among the pytest-xdist
workers (one thread each with two workers on two cores), unless ``OMP_NUM_THREADS`` /
``OPENBLAS_NUM_THREADS`` / ``MKL_NUM_THREADS`` say otherwise. By default each library
starts a thread per core in every worker, and their threads spin while they wait: four
files of PySCF-checked CC tests took 136-141 s on two cores with two workers, 95 s with
one thread each. XLA keeps its own thread pool (one thread per worker made those files
slower: 156 s).

The settings are environment variables (``XLA_FLAGS``, ``JAX_COMPILATION_CACHE_DIR``, the
thread counts), read when JAX, NumPy or PySCF starts, so the processes a test starts
(pytest-xdist workers, notebook kernels, the CLI, the sharding subprocess) inherit them. A
level or an emitter setting already in ``XLA_FLAGS`` is kept.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

_LEVEL = "--xla_backend_optimization_level"
_EMITTERS = "--xla_cpu_use_fusion_emitters"
_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
_CACHE_KEY = pytest.StashKey[str]()
_CACHE_WARNINGS = ("Error reading", "Error writing")
_THREAD_ENVS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _threads_per_worker(config: pytest.Config) -> int | None:
    """Cores per pytest-xdist worker, ``None`` without workers (the libraries' default)."""
    workers = getattr(config.option, "numprocesses", None)
    if isinstance(workers, str):  # ``-n auto`` / ``-n logical``: a worker per core
        return 1
    if not isinstance(workers, int) or workers < 2:
        return None  # no xdist, or ``-n 0`` / ``-n 1``
    return max(1, (os.cpu_count() or 1) // workers)


def _xla_knows(flag: str) -> bool:
    """Whether the installed XLA accepts ``flag`` in ``XLA_FLAGS``.

    Asked of a new process: XLA aborts the process that names a flag it does not know,
    and flags come and go between releases (XLA plans to retire the older emitters).
    """
    env = {**os.environ, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"}
    code = "import jax.numpy as jnp; jnp.zeros(1).block_until_ready()"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=False)
    return run.returncode == 0


def pytest_configure(config: pytest.Config) -> None:
    """Level 0 and no CPU fusion emitters unless ``XLA_FLAGS`` says; one cache."""
    flags = os.environ.get("XLA_FLAGS", "")
    if _LEVEL not in flags:
        flags = f"{flags} {_LEVEL}=0".strip()
    worker = hasattr(config, "workerinput")  # it inherits the controller's choice
    if not worker and _EMITTERS not in flags and _xla_knows(f"{_EMITTERS}=false"):
        flags = f"{flags} {_EMITTERS}=false"
    os.environ["XLA_FLAGS"] = flags
    threads = None if worker else _threads_per_worker(config)
    if threads is not None and not any(os.environ.get(name) for name in _THREAD_ENVS):
        for name in _THREAD_ENVS:  # before a worker imports NumPy or PySCF
            os.environ[name] = str(threads)
    if worker or os.environ.get(_CACHE_ENV):
        return  # a worker (the controller's environment names the cache) or the user's
    path = tempfile.mkdtemp(prefix="sq_jax_tests_xla_cache_")
    config.stash[_CACHE_KEY] = path
    os.environ[_CACHE_ENV] = path
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    # JAX writes an entry in place: a process that reads it while another writes it gets
    # a truncated entry, warns and compiles (the tests' processes see warnings as errors;
    # pyproject.toml ignores the same two in this one)
    quiet = ",".join(f"ignore:{m} persistent compilation cache entry" for m in _CACHE_WARNINGS)
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, (os.environ.get("PYTHONWARNINGS"), quiet)))
    jax = sys.modules.get("jax")  # JAX reads the two when imported: told here if it was
    if jax is not None:
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the run's compilation cache (when this process made it)."""
    path = config.stash.get(_CACHE_KEY, None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
        os.environ.pop(_CACHE_ENV, None)


@pytest.fixture(autouse=True)
def _budget_plans_forgotten() -> None:
    """Every test and doctest plans its own budgets.

    ``sq.compile`` remembers the plan it chose for a budgeted request for the rest of the
    process (``BUDGET_PLANS_KEPT``): a test that watches the search would otherwise see an
    earlier test's plan taken.
    """
    import sq_jax

    sq_jax.clear_budget_plans()
