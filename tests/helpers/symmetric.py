"""Random inputs with exactly the symmetries their leaves declare (for packed programs)."""

from __future__ import annotations

import numpy as np

import sq_jax as sq
from sq_jax.forest.symmetry import symmetric_random_inputs

LETTERS = "abcdefgh"


def apply_symmetry(x: np.ndarray, perm: tuple[int, ...]) -> np.ndarray:
    """``y[x_0, …] = x[x_{perm[0]}, …]``: the array seen through a symmetry."""
    letters = LETTERS[: x.ndim]
    return np.einsum("".join(letters[p] for p in perm) + "->" + letters, x)


def symmetric_inputs(forest: sq.Forest, seed: int = 0) -> dict[str, np.ndarray]:
    """Random blocks with exactly the symmetries their leaves declare."""
    return symmetric_random_inputs(forest, seed)
