"""Shared scheduler test corpus: forests, plans, generators, invariants and an interpreter.

* ``TEXT_CASES``: SeQuant-text equations with batch plans (built with ``sq.parse`` and
  ``sq.build_forest``).
* hand-built forests (``leaf``/``mul``/``add``) for exact shapes;
* ``ccsd_like_text`` (48 terms) and ``synthetic_sum_text`` (n terms) for the benchmark;
* ``cc_forest``/``CC_SETS``/``CC_PLANS``: the shipped CC equation sets and the plans
  they are swept under;
* ``random_case(seed)``: a seeded random system of equations and a random plan;
* ``check_invariants``: the structural invariants every schedule must satisfy;
* ``run_schedule``: a NumPy interpreter of an ordered schedule with the block semantics
  the JAX lowering implements (batches, slice-on-use, Sum/Scatter escapes), used as a
  semantic oracle against the unbatched reference evaluator.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

import sq_jax as sq
from sq_jax.cc.equations import load_equations
from sq_jax.expr.nodes import Index, Tensor
from sq_jax.forest.canon import leaf_node, product_node, sum_node
from sq_jax.forest.inputs import block_key, input_specs
from sq_jax.forest.nodes import EvalNode, Forest, NodeKind, Root
from sq_jax.forest.reference import evaluate_forest, scalar_value
from sq_jax.plan import BatchPlan
from sq_jax.schedule import ScheduledForest, schedule_forest
from sq_jax.schedule.ir import BuildStep, OrderedSchedule, OutputKind, ScopeBlock
from sq_jax.schedule.legality import LoopRole
from sq_jax.schedule.peak import dag_path, peak_profile_replay, peak_profile_sweep
from sq_jax.schedule.wellformed import well_formed_violations

SPACES = sq.Spaces(i=5, a=7, Κ=9)
"""Extents chosen so that no batch count of 2 or 3 divides them all."""


# -- hand-built forests ------------------------------------------------------------------


def ix(text: str) -> Index:
    """``"i1"`` -> ``Index("i", 1)``; ``"K1"``/``"Κ1"`` -> ``Index("Κ", 1)``."""
    head = text.rstrip("0123456789")
    return Index("Κ" if head in ("K", "Κ") else head, int(text[len(head) :]))


def leaf(label: str, bra: str = "", ket: str = "", aux: str = "") -> EvalNode:
    """A leaf node, e.g. ``leaf("g", "i1,a1", "a2,i2")``."""

    def parse(s: str) -> tuple[Index, ...]:
        return tuple(ix(t) for t in s.split(",") if t)

    return leaf_node(Tensor(label, parse(bra), parse(ket), parse(aux)))


def mul(left: EvalNode, right: EvalNode, result: str | None = None) -> EvalNode:
    """A product; ``result`` defaults to the labels on exactly one operand."""
    if result is None:
        both = set(left.indices) & set(right.indices)
        labels = [i for i in left.indices + right.indices if i not in both]
    else:
        labels = [ix(t) for t in result.split(",") if t]
    return product_node(left, right, labels)


def add(
    left: EvalNode, right: EvalNode, lc: Fraction = Fraction(1), rc: Fraction = Fraction(1)
) -> EvalNode:
    """A sum with the left operand's mode order."""
    return sum_node(left, Fraction(lc), right, Fraction(rc), left.indices)


def forest_of(*roots: tuple[str, EvalNode], spaces: sq.Spaces = SPACES) -> Forest:
    """A forest with one root per ``(name, node)``."""
    return Forest(tuple(Root(name, node.indices, node) for name, node in roots), spaces)


# -- text cases --------------------------------------------------------------------------

EXT = "external"
CON = "contracted"

TEXT_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    # DF contraction batched over the auxiliary index (a Sum escape).
    "df_kappa": ("g{p1,p2;p3,p4} = B{p1,p3;;K1} B{p2,p4;;K1}", {"Κ": {"batches": 3, "roles": CON}}),
    # Doubles residual batched over both occupied indices (two nested External loops).
    "doubles_occ": (
        "R{a1,a2;i1,i2} = 1/2 g{a1,a2;a3,a4} t{a3,a4;i1,i2} + f{a1;a3} t{a3,a2;i1,i2}"
        " - f{i3;i1} t{a1,a2;i3,i2} + 1/4 g{i3,i4;a3,a4} t{a3,a4;i1,i2} t{a1,a2;i3,i4}",
        {"i": {"batches": 2, "roles": EXT}},
    ),
    # The cross-iteration outer product (V0's forced-split fixture).
    "cross_iteration": ("B{i3;i4} = A{;i3} A{;i4}", {"i": {"batches": 2, "roles": EXT}}),
    # Two spaces: occupied external, virtual contracted (nested loops of both kinds).
    "two_space": (
        "R{a1;i1} = g{a1,a2;a3,i2} t{a3;i2} t{a2;i1}",
        {"i": {"batches": 2, "roles": EXT}, "a": {"batches": 3, "roles": CON}},
    ),
    # Energy-like scalar with a contracted occupied loop.
    "energy": ("E = 1/4 g{i1,i2;a1,a2} t{a1,a2;i1,i2}", {"i": {"batches": 2, "roles": CON}}),
    # DF Coulomb-like: Κ contracted inside an external occupied loop.
    "df_inside_occ": (
        "R{a1;i1} = B{a1,i1;;K1} B{i2,a2;;K1} t{a2;i2}",
        {"i": {"batches": 2, "roles": EXT}, "Κ": {"batches": 2, "roles": CON}},
    ),
    # Several equations sharing subexpressions.
    "multi_root": (
        "R1{a1;i1} = f{a1;a2} t{a2;i1} + g{a1,i2;i1,a2} t{a2;i2}\n"
        "R2{a1;i1} = f{a1;a2} t{a2;i1}\n"
        "E = f{i1;a1} t{a1;i1}",
        {"i": {"batches": 2, "roles": "both"}, "a": {"batches": 2, "roles": CON}},
    ),
    # Unbatched: a flat schedule.
    "unbatched": ("R{a1;i1} = f{a1;a2} t{a2;i1} + f{i2;i1} t{a1;i2}", {}),
    # Regression (CCSD R2 under {"a": 4}): the batched sum over a3 is invariant to both
    # External a loops; it runs outside them. Nesting it inside both put it in the inner
    # a1 loop, while its reader (carrying a2 only) runs in the outer a2 loop and feeds
    # the inner loop: a StepCycleError.
    "hoist_invariant_sum": (
        "R{a1,a2;i1,i2} = g{i3,i4;i1,a3} t{a3;i2} t{a2;i4} t{a1;i3}",
        {"a": {"batches": 2, "roles": "both"}},
    ),
    # Regression (CCSD R2 under {"a": 4}): (t{a4;i2} g{i3,i4;a3,a4}) is LoopLocal on an a3
    # loop in both terms; folding the two a3 loops would drag the first term's a3 sum
    # (invariant to the External loops) inside the a1 loop the second term's a3 loop
    # needs. The fold is refused (rule 5 of rich.py): two values, no cycle.
    "fold_keeps_enclosers": (
        "R{a1,a2;i1,i2} = g{i3,i4;a3,a4} t{a3;i1} t{a4;i2} t{a2;i4} t{a1;i3}"
        " + g{i3,i4;a3,a4} t{a4;i2} t{a1,a3;i1,i3} t{a2;i4}",
        {"a": {"batches": 2, "roles": "both"}},
    ),
}


def text_case(name: str, spaces: sq.Spaces = SPACES) -> tuple[Forest, BatchPlan]:
    text, plan = TEXT_CASES[name]
    return sq.build_forest(sq.parse(text), spaces), BatchPlan.of(plan)


# -- the shipped coupled-cluster equation sets ---------------------------------------------

CC_SETS = ("ccsd_so", "ccd_so")
"""Equation sets swept as a whole (E, R1, R2 together)."""

CC_PLANS: dict[str, dict[str, Any]] = {
    "a2": {"a": 2},
    "a4": {"a": 4},
    "i2": {"i": 2},
    "a4_i2": {"a": 4, "i": 2},
    "a3_i3": {"a": 3, "i": 3},
    "a_contracted": {"a": {"batches": 3, "roles": CON}},
    "a_external": {"a": {"batches": 3, "roles": EXT}},
    "i_contracted": {"i": {"batches": 2, "roles": CON}},
    "i_external": {"i": {"batches": 2, "roles": EXT}},
}
"""Batch plans of the sweep (both roles unless a role is named)."""


@functools.cache
def cc_forest(name: str, i: int, a: int) -> Forest:
    """The eval forest of a shipped equation set at occupied/virtual extents ``i``/``a``."""
    spaces = sq.Spaces(i=i, a=a)
    return sq.build_forest(sq.parse(load_equations(name), spaces=spaces), spaces)


# -- generated corpora -------------------------------------------------------------------

_CCSD_TERMS = {
    "R2{a1,a2;i1,i2}": [
        "g{a1,a2;i1,i2}",
        "f{a1;a3} t{a3,a2;i1,i2}",
        "f{i3;i1} t{a1,a2;i3,i2}",
        "g{a1,a2;a3,a4} t{a3,a4;i1,i2}",
        "g{i3,i4;i1,i2} t{a1,a2;i3,i4}",
        "g{i3,a1;a3,i1} t{a3,a2;i3,i2}",
        "g{i3,i4;a3,a4} t{a3,a4;i1,i2} t{a1,a2;i3,i4}",
        "g{i3,i4;a3,a4} t{a1,a3;i1,i3} t{a2,a4;i2,i4}",
        "g{i3,i4;a3,a4} t{a3,a1;i3,i4} t{a4,a2;i1,i2}",
        "g{i3,i4;a3,a4} t{a3,a4;i3,i1} t{a1,a2;i4,i2}",
        "g{a1,a2;a3,i2} t{a3;i1}",
        "g{i3,a2;i1,i2} t{a1;i3}",
        "g{i3,a1;a3,i1} t{a3;i2} t{a2;i3}",
        "g{a1,a2;a3,a4} t{a3;i1} t{a4;i2}",
        "g{i3,i4;i1,i2} t{a1;i3} t{a2;i4}",
        "f{i3;a3} t{a3;i1} t{a1,a2;i3,i2}",
        "f{i3;a3} t{a1;i3} t{a3,a2;i1,i2}",
        "g{i3,a1;a3,a4} t{a3;i3} t{a4,a2;i1,i2}",
        "g{i3,i4;i1,a3} t{a3;i3} t{a1,a2;i4,i2}",
        "g{i3,i4;a3,a4} t{a3;i1} t{a4;i2} t{a1,a2;i3,i4}",
        "g{i3,i4;a3,a4} t{a1;i3} t{a2;i4} t{a3,a4;i1,i2}",
        "g{i3,i4;a3,a4} t{a3;i3} t{a4;i1} t{a1,a2;i4,i2}",
        "g{i3,i4;a3,a4} t{a3;i3} t{a1;i4} t{a4,a2;i1,i2}",
        "g{i3,i4;a3,a4} t{a3;i1} t{a4;i2} t{a1;i3} t{a2;i4}",
        "g{i3,a2;a3,i2} t{a1,a3;i1,i3}",
        "g{a1,i3;i1,a3} t{a3,a2;i3,i2}",
        "g{i3,i4;a3,a4} t{a3,a4;i1,i3} t{a1,a2;i4,i2}",
        "g{i3,a1;i1,i2} t{a2;i3}",
        "g{a1,a2;i1,a3} t{a3;i2}",
        "f{a1;a3} t{a3;i1} t{a2;i2}",
    ],
    "R1{a1;i1}": [
        "f{a1;i1}",
        "f{a1;a2} t{a2;i1}",
        "f{i2;i1} t{a1;i2}",
        "g{i2,a1;a2,i1} t{a2;i2}",
        "f{i2;a2} t{a2,a1;i2,i1}",
        "g{i2,a1;a2,a3} t{a2,a3;i2,i1}",
        "g{i2,i3;a2,i1} t{a2,a1;i2,i3}",
        "f{i2;a2} t{a2;i1} t{a1;i2}",
        "g{i2,i3;a2,a3} t{a2;i2} t{a3,a1;i3,i1}",
        "g{i2,i3;a2,a3} t{a2;i1} t{a3,a1;i2,i3}",
        "g{i2,i3;a2,a3} t{a1;i2} t{a2,a3;i3,i1}",
        "g{i2,a1;a2,a3} t{a2;i2} t{a3;i1}",
        "g{i2,i3;a2,i1} t{a2;i2} t{a1;i3}",
        "g{i2,i3;a2,a3} t{a2;i2} t{a3;i1} t{a1;i3}",
    ],
    "E": [
        "f{i1;a1} t{a1;i1}",
        "g{i1,i2;a1,a2} t{a1,a2;i1,i2}",
        "g{i1,i2;a1,a2} t{a1;i1} t{a2;i2}",
        "f{i1;a1} t{a1;i1} t{a2;i2} f{i2;a2}",
    ],
}

CCSD_PLAN = BatchPlan.of({"i": {"batches": 2, "roles": EXT}, "a": {"batches": 2, "roles": CON}})


def ccsd_like_text() -> str:
    """A 48-term CCSD-like system (doubles, singles, energy)."""
    return "\n".join(f"{lhs} = " + " + ".join(terms) for lhs, terms in _CCSD_TERMS.items())


def synthetic_sum_text(n: int) -> str:
    """``R{a1;i1}`` = a sum of ``n`` distinct two- and three-factor terms."""
    terms = []
    for k in range(n):
        if k % 3 == 2:
            terms.append(f"F{k}{{a1;a2}} G{k}{{a2;a3}} t{{a3;i1}}")
        else:
            terms.append(f"F{k}{{a1;a2}} t{{a2;i1}}")
    return "R{a1;i1} = " + " + ".join(terms)


_POOL = {
    "i": ["i1", "i2", "i3", "i4", "i5", "i6"],
    "a": ["a1", "a2", "a3", "a4", "a5", "a6"],
    "Κ": ["K1", "K2"],
}


def _random_equation(rng: random.Random, name: str) -> str:
    spaces = list(_POOL)
    n_ext = rng.randint(0, 3)
    used: list[str] = []
    result = []
    for _ in range(n_ext):
        sp = rng.choice(spaces[:2])
        free = [t for t in _POOL[sp] if t not in used]
        result.append(free[0])
        used.append(free[0])
    terms = []
    for _ in range(rng.randint(1, 3)):
        n_fac = rng.randint(2, 3)
        factors: list[list[str]] = [[] for _ in range(n_fac)]
        for r in result:
            factors[rng.randrange(n_fac)].append(r)
        dummies = [t for t in _POOL["i"] + _POOL["a"] + _POOL["Κ"] if t not in result]
        rng.shuffle(dummies)
        for d in dummies[: rng.randint(1, 3)]:
            a, b = rng.sample(range(n_fac), 2)
            factors[a].append(d)
            factors[b].append(d)
        for k, fac in enumerate(factors):
            if not fac:
                d = next(t for t in dummies if all(t not in f for f in factors))
                other = (k + 1) % n_fac
                fac.append(d)
                factors[other].append(d)
        text = []
        for fac in factors:
            sig = "".join(ix(t).space for t in fac).replace("Κ", "K")
            text.append(f"T{sig}{{{','.join(fac)}}}")
        terms.append(" ".join(text))
    lhs = f"{name}{{{','.join(result)}}}" if result else name
    return f"{lhs} = " + " + ".join(terms)


def random_case(seed: int) -> tuple[Forest, BatchPlan]:
    """A seeded random system of 1–3 equations and a random batch plan."""
    rng = random.Random(seed)
    text = "\n".join(_random_equation(rng, f"R{k}") for k in range(rng.randint(1, 3)))
    forest = sq.build_forest(sq.parse(text), SPACES)
    plan: dict[str, Any] = {}
    for sp in ("i", "a", "Κ"):
        if rng.random() < 0.6:
            plan[sp] = {"batches": rng.randint(1, 3), "roles": rng.choice([EXT, CON, "both"])}
    site = rng.choice(["root", "term"])
    return forest, BatchPlan.of(plan, external_site=site)


# -- invariants --------------------------------------------------------------------------


def _blocks(block: ScopeBlock) -> list[ScopeBlock]:
    out, stack = [], [block]
    while stack:
        b = stack.pop()
        out.append(b)
        stack.extend(b.blocks())
    return out


def check_invariants(sf: ScheduledForest) -> None:
    """Assert every structural invariant of the scheduler on one scheduled forest."""
    rich, leg, sched = sf.rich, sf.legality, sf.ordered
    n = len(rich.cells)
    # rich
    assert all(c.value_id == v for v, c in enumerate(rich.cells))
    for c in rich.cells:
        assert c.first_use <= c.last_use < rich.num_points
        assert c.first_use == min(o.point for o in c.occurrences)
    # legality
    assert len(leg.cells) == n
    for c, lc in zip(rich.cells, leg.cells, strict=True):
        assert lc.key == c.key
        roles = {a.role for a in lc.per_axis}
        assert LoopRole.LOOP_INVARIANT not in roles
        local = {a.axis for a in lc.per_axis if a.role is LoopRole.LOOP_LOCAL}
        other = {a.axis for a in lc.per_axis if a.role is not LoopRole.LOOP_LOCAL}
        assert set(lc.home_floor) == local and local | other == set(lc.build_site)
        assert set(lc.forced_split_axes) <= set(lc.build_site)
    # ordered: well formed, each non-leaf value produced exactly once, no leaf scheduled
    assert not well_formed_violations(sched), well_formed_violations(sched)
    assert sched.num_values == n
    builds: dict[int, int] = {}
    outs: dict[int, int] = {}
    for b in _blocks(sched.root):
        for s in b.steps:
            if isinstance(s, BuildStep):
                builds[s.value_id] = builds.get(s.value_id, 0) + 1
        for v, _ in b.outputs:
            outs[v] = outs.get(v, 0) + 1
    for v, c in enumerate(rich.cells):
        if c.is_leaf:
            assert v not in builds and v not in outs, f"input v{v} is scheduled"
        else:
            assert builds.get(v, 0) == 1 or (builds.get(v, 0) == 0 and outs.get(v, 0) >= 1), (
                f"v{v} produced {builds.get(v, 0)} times by builds, {outs.get(v, 0)} outputs"
            )
    _check_forward(sched, rich)
    # peak: sweep == replay
    ps = dag_path(rich, sf.annotated)
    assert peak_profile_sweep(ps).peak_bytes == peak_profile_replay(ps)
    ps_all = dag_path(rich, sf.annotated, include_leaves=True)
    assert peak_profile_sweep(ps_all).peak_bytes == peak_profile_replay(ps_all)


def _check_forward(sched: OrderedSchedule, rich: Any) -> None:
    """In execution order, every operand of a production is available before it."""
    leaves = {v for v, c in enumerate(rich.cells) if c.is_leaf}
    built = {
        v
        for b in _blocks(sched.root)
        for s in b.steps
        if isinstance(s, BuildStep)
        for v in [s.value_id]
    }
    available: set[int] = set(leaves)

    def need(v: int, where: str) -> None:
        missing = [o for o in sched.operand_vids[v] if o not in available]
        assert not missing, f"v{v} ({where}) reads {missing} before they are produced"

    def run(block: ScopeBlock) -> None:
        for s in block.steps:
            if isinstance(s, BuildStep):
                need(s.value_id, "build")
                available.add(s.value_id)
            else:
                run(s)
        for v, _ in block.outputs:
            if v not in built and v not in available:
                need(v, "raw escape")
            available.add(v)

    run(sched.root)


# -- a NumPy interpreter of ordered schedules ----------------------------------------------


def random_blocks(forest: Forest, seed: int = 0) -> dict[str, Any]:
    """Random input blocks (and scalar variables) for every input of ``forest``."""
    rng = np.random.default_rng(seed)
    return {s.block_key: rng.standard_normal(s.shape) for s in input_specs(forest)}


def _ranges(extent: int, n: int, block: int) -> list[tuple[int, int]]:
    return [(lo, min(extent, lo + block)) for lo in range(0, extent, block)][: max(n, 1)]


def run_schedule(sf: ScheduledForest, blocks: Mapping[str, Any]) -> dict[str, Any]:
    """Execute the ordered schedule with NumPy (the semantics the lowering implements).

    Each stored value keeps the set of loop instances its modes are sliced by; a reader
    slices a value (or input) on use along every mode its own occurrence is loop-sliced on
    and the value is not yet. ``BuildStep`` computes a value from its first occurrence's
    operands; an output entry combines per-batch pieces (Sum: add; Scatter: write the
    batch's slice of the mode bound to the block's loop). Per-point and per-value facts
    are computed once, so deep nests of small batches run quickly.
    """
    rich, ann, sched = sf.rich, sf.annotated, sf.ordered
    owner = rich.point_owner()
    rec_at = {o.point: o for c in rich.cells for o in c.occurrences}
    spaces = ann.forest.spaces
    built = {s.value_id for b in _blocks(sched.root) for s in b.steps if isinstance(s, BuildStep)}
    store: dict[int, tuple[Any, tuple[tuple[str, int] | None, ...]]] = {}
    ctx: dict[tuple[str, int], tuple[int, int]] = {}
    reads: dict[int, tuple[int, tuple[tuple[int, tuple[str, int]], ...], dict, Any]] = {}
    plans: dict[int, tuple[Any, ...]] = {}

    def read(point: int) -> Any:
        got = reads.get(point)
        if got is None:
            v = owner[point]
            node = rich.cells[v].node
            leaf_arr = None
            if rich.cells[v].is_leaf:
                assert node is not None
                if node.kind is NodeKind.SCALAR:
                    leaf_arr = np.asarray(scalar_value(np, node.scalar, blocks))
                else:
                    leaf_arr = blocks[block_key(node.tensor)]
            wanted = rec_at[point].read_slices()
            got = reads[point] = (v, wanted, dict(wanted), leaf_arr)
        v, wanted, want, arr = got
        if arr is not None:  # an input: never stored sliced
            if arr.ndim == 0:
                return arr
            sliced: tuple[tuple[str, int] | None, ...] = (None,) * arr.ndim
        else:
            arr, sliced = store[v]
            for p, loop in enumerate(sliced):
                assert loop is None or want.get(p) == loop, f"v{v} is stored sliced by {loop}"
        for p, loop in wanted:
            if sliced[p] is None:
                lo, hi = ctx[loop]
                arr = arr[(slice(None),) * p + (slice(lo, hi),)]
        return arr

    def plan_of(v: int) -> tuple[Any, ...]:
        got = plans.get(v)
        if got is not None:
            return got
        first = rich.cells[v].occurrences[0]
        node = first.node
        assert node is not None
        left, right = rec_at[first.operand_points[0]], rec_at[first.operand_points[1]]
        spec = perm_l = perm_r = None
        if node.kind is NodeKind.PRODUCT:
            letters: dict[Index, str] = {}
            for i in left.carried + right.carried + node.indices:
                letters.setdefault(i, chr(ord("a") + len(letters)))
            spec = (
                "".join(letters[i] for i in left.carried)
                + ","
                + "".join(letters[i] for i in right.carried)
                + "->"
                + "".join(letters[i] for i in node.indices)
            )
        else:
            perm_l = [left.carried.index(i) for i in node.indices]
            perm_r = [right.carried.index(i) for i in node.indices]
        sliced = tuple(
            (node.indices[p].space, s) if s >= 0 else None for p, s in enumerate(first.loop_slot)
        )
        got = plans[v] = (node, left.point, right.point, spec, perm_l, perm_r, sliced)
        return got

    def compute(v: int) -> tuple[Any, tuple[tuple[str, int] | None, ...]]:
        node, lp, rp, spec, perm_l, perm_r, sliced = plan_of(v)
        a, b = read(lp), read(rp)
        if spec is not None:
            out = np.einsum(spec, a, b)
        else:
            a = np.transpose(a, perm_l) if a.ndim else a
            b = np.transpose(b, perm_r) if b.ndim else b
            out = float(node.left_coef) * a + float(node.right_coef) * b
        return out, sliced

    # id(block) -> (values a nested block outputs, loop extent, batch ranges)
    per_block: dict[int, tuple[set[int], int, list[tuple[int, int]]]] = {}

    def run(block: ScopeBlock) -> None:
        if block.is_root:
            for s in block.steps:
                step(s)
            return
        loop = block.loop
        facts = per_block.get(id(block))
        if facts is None:  # once per block: a deep nest runs a block ~10⁵ times
            axis = block.axis
            assert axis is not None
            extent = spaces.extent(loop[0])
            facts = per_block[id(block)] = (
                {w for b in _blocks(block)[1:] for w, _ in b.outputs},
                extent,
                _ranges(extent, ann.num_batches(axis), ann.block_of(axis)),
            )
        inner, extent, ranges = facts
        acc: dict[int, Any] = {}
        for lo, hi in ranges:
            ctx[loop] = (lo, hi)
            for s in block.steps:
                step(s)
            for v, kind in block.outputs:
                if v not in built and v not in inner:
                    store[v] = compute(v)  # raw production at the deepest escape site
                piece, sliced = store[v]
                if kind is OutputKind.ACCUMULATE_SUM:
                    acc[v] = piece if v not in acc else acc[v] + piece
                    new_sliced = sliced
                else:
                    p = sliced.index(loop)
                    if v not in acc:
                        shape = list(piece.shape)
                        shape[p] = extent
                        acc[v] = np.zeros(shape)
                    idx = [slice(None)] * piece.ndim
                    idx[p] = slice(lo, hi)
                    acc[v][tuple(idx)] = piece
                    new_sliced = tuple(None if x == loop else x for x in sliced)
                acc_sliced[v] = new_sliced
        del ctx[loop]
        for v in acc:
            store[v] = (acc[v], acc_sliced[v])

    acc_sliced: dict[int, Any] = {}

    def step(s: Any) -> None:
        if isinstance(s, BuildStep):
            store[s.value_id] = compute(s.value_id)
        else:
            run(s)

    run(sched.root)
    results = {}
    for root, v in zip(ann.forest.roots, rich.root_values, strict=True):
        node = rich.cells[v].node
        if rich.cells[v].is_leaf:  # an input as the whole right-hand side
            assert node is not None
            if node.kind is NodeKind.SCALAR:
                arr = np.asarray(scalar_value(np, node.scalar, blocks))
            else:
                arr = blocks[block_key(node.tensor)]
            sliced = (None,) * arr.ndim
        else:
            arr, sliced = store[v]
        assert all(x is None for x in sliced), f"root v{v} left sliced: {sliced}"
        arr = (
            np.transpose(arr, [root.node.indices.index(i) for i in root.indices])
            if arr.ndim
            else arr
        )
        results[root.name] = arr * float(root.coef)
    return results


def assert_matches_reference(sf: ScheduledForest, seed: int = 0) -> None:
    """The interpreted schedule equals the unbatched reference evaluation."""
    blocks = random_blocks(sf.annotated.forest, seed)
    want = evaluate_forest(sf.annotated.forest, blocks)
    got = run_schedule(sf, blocks)
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=1e-12, atol=1e-12, err_msg=name)


def schedule_text(text: str, plan: Mapping[str, Any], **kw: Any) -> ScheduledForest:
    """Parse, build and schedule in one call."""
    forest = sq.build_forest(sq.parse(text), SPACES)
    return schedule_forest(forest, BatchPlan.of(plan, **kw))


def values_named(sf: ScheduledForest, needle: str) -> list[int]:
    """Value ids whose expression text contains ``needle``."""
    from sq_jax.forest.dump import expr_text

    return [
        c.value_id for c in sf.rich.cells if c.node is not None and needle in expr_text(c.node, 400)
    ]


__all__ = [
    "CCSD_PLAN",
    "CC_PLANS",
    "CC_SETS",
    "SPACES",
    "TEXT_CASES",
    "add",
    "assert_matches_reference",
    "cc_forest",
    "ccsd_like_text",
    "check_invariants",
    "forest_of",
    "ix",
    "leaf",
    "mul",
    "random_blocks",
    "random_case",
    "run_schedule",
    "schedule_text",
    "synthetic_sum_text",
    "text_case",
    "values_named",
]
_unused: Sequence[Any] = ()
