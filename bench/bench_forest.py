"""Time parse + build_forest on a synthetic 2,000-term residual (target: < 10 s).

Run: .venv/bin/python bench/bench_forest.py [--terms 2000] [--repeat 3] [--json out.json]

The expression is a CCSD-T2-like sum: each term is one of a few 2-4-factor templates
(ladder, ring, quadratic) over tensors whose labels vary from term to term, with every
term using fresh dummy indices, so parsing, binarization and key building all work at
full size while a realistic share of intermediates is folded.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time

import sq_jax as sq

TEMPLATES = (
    "{c} {g}{{a1,a2;a{x},a{y}}} {t}{{a{x},a{y};i1,i2}}",
    "{c} {g}{{i{u},a1;a{x},i1}} {t}{{a{x},a2;i{u},i2}}",
    "{c} {g}{{i{u},i{v};a{x},a{y}}} {t}{{a1,a{x};i1,i{u}}} {s}{{a2,a{y};i2,i{v}}}",
    "{c} {g}{{i{u},i{v};a{x},a{y}}} {t}{{a{x},a{y};i1,i2}} {s}{{a1;i{u}}} {r}{{a2;i{v}}}",
    "{c} {f}{{a1;a{x}}} {t}{{a{x},a2;i1,i2}}",
)
LABELS = ("g", "h", "w", "v")
AMPS = ("t", "u", "s", "r")


def synthetic_text(nterms: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    terms = []
    for k in range(nterms):
        base = 10 + 4 * k
        coef = rng.choice(["", "1/2", "-1/2", "-1", "1/4", "2"])
        terms.append(
            TEMPLATES[k % len(TEMPLATES)]
            .format(
                c=coef,
                g=rng.choice(LABELS),
                f=rng.choice(LABELS),
                t=rng.choice(AMPS),
                s=rng.choice(AMPS),
                r=rng.choice(AMPS),
                x=base,
                y=base + 1,
                u=base + 2,
                v=base + 3,
            )
            .strip()
        )
    text = "R{a1,a2;i1,i2} = " + terms[0]
    for term in terms[1:]:
        text += f" - {term[1:]}" if term.startswith("-") else f" + {term}"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--terms", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()

    text = synthetic_text(args.terms)
    spaces = sq.Spaces(i=10, a=38)
    sq.build_forest(sq.parse(synthetic_text(20)), spaces)  # warm-up (imports, caches)

    parse_s, build_s, total_s = [], [], []
    forest = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        eqs = sq.parse(text)
        t1 = time.perf_counter()
        forest = sq.build_forest(eqs, spaces)
        t2 = time.perf_counter()
        parse_s.append(t1 - t0)
        build_s.append(t2 - t1)
        total_s.append(t2 - t0)
    assert forest is not None
    values = forest.values()
    figures = {
        "benchmark": "parse+build_forest",
        "terms": args.terms,
        "repeat": args.repeat,
        "median_parse_s": statistics.median(parse_s),
        "median_build_s": statistics.median(build_s),
        "median_total_s": statistics.median(total_s),
        "distinct_values": len(values),
        "occurrences": len(forest.occurrences()),
        "flops": forest.flops,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    print(
        f"parse+build_forest, {args.terms} terms: median {figures['median_total_s']:.3f} s "
        f"(parse {figures['median_parse_s']:.3f} s, build {figures['median_build_s']:.3f} s; "
        f"{len(values)} distinct values, {figures['occurrences']} occurrences; target < 10 s)"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(figures, fh, indent=2)


if __name__ == "__main__":
    main()
