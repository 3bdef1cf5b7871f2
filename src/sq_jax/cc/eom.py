"""EOM-EE excitation energies from the CC Jacobian, and their field derivatives.

At converged amplitudes the CC Jacobian J = ∂R/∂t, with R = ⟨μ|e^{−T} H e^{T}|0⟩, equals
⟨μ|[H̄, τ_ν]|0⟩ = ⟨μ|H̄ − E_CC|ν⟩ on the excitations μ, ν kept by the model (the
reference couples only through R = 0). Its eigenvalues are therefore the EOM-EE
excitation energies of that model: EOM-EE-CCSD for CCSD, and so on for any residual
sq_jax compiles. :func:`eom_ee` finds the lowest ones with a Davidson solver
(:mod:`sq_jax.cc._davidson`) whose products J·v are Jacobian-vector products of the
compiled residual program, on the unique amplitudes (a < b, i < j; see
:mod:`sq_jax.cc._jacobian`), so the redundant, non-antisymmetric directions of the
stored T2 give no spurious roots. The preconditioner is the orbital-energy difference
e_a − e_i (+ e_b − e_j).

Spin-orbital roots contain every singlet once and each triplet three times (M_S = −1,
0, 1: spin-flip excitations are part of the spin-orbital space).

Derivatives (:func:`excitation_energy_derivative`): for a right eigenvector r and left
eigenvector l of J with eigenvalue ω, first-order perturbation theory for a
non-symmetric matrix gives dω = l·dJ·r / l·r. Here the Jacobian changes with the
integrals both directly and through the amplitudes, which respond to the perturbation
(implicit function theorem: J dt = −∂R/∂θ·dθ, solved by GMRES on the same J·v). Then
dJ·r = d/dε [J(t(ε), θ + ε dθ) r], one nested Jacobian-vector product of the residual
program. A degenerate root (a triplet) is treated with its whole cluster: the
derivatives of the cluster's eigenvalues are the eigenvalues of (LᵀR)⁻¹ Lᵀ dJ R.

References:
    J. F. Stanton and R. J. Bartlett, J. Chem. Phys. 98, 7029 (1993) — EOM-CCSD.
    H. Koch and P. Jørgensen, J. Chem. Phys. 93, 3333 (1990) — CC response and the
    Jacobian. E. R. Davidson, J. Comput. Phys. 17, 87 (1975).

Example:
    >>> from sq_jax import cc
    >>> run = cc.ccsd(e_tol=1e-12, t_tol=1e-10)        # the shipped H2O/STO-3G
    >>> eom = cc.eom_ee(run, nroots=4)
    >>> [round(float(w), 6) for w in eom.energies]     # a triplet (3 roots), a singlet
    [0.396857, 0.396857, 0.396857, 0.456674]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import ConvergenceError, InputError
from ._davidson import davidson, gmres
from ._jacobian import T1, PackedResidual

__all__ = ["EOMResult", "eom_ee", "excitation_energy_derivative"]


@dataclasses.dataclass(frozen=True)
class EOMResult:
    """Excitation energies and right eigenvectors from :func:`eom_ee`.

    Attributes:
        energies: excitation energies (Eh), ascending, shape (nroots,).
        vectors: unit right eigenvectors of J over the unique amplitudes, as columns.
        residual_norms: ‖J r − ω r‖ per root.
        iterations: Davidson iterations.
        matvecs: Jacobian-vector products evaluated.
        space: the packing map (``space.unpack(vectors[:, k])`` gives root k's R1, R2).
    """

    energies: np.ndarray
    vectors: np.ndarray
    residual_norms: np.ndarray
    iterations: int
    matvecs: int
    space: PackedResidual = dataclasses.field(repr=False)

    def amplitudes(self, root: int) -> dict[str, jax.Array]:
        """Root ``root``'s right eigenvector as full antisymmetric R1[a,i], R2[a,b,i,j]."""
        return self.space.unpack(jnp.asarray(self.vectors[:, root]))


def _check_positive(name: str, value: Any, kind: type) -> None:
    ok = isinstance(value, kind) and not isinstance(value, bool) and value > 0
    if not ok or (kind is float and not np.isfinite(value)):
        raise InputError(f"{name}={value!r}: expected a positive {kind.__name__}.")


def _products(space: PackedResidual) -> tuple[Any, Any]:
    """J·v and Jᵀ·w at the run's converged amplitudes, on host vectors."""
    x0, ints = space.pack(space.amplitudes), space.integrals
    right, left = space.products()
    return (
        lambda v: np.asarray(right(x0, ints, jnp.asarray(v))),
        lambda w: np.asarray(left(x0, ints, jnp.asarray(w))),
    )


def _singles_guesses(space: PackedResidual, nroots: int) -> np.ndarray | None:
    """Unit vectors at the lowest single excitations (Davidson's default with no T1).

    Generously many: Davidson keeps within the symmetry blocks its guesses touch, so a
    low root dominated by a single excitation that no guess contains would be missed.
    """
    if T1 not in space.keys:
        return None
    singles = np.arange(space.size)[space.segment(T1)]
    diagonal = space.diagonal()[singles]
    count = min(len(singles), max(8 * nroots, 24))
    if count < nroots:
        return None
    chosen = singles[np.argsort(diagonal, kind="stable")[:count]]
    return np.eye(space.size)[:, chosen]


def eom_ee(
    run: Any,
    nroots: int = 5,
    *,
    tol: float = 1e-7,
    max_iter: int = 100,
    guesses: Any = None,
    throw: bool = True,
) -> EOMResult:
    """The lowest EOM-EE excitation energies: eigenvalues of the run's CC Jacobian.

    Args:
        run: a converged spin-orbital :class:`~sq_jax.cc.drivers.CCRun` (converge it
            tightly: the roots are as accurate as the amplitudes).
        nroots: how many roots (degenerate triplet components count separately).
        tol: Davidson residual-norm threshold ‖J r − ω r‖ per root.
        max_iter: Davidson iterations.
        guesses: starting vectors over the unique amplitudes, as columns (at least
            ``nroots``; e.g. ``vectors`` of a nearby :class:`EOMResult`); default:
            unit vectors at the ``max(8 nroots, 24)`` lowest single excitations.
        throw: raise :class:`~sq_jax.ConvergenceError` if a root is not converged.

    Returns:
        An :class:`EOMResult`.

    Raises:
        InputError: ``run`` is not a finished spin-orbital run with its integrals, or
            ``nroots``/``tol``/``max_iter`` are not positive (or ``nroots`` exceeds the
            number of unique amplitudes).
        ConvergenceError: with ``throw``, a root did not converge in ``max_iter``.

    Example:
        The module example computes roots; closed-shell runs are refused:

        >>> from sq_jax import cc
        >>> try:
        ...     eom_ee(cc.ccd(closed_shell=True))
        ... except InputError as err:
        ...     print(str(err)[:58])
        excitation energies need spin-orbital amplitudes; received
    """
    _check_positive("nroots", nroots, int)
    _check_positive("tol", tol, float)
    _check_positive("max_iter", max_iter, int)
    space = PackedResidual(run)
    right, _ = _products(space)
    if guesses is None:
        guesses = _singles_guesses(space, nroots)
    res = davidson(right, space.diagonal(), nroots, guesses=guesses, tol=tol, max_iter=max_iter)
    if throw and not res.converged.all():
        worst = float(res.residual_norms.max())
        raise ConvergenceError(
            f"eom_ee: {int((~res.converged).sum())} of {nroots} roots not converged after "
            f"{res.iterations} Davidson iterations (largest ‖Jr − ωr‖ = {worst:.3g}); raise "
            "max_iter or tol, or pass throw=False.",
            iterations=res.iterations,
            residual_norm=worst,
        )
    return EOMResult(
        res.values, res.vectors, res.residual_norms, res.iterations, res.matvecs, space
    )


def _amplitude_response(space: PackedResidual, x0: jax.Array, primal: dict, tangent: dict):
    """dt/dε: the solution of J dt = −∂R/∂θ·dθ (GMRES on the shared J·v products)."""
    _, b = jax.jit(lambda p, d: jax.jvp(lambda th: space.residual(x0, th), (p,), (d,)))(
        primal, tangent
    )
    right, _ = _products(space)
    dt, rel = gmres(right, -np.asarray(b), space.diagonal(), tol=1e-10)
    if not rel <= 1e-10:
        raise ConvergenceError(
            "excitation_energy_derivative: the amplitude-response GMRES solve "
            f"J dt = −∂R/∂θ·dθ stopped at relative residual {rel:.3g}; converge the CC "
            "run more tightly.",
            iterations=10,
            residual_norm=rel,
        )
    return jnp.asarray(dt)


def excitation_energy_derivative(
    eom: EOMResult,
    dfock: Any,
    *,
    deri: Any = None,
    root: int | Sequence[int] = 0,
    degeneracy_tol: float = 1e-6,
    tol: float = 1e-7,
) -> float | np.ndarray:
    """dω/dε of an excitation energy for integrals f + ε·dfock (and g + ε·deri).

    Orbitals are held fixed (as for a finite field added to the Fock matrix of the
    CC calculation); the amplitudes respond. See the module docstring for the method.

    Args:
        eom: the :func:`eom_ee` result at ε = 0 (its run's amplitudes and integrals).
        dfock: the one-electron perturbation in the run's spin-orbital basis, (n, n),
            e.g. dipole integrals for a field.
        deri: an optional two-electron perturbation ⟨pq‖rs⟩, (n,)*4 (runs on full
            integrals only).
        root: which root of ``eom``, or a sequence of roots (they share the one
            amplitude-response solve); a degenerate root is differentiated with its
            cluster (roots within ``degeneracy_tol``), ordered as the roots at small
            ε > 0 are.
        degeneracy_tol: roots closer than this (Eh) form one degenerate cluster.
        tol: residual-norm threshold of the left-eigenvector Davidson solve.

    Returns:
        dω/dε at ε = 0, in Eh per unit ε (an array, one per root, for a sequence).

    Raises:
        InputError: a perturbation of the wrong shape, a root out of range, or a
            degenerate cluster that reaches past the roots ``eom`` holds.
        ConvergenceError: the response or left-eigenvector solve did not converge.

    Example:
        With ``eom = cc.eom_ee(run, nroots=4)`` on a spin-orbital run and ``v`` the
        spin-orbital dipole integrals, ``excitation_energy_derivative(eom, v, root=3)``
        is the slope of the fourth root in the field (tests/test_cc_response.py checks
        it against finite differences). Perturbations must match the run's orbitals:

        >>> import numpy as np
        >>> from sq_jax import cc
        >>> eom = cc.eom_ee(cc.ccsd(), nroots=1)
        >>> try:
        ...     excitation_energy_derivative(eom, np.zeros((3, 3)))
        ... except InputError as err:
        ...     print(str(err)[:60])
        excitation_energy_derivative: the 'f' perturbation must have
    """
    space = eom.space
    n = space.nocc + space.nvirt
    tangent = {"f": jnp.asarray(dfock, dtype=jnp.float64)}
    if deri is not None:
        tangent["g"] = jnp.asarray(deri, dtype=jnp.float64)
    for key, value in tangent.items():
        want = (n,) * (2 if key == "f" else 4)
        if key not in space.integrals or value.shape != want:
            raise InputError(
                f"excitation_energy_derivative: the {key!r} perturbation must have shape "
                f"{want} and the run must read full {key!r} integrals; received shape "
                f"{value.shape}, run integrals {sorted(space.integrals)}."
            )
    energies = np.asarray(eom.energies)
    roots = [root] if isinstance(root, int) and not isinstance(root, bool) else list(root)
    for k in roots:
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 0 <= k < len(energies):
            raise InputError(f"root={k!r}: expected an integer in [0, {len(energies)}).")
    clusters = [np.flatnonzero(np.abs(energies - energies[k]) < degeneracy_tol) for k in roots]
    x0 = space.pack(space.amplitudes)
    primal = {k: jnp.asarray(space.integrals[k]) for k in tangent}
    dt = _amplitude_response(space, x0, primal, tangent)
    left = _left_vectors(eom, clusters, degeneracy_tol, tol)

    @jax.jit
    def dj_times(r):  # d/dε [J(t(ε), θ + ε dθ) r]
        def j_times(x, theta):
            return jax.jvp(lambda y: space.residual(y, theta), (x,), (r,))[1]

        return jax.jvp(j_times, (x0, primal), (dt, tangent))[1]

    slopes = []
    for k, cluster, lvec in zip(roots, clusters, left, strict=True):
        right = eom.vectors[:, cluster]
        dj_r = np.column_stack([np.asarray(dj_times(jnp.asarray(r))) for r in right.T])
        coupling = np.linalg.solve(lvec.T @ right, lvec.T @ dj_r)
        ordered = np.sort(np.linalg.eigvals(coupling).real)
        slopes.append(float(ordered[int(np.searchsorted(cluster, k))]))
    return slopes[0] if isinstance(root, int) else np.asarray(slopes)


def _left_vectors(
    eom: EOMResult, clusters: list[np.ndarray], degeneracy_tol: float, tol: float
) -> list[np.ndarray]:
    """Per cluster, left eigenvectors (Jᵀ l = ω l) spanning its left invariant subspace."""
    space = eom.space
    _, left_product = _products(space)
    diagonal = space.diagonal()
    last = max(int(c[-1]) for c in clusters)
    nleft = min(last + 2, space.size)  # one root more: is the last cluster whole?
    extra = np.eye(space.size)[:, np.argsort(diagonal, kind="stable")[:2]]
    guesses = np.column_stack([eom.vectors, extra])
    res = davidson(left_product, diagonal, nleft, guesses=guesses, tol=tol)
    if not res.converged.all():
        raise ConvergenceError(
            "excitation_energy_derivative: the left-eigenvector Davidson solve did not "
            f"converge (largest residual {float(res.residual_norms.max()):.3g}).",
            iterations=res.iterations,
            residual_norm=float(res.residual_norms.max()),
        )
    out = []
    for cluster in clusters:
        omega = eom.energies[cluster[0]]
        members = np.flatnonzero(np.abs(res.values - omega) < degeneracy_tol)
        if len(members) != len(cluster):
            raise InputError(
                f"the root at {omega:.8f} Eh is {len(members)}-fold degenerate but the EOM "
                f"result holds {len(cluster)} of its components; rerun eom_ee with nroots "
                f"≥ {int(cluster[0]) + len(members)} so the whole cluster is differentiated."
            )
        out.append(res.vectors[:, members])
    return out
