"""The ``sq-jax`` command line.

Commands:

* ``sq-jax ccsd`` / ``sq-jax ccd`` — solve CC equations (the shipped H2O/STO-3G by default,
  or a molecule with PySCF) and print the energy, iterations, time and peak memory;
* ``sq-jax schedule EQUATIONS --spaces i=10,a=38 --batch a=4`` — print the ordered
  schedule, its static peak and FLOPs.

Bad arguments give a one-line error and exit status 2, never a traceback.

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

from .._errors import SqJaxError
from .._units import format_bytes

__all__ = ["main"]

# H2O as in BENCHMARKS.md (Å).
MOLECULES = {
    "h2o": "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692",
}


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise _UsageError(message)


def _pairs(text: str, what: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise _UsageError(f"{what} expects space=count pairs such as 'a=4,i=2'; got {item!r}")
        out[key.strip()] = int(value)
    return out


_PLOT_HELP = "write the static peak profile to FILE.png and the loop nest to FILE-nest.png"


def _plot(program, path: str | None) -> None:
    """Write the two pictures of ``program`` (peak profile, loop nest) next to ``path``."""
    if not path:
        return
    target = Path(path)
    if target.suffix.lower() != ".png":
        raise _UsageError(f"--plot expects a .png file name, got {path!r}")
    nest = target.with_name(target.stem + "-nest.png")
    try:
        program.plot_peak_profile(target)
        program.plot_loop_nest(nest)
    except ImportError as err:
        raise _UsageError(str(err)) from err
    print(f"plots: {target} (peak profile), {nest} (loop nest)")


def _build_parser() -> _Parser:
    parser = _Parser(prog="sq-jax", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for method in ("ccsd", "ccd"):
        p = sub.add_parser(method, help=f"solve {method.upper()} and print the energy")
        p.add_argument(
            "--molecule",
            help="'h2o' or an .xyz file (needs PySCF); default: the shipped H2O/STO-3G integrals",
        )
        p.add_argument("--basis", default="sto-3g", help="basis set with --molecule")
        shell = p.add_mutually_exclusive_group()
        shell.add_argument(
            "--closed-shell",
            action="store_true",
            help="spin-adapted equations over spatial orbitals",
        )
        shell.add_argument(
            "--spin-orbital", action="store_true", help="spin-orbital equations (the default)"
        )
        p.add_argument("--batch", help="batch plan, e.g. a=4,i=2 (number of batches)")
        p.add_argument("--memory", help="memory budget for intermediates, e.g. '512 MiB'")
        p.add_argument("--solver", choices=("diis", "newton"), default="diis")
        p.add_argument("--max-iter", type=int, default=100)
        p.add_argument("--quiet", action="store_true", help="no per-iteration lines")
        p.add_argument("--plot", metavar="FILE.png", help=_PLOT_HELP)
    s = sub.add_parser("schedule", help="print the ordered schedule of equations")
    s.add_argument(
        "equations",
        help="equation text, a file of equations, or a shipped set name such as ccsd_so",
    )
    s.add_argument("--spaces", required=True, help="extents, e.g. i=10,a=38")
    s.add_argument("--batch", default="", help="batch plan, e.g. a=4")
    s.add_argument("--memory", help="memory budget for intermediates, e.g. '512 MiB'")
    s.add_argument("--plot", metavar="FILE.png", help=_PLOT_HELP)
    return parser


def _system(args: argparse.Namespace, closed_shell: bool):
    if not args.molecule:
        return None, "H2O/STO-3G (shipped)"
    try:
        from pyscf import gto, scf
    except ImportError as err:
        raise _UsageError("--molecule needs PySCF: pip install 'sq_jax[chem]'") from err
    atoms = MOLECULES.get(args.molecule.lower())
    if atoms is None:
        path = Path(args.molecule)
        if not path.is_file():
            raise _UsageError(
                f"--molecule {args.molecule!r} is neither a known name "
                f"({', '.join(MOLECULES)}) nor an .xyz file"
            )
        lines = path.read_text().splitlines()
        atoms = "; ".join(line.strip() for line in lines[2:] if line.strip())
    mol = gto.M(atom=atoms, basis=args.basis, verbose=0)
    mf = scf.RHF(mol).run(conv_tol=1e-12)
    return mf, f"{args.molecule}/{args.basis}"


def _run_cc(method: str, args: argparse.Namespace) -> int:
    from . import drivers

    closed_shell = bool(args.closed_shell)
    system, name = _system(args, closed_shell)
    batch = _pairs(args.batch, "--batch") if args.batch else None
    start = time.perf_counter()
    run = drivers.solve_cc(
        system,
        method=method,
        closed_shell=closed_shell,
        solver=args.solver,
        batch=batch,
        memory_budget=args.memory,
        verbose=not args.quiet,
        max_iter=args.max_iter,
    )
    seconds = time.perf_counter() - start
    res = run.result
    basis = "closed-shell" if closed_shell else "spin-orbital"
    print(f"{method.upper()} on {name}, {basis}: {run.nocc} occupied, {run.nvirt} virtual")
    print(f"E(HF)              = {run.e_hf:.12f}")
    print(f"E_corr({method.upper()})       = {run.e_corr:.12f}")
    print(f"E({method.upper()})            = {run.e_tot:.12f}")
    print(f"iterations         = {res.iterations} ({res.message})")
    print(
        f"time               = {seconds:.2f} s (first iteration incl. compile "
        f"{res.timings.first_iteration:.2f} s)"
    )
    prog = run.residual_program
    print(
        f"memory             = {format_bytes(prog.memory_bytes)} predicted (XLA temporaries"
        f" + outputs; inputs not counted), {format_bytes(prog.peak_bytes)} peak profile"
    )
    _plot(prog, args.plot)
    return 0 if res.converged else 1


def _run_schedule(args: argparse.Namespace) -> int:
    from .._pipeline import compile as compile_program
    from ..expr.spaces import Spaces
    from .equations import available, load_equations

    text = args.equations
    if text in available():
        text = load_equations(text)
    elif Path(text).is_file():
        text = Path(text).read_text()
    extents = _pairs(args.spaces, "--spaces")
    spaces = Spaces(**{k: v for k, v in extents.items()})
    batch = _pairs(args.batch, "--batch") if args.batch else None
    program = compile_program(text, spaces, batch=batch, memory_budget=args.memory)
    print(program.schedule)
    print(f"static peak: {format_bytes(program.peak_bytes)}")
    print(f"predicted XLA memory: {format_bytes(program.memory_bytes)}")
    print(f"FLOPs: {program.flops}")
    _plot(program, args.plot)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``sq-jax`` command; returns the exit status.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).

    Returns:
        0 on success, 1 when a solve did not converge, 2 for bad input.

    Example:
        >>> main(["schedule", "E = f{i1;i1}", "--spaces", "i=two"])
        sq-jax: error: --spaces expects space=count pairs such as 'a=4,i=2'; got 'i=two'
        2
    """
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "schedule":
            return _run_schedule(args)
        return _run_cc(args.command, args)
    except (_UsageError, SqJaxError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"sq-jax: error: {first}", file=sys.stdout)
        return 2


def entry_point() -> None:
    """Console-script entry: exit with :func:`main`'s status."""
    sys.exit(main())
