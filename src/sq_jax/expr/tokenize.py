"""Split SeQuant text into tokens: names, numbers, symmetry suffixes and punctuation.

The tokenizer of :mod:`sq_jax.expr.parse`. :func:`tokenize_line` reads one physical line;
:func:`physical_lines` skips blank and ``#`` comment lines; :func:`logical_lines` joins a
line that starts with ``+``, ``-`` or ``*`` to the equation before it.

Numbers are exact: digits with at most one ``.`` (``2``, ``0.5``, ``.5``), optionally
followed by an exponent glued to them, ``e``/``E``, an optional sign and digits (``2e3`` is
2000, ``1e-3`` is 1/1000, ``1.5E+2`` is 150). A name that starts with ``e`` is a name
wherever it is not glued to a number (``2 e3`` is 2 times the variable ``e3``, and
``e3{i1;a1}`` is a tensor). A number glued to an ``e``/``E`` that does not start an
exponent (``2e``, ``2e+``, ``3ex``) is a :class:`~sq_jax.ParseError` rather than a guess:
write ``2 e`` for a product, ``2e0`` for a number.

Example:
    >>> [(t.kind, t.text) for t in tokenize_line("R = 1.5E+2 e3", 1)]
    [('name', 'R'), ('=', '='), ('number', '1.5E+2'), ('name', 'e3'), ('eof', '')]
    >>> tokenize_line("E = 2e-3 x", 1)[2].value
    Fraction(1, 500)
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .._errors import ParseError

__all__ = [
    "Token",
    "close_error",
    "describe",
    "logical_lines",
    "physical_lines",
    "token_error",
    "tokenize_line",
]

_NAME_EXTRA = frozenset("↑↓⁺⁻₊₋⁔'")
_DIGITS = frozenset("0123456789")
_PUNCT = frozenset("{}();,<>^*+/=_")
_NUMBER_RE = re.compile(r"[0-9]+\.?[0-9]*|\.[0-9]+")
_EXPONENT_RE = re.compile(r"[eE][+-]?[0-9]+")
_COMPLEX_SUFFIXES = frozenset("ij𝑖")
_SPACE_RE = re.compile(r"\s+")
_NAME_FAST_RE = re.compile(r"[^\W\d_](?:[^\W_]|_(?!\{))*")


# -- tokens --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Token:
    """One token of a line, with its position (for carets in error messages)."""

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


def token_error(reason: str, tok: Token, length: int | None = None) -> ParseError:
    """A ParseError at ``tok`` (caret under ``length`` characters, default the token's).

    Example:
        >>> print(token_error("bad name", tokenize_line("xy = 1", 1)[0]))
        line 1, column 1: bad name
          xy = 1
          ^^
    """
    n = len(tok.text) if length is None else length
    return ParseError(reason, line=tok.line, column=tok.col, length=n, source_line=tok.src)


def span_error(reason: str, first: Token, last: Token) -> ParseError:
    """A ParseError with the caret under ``first`` through ``last`` (both on one line).

    Example:
        >>> toks = tokenize_line("x = (a + b)^2", 1)
        >>> print(span_error("cannot raise a sum", toks[2], toks[6]))
        line 1, column 5: cannot raise a sum
          x = (a + b)^2
              ^^^^^^^
    """
    return token_error(reason, first, last.col + len(last.text) - first.col)


def close_error(opener: Token, close: Token, closer: str, otherwise: str) -> ParseError:
    """The error for ``close`` standing where ``closer`` should end the bracket ``opener``.

    The end of the line means the bracket is unclosed (caret on ``opener``); another closing
    bracket means the brackets are mismatched; any other token gets ``otherwise``. Both the
    ``(`` of a parenthesized sum and the ``{`` of an index group are closed this way.

    Example:
        >>> toks = tokenize_line("x = (a }", 1)
        >>> print(close_error(toks[2], toks[4], ")", "unused"))
        line 1, column 8: mismatched '}': expected ')' to close the '(' at column 5.
          x = (a }
                 ^
    """
    if close.kind == "eof":
        reason = (
            f"unclosed '{opener.text}' at column {opener.col}: expected '{closer}' before "
            "the end of the line."
        )
        return token_error(reason, opener)
    if close.kind in (")", "}", ">"):
        reason = (
            f"mismatched '{close.kind}': expected '{closer}' to close the '{opener.text}' at "
            f"column {opener.col}."
        )
        return token_error(reason, close)
    return token_error(otherwise, close)


def _is_name_start(c: str) -> bool:
    return unicodedata.category(c)[0] == "L"


def _is_name_char(c: str) -> bool:
    return unicodedata.category(c)[0] in "LMN" or c in _NAME_EXTRA


def tokenize_line(src: str, line: int) -> list[Token]:
    """The tokens of one physical line ``src`` (line number ``line``), ending in ``eof``.

    Raises:
        ParseError: an unexpected character, a malformed number or symmetry suffix.

    Example:
        >>> [t.kind for t in tokenize_line("t{a1;i1}:A", 1)]
        ['name', '{', 'name', ';', 'name', '}', 'symm', 'eof']
    """
    toks: list[Token] = []
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
            p, value = _number(src, start, err)
            kind = "number"
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
        toks.append(Token(kind, src[start:p], line, start + 1, space, src, value))
        space = False
    toks.append(Token("eof", "", line, n + 1, space, src))
    return toks


def _number(src: str, start: int, err: Any) -> tuple[int, Fraction]:
    """The end and exact value of the number at ``src[start]`` (mantissa, then exponent)."""
    n, p = len(src), start
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
    if p < n and src[p] in "eE":
        exponent = _EXPONENT_RE.match(src, p)
        if exponent is None:
            q = p + 1
            while q < n and (_is_name_char(src[q]) or src[q] in "+-"):
                q += 1
            raise err(
                f"`{src[start:q]}`: an '{src[p]}' right after a number starts an exponent, "
                f"but no digits follow it; write e.g. `{text}{src[p]}3` for a number, or "
                f"`{text} {src[p:q].rstrip('+-')}` (with a space) for a product with a name.",
                start,
                q - start,
            )
        p = exponent.end()
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
    return p, Fraction(src[start:p])


def _split_lines(text: str) -> list[str]:
    return re.split(r"\r\n|\n|\r", text)


def physical_lines(text: str) -> list[list[Token]]:
    r"""Token lists of the non-blank, non-comment lines (each ending in ``eof``).

    Example:
        >>> [len(toks) for toks in physical_lines("# c\nE = x\n\n+ y")]
        [4, 3]
    """
    out = []
    for no, raw in enumerate(_split_lines(text), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        out.append(tokenize_line(raw, no))
    return out


def logical_lines(text: str) -> list[list[Token]]:
    r"""Token lists of equations: a line starting with '+'/'-' continues the previous one.

    Example:
        >>> [[t.text for t in toks] for toks in logical_lines("E = x\n  + y")]
        [['E', '=', 'x', '+', 'y', '']]
    """
    groups: list[list[Token]] = []
    for toks in physical_lines(text):
        if toks[0].kind in ("+", "-", "*"):
            if not groups:
                raise token_error(
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


def describe(tok: Token) -> str:
    """How messages quote a token: in backticks, or "the end of the line".

    Example:
        >>> describe(tokenize_line("x", 1)[1])
        'the end of the line'
    """
    return "the end of the line" if tok.kind == "eof" else f"`{tok.text}`"
