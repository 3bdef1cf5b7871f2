"""Plans given by their counts: the defaults against the structure ``sq.compile`` picks.

``sq.compile(..., batch={"a": 2, "i": 2})`` takes the counts and roles from the mapping
and picks the loop structure (``external_modes``, ``hoist``): the cheapest whose
predicted memory is at most that of ``BatchPlan.of(mapping)``'s defaults
(:mod:`sq_jax.budget.structure`). For each mapping this compiles both, and prints the
plan picked, what a ``memory_budget`` must hold for each (``required_bytes``), XLA's
temporaries + outputs, the FLOPs and the median time per call (interleaved, random
inputs with the declared symmetries, pairs packed), relative to the unbatched program.

Usage::

    .venv/bin/python bench/bench_structure.py                     # ccsd_so, H2O/cc-pVDZ sizes
    .venv/bin/python bench/bench_structure.py --nocc 10 --nvirt 16 --reps 9
    .venv/bin/python bench/bench_structure.py --equations ccsd_cs --nocc 21 --nvirt 93 \\
        --no-run                                                  # plans and models only
    .venv/bin/python bench/bench_structure.py --mappings '[{"a": 2}, {"a": 2, "i": 2}]'
    .venv/bin/python bench/bench_structure.py --out bench/results/structure

Each compile is timed as ``sq.compile`` (the choice included) plus XLA's compile.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import sq_jax as sq
from sq_jax.budget import required_bytes
from sq_jax.cc.equations import load_equations
from sq_jax.forest.symmetry import symmetric_random_inputs
from sq_jax.plan import BatchPlan

try:
    from bench._timing import add_out_option, interleaved, write_out
except ImportError:  # run as a script from the repository root
    from _timing import add_out_option, interleaved, write_out  # type: ignore[no-redef]

MAPPINGS = ({"a": 2}, {"a": 4}, {"i": 2}, {"a": 2, "i": 2}, {"a": 4, "i": 2})


def _compile(text: str, spaces: sq.Spaces, batch: Any, x: Any, run: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    prog = sq.compile(text, spaces, pair_symmetry=True, batch=batch)
    row: dict[str, Any] = {
        "plan": str(prog.schedule.annotated.plan),
        "required_bytes": required_bytes(prog.schedule),
        "flops": prog.flops,
        "prog": prog,
    }
    if run:
        compiled = prog.compiled(x)
        stats = compiled.memory_analysis()
        row["xla_bytes"] = stats.temp_size_in_bytes + stats.output_size_in_bytes
        row["call"] = lambda c=compiled: c(x)
    row["compile_s"] = time.perf_counter() - t0
    return row


def run(
    name: str, nocc: int, nvirt: int, reps: int, execute: bool, mappings=MAPPINGS
) -> list[dict[str, Any]]:
    text, spaces = load_equations(name), sq.Spaces(i=nocc, a=nvirt)
    forest = sq.compile(text, spaces, pair_symmetry=True).schedule.annotated.forest
    x = symmetric_random_inputs(forest, scale=0.1) if execute else None
    rows = [{"mapping": "unbatched", "how": "–", **_compile(text, spaces, None, x, execute)}]
    for mapping in mappings:
        for how, batch in (("defaults", BatchPlan.of(mapping)), ("mapping", mapping)):
            rows.append({"mapping": json.dumps(mapping), "how": how})
            rows[-1].update(_compile(text, spaces, batch, x, execute))
            print(f"compiled {rows[-1]['mapping']} {how}: {rows[-1]['plan']}", flush=True)
    base = rows[0]
    if execute:
        times = interleaved({f"{r['mapping']} {r['how']}": r["call"] for r in rows}, reps)
        for r in rows:
            r["s"] = times[f"{r['mapping']} {r['how']}"]["median_s"]
            r["time_ratio"] = r["s"] / times[f"{base['mapping']} {base['how']}"]["median_s"]
            r["xla_ratio"] = r["xla_bytes"] / base["xla_bytes"]
    for r in rows:
        r["flops_ratio"] = r["flops"] / base["flops"]
        r.pop("prog")
        r.pop("call", None)
    return rows


def table(rows: list[dict[str, Any]], execute: bool) -> str:
    head = "| counts | structure | plan compiled | budget must hold | FLOPs ÷ unb. |"
    rule = "|---|---|---|---|---|"
    if execute:
        head += " XLA temp+out (÷ unb.) | s/call (÷ unb.) |"
        rule += "---|---|"
    head += " compile s |"
    rule += "---|"
    lines = [head, rule]
    for r in rows:
        line = (
            f"| {r['mapping']} | {r['how']} | {r['plan']} | "
            f"{r['required_bytes'] / 2**20:.2f} MiB | {r['flops_ratio']:.3f} |"
        )
        if execute:
            line += (
                f" {r['xla_bytes'] / 2**20:.2f} MiB ({r['xla_ratio']:.2f}) |"
                f" {r['s']:.4f} ({r['time_ratio']:.2f}) |"
            )
        lines.append(line + f" {r['compile_s']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--equations", default="ccsd_so")
    parser.add_argument("--nocc", type=int, default=10)
    parser.add_argument("--nvirt", type=int, default=38)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--no-run", action="store_true", help="plans and models only")
    parser.add_argument(
        "--mappings",
        type=json.loads,
        default=list(MAPPINGS),
        help='a JSON list of mappings (default: %(default)s); e.g. \'[{"a": 2, "i": 2}]\'',
    )
    add_out_option(parser)
    args = parser.parse_args(argv)
    execute = not args.no_run
    rows = run(args.equations, args.nocc, args.nvirt, args.reps, execute, args.mappings)
    command = (
        f"python bench/bench_structure.py --equations {args.equations} --nocc {args.nocc} "
        f"--nvirt {args.nvirt} --reps {args.reps}" + ("" if execute else " --no-run")
    )
    if args.mappings != list(MAPPINGS):
        command += f" --mappings '{json.dumps(args.mappings)}'"
    md = (
        f"# plans given by their counts ({args.equations}, i={args.nocc}, a={args.nvirt})\n\n"
        f"Command: `{command}`\n\n" + table(rows, execute) + "\n"
    )
    print(md)
    write_out(args.out, md, rows)
    return rows


if __name__ == "__main__":
    main()
