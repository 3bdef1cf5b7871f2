"""The ``sq-jax`` command line.

Commands:

* ``sq-jax ccsd`` / ``sq-jax ccd`` — solve CC equations (the shipped H2O/STO-3G by default,
  a molecule with PySCF, or SeQuant's ``--fock``/``--eri`` files) and print the energy,
  iterations, time and peak memory;
* ``sq-jax schedule EQUATIONS --spaces i=10,a=38 --batch a=4`` — print the ordered
  schedule, its static peak and FLOPs.

Exit status: 0 success, 1 a solve (CC or the RHF) did not converge, 2 bad input. Bad input
is reported on stderr as ``sq-jax: error: `` and the whole message, never a traceback.

Example:
    >>> main(["schedule", "E = f{i1;a1} t{a1;i1}", "--spaces", "i=4,a=6", "--batch", "i=2"])
    schedule: 3 values (2 inputs), 1 loop blocks, 0 builds, 1 outputs
    root
      loop i#0 (i_1) depth 1 pass 0 Contracted x2
        output Sum v2 [] = (f{i_1;a_1} * t{a_1;i_1})
    static peak: 8 B
    predicted XLA memory: 720 B
    FLOPs: 48
    0
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._errors import SqJaxError
from .._units import format_bytes
from ._cli_args import UsageError, build_parser, check_cc_args, check_plot_path, is_file, pairs
from ._cli_system import SCFNotConverged, cc_system, molecule
from .integrals import SpinOrbitalIntegrals
from .orbitals import is_open_shell

__all__ = ["main"]


def _open_shell_equations(method: str, args: Any, system: Any) -> str | None:
    """The equations ``--spin-orbital`` asks for on a UHF/ROHF reference, else ``None``.

    The default for such a reference is the spin-blocked unrestricted set; ``None`` leaves
    the route's default. ``--triples`` takes the spin-orbital route (where (T) runs).
    """
    if (args.spin_orbital or args.triples) and is_open_shell(system):
        return f"{method}_so{'_df' if args.df else ''}"
    return None


def _plot(program, path: str | None) -> None:
    """Write the two pictures of ``program`` (peak profile, loop nest) next to ``path``."""
    if not path:
        return
    target = Path(path)
    nest = target.with_name(target.stem + "-nest.png")
    try:
        program.plot_peak_profile(target)
        program.plot_loop_nest(nest)
    except (ImportError, OSError) as err:  # checked up front; the folder may change since
        raise UsageError(f"--plot {path!r}: {err}") from err
    print(f"plots: {target} (peak profile), {nest} (loop nest)")


def _dry_run(method: str, args: argparse.Namespace) -> int:
    """Print :func:`sq_jax.cc.forecast.dry_run`'s report; 1 when ``--memory`` is not met."""
    from .df import df_from_spatial
    from .forecast import dry_run
    from .integrals import default_spatial_system

    options = {
        "method": method,
        "closed_shell": bool(args.closed_shell),
        "batch": pairs(args.batch, "--batch") if args.batch else None,
        "memory_budget": args.memory,
        **_df_options(args),
    }
    if args.molecule:
        mol, label = molecule(args)
        report = dry_run(mol, label=label, **options)
    else:  # the shipped system's sizes (its stored integrals are not used)
        shipped = default_spatial_system()
        # --df factorizes the shipped integrals exactly (the driver's own factors).
        naux = df_from_spatial(shipped).naux if args.df else None
        label = "H2O/STO-3G (shipped)"
        report = dry_run(nocc=shipped.nocc, nvirt=shipped.nvirt, naux=naux, label=label, **options)
    print(report)
    return 1 if report.fits is False else 0


def _df_options(args: argparse.Namespace) -> dict:
    """``df`` and ``auxbasis`` for the driver (checked by ``check_cc_args``)."""
    return {"df": True, "auxbasis": args.auxbasis} if args.df else {}


def _print_step(step: str) -> None:
    print(f"budget: {step}", flush=True)


def _run_cc(method: str, args: argparse.Namespace) -> int:
    from ..budget import budget_steps
    from . import drivers

    check_cc_args(args)
    if args.dry_run:
        return _dry_run(method, args)
    batch = pairs(args.batch, "--batch") if args.batch else None
    system, name, closed_shell = cc_system(args)
    start = time.perf_counter()
    # a budgeted compile searches plans and has XLA measure them (seconds to minutes at
    # real sizes) before the first iteration: each step a line, as it happens
    show = args.memory is not None and not args.quiet
    with budget_steps(_print_step if show else None) as fitting:
        run = drivers.solve_cc(
            system,
            method=method,
            closed_shell=closed_shell,
            solver=args.solver,
            batch=batch,
            memory_budget=args.memory,
            verbose=not args.quiet,
            max_iter=args.max_iter,
            frozen=args.frozen,
            equations=_open_shell_equations(method, args, system),
            **_df_options(args),
        )
    seconds = time.perf_counter() - start
    res = run.result
    kind = "unrestricted (spin-blocked)" if run.spin_blocked else "spin-orbital"
    basis = ("closed-shell" if closed_shell else kind) + (", DF" if args.df else "")
    # Spin-orbital integrals from files freeze spin-orbitals; everything else, spatial ones.
    per = "" if isinstance(system, SpinOrbitalIntegrals) else " per spin"
    frozen = f" ({args.frozen} frozen{per})" if args.frozen else ""
    print(f"{method.upper()} on {name}, {basis}: {run.nocc} occupied{frozen}, {run.nvirt} virtual")
    print(f"E(HF)              = {run.e_hf:.12f}")
    print(f"E_corr({method.upper()})       = {run.e_corr:.12f}")
    print(f"E({method.upper()})            = {run.e_tot:.12f}")
    if args.fock is not None and args.e_nuc is None:
        print("                     (electronic energies: the files carry no nuclear repulsion;")
        print("                      add it with --e-nuc)")
    print(f"iterations         = {res.iterations} ({res.message})")
    if fitting.seconds:  # the program was compiled while fitting the plan to the budget
        print(
            f"time               = {seconds:.2f} s (fitting the memory budget "
            f"{fitting.seconds:.2f} s, first iteration {res.timings.first_iteration:.2f} s)"
        )
    else:
        print(
            f"time               = {seconds:.2f} s (first iteration incl. compile "
            f"{res.timings.first_iteration:.2f} s)"
        )
    prog = run.residual_program
    print(
        f"memory             = {format_bytes(prog.memory_bytes)} predicted (XLA temporaries"
        f" + outputs; inputs not counted), {format_bytes(prog.peak_bytes)} peak profile"
    )
    if run.prepared_bytes:
        print(
            f"                     {format_bytes(run.prepared_bytes)} held through the solve by "
            "integral copies made once"
        )
    if args.triples:
        _triples(run, batch, args.memory)
    _plot(prog, args.plot)
    return 0 if res.converged else 1


def _triples(run, batch: dict | None, memory: str | None) -> None:
    """Compute and print (T) on the converged amplitudes (``--triples``)."""
    from .triples import ccsd_t, triples_orbits, triples_program

    start = time.perf_counter()
    if batch is None:  # orbits of block triples: memory-bounded at unbatched FLOPs
        program = triples_orbits(run, memory_budget=memory)  # None: the default budget
        kind = "virtual" if program.space == "a" else "occupied"
        loops = (
            f"{program.orbit_count} orbits of blocks of {program.block} {kind} orbitals "
            f"on {program.workers} worker{'s' if program.workers > 1 else ''}"
        )
    else:
        program = triples_program(run, batch=batch)
        loops = f"{len(program.lowered.loops())} loops"
    e_t = ccsd_t(run, program=program)
    seconds = time.perf_counter() - start
    print(f"E(T)               = {e_t:.12f}")
    print(f"E(CCSD(T))         = {run.e_tot + e_t:.12f}")
    print(
        f"(T) time           = {seconds:.2f} s incl. compile; {loops}, memory "
        f"{format_bytes(program.memory_bytes)} predicted"
    )


def _equation_text(argument: str) -> str:
    """The equations named by ``schedule``'s argument: a shipped set, a file, or text.

    An argument that names no shipped set and no existing file must be equation text,
    which always contains ``=``; anything else (a mistyped set name or path) is an error.
    """
    from .equations import available, load_equations

    if argument in available():
        return load_equations(argument)
    if is_file(argument):
        try:
            return Path(argument).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise UsageError(f"cannot read the equations file {argument!r}: {err}") from err
    if "=" not in argument:
        raise UsageError(
            f"{argument!r} is not a shipped equation set ({', '.join(available())}), not an "
            "existing file, and not equation text (which contains '=', e.g. "
            "'E = f{i1;a1} t{a1;i1}')"
        )
    return argument


def _run_schedule(args: argparse.Namespace) -> int:
    from .._pipeline import compile as compile_program
    from ..expr.spaces import Spaces

    check_plot_path(args.plot)
    text = _equation_text(args.equations)
    extents = pairs(args.spaces, "--spaces")
    spaces = Spaces(**extents)
    batch = pairs(args.batch, "--batch") if args.batch else None
    program = compile_program(text, spaces, batch=batch, memory_budget=args.memory)
    print(program.schedule)
    print(f"static peak: {format_bytes(program.peak_bytes)}")
    print(f"predicted XLA memory: {format_bytes(program.memory_bytes)}")
    print(f"FLOPs: {program.flops}")
    _plot(program, args.plot)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``sq-jax`` command; returns the exit status.

    Errors go to stderr as ``sq-jax: error: `` followed by the whole message (bulleted
    messages keep their bullets).

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).

    Returns:
        0 on success (and for ``--help``), 1 when the CC equations or the RHF did not
        converge, 2 for bad input.

    Example:
        >>> import contextlib, sys
        >>> with contextlib.redirect_stderr(sys.stdout):
        ...     main(["schedule", "E = f{i1;i1}", "--spaces", "i=two"])
        sq-jax: error: --spaces expects space=count pairs such as 'a=4,i=2'; got 'i=two'
        2
    """
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as done:  # --help printed its text
            return done.code if isinstance(done.code, int) else 0
        if args.command == "schedule":
            return _run_schedule(args)
        return _run_cc(args.command, args)
    except (UsageError, SqJaxError) as err:
        message = str(err).strip() or type(err).__name__
        print(f"sq-jax: error: {message}", file=sys.stderr)
        return 1 if isinstance(err, SCFNotConverged) else 2


def entry_point() -> None:
    """Console-script entry: exit with :func:`main`'s status."""
    sys.exit(main())
