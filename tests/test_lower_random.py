"""Hypothesis-generated contraction DAGs under random batch plans == the reference.

Each example is a system of 4–5 random equations (1–3 terms of 2–3 factors each) over a
small pool of tensors, so products repeat across terms and equations and the forest
shares intermediates; the plan batches each space with a random role and a block size
that leaves a remainder or not. One compiled program per example keeps the run short:
``EXAMPLES`` systems hold at least 200 equation DAGs.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sq_jax as sq
from sq_jax._pipeline import compile
from sq_jax.forest.reference import evaluate_forest
from sq_jax.plan import BatchPlan
from tests.helpers.schedule_corpus import random_blocks

SPACES = sq.Spaces(i=3, a=4, Κ=5)
POOL = {"i": ["i1", "i2", "i3", "i4", "i5"], "a": ["a1", "a2", "a3", "a4", "a5"], "Κ": ["K1"]}
EXAMPLES = 50
EQUATIONS = (4, 5)
COUNTED: list[int] = []


@st.composite
def equation(draw, name: str) -> str:
    result = []
    for _ in range(draw(st.integers(0, 2))):
        space = draw(st.sampled_from(["i", "a"]))
        free = [t for t in POOL[space] if t not in result]
        result.append(free[0])
    terms = []
    for _ in range(draw(st.integers(1, 3))):
        n_fac = draw(st.integers(2, 3))
        factors: list[list[str]] = [[] for _ in range(n_fac)]
        for r in result:
            factors[draw(st.integers(0, n_fac - 1))].append(r)
        dummies = [t for sp in ("i", "a", "Κ") for t in POOL[sp] if t not in result]
        chosen = draw(st.lists(st.sampled_from(dummies), min_size=1, max_size=3, unique=True))
        for d in chosen:
            a = draw(st.integers(0, n_fac - 1))
            b = draw(st.integers(0, n_fac - 2))
            b = b if b < a else b + 1
            factors[a].append(d)
            factors[b].append(d)
        spare = [t for t in dummies if t not in chosen]
        for k, fac in enumerate(factors):
            if not fac:
                d = spare.pop(0)
                fac.append(d)
                factors[(k + 1) % n_fac].append(d)
        text = []
        for fac in factors:
            sig = "".join("K" if t[0] == "K" else t[0] for t in fac)
            text.append(f"T{sig}{{{','.join(fac)}}}")
        sign = draw(st.sampled_from([" + ", " + 1/2 ", " - 2 "]))
        terms.append(sign + " ".join(text))
    lhs = f"{name}{{{','.join(result)}}}" if result else name
    return f"{lhs} = " + "".join(terms)[3:]


@st.composite
def system(draw) -> tuple[str, BatchPlan]:
    n = draw(st.integers(*EQUATIONS))
    text = "\n".join(draw(equation(f"R{k}")) for k in range(n))
    plan = {}
    for space in ("i", "a", "Κ"):
        if draw(st.booleans()):
            plan[space] = {
                "block": draw(st.integers(1, 3)),
                "roles": draw(st.sampled_from(["external", "contracted", "both"])),
            }
    site = draw(st.sampled_from(["root", "term"]))
    return text, BatchPlan.of(plan, external_site=site)


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(system())
def test_random_dags_match_reference(case):
    text, plan = case
    try:
        forest = sq.build_forest(sq.parse(text), SPACES)
    except sq.ExpressionError:
        return  # e.g. a term whose indices do not match its left-hand side
    try:
        prog = compile(text, SPACES, batch=plan)
    except sq.ScheduleError:
        return  # the scheduler refuses some plans (with a message); not ours to lower
    blocks = random_blocks(forest, seed=len(text))
    want = evaluate_forest(forest, blocks)
    got = prog(blocks)
    for name, ref in want.items():
        ref = np.asarray(ref)
        scale = max(1.0, float(np.max(np.abs(ref))))
        err = float(np.max(np.abs(np.asarray(got[name]) - ref)))
        assert err <= 1e-12 * scale, f"{name}: {err:.3e}\n{text}\n{plan}\n{prog.schedule}"
    COUNTED.append(len(forest.roots))


def test_enough_random_dags_ran():
    # runs after the property test in file order
    assert sum(COUNTED) >= 200, sum(COUNTED)
