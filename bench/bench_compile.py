"""Compile time of long random sums (W8): sq_jax passes, trace, XLA compile.

Run from the repository root:

    .venv/bin/python bench/bench_compile.py                      # 1,000 / 2,000 / 5,000 terms
    .venv/bin/python bench/bench_compile.py --terms 1000 --uncut # A/B: chains left whole
    .venv/bin/python bench/bench_compile.py --ungrouped          # A/B: one dot per product

Each sum (``tests/helpers/random_sums.py``) adds distinct two-factor products, so the
lowered program is one chain of adds; targets: 2,000 terms <= 10 s and 5,000 terms
<= 30 s of trace + XLA (``docs/benchmarks.md``). ``--uncut`` also compiles the same
program with ``sq_jax.lower.sums.SUM_PIECE`` so large that no chain is cut, interleaved
with the cut one (slow: a 1,000-term uncut chain took about 1 CPU minute).
``--ungrouped`` also compiles it as before product groups: cut every 64 terms, every
product its own ``dot_general`` (``GROUP_MIN`` so large that no group forms). Times are
wall seconds and, in brackets, CPU seconds of this process (steadier on a shared
machine).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
jax.config.update("jax_enable_x64", True)

from tests.helpers.random_sums import random_sum  # noqa: E402
from tests.helpers.schedule_corpus import random_blocks  # noqa: E402

import sq_jax as sq  # noqa: E402
from sq_jax.lower import sums  # noqa: E402
from sq_jax.lower.aot import compiler_options  # noqa: E402
from sq_jax.lower.interpret import run_lowered  # noqa: E402


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def compile_once(lowered, inputs) -> dict[str, float]:
    """Trace and XLA-compile one program (a fresh ``jax.jit``: nothing cached)."""
    w0, c0 = _clock()
    traced = jax.jit(lambda b: run_lowered(lowered, b)).lower(inputs)
    w1, c1 = _clock()
    traced.compile(compiler_options())
    w2, c2 = _clock()
    return {"trace": w1 - w0, "trace_cpu": c1 - c0, "xla": w2 - w1, "xla_cpu": c2 - c1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--terms", default="1000,2000,5000", help="comma-separated sizes")
    parser.add_argument("--uncut", action="store_true", help="A/B against uncut chains")
    parser.add_argument("--ungrouped", action="store_true", help="A/B against no product groups")
    args = parser.parse_args()
    spaces = sq.Spaces(i=3, a=4)
    piece, group_min = sums.SUM_PIECE, sums.GROUP_MIN
    variants = [("cut", piece, group_min)]
    if args.ungrouped:
        variants.append(("ungrouped", 64, 10**9))
    if args.uncut:
        variants.append(("uncut", 10**9, group_min))
    for n in map(int, args.terms.split(",")):
        text = random_sum(n, seed=n)
        w0, c0 = _clock()
        prog = sq.compile(text, spaces)
        w1, c1 = _clock()
        inputs = random_blocks(prog.schedule.annotated.forest, seed=0)
        print(f"{n} terms: sq_jax passes {w1 - w0:.2f} s [{c1 - c0:.2f}]", flush=True)
        for label, size, smallest in variants:
            sums.SUM_PIECE, sums.GROUP_MIN = size, smallest
            t = compile_once(prog.lowered, inputs)
            total, total_cpu = t["trace"] + t["xla"], t["trace_cpu"] + t["xla_cpu"]
            print(
                f"  {label:9s} trace {t['trace']:.2f} s [{t['trace_cpu']:.2f}]  "
                f"XLA {t['xla']:.2f} s [{t['xla_cpu']:.2f}]  "
                f"trace+XLA {total:.2f} s [{total_cpu:.2f}]  "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        sums.SUM_PIECE, sums.GROUP_MIN = piece, group_min


if __name__ == "__main__":
    main()
