"""Plain numpy Jacobi + DIIS, the test-only amplitude solver of both CCSD oracles.

Independent of ``sq_jax.cc`` (its DIIS object and iteration driver): the textbook
bordered Pulay system over the last ``space`` error vectors e = t_new − t, solved by
least squares without rescaling, and PySCF's two stopping criteria.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Pair = tuple[np.ndarray, np.ndarray]


def solve_jacobi_diis(
    residuals: Callable[[np.ndarray, np.ndarray], Pair],
    energy: Callable[[np.ndarray, np.ndarray], float],
    start: Pair,
    denominators: Pair,
    *,
    e_tol: float,
    t_tol: float,
    max_iter: int,
    space: int,
) -> tuple[float, np.ndarray, np.ndarray, int, bool]:
    """Iterate t ← DIIS(t + R(t)/D); returns (E, t1, t2, iterations, converged).

    ``residuals(t1, t2) -> (R1, R2)`` and ``energy(t1, t2)`` are the oracle's functions
    with the integrals bound; ``start`` and ``denominators`` are (T1, T2) pairs.
    """
    (t1, t2), (d1, d2) = start, denominators
    n1 = t1.size
    e_old = e = energy(t1, t2)
    vecs, errs = [], []
    for it in range(1, max_iter + 1):
        r1, r2 = residuals(t1, t2)
        x_old = np.concatenate([t1.ravel(), t2.ravel()])
        x_new = np.concatenate([(t1 + r1 / d1).ravel(), (t2 + r2 / d2).ravel()])
        err = x_new - x_old
        vecs, errs = [*vecs, x_new][-space:], [*errs, err][-space:]
        n = len(vecs)
        bmat = -np.ones((n + 1, n + 1))
        bmat[n, n] = 0.0
        bmat[:n, :n] = np.array([[ei @ ej for ej in errs] for ei in errs])
        rhs = np.zeros(n + 1)
        rhs[n] = -1.0
        c = np.linalg.lstsq(bmat, rhs, rcond=None)[0][:n]
        x = sum(ci * vi for ci, vi in zip(c, vecs, strict=True))
        t1, t2 = x[:n1].reshape(t1.shape), x[n1:].reshape(t2.shape)
        e = energy(t1, t2)
        if abs(e - e_old) < e_tol and np.linalg.norm(err) < t_tol:
            return e, t1, t2, it, True
        e_old = e
    return e, t1, t2, max_iter, False


def denominators(f, nocc):
    """D1[a, i] = f_ii − f_aa and D2[a, b, i, j] = f_ii + f_jj − f_aa − f_bb."""
    e = np.diag(np.asarray(f))
    d1 = e[None, :nocc] - e[nocc:, None]
    return d1, d1[:, None, :, None] + d1[None, :, None, :]


def mp2_guess(f, g, nocc):
    """The usual starting amplitudes t1 = f_ai / D1, t2 = g[a, b, i, j] / D2."""
    d1, d2 = denominators(f, nocc)
    f, g = np.asarray(f), np.asarray(g)
    return f[nocc:, :nocc] / d1, g[nocc:, nocc:, :nocc, :nocc] / d2


def solve_ccsd_with(residuals, energy, f, g, nocc, **options):
    """Jacobi + DIIS from the MP2 guess for an oracle's ``residuals``/``energy``."""
    f, g = np.asarray(f), np.asarray(g)
    return solve_jacobi_diis(
        lambda t1, t2: residuals(f, g, t1, t2, nocc),
        lambda t1, t2: energy(f, g, t1, t2, nocc),
        mp2_guess(f, g, nocc),
        denominators(f, nocc),
        **options,
    )
