"""Random inputs with exactly the symmetries their leaves declare (for packed programs)."""

from __future__ import annotations

import numpy as np

import sq_jax as sq
from sq_jax.forest.inputs import block_key
from sq_jax.forest.symmetry import value_symmetries

LETTERS = "abcdefgh"


def apply_symmetry(x: np.ndarray, perm: tuple[int, ...]) -> np.ndarray:
    """``y[x_0, …] = x[x_{perm[0]}, …]``: the array seen through a symmetry."""
    letters = LETTERS[: x.ndim]
    return np.einsum("".join(letters[p] for p in perm) + "->" + letters, x)


def symmetric_inputs(forest: sq.Forest, seed: int = 0) -> dict[str, np.ndarray]:
    """Random blocks with exactly the symmetries their leaves declare."""
    syms = value_symmetries(forest)
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for leaf in forest.leaves():
        key = block_key(leaf.tensor)
        if key in out:
            continue
        shape = tuple(forest.spaces.extent(ix.space) for ix in leaf.tensor.indices)
        x = rng.standard_normal(shape)
        group = syms[leaf.key]
        out[key] = sum(s * apply_symmetry(x, p) for p, s in group) / len(group)
    return out
