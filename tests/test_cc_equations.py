"""The shipped CC equation text, through sq_jax's own parser and reference evaluator.

Checks: SeQuant's term counts; the parsed equations evaluated by
``sq_jax.evaluate_reference`` equal the hand-written numpy oracle (``cc_oracle``) for
random amplitudes and a non-canonical Fock matrix; a DIIS solve whose residuals come from
``sq_jax.evaluate_reference_jax`` reproduces PySCF's GCCSD energy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sq_jax as sq
from sq_jax import InputError
from sq_jax.cc.equations import available, load_equations
from sq_jax.cc.integrals import default_reference, default_system
from sq_jax.cc.solvers import solve_diis
from sq_jax.lower.ir import Contract
from tests.helpers import cc_oracle as oracle

T1, T2 = "t{a;i}", "t{a,a;i,i}"


@pytest.fixture(scope="module")
def ints():
    return default_system()


@pytest.fixture(scope="module")
def spaces(ints):
    return sq.Spaces(i=ints.nocc, a=ints.nvirt)


@pytest.fixture(scope="module")
def random_inputs(ints):
    """Random T1 and antisymmetric T2, and a Fock matrix with off-diagonal elements."""
    rng = np.random.default_rng(2024)
    nocc, nvirt, n = ints.nocc, ints.nvirt, ints.nmo
    fock = ints.fock + 0.05 * (lambda x: x + x.T)(rng.standard_normal((n, n)))
    t1 = 0.1 * rng.standard_normal((nvirt, nocc))
    t2 = 0.1 * rng.standard_normal((nvirt, nvirt, nocc, nocc))
    t2 = t2 - t2.transpose(1, 0, 2, 3)
    t2 = t2 - t2.transpose(0, 1, 3, 2)
    return {"f": fock, "g": ints.eri, T1: t1, T2: t2}


def test_available_sets():
    assert {"ccsd_so", "ccd_so"} <= set(available())
    with pytest.raises(InputError, match="Unknown equation set"):
        load_equations("ccsdtq_nope")


@pytest.mark.parametrize(
    ("name", "counts"),
    [("ccsd_so", {"E": 3, "R1": 14, "R2": 31}), ("ccd_so", {"E": 1, "R2": 10})],
)
def test_term_counts(name, counts):
    eqs = sq.parse(load_equations(name), expand_symmetrizers=False)
    got = {getattr(eq.lhs, "label", str(eq.lhs)): _n_terms(eq.rhs) for eq in eqs}
    assert got == counts
    # With Â expanded, an R2 term becomes 4 terms and an R1 term stays 1.
    expanded = sq.parse(load_equations(name))
    assert _n_terms(expanded[-1].rhs) == 4 * counts["R2"]


def _n_terms(expr) -> int:
    return len(expr.terms) if isinstance(expr, sq.Sum) else 1


def test_raw_file_with_comments_parses_the_same():
    from importlib import resources

    raw = (resources.files("sq_jax.cc") / "equations" / "ccsd_so.txt").read_text("utf-8")
    assert raw.startswith("#")
    assert [str(e) for e in sq.parse(raw)] == [str(e) for e in sq.parse(load_equations("ccsd_so"))]


def test_ccsd_text_equals_oracle(ints, spaces, random_inputs):
    out = sq.evaluate_reference(sq.parse(load_equations("ccsd_so")), spaces, random_inputs)
    f, g, t1, t2 = (random_inputs[k] for k in ("f", "g", T1, T2))
    r1, r2 = oracle.ccsd_residuals(f, g, t1, t2, ints.nocc)
    e = oracle.ccsd_energy(f, g, t1, t2, ints.nocc)
    assert abs(float(out["E"]) - e) < 1e-12
    np.testing.assert_allclose(out["R1"], r1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["R2"], r2, rtol=0, atol=1e-12)
    assert np.abs(r2).max() > 1.0  # the comparison is not vacuous


def test_ccd_text_equals_oracle(ints, spaces, random_inputs):
    inputs = {k: v for k, v in random_inputs.items() if k != T1}
    out = sq.evaluate_reference(sq.parse(load_equations("ccd_so")), spaces, inputs)
    f, g, t2 = inputs["f"], inputs["g"], inputs[T2]
    t1 = np.zeros_like(random_inputs[T1])
    np.testing.assert_allclose(out["R2"], oracle.ccd_residual(f, g, t2, ints.nocc), atol=1e-12)
    assert abs(float(out["E"]) - oracle.ccsd_energy(f, g, t1, t2, ints.nocc)) < 1e-12


def test_diis_with_reference_evaluator_matches_pyscf(ints, spaces):
    ref = default_reference()
    forest = sq.build_forest(sq.parse(load_equations("ccsd_so")), spaces)
    f, g = jnp.asarray(ints.fock), jnp.asarray(ints.eri)

    def evaluate(t):
        return sq.evaluate_reference_jax(forest, None, {"f": f, "g": g, T1: t[T1], T2: t[T2]})

    def residual(t):
        out = evaluate(t)
        return {T1: out["R1"], T2: out["R2"]}

    d1, d2 = ints.denominators()
    t1, t2 = ints.mp2_amplitudes()
    res = solve_diis(
        residual,
        lambda t: evaluate(t)["E"],
        {T1: t1, T2: t2},
        {T1: d1, T2: d2},
        e_tol=ref["cc_conv_tol"],
        t_tol=ref["cc_conv_tol_normt"],
    )
    assert res.converged, res.message
    assert abs(float(res.energy) - ref["e_corr_gccsd"]) < 1e-9
    assert abs(float(res.energy) - ref["e_corr_gccsd_tight"]) < 1e-9
    assert res.iterations <= 1.1 * ref["pyscf_gccsd_cycles"]


def test_text_residual_is_differentiable(ints, spaces, random_inputs):
    """The Jacobian-vector product used by Newton–Krylov agrees with the oracle's."""
    forest = sq.build_forest(sq.parse(load_equations("ccsd_so")), spaces)
    f, g = jnp.asarray(random_inputs["f"]), jnp.asarray(ints.eri)
    t1, t2 = jnp.asarray(random_inputs[T1]), jnp.asarray(random_inputs[T2])

    def text_r2(t1):
        return sq.evaluate_reference_jax(forest, None, {"f": f, "g": g, T1: t1, T2: t2})["R2"]

    def oracle_r2(t1):
        return oracle.ccsd_residuals(f, g, t1, t2, ints.nocc, xp=jnp)[1]

    direction = jnp.ones_like(t1)
    got = jax.jit(lambda x: jax.jvp(text_r2, (x,), (direction,))[1])(t1)
    want = jax.jit(lambda x: jax.jvp(oracle_r2, (x,), (direction,))[1])(t1)
    np.testing.assert_allclose(got, want, atol=1e-11)


@pytest.mark.parametrize("name", ["ccsd_cs", "ccd_cs"])
def test_closed_shell_ladder_multiplies_the_vvvv_block_as_stored(name):
    # the ladder reads g{a1,a2;a4,a3}: its contracted pair is the block's last two modes,
    # so no transposed copy of the v^4 block (the largest array) is ever made
    prog = sq.compile(load_equations(name), sq.Spaces(i=3, a=9))
    reads = [
        (read, perm)
        for ins in prog.lowered.body
        if isinstance(ins, Contract) and ins.gemm is not None
        for read, perm in zip(ins.operands, ins.gemm.perms, strict=True)
        if read.input_key == "g{a,a;a,a}"
    ]
    assert reads and all(perm is None for _, perm in reads)
