"""Λ amplitudes and the one-particle density matrix of a converged CC run.

The CC Lagrangian L(t, λ; f, g) = E(t; f, g) + λ·R(t; f, g) is stationary in the
amplitudes when the multipliers solve the Λ (adjoint) equations Jᵀ λ = −∂E/∂t, with
J = ∂R/∂t the Jacobian of the compiled residual. :func:`solve_lambda` solves them with
the adjoint machinery of :mod:`sq_jax.cc.implicit` (GMRES on vector-Jacobian products of
the residual program, preconditioned by orbital-energy differences), so any model whose
residuals sq_jax compiles gets its Λ.

The Fock matrix enters the Hamiltonian as Σ f_pq p†q, so the derivative of the
Lagrangian with respect to f_pq, at fixed t and λ, is the expectation value
⟨0|(1 + Λ) e^{−T} {p†q} e^{T}|0⟩: the unrelaxed (amplitude-response only) correlation
part of the one-particle density matrix. :func:`rdm1` takes it with ``jax.grad`` of the
compiled residual and energy programs and adds the reference occupations; no density
equations are written by hand.

Conventions (checked against PySCF's GCCSD ``solve_lambda`` / ``make_rdm1`` in
tests/test_cc_response.py): λ is keyed and laid out like the amplitudes, and multiplies
the residual summed over *all* stored components, so for spin-orbital CCSD PySCF's
``l1[i, a] = λ1[a, i]`` and ``l2[i, j, a, b] = 4 λ2[a, b, i, j]`` (its Λ carries the
1/4 of the unique-pair sum). ``rdm1`` returns D[p, q] = ⟨q† p⟩ (PySCF's layout), with
the reference occupation (1 per occupied spin-orbital, 2 per closed-shell orbital).

References:
    E. A. Salter, G. W. Trucks and R. J. Bartlett, J. Chem. Phys. 90, 1752 (1989).
    T. Helgaker and P. Jørgensen, Theor. Chim. Acta 75, 111 (1989).

Example:
    >>> import numpy as np
    >>> from sq_jax import cc
    >>> run = cc.ccsd(e_tol=1e-12, t_tol=1e-10)      # the shipped H2O/STO-3G
    >>> lam = cc.solve_lambda(run)
    >>> d = cc.rdm1(run, lam)
    >>> round(float(np.trace(d)), 10)                 # 10 electrons
    10.0
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import InputError
from ._jacobian import check_run
from .implicit import ImplicitEnergy, _reads

__all__ = ["rdm1", "solve_lambda"]

_RESIDUAL_OF = {"R1": "t{a;i}", "R2": "t{a,a;i,i}"}


def solve_lambda(run: Any, **options: Any) -> dict[str, jax.Array]:
    """The Λ amplitudes of a converged run: the solution of Jᵀ λ = −∂E/∂t.

    Args:
        run: a converged :class:`~sq_jax.cc.drivers.CCRun` (full integrals, not
            ``df=True``); λ is solved at its amplitudes, so converge it as tightly as
            λ is wanted.
        **options: as for :func:`~sq_jax.cc.implicit.implicit_energy`: ``adjoint_tol``,
            ``gmres_restart``, ``gmres_max_steps``, ``throw``.

    Returns:
        λ keyed like the amplitudes (``t{a;i}``: λ1[a, i]; ``t{a,a;i,i}``:
        λ2[a, b, i, j], antisymmetric for spin orbitals); see the module docstring for
        PySCF's normalization.

    Raises:
        InputError: ``run`` is not a finished run with its integrals, or its equations
            read density-fitted factors instead of ``g``.
        ConvergenceError: the Λ GMRES did not converge.

    Example:
        The module example solves for λ; anything but a finished run is refused:

        >>> try:
        ...     solve_lambda("a run")
        ... except InputError as err:
        ...     print(str(err)[:46])
        solve_lambda needs a finished `CCRun` (from `s
    """
    check_run(run, "solve_lambda")
    energy = ImplicitEnergy(run, **options)
    return energy.multipliers(run.integrals["f"], run.integrals["g"], run.result.amplitudes)


def rdm1(run: Any, lam: Mapping[str, Any]) -> np.ndarray:
    """The unrelaxed CC one-particle density matrix D[p, q] = ⟨q† p⟩, reference included.

    D − D_ref = (∂L/∂f)ᵀ at the run's amplitudes and the given λ, by ``jax.grad``
    through the compiled programs (module docstring). The run's amplitudes should be
    converged as tightly as the density is wanted.

    Args:
        run: a :class:`~sq_jax.cc.drivers.CCRun`.
        lam: its Λ amplitudes, from :func:`solve_lambda`.

    Returns:
        D, shape (n, n), in the run's orbital basis (spin orbitals, or spatial orbitals
        summed over spin for a closed-shell run); its trace is the electron count.

    Raises:
        InputError: ``run`` is not a finished run, or ``lam`` does not have the
            amplitudes' keys and shapes.

    Example:
        The module example computes a density; λ must be shaped like the amplitudes:

        >>> from sq_jax import cc
        >>> try:
        ...     rdm1(cc.ccd(), {"t{a,a;i,i}": 0.0})
        ... except InputError as err:
        ...     print(str(err)[:52])
        rdm1: lam must be a dict like the amplitudes, ['t{a,
    """
    check_run(run, "rdm1")
    t = {k: jnp.asarray(v) for k, v in run.result.amplitudes.items()}
    shapes = {k: tuple(np.shape(v)) for k, v in lam.items()} if isinstance(lam, Mapping) else {}
    if shapes != {k: v.shape for k, v in t.items()}:
        raise InputError(
            f"rdm1: lam must be a dict like the amplitudes, {sorted(t)} with shapes "
            f"{[t[k].shape for k in sorted(t)]}; received {shapes or type(lam).__name__}. "
            "Pass what `solve_lambda(run)` returns."
        )
    reads_r, reads_e = _reads(run.residual_program), _reads(run.energy_program)

    def lagrangian(fock: jax.Array) -> jax.Array:
        ints = {**run.integrals, "f": fock}
        e_in = {k: v for k, v in {**ints, **t}.items() if k in reads_e}
        r_in = {k: v for k, v in ints.items() if k in reads_r}
        residuals = run.residual_program({**r_in, **t})
        value = run.energy_program(e_in)["E"]
        for name, r in residuals.items():
            value = value + jnp.vdot(jnp.asarray(lam[_RESIDUAL_OF[name]]), r)
        return value

    d = np.array(jax.grad(lagrangian)(jnp.asarray(run.integrals["f"])).T)
    per_orbital = 2.0 if run.closed_shell else 1.0
    d[np.arange(run.nocc), np.arange(run.nocc)] += per_orbital
    return d
