"""Canonical form of derived terms, and collection of like terms.

A term ``c Â Π factors`` is a graph: each factor has two antisymmetric slot groups (bra,
ket); each slot is an external line or one end of a dummy line. The canonical form fixes

1. the factor order: the Hamiltonian factor, then the amplitudes by rank (every order of
   equal-rank amplitudes is tried; the smallest text wins);
2. the slot order inside each group: occupied before virtual, external lines first, then
   dummies by the position of the factor at their other end (names already given break
   ties), each reordering paying its permutation sign;
3. the names: externals i_1.., a_1.. and dummies i_{n+1}.., a_{n+1}.. in order of first
   appearance. Renaming externals under the unnormalised ``Â`` costs the sign of the
   renaming permutation (``Â X∘σ = sign(σ) Â X``).

Two terms are alike iff their canonical texts are equal; :func:`collect` adds their
coefficients. A term equal to minus itself (two orders give one text, opposite signs) is
zero and dropped.

Example:
    >>> from fractions import Fraction
    >>> from sq_jax.derive.terms import Factor, Idx, RawTerm
    >>> i1, i2, a1, a2 = Idx("i", True, 1), Idx("i", True, 2), Idx("a", True, 1), Idx("a", True, 2)
    >>> x = RawTerm(Fraction(1), (Factor("g", (a2, a1), (i1, i2)),), 2)
    >>> y = canonicalize(x)
    >>> y.coefficient, str(y.factors[0])
    (Fraction(-1, 1), 'g{a_1,a_2;i_1,i_2}')
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from .terms import OCC, Factor, Idx, RawTerm, parity

__all__ = ["canonicalize", "collect"]

_UNNAMED = 1 << 30


def canonicalize(term: RawTerm) -> RawTerm | None:
    """The canonical form of ``term`` (same value), or ``None`` if it is identically zero.

    Args:
        term: a term with the Hamiltonian factor first.

    Returns:
        The term with factors ordered, slots sorted and indices renamed canonically.

    Example:
        >>> from fractions import Fraction
        >>> from sq_jax.derive.terms import Factor, Idx, RawTerm
        >>> d, e = Idx("a", False, 7), Idx("a", True, 1)
        >>> i = Idx("i", True, 1)
        >>> t = RawTerm(Fraction(1), (Factor("f", (e,), (d,)), Factor("t", (d,), (i,))), 1)
        >>> " ".join(str(f) for f in canonicalize(t).factors)
        'f{a_1;a_2} t{a_2;i_1}'
    """
    head, amplitudes = term.factors[0], term.factors[1:]
    by_kind: dict[tuple[str, int, int], list[Factor]] = {}
    for f in sorted(amplitudes, key=lambda f: f.kind):
        by_kind.setdefault(f.kind, []).append(f)
    best: tuple[str, int, tuple[Factor, ...]] | None = None
    zero = False
    for choice in itertools.product(*(itertools.permutations(g) for g in by_kind.values())):
        order = (head, *(f for group in choice for f in group))
        factors, sign = _relabel(order, term.rank)
        text = " ".join(str(f) for f in factors)
        if best is None or text < best[0]:
            best, zero = (text, sign, factors), False
        elif text == best[0] and sign != best[1]:
            zero = True
    assert best is not None  # at least the identity order
    if zero:
        return None
    return RawTerm(term.coefficient * best[1], best[2], term.rank)


def collect(terms: Iterable[RawTerm]) -> tuple[RawTerm, ...]:
    """Canonicalise ``terms`` and add the coefficients of like ones; drop zeros.

    Args:
        terms: raw terms of one equation.

    Returns:
        The distinct nonzero canonical terms, in first-seen order.

    Example:
        >>> from fractions import Fraction
        >>> from sq_jax.derive.terms import Factor, Idx, RawTerm
        >>> a, i = Idx("a", True, 1), Idx("i", True, 1)
        >>> x = RawTerm(Fraction(1, 2), (Factor("f", (a,), (i,)),), 1)
        >>> [str(t.coefficient) for t in collect([x, x])]
        ['1']
    """
    sums: dict[tuple[Factor, ...], RawTerm] = {}
    for raw in terms:
        term = canonicalize(raw)
        if term is None:
            continue
        seen = sums.get(term.factors)
        if seen is not None:
            term = RawTerm(seen.coefficient + term.coefficient, term.factors, term.rank)
        sums[term.factors] = term
    return tuple(t for t in sums.values() if t.coefficient != 0)


def _relabel(factors: tuple[Factor, ...], rank: int) -> tuple[tuple[Factor, ...], int]:
    """Sort every slot group and rename indices in order; return the sign paid."""
    ends: dict[Idx, list[tuple[int, int]]] = {}
    for pos, f in enumerate(factors):
        for group, indices in enumerate((f.bra, f.ket)):
            for x in indices:
                ends.setdefault(x, []).append((pos, group))
    new: dict[Idx, Idx] = {}
    counters = {
        (space, ext): itertools.count(1 if ext else rank + 1)
        for space in ("i", "a")
        for ext in (True, False)
    }
    sign = 1
    out = []
    for pos, f in enumerate(factors):
        groups = []
        for indices in (f.bra, f.ket):
            keys = [_key(x, pos, ends, new) for x in indices]
            order = sorted(range(len(indices)), key=keys.__getitem__)
            sign *= parity(order)
            for s in order:
                x = indices[s]
                if x not in new:
                    new[x] = Idx(x.space, x.external, next(counters[x.space, x.external]))
            groups.append(tuple(new[indices[s]] for s in order))
        out.append(Factor(f.label, groups[0], groups[1]))
    for space in ("i", "a"):
        olds = sorted((x for x in new if x.external and x.space == space), key=lambda x: x.number)
        sign *= parity([new[x].number for x in olds])
    return tuple(out), sign


def _key(
    x: Idx, pos: int, ends: dict[Idx, list[tuple[int, int]]], new: dict[Idx, Idx]
) -> tuple[int, ...]:
    space = 0 if x.space == OCC else 1
    if x.external:
        return (space, 0, 0, 0, 0)
    other = next(e for e in ends[x] if e[0] != pos)
    name = new[x].number if x in new else _UNNAMED
    return (space, 1, other[0], other[1], name)
