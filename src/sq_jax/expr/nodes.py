"""The expression IR: indices, tensors, products, sums and equations.

Every class here is a frozen, slotted dataclass over tuples, so expressions are
immutable, hashable and comparable. ``str()`` of any node is SeQuant's canonical text
(see :func:`sq_jax.serialize`), which :func:`sq_jax.parse` reads back.

Example:
    >>> from fractions import Fraction
    >>> from sq_jax.expr.nodes import Index, Product, Tensor
    >>> i1, a1 = Index("i", 1), Index("a", 1)
    >>> t = Tensor("t", bra=(a1,), ket=(i1,))
    >>> f = Tensor("f", bra=(i1,), ket=(a1,))
    >>> str(Product(Fraction(1, 2), (f, t)))
    '1/2 f{i_1;a_1}:N-C-S * t{a_1;i_1}:N-C-S'
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Union

__all__ = [
    "Constant",
    "Equation",
    "Expr",
    "Index",
    "NormalOperator",
    "Power",
    "Product",
    "Sum",
    "Symmetry",
    "Tensor",
    "Variable",
    "result_name",
    "walk",
]


def _sequant_text(node: Expr | Equation) -> str:
    """``str()`` of every expression node: its SeQuant text, as :func:`serialize` writes it."""
    from .serialize import serialize  # serialize imports this module: bind at call time

    return serialize(node)


_INDICES: dict[tuple, Index] = {}
"""Every index made so far, by (space, ordinal, protos): one object per index."""


@dataclass(frozen=True, slots=True, eq=False, init=False)
class Index:
    """A tensor index: a space key, an ordinal, and optional proto-indices.

    ``Index("a", 1, (Index("i", 1), Index("i", 2)))`` is ``a_1<i_1,i_2>``, a virtual whose
    range depends on the occupied pair (a pair-natural-orbital index). Two indices are
    the same iff space, ordinal and proto-indices agree; they are the same *type* iff
    their spaces agree.

    Indices are interned: equal indices are one object, compared and hashed by identity
    (no Python call; the schedulers compare and hash indices millions of times per
    budget search).

    Example:
        >>> str(Index("a", 1, (Index("i", 1), Index("i", 2))))
        'a_1<i_1,i_2>'
        >>> Index("a", 1) is Index("a", 1), Index("a", 1) == Index("a", 2)
        (True, False)
    """

    space: str
    """Canonical key of the index space (``"i"``, ``"a"``, ``"Κ"`` …)."""
    ordinal: int
    """The number after the key; any non-negative integer."""
    protos: tuple[Index, ...] = ()
    """Proto-indices this index's range depends on (empty for a plain index)."""

    def __new__(cls, space: str, ordinal: int, protos: tuple[Index, ...] = ()) -> Index:
        """The one index with these fields (made on first use)."""
        key = (space, ordinal, protos)
        known = _INDICES.get(key)
        if known is None:  # set once: an equal index made later (1 for True) changes nothing
            made = object.__new__(cls)
            object.__setattr__(made, "space", space)
            object.__setattr__(made, "ordinal", ordinal)
            object.__setattr__(made, "protos", protos)
            known = _INDICES.setdefault(key, made)  # another thread's, if it made it first
        return known

    def __reduce__(self) -> tuple:
        # rebuilt through __new__: an unpickled index is the interned one
        return (Index, (self.space, self.ordinal, self.protos))

    def plain(self) -> Index:
        """This index without its proto-indices."""
        return Index(self.space, self.ordinal) if self.protos else self

    def __str__(self) -> str:
        text = f"{self.space}_{self.ordinal}"
        if self.protos:
            text += "<" + ",".join(str(p) for p in self.protos) + ">"
        return text

    def __repr__(self) -> str:
        return f"Index({str(self)!r})"


_PERM = {"A": "antisymmetric", "S": "symmetric", "N": "none"}
_BRAKET = {"C": "conjugate", "S": "symmetric", "N": "none", "H": "Hermitian", "A": "anti-Hermitian"}
_COLUMN = {"S": "symmetric", "N": "none"}


@dataclass(frozen=True, slots=True)
class Symmetry:
    """A tensor's symmetry annotation ``:P-B-C`` in SeQuant syntax.

    Attributes:
        perm: permutational symmetry within bra and within ket: ``A``, ``S`` or ``N``.
        braket: bra/ket symmetry: ``C`` conjugate, ``S``, ``N``, ``H`` Hermitian or
            ``A`` anti-Hermitian.
        column: column (particle) symmetry: ``S`` or ``N``.

    Example:
        >>> str(Symmetry("A", "C", "S"))
        'A-C-S'
    """

    perm: str = "N"
    braket: str = "C"
    column: str = "S"

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("perm", self.perm, _PERM),
            ("braket", self.braket, _BRAKET),
            ("column", self.column, _COLUMN),
        ):
            if value not in allowed:
                raise ValueError(
                    f"Symmetry.{name} must be one of {', '.join(allowed)}, got {value!r}"
                )

    def __str__(self) -> str:
        return f"{self.perm}-{self.braket}-{self.column}"


@dataclass(frozen=True, slots=True)
class Tensor:
    """A tensor factor ``label{bra;ket;aux}:symmetry``.

    Example:
        >>> from sq_jax.expr.nodes import Index
        >>> g = Tensor("g", bra=(Index("i", 1), Index("i", 2)), ket=(Index("a", 1), Index("a", 2)))
        >>> g.rank, [str(i) for i in g.indices]
        (4, ['i_1', 'i_2', 'a_1', 'a_2'])
    """

    label: str
    bra: tuple[Index, ...] = ()
    ket: tuple[Index, ...] = ()
    aux: tuple[Index, ...] = ()
    symmetry: Symmetry = field(default_factory=Symmetry)

    @property
    def indices(self) -> tuple[Index, ...]:
        """All slots in array order: bra, then ket, then aux."""
        return self.bra + self.ket + self.aux

    @property
    def rank(self) -> int:
        """The number of slots."""
        return len(self.bra) + len(self.ket) + len(self.aux)

    @property
    def signature(self) -> tuple[int, int, int]:
        """(bra, ket, aux) slot counts; tensors of one label and two signatures differ."""
        return (len(self.bra), len(self.ket), len(self.aux))

    __str__ = _sequant_text


@dataclass(frozen=True, slots=True)
class NormalOperator:
    """A normal-ordered operator ``a{…}``, ``ã{…}``, ``b{…}`` or ``b̃{…}``.

    It can be parsed and printed but not evaluated numerically.
    """

    label: str
    annihilators: tuple[Index, ...] = ()
    creators: tuple[Index, ...] = ()

    __str__ = _sequant_text


@dataclass(frozen=True, slots=True)
class Constant:
    """An exact rational constant.

    Example:
        >>> str(Constant(Fraction(-1, 2)))
        '-1/2'
    """

    value: Fraction

    __str__ = _sequant_text


@dataclass(frozen=True, slots=True)
class Variable:
    """A scalar variable such as ``ω`` or its complex conjugate ``ω^*``."""

    name: str
    conjugated: bool = False

    __str__ = _sequant_text


@dataclass(frozen=True, slots=True)
class Power:
    """``base^(exponent)``, optionally conjugated: ``(base^(exponent))^*``."""

    base: Constant | Variable
    exponent: Fraction
    conjugated: bool = False

    __str__ = _sequant_text


@dataclass(frozen=True, slots=True)
class Product:
    """``scalar * factor_1 * factor_2 * …`` with an exact rational scalar.

    Factors may themselves be products or sums (parenthesized in the text).
    """

    scalar: Fraction
    factors: tuple[Expr, ...]

    __str__ = _sequant_text


@dataclass(frozen=True, slots=True)
class Sum:
    """``term_1 + term_2 + …``."""

    terms: tuple[Expr, ...]

    __str__ = _sequant_text


Expr = Union[Tensor, NormalOperator, Constant, Variable, Power, Product, Sum]  # noqa: UP007
"""Any expression node."""


@dataclass(frozen=True, slots=True)
class Equation:
    """``lhs = rhs``: a result tensor or variable defined by an expression.

    Example:
        >>> import sq_jax as sq
        >>> (eq,) = sq.parse("E = 1/4 g{i1,i2;a1,a2} t{a1,a2;i1,i2}")
        >>> eq.name, str(eq.rhs)
        ('E', '1/4 g{i_1,i_2;a_1,a_2}:N-C-S * t{a_1,a_2;i_1,i_2}:N-C-S')
    """

    lhs: Tensor | Variable
    rhs: Expr

    @property
    def name(self) -> str:
        """The result's label (the key of this equation's value in results)."""
        return self.lhs.label if isinstance(self.lhs, Tensor) else self.lhs.name

    __str__ = _sequant_text


def walk(expr: Expr) -> Iterator[Expr]:
    """Every node of ``expr``, pre-order, left to right; iterative (sums can be very long).

    Example:
        >>> import sq_jax as sq
        >>> (eq,) = sq.parse("R{a1;i1} = f{a1;i1} + 2 ω^(2) t{a1;i1}")
        >>> [type(n).__name__ for n in walk(eq.rhs)]
        ['Sum', 'Tensor', 'Product', 'Power', 'Variable', 'Tensor']
    """
    stack: list[Expr] = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(_operands(node)))


def result_name(node: Expr) -> str | None:
    """The result name ``node`` stands for: a tensor's label, a variable's name, else ``None``.

    An equation defines its result under this name, and a factor of a later equation
    reads that result when its name matches.

    Example:
        >>> import sq_jax as sq
        >>> (eq,) = sq.parse("R{a1;i1} = 2 ω t{a1;i1}")
        >>> result_name(eq.lhs), [result_name(f) for f in eq.rhs.factors]
        ('R', ['ω', 't'])
    """
    if isinstance(node, Tensor):
        return node.label
    if isinstance(node, Variable):
        return node.name
    return None


def _operands(node: Expr) -> tuple[Expr, ...]:
    if isinstance(node, Product):
        return node.factors
    if isinstance(node, Sum):
        return node.terms
    return (node.base,) if isinstance(node, Power) else ()
