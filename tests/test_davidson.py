"""The Davidson solver on small dense non-symmetric matrices, against ``numpy.linalg.eig``.

A degenerate pair split by rounding into complex-conjugate eigenvalues λ ± iδ (as a
degenerate EOM triplet can be in the projected matrix) must still give two independent
real vectors spanning the pair's invariant subspace: the real parts of v and v̄ are the
same vector, so a solver that keeps only real parts returns it twice and the left/right
overlap matrix of the cluster (``excitation_energy_derivative``) is singular.
"""

from __future__ import annotations

import numpy as np

from sq_jax.cc._davidson import davidson


def _similar(blocks: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A = S B S⁻¹ with a random, well-conditioned S: A and its invariant subspaces S[:, k]."""
    rng = np.random.default_rng(seed)
    s = np.eye(len(blocks)) + 0.1 * rng.normal(size=blocks.shape)
    return s @ blocks @ np.linalg.inv(s), s


def test_roots_equal_dense_eigenvalues():
    a, _ = _similar(np.diag(np.arange(1.0, 13.0)), seed=1)
    res = davidson(lambda v: a @ v, np.diag(a), 3, tol=1e-10)
    exact = np.sort(np.linalg.eigvals(a).real)[:3]
    assert res.converged.all()
    assert np.abs(res.values - exact).max() < 1e-9
    assert np.abs(a @ res.vectors - res.vectors * res.values).max() < 1e-9


def test_split_degenerate_pair_gives_independent_vectors():
    delta = 1e-9  # the rounding-sized splitting of a degenerate pair
    b = np.diag(np.arange(1.0, 11.0))
    b[:2, :2] = [[0.5, delta], [-delta, 0.5]]  # eigenvalues 0.5 ± iδ
    a, s = _similar(b, seed=2)
    values = np.linalg.eigvals(a)
    assert np.abs(values.imag).max() > 0  # eig does see a complex pair here
    res = davidson(lambda v: a @ v, np.diag(a), 2, guesses=np.eye(10), tol=1e-7)
    assert np.abs(res.values - 0.5).max() < 1e-9
    sv = np.linalg.svd(res.vectors, compute_uv=False)
    assert sv.min() > 1e-2, sv  # two independent directions, not one twice
    # ... spanning the pair's invariant subspace, the first two columns of S
    basis, _ = np.linalg.qr(s[:, :2])
    outside = res.vectors - basis @ (basis.T @ res.vectors)
    assert np.abs(outside).max() < 1e-7
