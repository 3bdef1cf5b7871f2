"""Settings for the whole test run: ``tests/`` and the doctests of ``src/sq_jax``.

XLA compiles the test programs at backend optimisation level 0. Compiling dominates the
suite (hundreds of small programs, each run a few times), and level 0 cut the CPU time
of ``tests/test_cc_open_shell.py`` by a quarter. It changes how XLA's CPU backend
generates machine code, not what a program computes: the HLO, its buffers (what
``memory_analysis`` reports) and the values are the same, and every check keeps its
tolerance. Benchmarks (``bench/``) and users get XLA's default level.

The setting is the environment variable ``XLA_FLAGS``, read when JAX starts its backend,
so the processes a test starts (notebook kernels, the CLI, the sharding subprocess)
inherit it. A level already in ``XLA_FLAGS`` is kept.
"""

from __future__ import annotations

import os

_LEVEL = "--xla_backend_optimization_level"


def pytest_configure(config) -> None:
    """Compile at optimisation level 0 unless ``XLA_FLAGS`` names a level."""
    flags = os.environ.get("XLA_FLAGS", "")
    if _LEVEL not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_LEVEL}=0".strip()
