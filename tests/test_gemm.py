"""Contractions as matrix products (lower/gemm.py) and their interpretation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sq_jax as sq
from sq_jax.cc.equations import load_equations
from sq_jax.expr.nodes import Index
from sq_jax.forest.symmetry import symmetric_random_inputs
from sq_jax.lower.execute import contract
from sq_jax.lower.gemm import plan_gemm
from sq_jax.lower.ir import Contract

LABELS = [Index("a", n) for n in range(1, 8)]


def _run(left, right, out, sizes, nbytes=(1, 1), free=(False, False)):
    """Interpret the plan on random arrays; compare with einsum over the same labels."""
    plan = plan_gemm(left, right, out, nbytes, free_layout=free)
    rng = np.random.default_rng(0)
    x = rng.standard_normal([sizes[ix] for ix in left])
    y = rng.standard_normal([sizes[ix] for ix in right])
    letter = {ix: chr(97 + k) for k, ix in enumerate(LABELS)}
    spec = lambda g: "".join(letter[ix] for ix in g)  # noqa: E731
    stored = plan.output if plan is not None else tuple(out)
    want = np.einsum(f"{spec(left)},{spec(right)}->{spec(stored)}", x, y)
    ins = Contract(0, f"{spec(left)},{spec(right)}->{spec(stored)}", (None, None), (), (), plan)
    got = np.asarray(jax.jit(lambda a, b: contract(ins, [a, b]))(jnp.asarray(x), jnp.asarray(y)))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    return plan


@st.composite
def contractions(draw):
    """Two operands over up to 6 labels: batch, contracted and free modes, any order."""
    n = draw(st.integers(1, 6))
    labels = LABELS[:n]
    roles = draw(st.lists(st.sampled_from("BKLR"), min_size=n, max_size=n))
    left = [ix for ix, r in zip(labels, roles, strict=True) if r in "BKL"]
    right = [ix for ix, r in zip(labels, roles, strict=True) if r in "BKR"]
    out = [ix for ix, r in zip(labels, roles, strict=True) if r in "BLR"]
    left = draw(st.permutations(left))
    right = draw(st.permutations(right))
    out = draw(st.permutations(out))
    sizes = {ix: draw(st.integers(1, 3)) for ix in labels}
    free = (draw(st.booleans()), draw(st.booleans()))
    return tuple(left), tuple(right), tuple(out), sizes, free


@settings(max_examples=60, deadline=None)
@given(contractions())
def test_every_plan_computes_the_einsum(case):
    left, right, out, sizes, free = case
    plan = _run(left, right, out, sizes, free=free)
    assert plan is not None
    assert set(plan.output) == set(out)
    if all(free):  # nothing to copy: the fastest forms, a left matrix never transposed
        assert not plan.lhs_k_first


def test_free_operands_take_the_fastest_forms():
    """Both operands packed for the split ladder come out of a gather: they are laid out
    as a plain ``[F, K] x [K, F]`` product, not read in place as ``[K, F]^T x [K, F]``
    (which ran the benzene ladder at 47 instead of 121 GFLOP/s)."""
    k, q, p = LABELS[:3]
    sizes = dict.fromkeys(LABELS, 2)
    plain = _run((k, q), (k, p), (q, p), sizes)
    assert plain.copies == 0 and plain.lhs_k_first  # read in place
    free = _run((k, q), (k, p), (q, p), sizes, free=(True, True))
    assert str(free) == "gemm ab,bc->ac [lhs BFK, rhs BKF]"
    assert free.perms == ((1, 0), None) and free.output == (q, p)
    # a free operand already in its form is left alone
    assert _run((q, k), (k, p), (q, p), sizes, free=(True, True)).perms == (None, None)


def test_grouped_operands_are_never_copied():
    a, b, c, d, e, f = LABELS[:6]
    sizes = dict.fromkeys(LABELS, 2)
    # t1 . <ab||cd>: the contracted mode is the last of the big operand
    assert _run((c, d, e, a), (a, b), (b, c, d, e), sizes).copies == 0
    # ... or the first: a transposed matrix costs nothing
    assert _run((a, c, d, e), (a, b), (b, c, d, e), sizes).copies == 0
    # ladder: contracted pair leading on both
    assert _run((a, b, c, d), (a, b, e, f), (c, d, e, f), sizes).copies == 0
    # batch (Hadamard) modes first on both
    assert _run((a, b, c), (a, c, d), (a, b, d), sizes).copies == 0


def test_the_smaller_operand_is_the_one_transposed():
    a, b, c, d = LABELS[:4]
    sizes = dict.fromkeys(LABELS, 2)
    # the contracted pair comes in opposite orders: one operand must move
    plan = _run((c, d, a), (d, c, b), (a, b), sizes, nbytes=(1000, 10))
    assert plan.perms[0] is None and plan.perms[1] is not None
    plan = _run((c, d, a), (d, c, b), (a, b), sizes, nbytes=(10, 1000))
    assert plan.perms[0] is not None and plan.perms[1] is None


def test_sliced_operands_are_transposed_for_free():
    a, b, c, d = LABELS[:4]
    plan = plan_gemm((c, d, a), (d, c, b), (a, b), (1000, 10), sliced=(True, False))
    assert plan.perms[0] is not None and plan.perms[1] is None


@pytest.mark.parametrize(
    "left, right, out",
    [
        ((0, 0), (0, 1), (1,)),  # a mode twice on one operand
        ((0, 1), (2,), (2,)),  # modes summed on one operand only
    ],
)
def test_not_a_product_falls_back_to_einsum(left, right, out):
    lab = lambda g: tuple(LABELS[k] for k in g)  # noqa: E731
    assert plan_gemm(lab(left), lab(right), lab(out), (1, 1)) is None


def test_str_names_the_forms():
    a, b, c = LABELS[:3]
    assert str(plan_gemm((a, b), (b, c), (a, c), (1, 1))) == "gemm ab,bc->ac [lhs BFK, rhs BKF]"


def test_layouts_a_symmetry_makes_equal_share_one_copy():
    """``t_ij^ab = t_ji^ba``: closed-shell CCSD reads ``t`` as ``(a, i, b, j)`` and as
    ``(b, j, a, i)``; both products now transpose it by one permutation (XLA makes one
    copy), and the residuals stay the plain program's (derivatives:
    ``test_pairs.py::test_derivatives_are_the_plain_programs_in_every_direction``)."""
    spaces = sq.Spaces(i=3, a=5)
    text = load_equations("ccsd_cs")
    prog = sq.compile(text, spaces, pair_symmetry=True)
    plain_perms, used_perms = set(), set()
    for ins in prog.lowered.body:
        if not isinstance(ins, Contract) or ins.gemm is None:
            continue
        for k, r in enumerate(ins.operands):
            if r.input_key == "t{a,a;i,i}" and ins.gemm.perms[k] is not None:
                plain_perms.add(ins.gemm.perms[k])
                used_perms.add(ins.gemm.equal[k] or ins.gemm.perms[k])
    assert len(used_perms) < len(plain_perms)
    blocks = symmetric_random_inputs(prog.schedule.annotated.forest, seed=2)
    want = sq.compile(text, spaces)(blocks)
    got = prog(blocks)
    for key in ("E", "R1", "R2"):
        tol = 1e-12 * (1 + np.abs(want[key]).max())
        np.testing.assert_allclose(got[key], want[key], rtol=0, atol=tol)


def test_an_antisymmetric_operand_is_read_under_another_labeling_instead_of_copied():
    """``t_ij^ab = -t_ij^ba``: where ``t`` stored as ``(a, b, i, j)`` does not group into a
    matrix and ``(b, a, i, j)`` does, spin-orbital CCSD reads it so and negates the
    product: fewer transposed copies, the plain program's residuals (derivatives in every
    direction: ``test_pairs.py::test_derivatives_are_the_plain_programs_in_every_direction``)."""
    spaces = sq.Spaces(i=3, a=5)
    text = load_equations("ccsd_so")
    plain = sq.compile(text, spaces)
    prog = sq.compile(text, spaces, pair_symmetry=True)

    def products(program):
        return [i for i in program.lowered.body if isinstance(i, Contract) and i.gemm is not None]

    negated = [ins for ins in products(prog) if ins.gemm.sign < 0]
    assert negated and all(str(ins).split(" = ")[1].startswith("-gemm") for ins in negated)
    assert sum(i.gemm.copies for i in products(prog)) < sum(i.gemm.copies for i in products(plain))
    blocks = symmetric_random_inputs(prog.schedule.annotated.forest, seed=5)
    want, got = plain(blocks), prog(blocks)
    for key in ("E", "R1", "R2"):
        tol = 1e-12 * (1 + np.abs(want[key]).max())
        np.testing.assert_allclose(got[key], want[key], rtol=0, atol=tol)
