"""Coupled-cluster drivers: integrals + shipped equations + a compiled program + a solver.

:func:`solve_cc` is the one entry point: it picks the equation set for the method and the
orbital basis (spin-orbital or closed-shell), compiles two sq_jax programs (the residuals,
and the energy alone), and runs a solver with them. :func:`ccsd` and :func:`ccd` are
shorthands.

Example:
    >>> from sq_jax import cc
    >>> run = cc.ccsd()                      # the shipped H2O/STO-3G, spin-orbital, DIIS
    >>> run.result.converged, round(float(run.result.energy), 8)
    (True, -0.04943856)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

from .._errors import InputError
from .._pipeline import compile as compile_program
from ..expr.parse import parse
from ..expr.spaces import Spaces
from ..forest.inputs import input_specs
from ..lower.program import Program
from .blocks import BlockBuilder, block_builder, read_blocks
from .equations import available, load_equations
from .integrals import (
    SpatialIntegrals,
    SpinOrbitalIntegrals,
    default_spatial_system,
    default_system,
)
from .solvers import CCResult, antisymmetrize, solve_diis, solve_newton_krylov

__all__ = ["CCRun", "ccd", "ccsd", "solve_cc"]

T1, T2 = "t{a;i}", "t{a,a;i,i}"
_RESIDUAL_OF = {"R1": T1, "R2": T2}
METHODS = ("ccd", "ccsd")
SOLVERS = ("diis", "newton")


@dataclasses.dataclass(frozen=True)
class CCRun:
    """A finished coupled-cluster calculation.

    Attributes:
        method: ``"ccsd"`` or ``"ccd"``.
        closed_shell: whether spin-adapted (spatial-orbital) equations were used.
        result: the solver's :class:`~sq_jax.cc.solvers.CCResult` (correlation energy,
            amplitudes, status, history, timings).
        e_hf: the reference (Hartree–Fock) energy.
        residual_program: the compiled residual program (schedule, FLOPs, peak).
        energy_program: the compiled energy program.
        nocc: occupied orbitals (spin-orbitals for spin-orbital runs).
        nvirt: virtual orbitals.
    """

    method: str
    closed_shell: bool
    result: CCResult
    e_hf: float
    residual_program: Program
    energy_program: Program
    nocc: int
    nvirt: int

    @property
    def e_corr(self) -> float:
        """The correlation energy."""
        return float(self.result.energy)

    @property
    def e_tot(self) -> float:
        """The total energy, reference plus correlation."""
        return self.e_hf + self.e_corr


def _integrals(
    system: Any, closed_shell: bool, df: bool = False, auxbasis: Any = None
) -> SpinOrbitalIntegrals | SpatialIntegrals | BlockBuilder:
    # PySCF objects and density fitting go block by block: only what the equations read.
    is_mean_field = hasattr(system, "mo_coeff") and hasattr(system, "mol")
    if df or is_mean_field or auxbasis is not None:
        return block_builder(system, spin_orbital=not closed_shell, df=df, auxbasis=auxbasis)
    if system is None:
        return default_spatial_system() if closed_shell else default_system()
    if isinstance(system, SpinOrbitalIntegrals | SpatialIntegrals):
        if closed_shell != isinstance(system, SpatialIntegrals):
            want = "SpatialIntegrals" if closed_shell else "SpinOrbitalIntegrals"
            raise InputError(
                f"closed_shell={closed_shell} needs {want}, got {type(system).__name__}; "
                "pass the matching integrals or flip closed_shell."
            )
        return system
    raise InputError(
        f"system must be None (the shipped H2O/STO-3G), integrals, or a PySCF mean-field "
        f"object; got {type(system).__name__} (DFIntegrals need df=True)."
    )


def _read_by(program: Program, arrays: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``arrays`` that ``program`` reads (by label or block key)."""
    names = set()
    for spec in input_specs(program.schedule.annotated.forest):
        names.update((spec.label, spec.block_key))
    return {k: v for k, v in arrays.items() if k in names}


def solve_cc(
    system: Any = None,
    *,
    method: str = "ccsd",
    closed_shell: bool = False,
    solver: str = "diis",
    batch: Mapping[str, Any] | None = None,
    memory_budget: int | str | None = None,
    remat: bool = False,
    verbose: bool = False,
    df: bool = False,
    auxbasis: Any = None,
    **solver_options: Any,
) -> CCRun:
    """Solve the CC amplitude equations with a compiled sq_jax program.

    Args:
        system: ``None`` for the shipped H2O/STO-3G, a PySCF RHF object, or integrals
            (:class:`SpinOrbitalIntegrals` / :class:`SpatialIntegrals`).
        method: ``"ccsd"`` or ``"ccd"``.
        closed_shell: use the spin-adapted equations over spatial orbitals.
        solver: ``"diis"`` (Jacobi + DIIS, as PySCF) or ``"newton"`` (Newton–Krylov).
        batch: a batch plan for the residual program, e.g. ``{"a": 4}``.
        memory_budget: bytes (or ``"2 GiB"``) for what the residual program allocates
            (see :func:`sq_jax.compile`); the batch plan is then chosen for you.
        remat: wrap loop bodies in ``jax.checkpoint``.
        verbose: print one line per iteration.
        df: density-fitted equations (``ccsd_cs_df`` / ``ccsd_so_df``) on three-index
            factors: PySCF's with ``auxbasis`` (default: the basis ``mf.density_fit()``
            picks), or the exact factorization of integrals given in memory.
        auxbasis: the auxiliary basis for ``df=True`` with a PySCF object.
        **solver_options: passed to the solver (``max_iter``, ``e_tol``, ``t_tol`` …).

    Returns:
        A :class:`CCRun`.

    Raises:
        InputError: an unknown method, solver or system, or mismatched integrals.

    Example:
        >>> run = solve_cc(method="ccd")
        >>> run.result.converged, run.result.iterations > 3
        (True, True)
    """
    if method not in METHODS:
        raise InputError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}.")
    if solver not in SOLVERS:
        raise InputError(f"unknown solver {solver!r}; expected one of {', '.join(SOLVERS)}.")
    name = f"{method}_{'cs' if closed_shell else 'so'}{'_df' if df else ''}"
    if name not in available():
        raise InputError(
            f"no shipped equations for {method} with closed_shell={closed_shell}, df={df} "
            f"(available: {', '.join(available())})."
        )
    ints = _integrals(system, closed_shell, df, auxbasis)
    is_blocks = isinstance(ints, BlockBuilder)
    spaces = ints.spaces() if is_blocks else Spaces(i=ints.nocc, a=ints.nvirt)
    equations = parse(load_equations(name), spaces=spaces)
    residual_eqs = [eq for eq in equations if eq.name in _RESIDUAL_OF]
    energy_eqs = [eq for eq in equations if eq.name == "E"]
    budget = {} if memory_budget is None else {"memory_budget": memory_budget}
    residual_program = compile_program(residual_eqs, spaces, batch=batch, remat=remat, **budget)
    energy_program = compile_program(energy_eqs, spaces)

    if is_blocks:  # build exactly the integral blocks the two programs read
        ints = ints.build(read_blocks(residual_program, energy_program))
        integrals = {k: jnp.asarray(v) for k, v in ints.inputs().items()}
    else:
        integrals = {"f": jnp.asarray(ints.fock), "g": jnp.asarray(ints.eri)}
    keys = [_RESIDUAL_OF[eq.name] for eq in residual_eqs]
    # Each program is given only what it reads (CCD's energy has no Fock term, say).
    fixed_r = _read_by(residual_program, integrals)
    fixed_e = _read_by(energy_program, integrals)

    def residual_fn(t: Mapping[str, Any]) -> dict[str, Any]:
        out = residual_program({**fixed_r, **t})
        return {_RESIDUAL_OF[k]: v for k, v in out.items()}

    def energy_fn(t: Mapping[str, Any]) -> Any:
        return energy_program({**fixed_e, **_read_by(energy_program, t)})["E"]

    d1, d2 = ints.denominators()
    m1, m2 = ints.mp2_amplitudes()
    start = {T1: jnp.asarray(m1), T2: jnp.asarray(m2)}
    denominators = {T1: d1, T2: d2}
    t0 = {k: start[k] for k in keys}
    dens = {k: denominators[k] for k in keys}
    label = method.upper()
    if solver == "diis":
        result = solve_diis(
            residual_fn, energy_fn, t0, dens, method=label, verbose=verbose, **solver_options
        )
    else:
        project = None if closed_shell else antisymmetrize
        result = solve_newton_krylov(
            residual_fn,
            energy_fn,
            t0,
            dens,
            project=project,
            method=label,
            verbose=verbose,
            **solver_options,
        )
    return CCRun(
        method,
        closed_shell,
        result,
        float(ints.e_hf),
        residual_program,
        energy_program,
        ints.nocc,
        ints.nvirt,
    )


def ccsd(system: Any = None, **options: Any) -> CCRun:
    """CCSD: :func:`solve_cc` with ``method="ccsd"``.

    Example:
        >>> round(ccsd().e_tot, 6)
        -75.012462
    """
    return solve_cc(system, method="ccsd", **options)


def ccd(system: Any = None, **options: Any) -> CCRun:
    """CCD: :func:`solve_cc` with ``method="ccd"``.

    Example:
        >>> ccd().result.converged
        True
    """
    return solve_cc(system, method="ccd", **options)
