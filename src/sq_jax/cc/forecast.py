"""A dry run of a coupled-cluster calculation: will it fit, and how long will it take?

:func:`dry_run` answers before any SCF or integral exists. From the sizes alone — the
occupied and virtual orbital counts (and the auxiliary count for density fitting), read
from a PySCF molecule without running anything, or given as numbers — it builds the same
residual and energy programs as :func:`sq_jax.cc.solve_cc` would (parse, forest, batch
plan, schedule, lowering: no XLA compilation, no arrays), and reports the batch plan, the
predicted memory, the FLOPs of one iteration and an estimated time per iteration at a
float64 GEMM rate measured on the spot (:func:`measure_gemm_rate`).

A memory budget that no plan meets is an answer, not an error: the report says "does not
fit", gives the smallest feasible budget, and describes the smallest-memory plan.

Example:
    >>> report = dry_run(nocc=5, nvirt=19, closed_shell=True, gemm_rate=1e10)
    >>> report.nocc, report.nvirt, report.equations, str(report.plan)
    (5, 19, 'ccsd_cs', 'BatchPlan()')
    >>> report.seconds_per_iteration == report.flops_per_iteration / 1e10
    True
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from .._errors import InputError, MemoryBudgetError
from .._pipeline import compile as compile_program
from .._units import format_bytes, parse_bytes
from ..budget import XLA_HEADROOM, plan_for_budget, required_bytes
from ..expr.spaces import Spaces
from ..forest.build import build_forest
from ..forest.inputs import input_specs
from ..lower.program import Program
from ..plan.batch import BatchPlan
from .antisymmetrizer import parse_cc_equations
from .drivers import prepared_inputs
from .equations import available, load_equations

__all__ = ["DryRunReport", "dry_run", "measure_gemm_rate"]

_ITEMSIZE = 8  # float64


@dataclasses.dataclass(frozen=True)
class DryRunReport:
    """What a coupled-cluster run would need, predicted from the sizes alone.

    Memory figures are those of the residual program (the energy program is tiny and
    runs after it); like ``memory_budget``, they count what the program allocates, not
    its inputs (``input_bytes``).

    Attributes:
        system: what was sized (``"C6H6/cc-pvdz"``, or ``"sizes"`` for plain numbers).
        method: ``"ccsd"``, ``"ccd"`` or ``"ccsdt"`` (a shipped equation set).
        closed_shell: spin-adapted equations over spatial orbitals (else spin-orbitals).
        equations: the shipped equation set (``"ccsd_cs"``, ``"ccsd_so"`` …).
        nocc: extent of the occupied space ``i`` (spin-orbitals for spin-orbital runs).
        nvirt: extent of the virtual space ``a``.
        naux: extent of the auxiliary space ``Κ`` (density fitting), else ``None``.
        memory_budget: the budget in bytes, or ``None``.
        fits: whether ``plan`` fits ``memory_budget`` (``None``: no budget given).
        plan: the batch plan chosen (or given); when nothing fits, the plan of the
            smallest memory found, which the other figures then describe.
        memory_bytes: the residual program's predicted XLA temporaries + outputs
            (``Program.memory_bytes``).
        required_bytes: the smallest budget ``plan`` fits in (the larger of
            ``memory_bytes`` × :data:`~sq_jax.budget.XLA_HEADROOM` and the peak).
        peak_bytes: the static peak of the schedule's peak profile.
        unbatched_required_bytes: the budget the unbatched program needs.
        smallest_feasible_bytes: when nothing fits, the smallest budget any plan needs.
        input_bytes: the integral and amplitude blocks the programs read (not counted
            in the budget; the driver holds the full integral tensors, which may be more).
        flops_per_iteration: static FLOPs of one residual and one energy evaluation.
        gemm_rate: the float64 GEMM rate used for the estimate, FLOP/s.
        message: when nothing fits, the planner's explanation, else ``""``.
    """

    system: str
    method: str
    closed_shell: bool
    equations: str
    nocc: int
    nvirt: int
    naux: int | None
    memory_budget: int | None
    fits: bool | None
    plan: BatchPlan
    memory_bytes: int
    required_bytes: int
    peak_bytes: int
    unbatched_required_bytes: int
    smallest_feasible_bytes: int | None
    input_bytes: int
    flops_per_iteration: int
    gemm_rate: float
    message: str = ""

    @property
    def seconds_per_iteration(self) -> float:
        """FLOPs per iteration at the GEMM rate: a lower bound on the time per iteration.

        sq_jax's CCSD programs reached 0.2-0.6 of the plain matmul rate in
        ``bench/`` (many small contractions, copies, loop overhead).
        """
        return self.flops_per_iteration / self.gemm_rate

    def __str__(self) -> str:
        orbitals = "spatial orbitals" if self.closed_shell else "spin-orbitals"
        kind = "closed-shell" if self.closed_shell else "spin-orbital"
        sizes = f"o = {self.nocc}, v = {self.nvirt}"
        if self.naux is not None:
            sizes += f", naux = {self.naux}"
        lines = [
            f"{self.method.upper()} dry run on {self.system}, {kind} ({self.equations});"
            " no SCF, no integrals",
            f"sizes      {sizes} ({orbitals})",
            f"budget     {self._budget_line()}",
            f"plan       {self.plan}",
            f"memory     {format_bytes(self.memory_bytes)} predicted (XLA temporaries + "
            f"outputs of the residual program), {format_bytes(self.required_bytes)} with "
            f"{XLA_HEADROOM:g}x headroom, {format_bytes(self.peak_bytes)} peak profile",
            f"unbatched  needs {format_bytes(self.unbatched_required_bytes)}",
            f"inputs     {format_bytes(self.input_bytes)} of integral and amplitude blocks "
            f"(not in the budget; {format_bytes(self.input_bytes + self.required_bytes)} "
            "with the program's)",
            f"FLOPs      {self.flops_per_iteration:.4g} per iteration (residuals + energy)",
            f"GEMM rate  {self.gemm_rate / 1e9:.3g} GFLOP/s (float64 matmul)",
            f"time       >= {self.seconds_per_iteration:.3g} s per iteration (FLOPs / GEMM "
            "rate; sq_jax reaches 0.2-0.6 of it)",
        ]
        return "\n".join(lines)

    def _budget_line(self) -> str:
        if self.memory_budget is None:
            return "none given"
        budget = format_bytes(self.memory_budget)
        if self.fits:
            return f"{budget}: fits"
        if self.smallest_feasible_bytes is None:  # a given plan, or nothing schedulable
            why = self.message.strip().splitlines()[0] if self.message.strip() else ""
            return f"{budget}: does not fit: " + (
                why or f"this plan needs {format_bytes(self.required_bytes)}"
            )
        return (
            f"{budget}: does not fit: smallest feasible budget "
            f"{format_bytes(self.smallest_feasible_bytes)} "
            f"({self.smallest_feasible_bytes} bytes); the figures below are for that plan"
        )


_GEMM_SIZES = (256, 512, 1024, 2048, 4096, 8192)
_GEMM_MIN_CALL_S = 0.01  # below this a call measures dispatch, not arithmetic (GPUs)


def measure_gemm_rate(n: int | None = None, seconds: float = 0.2) -> float:
    """The float64 matrix-multiply rate of JAX's default device, measured now, FLOP/s.

    Times ``a @ a`` on ``n`` × ``n`` matrices (``2 n³`` FLOPs) repeatedly for about
    ``seconds`` after a warm-up call, and returns the rate of the median call. Without
    ``n``, the size doubles from 256 until one call takes 10 ms (at most 8192), so
    that a fast device is timed on arithmetic rather than on dispatch overhead.

    Args:
        n: the matrix size, or ``None`` to choose it as above.
        seconds: how long to keep timing.

    Returns:
        FLOPs per second.

    Example:
        >>> measure_gemm_rate(n=64, seconds=0.01) > 0
        True
    """
    import jax
    import jax.numpy as jnp

    matmul = jax.jit(jnp.matmul)

    def call(a: Any) -> float:
        start = time.perf_counter()
        matmul(a, a).block_until_ready()
        return time.perf_counter() - start

    for size in (n,) if n else _GEMM_SIZES:
        a = jnp.ones((size, size), dtype=jnp.float64)
        call(a)  # compile outside the timing
        if call(a) >= _GEMM_MIN_CALL_S:
            break
    times = [call(a)]
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        times.append(call(a))
    median = sorted(times)[len(times) // 2]
    return 2 * a.shape[0] ** 3 / max(median, 1e-9)


def _formula(mol: Any) -> str:
    """Hill order: C, then H, then the rest alphabetically (all alphabetical without C)."""
    counts = Counter(mol.atom_pure_symbol(k) for k in range(mol.natm))
    first = ("C", "H") if "C" in counts else ()
    order = [el for el in first if el in counts] + sorted(set(counts) - set(first))
    return "".join(f"{el}{counts[el] if counts[el] > 1 else ''}" for el in order)


def _build_mol(atom: str, basis: Any) -> Any:
    try:
        from pyscf import gto
    except ImportError as err:
        raise InputError(
            "sizing a molecule needs PySCF: pip install 'sq_jax[chem]', or give the sizes "
            "(nocc=, nvirt=, naux=)."
        ) from err
    if basis is None:
        raise InputError(f"molecule {atom!r} given without a basis; pass basis='cc-pvdz' …")
    try:
        return gto.M(atom=atom, basis=basis, verbose=0)
    except Exception as err:  # PySCF raises RuntimeError, KeyError … for bad atoms/bases
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(
            f"PySCF could not build molecule {atom!r} with basis {basis!r}: {first}"
        ) from err


def _molecule_sizes(
    molecule: Any, basis: Any, df: bool, auxbasis: Any
) -> tuple[str, int, int, int | None]:
    """(name, occupied, virtual, auxiliary) spatial counts of a molecule; nothing run."""
    mol = _build_mol(molecule, basis) if isinstance(molecule, str) else molecule
    if not all(hasattr(mol, a) for a in ("nao_nr", "nelectron", "spin")):
        raise InputError(
            f"molecule must be a pyscf.gto.Mole or atom text such as 'H 0 0 0; H 0 0 0.74'; "
            f"got {type(molecule).__name__}."
        )
    if mol.spin != 0 or mol.nelectron % 2:
        raise InputError(
            f"the CC drivers need a closed-shell (RHF) reference; the molecule has "
            f"{mol.nelectron} electrons and spin {mol.spin}. Change the charge or spin."
        )
    nocc = mol.nelectron // 2
    nvirt = mol.nao_nr() - nocc  # PySCF's RHF keeps every AO combination as an orbital
    naux = None
    if df:
        from pyscf import df as pyscf_df

        # The auxiliary basis df_integrals uses: the given one, else PySCF's default.
        try:
            naux = pyscf_df.make_auxmol(mol, auxbasis).nao_nr()
        except Exception as err:  # PySCF's BasisNotFoundError, KeyError …
            raise InputError(
                f"PySCF could not build auxiliary basis {auxbasis!r} for {_formula(mol)}: "
                f"{str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__}"
            ) from err
    name = f"{_formula(mol)}/{mol.basis}" if isinstance(mol.basis, str) else _formula(mol)
    return name, nocc, nvirt, naux


def _equation_set(method: str, closed_shell: bool, df: bool) -> str:
    name = f"{method}_{'cs' if closed_shell else 'so'}{'_df' if df else ''}"
    if name not in available():
        raise InputError(
            f"no shipped equations for method={method!r}, closed_shell={closed_shell}, "
            f"df={df} (available: {', '.join(available())}); density fitting needs "
            "method='ccsd'."
        )
    return name


def _positive(**counts: Any) -> None:
    for key, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{key} must be a positive int, got {value!r}.")


def _input_bytes(*programs: Program) -> int:
    blocks = {}
    for program in programs:
        for spec in input_specs(program.schedule.annotated.forest):
            blocks[spec.block_key] = math.prod(spec.shape)
    return _ITEMSIZE * sum(blocks.values())


def dry_run(
    molecule: Any = None,
    basis: Any = None,
    *,
    nocc: int | None = None,
    nvirt: int | None = None,
    naux: int | None = None,
    method: str = "ccsd",
    closed_shell: bool = False,
    df: bool = False,
    auxbasis: Any = None,
    batch: BatchPlan | Mapping[str, Any] | None = None,
    memory_budget: int | str | None = None,
    gemm_rate: float | None = None,
    label: str | None = None,
) -> DryRunReport:
    """Predict the plan, memory, FLOPs and time per iteration of a CC run, from sizes.

    Give either a molecule (sized with PySCF, no SCF) or the counts ``nocc``/``nvirt``
    (and ``naux`` with ``df``). Counts are of *spatial* orbitals of a closed-shell
    reference; spin-orbital equations use twice as many.

    Args:
        molecule: a ``pyscf.gto.Mole``, or atom text (``"O 0 0 0; H 0 0.76 -0.47; …"``)
            built with ``basis``.
        basis: the orbital basis for atom text.
        nocc: doubly occupied orbitals (instead of a molecule).
        nvirt: virtual orbitals (instead of a molecule).
        naux: auxiliary functions, with ``df`` and counts.
        method: ``"ccsd"``, ``"ccd"`` or ``"ccsdt"`` (a shipped equation set).
        closed_shell: the spin-adapted equations (as :func:`sq_jax.cc.solve_cc`).
        df: the density-fitted closed-shell equations (``ccsd_cs_df``).
        auxbasis: the auxiliary basis for ``df`` with a molecule; default PySCF's choice
            for the orbital basis, as :func:`sq_jax.cc.df.df_integrals`.
        batch: a fixed batch plan (with ``memory_budget``: checked against it).
        memory_budget: bytes or text (``"8 GiB"``) for what the residual program
            allocates; without ``batch``, the planner chooses the plan.
        gemm_rate: FLOP/s for the time estimate; ``None`` measures it now
            (:func:`measure_gemm_rate`, about 0.3 s).
        label: the system's name in the report (default: formula/basis, or "sizes").

    Returns:
        The :class:`DryRunReport`; ``str(report)`` is a readable summary.

    Raises:
        InputError: no or conflicting sizes, a bad molecule, or no equation set for
            the method and options.
        PlanError: a bad batch plan or budget text.

    Example:
        >>> r = dry_run(nocc=2, nvirt=5, method="ccd", memory_budget="2 kB", gemm_rate=1e9)
        >>> r.nocc, r.nvirt, r.fits, r.smallest_feasible_bytes > 2000
        (4, 10, False, True)
        >>> print(str(r).splitlines()[2][:52])
        budget     1.95 KiB: does not fit: smallest feasible
    """
    name = _equation_set(method, closed_shell, df)
    if gemm_rate is not None and (
        isinstance(gemm_rate, bool)
        or not isinstance(gemm_rate, int | float)
        or not 0 < gemm_rate < math.inf
    ):
        raise InputError(f"gemm_rate must be a positive number of FLOP/s, got {gemm_rate!r}.")
    if molecule is not None:
        if nocc is not None or nvirt is not None or naux is not None:
            raise InputError("give a molecule or the counts nocc/nvirt/naux, not both.")
        system, nocc, nvirt, naux = _molecule_sizes(molecule, basis, df, auxbasis)
    else:
        if nocc is None or nvirt is None:
            raise InputError("dry_run needs a molecule, or both nocc= and nvirt=.")
        _positive(nocc=nocc, nvirt=nvirt)
        if df:
            if naux is None:
                raise InputError("df=True with counts needs naux= (auxiliary functions).")
            _positive(naux=naux)
        elif naux is not None:
            raise InputError(f"naux={naux!r} is only used with df=True.")
        system = "sizes"
    if not closed_shell:
        nocc, nvirt = 2 * nocc, 2 * nvirt
    spaces = Spaces(i=nocc, a=nvirt) if naux is None else Spaces({"Κ": naux}, i=nocc, a=nvirt)
    equations, _ = parse_cc_equations(load_equations(name), spaces)  # as solve_cc does
    residual_eqs = [eq for eq in equations if eq.name != "E"]
    energy = compile_program([eq for eq in equations if eq.name == "E"], spaces)
    unbatched = compile_program(residual_eqs, spaces, pair_symmetry=True)
    budget = None if memory_budget is None else parse_bytes(memory_budget)
    smallest, message = None, ""
    if batch is not None:  # the given plan; a budget is only checked
        program = compile_program(residual_eqs, spaces, batch=batch, pair_symmetry=True)
    elif budget is not None:  # the planner's choice, by the model with its headroom: a run
        # first tries a cheaper plan the model fits without it, kept when XLA's figures
        # confirm it (budget.fit_to_budget); that needs an XLA compile, a dry run has none
        try:  # on the forest compile() plans on: the declared symmetries trusted
            forest = dataclasses.replace(build_forest(residual_eqs, spaces), pair_symmetry=True)
            plan = plan_for_budget(forest, budget)
            program = compile_program(residual_eqs, spaces, batch=plan, pair_symmetry=True)
        except MemoryBudgetError as err:
            message = str(err)
            smallest = getattr(err, "smallest_feasible", None)
            floor = getattr(err, "plan", None)
            program = (
                unbatched
                if floor is None
                else compile_program(residual_eqs, spaces, batch=floor, pair_symmetry=True)
            )
    else:
        program = unbatched
    # a solve without a budget binds the integrals once from PREPARE_MIN_FLOPS up: packing
    # them is then free (drivers.prepared_inputs), and the dry run prices what runs
    fixed = prepared_inputs(program, equations, memory_budget=budget)
    if fixed:
        plan = program.schedule.annotated.plan
        program = compile_program(
            residual_eqs, spaces, batch=plan, pair_symmetry=True, fixed_inputs=fixed
        )
    need = required_bytes(program.schedule)
    return DryRunReport(
        system=label or system,
        method=method,
        closed_shell=closed_shell,
        equations=name,
        nocc=nocc,
        nvirt=nvirt,
        naux=naux,
        memory_budget=budget,
        fits=None if budget is None else (not message and need <= budget),
        plan=program.schedule.annotated.plan,
        memory_bytes=program.memory_bytes,
        required_bytes=need,
        peak_bytes=program.peak_bytes,
        unbatched_required_bytes=required_bytes(unbatched.schedule),
        smallest_feasible_bytes=smallest,
        input_bytes=_input_bytes(program, energy),
        flops_per_iteration=program.flops + energy.flops,
        gemm_rate=measure_gemm_rate() if gemm_rate is None else float(gemm_rate),
        message=message,
    )
