"""Placeholder until the parser lands (being written now)."""
from dataclasses import dataclass


@dataclass(frozen=True)
class ParseOptions:
    """Placeholder."""


def parse(text, **kw):
    """Placeholder."""
    raise NotImplementedError


def parse_expr(text, **kw):
    """Placeholder."""
    raise NotImplementedError
