"""Timing primitives of the benchmarks: interleaved medians, the matmul reference and a
compile split into its phases (sq_jax passes, JAX lowering, XLA compile, first call);
and the ``--out`` option of the small comparison scripts (``bench_sums.py``,
``bench_structure.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sq_jax.lower.aot import compiler_options

SQ_XLA = compiler_options()
"""The XLA options sq_jax programs compile with (what a top-level call uses)."""


def add_out_option(parser: argparse.ArgumentParser) -> None:
    """``--out OUT``: where :func:`write_out` puts the table and the rows."""
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write the table and the rows to OUT with the suffixes .md and .json",
    )


def write_out(out: Path | None, md: str, rows: list[dict[str, Any]]) -> None:
    """The table and the rows at ``--out`` with the suffixes .md and .json (when given)."""
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(md)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))


def log(*a: Any) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def interleaved(fns: dict[str, Callable[[], Any]], reps: int, warm: int = 1) -> dict:
    """Round-robin ``reps`` timed calls of every function (after ``warm`` untimed rounds);
    returns per name the median, min and all samples (seconds, block_until_ready).

    Each timed call follows an untimed call of the same function, as the iterations of a
    solve follow each other. Timed right after another library's call, a function pays
    for that library's threads: a JAX call of 5 ms took 4 ms longer right after a NumPy
    matmul (OpenBLAS's threads spin on the two cores for a while after their work),
    which made W1's interleaved medians 10-30% noisier than the calls themselves.
    """
    for _ in range(warm):
        for f in fns.values():
            jax.block_until_ready(f())
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(reps):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))  # no fixed first/last slot
        for k in order:
            jax.block_until_ready(fns[k]())  # the lead-in call
            t0 = time.perf_counter()
            jax.block_until_ready(fns[k]())
            samples[k].append(time.perf_counter() - t0)
    return {
        k: {"median_s": statistics.median(v), "min_s": min(v), "samples": [round(x, 5) for x in v]}
        for k, v in samples.items()
    }


def matmul_fn(n: int = 2000) -> tuple[Callable[[], Any], int]:
    x = jnp.asarray(np.random.default_rng(0).standard_normal((n, n)))
    f = jax.jit(lambda a: a @ a).lower(x).compile()
    return (lambda: f(x)), 2 * n**3


def compile_timed(
    compile_fn: Callable[[], Any],
    jitted_of: Callable[[Any], Any],
    args_of: Callable[[Any], tuple],
    options: dict | None = None,
    aot: bool = False,
) -> dict:
    """Phases of a compile: sq_jax passes (``compile_fn``), jax lower, XLA compile (with
    XLA ``options``), first call; returns the compiled executable and the times.

    ``aot``: ``obj`` is a :class:`sq_jax.Program`, and the executable is the one its call
    runs (``obj.aot.compiled``), lowered and compiled in one phase (``lower_s`` 0). A
    program compiled with ``memory_budget`` has compiled it already, to check XLA's
    memory figures: a user's first call pays no second compile, and neither does this.
    Building the inputs (``args_of``) is timed apart (``inputs_s``), in no other figure.
    """
    c0 = time.process_time()  # CPU time beside wall: the machine is shared
    t0 = time.perf_counter()
    obj = compile_fn()
    t1 = time.perf_counter()
    c1 = time.process_time()
    # the inputs are not part of a compile: building them (blocks cut from the integrals,
    # 1.2 s for benzene/cc-pVDZ) was once charged to the phase after the passes
    args = args_of(obj)
    ta = time.perf_counter()
    ca = time.process_time()
    if aot:
        t2 = ta
        compiled = obj.aot.compiled(*args)
    else:
        lowered = jitted_of(obj).lower(*args)
        t2 = time.perf_counter()
        compiled = lowered.compile(options)
    t3 = time.perf_counter()
    c3 = time.process_time()
    jax.block_until_ready(compiled(*args))
    t4 = time.perf_counter()
    ma = compiled.memory_analysis()
    try:
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list | tuple) else cost
        xla_flops = float(cost.get("flops", float("nan")))
    except Exception:
        xla_flops = float("nan")
    return {
        "obj": obj,
        "compiled": compiled,
        "args": args,
        "passes_s": t1 - t0,
        "inputs_s": ta - t1,  # args_of: not in the figures below
        "lower_s": t2 - ta,
        "xla_compile_s": t3 - t2,
        "first_call_s": t4 - t3,
        "compile_s": (t1 - t0) + (t3 - ta),  # passes + lower + XLA compile
        "compile_cpu_s": (c1 - c0) + (c3 - ca),  # the same, process CPU time
        "total_first_s": (t1 - t0) + (t4 - ta),  # ... + first call
        "xla_temp": int(ma.temp_size_in_bytes),
        "xla_output": int(ma.output_size_in_bytes),
        "xla_argument": int(ma.argument_size_in_bytes),
        "xla_flops": xla_flops,
    }


def strip(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in ("obj", "compiled", "args")}


def maxdiff(a: dict, b: dict, keys=("R1", "R2")) -> float:
    return max(float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k])))) for k in keys)


def median_alone(f: Callable, reps: int, *args: Any) -> float:
    """Median seconds of ``reps`` calls of ``f(*args)`` after one warm-up call."""
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)
