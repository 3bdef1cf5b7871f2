"""Where a compiled program's time goes, by kind of XLA operation (per-op profile).

Compiles spin-orbital CCSD unbatched and under one batch plan, records a
``jax.profiler`` trace of a few calls of each, and sums the traced time of every XLA
operation by its kind (the name without its number: ``ynn_fusion`` matrix products,
``copy_bitcast_fusion`` copies and transposes, ``dynamic-slice...`` slices). Traced
times include the profiler's own overhead per operation, so compare kinds and
programs, not absolute seconds.

Usage::

    .venv/bin/python bench/profile_ops.py                       # a: 38 external batches
    .venv/bin/python bench/profile_ops.py --batches 13 --copies hoisted
    .venv/bin/python bench/profile_ops.py --nocc 6 --nvirt 16 --batches 4

The plan is ``a`` in ``--batches`` external batches, one loop per space, invariant
operands hoisted (``BatchPlan.of(..., external_modes="first", hoist="invariant")``).
Inputs are random with the symmetries of ``f``, ``g`` and ``t``.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import re
import tempfile
from typing import Any

import jax

import sq_jax as sq
from sq_jax.cc.equations import load_equations
from sq_jax.forest.symmetry import symmetric_random_inputs
from sq_jax.plan import BatchPlan

SKIP = ("$", "Thunk", "Pjit", "while", "end: ", "Common", "Execute", "Parse", "Slinky")
"""Trace events that are not XLA operations (Python frames, the runtime, loop shells)."""


def op_times(compiled: Any, x: dict, calls: int) -> collections.Counter:
    """Milliseconds per call spent in each kind of XLA operation."""
    for _ in range(3):
        jax.block_until_ready(compiled(x))
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            for _ in range(calls):
                jax.block_until_ready(compiled(x))
        path = glob.glob(f"{d}/**/*.trace.json.gz", recursive=True)[-1]
        with gzip.open(path) as f:
            trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    kinds: collections.Counter = collections.Counter()
    for e in events:
        name = e.get("name", "")
        if e.get("ph") == "X" and not name.startswith(SKIP):
            kinds[re.sub(r"\.\d+$", "", name)] += e.get("dur", 0) / 1000 / calls
    return kinds


def main(argv: list[str] | None = None) -> dict[str, collections.Counter]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nocc", type=int, default=10)
    parser.add_argument("--nvirt", type=int, default=38)
    parser.add_argument("--batches", type=int, default=38)
    parser.add_argument("--sums", choices=("fused", "sequenced"), default="fused")
    parser.add_argument("--copies", choices=("per batch", "hoisted"), default="per batch")
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args(argv)
    text, spaces = load_equations("ccsd_so"), sq.Spaces(i=args.nocc, a=args.nvirt)
    batched = BatchPlan.of(
        {"a": {"batches": args.batches, "roles": "external"}},
        external_modes="first",
        hoist="invariant",
        sums=args.sums,
        copies=args.copies,
    )
    out = {}
    for name, plan in (("unbatched", BatchPlan()), (str(batched), batched)):
        prog = sq.compile(text, spaces, pair_symmetry=True, batch=plan)
        # on the device first: host arrays would add their transfer to every call
        x = jax.device_put(symmetric_random_inputs(prog.schedule.annotated.forest, scale=0.1))
        out[name] = op_times(prog.compiled(x), x, args.calls)
    names = list(out)
    kinds = sorted({k for c in out.values() for k in c}, key=lambda k: -out[names[-1]][k])
    print(f"# ms per call by XLA operation kind (ccsd_so, i={args.nocc}, a={args.nvirt})\n")
    print("| kind | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
    for k in kinds[:12]:
        print(f"| `{k}` | " + " | ".join(f"{out[n][k]:.2f}" for n in names) + " |")
    print("| all operations | " + " | ".join(f"{sum(out[n].values()):.2f}" for n in names) + " |")
    return out


if __name__ == "__main__":
    main()
