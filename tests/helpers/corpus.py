"""A shared corpus of equations with hand-written NumPy oracles.

Each case is equation text plus an oracle written directly with ``numpy.einsum`` on the
same inputs (sliced by hand), independent of sq_jax. Later stages (scheduling, lowering,
batching) evaluate the same cases and compare with these oracles and with the reference
evaluator.

Groups: scalar-like, GEMM-like, Hadamard, outer products, traces, density fitting,
CCSD T1/T2-like terms, sums sharing intermediates, nested sums, variables.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import sq_jax as sq

NO, NV, NK = 3, 4, 5
SPACES = sq.Spaces({"Κ": NK}, i=NO, a=NV)
o, v = slice(0, NO), slice(NO, NO + NV)


def make_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs: full f, g (over p) and B (p, p, Κ); amplitude blocks; a variable."""
    rng = np.random.default_rng(seed)
    n = NO + NV
    return {
        "f": rng.standard_normal((n, n)),
        "g": rng.standard_normal((n, n, n, n)),
        "B": rng.standard_normal((n, n, NK)),
        "t{a;i}": rng.standard_normal((NV, NO)),
        "t{a,a;i,i}": rng.standard_normal((NV, NV, NO, NO)),
        "ω": np.float64(0.7),
    }


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    oracle: Callable[[dict], dict[str, np.ndarray]]


def _e(spec, *ops):
    return np.einsum(spec, *ops)


CASES: tuple[Case, ...] = (
    # --- scalar-like
    Case(
        "energy_doubles",
        "E = 1/4 g{i1,i2;a1,a2} t{a1,a2;i1,i2}",
        lambda x: {"E": 0.25 * _e("ijab,abij->", x["g"][o, o, v, v], x["t{a,a;i,i}"])},
    ),
    Case("trace", "E = f{i1;i1}", lambda x: {"E": np.trace(x["f"][o, o])}),
    # --- GEMM-like
    Case(
        "gemm",
        "R{a1;i1} = f{a1;a2} t{a2;i1}",
        lambda x: {"R": x["f"][v, v] @ x["t{a;i}"]},
    ),
    # --- Hadamard
    Case(
        "hadamard",
        "R{a1;i1} = f{a1;i1} t{a1;i1}",
        lambda x: {"R": x["f"][v, o] * x["t{a;i}"]},
    ),
    # --- outer products
    Case(
        "outer",
        "R{a1,a2;i1,i2} = t{a1;i1} t{a2;i2}",
        lambda x: {"R": _e("ai,bj->abij", x["t{a;i}"], x["t{a;i}"])},
    ),
    # --- density fitting
    Case(
        "df_eri",
        "V{p1,p2;p3,p4} = B{p1,p3;;Κ1} B{p2,p4;;Κ1}",
        lambda x: {"V": _e("prK,qsK->pqrs", x["B"], x["B"])},
    ),
    # --- CCSD T2-like
    Case(
        "ccsd_quadratic_t2",
        "R{a1,a2;i1,i2} = 1/2 g{i3,i4;a3,a4} t{a1,a3;i1,i3} t{a2,a4;i2,i4}",
        lambda x: {
            "R": 0.5
            * _e("klcd,acik,bdjl->abij", x["g"][o, o, v, v], x["t{a,a;i,i}"], x["t{a,a;i,i}"])
        },
    ),
    Case(
        "ladder",
        "R{a1,a2;i1,i2} = 1/2 g{a1,a2;a3,a4} t{a3,a4;i1,i2}",
        lambda x: {"R": 0.5 * _e("abcd,cdij->abij", x["g"][v, v, v, v], x["t{a,a;i,i}"])},
    ),
    # --- sums sharing intermediates (T1-like)
    Case(
        "t1_sum",
        "R{a1;i1} = f{a1;i1} + g{i2,a1;a2,i1} t{a2;i2}"
        " - 1/2 g{i2,i3;a2,a3} t{a2,a3;i1,i3} t{a1;i2}"
        " - 1/2 g{i3,i2;a3,a2} t{a3,a2;i1,i2} t{a1;i3}",
        lambda x: {
            "R": x["f"][v, o]
            + _e("kaci,ck->ai", x["g"][o, v, v, o], x["t{a;i}"])
            - _e("klcd,cdil,ak->ai", x["g"][o, o, v, v], x["t{a,a;i,i}"], x["t{a;i}"])
        },
    ),
    # --- nested sum (the CCSD energy in SeQuant's short form)
    Case(
        "nested_energy",
        "E = f{i1;a1} t{a1;i1} + g{i1,i2;a1,a2} (1/4 t{a1,a2;i1,i2} + 1/2 t{a1;i1} t{a2;i2})",
        lambda x: {
            "E": _e("ia,ai->", x["f"][o, v], x["t{a;i}"])
            + 0.25 * _e("ijab,abij->", x["g"][o, o, v, v], x["t{a,a;i,i}"])
            + 0.5 * _e("ijab,ai,bj->", x["g"][o, o, v, v], x["t{a;i}"], x["t{a;i}"])
        },
    ),
    # --- variables, and two equations sharing an intermediate
    Case(
        "variable_and_two_equations",
        "R{a1;i1} = ω f{a1;i1} - g{i2,a1;a2,i1} t{a2;i2}\nS{a1;i1} = g{i3,a1;a3,i1} t{a3;i3}",
        lambda x: {
            "R": x["ω"] * x["f"][v, o] - _e("kaci,ck->ai", x["g"][o, v, v, o], x["t{a;i}"]),
            "S": _e("kaci,ck->ai", x["g"][o, v, v, o], x["t{a;i}"]),
        },
    ),
)


def inputs_for(case: Case, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The subset of ``inputs`` a case reads (unknown inputs are an error by design)."""
    forest = sq.build_forest(sq.parse(case.text, spaces=SPACES), SPACES)
    from sq_jax.forest.inputs import input_specs

    wanted = set()
    for spec in input_specs(forest):
        wanted.add(spec.block_key if spec.block_key in inputs else spec.label)
    return {k: v for k, v in inputs.items() if k in wanted}


# -- the whole corpus as one system ------------------------------------------------------


def _combined_text() -> tuple[str, dict[str, tuple[str, str]]]:
    """All corpus equations as one system, each left-hand side renamed ``X<k><name>``;
    with the map from new name to (case name, old name). Used by test_lower and test_shard.
    """
    lines, names = [], {}
    for k, case in enumerate(CASES):
        for line in case.text.splitlines():
            m = re.match(r"\s*([A-Za-z]+)", line)
            assert m is not None
            new = f"X{k}{m.group(1)}"
            names[new] = (case.name, m.group(1))
            lines.append(line.replace(m.group(1), new, 1))
    return "\n".join(lines), names


COMBINED, COMBINED_NAMES = _combined_text()
