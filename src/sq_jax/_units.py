"""Memory sizes as text: parse ``"2 GiB"`` into bytes, format bytes for people.

The one place sq_jax reads and writes byte counts: the planner's ``memory_budget``, its
error messages, the ``sq-jax`` command and the plots all use these functions, so a size
reads the same everywhere.

Example:
    >>> parse_bytes("1.5 KiB"), format_bytes(1536), human_bytes(1536)
    (1536, '1.50 KiB', '1.5 KiB')
"""

from __future__ import annotations

import math
import numbers
import re
from fractions import Fraction

from ._errors import PlanError

__all__ = ["ACCEPTED_SIZES", "UNITS", "format_bytes", "human_bytes", "parse_bytes", "unit_for"]

UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))
"""Binary byte units, largest first (what sizes are written in)."""

_READ_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_BYTES_RE = re.compile(
    r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?\s*([A-Za-z]*)\s*$"
)
ACCEPTED_SIZES = (
    "an int of bytes, or a number with a unit: B, kB/MB/GB/TB (powers of 1000) or "
    "KiB/MiB/GiB/TiB (powers of 1024), e.g. '2 GiB', '512 MiB', '1.5GB', '100 kB'"
)
"""What :func:`parse_bytes` accepts, for error messages."""


def parse_bytes(size: int | str) -> int:
    """A memory size in bytes, from an int or text such as ``"2 GiB"``.

    Units are case-insensitive: ``kB``/``MB``/``GB``/``TB`` are decimal (10³, 10⁶ …),
    ``KiB``/``MiB``/``GiB``/``TiB`` binary (2¹⁰, 2²⁰ …), ``B`` or no unit bytes. A
    fractional result is rounded down.

    Args:
        size: a positive int, or a number with an optional unit.

    Returns:
        The size in bytes (a positive int).

    Raises:
        PlanError: for text that is not a number with a known unit, or a size below 1.

    Example:
        >>> parse_bytes("2 GiB"), parse_bytes("512 MiB"), parse_bytes("1.5GB")
        (2147483648, 536870912, 1500000000)
        >>> parse_bytes("100 kB"), parse_bytes(4096), parse_bytes("64")
        (100000, 4096, 64)
    """
    if isinstance(size, bool) or not isinstance(size, (numbers.Integral, str)):
        raise PlanError(f"memory size {size!r} ({type(size).__name__}): expected {ACCEPTED_SIZES}.")
    if isinstance(size, numbers.Integral):
        value = Fraction(int(size))
    else:
        match = _BYTES_RE.match(size)
        unit = match.group(3).lower() if match else None
        if match is None or unit not in _READ_UNITS:
            raise PlanError(f"cannot read memory size {size!r}: expected {ACCEPTED_SIZES}.")
        value = Fraction(match.group(1)) * _READ_UNITS[unit]
        if match.group(2):
            value *= Fraction(10) ** int(match.group(2))
    if value < 1:
        raise PlanError(f"memory size {size!r} is below 1 byte: expected {ACCEPTED_SIZES}.")
    return math.floor(value)


def unit_for(nbytes: float) -> tuple[str, int]:
    """The largest binary unit not above ``nbytes`` (bytes for anything below 1 KiB).

    Example:
        >>> unit_for(16856), unit_for(0)
        (('KiB', 1024), ('B', 1))
    """
    for name, scale in UNITS:
        if nbytes >= scale:
            return name, scale
    return "B", 1


def format_bytes(size: int) -> str:
    """``size`` in bytes with a binary unit and two decimals, for messages and reports.

    Example:
        >>> format_bytes(1536), format_bytes(3 * 2**30), format_bytes(12)
        ('1.50 KiB', '3.00 GiB', '12 B')
    """
    name, scale = unit_for(size)
    return f"{size} B" if scale == 1 else f"{size / scale:.2f} {name}"


def human_bytes(nbytes: float) -> str:
    """``nbytes`` with a binary unit and three significant digits, for plot labels.

    Example:
        >>> human_bytes(165888), human_bytes(1024), human_bytes(1536 * 2**20)
        ('162 KiB', '1 KiB', '1.5 GiB')
    """
    name, scale = unit_for(nbytes)
    return f"{nbytes / scale:.3g} {name}"
