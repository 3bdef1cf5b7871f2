"""The system a ``sq-jax ccsd`` run solves: the shipped default, a molecule, or SeQuant files.

Molecules go through PySCF's RHF, or UHF with ``--spin`` (2S > 0), or ROHF with
``--rohf``. Each expected failure (an unknown basis, an electron count that does not fit
the spin, no virtual orbitals, an SCF that does not converge) becomes a
:class:`~sq_jax.cc._cli_args.UsageError` or :class:`SCFNotConverged` that says what to
change.

Example:
    >>> import argparse
    >>> args = argparse.Namespace(molecule=None, fock=None, eri=None, closed_shell=False,
    ...                           spin_orbital=False, spin=None, rohf=False)
    >>> cc_system(args)
    (None, 'H2O/STO-3G (shipped)', False)
"""

from __future__ import annotations

import argparse
import os
import warnings
from typing import Any

from .._errors import SqJaxError
from ._cli_args import UsageError, is_file
from .integrals import SpatialIntegrals
from .sequant_files import load_sequant_system
from .xyz import MOLECULES, Geometry, molecule_geometry, read_xyz

__all__ = ["SCFNotConverged", "cc_system"]

DEFAULT_BASIS = "sto-3g"
# PySCF's RHF settings for --molecule: tight, so CC energies agree with PySCF to 1e-9.
SCF_CONV_TOL = 1e-12
SCF_MAX_CYCLE = 100


class SCFNotConverged(SqJaxError):
    """The HF reference did not converge; the CLI refuses to run CC on it (exit 1)."""


def _geometry(name: str) -> Geometry:
    if name.lower() in MOLECULES:
        return molecule_geometry(name)
    if not is_file(name):
        raise UsageError(
            f"--molecule {name!r} is neither a known name ({', '.join(MOLECULES)}) nor an "
            "existing .xyz file; check the path"
        )
    return read_xyz(name)


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def _check_electrons(args: argparse.Namespace, geometry: Geometry, charge: int, spin: int) -> None:
    """Refuse electron counts that CC cannot use or that do not fit ``--spin``."""
    electrons = geometry.electron_count(charge)
    if electrons >= 2 and spin <= electrons and (electrons - spin) % 2 == 0:
        return
    if electrons >= 2 and spin > 0:
        fits = [s for s in (spin - 1, spin + 1) if 0 <= s <= electrons]
        raise UsageError(
            f"--spin {spin} does not fit the {electrons} electrons of --molecule "
            f"{args.molecule!r} with charge {charge}: 2S = Nα − Nβ must have the parity of "
            f"the electron count and be at most {electrons}; use "
            + " or ".join(f"--spin {s}" for s in fits)
        )
    charges = [c for c in (charge + 1, charge - 1) if geometry.electron_count(c) >= 2]
    fixes = [" or ".join(f"--charge {c}" for c in charges)] if charges else []
    if electrons >= 2:  # an odd count: an open-shell reference would do
        fixes.append("--spin 1 (a UHF reference)")
    fix = ", ".join(fixes) + ", or another geometry" if fixes else "lower --charge"
    raise UsageError(
        f"--molecule {args.molecule!r} with charge {charge} has {electrons} electrons; "
        f"{'a closed-shell RHF reference' if not spin else 'coupled cluster'} needs an "
        "even number, at least 2: "
        f"{fix}"
    )


def molecule(args: argparse.Namespace) -> tuple[Any, str]:
    """``(mol, description)``: the PySCF molecule of ``--molecule`` and its options.

    No SCF is run (the dry run needs only the molecule's sizes).

    Raises:
        UsageError: an unknown molecule or basis, an electron count too small or not
            fitting ``--spin``, or a basis without virtual orbitals.
    """
    geometry = _geometry(args.molecule)
    charge, spin = args.charge or 0, getattr(args, "spin", None) or 0
    basis = DEFAULT_BASIS if args.basis is None else args.basis
    _check_electrons(args, geometry, charge, spin)
    try:
        from pyscf import gto
        from pyscf.lib.exceptions import BasisNotFoundError
    except ImportError as err:
        raise UsageError("--molecule needs PySCF: pip install 'sq_jax[chem]'") from err
    try:
        with warnings.catch_warnings():  # PySCF's hint about basis-set-exchange
            warnings.simplefilter("ignore")
            mol = gto.M(
                atom=geometry.pyscf_atoms(), basis=basis, charge=charge, spin=spin, verbose=0
            )
    except Exception as err:  # PySCF's errors are reported as bad input
        if isinstance(err, BasisNotFoundError):
            raise UsageError(
                f"--basis {basis!r}: PySCF has no such basis for {'/'.join(geometry.symbols)} "
                f"({_first_line(err)}); use a name such as sto-3g, 6-31g or cc-pvdz"
            ) from err
        raise UsageError(f"PySCF could not build --molecule {args.molecule!r}: {err}") from err
    nocc = (mol.nelectron + spin) // 2
    if mol.nao <= nocc:
        what = "doubly occupied" if spin == 0 else "α-occupied"
        raise UsageError(
            f"--basis {basis!r} gives {mol.nao} orbitals for {nocc} {what} ones, "
            "so there are no virtual orbitals to correlate; use a larger basis"
        )
    return mol, f"{args.molecule}/{basis}"


def reference_kind(args: argparse.Namespace) -> str:
    """``"RHF"``, ``"UHF"`` (``--spin`` > 0) or ``"ROHF"`` (``--rohf``).

    Example:
        >>> reference_kind(argparse.Namespace(spin=2, rohf=False))
        'UHF'
    """
    if getattr(args, "rohf", False):
        return "ROHF"
    return "UHF" if getattr(args, "spin", None) else "RHF"


def _mean_field(args: argparse.Namespace) -> tuple[Any, str]:
    from pyscf import scf

    mol, name = molecule(args)
    basis = mol.basis
    kind = reference_kind(args)
    mf = {"RHF": scf.RHF, "UHF": scf.UHF, "ROHF": scf.ROHF}[kind](mol)
    mf.conv_tol, mf.max_cycle = SCF_CONV_TOL, SCF_MAX_CYCLE
    mf.kernel()
    if not mf.converged:
        raise SCFNotConverged(
            f"the {kind} of --molecule {args.molecule!r} ({basis}) did not converge in "
            f"{mf.max_cycle} cycles (last E = {mf.e_tot:.10f}); CC on unconverged orbitals "
            "would be meaningless. Check the geometry (Å) and the charge."
        )
    return mf, name if kind == "RHF" else f"{name} ({kind}, 2S={mol.spin})"


def cc_system(args: argparse.Namespace) -> tuple[Any, str, bool]:
    """``(system, description, closed_shell)`` for the parsed CC arguments.

    ``system`` is what :func:`sq_jax.cc.solve_cc` accepts: ``None`` (shipped), a PySCF
    RHF, UHF or ROHF object, or integrals read from SeQuant files. ``closed_shell`` is the
    flag given, or for SeQuant files without a flag, what the files hold.

    Raises:
        UsageError: bad input (exit 2).
        SCFNotConverged: the SCF did not converge (exit 1).
        SqJaxError: malformed SeQuant files (exit 2).
    """
    closed_shell = bool(args.closed_shell)
    if args.fock is not None:
        flag = True if args.closed_shell else False if args.spin_orbital else None
        ints = load_sequant_system(args.fock, args.eri, closed_shell=flag, e_nuc=args.e_nuc or 0.0)
        name = f"{os.fspath(args.fock)} + {os.fspath(args.eri)} (SeQuant files)"
        return ints, name, isinstance(ints, SpatialIntegrals)
    if args.molecule is None:
        return None, "H2O/STO-3G (shipped)", closed_shell
    mf, name = _mean_field(args)
    return mf, name, closed_shell
