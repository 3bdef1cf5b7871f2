"""(T) over orbits of occupied block triples: exact against the plain program, at its FLOPs.

The plain (T) program is checked against PySCF in ``test_cc_triples.py``; here the orbit
loops (:mod:`sq_jax.cc.triples_orbits`) must give the same E(T) on random inputs for
every block size (padded last blocks included), cost the unbatched FLOPs where no
padding is needed (where generic occupied batch loops cost several times more), and
refuse bad arguments.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import sq_jax as sq
from sq_jax.cc.equations import load_equations
from sq_jax.cc.triples_orbits import PAIR_SYMMETRIC, orbit_equations, orbit_loops
from sq_jax.expr import Product, parse
from sq_jax.forest.inputs import input_specs

NOCC, NVIRT = 4, 5


def _base(name, nocc=NOCC, nvirt=NVIRT, batch=None):
    spaces = sq.Spaces(i=nocc, a=nvirt)
    return sq.compile(load_equations(name), spaces, outputs=("E",), batch=batch)


def _random_inputs(program, name, seed=7):
    """Random amplitudes and integrals; antisymmetric where the spin-orbital set assumes it.

    ``ccsd_t_so``'s ``V`` is antisymmetric in its occupied (virtual) slots only when
    ⟨pq‖rs⟩ and ``t2`` are, as they are for any spin-orbital system.
    """
    rng = np.random.default_rng(seed)
    out = {}
    for spec in input_specs(program.schedule.annotated.forest):
        if spec.block_key == "ε{i}":
            out[spec.block_key] = -1.0 - rng.random(spec.shape)
        elif spec.block_key == "ε{a}":
            out[spec.block_key] = 1.0 + rng.random(spec.shape)
        elif not (name == "ccsd_t_so" and spec.label == "g"):  # its g comes whole, below
            out[spec.block_key] = rng.standard_normal(spec.shape) * 0.1
    if name == "ccsd_t_so":
        n = NOCC + NVIRT
        g = rng.standard_normal((n, n, n, n)) * 0.1
        g = g - g.transpose(1, 0, 2, 3)
        out["g"] = g - g.transpose(0, 1, 3, 2)
        t2 = rng.standard_normal((NVIRT, NVIRT, NOCC, NOCC)) * 0.1
        t2 = t2 - t2.transpose(1, 0, 2, 3)
        out["t{a,a;i,i}"] = t2 - t2.transpose(0, 1, 3, 2)
    return out


@pytest.mark.parametrize("name", ["ccsd_t_cs", "ccsd_t_so"])
def test_orbit_loops_equal_the_plain_program_for_every_block(name):
    base = _base(name)
    inputs = _random_inputs(base, name)
    expected = float(base(inputs)["E"])
    assert abs(expected) > 1e-6
    # occupied: 4 blocks (every orbit class), 2 (the last padded); virtual: 3 (padded);
    # shared by 1, 2 or 3 concurrent workers (uneven shares, some empty)
    for space, block, workers in (("i", 1, 3), ("i", 3, 1), ("a", 2, 2)):
        orbits = orbit_loops(base, name, block=block, space=space, workers=workers)
        assert orbits.workers == workers
        assert abs(float(orbits.evaluate(inputs)) - expected) < 1e-12 * abs(expected)
    kinds = [c.kind for c in orbit_loops(base, name, block=1).classes]
    assert kinds == ["distinct", "pair", "diagonal"]


@pytest.mark.parametrize(("name", "scalar"), [("ccsd_t_cs", 2), ("ccsd_t_so", Fraction(1, 6))])
def test_the_six_permutations_of_an_orbit_read_one_block_once(name, scalar):
    # E = 1/3 Y Z (closed-shell), 1/36 W Z (spin-orbital): all pair-symmetric, so the six
    # σ copies are equal up to the names of the summed occupied indices, and merge.
    equations = parse(load_equations(name))
    *_, energy = orbit_equations(
        equations, ("j", "k", "l"), symmetric=PAIR_SYMMETRIC[name], space="a"
    )
    assert isinstance(energy.rhs, Product) and energy.rhs.scalar == scalar
    assert [str(f).split(":")[0] for f in energy.rhs.factors] == [
        f"{label}{{j_1,k_2,l_3;i_1,i_2,i_3}}"
        for label in ("Y" if name == "ccsd_t_cs" else "W", "Z")
    ]


def test_orbit_loops_cost_the_unbatched_flops_where_generic_loops_do_not():
    base = _base("ccsd_t_cs", nocc=6, nvirt=7)
    orbits = orbit_loops(base, "ccsd_t_cs", block=2, space="i")  # 3 blocks, no padding
    assert orbits.orbit_count == 1 + 6 + 3
    assert orbits.flops <= 1.05 * base.flops
    generic = _base(
        "ccsd_t_cs", nocc=6, nvirt=7, batch={"i": {"batches": 3, "roles": "contracted"}}
    )
    assert generic.flops > 3 * base.flops


def test_orbit_loops_fit_the_budget_and_refuse_bad_arguments():
    base = _base("ccsd_t_cs")
    budget = base.memory_bytes // 4
    orbits = orbit_loops(base, "ccsd_t_cs", memory_budget=budget)
    assert orbits.space == "a" and orbits.block < NVIRT and orbits.memory_bytes <= budget
    with pytest.raises(sq.MemoryBudgetError, match="no block size of space 'i' fits"):
        orbit_loops(base, "ccsd_t_cs", memory_budget=64)
    with pytest.raises(sq.PlanError, match="exactly one of block"):
        orbit_loops(base, "ccsd_t_cs", block=2, memory_budget=budget)
    with pytest.raises(sq.PlanError, match="as an int from 1 to its extent, 4"):
        orbit_loops(base, "ccsd_t_cs", block=5, space="i")
    with pytest.raises(sq.PlanError, match="workers=0"):
        orbit_loops(base, "ccsd_t_cs", block=1, workers=0)
    # a budget that holds one worker's temporaries and not two runs one worker
    one = orbit_loops(base, "ccsd_t_cs", block=1, space="a", workers=1).memory_bytes
    tight = orbit_loops(base, "ccsd_t_cs", memory_budget=one + one // 2, space="a")
    assert tight.workers == 1 and tight.memory_bytes <= one + one // 2
