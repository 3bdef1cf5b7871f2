"""How :func:`sq_jax.parse` reads text: :class:`ParseOptions` and the symmetry letters.

Example:
    >>> ParseOptions().default_symmetry().perm
    'N'
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .nodes import Symmetry
from .spaces import DEFAULT_SPACES, Spaces

__all__ = ["SYMM_SLOTS", "ParseOptions", "resolve_options"]

_PERM_LETTERS = {"A": "antisymmetric", "S": "symmetric", "N": "none"}
_BRAKET_LETTERS = {
    "C": "conjugate",
    "S": "symmetric",
    "N": "none",
    "H": "Hermitian",
    "A": "anti-Hermitian",
}
_COLUMN_LETTERS = {"S": "symmetric", "N": "none"}
SYMM_SLOTS = (
    ("permutational", _PERM_LETTERS),
    ("bra-ket", _BRAKET_LETTERS),
    ("column", _COLUMN_LETTERS),
)


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
            SYMM_SLOTS,
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


def resolve_options(options: ParseOptions | None, overrides: dict[str, Any]) -> ParseOptions:
    """``options`` (default: the defaults) with ``overrides`` applied.

    Raises:
        TypeError: ``options`` is not a ParseOptions, or an override is not one of its fields.

    Example:
        >>> resolve_options(None, {"def_perm_symm": "A"}).def_col_symm
        'S'
    """
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
