"""The records of the derivation: an index, a tensor factor, and one term of a residual.

A derived term is a rational coefficient times a product of tensors (one Hamiltonian
tensor ``f``/``g`` and zero or more cluster amplitudes ``t``). Indices are either
*external* (the projection's i_k and a_k, summed over by the residual's ``Â``) or
*dummy* (contracted between two factors). Everything is a frozen dataclass over tuples,
so terms are hashable and can be collected in dictionaries.

Example:
    >>> i1, a1 = Idx("i", True, 1), Idx("a", True, 1)
    >>> f = Factor("f", (a1,), (i1,))
    >>> str(f), f.rank
    ('f{a_1;i_1}', 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

__all__ = ["Factor", "Idx", "RawTerm", "parity"]

OCC, VIR = "i", "a"
"""The two orbital spaces of single-reference CC: occupied (holes) and virtual."""


@dataclass(frozen=True, slots=True, order=True)
class Idx:
    """An orbital index of a derived term.

    Example:
        >>> str(Idx("a", False, 3))
        'a_3'
    """

    space: str
    """``"i"`` (occupied) or ``"a"`` (virtual)."""
    external: bool
    """Whether the index is one of the projection's (not summed in the term)."""
    number: int
    """External ones are 1..n; dummies are numbered from n + 1 once the term is
    canonical (before, any distinct numbers)."""

    def __str__(self) -> str:
        return f"{self.space}_{self.number}"


@dataclass(frozen=True, slots=True)
class Factor:
    """A tensor factor ``label{bra;ket}``: antisymmetric within bra and within ket.

    ``f{p;q}`` is F[p, q], ``g{p,q;r,s}`` is ⟨pq‖rs⟩ and ``t{a..;i..}`` is the cluster
    amplitude of that rank.

    Example:
        >>> str(Factor("g", (Idx("i", False, 3),) * 2, (Idx("a", False, 3),) * 2))
        'g{i_3,i_3;a_3,a_3}'
    """

    label: str
    bra: tuple[Idx, ...]
    ket: tuple[Idx, ...]

    @property
    def rank(self) -> int:
        """The number of bra slots (the excitation rank of a ``t``)."""
        return len(self.bra)

    @property
    def kind(self) -> tuple[str, int, int]:
        """(label, bra size, ket size): factors of one kind may be swapped in a product."""
        return (self.label, len(self.bra), len(self.ket))

    def __str__(self) -> str:
        bra = ",".join(str(i) for i in self.bra)
        ket = ",".join(str(i) for i in self.ket)
        return f"{self.label}{{{bra};{ket}}}"


@dataclass(frozen=True, slots=True)
class RawTerm:
    """One term of a projected residual, before canonicalisation.

    Its value is ``coefficient * Â{i_1..i_n;a_1..a_n} Π factors`` (no ``Â`` for the
    energy, ``rank == 0``), with ``Â`` the unnormalised signed sum over permutations of
    the external occupied and, independently, virtual indices.

    Attributes:
        coefficient: exact rational coefficient, sign included.
        factors: the Hamiltonian factor first, then the amplitudes.
        rank: the projection's excitation rank n (0 for the energy).
    """

    coefficient: Fraction
    factors: tuple[Factor, ...]
    rank: int


def parity(sequence: list[int] | tuple[int, ...]) -> int:
    """+1 or -1: the sign of the permutation that sorts ``sequence`` (distinct values).

    Example:
        >>> parity([0, 1, 2]), parity([1, 0, 2]), parity([2, 0, 1])
        (1, -1, 1)
    """
    n = len(sequence)
    inversions = sum(1 for a in range(n) for b in range(a + 1, n) if sequence[a] > sequence[b])
    return -1 if inversions % 2 else 1
