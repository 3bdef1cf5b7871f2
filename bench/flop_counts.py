"""FLOPs per iteration of the shipped CC equation sets, flat and factored, by contraction class.

Builds forests only (no evaluation), so it runs in seconds at any extents:

    python bench/flop_counts.py                      # benzene/cc-pVDZ: o=21, v=93
    python bench/flop_counts.py --o 21 --v 93 --naux 456 --classes ccsd_cs
    python bench/flop_counts.py --without-blocks     # factored without bilinear blocks
    python bench/flop_counts.py --dress              # shared inner sums dressed (build_forest)
    python bench/flop_counts.py --pairs              # + the program cc.ccsd compiles (packed)

Spin-orbital sets (``*_so``) are counted at o=2·o, v=2·v. A class is the contraction's
index ranks (``o3v3`` = three occupied and three virtual labels over both operands);
``adds`` are the SUM nodes; each class is listed with its number of values. ``--pairs``
also compiles each set (passes only, no XLA) with ``pair_symmetry=True``, as the CC drivers
do, and prints the program's FLOPs: products over symmetric pairs (the ladder) packed.
"""

from __future__ import annotations

import argparse
from collections import Counter
from contextlib import nullcontext

import workloads as wl

import sq_jax as sq
from sq_jax.cc.equations import load_equations
from sq_jax.forest.factor import unfactored, without_blocks
from sq_jax.forest.nodes import NodeKind

SETS = ("ccsd_cs", "ccd_cs", "ccsd_cs_df", "ccsd_so", "ccd_so")


def flop_classes(forest: sq.Forest) -> tuple[Counter[str], Counter[str]]:
    """(FLOPs, number of values) per contraction class (see the module docstring)."""
    flops: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for value in forest.values():
        if value.kind is NodeKind.SUM:
            name = "adds"
        else:
            labels = set(value.left.indices) | set(value.right.indices)
            ranks = Counter({"o": 0, "v": 0})
            for ix in labels:
                ranks[{"i": "o", "a": "v"}.get(ix.space, "K")] += 1
            name = "".join(f"{s}{n}" for s, n in ranks.items() if n)
        flops[name] += forest.node_flops(value)
        count[name] += 1
    return flops, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--o", type=int, default=21)
    parser.add_argument("--v", type=int, default=93)
    parser.add_argument("--naux", type=int, default=456)
    parser.add_argument("--classes", nargs="*", default=[], help="sets to break down")
    parser.add_argument(
        "--without-blocks", action="store_true", help="factor without bilinear blocks"
    )
    parser.add_argument(
        "--dress", action="store_true", help="build_forest(dress=True): dressed factors"
    )
    parser.add_argument(
        "--pairs", action="store_true", help="also the packed program's FLOPs (pair_symmetry)"
    )
    args = parser.parse_args()
    for name in SETS:
        scale = 2 if name.endswith("_so") else 1
        spaces = sq.Spaces({"Κ": args.naux}, i=scale * args.o, a=scale * args.v)
        eqs = sq.parse(load_equations(name))
        with unfactored():
            flat = sq.build_forest(eqs, spaces)
        with without_blocks() if args.without_blocks else nullcontext():
            factored = sq.build_forest(eqs, spaces, dress=args.dress)
        ratio = factored.flops / flat.flops
        print(f"{name:11s} flat {flat.flops:.4e}  factored {factored.flops:.4e}  ({ratio:.3f}x)")
        if args.pairs:
            with without_blocks() if args.without_blocks else nullcontext():
                # as cc.ccsd compiles: the integrals fixed (prepared once per solve)
                solved = wl.as_solved(load_equations(name), spaces)
                prog = sq.compile(eqs, spaces, dress=args.dress, **solved)
            share = prog.flops / factored.flops
            print(f"{'':11s} packed program {prog.flops:.4e}  ({share:.3f}x the factored forest)")
        if name in args.classes:
            (before, n_before), (after, n_after) = flop_classes(flat), flop_classes(factored)
            for cls in sorted(before.keys() | after.keys(), key=lambda c: -before[c]):
                print(
                    f"    {cls:8s} {n_before[cls]:4d} {before[cls]:.4e} -> "
                    f"{n_after[cls]:4d} {after[cls]:.4e}"
                )


if __name__ == "__main__":
    main()
