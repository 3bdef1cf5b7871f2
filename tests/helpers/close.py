"""One closeness check for arrays: the largest error against the largest entry."""

from __future__ import annotations

import numpy as np


def assert_rel_close(got, want, rtol: float, name: str = "") -> None:
    """``max|got - want| <= rtol * max(1, max|want|)``, shapes equal (empty arrays pass)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    assert err <= rtol * scale, f"{name}: max error {err:.3e} > {rtol:g} * {scale:.3e}"
