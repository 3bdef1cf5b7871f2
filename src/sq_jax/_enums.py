"""Enumerations whose text is their value, as IR dumps and error messages print them.

Example:
    >>> class Colour(ValueEnum):
    ...     RED = "Red"
    >>> str(Colour.RED), f"{Colour.RED}", repr(Colour.RED)
    ('Red', 'Red', "<Colour.RED: 'Red'>")
"""

from __future__ import annotations

import enum

__all__ = ["ValueEnum"]


class ValueEnum(enum.Enum):
    """An :class:`enum.Enum` of strings that prints as its value (``External``, ``Sum``).

    Unlike :class:`enum.StrEnum`, the members are not ``str`` instances: they compare
    equal only to themselves, so a member is never mistaken for user text.
    """

    def __str__(self) -> str:
        return str(self.value)
