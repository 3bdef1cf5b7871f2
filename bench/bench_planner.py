"""Memory-budget planner benchmark: spin-orbital CCSD at i=10, a=38 (H2O/cc-pVDZ sizes).

Run: ``.venv/bin/python bench/bench_planner.py [--xla] [--out DIR]``.

For budgets of 1/2, 1/4 and 1/8 of the unbatched static peak, times
:func:`sq_jax.budget.plan_for_budget` (wall and CPU, median of ``--repeat`` cold
calls; target < 5 s each), and prints the chosen plan, its static peak, the peak / budget
ratio and its FLOPs / the unbatched FLOPs (recomputation). A budget below the smallest
reachable peak (1/8 for CCSD: the result R2 alone is 1/7 of the unbatched peak) is
reported with its error, and the smallest feasible budget is benchmarked instead. With
``--xla`` each plan is also compiled and XLA's ``memory_analysis()`` (temp + output) is
set against the budget (slow: one XLA compile of the CCSD program per budget).

Writes ``bench_planner.json`` and ``bench_planner.md`` to ``--out`` (default: the
current directory). Not a timed test: nothing fails on a time.

``--w3`` times the search as ``sq.compile(..., memory_budget=...)`` runs it instead: W3's
budgets (1/4 and 1/8 of the unbatched program's XLA temporaries + outputs), products over
symmetric pairs packed, for spin-orbital CCSD at H2O/cc-pVDZ sizes (i=10, a=38) and
closed-shell CCSD at benzene/cc-pVDZ sizes (i=21, a=93); the time includes widening the
plan's loops (:mod:`sq_jax.budget.widen`), as the first plan ``sq.compile`` measures
is widened. Each repeat is a cold call
(a new plan cache, the GEMM plans forgotten), timed on its own; writes
``bench_planner_w3.json`` and ``.md``.

``--candidates`` lists, at W3's budgets, the cheapest counts of every configuration of
the search space (each one :func:`sq_jax.budget.search.search_phases` lists, gates ignored)
that fits the model: what the budget leaves to choose from. Writes
``bench_planner_candidates.json`` and ``.md``.

``--race`` asks whether the planner's pick is the fastest plan it could have made: at
W3's budgets (``--systems``, ``--budgets``), the plan ``sq.compile`` keeps and every
configuration of the search space at its cheapest counts that fit the model, each
finished as the planner finishes its pick (products trimmed whole, loops widened), are
compiled for random inputs with the declared symmetries; those within the budget by
XLA's figures are timed against the unbatched program (interleaved medians of
``--reps`` rounds for the plan kept and the ``--top`` fastest of a first pass; those
above ``--max-flops`` times the unbatched FLOPs are listed, not run). Each is also
compiled once more with its plan given (no search), JAX's caches cleared: its compile
(sq_jax's passes, JAX's lowering, XLA's compile) ÷ the unbatched program's is the floor
of W3's compile ratio for that plan, which adds the search. Writes
``bench_planner_race.json`` and ``.md``. About 2.5 min for H2O/cc-pVDZ at both
budgets, 7 min for benzene/cc-pVDZ at 1/4 with ``--max-flops 2``.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import jax
import numpy as np

import sq_jax as sq
from sq_jax import format_bytes
from sq_jax.budget import plan_for_budget
from sq_jax.cc.equations import load_equations
from sq_jax.forest.inputs import input_specs
from sq_jax.plan import BatchPlan
from sq_jax.schedule import schedule_forest
from sq_jax.schedule.cost import schedule_flops

SPACES = sq.Spaces(i=10, a=38)
FRACTIONS = (("1/2", 2), ("1/4", 4), ("1/8", 8))


def _timed(fn, repeat: int):
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return out, statistics.median(walls), statistics.median(cpus)


def _xla(eqs, plan: BatchPlan, inputs) -> dict[str, int]:
    from sq_jax._pipeline import compile as compile_

    prog = compile_(eqs, SPACES, batch=plan)
    t0 = time.perf_counter()
    ma = prog.jitted.lower(inputs).compile().memory_analysis()
    return {
        "compile_s": round(time.perf_counter() - t0, 2),
        "temp": int(ma.temp_size_in_bytes),
        "output": int(ma.output_size_in_bytes),
        "argument": int(ma.argument_size_in_bytes),
    }


W3_SYSTEMS = (
    ("ccsd_so", "H2O/cc-pVDZ", sq.Spaces(i=10, a=38)),
    ("ccsd_cs", "benzene/cc-pVDZ", sq.Spaces(i=21, a=93)),
)


def _cold_plan(forest, budget: int):
    """One cold search, as ``sq.compile`` starts it (its first target has the headroom),
    and the plan's loops widened, as its first try is (where the tree has the pass)."""
    from sq_jax.budget.model import XLA_HEADROOM
    from sq_jax.lower import gemm

    if hasattr(gemm, "_plan_gemm"):  # older trees (PYTHONPATH=<worktree>/src) keep none
        gemm._plan_gemm.cache_clear()  # kept between searches: a user's first is cold
    target = math.floor(budget * XLA_HEADROOM)
    plan = plan_for_budget(forest, target)
    try:
        from sq_jax.budget.widen import widen_loops
    except ImportError:  # an older tree
        return plan
    return widen_loops(forest, schedule_forest(forest, plan), target)


def w3(args: argparse.Namespace) -> None:
    """The searches of W3's budgets (module docstring, ``--w3``)."""
    from sq_jax.budget import xla_bytes

    rows = []
    print("| equations | sizes | budget | bytes | plan | plan wall s (median) | all repeats |")
    print("|---|---|---|---|---|---|---|")
    for eq, system, spaces in W3_SYSTEMS:
        base = sq.compile(load_equations(eq), spaces, pair_symmetry=True)
        unbatched = xla_bytes(base)
        forest = base.schedule.annotated.forest
        for label, div in (("1/4", 4), ("1/8", 8)):
            budget = unbatched // div
            plan, walls = None, []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                plan = _cold_plan(forest, budget)
                walls.append(time.perf_counter() - t0)
            sf = schedule_forest(forest, plan)
            row = {
                "equations": eq,
                "system": system,
                "budget": label,
                "budget_bytes": budget,
                "budget_cell": f"{label} ({budget} B)",
                "plan": str(plan),
                "flops_ratio": round(schedule_flops(sf) / forest.flops, 4),
                "plan_wall_s": round(statistics.median(walls), 2),
                "walls": [round(w, 2) for w in walls],
            }
            rows.append(row)
            print(
                f"| {eq} | {system} | {label} | {budget} | {plan} | {row['plan_wall_s']} | "
                f"{row['walls']} |",
                flush=True,
            )
    record = {
        **_header(),
        "load_average": os.getloadavg(),
        "repeat": args.repeat,
        "rows": rows,
    }
    md = [
        "# plan_for_budget at W3's budgets (target < 5 s)",
        "",
        f"{record['date']}, {record['machine']}, load average at start "
        f"{tuple(round(x, 2) for x in record['load_average'])}, Python {record['python']}; "
        f"median of {args.repeat} cold calls. Command: "
        f"`python bench/bench_planner.py --w3 --repeat {args.repeat} --out DIR`.",
    ]
    columns = (
        ("equations", "equations"),
        ("sizes", "system"),
        ("budget", "budget_cell"),
        ("plan", "plan"),
        ("FLOPs / unbatched", "flops_ratio"),
        ("wall s", "plan_wall_s"),
        ("repeats", "walls"),
    )
    _save(args.out, "bench_planner_w3", record, md, columns)


def _every_configuration(forest) -> list:
    """Every configuration the search may schedule, its phases' gates ignored."""
    from sq_jax.budget import search as S

    spaces = S._batchable_spaces(forest, None)
    spaces = tuple(s for s in spaces if S._ladder(forest.spaces.extent(s), None))
    return [c for _, phase in S.search_phases(forest, spaces) for c in phase if c.roles]


def _search_space(forest) -> SimpleNamespace:
    """The search's pieces, to price every configuration by hand: its step cost, the
    unbatched program's cost ``c0`` and packed FLOPs ``packed0``, the cost ``unit`` of
    its ties, the batch-count ``ladders`` per space and ``configs``: each configuration
    that can be scheduled, with its schedule and budget model."""
    from sq_jax.budget import search as S

    cache = S.PlanCache().using(forest)
    step_cost = S.default_step_cost()
    c0, packed0 = S._unbatched(forest, cache, step_cost)
    configs = []
    for cfg in _every_configuration(forest):
        sf = cache.structure(forest, cfg)
        if sf is not None:
            configs.append((cfg, sf, cache.model(cfg, sf)))
    return SimpleNamespace(
        step_cost=step_cost,
        c0=c0,
        packed0=packed0,
        unit=S.COST_RESOLUTION * c0,
        ladders={
            s: S._ladder(forest.spaces.extent(s), None) for s in S._batchable_spaces(forest, None)
        },
        configs=configs,
    )


def candidates(args: argparse.Namespace) -> None:
    """The fitting configurations at W3's budgets (module docstring, ``--candidates``)."""
    from sq_jax.budget import search as S
    from sq_jax.budget import xla_bytes
    from sq_jax.budget.model import XLA_HEADROOM

    rows = []
    for eq, system, spaces in W3_SYSTEMS:
        base = sq.compile(load_equations(eq), spaces, pair_symmetry=True)
        unbatched = xla_bytes(base)
        forest = base.schedule.annotated.forest
        space = _search_space(forest)
        c0, packed0, ladders = space.c0, space.packed0, space.ladders
        models = [model for _, _, model in space.configs]
        for label, div in (("1/4", 4), ("1/8", 8)):
            limit = math.floor(unbatched // div * XLA_HEADROOM)
            found = {}
            for model in models:
                lad = [ladders[s] for s in model.config.spaces]
                pt = S._search(model, lad, limit, None, space.step_cost, space.unit)
                if pt is not None:
                    plan = pt.config.plan(pt.counts)
                    least = min(  # the fewest FLOPs at any counts that fit, not the cheapest
                        model.packed_flops([n for n, _ in combo], [b for _, b in combo])
                        for combo in itertools.product(*lad)
                        if model.peak([b for _, b in combo]) <= limit
                    )
                    found.setdefault(str(plan), (pt, model, least))
            ranked = sorted(found.items(), key=lambda item: item[1][0].key)
            print(f"{eq} {system} {label}: {len(ranked)} of {len(models)} configurations fit")
            for text, (pt, model, least) in ranked:
                row = {
                    "equations": eq,
                    "system": system,
                    "budget": label,
                    "plan": text,
                    "cost_ratio": round(pt.cost / c0, 3),
                    "packed_flops_ratio": round(pt.packed / packed0, 3),
                    "least_flops_ratio": round(least / packed0, 3),
                    "flops_ratio": round(pt.flops / forest.flops, 3),
                    "steps": model.steps(pt.counts),
                    "need_over_limit": round(pt.peak / limit, 3),
                }
                rows.append(row)
                print(
                    f"  cost {row['cost_ratio']:9.2f}  FLOPs {row['packed_flops_ratio']:7.2f}"
                    f" (least {row['least_flops_ratio']:7.2f})"
                    f"  steps {row['steps']:>12,}  {text}",
                    flush=True,
                )
    record = {**_header(), "rows": rows}
    md = [
        "# Every configuration that fits W3's budgets (the model's view)",
        "",
        f"{record['date']}. Command: `python bench/bench_planner.py --candidates --out DIR`.",
        "Per budget, each configuration of the search space (gates ignored) at its cheapest",
        "fitting counts, cheapest first; the untrimmed plans (no products kept whole).",
        "Cost and FLOPs are ratios to the unbatched program: cost is FLOPs (packed products",
        "at the share their lowering runs) plus the step price per executed step; FLOPs are",
        "packed, as `Program.flops` counts them; the least FLOPs that fit: of any counts",
        "of that configuration that fit. Need: the model's requirement over the planner's",
        "limit (the budget with XLA headroom).",
    ]
    columns = (
        ("equations", "equations"),
        ("sizes", "system"),
        ("budget", "budget"),
        ("plan", "plan"),
        ("cost / unbatched", "cost_ratio"),
        ("FLOPs / unbatched", "packed_flops_ratio"),
        ("least FLOPs that fit / unbatched", "least_flops_ratio"),
        ("steps", "steps"),
        ("need / limit", "need_over_limit"),
    )
    _save(args.out, "bench_planner_candidates", record, md, columns)


SLOW = 20
"""``--race``: a candidate whose call takes this many times the unbatched one's is timed
by that one call (the slow plans of a tight budget run minutes per round)."""


def _race_candidates(forest, budget: int) -> dict[str, BatchPlan]:
    """Each configuration's cheapest counts that fit ``budget`` (the model, no headroom),
    finished as the planner finishes the plan it picks: products trimmed whole, loops
    widened. Keyed by the plan's text."""
    from sq_jax.budget import search as S
    from sq_jax.budget.explain import required_bytes, with_counts
    from sq_jax.budget.trim import trim_contracted_loops
    from sq_jax.budget.widen import widen_loops

    space = _search_space(forest)
    out: dict[str, BatchPlan] = {}
    for cfg, sf, model in space.configs:
        lad = [space.ladders[s] for s in cfg.spaces]
        pt = S._search(model, lad, budget, None, space.step_cost, space.unit)
        if pt is None:
            continue
        check = with_counts(sf, cfg.plan(pt.counts))
        trimmed = trim_contracted_loops(forest, check, budget, required_bytes(check))
        plan = widen_loops(forest, schedule_forest(forest, trimmed), budget)
        out.setdefault(str(plan), plan)
    return out


def race(args: argparse.Namespace) -> None:
    """The search's candidates compiled and timed (module docstring, ``--race``)."""
    from sq_jax.budget import xla_bytes
    from sq_jax.forest.symmetry import symmetric_random_inputs
    from sq_jax.lower.aot import compiler_options

    try:
        from bench._timing import interleaved
    except ImportError:  # run as a script from the repository root
        from _timing import interleaved  # type: ignore[no-redef]

    started = {**_header(), "load_average": os.getloadavg()}  # when the run starts
    rows = []
    for eq, system, spaces in W3_SYSTEMS:
        if not any(s.lower() in system.lower() for s in args.systems):
            continue
        text = load_equations(eq)
        base = sq.compile(text, spaces, pair_symmetry=True)
        unbatched = xla_bytes(base)
        forest = base.schedule.annotated.forest
        inputs = symmetric_random_inputs(forest, seed=1, scale=0.01)
        for label, div in (("1/4", 4), ("1/8", 8)):
            if label not in args.budgets:
                continue
            budget = unbatched // div
            chosen = sq.compile(text, spaces, pair_symmetry=True, memory_budget=budget)
            plans = {"unbatched": BatchPlan(), "sq.compile": chosen.schedule.annotated.plan}
            for key, plan in _race_candidates(forest, budget).items():
                if plan != plans["sq.compile"]:  # the pick is raced once, under its name
                    plans.setdefault(key, plan)
            runs, fits, compiles = {}, {}, {}
            for key, plan in plans.items():
                # the compile of the plan given (no search): sq_jax's passes, JAX's
                # lowering, XLA's compile; JAX's caches cleared (the unbatched program
                # was compiled above, and would be found there)
                jax.clear_caches()
                t0 = time.perf_counter()
                prog = sq.compile(text, spaces, pair_symmetry=True, batch=plan)
                passes = time.perf_counter() - t0
                if key != "sq.compile" and prog.flops > args.max_flops * base.flops:
                    fits[key] = (prog, math.nan)  # not compiled: slower by its FLOPs alone
                    continue
                specs = input_specs(prog.schedule.annotated.forest)
                blocks = {s.block_key: inputs[s.block_key] for s in specs}
                t0 = time.perf_counter()
                lowered = prog.jitted.lower(blocks)
                t1 = time.perf_counter()
                exe = lowered.compile(compiler_options())
                compiles[key] = (passes, t1 - t0, time.perf_counter() - t1)
                ma = exe.memory_analysis()
                measured = ma.temp_size_in_bytes + ma.output_size_in_bytes
                fits[key] = (prog, measured)
                if key in ("unbatched", "sq.compile") or measured <= budget:
                    runs[key] = lambda e=exe, b=blocks: e(b)
            quick = {}
            for key, fn in runs.items():  # one pass to keep the --top fastest
                t0 = time.perf_counter()
                jax.block_until_ready(fn())
                quick[key] = time.perf_counter() - t0
                if quick[key] < SLOW * quick["unbatched"]:  # else that call is its time
                    t0 = time.perf_counter()
                    jax.block_until_ready(fn())
                    quick[key] = time.perf_counter() - t0
            others = sorted(
                (k for k in runs if k not in ("unbatched", "sq.compile")), key=quick.get
            )
            near = [k for k in others if quick[k] < SLOW * quick["unbatched"]]
            keep = ["unbatched", "sq.compile", *near[: args.top]]
            timed = interleaved({k: runs[k] for k in keep}, args.reps)
            t0 = timed["unbatched"]["median_s"]
            c0 = compiles["unbatched"]
            compiled = sum(1 for _, m in fits.values() if not math.isnan(m)) - 2
            print(
                f"{eq} {system} {label}: {len(plans) - 2} candidates, {compiled} compiled, "
                f"{len(runs) - 2} within the budget"
            )
            for key in plans:
                prog, measured = fits[key]
                own = compiles.get(key)  # (passes, lowering, XLA) seconds, if compiled
                row = {
                    "equations": eq,
                    "system": system,
                    "budget": label,
                    "plan": key if key in ("unbatched", "sq.compile") else "candidate",
                    "batch_plan": str(prog.schedule.annotated.plan),
                    "flops_ratio": round(prog.flops / base.flops, 3),
                    "xla_over_budget": None
                    if math.isnan(measured)
                    else round(measured / budget, 3),
                    "time_ratio": round(timed[key]["median_s"] / t0, 3)
                    if key in timed
                    else round(quick[key] / t0, 3)
                    if key in quick
                    else None,
                    "compile_s": None if own is None else [round(x, 2) for x in own],
                    "compile_ratio": None if own is None else round(sum(own) / sum(c0), 2),
                    "xla_compile_ratio": None if own is None else round(own[2] / c0[2], 2),
                    "timed": "interleaved"
                    if key in timed
                    else "one call"
                    if key in quick
                    else "not run: FLOPs"
                    if math.isnan(measured)
                    else "not run: over budget",
                }
                rows.append(row)
            for row in sorted(rows[-len(plans) :], key=_by_time):
                print(
                    f"  {row['time_ratio'] or '-'}x ({row['timed']})  FLOPs {row['flops_ratio']}"
                    f"  XLA/budget {row['xla_over_budget']}  compile {row['compile_ratio']}"
                    f" (XLA {row['xla_compile_ratio']})  {row['plan']}: {row['batch_plan']}",
                    flush=True,
                )
    record = {**started, "reps": args.reps, "rows": rows}
    rows.sort(key=lambda r: (r["system"], r["budget"], *_by_time(r)))
    md = [
        "# The planner's candidates at W3's budgets, compiled and timed",
        "",
        f"{record['date']}, {record['machine']}, load average at start "
        f"{tuple(round(x, 2) for x in record['load_average'])}. Command: "
        f"`python bench/bench_planner.py --race --reps {args.reps} --top {args.top} "
        f"--max-flops {args.max_flops:g} "
        f"--systems {' '.join(args.systems)} --budgets {' '.join(args.budgets)} --out DIR`.",
        "Per budget: the plan `sq.compile` keeps, and each configuration of the search space",
        "(gates ignored) at its cheapest counts that fit the model, with its products trimmed",
        "whole and its loops widened as the planner finishes its pick; random inputs with the",
        "declared symmetries. Time ÷ the unbatched program: interleaved medians with a lead-in",
        "call each for the plan kept and the `--top` fastest of a first pass (others: their",
        f"call of that pass; one call alone from {SLOW}x the unbatched time); plans XLA",
        f"measures over the budget are not run, nor those above {args.max_flops}x the",
        "unbatched FLOPs. Compile: each plan given (`sq.compile(..., batch=plan)`: no search)",
        "after `jax.clear_caches()`, once: sq_jax's passes, JAX's lowering and XLA's compile,",
        "÷ the unbatched program's (W3's target: 2x, the search included).",
    ]
    columns = (
        ("equations", "equations"),
        ("sizes", "system"),
        ("budget", "budget"),
        ("plan", "plan"),
        ("batch plan", "batch_plan"),
        ("FLOPs / unbatched", "flops_ratio"),
        ("XLA temp+out / budget", "xla_over_budget"),
        ("time / unbatched", "time_ratio"),
        ("timed", "timed"),
        ("compile / unbatched", "compile_ratio"),
        ("XLA compile / unbatched", "xla_compile_ratio"),
        ("compile s: passes, lowering, XLA", "compile_s"),
    )
    _save(args.out, "bench_planner_race", record, md, columns)


def _by_time(row: dict) -> tuple[bool, float]:
    """Fastest first; plans not run last."""
    return row["time_ratio"] is None, row["time_ratio"] or 0.0


def _header() -> dict:
    """When, where and with what a record was made."""
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "python": platform.python_version(),
        "sq_jax": sq.__version__,
    }


def _save(
    out: Path, stem: str, record: dict, head: list[str], columns: tuple[tuple[str, str], ...]
) -> None:
    """The record as JSON and, as markdown, ``head`` then a table of the record's rows
    (one column per ``(title, key)``): two files named ``stem`` in ``out``."""
    md = [*head, "", "| " + " | ".join(t for t, _ in columns) + " |", "|" + "---|" * len(columns)]
    md += ["| " + " | ".join(str(r[k]) for _, k in columns) + " |" for r in record["rows"]]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / f"{stem}.md").write_text("\n".join(md) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--xla", action="store_true")
    ap.add_argument("--w3", action="store_true", help="W3's budgets, as sq.compile plans them")
    ap.add_argument(
        "--candidates", action="store_true", help="every configuration fitting W3's budgets"
    )
    ap.add_argument("--race", action="store_true", help="time the candidates against the plan kept")
    ap.add_argument("--reps", type=int, default=5, help="--race: interleaved rounds")
    ap.add_argument("--top", type=int, default=8, help="--race: candidates timed interleaved")
    ap.add_argument(
        "--max-flops",
        type=float,
        default=4.0,
        help="--race: candidates above this many times the unbatched FLOPs are not run",
    )
    ap.add_argument("--systems", nargs="+", default=["H2O", "benzene"], help="--race")
    ap.add_argument("--budgets", nargs="+", default=["1/4", "1/8"], help="--race")
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args()
    if args.race:
        race(args)
        return
    if args.candidates:
        candidates(args)
        return
    if args.w3:
        w3(args)
        return

    t0 = time.perf_counter()
    eqs = sq.parse(load_equations("ccsd_so"))
    forest = sq.build_forest(eqs, SPACES)
    build_s = time.perf_counter() - t0
    base = schedule_forest(forest, BatchPlan())
    p0, f0 = base.peak.peak_bytes, forest.flops
    print(
        f"CCSD (ccsd_so, {len(forest.roots)} equations) at {SPACES}: build {build_s:.2f} s, "
        f"unbatched static peak {format_bytes(p0)} ({p0} B), {f0:,} FLOPs"
    )
    inputs = None
    if args.xla:
        rng = np.random.default_rng(0)
        inputs = {s.block_key: rng.standard_normal(s.shape) for s in input_specs(forest)}

    rows = []
    header = (
        "| budget | bytes | plan | plan wall s | plan CPU s | static peak | peak/budget "
        "| FLOPs/unbatched |"
    )
    if args.xla:
        header += " XLA temp+out | XLA/budget |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    todo: list[tuple[str, int]] = [(label, p0 // div) for label, div in FRACTIONS]
    infeasible = {}
    while todo:
        label, budget = todo.pop(0)
        try:
            plan, wall, cpu = _timed(lambda b=budget: plan_for_budget(forest, b), args.repeat)
        except sq.MemoryBudgetError as err:
            infeasible[label] = str(err)
            need = err.smallest_feasible
            print(f"| {label} | {budget} | infeasible: smallest static peak {need} |")
            if not any(lbl == "floor" for lbl, _ in todo):
                todo.append(("floor", need))  # the tightest feasible budget
            continue
        sf = schedule_forest(forest, plan)
        peak, flops = sf.peak.peak_bytes, schedule_flops(sf)
        row = {
            "budget": label,
            "budget_bytes": budget,
            "budget_cell": f"{label} ({budget} B)",
            "plan": str(plan),
            "plan_wall_s": round(wall, 3),
            "plan_cpu_s": round(cpu, 3),
            "static_peak": peak,
            "peak_over_budget": round(peak / budget, 4),
            "flops": flops,
            "flops_ratio": round(flops / f0, 4),
            "target_ok_cpu": cpu < 5.0,
        }
        line = (
            f"| {label} | {budget} | {plan} | {wall:.2f} | {cpu:.2f} | {peak} | "
            f"{peak / budget:.3f} | {flops / f0:.3f} |"
        )
        if args.xla:
            x = _xla(eqs, plan, inputs)
            row["xla"] = x
            measured = x["temp"] + x["output"]
            line += f" {measured} | {measured / budget:.2f} |"
        rows.append(row)
        print(line)
    for label, text in infeasible.items():
        print(f"\nbudget {label}:\n  {text}")

    record = {
        **_header(),
        "workload": f"ccsd_so at {SPACES}",
        "unbatched_peak": p0,
        "unbatched_flops": f0,
        "repeat": args.repeat,
        "rows": rows,
        "infeasible": infeasible,
    }
    md = [
        f"# plan_for_budget — {record['workload']}",
        "",
        f"{record['date']}, {record['machine']}, Python {record['python']}; unbatched peak "
        f"{p0} B, {f0:,} FLOPs; median of {args.repeat} cold calls.",
    ]
    columns = (
        ("budget", "budget_cell"),
        ("plan", "plan"),
        ("wall s", "plan_wall_s"),
        ("CPU s", "plan_cpu_s"),
        ("static peak / budget", "peak_over_budget"),
        ("FLOPs / unbatched", "flops_ratio"),
    )
    _save(args.out, "bench_planner", record, md, columns)


if __name__ == "__main__":
    main()
