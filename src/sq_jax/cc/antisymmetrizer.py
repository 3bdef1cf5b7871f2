"""Residuals with the antisymmetrizer ``Â`` applied to the program's output, not expanded.

A spin-orbital residual is written ``R_n = Σ c Â{i..;a..} X`` with the unnormalised
``Â`` (n!² signed permutations). Expanding ``Â`` in the text multiplies the terms the
compiler must factor by n!² (36 for triples, 576 for quadruples), which dominates the
compile time from CCSDT on. Since ``Â`` is linear, ``R_n = Â (Σ c X)``: the program can
compute the unsymmetrised sum, and ``Â`` is applied to the array afterwards
(2·n! transposes, the permutations of the virtual and of the occupied axes).

:func:`parse_cc_equations` reads a CC equation set the way the drivers compile it
(``Â`` expanded up to doubles, stripped from triples on); :func:`strip_antisymmetrizers`
rewrites parsed equations; :func:`apply_antisymmetrizer` is the numerical ``Â``.

Example:
    >>> import sq_jax as sq
    >>> eqs = sq.parse(
    ...     "R2{a1,a2;i1,i2} = 1/4 Â{i1,i2;a1,a2} g{a1,a2;i1,i2}",
    ...     expand_symmetrizers=False,
    ...     validate=False,
    ... )
    >>> stripped, ranks = strip_antisymmetrizers(eqs)
    >>> str(stripped[0].rhs), ranks
    ('1/4 g{a_1,a_2;i_1,i_2}:N-C-S', {'R2': 2})
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp

from .._errors import ExpressionError
from ..expr.nodes import Equation, Expr, Product, Sum, Tensor
from ..expr.parse import parse
from ..expr.spaces import Spaces
from ..expr.symmetrize import expand_symmetrizers
from ..expr.validate import validate

__all__ = ["apply_antisymmetrizer", "parse_cc_equations", "strip_antisymmetrizers"]

DEFER_FROM_RANK = 3
"""Residuals of this rank or higher in a set make the whole set keep ``Â`` out of the text."""


def parse_cc_equations(text: str, spaces: Spaces) -> tuple[tuple[Equation, ...], dict[str, int]]:
    """Parse a CC equation set as the drivers compile it.

    Args:
        text: the equations (``E``, ``R1``, ``R2``, … as in ``ccsd_so``).
        spaces: the index spaces with extents.

    Returns:
        The equations and, when the set has a residual of rank 3 or more, the name → rank
        of each residual whose ``Â`` was stripped (apply it with
        :func:`apply_antisymmetrizer`); up to doubles ``Â`` is expanded and the mapping is
        empty.

    Example:
        >>> from sq_jax.cc.equations import load_equations
        >>> eqs, after = parse_cc_equations(load_equations("ccsdt_so"), Spaces(i=3, a=3))
        >>> after
        {'R1': 1, 'R2': 2, 'R3': 3}
        >>> parse_cc_equations(load_equations("ccd_so"), Spaces(i=3, a=3))[1]
        {}
    """
    raw = parse(text, spaces=spaces, expand_symmetrizers=False, validate=False)
    if all(not isinstance(eq.lhs, Tensor) or len(eq.lhs.bra) < DEFER_FROM_RANK for eq in raw):
        return parse(text, spaces=spaces), {}
    equations, after = strip_antisymmetrizers(raw)
    # equations that kept no Â out (the energy, intermediates with Ŝ) are expanded as usual
    equations = tuple(eq if eq.name in after else expand_symmetrizers(eq) for eq in equations)
    validate(equations, spaces)
    return equations, after


_HAT_A = "Â"


def strip_antisymmetrizers(
    equations: Sequence[Equation],
) -> tuple[tuple[Equation, ...], dict[str, int]]:
    """Drop the common leading ``Â`` of each residual equation.

    Args:
        equations: equations parsed with ``expand_symmetrizers=False``. An equation
            whose terms all start with ``Â{i_1..i_n;a_1..a_n}``, the lhs's indices, loses
            it; an equation with no ``Â`` at all (the energy) is kept as it is.

    Returns:
        The rewritten equations, and result name → n for each that lost an ``Â``.

    Raises:
        ExpressionError: an equation where only some terms have ``Â``, or an ``Â`` that
            is not the lhs's ``{i..;a..}``.

    Example:
        >>> import sq_jax as sq
        >>> eqs = sq.parse("E = f{i1;a1} t{a1;i1}", expand_symmetrizers=False)
        >>> strip_antisymmetrizers(eqs)[1]
        {}
    """
    out, ranks = [], {}
    for eq in equations:
        terms = eq.rhs.terms if isinstance(eq.rhs, Sum) else (eq.rhs,)
        heads = [_head(t) for t in terms]
        if all(h is None for h in heads):
            out.append(eq)
            continue
        lhs = eq.lhs
        want = (lhs.ket, lhs.bra) if isinstance(lhs, Tensor) else None
        bad = [str(t) for t, h in zip(terms, heads, strict=True) if h is None or h != want]
        if bad:
            raise ExpressionError(
                f"cannot apply the antisymmetrizer of `{eq.name}` to its result: every term "
                f"must start with Â{{ket;bra}} of the left-hand side; these do not: "
                f"{'; '.join(bad[:3])}. Parse with expand_symmetrizers=True instead."
            )
        rhs: Expr = Sum(tuple(_without_head(t) for t in terms))
        out.append(dataclasses.replace(eq, rhs=rhs if len(terms) > 1 else rhs.terms[0]))
        ranks[eq.name] = len(lhs.bra)
    return tuple(out), ranks


def apply_antisymmetrizer(x: Any, rank: int) -> Any:
    """``Â`` on an array T[a_1..a_n, i_1..i_n]: the unnormalised signed permutation sum.

    Args:
        x: an array of rank 2n, virtual axes first.
        rank: n.

    Returns:
        Σ_σ,τ sign(σ) sign(τ) x with the virtual axes permuted by σ and the occupied
        ones by τ (n!² terms, computed as two sums of n! transposes).

    Example:
        >>> import jax.numpy as jnp
        >>> x = jnp.zeros((2, 2, 2, 2)).at[0, 1, 0, 1].set(1.0)
        >>> float(apply_antisymmetrizer(x, 2)[1, 0, 0, 1])
        -1.0
    """
    x = jnp.asarray(x)
    if rank < 2:
        return x
    perms = list(itertools.permutations(range(rank)))
    for lo in (0, rank):
        acc = jnp.zeros_like(x)
        for perm in perms:
            axes = list(range(2 * rank))
            axes[lo : lo + rank] = [lo + p for p in perm]
            acc = acc + _sign(perm) * jnp.transpose(x, axes)
        x = acc
    return x


def _head(term: Expr) -> tuple[tuple, tuple] | None:
    """(bra, ket) of the ``Â`` leading a product, else ``None``."""
    if isinstance(term, Product) and term.factors:
        first = term.factors[0]
        if isinstance(first, Tensor) and first.label == _HAT_A:
            return (first.bra, first.ket)
    return None


def _without_head(term: Expr) -> Expr:
    assert isinstance(term, Product)  # checked by _head
    return Product(term.scalar, term.factors[1:])


def _sign(perm: tuple[int, ...]) -> int:
    inversions = sum(1 for a, b in itertools.combinations(perm, 2) if a > b)
    return -1 if inversions % 2 else 1
