"""Geometry optimisation on an orbital-relaxed CC energy: BFGS on ``jax.value_and_grad``.

:func:`optimize_geometry` minimises a :class:`~sq_jax.cc.forces.RelaxedEnergy` (or any
function ``energy(coords) -> E`` that ``jax.value_and_grad`` differentiates) over the
Cartesian nuclear coordinates with SciPy's BFGS (a Wolfe line search and the inverse
Hessian update), until the largest gradient component is below ``gtol`` Eh/Bohr.

Why not optimistix: its minimisers trace the objective inside ``jax.lax.while_loop``, and
the relaxed energy runs pyscfad's SCF eagerly (Python loops on concrete values), so it
cannot be traced; SciPy's driver calls it with concrete coordinates.

The recipe behind it, for another optimiser (PySCF's ``geomopt``, ASE):

    value_and_grad = jax.value_and_grad(energy)
    e, g = value_and_grad(coords)           # Eh, Eh/Bohr; coords in Bohr

Known limitations: Cartesian coordinates and an identity starting Hessian (no internal
coordinates, no model Hessian), so a floppy molecule takes more steps than geomeTRIC;
minima only (no transition states).

Example:
    >>> import numpy as np
    >>> def energy(x):                  # a harmonic bond of length 1.4 Bohr
    ...     d = ((x[0] - x[1]) ** 2).sum() ** 0.5
    ...     return 0.5 * (d - 1.4) ** 2
    >>> out = optimize_geometry(energy, np.array([[0.0, 0, 0], [0, 0, 1.0]]), gtol=1e-8)
    >>> out.converged, round(float(np.linalg.norm(out.coords[1] - out.coords[0])), 6)
    (True, 1.4)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import ConvergenceError, InputError

__all__ = ["GeometryResult", "optimize_geometry"]


@dataclasses.dataclass(frozen=True)
class GeometryResult:
    """The end point of a geometry optimisation.

    Attributes:
        coords: the final nuclear positions (Bohr), shape (natm, 3).
        energy: the energy there (Eh).
        gradient: the gradient there (Eh/Bohr), shape (natm, 3).
        evaluations: energy-and-gradient evaluations taken.
        converged: whether max |gradient| < gtol.
    """

    coords: np.ndarray
    energy: float
    gradient: np.ndarray
    evaluations: int
    converged: bool


def optimize_geometry(
    energy: Callable[[jax.Array], jax.Array],
    coords: Any = None,
    *,
    gtol: float = 1e-6,
    max_steps: int = 100,
    throw: bool = True,
) -> GeometryResult:
    """Minimise ``energy(coords)`` over Cartesian coordinates with BFGS on its JAX gradient.

    Args:
        energy: a function of the (natm, 3) coordinates (Bohr) returning the energy (Eh),
            differentiable by ``jax.value_and_grad`` (a
            :class:`~sq_jax.cc.forces.RelaxedEnergy`).
        coords: the starting coordinates (Bohr); default: ``energy.coords``.
        gtol: convergence threshold on the largest gradient component (Eh/Bohr).
        max_steps: the most BFGS iterations.
        throw: raise :class:`~sq_jax.ConvergenceError` when not converged (else return
            the last point with ``converged=False``).

    Returns:
        A :class:`GeometryResult`.

    Raises:
        InputError: no starting coordinates, or bad ``gtol``/``max_steps``.
        ConvergenceError: with ``throw``, max |gradient| is still ≥ ``gtol`` at the end.

    Example:
        See the module example; a bad threshold is refused:

        >>> try:
        ...     optimize_geometry(lambda x: (x**2).sum(), np.zeros((1, 3)), gtol=0.0)
        ... except InputError as err:
        ...     print(err)
        gtol=0.0: expected a positive finite number (Eh/Bohr).
    """
    from scipy.optimize import minimize

    if coords is None:
        coords = getattr(energy, "coords", None)
        if coords is None:
            raise InputError(
                "optimize_geometry needs starting coordinates: pass coords=, or an energy "
                "with a `coords` attribute (a RelaxedEnergy)."
            )
    if not (isinstance(gtol, int | float) and np.isfinite(gtol) and gtol > 0):
        raise InputError(f"gtol={gtol!r}: expected a positive finite number (Eh/Bohr).")
    if not (isinstance(max_steps, int) and max_steps >= 1):
        raise InputError(f"max_steps={max_steps!r}: expected a whole number >= 1.")
    x0 = np.asarray(coords, dtype=np.float64)
    shape = x0.shape
    value_and_grad = jax.value_and_grad(energy)
    seen: dict[str, Any] = {"count": 0}

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        e, g = value_and_grad(jnp.asarray(x.reshape(shape)))
        seen["count"] += 1
        g = np.asarray(g, dtype=np.float64)
        return float(e), g.ravel()

    res = minimize(
        fun, x0.ravel(), jac=True, method="BFGS", options={"gtol": gtol, "maxiter": max_steps}
    )
    # The result is the best point; precision loss in the line search ends SciPy's run
    # with success=False even when the gradient criterion holds, so test it ourselves.
    x, e, g = res.x.reshape(shape), float(res.fun), np.asarray(res.jac).reshape(shape)
    converged = bool(np.max(np.abs(g)) < gtol)
    if throw and not converged:
        raise ConvergenceError(
            f"optimize_geometry: max |gradient| = {np.max(np.abs(g)):.3g} Eh/Bohr after "
            f"{res.nit} BFGS steps ({seen['count']} evaluations), above gtol={gtol:g} "
            f"({res.message}); raise max_steps, loosen gtol, or start closer to a minimum.",
            iterations=int(res.nit),
            residual_norm=float(np.max(np.abs(g))),
        )
    return GeometryResult(x, e, g, seen["count"], converged)
