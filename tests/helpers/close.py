"""Checks shared by the derivative tests: array closeness, a scalar of a program."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def assert_rel_close(got, want, rtol: float, name: str = "") -> None:
    """``max|got - want| <= rtol * max(1, max|want|)``, shapes equal (empty arrays pass)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    assert err <= rtol * scale, f"{name}: max error {err:.3e} > {rtol:g} * {scale:.3e}"


def weighted_sum(prog, weights):
    """``x -> sum_k <weights[k], prog(x)[k]>``: a scalar to differentiate a program by."""

    def f(x):
        out = prog(x)
        return sum(jnp.sum(out[k] * weights[k]) for k in sorted(out))

    return f
