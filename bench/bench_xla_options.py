"""A/B of one XLA CPU option of sq_jax's programs: compile time, run time, memory.

Run from the repository root:

    .venv/bin/python bench/bench_xla_options.py                       # fusion emitters on
    .venv/bin/python bench/bench_xla_options.py --systems h2o --reps 5

The W3 programs (spin-orbital CCSD at H2O/cc-pVDZ sizes, i=10, a=38; closed-shell CCSD
at benzene/cc-pVDZ sizes, i=21, a=93; random inputs) are compiled unbatched and with
``memory_budget`` at 1/4 and 1/8 of the unbatched program's XLA memory. Each program is
then XLA-compiled again with sq_jax's options (``sq_jax.lower.aot.compiler_options``)
and with one of them changed (``--option``, ``--value``), alternating which goes first,
with JAX's caches cleared before each compile; with ``--run``, the two executables are
also called alternately, each timed call after an untimed one. Reported: medians of wall
and CPU seconds, XLA's temp + output bytes of both, and the ratio changed ÷ sq_jax's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
jax.config.update("jax_enable_x64", True)

from tests.helpers.schedule_corpus import random_blocks  # noqa: E402

import sq_jax as sq  # noqa: E402
from sq_jax.budget import xla_bytes  # noqa: E402
from sq_jax.cc.equations import load_equations  # noqa: E402
from sq_jax.lower.aot import compiler_options  # noqa: E402

SYSTEMS = {"h2o": ("ccsd_so", 10, 38), "benzene": ("ccsd_cs", 21, 93)}


def _value(text: str) -> bool | str:
    return {"true": True, "false": False}.get(text.lower(), text)


def _timed(fn) -> tuple[float, float, object]:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w, time.process_time() - c, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--systems", default="h2o,benzene", help=f"of {sorted(SYSTEMS)}")
    parser.add_argument("--option", default="xla_cpu_use_fusion_emitters")
    parser.add_argument("--value", default="true", help="the changed value (true/false/text)")
    parser.add_argument("--budgets", default="4,8", help="fractions of the unbatched memory")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--run", action="store_true", help="also time the calls of both")
    args = parser.parse_args()
    ours = compiler_options() or {}
    changed = {**ours, args.option: _value(args.value)}
    print(f"sq_jax's options: {ours}\nchanged: {args.option}={changed[args.option]!r}\n")
    print(
        "| program | plan | XLA compile s, ours / changed (CPU) | changed ÷ ours "
        "| run s, ours / changed | XLA temp+out, ours / changed |\n|---|---|---|---|---|---|"
    )
    for name in args.systems.split(","):
        eq, o, v = SYSTEMS[name]
        text, spaces = load_equations(eq), sq.Spaces(i=o, a=v)
        base = sq.compile(text, spaces, pair_symmetry=True)
        inputs = random_blocks(base.schedule.annotated.forest, seed=1)
        limit = xla_bytes(base)
        programs = {f"{name} unbatched": base}
        for div in map(int, args.budgets.split(",")):
            budget = limit // div
            programs[f"{name} 1/{div}"] = sq.compile(
                text, spaces, pair_symmetry=True, memory_budget=budget
            )
        for label, prog in programs.items():
            lowered = prog.jitted.lower(inputs)
            samples: dict[str, list] = {"ours": [], "changed": []}
            exe = {}
            for rep in range(args.reps):
                order = [("ours", ours), ("changed", changed)]
                for tag, opts in order if rep % 2 == 0 else order[::-1]:
                    jax.clear_caches()
                    wall, cpu, exe[tag] = _timed(lambda lo=lowered, opts=opts: lo.compile(opts))
                    samples[tag].append((wall, cpu))
            runs = {}
            if args.run:  # alternating, each timed call after an untimed one of its own
                calls: dict[str, list] = {"ours": [], "changed": []}
                for rep in range(args.reps):
                    for tag in ("ours", "changed") if rep % 2 == 0 else ("changed", "ours"):
                        jax.block_until_ready(exe[tag](inputs))
                        call = _timed(lambda e=exe[tag], x=inputs: jax.block_until_ready(e(x)))
                        calls[tag].append(call[0])
                runs = {t: float(np.median(v)) for t, v in calls.items()}
            mem = {}
            for tag, e in exe.items():
                m = e.memory_analysis()
                mem[tag] = m.temp_size_in_bytes + m.output_size_in_bytes
            w = {t: float(np.median([s[0] for s in v])) for t, v in samples.items()}
            c = {t: float(np.median([s[1] for s in v])) for t, v in samples.items()}
            run = f"{runs['ours']:.3f} / {runs['changed']:.3f}" if runs else "–"
            print(
                f"| {label} | {prog.schedule.annotated.plan} | {w['ours']:.2f} / "
                f"{w['changed']:.2f} ({c['ours']:.2f} / {c['changed']:.2f}) | "
                f"{w['changed'] / w['ours']:.2f} | {run} | {mem['ours']} / {mem['changed']} |"
            )


if __name__ == "__main__":
    main()
