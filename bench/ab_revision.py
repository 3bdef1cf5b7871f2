"""A/B of one CC iteration: this working tree's sq_jax against another git revision's.

Both programs are compiled in one process (the other revision's ``src/sq_jax`` is
extracted with ``git archive`` and imported as ``sq_jax_base``: the package imports
itself only relatively), checked against each other on random inputs, then timed
interleaved with the 2000x2000 JAX matmul. Reported per program: wall and CPU-time
medians (``time.process_time`` sums all threads; on a shared machine it moves less than
the wall clock), GFLOP/s from the static FLOP count and the ratio to the matmul rate of
the same run. Nothing fails on a time.

Run from the repository root::

    .venv/bin/python bench/ab_revision.py --rev main --equations ccsd_so -i 10 -a 38
    .venv/bin/python bench/ab_revision.py --rev HEAD~1 --equations ccsd_cs -i 21 -a 93 --reps 3
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import SQ_XLA, matmul_fn

jax.config.update("jax_enable_x64", True)


def import_revision(rev: str) -> object:
    """``src/sq_jax`` of ``rev``, imported as the package ``sq_jax_base``."""
    tar = subprocess.run(
        ["git", "archive", "--format=tar", rev, "src/sq_jax"], check=True, capture_output=True
    ).stdout
    root = Path(tempfile.mkdtemp(prefix="sq_ab_"))
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(root, filter="data")
    (root / "src" / "sq_jax").rename(root / "sq_jax_base")
    sys.path.insert(0, str(root))
    import sq_jax_base

    return sq_jax_base


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rev", default="main", help="the revision to compare with")
    ap.add_argument("--equations", default="ccsd_so", help="sq_jax.cc equations name")
    ap.add_argument("-i", type=int, default=10, help="occupied extent")
    ap.add_argument("-a", type=int, default=38, help="virtual extent")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()

    import sq_jax as cur
    from sq_jax.cc.equations import load_equations
    from sq_jax.forest.inputs import input_specs

    base = import_revision(args.rev)
    text = load_equations(args.equations)
    progs = {
        "base": base.compile(text, base.Spaces(i=args.i, a=args.a)),
        "this": cur.compile(text, cur.Spaces(i=args.i, a=args.a)),
    }
    rng = np.random.default_rng(0)
    specs = input_specs(progs["this"].schedule.annotated.forest)
    blocks = {s.block_key: jnp.asarray(0.1 * rng.standard_normal(s.shape)) for s in specs}
    compiled = {k: p.jitted.lower(blocks).compile(SQ_XLA) for k, p in progs.items()}
    out = {k: c(blocks) for k, c in compiled.items()}
    diff = max(float(jnp.max(jnp.abs(out["base"][n] - out["this"][n]))) for n in out["this"])
    print(f"max |this - base| = {diff:.1e}; FLOPs base {progs['base'].flops:.3e}", end="")
    print(f", this {progs['this'].flops:.3e}")

    mm, mm_flops = matmul_fn()
    fns = {k: (lambda c=c: c(blocks)) for k, c in compiled.items()} | {"matmul": mm}
    for f in fns.values():
        jax.block_until_ready(f())
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(args.reps):
        for k in list(fns) if r % 2 == 0 else list(reversed(fns)):
            t, c = time.perf_counter(), time.process_time()
            jax.block_until_ready(fns[k]())
            wall[k].append(time.perf_counter() - t)
            cpu[k].append(time.process_time() - c)
    med = {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in fns}
    mm_rate = [mm_flops / s for s in med["matmul"]]
    print(f"matmul: {mm_rate[0] / 1e9:.1f} GFLOP/s wall, {mm_rate[1] / 1e9:.1f} per CPU-second")
    for k in ("base", "this"):
        flops = progs[k].flops
        (w, c), rate = med[k], flops / med[k][0]
        print(
            f"{k}: wall {w:.4f} s, {rate / 1e9:.1f} GFLOP/s, ratio {rate / mm_rate[0]:.3f}"
            f" | CPU {c:.4f} s, ratio {flops / c / mm_rate[1]:.3f}"
        )
    print(f"this/base time: wall {med['this'][0] / med['base'][0]:.3f}", end="")
    print(f", CPU {med['this'][1] / med['base'][1]:.3f}")


if __name__ == "__main__":
    main()
