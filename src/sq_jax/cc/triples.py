"""The perturbative triples correction (T), compiled from the shipped equations.

:func:`ccsd_t` takes a finished CCSD run (:class:`~sq_jax.cc.drivers.CCRun`), compiles
``ccsd_t_cs`` (closed-shell) or ``ccsd_t_so`` (spin-orbital: RHF and UHF references;
ROHF ones, run on non-canonical UHF-converted orbitals, are refused) into one program
whose only output is E(T), and runs it on the converged amplitudes. The o³v³ triples
are internal values of that program: in the orbit loops (:mod:`sq_jax.cc.triples_orbits`,
the default route, under ``memory_budget=``) or with ``batch=`` they exist only one
block at a time, and the energy denominator is the generated ``Δ``
(:mod:`sq_jax.forest.denominators`), built per batch from the orbital energies —
nothing of size o³v³ is an input either.

Orbital energies are the diagonal of the Fock matrix of the run (PySCF's
``eris.mo_energy``): (T) assumes canonical orbitals, as PySCF's ``ccsd_t`` does, and a
Fock matrix whose occupied-occupied or virtual-virtual block is not diagonal (to
``canonical_tol``) is refused. The occupied-virtual Fock block is used as it is (its
terms vanish for a converged Hartree–Fock reference).

Example:
    >>> from sq_jax import cc
    >>> run = cc.ccsd()                                # shipped H2O/STO-3G
    >>> e_t = ccsd_t(run, batch={"i": 2})
    >>> round(e_t, 10) == round(run.e_t, 10), e_t < 0
    (True, True)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import numpy as np

from .._errors import InputError, PlanError
from .._pipeline import compile as compile_program
from ..forest.denominators import energy_key
from ..forest.inputs import input_specs
from ..lower.program import Program
from .blocks import read_blocks
from .equations import load_equations
from .triples_orbits import TriplesOrbits, orbit_loops

if TYPE_CHECKING:
    from .run import CCRun

__all__ = [
    "CANONICAL_TOL",
    "ccsd_t",
    "default_memory_budget",
    "triples_inputs",
    "triples_orbits",
    "triples_program",
]

CANONICAL_TOL = 1e-5
"""Largest off-diagonal |F_pq| allowed within the occupied or the virtual block (Eh)."""


def triples_program(
    run: CCRun,
    *,
    batch: Mapping[str, Any] | None = None,
    memory_budget: int | str | None = None,
    remat: bool = False,
) -> Program:
    """The compiled (T) program of ``run``'s route, returning only ``E``.

    Args:
        run: a finished CCSD run.
        batch: a batch plan, e.g. ``{"i": 2}`` (loops over occupied triples).
        memory_budget: bytes (or ``"2 GiB"``) for what the program allocates; the plan
            is chosen for it (:func:`sq_jax.compile`). Exclusive with ``batch``.
        remat: recompute batches in reverse mode (bounded gradient memory).

    Returns:
        The :class:`~sq_jax.lower.program.Program`.

    Example:
        >>> from sq_jax import cc
        >>> prog = triples_program(cc.ccsd(closed_shell=True), batch={"a": 2})
        >>> prog.flops > 0, len(prog.lowered.loops()) > 0
        (True, True)
    """
    name = "ccsd_t_cs" if run.closed_shell else "ccsd_t_so"
    spaces = run.residual_program.schedule.annotated.forest.spaces
    budget = {} if memory_budget is None else {"memory_budget": memory_budget}
    return compile_program(
        load_equations(name), spaces, batch=batch, remat=remat, outputs=("E",), **budget
    )


def triples_orbits(
    run: CCRun,
    *,
    block: int | None = None,
    memory_budget: int | str | None = None,
    workers: int | None = None,
) -> TriplesOrbits:
    """(T) of ``run`` as loops over orbits of virtual block triples.

    Memory-bounded at the unbatched FLOPs (:mod:`sq_jax.cc.triples_orbits`); pass it
    to :func:`ccsd_t` as ``program=``, or let ``ccsd_t(run, memory_budget=...)`` build it.

    Args:
        run: a finished CCSD run.
        block: virtual orbitals per block; or
        memory_budget: bytes (or ``"2 GiB"``) for the temporaries (the block is chosen);
            with neither, :func:`default_memory_budget`.
        workers: concurrent shares of the orbits; ``None``: one per CPU core
            (:func:`~sq_jax.cc.triples_orbits.orbit_loops`).

    Example:
        >>> from sq_jax import cc
        >>> run = cc.ccsd(closed_shell=True)
        >>> orbits = triples_orbits(run, memory_budget="16 KiB")
        >>> orbits.memory_bytes <= 16 * 1024, orbits.block < run.nvirt
        (True, True)
    """
    name = "ccsd_t_cs" if run.closed_shell else "ccsd_t_so"
    if block is None and memory_budget is None:
        memory_budget = default_memory_budget()
    return orbit_loops(
        triples_program(run), name, block=block, memory_budget=memory_budget, workers=workers
    )


def _orbital_energies(fock: np.ndarray, nocc: int, tol: float) -> np.ndarray:
    """The Fock diagonal, after checking the occupied and virtual blocks are diagonal."""
    bad = []
    for name, block in (("occupied", fock[:nocc, :nocc]), ("virtual", fock[nocc:, nocc:])):
        off = block - np.diag(np.diag(block))
        worst = float(np.abs(off).max()) if off.size else 0.0
        if worst > tol:
            bad.append(f"{name}-{name} block: largest off-diagonal |F_pq| = {worst:.3g} Eh")
    if bad:
        raise InputError(
            "(T) needs canonical orbitals (a Fock matrix diagonal within the occupied and "
            f"within the virtual orbitals, to canonical_tol={tol:g} Eh); received "
            + "; ".join(bad)
            + ". Use canonical (or semicanonical) Hartree–Fock orbitals, or raise "
            "canonical_tol to use the Fock diagonal anyway."
        )
    return np.diag(fock).copy()


def ccsd_t(
    run: CCRun,
    *,
    batch: Mapping[str, Any] | None = None,
    memory_budget: int | str | None = None,
    block: int | None = None,
    canonical_tol: float = CANONICAL_TOL,
    program: Program | TriplesOrbits | None = None,
) -> float:
    """E(T), the perturbative triples correction to ``run``'s CCSD energy.

    Sets ``run.e_t`` too (as :meth:`~sq_jax.cc.drivers.CCRun.ccsd_t` does).

    Args:
        run: a finished CCSD run (not density-fitted), from :func:`sq_jax.cc.ccsd`.
        batch: a batch plan for the (T) program, e.g. ``{"i": 2}`` (the generic batch
            loops: each batch rebuilds the blocks of ``W`` its permutations read, up to
            6x the unbatched FLOPs).
        memory_budget: bytes (or ``"2 GiB"``) for what the (T) computation allocates:
            it loops over orbits of virtual block triples
            (:mod:`sq_jax.cc.triples_orbits`: memory-bounded at the unbatched FLOPs),
            with a block that fits. The default, when none of ``batch``,
            ``memory_budget`` and ``block`` is given, is a quarter of this machine's
            memory (:func:`default_memory_budget`): the orbit loops are also the fastest
            route measured (H2O/cc-pVDZ: 0.011 s against 0.037 s for the plain program).
        block: virtual orbitals per block of the orbit loops (instead of a budget).
            At most one of ``batch``, ``memory_budget`` and ``block``; the plain
            program runs with ``program=triples_program(run)``.
        canonical_tol: the largest off-diagonal Fock element allowed within the
            occupied or the virtual orbitals (Eh).
        program: a (T) program already built for this run by :func:`triples_program`
            or :func:`~sq_jax.cc.triples_orbits.triples_orbits` (then ``batch``,
            ``memory_budget`` and ``block`` are not used).

    Returns:
        E(T) in Eh.

    Raises:
        InputError: a CCD or density-fitted run, or non-canonical orbitals.
        PlanError: a bad ``batch``, or both ``batch`` and ``memory_budget``.
        MemoryBudgetError: no plan fits ``memory_budget``.

    Example:
        >>> from sq_jax import cc
        >>> run = cc.ccsd(closed_shell=True)
        >>> round(ccsd_t(run), 9) == round(ccsd_t(run, memory_budget="8 MiB"), 9)
        True
    """
    if run.method != "ccsd":
        raise InputError(
            f"(T) corrects CCSD; this run is {run.method.upper()}. Run cc.ccsd(...) first."
        )
    if run.spin_blocked:
        raise InputError(
            f"(T) runs on the spin-orbital route; this run solved the spin-blocked "
            f"{run.equations!r} equations. For UHF (T), run cc.ccsd(mf, equations='ccsd_so') "
            "first."
        )
    if any(k.startswith("B{") for k in run.integrals):
        raise InputError(
            "(T) from a density-fitted CCSD run is not supported yet; run cc.ccsd(mf) "
            "without df=True for (T)."
        )
    _orbital_energies(np.asarray(run.integrals["f"]), run.nocc, canonical_tol)  # before compiling
    if program is None:
        program = _triples_route(run, batch, memory_budget, block)
    if isinstance(program, TriplesOrbits):
        e_t = float(
            program.evaluate(triples_inputs(run, program.base, canonical_tol=canonical_tol))
        )
    else:
        inputs = triples_inputs(run, program, canonical_tol=canonical_tol)
        e_t = float(program(inputs)["E"])
    run.triples["e_t"] = e_t
    return e_t


def _triples_route(
    run: CCRun,
    batch: Mapping[str, Any] | None,
    memory_budget: int | str | None,
    block: int | None,
) -> Program | TriplesOrbits:
    """The generic batch loops when ``batch`` is given, else the orbit loops."""
    given = [
        n
        for n, v in (("batch", batch), ("memory_budget", memory_budget), ("block", block))
        if v is not None
    ]
    if len(given) > 1:
        raise PlanError(
            f"(T) takes at most one of batch=, memory_budget= and block=; got {', '.join(given)}."
        )
    if batch is not None:
        return triples_program(run, batch=batch)
    return triples_orbits(run, block=block, memory_budget=memory_budget)


def default_memory_budget() -> int:
    """The budget of :func:`ccsd_t` when none is given: a quarter of physical memory.

    Example:
        >>> default_memory_budget() >= 2**28
        True
    """
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):  # not every platform reports it
        total = 8 * 2**30
    return max(total // 4, 2**28)


def triples_inputs(
    run: CCRun, program: Program, *, canonical_tol: float = CANONICAL_TOL
) -> dict[str, Any]:
    """The arrays the (T) ``program`` reads for ``run``: amplitudes, integrals, energies.

    Integral blocks the CCSD programs did not read are built here (from the run's block
    source); the orbital energies are the Fock diagonal, checked to be canonical.

    Raises:
        InputError: non-canonical orbitals, or blocks the run cannot build.

    Example:
        >>> from sq_jax import cc
        >>> run = cc.ccsd(closed_shell=True)
        >>> sorted(triples_inputs(run, triples_program(run)))[:3]
        ['f', 'g', 't{a,a;i,i}']
    """
    integrals = dict(run.integrals)
    fock = np.asarray(integrals["f"])
    eps = _orbital_energies(fock, run.nocc, canonical_tol)
    if "g" not in integrals:  # block route: build the blocks (T) reads that CCSD did not
        missing = [k for k in read_blocks(program) if k not in integrals]
        if missing:
            if run.block_source is None:
                raise InputError(
                    f"the (T) program reads integral blocks {missing} that this run does not "
                    "hold, and the run keeps no integral source to build them."
                )
            built = run.block_source.build(missing).inputs()
            integrals.update({k: jnp.asarray(built[k]) for k in missing})
    amplitudes = run.result.amplitudes
    inputs = {
        "t{a;i}": amplitudes.get("t{a;i}", jnp.zeros((run.nvirt, run.nocc))),
        "t{a,a;i,i}": amplitudes["t{a,a;i,i}"],
        energy_key("i"): eps[: run.nocc],
        energy_key("a"): eps[run.nocc :],
    }
    forest = program.schedule.annotated.forest
    names = {n for s in input_specs(forest) for n in (s.label, s.block_key)}
    inputs.update({k: v for k, v in integrals.items() if k in names})
    return inputs
