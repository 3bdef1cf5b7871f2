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

Known limitations: complex constants are not representable (sq_jax scalars are exact
rationals), inline ``#`` comments are not accepted, and the number syntax has no exponent
(``1e-3``).

Example:
    >>> import sq_jax as sq
    >>> (eq,) = sq.parse("R{a1;i1} = f{a1;i1} - 1/2 g{i2,a1;a2,a3} t{a2,a3;i1,i2}")
    >>> len(eq.rhs.terms), eq.rhs.terms[1].scalar
    (2, Fraction(-1, 2))
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .._errors import ParseError
from .nodes import (
    Constant,
    Equation,
    Expr,
    Index,
    NormalOperator,
    Power,
    Product,
    Sum,
    Symmetry,
    Tensor,
    Variable,
)
from .serialize import serialize
from .spaces import DEFAULT_SPACES, Spaces
from .symmetrize import expand_symmetrizers
from .validate import validate

__all__ = ["ParseOptions", "parse", "parse_expr"]

_MAX_DEPTH = 100
"""Deepest parenthesis nesting accepted (deeper text is a ParseError, not a crash)."""

_PERM_LETTERS = {"A": "antisymmetric", "S": "symmetric", "N": "none"}
_BRAKET_LETTERS = {
    "C": "conjugate",
    "S": "symmetric",
    "N": "none",
    "H": "Hermitian",
    "A": "anti-Hermitian",
}
_COLUMN_LETTERS = {"S": "symmetric", "N": "none"}
_SYMM_SLOTS = (
    ("permutational", _PERM_LETTERS),
    ("bra-ket", _BRAKET_LETTERS),
    ("column", _COLUMN_LETTERS),
)

_OPERATOR_LABELS = frozenset(unicodedata.normalize("NFC", s) for s in ("a", "ã", "b", "b̃"))
"""Labels that make ``label{…}`` a normal operator rather than a tensor."""

_LEGACY_SYMMETRIZERS = {"A": "Â", "S": "Ŝ"}

_NAME_EXTRA = frozenset("↑↓⁺⁻₊₋⁔'")
_DIGITS = frozenset("0123456789")
_PUNCT = frozenset("{}();,<>^*+/=_")
_NUMBER_RE = re.compile(r"[0-9]+\.?[0-9]*|\.[0-9]+")
_COMPLEX_SUFFIXES = frozenset("ij𝑖")
_SPACE_RE = re.compile(r"\s+")
_NAME_FAST_RE = re.compile(r"[^\W\d_](?:[^\W_]|_(?!\{))*")


@dataclass(frozen=True, slots=True)
class ParseOptions:
    """How :func:`parse` and :func:`parse_expr` read text.

    Example:
        >>> import sq_jax as sq
        >>> opts = sq.ParseOptions(def_perm_symm="A")
        >>> str(sq.parse_expr("t{a1;i1}", opts))
        't{a_1;i_1}:A-C-S'
        >>> sq.ParseOptions(def_perm_symm="A", def_col_symm="N").def_col_symm
        'S'
    """

    spaces: Spaces = DEFAULT_SPACES
    """The registry index base keys are looked up in (aliases such as ``K`` resolve)."""
    def_perm_symm: str = "N"
    """Permutational symmetry of a tensor with no ``:P`` suffix letter."""
    def_braket_symm: str = "C"
    """Bra-ket symmetry of a tensor whose suffix gives no second letter."""
    def_col_symm: str = "S"
    """Column symmetry of a tensor whose suffix gives no third letter; forced to ``S``
    when ``def_perm_symm`` is not ``N``, as SeQuant does."""
    drop_proto_indices: bool = False
    """Read ``a_1<i_1,i_2>`` as plain ``a_1`` (evaluate PNO-written text canonically)."""
    expand_symmetrizers: bool = True
    """Expand ``Â{…}``/``Ŝ{…}`` products into sums of permuted terms."""
    legacy_symmetrizer_labels: bool = False
    """Read a tensor ``A``/``S`` that leads a product of several factors as ``Â``/``Ŝ``
    (older SeQuant output). Off by default: ``A{a1;i2} B{i1;a1}`` uses ``A`` as a tensor."""
    validate: bool = True
    """Check index structure and label use after parsing (:func:`sq_jax.expr.validate`)."""
    allow_rank_overloading: bool = True
    """Allow one label with several (bra, ket, aux) signatures (distinct inputs)."""

    def __post_init__(self) -> None:
        if not isinstance(self.spaces, Spaces):
            raise TypeError(
                f"ParseOptions.spaces must be a sq_jax.Spaces registry, got "
                f"{type(self.spaces).__name__}; build one with sq_jax.Spaces(i=..., a=...)."
            )
        for name, value, (_, allowed) in zip(
            ("def_perm_symm", "def_braket_symm", "def_col_symm"),
            (self.def_perm_symm, self.def_braket_symm, self.def_col_symm),
            _SYMM_SLOTS,
            strict=True,
        ):
            if value not in allowed:
                raise ValueError(
                    f"ParseOptions.{name}={value!r} is not a symmetry letter; expected one of "
                    + ", ".join(f"{k!r} ({v})" for k, v in allowed.items())
                    + "."
                )
        if self.def_perm_symm != "N":
            object.__setattr__(self, "def_col_symm", "S")

    def default_symmetry(self) -> Symmetry:
        """The symmetry of a tensor written with no suffix.

        Example:
            >>> str(ParseOptions(def_perm_symm="A").default_symmetry())
            'A-C-S'
        """
        return Symmetry(self.def_perm_symm, self.def_braket_symm, self.def_col_symm)


def parse(
    text: str, options: ParseOptions | None = None, **option_overrides: Any
) -> tuple[Equation, ...]:
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
    opts = _options(options, option_overrides)
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


def parse_expr(text: str, options: ParseOptions | None = None, **option_overrides: Any) -> Expr:
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
    opts = _options(options, option_overrides)
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


# -- options -------------------------------------------------------------------------------


def _options(options: ParseOptions | None, overrides: dict[str, Any]) -> ParseOptions:
    if options is None:
        options = ParseOptions()
    elif not isinstance(options, ParseOptions):
        raise TypeError(
            f"options must be a sq_jax.ParseOptions, got {type(options).__name__}; "
            "pass ParseOptions(...) or keyword overrides such as spaces=..."
        )
    if not overrides:
        return options
    known = [f.name for f in dataclasses.fields(ParseOptions)]
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise TypeError(
            f"unknown parse option(s) {', '.join(map(repr, unknown))}; "
            f"expected some of {', '.join(map(repr, known))}."
        )
    return dataclasses.replace(options, **overrides)


# -- tokens --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    """``name``, ``number``, ``symm``, ``->``, ``eof`` or the punctuation character."""
    text: str
    line: int
    col: int
    """1-based column of the first character."""
    space_before: bool
    src: str
    """The whole source line (for the caret)."""
    value: Any = None
    """A Fraction for numbers; ((letter, col), …) for symmetry suffixes."""


def _error(reason: str, tok: _Token, length: int | None = None) -> ParseError:
    n = len(tok.text) if length is None else length
    return ParseError(reason, line=tok.line, column=tok.col, length=n, source_line=tok.src)


def _is_name_start(c: str) -> bool:
    return unicodedata.category(c)[0] == "L"


def _is_name_char(c: str) -> bool:
    return unicodedata.category(c)[0] in "LMN" or c in _NAME_EXTRA


def _tokenize(src: str, line: int) -> list[_Token]:
    toks: list[_Token] = []
    n, p, space = len(src), 0, False

    def err(reason: str, col0: int, length: int) -> ParseError:
        return ParseError(reason, line=line, column=col0 + 1, length=length, source_line=src)

    while p < n:
        c = src[p]
        if c.isspace():
            p = _SPACE_RE.match(src, p).end()
            space = True
            continue
        start, value = p, None
        if _is_name_start(c):
            p = _NAME_FAST_RE.match(src, p).end()  # fast path; the loop below is exact
            while p < n:
                d = src[p]
                if d == "_":
                    if p + 1 < n and src[p + 1] == "{":
                        break
                    p += 1
                elif _is_name_char(d):
                    p += 1
                else:
                    break
            kind = "name"
        elif c in _DIGITS or c == ".":
            while p < n and (src[p] in _DIGITS or src[p] == "."):
                p += 1
            text = src[start:p]
            if not _NUMBER_RE.fullmatch(text):
                raise err(
                    f"malformed number `{text}`: expected digits with at most one '.', "
                    "e.g. `2`, `0.5` or `.5`.",
                    start,
                    p - start,
                )
            if (
                p < n
                and src[p] in _COMPLEX_SUFFIXES
                and not (p + 1 < n and (_is_name_char(src[p + 1]) or src[p + 1] == "_"))
            ):
                raise err(
                    f"complex constant `{src[start : p + 1]}` is not supported: sq_jax scalars "
                    "are exact rationals. Write a real coefficient, or use a variable for the "
                    "complex factor (e.g. `2 ω`).",
                    start,
                    p + 1 - start,
                )
            kind, value = "number", Fraction(text)
        elif c == "-":
            p += 2 if src.startswith("->", p) else 1
            kind = src[start:p]
        elif c == ":":
            p += 1
            letters: list[tuple[str, int]] = []
            if p >= n or not ("A" <= src[p].upper() <= "Z" and src[p].isascii()):
                raise err(
                    "expected a symmetry letter right after ':', e.g. `:A`, `:S-C` or "
                    "`:N-S-N` (no spaces inside the suffix).",
                    start,
                    1,
                )
            letters.append((src[p], p + 1))
            p += 1
            while (
                len(letters) < 3
                and src.startswith("-", p)
                and p + 1 < n
                and src[p + 1].isascii()
                and src[p + 1].isupper()
                and not (p + 2 < n and (_is_name_char(src[p + 2]) or src[p + 2] == "_"))
            ):
                letters.append((src[p + 1], p + 2))
                p += 2
            if p < n and (_is_name_char(src[p]) or src[p] == "_"):
                q = p
                while q < n and (_is_name_char(src[q]) or src[q] == "_"):
                    q += 1
                raise err(
                    f"unexpected `{src[p:q]}` in the symmetry suffix `{src[start:q]}`: the "
                    "suffix is at most three letters separated by '-', e.g. `:A-C-S`.",
                    p,
                    q - p,
                )
            kind, value = "symm", tuple(letters)
        elif c in _PUNCT:
            p += 1
            kind = c
        else:
            hint = " (use ASCII '-' for minus)" if c in "−–—" else ""
            raise err(f"unexpected character {c!r}{hint}.", start, 1)
        toks.append(_Token(kind, src[start:p], line, start + 1, space, src, value))
        space = False
    toks.append(_Token("eof", "", line, n + 1, space, src))
    return toks


def _split_lines(text: str) -> list[str]:
    return re.split(r"\r\n|\n|\r", text)


def _physical_lines(text: str) -> list[list[_Token]]:
    """Token lists of the non-blank, non-comment lines (each ending in ``eof``)."""
    out = []
    for no, raw in enumerate(_split_lines(text), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        out.append(_tokenize(raw, no))
    return out


def _logical_lines(text: str) -> list[list[_Token]]:
    """Token lists of equations: a line starting with '+'/'-' continues the previous one."""
    groups: list[list[_Token]] = []
    for toks in _physical_lines(text):
        if toks[0].kind in ("+", "-", "*"):
            if not groups:
                raise _error(
                    f"this line starts with '{toks[0].text}', so it continues the previous "
                    "equation, but "
                    "there is none; start the first line with the result, e.g. `R{a1;i1} = …`.",
                    toks[0],
                )
            groups[-1].pop()  # the previous line's eof
            groups[-1].extend(toks)
        else:
            groups.append(toks)
    return groups


# -- parser --------------------------------------------------------------------------------


def _describe(tok: _Token) -> str:
    return "the end of the line" if tok.kind == "eof" else f"`{tok.text}`"


def _make_product(scalar: Fraction, factors: list[Expr]) -> Expr:
    if not factors:
        return Constant(scalar)
    if len(factors) == 1 and scalar == 1:
        return factors[0]
    return Product(scalar, tuple(factors))


class _Parser:
    """Recursive descent over one equation's (or expression's) tokens."""

    def __init__(self, tokens: list[_Token], options: ParseOptions) -> None:
        self.toks = [*tokens, tokens[-1]]  # a second eof, so peek(1) needs no bounds check
        self.pos = 0
        self.space_cache: dict[str, str] = {}
        self.opts = options
        self.default_symm = options.default_symmetry()

    # -- token access

    def peek(self, k: int = 0) -> _Token:
        return self.toks[self.pos + k]

    def take(self) -> _Token:
        tok = self.toks[self.pos]
        self.pos += 1
        return tok

    def at(self, kind: str, k: int = 0) -> bool:
        return self.toks[self.pos + k].kind == kind

    # -- top level

    def equation(self) -> Equation:
        tok = self.peek()
        if tok.kind != "name":
            raise _error(
                f"expected the result of the equation (a tensor such as `R{{a1;i1}}` or a "
                f"variable such as `E`), got {_describe(tok)}.",
                tok,
            )
        lhs = self.named(0)
        if not isinstance(lhs, Tensor | Variable) or (isinstance(lhs, Variable) and lhs.conjugated):
            kind = "power" if isinstance(lhs, Power) else "conjugated variable"
            if isinstance(lhs, NormalOperator):
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
        return Equation(lhs, rhs)

    def whole_expression(self) -> Expr:
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

    def sum(self, depth: int) -> Expr:
        terms = []
        sign = 1
        if self.peek().kind in ("+", "-"):
            sign = -1 if self.take().kind == "-" else 1
        terms.append(self.product(sign, depth))
        while self.peek().kind in ("+", "-"):
            sign = -1 if self.take().kind == "-" else 1
            terms.append(self.product(sign, depth))
        return terms[0] if len(terms) == 1 else Sum(tuple(terms))

    def starts_factor(self, tok: _Token) -> bool:
        return tok.kind in ("name", "number", "(")

    def product(self, sign: int, depth: int) -> Expr:
        scalar = Fraction(sign)
        factors: list[Expr] = []
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
            if isinstance(item, Constant):
                scalar *= item.value
            else:
                factors.append(item)
            first = False
        if (
            self.opts.legacy_symmetrizer_labels
            and len(factors) > 1
            and isinstance(factors[0], Tensor)
            and factors[0].label in _LEGACY_SYMMETRIZERS
        ):
            head = factors[0]
            factors[0] = dataclasses.replace(head, label=_LEGACY_SYMMETRIZERS[head.label])
        return _make_product(scalar, factors)

    def factor(self, depth: int) -> Expr:
        tok = self.peek()
        if tok.kind == "number":
            value = self.number()
            if self.at("^") and self.at("(", 1):
                return self.power_tail(Constant(value))
            return Constant(value)
        if tok.kind == "name":
            return self.named(depth)
        return self.parenthesized(depth)

    def parenthesized(self, depth: int) -> Expr:
        opener = self.take()
        if depth >= _MAX_DEPTH:
            raise _error(
                f"parentheses nested more than {_MAX_DEPTH} deep; flatten the expression.",
                opener,
            )
        inner = self.sum(depth + 1)
        close = self.peek()
        if close.kind != ")":
            if close.kind == "eof":
                raise _error(
                    f"unclosed '(' at column {opener.col}: expected ')' before the end of "
                    "the line.",
                    opener,
                )
            if close.kind in ("}", ">"):
                raise _error(
                    f"mismatched '{close.kind}': expected ')' to close the '(' at column "
                    f"{opener.col}.",
                    close,
                )
            raise _error(
                f"expected ')' to close the '(' at column {opener.col}, got {_describe(close)}.",
                close,
            )
        self.take()
        if self.at("^") and self.at("(", 1):
            if not isinstance(inner, Constant | Variable):
                raise _error(
                    f"only a number or a variable can be raised to a power, got a "
                    f"{type(inner).__name__.lower()} `({inner})`.",
                    opener,
                    close.col + 1 - opener.col,
                )
            return self.power_tail(inner)
        if self.at("^") and self.at("*", 1):
            star = self.peek(1)
            if not isinstance(inner, Power) or inner.conjugated:
                raise _error(
                    f"only a power `(x^(n))^*` can be conjugated with a parenthesized '^*'; "
                    f"got `({inner})` (write `x^*` for a conjugated variable).",
                    opener,
                    star.col + 1 - opener.col,
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
            den = self.peek()
            if den.kind != "number":
                raise _error(
                    f"malformed number `{tok.text}/`: expected a denominator after '/', "
                    f"got {_describe(den)} (write e.g. `1/2`).",
                    tok,
                    slash.col + 1 - tok.col,
                )
            self.take()
            if den.value == 0:
                raise _error(
                    f"malformed number `{tok.text}/{den.text}`: division by zero.",
                    tok,
                    den.col + len(den.text) - tok.col,
                )
            value = value / den.value
        return value

    def power_tail(self, base: Constant | Variable) -> Power:
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
        return Power(base, exponent)

    # -- names: tensors, operators, variables

    def named(self, depth: int) -> Expr:
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
        var = Variable(name, conjugated)
        if self.at("^") and self.at("(", 1):
            return self.power_tail(var)
        return var

    def tensor(self, name_tok: _Token) -> Tensor | NormalOperator:
        label = name_tok.text
        is_operator = unicodedata.normalize("NFC", label) in _OPERATOR_LABELS
        if self.at("{"):
            groups = self.brace_groups(name_tok, 2 if is_operator else 3)
        elif self.at("_"):
            self.take()
            bra = self.single_group(name_tok, "_")
            if not (self.at("^") and self.at("{", 1)):
                raise _error(
                    f"expected '^{{…}}' (the ket) after `{label}_{{…}}`, got "
                    f"{_describe(self.peek())}; write `{label}_{{bra}}^{{ket}}`.",
                    self.peek(),
                )
            self.take()
            ket = self.single_group(name_tok, "^")
            groups = [bra, ket]
        else:
            self.take()
            ket = self.single_group(name_tok, "^")
            if not (self.at("_") and self.at("{", 1)):
                raise _error(
                    f"expected '_{{…}}' (the bra) after `{label}^{{…}}`, got "
                    f"{_describe(self.peek())}; write `{label}^{{ket}}_{{bra}}`.",
                    self.peek(),
                )
            self.take()
            bra = self.single_group(name_tok, "_")
            groups = [bra, ket]
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
            return NormalOperator(label, bra, ket)
        symmetry = self.default_symm
        if symm_tok is not None:
            self.take()
            symmetry = self.symmetry(symm_tok)
        return Tensor(label, bra, ket, aux, symmetry)

    def symmetry(self, tok: _Token) -> Symmetry:
        if tok.space_before:
            raise _error(
                f"no space is allowed before ':' in a symmetry suffix; write "
                f"`}}{tok.text}` with nothing between '}}' and ':'.",
                tok,
                1,
            )
        letters = [self.default_symm.perm, self.default_symm.braket, self.default_symm.column]
        for slot, (letter, col) in enumerate(tok.value):
            what, allowed = _SYMM_SLOTS[slot]
            if letter not in allowed:
                expected = ", ".join(f"{k} ({v})" for k, v in allowed.items())
                raise ParseError(
                    f"bad {what} symmetry letter `{letter}` in `{tok.text}`; expected one of "
                    f"{expected} (uppercase).",
                    line=tok.line,
                    column=col,
                    length=1,
                    source_line=tok.src,
                )
            letters[slot] = letter
        return Symmetry(*letters)

    def single_group(self, name_tok: _Token, which: str) -> tuple[Index, ...]:
        opener = self.take()  # '{'
        items = self.index_list(("}",))
        close = self.peek()
        if close.kind == ";":
            raise _error(
                f"the `{name_tok.text}_{{bra}}^{{ket}}` form takes one index list per brace "
                "and no ';' (and has no aux group); use `{bra;ket;aux}` for aux indices.",
                close,
            )
        self.close_brace(opener, close)
        return items

    def brace_groups(self, name_tok: _Token, max_groups: int) -> list[tuple[Index, ...]]:
        opener = self.take()  # '{'
        groups = [self.index_list((";", "}"))]
        while self.at(";"):
            semi = self.take()
            if len(groups) == max_groups:
                if max_groups == 2:
                    reason = (
                        f"the normal operator `{name_tok.text}{{…}}` has two groups "
                        "(annihilators;creators) and no aux group; remove this ';'."
                    )
                else:
                    reason = (
                        f"too many ';' in `{name_tok.text}{{…}}`: a tensor has at most "
                        "three groups, {bra;ket;aux}."
                    )
                raise _error(reason, semi)
            groups.append(self.index_list((";", "}")))
        self.close_brace(opener, self.peek())
        return groups

    def close_brace(self, opener: _Token, close: _Token) -> None:
        if close.kind == "}":
            self.take()
            return
        if close.kind == "eof":
            raise _error(
                f"unclosed '{{' at column {opener.col}: expected '}}' before the end of the line.",
                opener,
            )
        if close.kind in (")", ">"):
            raise _error(
                f"mismatched '{close.kind}': expected '}}' to close the '{{' at column "
                f"{opener.col}.",
                close,
            )
        raise _error(
            f"expected ',', ';' or '}}' in the index groups opened at column {opener.col}, "
            f"got {_describe(close)}.",
            close,
        )

    def index_list(self, closers: tuple[str, ...]) -> tuple[Index, ...]:
        items: list[Index] = []
        if self.peek().kind in closers:
            return ()
        while True:
            items.append(self.index(allow_protos=True))
            if not self.at(","):
                return tuple(items)
            comma = self.take()
            if self.peek().kind in (*closers, ",", "eof"):
                raise _error(
                    f"empty index after ',': expected an index such as `i_1`, got "
                    f"{_describe(self.peek())}. Remove the extra ','.",
                    comma,
                )

    def index(self, *, allow_protos: bool) -> Index:
        tok = self.peek()
        if tok.kind != "name":
            raise _error(
                f"expected an index (a space key and an ordinal, such as `i_1` or `a2`), "
                f"got {_describe(tok)}.",
                tok,
            )
        self.take()
        text = tok.text
        cut = len(text)
        while cut > 0 and text[cut - 1] in _DIGITS:
            cut -= 1
        if cut == len(text):
            raise _error(
                f"index `{text}` has no ordinal: an index is a space key followed by a "
                f"number, e.g. `{text.rstrip('_')}_1` or `{text.rstrip('_')}1`.",
                tok,
            )
        key = text[:cut]
        if key.endswith("_"):
            key = key[:-1]
        space = self.resolve_space(key, tok)
        ordinal = int(text[cut:])
        protos: tuple[Index, ...] = ()
        if self.at("<"):
            lt = self.take()
            if not allow_protos:
                raise _error("proto-indices cannot have proto-indices of their own.", lt)
            items = [self.index(allow_protos=False)]
            while self.at(","):
                self.take()
                items.append(self.index(allow_protos=False))
            close = self.peek()
            if close.kind != ">":
                if close.kind == "eof":
                    raise _error(
                        f"unclosed '<' at column {lt.col}: expected '>' to end the proto-indices.",
                        lt,
                    )
                raise _error(
                    f"expected ',' or '>' in the proto-indices opened at column {lt.col}, "
                    f"got {_describe(close)}.",
                    close,
                )
            self.take()
            if not self.opts.drop_proto_indices:
                protos = tuple(items)
        return Index(space, ordinal, protos)

    def resolve_space(self, key: str, tok: _Token) -> str:
        cached = self.space_cache.get(key)
        if cached is not None:
            return cached
        canon = self._lookup_space(key, tok)
        self.space_cache[key] = canon
        return canon

    def _lookup_space(self, key: str, tok: _Token) -> str:
        spaces = self.opts.spaces
        for candidate in (
            key,
            unicodedata.normalize("NFC", key),
            unicodedata.normalize("NFD", key),
        ):
            if spaces.is_known(candidate):
                return spaces.resolve(candidate)
        known = ", ".join(f"`{k}`" for k in spaces.keys())
        raise _error(
            f"unknown index space `{key}` in index `{tok.text}`; known spaces: {known}. "
            f"Register it with `spaces = sq_jax.Spaces().with_space({key!r}, extent=...)` "
            "and parse with `spaces=spaces`.",
            tok,
        )
