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
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from .._errors import InputError
from .._pipeline import compile as compile_program
from ..derive import cc_equations, model_ranks
from ..expr.nodes import Equation, Tensor, walk
from ..expr.spaces import Spaces
from ..forest.inputs import bind_inputs, input_specs
from ..lower.program import Program
from .antisymmetrizer import apply_antisymmetrizer, parse_cc_equations
from .blocks import BlockBuilder, block_builder, read_blocks
from .equations import available, choose_equations, load_equations
from .integrals import (
    SpatialIntegrals,
    SpinOrbitalIntegrals,
    default_spatial_system,
    default_system,
    spin_orbital_from_spatial,
)
from .orbitals import freeze_integrals, is_open_shell
from .run import T1, T2, CCRun, amplitude_key
from .solvers import (
    CCResult,
    antisymmetrize,
    check_solver_options,
    solve_diis,
    solve_newton_krylov,
)
from .unrestricted import AMPLITUDES as UHF_AMPLITUDES
from .unrestricted import RESIDUAL_OF as UHF_RESIDUAL_OF
from .unrestricted import read_spin_blocks, spin_block_builder

__all__ = ["CCRun", "ccd", "ccsd", "ccsdt", "solve_cc"]


_RESIDUAL_OF = {f"R{n}": amplitude_key(n) for n in range(1, 7)}
METHODS = ("ccd", "ccsd", "ccsdt", "ccsdtq")
"""Named methods; on the spin-orbital route any model of :func:`sq_jax.derive.model_ranks`
is accepted, its equations shipped (``ccsdt_so``) or derived when asked for."""
SOLVERS = ("diis", "newton")


def _integrals(
    system: Any, closed_shell: bool, df: bool = False, auxbasis: Any = None, frozen: Any = None
) -> SpinOrbitalIntegrals | SpatialIntegrals | BlockBuilder:
    # PySCF objects and density fitting go block by block: only what the equations read.
    is_mean_field = hasattr(system, "mo_coeff") and hasattr(system, "mol")
    if df or is_mean_field or auxbasis is not None:
        return block_builder(
            system, spin_orbital=not closed_shell, df=df, auxbasis=auxbasis, frozen=frozen
        )
    if system is None:
        if frozen is not None:  # freeze the shipped spatial orbitals, then expand
            shipped = freeze_integrals(default_spatial_system(), frozen)
            return shipped if closed_shell else spin_orbital_from_spatial(shipped)
        return default_spatial_system() if closed_shell else default_system()
    system = freeze_integrals(system, frozen)
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


# PySCF's CCSD option names that mean what ours mean (see solve_cc's docstring).
PYSCF_OPTION_NAMES = {"conv_tol": "e_tol", "conv_tol_normt": "t_tol", "max_cycle": "max_iter"}
_SOLVER_FUNCTIONS = {"diis": solve_diis, "newton": solve_newton_krylov}
_SET_BY_DRIVER = frozenset({"method", "verbose", "project"})


def _accepted_options(solver: str) -> list[str]:
    """The solver's keyword options that a caller of :func:`solve_cc` may set."""
    params = inspect.signature(_SOLVER_FUNCTIONS[solver]).parameters.values()
    own = [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name not in _SET_BY_DRIVER]
    return sorted(own)


def _solver_options(solver: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Check solver options by name and value; map PySCF's names to ours.

    Runs before integrals are built or anything is compiled, so a typo costs nothing.
    """
    if solver not in SOLVERS:
        raise InputError(f"unknown solver {solver!r}; expected one of {', '.join(SOLVERS)}.")
    options = dict(options)
    accepted = _accepted_options(solver)
    unknown = [k for k in options if k not in accepted and k not in PYSCF_OPTION_NAMES]
    if unknown:
        aliases = ", ".join(f"{k} (= {v})" for k, v in PYSCF_OPTION_NAMES.items())
        raise InputError(
            f"unknown option{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(k) for k in unknown)} for solver={solver!r}; accepted: "
            f"{', '.join(accepted)}, and PySCF's names {aliases}."
        )
    for pyscf_name, ours in PYSCF_OPTION_NAMES.items():
        if pyscf_name in options:
            if ours in options:
                raise InputError(
                    f"both {pyscf_name}= and {ours}= were given; they are the same option "
                    f"(PySCF's name and ours): pass one."
                )
            options[ours] = options.pop(pyscf_name)
    check_solver_options(**options)
    return options


def _check_reference(system: Any) -> None:
    """Refuse references CC cannot use, in chemistry terms, before any work."""
    if hasattr(system, "mo_coeff") and hasattr(system, "mol"):  # a PySCF mean-field object
        electrons = int(getattr(system.mol, "nelectron", 2))
        if hasattr(system, "xc"):
            convert = " or `mf.to_hf().run()`" if hasattr(system, "to_hf") else ""
            raise InputError(
                f"coupled cluster needs a Hartree–Fock reference; received "
                f"{type(system).__name__}, a Kohn–Sham DFT object (xc={system.xc!r}), "
                f"whose orbitals would give a meaningless CC energy. Run Hartree–Fock: "
                f"`scf.RHF(mol).run()`{convert}."
            )
    elif isinstance(system, SpinOrbitalIntegrals | SpatialIntegrals):
        per_orbital = 2 if isinstance(system, SpatialIntegrals) else 1
        electrons = per_orbital * system.nocc
    else:
        return
    if electrons < 2:
        raise InputError(
            f"received {type(system).__name__} for a system of {electrons} electron"
            f"{'s' if electrons != 1 else ''}: a one-electron system has no electron "
            "correlation (Hartree–Fock is already exact in its basis); coupled cluster "
            "needs at least 2 electrons."
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
    frozen: Any = None,
    equations: str | None = None,
    **solver_options: Any,
) -> CCRun:
    """Solve the CC amplitude equations with a compiled sq_jax program.

    Args:
        system: ``None`` for the shipped H2O/STO-3G, a PySCF RHF, UHF or ROHF object
            (UHF and ROHF on the spin-blocked unrestricted route by default; ROHF as
            PySCF runs it, converted to UHF), or integrals
            (:class:`SpinOrbitalIntegrals` / :class:`SpatialIntegrals`).
        method: ``"ccsd"`` or ``"ccd"`` (every route); on the spin-orbital route without
            density fitting also ``"ccsdt"`` (shipped ``ccsdt_so``) and any other model
            name of :func:`sq_jax.derive.model_ranks` (``"ccsdtq"``, ``"ccdt"``, …),
            whose equations are derived on demand (a UHF/ROHF reference runs them on
            spin-orbitals). Amplitudes above T2 start at zero.
        closed_shell: use the spin-adapted equations over spatial orbitals.
        solver: ``"diis"`` (Jacobi + DIIS, as PySCF) or ``"newton"`` (Newton–Krylov).
        batch: a batch plan for the residual program, e.g. ``{"a": 4}``.
        memory_budget: bytes (or ``"2 GiB"``) for what the residual program allocates
            (see :func:`sq_jax.compile`); the batch plan is then chosen for you, and the
            DIIS iterations call the residual program as compiled for it (``jit=False``
            unless given: not traced into the solver's own ``jax.jit``).
        remat: recompute batches in reverse mode (bounded gradient memory).
        verbose: print one line per iteration.
        df: density-fitted equations (``ccsd_cs_df`` / ``ccsd_so_df``) on three-index
            factors: PySCF's with ``auxbasis`` (default: the basis ``mf.density_fit()``
            picks), or the exact factorization of integrals given in memory.
        auxbasis: the auxiliary basis for ``df=True`` with a PySCF object.
        equations: the shipped equation set to solve (see
            :func:`~sq_jax.cc.equations.available`), e.g. ``"ccsd_so"`` to run a UHF/ROHF
            reference on the spin-orbital route; ``None`` picks the route's default:
            ``{method}_uhf`` (spin-blocked unrestricted) for a PySCF UHF or ROHF object
            without ``df``, else ``{method}_cs`` / ``{method}_so`` (``_df``). ``_uhf``
            equations also accept an RHF reference or the shipped system (the same
            orbitals for both spins).
        frozen: orbitals left uncorrelated, as PySCF's ``frozen``: a count of the lowest
            orbitals (of each spin), a list of orbital indices, or for UHF/ROHF a pair of
            lists (α, β). Indices count spatial orbitals, except for
            :class:`SpinOrbitalIntegrals` given directly (spin-orbitals, as PySCF's GCCSD).
        **solver_options: passed to the solver: ``max_iter``, ``e_tol``, ``t_tol``,
            ``throw`` for both; ``diis_space``, ``diis_start``, ``jit`` for DIIS;
            ``forcing``, ``gmres_restart``, ``gmres_max_steps``, ``gmres_atol`` for
            Newton. PySCF's names are accepted where they mean the same:
            ``conv_tol`` = ``e_tol`` (|ΔE| threshold), ``max_cycle`` = ``max_iter``, and
            ``conv_tol_normt`` = ``t_tol``; the last is the 2-norm of the amplitude
            change over the amplitudes as stored (full T2), PySCF's over the unique
            ones, so ours is 1–2× (spin-orbital) or 1–√2× (closed-shell) PySCF's and
            the same number is at least as strict. ``max_iter=0`` returns the MP2
            starting amplitudes and their energy, not converged. Every option is
            checked, by name and value, before integrals are built or anything is
            compiled.

    Returns:
        A :class:`CCRun`.

    Raises:
        InputError: an unknown method, solver, option or system; a bad option value
            (negative ``max_iter``, NaN or non-positive tolerance, ...); mismatched
            integrals; a Kohn–Sham (DFT) reference instead of Hartree–Fock; fewer than
            two electrons; a bad ``frozen``; an open-shell reference with
            ``closed_shell=True``.
        ConvergenceError: with ``throw=True``, when the solve does not converge.

    Example:
        >>> run = solve_cc(method="ccd")
        >>> run.result.converged, run.result.iterations > 3
        (True, True)
        >>> solve_cc(method="ccd", max_cycle=0).result.iterations  # PySCF's name
        0
    """
    _check_method(method)
    solver_options = _solver_options(solver, solver_options)
    _check_reference(system)
    if method in ("ccd", "ccsd"):
        name = choose_equations(
            method,
            closed_shell=closed_shell,
            df=df,
            open_shell=is_open_shell(system),
            name=equations,
        )
    else:  # higher ranks: spin-orbital only, shipped (ccsdt_so) or derived on demand
        name = _higher_rank_equations(method, closed_shell, df, equations)
    closed_shell, df = "_cs" in name, name.endswith("_df")
    if name.endswith("_uhf"):
        if auxbasis is not None:
            raise InputError(
                f"auxbasis={auxbasis!r} applies only to density fitting; the spin-blocked "
                f"{name!r} equations read full integrals. Pass df=True (spin-orbital DF "
                "equations) or drop auxbasis."
            )
        settings = _Settings(method, solver, batch, memory_budget, remat, verbose, solver_options)
        return _solve_spin_blocked(system, name, frozen, settings)
    settings = _Settings(method, solver, batch, memory_budget, remat, verbose, solver_options)
    ints = _integrals(system, closed_shell, df, auxbasis, frozen)
    is_blocks = isinstance(ints, BlockBuilder)
    ints_source = ints if is_blocks else None
    spin_positions = ints.spin_positions if is_blocks else None
    if system is None and not closed_shell and not is_blocks:  # the shipped, interleaved
        spin_positions = block_builder(None, spin_orbital=True, frozen=frozen).spin_positions
    spaces = ints.spaces() if is_blocks else Spaces(i=ints.nocc, a=ints.nvirt)
    text = load_equations(name) if name in available() else cc_equations(method)
    compiled = _compile(text, spaces, _RESIDUAL_OF, settings)

    if is_blocks:  # build exactly the integral blocks the two programs read
        ints = ints.build(read_blocks(compiled.residual, compiled.energy))
        integrals = {k: jnp.asarray(v) for k, v in ints.inputs().items()}
    else:
        integrals = {"f": jnp.asarray(ints.fock), "g": jnp.asarray(ints.eri)}
    d1, _ = ints.denominators()
    m1, m2 = ints.mp2_amplitudes()
    start = {T1: jnp.asarray(m1), T2: jnp.asarray(m2)}  # MP2; higher ranks start at zero
    dens = {key: _denominator(d1, key.count("a")) for key in compiled.keys}
    start = {k: start[k] if k in start else jnp.zeros(dens[k].shape) for k in compiled.keys}
    project = None if closed_shell else antisymmetrize
    result, prepared = _solve(compiled, integrals, start, dens, project, settings)
    return CCRun(
        method,
        closed_shell,
        result,
        float(ints.e_hf),
        compiled.residual,
        compiled.energy,
        ints.nocc,
        ints.nvirt,
        spin_positions,
        integrals,
        block_source=ints_source,
        equations=name,
        prepared_bytes=prepared,
        antisymmetrized_after=compiled.after,
    )


@dataclasses.dataclass(frozen=True)
class _Settings:
    """How :func:`solve_cc` was asked to compile and solve."""

    method: str
    solver: str
    batch: Any
    memory_budget: Any
    remat: bool
    verbose: bool
    solver_options: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class _Compiled:
    """The residual and energy programs of one equation set.

    ``keys``: the residuals' amplitude keys in order; ``after``: residual name → rank of
    the ``Â`` applied to the residual program's output (from triples on, ``Â`` with its
    n!² permutations is not expanded into the text the compiler factors — 36x, 576x the
    terms — but applied afterwards, :mod:`sq_jax.cc.antisymmetrizer`).
    """

    residual: Program
    energy: Program
    residual_of: Mapping[str, str]
    keys: list[str]
    after: dict[str, int]
    prepare: bool = False
    """Whether ``_solve`` prepares the residual program with the integrals."""


PREPARE_MIN_FLOPS = 1e10
"""FLOPs per iteration from which a solve prepares its residual program
(:meth:`sq_jax.Program.prepare`). The prologue's compile costs about a second
(0.5-0.9 s measured for CCSD on H2O); it saved about 10% of an iteration at
H2O/cc-pVDZ (7.9e8 FLOPs, 25 ms) and (H2O)2/cc-pVDZ (4.1e10 FLOPs, 1.1 s): a solve of
15-20 iterations gets its second back from about 1e10 FLOPs per iteration. (H2O
solves took 0.1-1.2 s longer in all when prepared.)"""


def prepared_inputs(
    residual: Program,
    equations: Sequence[Equation],
    residual_of: Mapping[str, str] = _RESIDUAL_OF,
    memory_budget: int | str | None = None,
) -> list[str]:
    """The labels a solve binds once (:meth:`~sq_jax.Program.prepare`): its integrals.

    Every tensor the residual equations read but the amplitudes (``residual_of``'s
    values) and the equations' own results, when the solve prepares ``residual``: no
    memory budget and at least :data:`PREPARE_MIN_FLOPS` per call. Otherwise none.

    Example:
        >>> import sq_jax as sq
        >>> spaces = sq.Spaces(i=2, a=3)
        >>> eqs = sq.parse("R1{a1;i1} = f{a1;i1} + g{i2,a1;a2,i1} t{a2;i2}")
        >>> prepared_inputs(sq.compile(eqs, spaces), eqs)  # too small to be worth it
        []
        >>> prepared_inputs(dataclasses.replace(sq.compile(eqs, spaces), flops=10**10), eqs)
        ['f', 'g']
    """
    if memory_budget is not None or residual.flops < PREPARE_MIN_FLOPS:
        return []
    return integral_labels(equations, residual_of)


def integral_labels(
    equations: Sequence[Equation], residual_of: Mapping[str, str] = _RESIDUAL_OF
) -> list[str]:
    """Labels the residual equations read that are neither amplitudes nor results.

    Example:
        >>> import sq_jax as sq
        >>> eqs = sq.parse("R1{a1;i1} = f{a1;i1} + g{i2,a1;a2,i1} t{a2;i2}")
        >>> integral_labels(eqs)
        ['f', 'g']
    """
    computed = {key.split("{")[0] for key in residual_of.values()}
    computed |= {eq.name for eq in equations}
    residual_eqs = [eq for eq in equations if eq.name in residual_of]
    labels = {x.label for eq in residual_eqs for x in walk(eq.rhs) if isinstance(x, Tensor)}
    return sorted(labels - computed)


def _compile(
    text: str, spaces: Spaces, residual_of: Mapping[str, str], settings: _Settings
) -> _Compiled:
    """Compile ``text``'s residuals (batched or budgeted as asked) and its energy."""
    equations, after = parse_cc_equations(text, spaces)
    residual_eqs = [eq for eq in equations if eq.name in residual_of]
    energy_eqs = [eq for eq in equations if eq.name == "E"]
    budget = {} if settings.memory_budget is None else {"memory_budget": settings.memory_budget}
    # The integrals (real orbitals) and the amplitudes have the symmetries the equation
    # files declare, so products over symmetric pairs (the ladder) run packed; their
    # derivatives stay exact (lambda, EOM and implicit differentiation read them).
    options = {"batch": settings.batch, "remat": settings.remat, "pair_symmetry": True}
    residual = compile_program(residual_eqs, spaces, **options, **budget)
    # A large program without a budget is prepared (_solve): what reads only the integrals
    # (their copies and packs) is made once, before the iterations, and packing them is
    # then free. Under a budget nothing is prepared: held copies would be memory it did
    # not plan for; below PREPARE_MIN_FLOPS the prologue costs more than a solve saves.
    fixed = prepared_inputs(residual, equations, residual_of, settings.memory_budget)
    prepare = bool(fixed)
    if prepare:
        residual = compile_program(residual_eqs, spaces, **options, fixed_inputs=fixed)
    keys = [residual_of[eq.name] for eq in residual_eqs]
    energy = compile_program(energy_eqs, spaces)
    return _Compiled(residual, energy, residual_of, keys, after, prepare)


def _solve(
    compiled: _Compiled,
    integrals: Mapping[str, Any],
    start: Mapping[str, Any],
    denominators: Mapping[str, Any],
    project: Any,
    settings: _Settings,
) -> tuple[CCResult, int]:
    """Run the solver on the two compiled programs, from ``start`` (one key per residual).

    Returns the result and the bytes the prepared residual program holds (0 when nothing
    was prepared: under a memory budget, or below :data:`PREPARE_MIN_FLOPS`).
    """
    # Each program is given only what it reads (CCD's energy has no Fock term, say).
    residual_program, energy_program = compiled.residual, compiled.energy
    fixed_r = _read_by(residual_program, integrals)
    if compiled.prepare:  # what reads only the integrals is done once
        step: Any = residual_program.prepare(fixed_r)
        prepared_bytes = step.prepared_bytes
    else:
        # the integrals cut once into the blocks the program reads: the program then runs
        # on the inputs XLA's memory was measured on under a budget (fit_to_budget), with
        # no block cut from a full tensor inside it
        forest = residual_program.schedule.annotated.forest
        fixed_r = bind_inputs(forest, fixed_r, xp=jnp, partial=True)
        step, prepared_bytes = (lambda t: residual_program({**fixed_r, **t})), 0
    fixed_e = _read_by(energy_program, integrals)
    after, residual_of = compiled.after, compiled.residual_of

    def residual_fn(t: Mapping[str, Any]) -> dict[str, Any]:
        out = step(t)
        out = {k: apply_antisymmetrizer(v, after[k]) if k in after else v for k, v in out.items()}
        return {residual_of[k]: v for k, v in out.items()}

    def energy_fn(t: Mapping[str, Any]) -> Any:
        return energy_program({**fixed_e, **_read_by(energy_program, t)})["E"]

    t0 = {k: jnp.asarray(start[k]) for k in compiled.keys}
    dens = {k: denominators[k] for k in compiled.keys}
    label, verbose, options = settings.method.upper(), settings.verbose, settings.solver_options
    if settings.solver == "diis" and settings.memory_budget is not None and "jit" not in options:
        # the iterations call the residual program as compiled for the budget (its XLA
        # memory measured, its executable kept) instead of tracing it into the solver's
        # own jit, which compiled it a second time and packed its buffers anew. H2O/
        # cc-pVDZ spin-orbital at a quarter of its memory: the first iteration took
        # 0.13 s instead of 2.2-2.5 s, the others about as long; the eager steps around
        # the program cost about 1 ms an iteration (H2O/STO-3G at half its memory:
        # 2.2-2.8 ms instead of 1.4 ms, the first 0.04 s instead of 0.94 s)
        options = {**options, "jit": False}
    if settings.solver == "diis":
        result = solve_diis(
            residual_fn, energy_fn, t0, dens, method=label, verbose=verbose, **options
        )
    else:
        result = solve_newton_krylov(
            residual_fn,
            energy_fn,
            t0,
            dens,
            project=project,
            method=label,
            verbose=verbose,
            **options,
        )
    return result, prepared_bytes


def _project_same_spin(amplitudes: Mapping[str, Any]) -> dict[str, Any]:
    """Antisymmetrize the same-spin T2 blocks; the others have no symmetry to keep."""
    same = {k: amplitudes[k] for k in (UHF_AMPLITUDES[2], UHF_AMPLITUDES[4]) if k in amplitudes}
    return {**amplitudes, **antisymmetrize(same)}


def _solve_spin_blocked(system: Any, name: str, frozen: Any, settings: _Settings) -> CCRun:
    """:func:`solve_cc` on the unrestricted spin-blocked equations (``*_uhf``)."""
    builder = spin_block_builder(system, frozen=frozen)
    compiled = _compile(load_equations(name), builder.spaces(), UHF_RESIDUAL_OF, settings)
    ints = builder.build(read_spin_blocks(compiled.residual, compiled.energy))
    integrals = {k: jnp.asarray(v) for k, v in ints.inputs().items()}
    start, dens = ints.mp2_amplitudes(), ints.denominators()
    result, prepared = _solve(compiled, integrals, start, dens, _project_same_spin, settings)
    return CCRun(
        settings.method,
        False,
        result,
        ints.e_hf,
        compiled.residual,
        compiled.energy,
        sum(builder.nocc),
        sum(builder.nvirt),
        builder.spin_positions,
        integrals,
        equations=name,
        prepared_bytes=prepared,
    )


def _check_method(method: Any) -> None:
    """Refuse a method that is neither CCD/CCSD nor a model name derive knows."""
    try:  # any model name derive knows, e.g. "ccsdtqp" or "ccdt", in lower case
        model_ranks(method)
        known = method == method.lower()
    except InputError:
        known = False
    if not known:
        raise InputError(
            f"unknown method {method!r}; expected one of {', '.join(METHODS)}, or on the "
            "spin-orbital route any lower-case 'cc' + excitation letters in increasing order "
            "(s, d, t, q, p, h), e.g. 'ccsdtqp'."
        )


def _higher_rank_equations(method: str, closed_shell: bool, df: bool, equations: str | None) -> str:
    """The equation set of a model beyond CCSD: ``{method}_so``, shipped or derived."""
    name = f"{method}_so"
    if closed_shell or df or equations not in (None, name):
        asked = f"equations={equations!r}, " if equations is not None else ""
        raise InputError(
            f"no shipped equations for {method} with {asked}closed_shell={closed_shell}, "
            f"df={df} (available: {', '.join(available())}); {method} runs on the "
            f"spin-orbital route without density fitting ({name}: closed_shell=False, "
            "df=False), derived on demand when not shipped."
        )
    return name


def _denominator(d1: Any, rank: int) -> np.ndarray:
    """D_n[a_1..a_n, i_1..i_n] = Σ_k (f_{i_k i_k} − f_{a_k a_k}) from D1[a, i]."""
    d1 = np.asarray(d1)
    total = np.zeros((d1.shape[0],) * rank + (d1.shape[1],) * rank)
    for k in range(rank):
        shape = [1] * (2 * rank)
        shape[k], shape[rank + k] = d1.shape
        total = total + d1.reshape(shape)
    return total


def ccsd(system: Any = None, **options: Any) -> CCRun:
    """CCSD: :func:`solve_cc` with ``method="ccsd"``.

    Example:
        >>> round(ccsd().e_tot, 6)
        -75.012462
    """
    return solve_cc(system, method="ccsd", **options)


def ccsdt(system: Any = None, **options: Any) -> CCRun:
    """CCSDT: :func:`solve_cc` with ``method="ccsdt"`` (spin-orbital, shipped ``ccsdt_so``).

    T3 starts at zero; its Jacobi denominator is f_ii + f_jj + f_kk − f_aa − f_bb − f_cc.

    Example:
        >>> from sq_jax.cc.integrals import default_system
        >>> from sq_jax.cc.orbitals import freeze_integrals
        >>> small = freeze_integrals(default_system(), list(range(8)))  # 2 electrons
        >>> run = ccsdt(small)
        >>> run.converged, run.result.amplitudes["t{a,a,a;i,i,i}"].shape
        (True, (4, 4, 4, 2, 2, 2))
    """
    return solve_cc(system, method="ccsdt", **options)


def ccd(system: Any = None, **options: Any) -> CCRun:
    """CCD: :func:`solve_cc` with ``method="ccd"``.

    Example:
        >>> ccd().result.converged
        True
    """
    return solve_cc(system, method="ccd", **options)
