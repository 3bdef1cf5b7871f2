"""Argument parsing and up-front checks of the ``sq-jax`` command line.

Every option of the CC commands is declared in :func:`add_cc_options`, and every rule
that ties options together (``--basis`` needs ``--molecule``, ...) in
:func:`check_cc_args`, so a new option is two short edits in one file. Everything here
runs before any real work; a violation raises :class:`UsageError`, which the CLI prints
as ``sq-jax: error: ...`` on stderr with exit status 2.

Example:
    >>> args = build_parser().parse_args(["ccsd", "--basis", "cc-pvdz"])
    >>> try:
    ...     check_cc_args(args)
    ... except UsageError as err:
    ...     print(str(err).split(";")[0])
    --basis needs --molecule (the default system is the shipped H2O/STO-3G)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
from pathlib import Path

__all__ = [
    "UsageError",
    "add_cc_options",
    "build_parser",
    "check_cc_args",
    "check_plot_path",
    "is_file",
    "pairs",
]

PLOT_HELP = "write the static peak profile to FILE.png and the loop nest to FILE-nest.png"
_PAIR = re.compile(r"\s*([^=]*?)\s*=\s*(-?[0-9]+)\s*")


class UsageError(Exception):
    """A bad command line: printed as one message, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise UsageError(message)


def is_file(text: str) -> bool:
    r"""Whether ``text`` names an existing regular file (False for names the OS refuses).

    Example:
        >>> is_file("no/such/file.txt"), is_file("bad\0name")
        (False, False)
    """
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # a NUL byte, a name too long for the file system
        return False


def pairs(text: str, what: str) -> dict[str, int]:
    """Read ``space=count`` pairs such as ``"a=4,i=2"``.

    Raises:
        UsageError: for an item that is not ``name=integer``.

    Example:
        >>> pairs("a=4, i=2", "--batch")
        {'a': 4, 'i': 2}
    """
    out: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        match = _PAIR.fullmatch(item)
        if match is None:
            raise UsageError(f"{what} expects space=count pairs such as 'a=4,i=2'; got {item!r}")
        out[match.group(1)] = int(match.group(2))
    return out


def _positive_int(text: str) -> int:
    if not re.fullmatch(r"\s*[0-9]+\s*", text) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _count(text: str) -> int:
    if not re.fullmatch(r"\s*[0-9]+\s*", text):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _integer(text: str) -> int:
    if not re.fullmatch(r"\s*[-+]?[0-9]+\s*", text):
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(text)


def check_plot_path(path: str | None) -> None:
    """Refuse a ``--plot`` target that could not be written, before any work is done.

    Raises:
        UsageError: for a name not ending in ``.png``, a folder that does not exist or is
            not writable, a target that is a folder, or no matplotlib.

    Example:
        >>> try:
        ...     check_plot_path("/no/such/folder/p.png")
        ... except UsageError as err:
        ...     print(str(err).split(";")[0])
        --plot '/no/such/folder/p.png': the folder '/no/such/folder' does not exist
    """
    if path is None:
        return
    target = Path(path)
    if target.suffix.lower() != ".png":
        raise UsageError(f"--plot expects a .png file name, got {path!r}")
    folder = target.parent
    try:
        exists, writable = folder.is_dir(), os.access(folder, os.W_OK)
        is_dir = target.is_dir()
    except (OSError, ValueError) as err:
        raise UsageError(f"--plot {path!r}: not a usable file name ({err})") from err
    if not exists:
        raise UsageError(
            f"--plot {path!r}: the folder '{folder}' does not exist; create it or choose "
            "another file name"
        )
    if not writable or is_dir:
        why = "is a folder" if is_dir else f"cannot be written (folder '{folder}' is read-only)"
        raise UsageError(f"--plot {path!r} {why}; choose another file name")
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--plot needs matplotlib: pip install 'sq_jax[viz]'")


def add_cc_options(p: argparse.ArgumentParser) -> None:
    """Declare the options of ``sq-jax ccsd`` / ``sq-jax ccd`` (the one place for them).

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_cc_options(parser)
        >>> parser.parse_args(["--fock", "f.dat", "--eri", "g.dat", "--closed-shell"]).eri
        'g.dat'
    """
    system = p.add_argument_group("system (default: the shipped H2O/STO-3G integrals)")
    system.add_argument(
        "--molecule",
        metavar="NAME|FILE.xyz",
        help="'h2o' or a standard .xyz file (atom count, comment, Symbol x y z in Å); "
        "runs RHF with PySCF",
    )
    system.add_argument("--basis", help="basis set for --molecule (default sto-3g)")
    system.add_argument("--charge", type=_integer, help="molecular charge for --molecule")
    system.add_argument(
        "--spin",
        type=_count,
        help="2S = Nα − Nβ for --molecule, as PySCF's spin (default 0); above 0 the "
        "reference is UHF, on the spin-blocked unrestricted route (--spin-orbital: the "
        "spin-orbital one)",
    )
    system.add_argument(
        "--rohf",
        action="store_true",
        help="an ROHF reference for --molecule (PySCF's CCSD treats it as UHF orbitals)",
    )
    system.add_argument(
        "--frozen",
        type=_count,
        metavar="N",
        help="leave the N lowest orbitals (of each spin) uncorrelated, as PySCF's frozen=N",
    )
    system.add_argument("--fock", metavar="FILE", help="SeQuant Fock-matrix file (with --eri)")
    system.add_argument("--eri", metavar="FILE", help="SeQuant two-electron-integral file")
    system.add_argument(
        "--e-nuc",
        type=_number,
        help="nuclear repulsion (hartree) added to E(HF) of --fock/--eri (the files lack it)",
    )
    shell = p.add_mutually_exclusive_group()
    for flag, text in (
        ("--closed-shell", "spin-adapted equations over spatial orbitals"),
        (
            "--spin-orbital",
            "spin-orbital equations (the default, except for closed-shell --eri files and "
            "UHF/ROHF references, which run the spin-blocked unrestricted ones)",
        ),
    ):
        shell.add_argument(flag, action="store_true", help=text)
    p.add_argument(
        "--batch",
        help="batch counts, e.g. a=4,i=2 (number of batches; the loop structure is chosen "
        "as for a mapping passed to sq.compile(batch=...))",
    )
    p.add_argument("--memory", help="memory budget for intermediates, e.g. '512 MiB'")
    p.add_argument("--solver", choices=("diis", "newton"), default="diis")
    p.add_argument("--max-iter", type=_positive_int, default=100)
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no per-iteration lines (nor, with --memory, the lines of the plan's fitting)",
    )
    p.add_argument("--plot", metavar="FILE.png", help=PLOT_HELP)
    p.add_argument(
        "--df",
        action="store_true",
        help="density-fitted equations (ccsd_cs_df / ccsd_so_df); the shipped system is "
        "factorized exactly",
    )
    p.add_argument(
        "--auxbasis",
        help="auxiliary basis with --df and --molecule, e.g. cc-pvdz-ri "
        "(default: what PySCF's mf.density_fit() picks)",
    )
    p.add_argument(
        "--triples",
        action="store_true",
        help="after CCSD, the perturbative triples correction (T): orbit loops under "
        "--memory (default a quarter of this machine's memory), or the generic batch loops "
        "of --batch (UHF/ROHF references then take the spin-orbital route)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="no SCF, no integrals: print the sizes, plan, predicted memory, FLOPs and "
        "estimated time per iteration (exit status 1 if --memory cannot be met)",
    )


def check_cc_args(args: argparse.Namespace) -> None:
    """The rules between CC options, checked before any work.

    Raises:
        UsageError: naming the option and the fix.

    Example:
        >>> args = build_parser().parse_args(["ccsd", "--fock", "f.dat"])
        >>> try:
        ...     check_cc_args(args)
        ... except UsageError as err:
        ...     print(err)
        --fock needs --eri too: SeQuant systems come as two files
    """
    files = args.fock is not None or args.eri is not None
    if files and args.molecule is not None:
        raise UsageError("give either --molecule or --fock/--eri, not both")
    if files and (args.fock is None or args.eri is None):
        given, missing = ("--fock", "--eri") if args.fock is not None else ("--eri", "--fock")
        raise UsageError(f"{given} needs {missing} too: SeQuant systems come as two files")
    if args.basis is not None and not args.basis.strip():
        raise UsageError("--basis needs a basis-set name such as sto-3g, 6-31g or cc-pvdz")
    molecular = (
        ("--basis", args.basis),
        ("--charge", args.charge),
        ("--spin", args.spin),
        ("--rohf", "" if args.rohf else None),
    )
    for option, value in molecular:
        if value is not None and args.molecule is None:
            raise UsageError(
                f"{option} needs --molecule (the default system is the shipped H2O/STO-3G); "
                f"add e.g. --molecule h2o {option} {value}"
            )
    if (args.spin or args.rohf) and args.closed_shell:
        given = "--rohf" if args.rohf else f"--spin {args.spin}"
        raise UsageError(
            f"{given} gives an open-shell reference, which the closed-shell (spin-adapted) "
            "equations cannot use; drop --closed-shell (the spin-orbital route takes it)"
        )
    if args.dry_run and (args.spin or args.rohf or args.frozen):
        raise UsageError(
            "--dry-run sizes an all-electron closed-shell run only; drop --spin/--rohf/"
            "--frozen for the dry run"
        )
    if args.e_nuc is not None and not files:
        raise UsageError("--e-nuc applies to --fock/--eri systems only; drop it")
    if args.auxbasis is not None and not (args.df and args.molecule):
        raise UsageError(
            f"--auxbasis {args.auxbasis!r} needs --df and --molecule (it picks PySCF's "
            "auxiliary basis); add them or drop --auxbasis"
        )
    if args.dry_run and files:
        raise UsageError(
            "--dry-run works from a molecule's sizes (--molecule/--basis, or the shipped "
            "system); for --fock/--eri files run sq_jax.cc.dry_run(nocc=..., nvirt=...)"
        )
    if args.triples and (args.command != "ccsd" or args.df or args.dry_run):
        why = (
            "--df (no density-fitted (T) yet)"
            if args.df
            else "--dry-run"
            if args.dry_run
            else f"`{args.command}` ((T) corrects CCSD)"
        )
        raise UsageError(f"--triples does not go with {why}; run `sq-jax ccsd ... --triples`")
    if args.batch:
        pairs(args.batch, "--batch")
    check_plot_path(args.plot)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``sq-jax`` (commands ``ccsd``, ``ccd``, ``ccsdt``, ``schedule``).

    Example:
        >>> build_parser().parse_args(["ccd", "--max-iter", "3"]).max_iter
        3
    """
    parser = _Parser(
        prog="sq-jax",
        description="Solve coupled-cluster equations or print the ordered schedule of "
        "tensor equations, compiled by sq_jax.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for method in ("ccsd", "ccd", "ccsdt"):
        add_cc_options(sub.add_parser(method, help=f"solve {method.upper()} and print the energy"))
    s = sub.add_parser("schedule", help="print the ordered schedule of equations")
    s.add_argument(
        "equations",
        help="a shipped set name (ccsd_so, ...), a file of equations, or equation text "
        "(contains '=')",
    )
    s.add_argument("--spaces", required=True, help="extents, e.g. i=10,a=38")
    s.add_argument("--batch", default="", help="batch plan, e.g. a=4")
    s.add_argument("--memory", help="memory budget for intermediates, e.g. '512 MiB'")
    s.add_argument("--plot", metavar="FILE.png", help=PLOT_HELP)
    return parser
