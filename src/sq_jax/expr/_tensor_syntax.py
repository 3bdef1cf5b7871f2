"""The tensor syntax of SeQuant text: brace groups, indices, proto-indices, suffixes.

:class:`TensorSyntax` is the token cursor and the part of the recursive-descent parser
of :mod:`sq_jax.expr.parse` that reads inside a tensor: ``{bra;ket;aux}`` (or
``_{bra}^{ket}``), each index (a space key resolved in the registry, and an ordinal),
proto-indices ``a_1<i_1,i_2>`` and the ``:A-C-S`` symmetry suffix.

Example:
    >>> from sq_jax.expr.tokenize import tokenize_line
    >>> cursor = TensorSyntax(tokenize_line("a_1<i_1,i_2>", 1), ParseOptions())
    >>> str(cursor.index(allow_protos=True))
    'a_1<i_1,i_2>'
"""

from __future__ import annotations

import unicodedata

from .._errors import ParseError
from .nodes import Index, Symmetry
from .options import SYMM_SLOTS, ParseOptions
from .tokenize import Token as _Token
from .tokenize import close_error
from .tokenize import describe as _describe
from .tokenize import token_error as _error

__all__ = ["TensorSyntax"]

_DIGITS = frozenset("0123456789")


class TensorSyntax:
    """A cursor over one equation's tokens, and the reading of a tensor's inside."""

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

    def expect_name(self, wanted: str) -> _Token:
        """The next token (not taken), which must be a name; else an error: ``wanted``."""
        tok = self.peek()
        if tok.kind != "name":
            raise _error(f"expected {wanted}, got {_describe(tok)}.", tok)
        return tok

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
            what, allowed = SYMM_SLOTS[slot]
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
        raise close_error(
            opener,
            close,
            "}",
            f"expected ',', ';' or '}}' in the index groups opened at column {opener.col}, "
            f"got {_describe(close)}.",
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
        tok = self.expect_name("an index (a space key and an ordinal, such as `i_1` or `a2`)")
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
