"""Amplitude solvers for coupled-cluster equations: Jacobi + DIIS, and Newton–Krylov.

The solvers know nothing about how residuals are computed. They take

* ``residual_fn(amplitudes) -> residuals``: a dict of arrays to a dict of arrays with the
  same keys and shapes (for CCSD, R1 and R2 as ⟨Φ|H̄|0⟩ with the diagonal Fock terms
  included);
* ``energy_fn(amplitudes) -> scalar``: the correlation energy;
* ``denominators``: a dict like the amplitudes such that ``t ← t + R / D`` is the Jacobi
  update: D1 = f_ii − f_aa, D2 = f_ii + f_jj − f_aa − f_bb (negative for a normal
  reference), because the residual's diagonal Fock part is R ≈ −D·t + ….

References:
    P. Pulay, Chem. Phys. Lett. 73, 393 (1980) — DIIS. G. E. Scuseria, T. J. Lee and
    H. F. Schaefer, Chem. Phys. Lett. 130, 236 (1986) — DIIS for coupled cluster, with
    error vectors t_new − t_old. D. A. Knoll and D. E. Keyes, J. Comput. Phys. 193, 357
    (2004) — Jacobian-free Newton–Krylov; S. C. Eisenstat and H. F. Walker, SIAM J. Sci.
    Comput. 17, 16 (1996) — forcing terms.

Both solvers are one ``step`` function each, run by the shared outer iteration
:func:`iterate` (history, stopping tests, non-finite check, :class:`CCResult`); DIIS is
the reusable :class:`DIIS` object (``push`` / ``extrapolate``). Option values are checked
by :func:`check_solver_options` before any work.

Known limitations: the outer loops run in Python (one jitted call per iteration), so
iteration counts and histories are concrete; DIIS vectors are kept on the device, the
small DIIS matrix is solved on the host.

Example:
    >>> import jax.numpy as jnp
    >>> from sq_jax.cc.solvers import CCStatus, solve_diis
    >>> d = {"t": jnp.array([2.0, 3.0])}
    >>> res = solve_diis(
    ...     lambda t: {"t": jnp.array([1.0, 1.0]) - d["t"] * t["t"] - 0.1 * t["t"] ** 2},
    ...     lambda t: jnp.sum(t["t"]),
    ...     {"t": jnp.zeros(2)},
    ...     d,
    ... )
    >>> res.converged, bool(res.status == CCStatus.CONVERGED), res.message
    (True, True, 'converged')
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .._errors import InputError
from ..lower.aot import AotJit
from . import _iterate
from ._diis import DIIS
from ._iterate import CCIteration, CCResult, Reporting, Step, StopCriteria, iterate
from ._iterate import CCStatus as CCStatus  # re-exported (``X as X``), see __all__
from ._iterate import CCTimings as CCTimings
from ._options import check_solver_options

# The iteration records and loop of ._iterate are public here, next to the solvers.
__all__ = [
    "DIIS",
    "antisymmetrize",
    "check_solver_options",
    "solve_diis",
    "solve_newton_krylov",
    *_iterate.__all__,
]

Amplitudes = Mapping[str, Any]


def _prepare(t0: Amplitudes, denominators: Amplitudes) -> tuple[jax.Array, Callable, jax.Array]:
    if not isinstance(t0, Mapping) or not isinstance(denominators, Mapping):
        raise InputError(
            "`t0` and `denominators` must be dicts of arrays (e.g. {'t1': T1, 't2': T2}); "
            f"received {type(t0).__name__} and {type(denominators).__name__}."
        )
    problems = []
    if set(t0) != set(denominators):
        problems.append(
            f"keys differ: amplitudes {sorted(t0)} vs denominators {sorted(denominators)}"
        )
    else:
        for key in t0:
            ts, ds = np.shape(t0[key]), np.shape(denominators[key])
            if ts != ds:
                problems.append(f"`{key}`: amplitudes shape {ts}, denominators shape {ds}")
    if problems:
        raise InputError(
            "Amplitudes and denominators must match key by key and shape by shape:\n"
            + "\n".join(f"  * {p}" for p in problems)
            + "\nBuild the denominators from the same Fock matrix, e.g. "
            "`ints.denominators()`."
        )
    t0 = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in t0.items()}
    x0, unravel = ravel_pytree(t0)
    d, _ = ravel_pytree({k: jnp.asarray(denominators[k], dtype=jnp.float64) for k in t0})
    if not bool(jnp.all(jnp.isfinite(d))) or bool(jnp.any(d == 0)):
        raise InputError(
            "Every denominator must be finite and non-zero; received zeros or non-finite "
            "values. Check the Fock diagonal (occupied energies below virtual ones)."
        )
    return x0, unravel, d


def solve_diis(
    residual_fn: Callable[[dict[str, jax.Array]], Mapping[str, jax.Array]],
    energy_fn: Callable[[dict[str, jax.Array]], jax.Array],
    t0: Amplitudes,
    denominators: Amplitudes,
    *,
    max_iter: int = 100,
    e_tol: float = 1e-10,
    t_tol: float = 1e-8,
    diis_space: int = 6,
    diis_start: int = 0,
    jit: bool = True,
    method: str = "CCSD",
    verbose: bool = False,
    throw: bool = False,
) -> CCResult:
    """Solve R(t) = 0 by Jacobi iterations t ← t + R/D accelerated by DIIS.

    Each iteration computes the Jacobi update t_new = t + R(t)/D, stores t_new with the
    error vector t_new − t, and (from iteration ``diis_start + 1`` on) replaces t_new by
    the DIIS extrapolation of the last ``diis_space`` stored vectors. It stops when
    |ΔE| < ``e_tol`` and ‖t_new − t‖ < ``t_tol`` (PySCF's two criteria), or at
    ``max_iter`` iterations, or when the energy or the update becomes non-finite.

    Args:
        residual_fn: amplitudes dict → residuals dict (same keys and shapes).
        energy_fn: amplitudes dict → scalar energy.
        t0: starting amplitudes, e.g. MP2 amplitudes.
        denominators: D with ``t ← t + R / D`` the Jacobi update (D1 = f_ii − f_aa
            etc.), same keys and shapes as ``t0``.
        max_iter: iteration limit; 0 returns the starting amplitudes and their energy,
            not converged (status ``MAX_ITERATIONS``, no iterations).
        e_tol: energy-change threshold (PySCF's ``conv_tol``).
        t_tol: amplitude-change threshold (2-norm over all stored amplitudes; PySCF's
            ``conv_tol_normt``, see :func:`~sq_jax.cc.solve_cc` for the comparison).
        diis_space: number of stored vectors (1 turns DIIS off).
        diis_start: iterations of plain Jacobi before DIIS starts.
        jit: ``jax.jit`` the residual and energy functions (they must be traceable).
        method: the name printed in progress lines.
        verbose: print one PySCF-style line per iteration.
        throw: raise :class:`~sq_jax.ConvergenceError` when the solve does not
            converge, instead of returning a result with a failure status.

    Returns:
        A :class:`CCResult`.

    Raises:
        InputError: if amplitudes and denominators do not match, a denominator is
            zero or non-finite, or an option has a value the solver cannot use
            (a negative ``max_iter``, a NaN or non-positive tolerance, ...).
        ConvergenceError: with ``throw=True``, when the solve does not converge; it
            names the iteration count and the last residual norm.

    Example:
        >>> import jax.numpy as jnp
        >>> d = {"t": jnp.array([1.0, 2.0])}
        >>> res = solve_diis(
        ...     lambda t: {"t": 1.0 - d["t"] * t["t"] + 0.2 * t["t"][::-1]},
        ...     lambda t: jnp.sum(t["t"]),
        ...     {"t": jnp.zeros(2)},
        ...     d,
        ... )
        >>> res.converged, [round(float(v), 6) for v in res.amplitudes["t"]]
        (True, [1.122449, 0.612245])
    """
    stop = StopCriteria(max_iter=max_iter, e_tol=e_tol, t_tol=t_tol)
    check_solver_options(diis_space=diis_space, diis_start=diis_start)
    x0, unravel, d = _prepare(t0, denominators)

    def update(xv):
        t = unravel(xv)
        r = residual_fn(t)
        _check_residuals(r, t)
        rv, _ = ravel_pytree({k: jnp.asarray(r[k]) for k in sorted(r)})
        return xv + rv / d, jnp.linalg.norm(rv)

    def energy(xv):
        return energy_fn(unravel(xv))

    if jit:
        update, energy = AotJit(update), AotJit(energy)
    diis = DIIS(diis_space)

    def step(x: jax.Array, previous: CCIteration | None) -> Step:
        x_new, rnorm = update(x)
        err = x_new - x
        normt = float(jnp.linalg.norm(err))
        k = 1 if previous is None else previous.iteration + 1
        if k > diis_start and diis_space > 1:
            diis.push(x_new, err)
            if diis.can_extrapolate:
                x_new = diis.extrapolate()
        return Step(x_new, normt, float(rnorm))

    report = Reporting(method=method, verbose=verbose, throw=throw)
    return iterate(step, energy, x0, unravel, stop=stop, report=report)


def antisymmetrize(amplitudes: Mapping[str, Any]) -> dict[str, jax.Array]:
    """Project spin-orbital amplitudes onto their antisymmetric part.

    A rank-2k array (SeQuant layout: k virtual slots, then k occupied slots) is replaced
    by its normalized antisymmetrization over the first k axes and, independently, over
    the last k axes; rank-2 arrays are returned unchanged. This is an orthogonal
    projector, suitable as ``project=`` of :func:`solve_newton_krylov`.

    Args:
        amplitudes: a dict of arrays of even rank.

    Returns:
        A dict with the same keys.

    Raises:
        InputError: if an array has odd rank.

    Example:
        >>> import jax.numpy as jnp
        >>> t2 = jnp.zeros((2, 2, 2, 2)).at[0, 1, 0, 1].set(4.0)
        >>> float(antisymmetrize({"t2": t2})["t2"][1, 0, 0, 1])
        -1.0
    """
    out = {}
    for key, value in amplitudes.items():
        a = jnp.asarray(value)
        if a.ndim % 2:
            raise InputError(
                f"antisymmetrize: `{key}` has odd rank {a.ndim}; amplitudes must have k "
                "virtual slots followed by k occupied slots."
            )
        k = a.ndim // 2
        for lo in (0, k):
            acc = jnp.zeros_like(a)
            perms = list(itertools.permutations(range(k)))
            for perm in perms:
                axes = list(range(a.ndim))
                axes[lo : lo + k] = [lo + p for p in perm]
                acc = acc + _perm_sign(perm) * jnp.transpose(a, axes)
            a = acc / len(perms)
        out[key] = a
    return out


def _perm_sign(perm: tuple[int, ...]) -> int:
    sign = 1
    for i in range(len(perm)):
        for j in range(i + 1, len(perm)):
            if perm[i] > perm[j]:
                sign = -sign
    return sign


def _check_residuals(r: Any, t: Mapping[str, Any]) -> None:
    """Check (at trace time: only keys and shapes) that residuals match the amplitudes."""
    if not isinstance(r, Mapping) or set(r) != set(t):
        got = sorted(r) if isinstance(r, Mapping) else type(r).__name__
        raise InputError(
            f"`residual_fn` must return a dict with the amplitudes' keys {sorted(t)}; "
            f"received {got}. Return one residual per amplitude block."
        )
    bad = [
        f"`{k}`: {np.shape(r[k])} vs {np.shape(t[k])}"
        for k in t
        if np.shape(r[k]) != np.shape(t[k])
    ]
    if bad:
        raise InputError(
            "Each residual must have its amplitude's shape:\n" + "\n".join(f"  * {b}" for b in bad)
        )


def solve_newton_krylov(
    residual_fn: Callable[[dict[str, jax.Array]], Mapping[str, jax.Array]],
    energy_fn: Callable[[dict[str, jax.Array]], jax.Array],
    t0: Amplitudes,
    denominators: Amplitudes,
    *,
    project: Callable[[dict[str, jax.Array]], Mapping[str, jax.Array]] | None = None,
    max_iter: int = 20,
    e_tol: float = 1e-10,
    t_tol: float = 1e-8,
    forcing: float = 1e-2,
    gmres_restart: int = 10,
    gmres_max_steps: int = 50,
    gmres_atol: float | None = None,
    method: str = "CCSD",
    verbose: bool = False,
    throw: bool = False,
) -> CCResult:
    """Solve R(t) = 0 by inexact Newton steps with matrix-free, preconditioned GMRES.

    Each outer iteration linearizes the residual at t (``jax.linearize``: the Jacobian-
    vector product is forward-mode AD, never a matrix), and solves J δ = −R with lineax
    GMRES, right-preconditioned by the denominators (J ≈ −D, so the solve is for
    (J M) y = −R with M = −1/D and δ = M y). The GMRES relative tolerance (forcing term)
    is ``min(forcing, ‖R‖)``, which gives quadratic convergence near the solution. It
    stops when |ΔE| < ``e_tol`` and ‖δ‖ < ``t_tol``, at ``max_iter`` Newton steps, or
    when the energy or the residual becomes non-finite.

    Args:
        residual_fn: amplitudes dict → residuals dict (same keys and shapes); must be
            JAX-traceable and differentiable.
        energy_fn: amplitudes dict → scalar energy (traceable).
        t0: starting amplitudes, e.g. MP2 amplitudes.
        denominators: D with ``t ← t + R / D`` the Jacobi update (D1 = f_ii − f_aa
            etc.), same keys and shapes as ``t0``.
        project: the orthogonal projector onto the physical amplitudes, if the dict holds
            redundant components (spin-orbital T2 stored in full: pass
            :func:`antisymmetrize`). Newton directions are projected, and the operator
            is the identity on the complement, so GMRES never sees the null space of the
            Jacobian there. ``None``: every component is independent.
        max_iter: limit on Newton (outer) iterations (0: the starting point).
        e_tol: energy-change threshold.
        t_tol: step-norm threshold (2-norm over all amplitudes).
        forcing: largest GMRES relative tolerance.
        gmres_restart: GMRES Krylov dimension before a restart.
        gmres_max_steps: limit on GMRES restart cycles per Newton iteration.
        gmres_atol: absolute GMRES tolerance on the preconditioned system (in residual
            units, max-norm); default ``1e-3 * t_tol``, so that a Newton step near the
            solution is not asked for more digits than float64 holds.
        method: the name printed in progress lines.
        verbose: print one PySCF-style line per Newton iteration.
        throw: raise :class:`~sq_jax.ConvergenceError` when the solve does not
            converge.

    Returns:
        A :class:`CCResult`; ``history[k].linear_steps`` holds the GMRES restart cycles.

    Raises:
        InputError: for the inputs and options :func:`solve_diis` refuses, and for a
            ``forcing`` or GMRES option out of range.
        ConvergenceError: with ``throw=True``, as for :func:`solve_diis`.

    Example:
        >>> import jax.numpy as jnp
        >>> d = {"t": jnp.array([1.0, 2.0])}
        >>> res = solve_newton_krylov(
        ...     lambda t: {"t": 1.0 - d["t"] * t["t"] + 0.2 * t["t"][::-1] ** 2},
        ...     lambda t: jnp.sum(t["t"]),
        ...     {"t": jnp.zeros(2)},
        ...     d,
        ... )
        >>> res.converged, res.iterations <= 6
        (True, True)
    """
    try:
        import lineax as lx
    except ImportError as err:  # pragma: no cover - lineax is a declared dependency
        raise ImportError(
            "solve_newton_krylov needs lineax for its matrix-free GMRES; install it with "
            "`pip install lineax`."
        ) from err

    stop = StopCriteria(max_iter=max_iter, e_tol=e_tol, t_tol=t_tol)
    check_solver_options(
        forcing=forcing,
        gmres_restart=gmres_restart,
        gmres_max_steps=gmres_max_steps,
        gmres_atol=gmres_atol,
    )
    x0, unravel, d = _prepare(t0, denominators)
    precond = -1.0 / d
    atol = 1e-3 * t_tol if gmres_atol is None else gmres_atol

    def flat_residual(xv):
        t = unravel(xv)
        r = residual_fn(t)
        _check_residuals(r, t)
        return ravel_pytree({k: jnp.asarray(r[k]) for k in sorted(r)})[0]

    def flat_project(yv):
        if project is None:
            return yv
        p = project(unravel(yv))
        return ravel_pytree({k: jnp.asarray(p[k]) for k in sorted(p)})[0]

    # unravel() orders keys like ravel_pytree of a dict (sorted), as does flat_residual.
    @AotJit
    def newton_step(xv, rtol):
        r, jvp = jax.linearize(flat_residual, xv)

        def matvec(y):
            py = flat_project(y)
            return jvp(precond * py) + (y - py)

        op = lx.FunctionLinearOperator(matvec, jax.eval_shape(lambda: r))
        solver = lx.GMRES(
            rtol=rtol,
            atol=atol,
            restart=gmres_restart,
            max_steps=gmres_max_steps,
            stagnation_iters=10,
        )
        sol = lx.linear_solve(op, -flat_project(r), solver, throw=False)
        step = precond * flat_project(sol.value)
        return step, jnp.linalg.norm(r), sol.stats["num_steps"]

    def step(x: jax.Array, previous: CCIteration | None) -> Step:
        rtol = forcing if previous is None else min(forcing, previous.residual_norm)
        dx, rnorm, nsteps = newton_step(x, jnp.asarray(rtol))
        return Step(x + dx, float(jnp.linalg.norm(dx)), float(rnorm), int(nsteps))

    energy = AotJit(lambda xv: energy_fn(unravel(xv)))
    report = Reporting(method=method, verbose=verbose, throw=throw, linear_solver=True)
    return iterate(step, energy, x0, unravel, stop=stop, report=report)
