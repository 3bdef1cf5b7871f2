"""Two variants of each plan side by side: memory and time of spin-orbital CCSD.

``--vary sums`` (the default): each plan is compiled twice, with ``BatchPlan.sums``
``"fused"`` (every term of a long sum made, then one fused add) and ``"sequenced"`` (term
by term into one accumulator, :mod:`sq_jax.lower.accumulate`). ``--vary copies``: with
``BatchPlan.copies`` ``"per batch"`` and ``"hoisted"`` (whole inputs transposed once
before the loops, :mod:`sq_jax.lower.copies`). Per plan it prints what a
``memory_budget`` must hold for it (``required_bytes``: the model with the planner's
headroom), XLA's temporaries + outputs, the model's prediction over XLA's figure, the
FLOPs and the median time per call (interleaved, inputs passed as blocks), all
relative to the unbatched program.

Usage::

    .venv/bin/python bench/bench_sums.py                      # H2O/cc-pVDZ sizes
    .venv/bin/python bench/bench_sums.py --nocc 6 --nvirt 16 --reps 5
    .venv/bin/python bench/bench_sums.py --out bench/results/sums
    .venv/bin/python bench/bench_sums.py --vary copies --out bench/results/copies

Inputs are random with the permutational symmetries of ``f``, ``g`` and ``t`` (the
programs pack symmetric pairs), so the figures hold for the real integrals' shapes.
"""

from __future__ import annotations

import argparse
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

EXT, CON = "external", "contracted"
PLANS: dict[str, dict[str, Any]] = {
    "unbatched": {"batch": {}},
    "a: 2 (both roles)": {"batch": {"a": 2}},
    "a: 4 external, first mode, hoisted": {
        "batch": {"a": {"batches": 4, "roles": EXT}},
        "external_modes": "first",
        "hoist": "invariant",
    },
    "a: 38 external, first mode, hoisted": {
        "batch": {"a": {"block": 1, "roles": EXT}},
        "external_modes": "first",
        "hoist": "invariant",
    },
    "a: 13 external + i: 2 contracted, first mode, hoisted": {
        "batch": {"a": {"batches": 13, "roles": EXT}, "i": {"batches": 2, "roles": CON}},
        "external_modes": "first",
        "hoist": "invariant",
    },
}


VARIANTS = {"sums": ("fused", "sequenced"), "copies": ("per batch", "hoisted")}
"""Per ``--vary``: the ``BatchPlan`` field compared and its two values."""


def run(nocc: int, nvirt: int, reps: int, vary: str = "sums") -> list[dict[str, Any]]:
    text, spaces = load_equations("ccsd_so"), sq.Spaces(i=nocc, a=nvirt)
    rows, calls, x = [], {}, None
    for name, spec in PLANS.items():
        for sums in VARIANTS[vary]:
            options = {k: v for k, v in spec.items() if k != "batch"}
            plan = BatchPlan.of(spec["batch"], **{vary: sums}, **options)
            prog = sq.compile(text, spaces, pair_symmetry=True, batch=plan)
            if x is None:
                x = symmetric_random_inputs(prog.schedule.annotated.forest, scale=0.1)
            compiled = prog.compiled(x)
            stats = compiled.memory_analysis()
            xla = stats.temp_size_in_bytes + stats.output_size_in_bytes
            key = f"{name} / {sums}"
            calls[key] = lambda c=compiled, x=x: c(x)
            rows.append(
                {
                    "plan": name,
                    "sums": sums,
                    "required_bytes": required_bytes(prog.schedule),
                    "xla_bytes": xla,
                    "predicted_over_xla": prog.memory_bytes / xla,
                    "flops": prog.flops,
                    "key": key,
                }
            )
            print(f"compiled {key}", flush=True)
    times = interleaved(calls, reps)
    base = rows[0]
    for row in rows:
        row["s"] = times[row["key"]]["median_s"]
        row["time_ratio"] = row["s"] / times[base["key"]]["median_s"]
        row["flops_ratio"] = row["flops"] / base["flops"]
        row["xla_ratio"] = row["xla_bytes"] / base["xla_bytes"]
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| plan | variant | budget must hold | XLA temp+out (÷ unbatched fused) | predicted ÷ XLA"
        " | FLOPs ÷ unb. | s/call (÷ unb.) |\n|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['plan']} | {r['sums']} | {r['required_bytes'] / 2**20:.2f} MiB | "
            f"{r['xla_bytes'] / 2**20:.2f} MiB ({r['xla_ratio']:.2f}) | "
            f"{r['predicted_over_xla']:.2f} | {r['flops_ratio']:.3f} | "
            f"{r['s']:.4f} ({r['time_ratio']:.2f}) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nocc", type=int, default=10)
    parser.add_argument("--nvirt", type=int, default=38)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--vary", choices=sorted(VARIANTS), default="sums")
    add_out_option(parser)
    args = parser.parse_args(argv)
    rows = run(args.nocc, args.nvirt, args.reps, args.vary)
    first, second = VARIANTS[args.vary]
    md = (
        f"# {args.vary}: {first} against {second} (ccsd_so, i={args.nocc}, a={args.nvirt})\n\n"
        f"Command: `python bench/bench_sums.py --nocc {args.nocc} --nvirt {args.nvirt} "
        f"--reps {args.reps} --vary {args.vary}`\n\n" + table(rows) + "\n"
    )
    print(md)
    write_out(args.out, md, [{k: v for k, v in r.items() if k != "key"} for r in rows])
    return rows


if __name__ == "__main__":
    main()
