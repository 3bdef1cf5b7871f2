"""A small Davidson solver for the lowest eigenvalues of a non-symmetric matrix, and GMRES.

The matrix A is known only through ``matvec(v) -> A v`` and an approximation of its
diagonal. Each iteration projects A onto an orthonormal search space V (H = Vᵀ A V),
takes the Ritz pairs (θ, x = V y) with the lowest real parts, and for each unconverged
pair adds the diagonally preconditioned residual δ = (A x − θ x) / (θ − diag) to V
(orthogonalized twice against V). When V outgrows ``max_space`` it is restarted from the
current Ritz vectors. A pair is converged when ‖A x − θ x‖ < ``tol`` with ‖x‖ = 1.

Complex Ritz pairs (possible for a non-symmetric A) are taken by their real parts; the
CC Jacobians this serves have real low-lying spectra.

:func:`gmres` solves a linear system with the same kind of operator (host loop, jitted
products, nothing to compile beyond them).

References:
    Y. Saad and M. H. Schultz, SIAM J. Sci. Stat. Comput. 7, 856 (1986) — GMRES.
    E. R. Davidson, J. Comput. Phys. 17, 87 (1975). K. Hirao and H. Nakatsuji,
    J. Comput. Phys. 45, 246 (1982) — the non-symmetric generalization.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> a = np.diag(np.arange(1.0, 101.0)) + 1e-2 * rng.standard_normal((100, 100))
    >>> res = davidson(lambda v: a @ v, np.diag(a), nroots=3, tol=1e-10)
    >>> exact = np.sort(np.linalg.eigvals(a).real)[:3]
    >>> bool(res.converged.all()), bool(np.allclose(res.values, exact, atol=1e-10))
    (True, True)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from .._errors import InputError


@dataclasses.dataclass(frozen=True)
class DavidsonResult:
    """Lowest eigenpairs found by :func:`davidson`.

    Attributes:
        values: eigenvalues, ascending, shape (nroots,).
        vectors: unit eigenvectors as columns, shape (n, nroots).
        residual_norms: ‖A x − θ x‖ per root.
        converged: per root, whether its residual norm fell below ``tol``.
        iterations: Davidson iterations taken.
        matvecs: products with A evaluated.
    """

    values: np.ndarray
    vectors: np.ndarray
    residual_norms: np.ndarray
    converged: np.ndarray
    iterations: int
    matvecs: int


def _orthonormal_add(space: np.ndarray, vectors: list[np.ndarray]) -> np.ndarray:
    """Append to ``space`` (columns) the parts of ``vectors`` orthogonal to it."""
    new = []
    for v in vectors:
        v = v / np.linalg.norm(v)  # the threshold below is then relative
        for _ in range(2):  # twice is enough (Kahan–Parlett)
            for basis in (space, *new):
                basis = basis.reshape(len(v), -1)
                v = v - basis @ (basis.T @ v)
        norm = np.linalg.norm(v)
        if norm > 1e-4:
            new.append(v / norm)
    return np.column_stack([space, *new]) if new else space


def _lowest(h: np.ndarray, nroots: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``nroots`` eigenpairs of H of lowest real part, as real vectors.

    A degenerate root of a non-symmetric matrix can come out of ``eig`` as a complex pair
    λ, λ̄ (split by rounding); the real parts of v and v̄ coincide, so the second of the
    pair takes Im v instead: Re v and Im v span the same real invariant subspace, and the
    cluster keeps as many independent vectors as it has members.
    """
    values, vectors = np.linalg.eig(h)
    order = np.argsort(values.real, kind="stable")[:nroots]
    chosen = vectors[:, order]
    real = np.where(values[order].imag < 0, chosen.imag, chosen.real)
    return values.real[order], real


def davidson(
    matvec: Callable[[np.ndarray], np.ndarray],
    diagonal: np.ndarray,
    nroots: int,
    *,
    guesses: np.ndarray | None = None,
    tol: float = 1e-7,
    max_iter: int = 100,
    max_space: int | None = None,
) -> DavidsonResult:
    """The ``nroots`` eigenvalues of lowest real part of A, and their right eigenvectors.

    Args:
        matvec: ``v -> A v`` for a float64 vector of length n.
        diagonal: the preconditioner, an approximation of diag(A), shape (n,).
        nroots: how many eigenpairs.
        guesses: starting vectors as columns (default: unit vectors at the
            ``max(4 nroots, nroots + 8)`` lowest diagonal entries).
        tol: residual-norm threshold per root.
        max_iter: iterations before giving up (``converged`` then says which roots failed).
        max_space: search-space size that triggers a restart (default ``20 nroots + 20``).

    Returns:
        A :class:`DavidsonResult`.

    Raises:
        InputError: ``nroots`` is not between 1 and n, or ``guesses`` has the wrong shape.
    """
    diagonal = np.asarray(diagonal, dtype=np.float64)
    n = diagonal.shape[0]
    if not 1 <= nroots <= n:
        raise InputError(f"nroots={nroots!r}: expected an integer between 1 and {n}.")
    if guesses is None:
        start = np.argsort(diagonal, kind="stable")[: min(n, max(4 * nroots, nroots + 8))]
        guesses = np.eye(n)[:, start]
    guesses = np.asarray(guesses, dtype=np.float64)
    if guesses.ndim != 2 or guesses.shape[0] != n or guesses.shape[1] < nroots:
        raise InputError(
            f"guesses has shape {guesses.shape}; expected ({n}, k) with k ≥ nroots = "
            f"{nroots} starting vectors as columns (or None for the default)."
        )
    max_space = max(max_space or 20 * nroots + 20, 2 * guesses.shape[1])
    space = _orthonormal_add(np.zeros((n, 0)), list(guesses.T))
    products = np.column_stack([matvec(v) for v in space.T])
    matvecs = space.shape[1]
    iterations = 0
    while True:
        iterations += 1
        theta, y = _lowest(space.T @ products, nroots)
        x, ax = space @ y, products @ y
        scale = np.linalg.norm(x, axis=0)
        x, ax = x / scale, ax / scale
        residuals = ax - x * theta
        norms = np.linalg.norm(residuals, axis=0)
        done = norms < tol
        if done.all() or iterations == max_iter:
            break
        corrections = []
        for k in np.flatnonzero(~done):
            denom = theta[k] - diagonal
            denom = np.where(np.abs(denom) < 1e-8, 1e-8, denom)
            corrections.append(residuals[:, k] / denom)
        if space.shape[1] + len(corrections) > max_space:  # restart from the Ritz vectors
            space = _orthonormal_add(np.zeros((n, 0)), list(x.T))
            products = np.column_stack([matvec(v) for v in space.T])
            matvecs += space.shape[1]
        old = space.shape[1]
        space = _orthonormal_add(space, corrections)
        if space.shape[1] == old:  # nothing new to add: the search has stalled
            break
        added = [matvec(v) for v in space[:, old:].T]
        products = np.column_stack([products, *added])
        matvecs += len(added)
    return DavidsonResult(theta, x, norms, done, iterations, matvecs)


def gmres(
    matvec: Callable[[np.ndarray], np.ndarray],
    b: np.ndarray,
    diagonal: np.ndarray,
    *,
    tol: float = 1e-12,
    restart: int = 40,
    max_restarts: int = 10,
) -> tuple[np.ndarray, float]:
    """Solve A x = b by restarted GMRES, right-preconditioned by 1/diagonal.

    A host loop over jitted products (no solver to compile): Arnoldi with modified
    Gram–Schmidt, the small least-squares problem by ``numpy.linalg.lstsq``.

    Args:
        matvec: ``v -> A v``.
        b: the right-hand side.
        diagonal: an approximation of diag(A) (the preconditioner M = 1/diagonal).
        tol: stop when ‖b − A x‖ ≤ tol · ‖b‖.
        restart: Krylov vectors per cycle.
        max_restarts: cycles before giving up.

    Returns:
        ``(x, relative residual norm)``.

    Example:
        >>> a = np.diag(np.arange(1.0, 21.0)) + 0.01 * np.ones((20, 20))
        >>> x, rel = gmres(lambda v: a @ v, np.ones(20), np.diag(a))
        >>> bool(rel < 1e-12), bool(np.allclose(a @ x, 1.0))
        (True, True)
    """
    b = np.asarray(b, dtype=np.float64)
    x = np.zeros_like(b)
    b_norm = float(np.linalg.norm(b)) or 1.0
    rel = 1.0
    for _ in range(max_restarts):
        r = b - matvec(x)
        beta = float(np.linalg.norm(r))
        rel = beta / b_norm
        if rel <= tol:
            break
        basis, hessenberg = [r / beta], np.zeros((restart + 1, restart))
        for j in range(restart):
            w = matvec(basis[j] / diagonal)
            for i, q in enumerate(basis):
                hessenberg[i, j] = q @ w
                w = w - hessenberg[i, j] * q
            hessenberg[j + 1, j] = np.linalg.norm(w)
            rhs = np.zeros(j + 2)
            rhs[0] = beta
            y = np.linalg.lstsq(hessenberg[: j + 2, : j + 1], rhs, rcond=None)[0]
            rel = float(np.linalg.norm(hessenberg[: j + 2, : j + 1] @ y - rhs)) / b_norm
            if rel <= tol or hessenberg[j + 1, j] < 1e-300:
                break
            basis.append(w / hessenberg[j + 1, j])
        x = x + (np.column_stack(basis[: len(y)]) @ y) / diagonal
    return x, rel
