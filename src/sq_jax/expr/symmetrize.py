"""Expand antisymmetrizers ``Â{bra;ket}`` and symmetrizers ``Ŝ{bra;ket}`` into sums.

SeQuant writes coupled-cluster residual terms as ``Â{i1,i2;a1,a2} * X`` (spin-orbital)
or ``Ŝ{i1,i2;a1,a2} * X`` (closed shell). Evaluating them needs the explicit sum over
permuted copies of ``X``:

* ``Â``: every permutation σ of the bra indices and, independently, τ of the ket
  indices, with sign ``sign(σ)·sign(τ)``, unnormalized (4 terms for a 2,2 ``Â``, 36 for
  3,3);
* ``Ŝ``: every simultaneous permutation of the (bra_k, ket_k) columns, all with sign +.

A permutation is applied as a simultaneous substitution ``bra[k] -> bra[σ[k]]`` to every
index of the other factors of the product, proto-indices included; the ``Â``/``Ŝ``
factor itself disappears. The new terms replace the product inside its parent sum, in
place, with permutations in lexicographic order (identity first).

Known limitations: ``Ŝ`` needs as many bra as ket indices; an ``Â``/``Ŝ`` that is not a
factor of a product (a bare tensor) is left as it is.

Example:
    >>> import sq_jax as sq
    >>> e = sq.parse_expr("Â{i1,i2;a1,a2} t{a1,a2;i1,i2}")
    >>> print(sq.serialize(e, annot_symm=False))
    t{a_1,a_2;i_1,i_2} - 1 t{a_2,a_1;i_1,i_2} - 1 t{a_1,a_2;i_2,i_1} + t{a_2,a_1;i_2,i_1}
"""

from __future__ import annotations

import dataclasses
import itertools
import unicodedata
from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import cast

from .._errors import ExpressionError
from .nodes import Constant, Equation, Expr, Index, NormalOperator, Product, Sum, Tensor

__all__ = ["expand_symmetrizers", "relabel"]

_ANTISYMMETRIZER = "Â"
_SYMMETRIZER = "Ŝ"
_LEGACY = {"A": _ANTISYMMETRIZER, "S": _SYMMETRIZER}


def expand_symmetrizers(
    expr_or_equation: Expr | Equation, *, legacy_labels: bool = False
) -> Expr | Equation:
    """Replace every product with an ``Â``/``Ŝ`` factor by its sum of permuted terms.

    Args:
        expr_or_equation: an expression, or an equation (its right-hand side is expanded).
        legacy_labels: also treat a tensor labelled ``A``/``S`` that is the first factor
            of a product with other factors as ``Â``/``Ŝ`` (older SeQuant output).

    Returns:
        The same kind of node, with no product containing a symmetrizer factor. Nodes
        without symmetrizers come back unchanged.

    Raises:
        ExpressionError: an ``Ŝ`` has different numbers of bra and ket indices.

    Example:
        >>> import sq_jax as sq
        >>> e = sq.parse_expr("2 Ŝ{i1,i2;a1,a2} g{a1,a2;i1,i2}", expand_symmetrizers=False)
        >>> str(expand_symmetrizers(e))
        '2 g{a_1,a_2;i_1,i_2}:N-C-S + 2 g{a_2,a_1;i_2,i_1}:N-C-S'
    """
    if isinstance(expr_or_equation, Equation):
        rhs = _expand(expr_or_equation.rhs, legacy_labels)
        if rhs is expr_or_equation.rhs:
            return expr_or_equation
        return dataclasses.replace(expr_or_equation, rhs=rhs)
    return _expand(expr_or_equation, legacy_labels)


def _expand(expr: Expr, legacy: bool) -> Expr:
    if isinstance(expr, Sum):
        terms: list[Expr] = []
        changed = False
        for term in expr.terms:
            if isinstance(term, Product):
                new_terms = _expand_product(term, legacy)
                if len(new_terms) != 1 or new_terms[0] is not term:
                    changed = True
                terms.extend(new_terms)
            else:
                new = _expand(term, legacy)
                changed = changed or new is not term
                terms.append(new)
        if not changed:
            return expr
        return terms[0] if len(terms) == 1 else Sum(tuple(terms))
    if isinstance(expr, Product):
        new_terms = _expand_product(expr, legacy)
        return new_terms[0] if len(new_terms) == 1 else Sum(tuple(new_terms))
    return expr


def _make_product(scalar: Fraction, factors: tuple[Expr, ...]) -> Expr:
    if not factors:
        return Constant(scalar)
    if len(factors) == 1 and scalar == 1:
        return factors[0]
    return Product(scalar, factors)


def _symmetrizer_kind(factor: Expr, position: int, n_factors: int, legacy: bool) -> str | None:
    if not isinstance(factor, Tensor):
        return None
    label = unicodedata.normalize("NFC", factor.label)
    if label in (_ANTISYMMETRIZER, _SYMMETRIZER):
        return label
    if legacy and position == 0 and n_factors > 1 and label in _LEGACY:
        return _LEGACY[label]
    return None


def _expand_product(product: Product, legacy: bool) -> list[Expr]:
    """The terms ``product`` expands to (``[product]`` itself when nothing changes)."""
    factors = tuple(_expand(f, legacy) for f in product.factors)
    n = len(factors)
    kinds = [_symmetrizer_kind(f, k, n, legacy) for k, f in enumerate(factors)]
    if not any(kinds):
        if all(a is b for a, b in zip(factors, product.factors, strict=True)):
            return [product]
        return [Product(product.scalar, factors)]
    pos = next(k for k, kind in enumerate(kinds) if kind)
    op = cast(Tensor, factors[pos])
    rest = factors[:pos] + factors[pos + 1 :]
    if not rest:
        return [Product(product.scalar, factors)]
    out: list[Expr] = []
    for sign, mapping in _substitutions(op, kinds[pos]):
        new_rest = tuple(relabel(f, mapping) for f in rest)
        scalar = product.scalar * sign
        # further symmetrizer factors (rare) are expanded in turn
        if any(_symmetrizer_kind(f, -1, 0, False) for f in new_rest):
            out.extend(_expand_product(Product(scalar, new_rest), False))
        else:
            out.append(_make_product(scalar, new_rest))
    return out


def _signed_permutations(n: int) -> Iterator[tuple[int, tuple[int, ...]]]:
    """(sign, permutation) in lexicographic order, identity first."""
    for perm in itertools.permutations(range(n)):
        inversions = sum(1 for a in range(n) for b in range(a + 1, n) if perm[a] > perm[b])
        yield (-1 if inversions % 2 else 1), perm


def _substitutions(op: Tensor, kind: str | None) -> Iterator[tuple[int, dict[Index, Index]]]:
    bra = [i.plain() for i in op.bra]
    ket = [i.plain() for i in op.ket]
    if kind == _ANTISYMMETRIZER:
        ket_perms = list(_signed_permutations(len(ket)))
        for sign_b, pb in _signed_permutations(len(bra)):
            for sign_k, pk in ket_perms:
                mapping = {bra[k]: bra[pb[k]] for k in range(len(bra))}
                mapping.update({ket[k]: ket[pk[k]] for k in range(len(ket))})
                yield sign_b * sign_k, mapping
        return
    if len(bra) != len(ket):
        raise ExpressionError(
            f"the symmetrizer `{op}` has {len(bra)} bra and {len(ket)} ket indices; Ŝ "
            "permutes (bra, ket) columns together, so it needs as many of each. Write the "
            "permuted terms out explicitly instead."
        )
    for _, perm in _signed_permutations(len(bra)):
        mapping = {bra[k]: bra[perm[k]] for k in range(len(bra))}
        mapping.update({ket[k]: ket[perm[k]] for k in range(len(ket))})
        yield 1, mapping


def _relabel_index(index: Index, mapping: Mapping[Index, Index]) -> Index:
    plain = index.plain()
    target = mapping.get(plain, plain)
    protos = tuple(_relabel_index(p, mapping) for p in index.protos)
    if target is plain and protos == index.protos:
        return index
    return Index(target.space, target.ordinal, protos)


def relabel(
    expr: Expr, mapping: Mapping[Index, Index], labels: Mapping[str, str] | None = None
) -> Expr:
    """``expr`` with indices substituted by ``mapping`` and tensor labels by ``labels``.

    Indices not in ``mapping`` (and labels not in ``labels``) are kept; proto-indices
    are substituted too. The substitution is simultaneous (a swap is a valid mapping).

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.expr import Index
        >>> e = sq.parse_expr("W{a1;i1} * t{a1;i2}")
        >>> str(relabel(e, {Index("i", 1): Index("j", 1)}, {"W": "Wj"}))
        'Wj{a_1;j_1}:N-C-S * t{a_1;i_2}:N-C-S'
    """
    renames = labels or {}
    if isinstance(expr, Tensor):
        return dataclasses.replace(
            expr,
            label=renames.get(expr.label, expr.label),
            bra=tuple(_relabel_index(i, mapping) for i in expr.bra),
            ket=tuple(_relabel_index(i, mapping) for i in expr.ket),
            aux=tuple(_relabel_index(i, mapping) for i in expr.aux),
        )
    if isinstance(expr, NormalOperator):
        return dataclasses.replace(
            expr,
            annihilators=tuple(_relabel_index(i, mapping) for i in expr.annihilators),
            creators=tuple(_relabel_index(i, mapping) for i in expr.creators),
        )
    if isinstance(expr, Product):
        return Product(expr.scalar, tuple(relabel(f, mapping, labels) for f in expr.factors))
    if isinstance(expr, Sum):
        return Sum(tuple(relabel(t, mapping, labels) for t in expr.terms))
    return expr
