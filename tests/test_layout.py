"""Consumer-aware layouts (lower/layout.py): values stored in the order their readers take."""

from __future__ import annotations

import numpy as np

import sq_jax as sq
from sq_jax.lower.ir import Combine, Contract


def _copies(prog):
    return sum(ins.gemm.copies for ins in prog.lowered.body if isinstance(ins, Contract))


def test_a_sum_is_stored_as_its_reader_takes_it():
    spaces = sq.Spaces(i=2, a=3)
    prog = sq.compile("R{i1;a1} = (g{i1,a2;a1,a3} + g{a2,i1;a3,a1}) f{a3;a2}", spaces)
    [total] = [ins for ins in prog.lowered.body if isinstance(ins, Combine)]
    assert _copies(prog) == 0  # both terms are transposed inside the sum instead
    assert total.perms[0] != (0, 1, 2, 3) or total.perms[1] != (0, 1, 2, 3)
    rng = np.random.default_rng(1)
    g = {
        "g{i,a;a,a}": rng.standard_normal((2, 3, 3, 3)),
        "g{a,i;a,a}": rng.standard_normal((3, 2, 3, 3)),
    }
    f = rng.standard_normal((3, 3))
    got = prog({**g, "f{a;a}": f})["R"]
    want = np.einsum("iacb,ba->ic", g["g{i,a;a,a}"], f) + np.einsum(
        "aibc,ba->ic", g["g{a,i;a,a}"], f
    )
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


def test_a_product_comes_out_in_its_equations_order():
    spaces = sq.Spaces(i=2, a=3)
    prog = sq.compile("R{a1;i1} = (f{a2;a1} + h{a1;a2}) t{a2;i1}", spaces)
    [result] = prog.lowered.results
    assert result.perm == (0, 1)  # no transposed output buffer
    rng = np.random.default_rng(2)
    f, h, t = rng.standard_normal((3, 3)), rng.standard_normal((3, 3)), rng.standard_normal((3, 2))
    got = prog({"f{a;a}": f, "h{a;a}": h, "t{a;i}": t})["R"]
    np.testing.assert_allclose(np.asarray(got), (f.T + h) @ t, rtol=1e-12, atol=1e-12)
