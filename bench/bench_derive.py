"""Derivation time of CC equations (sq_jax.derive) and compile time of the CCSDT program.

Run from the repository root:

    .venv/bin/python bench/bench_derive.py              # derive CCSD/CCSDT/CCSDTQ; compile
    .venv/bin/python bench/bench_derive.py --expanded   # also compile with Â expanded (slow)

Derivation: median of 5 calls of ``sq.derive.cc_equations(model)``. Compile: the CCSDT
residual program (``ccsdt_so``, Â applied to the output as the drivers do) for H3/6-31G
(UHF: 3 occupied, 9 virtual spin-orbitals) and H2O/6-31G (10 occupied, 16 virtual):
``sq.compile`` (sq_jax passes) and the first call (trace + XLA compile + one run) minus a
second call. Wall seconds, CPU seconds of this process in brackets.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import sq_jax as sq
from sq_jax.cc.antisymmetrizer import strip_antisymmetrizers
from sq_jax.cc.equations import load_equations
from sq_jax.derive import cc_equations

SYSTEMS = {"H3/6-31G": (3, 9), "H2O/6-31G": (10, 16)}


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _clock()
    return wall - start[0], cpu - start[1]


def derivation_times(models: tuple[str, ...] = ("ccsd", "ccsdt", "ccsdtq")) -> dict[str, float]:
    """Median wall seconds of ``cc_equations(model)`` over 5 calls."""
    out = {}
    for model in models:
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            cc_equations(model)
            samples.append(time.perf_counter() - start)
        out[model] = statistics.median(samples)
    return out


def compile_times(nocc: int, nvirt: int, *, expanded: bool) -> dict[str, tuple[float, float]]:
    """(wall, cpu) of sq.compile and of trace + XLA for the CCSDT residual program."""
    spaces = sq.Spaces(i=nocc, a=nvirt)
    text = load_equations("ccsdt_so")
    if expanded:
        eqs = sq.parse(text, spaces=spaces)
    else:
        raw = sq.parse(text, spaces=spaces, expand_symmetrizers=False, validate=False)
        eqs, _ = strip_antisymmetrizers(raw)
    residuals = [eq for eq in eqs if eq.name != "E"]
    start = _clock()
    program = sq.compile(residuals, spaces)
    passes = _since(start)
    rng = np.random.default_rng(0)
    n = nocc + nvirt
    inputs = {"f": rng.normal(size=(n, n)), "g": rng.normal(size=(n,) * 4)}
    for k in (1, 2, 3):
        inputs["t{" + ",".join("a" * k) + ";" + ",".join("i" * k) + "}"] = rng.normal(
            size=(nvirt,) * k + (nocc,) * k
        )
    start = _clock()
    np.asarray(program(inputs)["R3"])
    first = _since(start)
    start = _clock()
    np.asarray(program(inputs)["R3"])
    again = _since(start)
    xla = (first[0] - again[0], first[1] - again[1])
    return {"sq.compile": passes, "trace+XLA": xla, "run": again, "flops": program.flops}


def main() -> None:
    """Print the derivation and compile times as markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expanded", action="store_true", help="also compile with Â expanded")
    args = parser.parse_args()
    print("| model | derivation (s, median of 5) |\n|---|---|")
    for model, seconds in derivation_times().items():
        print(f"| {model.upper()} | {seconds:.3f} |")
    print("\n| system | Â | sq.compile s [cpu] | trace+XLA s [cpu] | run s | FLOPs |")
    print("|---|---|---|---|---|---|")
    for name, (nocc, nvirt) in SYSTEMS.items():
        for expanded in (False, True) if args.expanded else (False,):
            t = compile_times(nocc, nvirt, expanded=expanded)
            how = "expanded" if expanded else "on output"
            cells = [f"{t[k][0]:.1f} [{t[k][1]:.1f}]" for k in ("sq.compile", "trace+XLA")]
            run, flops = f"{t['run'][0]:.3f}", f"{t['flops']:.3g}"
            print(f"| {name} | {how} | {' | '.join(cells)} | {run} | {flops} |")


if __name__ == "__main__":
    main()
