r"""Molecular geometries for the command line: named molecules and strict .xyz files.

An .xyz file is read in the standard format and nothing looser: line 1 holds the number
of atoms, line 2 a comment (may be empty), then exactly that many lines ``Symbol x y z``
with coordinates in Å; trailing blank lines are allowed. Every problem is reported with
its line number and what was found there, so a file without the two header lines (which
a lenient reader would silently shorten by two atoms) is refused.

Example:
    >>> geometry = parse_xyz("3\nwater\nO 0 0 0.1173\nH 0 0.7572 -0.4692\nH 0 -0.7572 -0.4692")
    >>> geometry.symbols, geometry.electron_count()
    (('O', 'H', 'H'), 10)
"""

from __future__ import annotations

import dataclasses
import math
import os
import re

from .._errors import InputError

__all__ = ["MOLECULES", "Geometry", "molecule_geometry", "parse_xyz", "read_xyz"]

# Element symbols in order of nuclear charge (Z = position + 1).
_ELEMENTS = (
    "H He Li Be B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Sc Ti V Cr Mn Fe Co Ni Cu Zn Ga Ge "
    "As Se Br Kr Rb Sr Y Zr Nb Mo Tc Ru Rh Pd Ag Cd In Sn Sb Te I Xe Cs Ba La Ce Pr Nd Pm Sm "
    "Eu Gd Tb Dy Ho Er Tm Yb Lu Hf Ta W Re Os Ir Pt Au Hg Tl Pb Bi Po At Rn Fr Ra Ac Th Pa U "
    "Np Pu Am Cm Bk Cf Es Fm Md No Lr Rf Db Sg Bh Hs Mt Ds Rg Cn Nh Fl Mc Lv Ts Og"
).split()
_CHARGE = {symbol.lower(): z for z, symbol in enumerate(_ELEMENTS, start=1)}
# Closer than this (Å), two nuclei are a typing error, not a molecule.
_MIN_DISTANCE = 0.1

_H2O_XYZ = (
    "3\nH2O (the geometry of docs/benchmarks.md)\n"
    "O 0 0 0.1173\nH 0 0.7572 -0.4692\nH 0 -0.7572 -0.4692\n"
)


@dataclasses.dataclass(frozen=True)
class Geometry:
    """Atoms and Cartesian coordinates in Å.

    Attributes:
        symbols: element symbols, capitalized as in the periodic table.
        coordinates: one (x, y, z) triple per atom, in Å.
        comment: the .xyz comment line (or the molecule's name).

    Example:
        >>> Geometry(("H", "H"), ((0.0, 0.0, 0.0), (0.0, 0.0, 0.74))).electron_count()
        2
    """

    symbols: tuple[str, ...]
    coordinates: tuple[tuple[float, float, float], ...]
    comment: str = ""

    def electron_count(self, charge: int = 0) -> int:
        """Electrons of the neutral molecule minus ``charge``.

        Example:
            >>> molecule_geometry("h2o").electron_count(charge=1)
            9
        """
        return sum(_CHARGE[s.lower()] for s in self.symbols) - charge

    def pyscf_atoms(self) -> str:
        """The geometry as PySCF's inline string, ``"O 0 0 0.1173; H …"`` (Å).

        Example:
            >>> molecule_geometry("h2o").pyscf_atoms()
            'O 0.0 0.0 0.1173; H 0.0 0.7572 -0.4692; H 0.0 -0.7572 -0.4692'
        """
        return "; ".join(
            f"{s} " + " ".join(repr(x) for x in xyz)
            for s, xyz in zip(self.symbols, self.coordinates, strict=True)
        )


MOLECULES = {"h2o": _H2O_XYZ}


def molecule_geometry(name: str) -> Geometry:
    """The geometry of a named molecule (see :data:`MOLECULES`; case-insensitive).

    Raises:
        InputError: for an unknown name, listing the known ones.

    Example:
        >>> molecule_geometry("H2O").symbols
        ('O', 'H', 'H')
    """
    text = MOLECULES.get(name.lower())
    if text is None:
        raise InputError(f"unknown molecule {name!r}; known names: {', '.join(MOLECULES)}.")
    return parse_xyz(text, source=name)


def _bad(source: str, line: int, found: str, expected: str) -> InputError:
    return InputError(
        f"{source}, line {line}: expected {expected}; found {found!r}. An .xyz file has the "
        "atom count on line 1, a comment on line 2, then one `Symbol x y z` line (Å) per atom."
    )


def _atom(source: str, number: int, text: str) -> tuple[str, tuple[float, float, float]]:
    fields = text.split()
    if len(fields) != 4:
        raise _bad(source, number, text, f"4 fields `Symbol x y z`, not {len(fields)}")
    symbol = fields[0]
    if symbol.lower() not in _CHARGE:
        raise _bad(source, number, symbol, "an element symbol such as H, C, O or Cl")
    try:
        xyz = tuple(float(v) for v in fields[1:])
    except ValueError:
        raise _bad(source, number, text, "three numbers x y z after the symbol") from None
    if not all(math.isfinite(v) for v in xyz):
        raise _bad(source, number, text, "finite coordinates")
    return _ELEMENTS[_CHARGE[symbol.lower()] - 1], xyz  # type: ignore[return-value]


def parse_xyz(text: str, source: str = "<xyz>") -> Geometry:
    r"""Read a geometry in the standard .xyz format (see the module docstring).

    Args:
        text: the file's contents.
        source: the name used in error messages (a file name).

    Returns:
        The :class:`Geometry`.

    Raises:
        InputError: naming the line, what was found and what was expected there.

    Example:
        >>> try:
        ...     parse_xyz("O 0 0 0\nH 0 0 1\nH 0 1 0\n", source="water.xyz")
        ... except InputError as err:
        ...     print(str(err).split(". An")[0])
        water.xyz, line 1: expected the number of atoms (a positive integer); found 'O 0 0 0'
    """
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    first = lines[0] if lines else ""
    if not re.fullmatch(r"\s*[0-9]+\s*", first) or int(first) < 1:
        raise _bad(source, 1, first, "the number of atoms (a positive integer)")
    count = int(first)
    atoms = lines[2:]
    if len(atoms) != count:
        many = "fewer" if len(atoms) < count else "more"
        raise InputError(
            f"{source}: line 1 announces {count} atoms but {len(atoms)} atom lines follow the "
            f"comment line ({many} than announced). Fix the count on line 1 or the atom lines; "
            "line 2 is always the comment."
        )
    parsed = [_atom(source, k + 3, line) for k, line in enumerate(atoms)]
    coordinates = [xyz for _, xyz in parsed]
    for a, first_xyz in enumerate(coordinates):
        for b in range(a + 1, count):
            distance = math.dist(first_xyz, coordinates[b])
            if distance < _MIN_DISTANCE:
                raise InputError(
                    f"{source}: the atoms on lines {a + 3} and {b + 3} are {distance:.3g} Å "
                    f"apart (less than {_MIN_DISTANCE} Å); coordinates are in Å, fix one of "
                    "the two lines."
                )
    comment = lines[1].strip() if len(lines) > 1 else ""
    return Geometry(tuple(s for s, _ in parsed), tuple(coordinates), comment)


def read_xyz(path: os.PathLike | str) -> Geometry:
    r"""Read an .xyz file strictly (see :func:`parse_xyz`).

    Raises:
        InputError: if the file cannot be read or is malformed.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "h2.xyz"
        >>> _ = path.write_text("2\nhydrogen\nH 0 0 0\nH 0 0 0.74\n")
        >>> read_xyz(path).coordinates[1]
        (0.0, 0.0, 0.74)
    """
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read the .xyz file {os.fspath(path)!r}: {err}.") from err
    return parse_xyz(text, source=os.fspath(path))
