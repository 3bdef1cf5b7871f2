"""Read SeQuant's text syntax into the expression IR.

A hand-written tokenizer and recursive-descent parser for the syntax of SeQuant's
``deserialize`` (formerly ``parse_expr``), documented in
``docs/syntax.md``, "Grammar". Sums and products are parsed with loops,
so a line of thousands of terms needs no deep recursion; only parenthesis nesting
recurses (bounded by ``_MAX_DEPTH``).

How the text becomes IR (SeQuant's conversion rules):

* numbers in a product fold into the exact rational scalar (``.4`` is ``2/5``); a product
  of numbers only is a :class:`Constant`; a product of one factor with scalar 1 is that
  factor; a leading ``-`` multiplies the scalar by -1;
* parenthesized products and sums stay nested as factors; a sum of one term is the term;
* ``a{…}``, ``ã{…}``, ``b{…}`` and ``b̃{…}`` are normal operators, a bare ``a`` a variable.

Numbers may have an exponent glued to them (``2e3``, ``1e-3``, ``1.5E+2``; see
:mod:`sq_jax.expr.tokenize` for ``2e`` and names such as ``e3``).

Known limitations: complex constants are not representable (sq_jax scalars are exact
rationals), and inline ``#`` comments are not accepted.

Example:
    >>> import sq_jax as sq
    >>> (eq,) = sq.parse("R{a1;i1} = f{a1;i1} - 1/2 g{i2,a1;a2,a3} t{a2,a3;i1,i2}")
    >>> len(eq.rhs.terms), eq.rhs.terms[1].scalar
    (2, Fraction(-1, 2))
"""

from __future__ import annotations

import dataclasses
import unicodedata
from fractions import Fraction
from typing import Any

from .._errors import ParseError
from . import nodes as ex
from ._tensor_syntax import TensorSyntax
from .options import ParseOptions, resolve_options
from .serialize import serialize
from .symmetrize import expand_symmetrizers
from .tokenize import Token as _Token
from .tokenize import close_error
from .tokenize import describe as _describe
from .tokenize import logical_lines as _logical_lines
from .tokenize import physical_lines as _physical_lines
from .tokenize import span_error as _span_error
from .tokenize import token_error as _error
from .validate import validate

__all__ = ["ParseOptions", "parse", "parse_expr"]

_MAX_DEPTH = 100
"""Deepest parenthesis nesting accepted (deeper text is a ParseError, not a crash)."""

_OPERATOR_LABELS = frozenset(unicodedata.normalize("NFC", s) for s in ("a", "ã", "b", "b̃"))
"""Labels that make ``label{…}`` a normal operator rather than a tensor."""

_LEGACY_SYMMETRIZERS = {"A": "Â", "S": "Ŝ"}

_DIGITS = frozenset("0123456789")


def parse(
    text: str, options: ParseOptions | None = None, **option_overrides: Any
) -> tuple[ex.Equation, ...]:
    """Parse equations, one per line: ``lhs = rhs`` or ``lhs -> rhs``.

    Blank lines and lines whose first non-space character is ``#`` are skipped. A line
    whose first non-space character is ``+``, ``-`` or ``*`` continues the previous
    equation, so long sums may be wrapped. The left-hand side is a tensor or a variable.

    Args:
        text: the equations.
        options: a :class:`ParseOptions`; the defaults when omitted.
        **option_overrides: fields of :class:`ParseOptions` to override, e.g.
            ``spaces=...`` or ``validate=False``.

    Returns:
        The equations in text order, with symmetrizers expanded and validated as the
        options say.

    Raises:
        ParseError: the text is not valid syntax (with line, column and a caret).
        ExpressionError: the equations are well-formed text but not valid tensor
            equations (see :func:`sq_jax.expr.validate.validate`).
        TypeError: an unknown option name was passed.

    Example:
        >>> import sq_jax as sq
        >>> eqs = sq.parse('''
        ... # doubles energy
        ... E = 1/4 g{i1,i2;a1,a2}
        ...     * t{a1,a2;i1,i2}
        ... R{a1;i1} -> f{a1;i1}
        ... ''')
        >>> [eq.name for eq in eqs]
        ['E', 'R']
    """
    opts = resolve_options(options, option_overrides)
    equations = []
    for tokens in _logical_lines(text):
        eq = _Parser(tokens, opts).equation()
        if opts.expand_symmetrizers:
            eq = expand_symmetrizers(eq, legacy_labels=opts.legacy_symmetrizer_labels)
        equations.append(eq)
    result = tuple(equations)
    if opts.validate:
        validate(result, opts.spaces, allow_rank_overloading=opts.allow_rank_overloading)
    return result


def parse_expr(text: str, options: ParseOptions | None = None, **option_overrides: Any) -> ex.Expr:
    """Parse one expression (no ``=``); it may span several lines.

    Args:
        text: the expression.
        options: a :class:`ParseOptions`; the defaults when omitted.
        **option_overrides: fields of :class:`ParseOptions` to override.

    Returns:
        The expression in the parser's normal form (see the module docstring).

    Raises:
        ParseError: the text is empty or not valid syntax.
        ExpressionError: the index structure is invalid (only when validating).
        TypeError: an unknown option name was passed.

    Example:
        >>> import sq_jax as sq
        >>> e = sq.parse_expr("(-1/2)(g{i1;a1}*t{a1;i1})*(x)")
        >>> e.scalar, len(e.factors), type(e.factors[0]).__name__
        (Fraction(-1, 2), 2, 'Product')
    """
    opts = resolve_options(options, option_overrides)
    lines = _physical_lines(text)
    if not lines:
        raise ParseError("empty expression: expected at least one term, e.g. `t{i1;a1}` or `1/2`.")
    tokens = [tok for line_tokens in lines for tok in line_tokens[:-1]]
    tokens.append(lines[-1][-1])
    expr = _Parser(tokens, opts).whole_expression()
    if opts.expand_symmetrizers:
        expr = expand_symmetrizers(expr, legacy_labels=opts.legacy_symmetrizer_labels)
    if opts.validate:
        validate(expr, opts.spaces, allow_rank_overloading=opts.allow_rank_overloading)
    return expr


# -- parser --------------------------------------------------------------------------------


def _make_product(scalar: Fraction, factors: list[ex.Expr]) -> ex.Expr:
    if not factors:
        return ex.Constant(scalar)
    if len(factors) == 1 and scalar == 1:
        return factors[0]
    return ex.Product(scalar, tuple(factors))


class _Parser(TensorSyntax):
    """Recursive descent over one equation's (or expression's) tokens."""

    # -- top level

    def equation(self) -> ex.Equation:
        tok = self.expect_name(
            "the result of the equation (a tensor such as `R{a1;i1}` or a variable such as `E`)"
        )
        lhs = self.named(0)
        if not isinstance(lhs, ex.Tensor | ex.Variable) or (
            isinstance(lhs, ex.Variable) and lhs.conjugated
        ):
            kind = "power" if isinstance(lhs, ex.Power) else "conjugated variable"
            if isinstance(lhs, ex.NormalOperator):
                kind = "normal operator"
            raise _error(
                f"the result of an equation must be a tensor or a plain variable, got the "
                f"{kind} `{serialize(lhs)}`; put a tensor such as `R{{a1;i1}}` or a variable "
                "such as `E` on the left of '='.",
                tok,
                self.peek().col - tok.col,
            )
        op = self.peek()
        if op.kind not in ("=", "->"):
            raise _error(
                f"expected '=' or '->' after the result `{serialize(lhs, annot_symm=False)}`, "
                f"got {_describe(op)}; "
                "an equation reads `R{a1;i1} = f{a1;i1} + …` (use parse_expr for a bare "
                "expression).",
                op,
            )
        self.take()
        if self.at("eof"):
            raise _error(
                f"missing right-hand side after '{op.text}': expected an expression.",
                self.peek(),
            )
        rhs = self.sum(0)
        self.expect_end()
        return ex.Equation(lhs, rhs)

    def whole_expression(self) -> ex.Expr:
        expr = self.sum(0)
        self.expect_end()
        return expr

    def expect_end(self) -> None:
        tok = self.peek()
        if tok.kind == "eof":
            return
        if tok.kind in (")", "}", ">"):
            opener = {")": "(", "}": "{", ">": "<"}[tok.kind]
            raise _error(f"unmatched '{tok.kind}': there is no '{opener}' before it.", tok)
        if tok.kind in ("=", "->"):
            raise _error(
                f"unexpected '{tok.text}': an expression has no '=' (use parse() for "
                "equations, one per line).",
                tok,
            )
        raise _error(
            f"unexpected {_describe(tok)} after a complete expression; expected '+', '-', "
            "'*', another factor, or the end of the line.",
            tok,
        )

    # -- sums and products (loops, not recursion)

    def sum(self, depth: int) -> ex.Expr:
        terms = []
        sign = 1
        if self.peek().kind in ("+", "-"):
            sign = -1 if self.take().kind == "-" else 1
        terms.append(self.product(sign, depth))
        while self.peek().kind in ("+", "-"):
            sign = -1 if self.take().kind == "-" else 1
            terms.append(self.product(sign, depth))
        return terms[0] if len(terms) == 1 else ex.Sum(tuple(terms))

    def starts_factor(self, tok: _Token) -> bool:
        return tok.kind in ("name", "number", "(")

    def product(self, sign: int, depth: int) -> ex.Expr:
        scalar = Fraction(sign)
        factors: list[ex.Expr] = []
        first = True
        while True:
            tok = self.peek()
            if tok.kind == "*":
                if first:
                    raise _error("expected a factor before '*'.", tok)
                self.take()
                nxt = self.peek()
                if not self.starts_factor(nxt):
                    raise _error(
                        f"expected a factor after '*', got {_describe(nxt)}.",
                        nxt if nxt.kind != "eof" else tok,
                    )
            elif not self.starts_factor(tok):
                if first:
                    prev = self.toks[self.pos - 1] if self.pos else None
                    after = f" after '{prev.text}'" if prev is not None else ""
                    raise _error(
                        f"expected a term{after}, got {_describe(tok)}; a term is a number, "
                        "a tensor, a variable or a parenthesized expression.",
                        tok,
                    )
                break
            item = self.factor(depth)
            if isinstance(item, ex.Constant):
                scalar *= item.value
            else:
                factors.append(item)
            first = False
        if (
            self.opts.legacy_symmetrizer_labels
            and len(factors) > 1
            and isinstance(factors[0], ex.Tensor)
            and factors[0].label in _LEGACY_SYMMETRIZERS
        ):
            head = factors[0]
            factors[0] = dataclasses.replace(head, label=_LEGACY_SYMMETRIZERS[head.label])
        return _make_product(scalar, factors)

    def factor(self, depth: int) -> ex.Expr:
        tok = self.peek()
        if tok.kind == "number":
            value = self.number()
            if self.at("^") and self.at("(", 1):
                return self.power_tail(ex.Constant(value))
            return ex.Constant(value)
        if tok.kind == "name":
            return self.named(depth)
        return self.parenthesized(depth)

    def parenthesized(self, depth: int) -> ex.Expr:
        opener = self.take()
        if depth >= _MAX_DEPTH:
            raise _error(
                f"parentheses nested more than {_MAX_DEPTH} deep; flatten the expression.",
                opener,
            )
        inner = self.sum(depth + 1)
        close = self.peek()
        if close.kind != ")":
            raise close_error(
                opener,
                close,
                ")",
                f"expected ')' to close the '(' at column {opener.col}, got {_describe(close)}.",
            )
        self.take()
        if self.at("^") and self.at("(", 1):
            if not isinstance(inner, ex.Constant | ex.Variable):
                raise _span_error(
                    f"only a number or a variable can be raised to a power, got a "
                    f"{type(inner).__name__.lower()} `({inner})`.",
                    opener,
                    close,
                )
            return self.power_tail(inner)
        if self.at("^") and self.at("*", 1):
            star = self.peek(1)
            if not isinstance(inner, ex.Power) or inner.conjugated:
                raise _span_error(
                    f"only a power `(x^(n))^*` can be conjugated with a parenthesized '^*'; "
                    f"got `({inner})` (write `x^*` for a conjugated variable).",
                    opener,
                    star,
                )
            self.take()
            self.take()
            return dataclasses.replace(inner, conjugated=True)
        return inner

    def number(self) -> Fraction:
        tok = self.take()
        value: Fraction = tok.value
        if self.at("/"):
            slash = self.take()
            if not self.at("number"):
                raise _span_error(
                    f"malformed number `{tok.text}/`: expected a denominator after '/', "
                    f"got {_describe(self.peek())} (write e.g. `1/2`).",
                    tok,
                    slash,
                )
            den = self.take()
            if den.value == 0:
                raise _span_error(
                    f"malformed number `{tok.text}/{den.text}`: division by zero.", tok, den
                )
            value = value / den.value
        return value

    def power_tail(self, base: ex.Constant | ex.Variable) -> ex.Power:
        self.take()  # '^'
        opener = self.take()  # '('
        sign = 1
        if self.peek().kind in ("+", "-"):
            sign = -1 if self.take().kind == "-" else 1
        tok = self.peek()
        if tok.kind != "number":
            raise _error(
                f"power exponents must be rational numbers such as `2` or `1/2`, got "
                f"{_describe(tok)}.",
                tok,
            )
        exponent = sign * self.number()
        close = self.peek()
        if close.kind != ")":
            raise _error(
                f"expected ')' to close the exponent opened at column {opener.col}, got "
                f"{_describe(close)}.",
                close if close.kind != "eof" else opener,
            )
        self.take()
        return ex.Power(base, exponent)

    # -- names: tensors, operators, variables

    def named(self, depth: int) -> ex.Expr:
        tok = self.take()
        name = tok.text
        if name.endswith("_"):
            raise _error(
                f"the name `{name}` ends with '_'; a tensor or variable name may not end "
                f"with '_' (write `{name.rstrip('_')}` or `{name}1`).",
                tok,
            )
        if self.at("{") or (self.at("_") and self.at("{", 1)) or (self.at("^") and self.at("{", 1)):
            return self.tensor(tok)
        conjugated = False
        if self.at("^") and self.at("*", 1):
            self.take()
            self.take()
            conjugated = True
        var = ex.Variable(name, conjugated)
        if self.at("^") and self.at("(", 1):
            return self.power_tail(var)
        return var

    def scripts(self, name_tok: _Token) -> tuple[tuple[ex.Index, ...], tuple[ex.Index, ...]]:
        """``(bra, ket)`` of ``label_{bra}^{ket}`` or ``label^{ket}_{bra}``."""
        role = {"_": "bra", "^": "ket"}
        first = self.take().kind
        second = "^" if first == "_" else "_"
        groups = {first: self.single_group(name_tok, first)}
        if not (self.at(second) and self.at("{", 1)):
            label = name_tok.text
            raise _error(
                f"expected '{second}{{…}}' (the {role[second]}) after `{label}{first}{{…}}`, "
                f"got {_describe(self.peek())}; write "
                f"`{label}{first}{{{role[first]}}}{second}{{{role[second]}}}`.",
                self.peek(),
            )
        self.take()
        groups[second] = self.single_group(name_tok, second)
        return groups["_"], groups["^"]

    def tensor(self, name_tok: _Token) -> ex.Tensor | ex.NormalOperator:
        label = name_tok.text
        is_operator = unicodedata.normalize("NFC", label) in _OPERATOR_LABELS
        if self.at("{"):
            groups = self.brace_groups(name_tok, 2 if is_operator else 3)
        else:  # `named` calls this only before '{', '_{' or '^{'
            groups = list(self.scripts(name_tok))
        while len(groups) < 3:
            groups.append(())
        bra, ket, aux = groups
        symm_tok = self.peek() if self.at("symm") else None
        if is_operator:
            if symm_tok is not None:
                raise _error(
                    f"the normal operator `{label}{{…}}` takes no symmetry suffix; remove "
                    f"`{symm_tok.text}`.",
                    symm_tok,
                )
            return ex.NormalOperator(label, bra, ket)
        symmetry = self.default_symm
        if symm_tok is not None:
            self.take()
            symmetry = self.symmetry(symm_tok)
        return ex.Tensor(label, bra, ket, aux, symmetry)
