"""The outer iteration shared by the amplitude solvers, and the records it produces.

A solver supplies one ``step`` (amplitudes in, :class:`Step` out: the next amplitudes and
the norms of this iteration) and an energy function; :func:`iterate` does the rest, the
same way for every solver: history, timing, progress lines, the stopping test (PySCF's
two criteria |ΔE| < e_tol and ‖Δt‖ < t_tol), the non-finite check, the iteration limit,
and raising :class:`~sq_jax.ConvergenceError` when asked to.

Example:
    >>> import jax.numpy as jnp
    >>> def halve(x, previous):  # t ← t/2 converges to 0
    ...     return Step(x / 2, float(jnp.linalg.norm(x / 2)), float(jnp.linalg.norm(x)))
    >>> res = iterate(
    ...     halve,
    ...     jnp.sum,
    ...     jnp.ones(2),
    ...     lambda x: {"t": x},
    ...     stop=StopCriteria(max_iter=100, e_tol=1e-6, t_tol=1e-6),
    ...     report=Reporting(method="toy"),
    ... )
    >>> res.converged, res.iterations
    (True, 21)
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._errors import ConvergenceError
from ._options import check_solver_options

__all__ = [
    "CCIteration",
    "CCResult",
    "CCStatus",
    "CCTimings",
    "Reporting",
    "Step",
    "StopCriteria",
    "iterate",
]


class CCStatus(eqx.Enumeration):
    """Why an amplitude solve stopped.

    Example:
        >>> CCStatus[CCStatus.NON_FINITE]
        'the energy or the residual became non-finite (NaN or inf)'
    """

    CONVERGED = "converged"
    MAX_ITERATIONS = (
        "the iteration limit was reached before |ΔE| < e_tol and ‖Δt‖ < t_tol; raise "
        "`max_iter`, loosen the thresholds, or check the starting amplitudes"
    )
    NON_FINITE = "the energy or the residual became non-finite (NaN or inf)"


@dataclasses.dataclass(frozen=True)
class CCIteration:
    """One iteration of a solve.

    Attributes:
        iteration: 1-based iteration (cycle) number.
        energy: the energy after this iteration's update.
        delta_energy: change of the energy in this iteration.
        amplitude_change: ‖t_new − t_old‖ (2-norm over all amplitudes, before DIIS
            extrapolation for :func:`solve_diis`, the Newton step for Newton–Krylov).
        residual_norm: ‖R‖ at the amplitudes this iteration started from.
        linear_steps: GMRES restart cycles of a Newton iteration (lineax's ``num_steps``;
            each costs up to ``gmres_restart`` Jacobian-vector products); 0 for DIIS.
        seconds: wall time of the iteration (the first includes compilation).
    """

    iteration: int
    energy: float
    delta_energy: float
    amplitude_change: float
    residual_norm: float
    linear_steps: int
    seconds: float


@dataclasses.dataclass(frozen=True)
class CCTimings:
    """Wall-clock times of a solve, in seconds.

    Attributes:
        total: the whole solve.
        first_iteration: the first iteration, which includes tracing and compilation.
        per_iteration: the mean of the later iterations (``nan`` with only one).
    """

    total: float
    first_iteration: float
    per_iteration: float


class CCResult(eqx.Module):
    """The outcome of an amplitude solve.

    Attributes:
        energy: the final energy (a 0-d array).
        amplitudes: the final amplitudes, same keys and shapes as the start.
        status: a :class:`CCStatus` item (``CCStatus[result.status]`` is its message).
        converged: whether ``status`` is ``CONVERGED``.
        iterations: iterations (residual evaluations for DIIS, Newton steps otherwise);
            0 with ``max_iter=0``, when the result is the starting point.
        history: one :class:`CCIteration` per iteration.
        timings: :class:`CCTimings`.
    """

    energy: jax.Array
    amplitudes: dict[str, jax.Array]
    status: Any
    converged: bool = eqx.field(static=True)
    iterations: int = eqx.field(static=True)
    history: tuple[CCIteration, ...] = eqx.field(static=True)
    timings: CCTimings = eqx.field(static=True)

    @property
    def message(self) -> str:
        """The human-readable status message."""
        return CCStatus[self.status]


@dataclasses.dataclass(frozen=True)
class StopCriteria:
    """When an iteration stops: converged, or out of iterations.

    Attributes:
        max_iter: iteration limit (0: return the starting point, not converged).
        e_tol: converged when |ΔE| < e_tol ...
        t_tol: ... and the step norm ‖Δt‖ < t_tol (2-norm over all stored amplitudes).

    Raises:
        InputError: a negative or non-integer ``max_iter``, or a tolerance that is not a
            positive finite number.

    Example:
        >>> StopCriteria(max_iter=50, e_tol=1e-10, t_tol=1e-8).max_iter
        50
    """

    max_iter: int
    e_tol: float
    t_tol: float

    def __post_init__(self) -> None:
        check_solver_options(max_iter=self.max_iter, e_tol=self.e_tol, t_tol=self.t_tol)


@dataclasses.dataclass(frozen=True)
class Reporting:
    """How an iteration reports: progress lines and failure.

    Attributes:
        method: the name in progress lines and errors (``"CCSD"``).
        verbose: print one PySCF-style line per iteration.
        throw: raise :class:`~sq_jax.ConvergenceError` when the solve does not converge.
        linear_solver: add ‖R‖ and the GMRES steps to progress lines (Newton–Krylov).

    Example:
        >>> Reporting(method="CCD", verbose=True).throw
        False
    """

    method: str
    verbose: bool = False
    throw: bool = False
    linear_solver: bool = False

    def log(self, it: CCIteration) -> None:
        """Print ``it`` as one progress line when ``verbose``."""
        if not self.verbose:
            return
        extra = ""
        if self.linear_solver:
            extra = f"  norm(R) = {it.residual_norm:.3g}  gmres steps = {it.linear_steps}"
        print(
            f"cycle = {it.iteration}  E_corr({self.method}) = {it.energy:.15g}  "
            f"dE = {it.delta_energy:.9g}  norm(t1,t2) = {it.amplitude_change:.6g}{extra}",
            flush=True,
        )


@dataclasses.dataclass(frozen=True)
class Step:
    """What one iteration of a solver produced.

    Attributes:
        amplitudes: the next (flat) amplitudes.
        amplitude_change: the norm tested against ``t_tol``.
        residual_norm: ‖R‖ at the amplitudes the iteration started from.
        linear_steps: inner linear-solver steps (0 when there are none).
    """

    amplitudes: jax.Array
    amplitude_change: float
    residual_norm: float
    linear_steps: int = 0


def iterate(
    step: Callable[[jax.Array, CCIteration | None], Step],
    energy: Callable[[jax.Array], Any],
    x0: jax.Array,
    unravel: Callable[[jax.Array], dict[str, jax.Array]],
    *,
    stop: StopCriteria,
    report: Reporting,
) -> CCResult:
    """Run ``step`` from ``x0`` until converged, out of iterations, or non-finite.

    Args:
        step: ``step(x, previous) -> Step``; ``previous`` is the last
            :class:`CCIteration` (``None`` on the first call).
        energy: flat amplitudes → scalar energy.
        x0: the starting flat amplitudes.
        unravel: flat amplitudes → the amplitudes dict of the result.
        stop: the :class:`StopCriteria`.
        report: the :class:`Reporting`.

    Returns:
        A :class:`CCResult`.

    Raises:
        ConvergenceError: with ``report.throw``, when the solve does not converge; it
            carries the iteration count, the last ‖R‖ and the result.
    """
    started = time.perf_counter()
    x = x0
    e_old = e_new = float(energy(x))
    history: list[CCIteration] = []
    status = CCStatus.MAX_ITERATIONS
    for k in range(1, stop.max_iter + 1):
        t_it = time.perf_counter()
        out = step(x, history[-1] if history else None)
        x = out.amplitudes
        e_new = float(energy(x))
        it = CCIteration(
            iteration=k,
            energy=e_new,
            delta_energy=e_new - e_old,
            amplitude_change=out.amplitude_change,
            residual_norm=out.residual_norm,
            linear_steps=out.linear_steps,
            seconds=time.perf_counter() - t_it,
        )
        history.append(it)
        report.log(it)
        if not all(math.isfinite(v) for v in (e_new, it.amplitude_change, it.residual_norm)):
            status = CCStatus.NON_FINITE
            break
        if abs(e_new - e_old) < stop.e_tol and it.amplitude_change < stop.t_tol:
            status = CCStatus.CONVERGED
            break
        e_old = e_new
    secs = [h.seconds for h in history]
    result = CCResult(
        energy=jnp.asarray(e_new),
        amplitudes=unravel(x),
        status=status,
        converged=status is CCStatus.CONVERGED,
        iterations=len(history),
        history=tuple(history),
        timings=CCTimings(
            total=time.perf_counter() - started,
            first_iteration=secs[0] if secs else 0.0,
            per_iteration=float(np.mean(secs[1:])) if len(secs) > 1 else math.nan,
        ),
    )
    if report.throw and not result.converged:
        rnorm = history[-1].residual_norm if history else math.nan
        raise ConvergenceError(
            f"The {report.method} solve did not converge after {len(history)} iterations "
            f"(last residual norm ‖R‖ = {rnorm:.3g}): {CCStatus[status]}.",
            iterations=len(history),
            residual_norm=rnorm,
            result=result,
        )
    return result
