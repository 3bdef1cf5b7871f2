"""Write expressions in SeQuant's canonical text syntax.

The output is what SeQuant's ``serialize(expr, {.annot_symm=true})`` writes: indices as
``i_1``, tensors as ``label{bra;ket;aux}:P-B-C``, the scalar of a product first (only if
it is not 1), factors joined by ``" * "``, terms by ``" + "`` or ``" - "``.

Example:
    >>> import sq_jax as sq
    >>> (eq,) = sq.parse("R{a1;i1} = f{a1;i1} - 1/2 g{i2,a1;a2,a3} t{a2,a3;i1,i2}")
    >>> sq.serialize(eq)
    'R{a_1;i_1}:N-C-S = f{a_1;i_1}:N-C-S - 1/2 g{i_2,a_1;a_2,a_3}:N-C-S * t{a_2,a_3;i_1,i_2}:N-C-S'
"""

from __future__ import annotations

from fractions import Fraction

from . import nodes as ex

__all__ = ["serialize"]


def serialize(obj: ex.Expr | ex.Equation | ex.Index, *, annot_symm: bool = True) -> str:
    """Return SeQuant's canonical text for an expression, equation or index.

    Args:
        obj: the node to print.
        annot_symm: print each tensor's ``:P-B-C`` symmetry suffix (SeQuant's default).

    Returns:
        One line of text that :func:`sq_jax.parse` reads back to an equal expression
        (for flat expressions; nested ones give an equal tree).

    Example:
        >>> import sq_jax as sq
        >>> sq.serialize(sq.parse_expr("t{i1;a1}"), annot_symm=False)
        't{i_1;a_1}'
    """
    return _Writer(annot_symm).write(obj)


def _fraction(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return f"{value.numerator}/{value.denominator}"


class _Writer:
    def __init__(self, annot_symm: bool) -> None:
        self.annot_symm = annot_symm

    def write(self, obj: object) -> str:
        if isinstance(obj, ex.Equation):
            return f"{self.write(obj.lhs)} = {self.write(obj.rhs)}"
        if isinstance(obj, ex.Index):
            return str(obj)
        if isinstance(obj, ex.Tensor):
            return self._tensor(obj)
        if isinstance(obj, ex.NormalOperator):
            return f"{obj.label}{{{self._group(obj.annihilators)};{self._group(obj.creators)}}}"
        if isinstance(obj, ex.Constant):
            return _fraction(obj.value)
        if isinstance(obj, ex.Variable):
            return obj.name + ("^*" if obj.conjugated else "")
        if isinstance(obj, ex.Power):
            return self._power(obj)
        if isinstance(obj, ex.Product):
            return self._product(obj)
        if isinstance(obj, ex.Sum):
            return self._sum(obj)
        raise TypeError(f"cannot serialize {type(obj).__name__}: {obj!r}")

    @staticmethod
    def _group(indices: tuple[ex.Index, ...]) -> str:
        return ",".join(str(i) for i in indices)

    def _tensor(self, t: ex.Tensor) -> str:
        groups = [self._group(t.bra)]
        if t.ket or t.aux:
            groups.append(self._group(t.ket))
        if t.aux:
            groups.append(self._group(t.aux))
        text = f"{t.label}{{{';'.join(groups)}}}"
        if self.annot_symm:
            text += f":{t.symmetry}"
        return text

    def _power(self, p: ex.Power) -> str:
        base = p.base
        if isinstance(base, ex.Variable):
            base_text = f"({self.write(base)})" if base.conjugated else base.name
        else:
            v = base.value
            plain = v.denominator == 1 and v >= 0
            base_text = _fraction(v) if plain else f"({_fraction(v)})"
        text = f"{base_text}^({_fraction(p.exponent)})"
        return f"({text})^*" if p.conjugated else text

    def _factor(self, f: ex.Expr) -> str:
        text = self.write(f)
        if isinstance(f, ex.Sum | ex.Product):
            return f"({text})"
        if isinstance(f, ex.Constant) and f.value < 0:
            return f"({text})"
        return text

    def _product(self, p: ex.Product) -> str:
        body = " * ".join(self._factor(f) for f in p.factors)
        if p.scalar == 1:
            return body
        if not body:
            return _fraction(p.scalar)
        return f"{_fraction(p.scalar)} {body}"

    def _sum(self, s: ex.Sum) -> str:
        out = ""
        for k, term in enumerate(s.terms):
            text = f"({self.write(term)})" if isinstance(term, ex.Sum) else self.write(term)
            if k == 0:
                out = text
            elif text.startswith("-"):
                out += " - " + text[1:].lstrip()
            else:
                out += " + " + text
        return out
