"""Checks of the amplitude solvers' numeric options, run before any work.

One table of rules serves both solvers and the drivers, which check the options a user
passed before integrals are built or programs compiled.

Example:
    >>> from sq_jax import InputError
    >>> check_solver_options(max_iter=10, e_tol=1e-8)
    >>> try:
    ...     check_solver_options(e_tol=float("nan"))
    ... except InputError as err:
    ...     print(err)
    Invalid solver option:
      * e_tol=nan: expected a positive finite number
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .._errors import InputError

__all__ = ["check_solver_options"]


def _is_count(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _is_positive(value: Any) -> bool:
    return _is_real(value) and math.isfinite(value) and value > 0


def _is_real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "max_iter": (lambda v: _is_count(v, 0), "a whole number >= 0"),
    "e_tol": (_is_positive, "a positive finite number"),
    "t_tol": (_is_positive, "a positive finite number"),
    "diis_space": (lambda v: _is_count(v, 1), "a whole number >= 1 (1 turns DIIS off)"),
    "diis_start": (lambda v: _is_count(v, 0), "a whole number >= 0"),
    "forcing": (lambda v: _is_positive(v) and v < 1, "a number in (0, 1)"),
    "gmres_restart": (lambda v: _is_count(v, 1), "a whole number >= 1"),
    "gmres_max_steps": (lambda v: _is_count(v, 1), "a whole number >= 1"),
    "gmres_atol": (
        lambda v: v is None or (_is_real(v) and math.isfinite(v) and v >= 0),
        "None or a finite number >= 0",
    ),
    "adjoint_tol": (_is_positive, "a positive finite number"),
}


def check_solver_options(**options: Any) -> None:
    """Refuse solver options with values the solvers cannot use.

    Options without a rule here (``jit``, ``throw``, callables) are not checked.
    Integer-valued options accept Python and NumPy integers; tolerances accept any real.

    Args:
        **options: solver keyword arguments by name (``max_iter``, ``e_tol``, ``t_tol``,
            ``diis_space``, ``diis_start``, ``forcing``, ``gmres_restart``,
            ``gmres_max_steps``, ``gmres_atol``).

    Raises:
        InputError: one bullet per bad value, quoting it and saying what is expected.

    Example:
        >>> check_solver_options(max_iter=0, t_tol=1e-6, diis_space=1)
    """
    problems = []
    for name, value in options.items():
        rule = _RULES.get(name)
        if rule is None:
            continue
        ok, expected = rule
        plain = value.item() if hasattr(value, "item") and hasattr(value, "dtype") else value
        if not ok(plain):
            problems.append(f"{name}={value!r}: expected {expected}")
    if problems:
        heading = "Invalid solver option" + ("s" if len(problems) > 1 else "")
        raise InputError(heading + ":\n" + "\n".join(f"  * {p}" for p in problems))
