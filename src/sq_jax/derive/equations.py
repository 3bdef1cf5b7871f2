"""Derive spin-orbital CC residual and energy equations of any rank as SeQuant text.

:func:`cc_equations` is the entry point. For a model such as ``"ccsdt"`` it projects
``e^{-T} H_N e^{T} |0⟩`` (truncated where the BCH series ends) onto the excitation
manifolds, with Wick's theorem per contraction pattern (:mod:`sq_jax.derive.wick`),
canonicalises and collects like terms (:mod:`sq_jax.derive.canon`), and writes one
equation per line in the conventions of the shipped ``ccsd_so``:

* ``E = …`` and ``R<n>{a_1..a_n;i_1..i_n} = Â{i_1..i_n;a_1..a_n} * …``, ``Â`` being the
  unnormalised signed sum over permutations of the i's and, independently, of the a's;
* ``R<n>`` is ``⟨Φ_{i_1..i_n}^{a_1..a_n}| H̄ |0⟩`` with every Fock block included, so the
  drivers' Jacobi update ``t ← t + R / D`` applies unchanged;
* ``f{p;q}`` = F[p, q], ``g{p,q;r,s}:A`` = ⟨pq‖rs⟩, ``t{a..;i..}:A`` = T[a.., i..].

Truncated models (CC2-like, CCSDT-1-like) are selections of terms: ``keep(rank, h,
t_ranks)`` is asked for every (projection rank, Hamiltonian part ``"f"``/``"g"``,
sorted tuple of T ranks) and the term family is dropped when it answers ``False``.

Example:
    >>> text = cc_equations("ccd")
    >>> [line.split(" = ")[0] for line in text.splitlines()]
    ['E', 'R2{a_1,a_2;i_1,i_2}']
    >>> text.splitlines()[0]
    'E = 1/4 g{i_1,i_2;a_1,a_2}:A * t{a_1,a_2;i_1,i_2}:A'
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

from .._errors import InputError
from .canon import collect
from .terms import Factor, RawTerm
from .wick import contract, hamiltonian_blocks

__all__ = ["Keep", "cc_equations", "derive_terms", "model_ranks"]

Keep = Callable[[int, str, tuple[int, ...]], bool]
"""``keep(projection rank, "f" or "g", sorted T ranks) -> bool``: which term families enter."""

_LETTERS = {"s": 1, "d": 2, "t": 3, "q": 4, "p": 5, "h": 6}
MAX_T_PRODUCT = 4
"""H_N has at most four lines, and each T must touch H: at most four T's per term."""


def model_ranks(model: str) -> tuple[int, ...]:
    """The cluster-operator ranks of a model name: ``"ccsdt"`` → ``(1, 2, 3)``.

    Args:
        model: ``"cc"`` followed by excitation letters in increasing order, from
            s (1), d (2), t (3), q (4), p (5), h (6); case-insensitive.

    Returns:
        The ranks, increasing.

    Raises:
        InputError: the name is not of that form.

    Example:
        >>> model_ranks("CCSDTQ"), model_ranks("ccd")
        ((1, 2, 3, 4), (2,))
    """
    name = model.lower() if isinstance(model, str) else ""
    ranks = tuple(_LETTERS.get(c, 0) for c in name[2:])
    if not name.startswith("cc") or not ranks or 0 in ranks or list(ranks) != sorted(set(ranks)):
        raise InputError(
            f"unknown CC model {model!r}: expected 'cc' followed by excitation letters in "
            f"increasing order from {''.join(_LETTERS)} (s=1 … h=6), e.g. 'ccsd', 'ccsdt', "
            "'ccsdtq' or 'ccd'."
        )
    return ranks


def derive_terms(
    t_ranks: Iterable[int], projection: int, *, keep: Keep | None = None
) -> tuple[RawTerm, ...]:
    """The canonical, collected terms of ``⟨Φ_projection| (H_N e^T)_C |0⟩``.

    Args:
        t_ranks: the ranks of the cluster operators in T.
        projection: the excitation rank projected on (0: the energy).
        keep: optional selection of term families (see :data:`Keep`).

    Returns:
        The terms; each value is ``coefficient · Â Π factors`` (no ``Â`` at rank 0).

    Example:
        >>> [str(t.coefficient) for t in derive_terms((1, 2), 0)]
        ['1', '1/4', '1/2']
    """
    ranks = sorted(set(t_ranks))
    raw: list[RawTerm] = []
    for k in range(MAX_T_PRODUCT + 1):
        for product in itertools.combinations_with_replacement(ranks, k):
            for label, bra, ket in hamiltonian_blocks():
                if keep is not None and not keep(projection, label, product):
                    continue
                raw.extend(contract(projection, bra, ket, product))
    return tuple(sorted(collect(raw), key=_display_order))


def cc_equations(
    model: str = "ccsd",
    *,
    ranks: Iterable[int] | None = None,
    energy: bool = True,
    keep: Keep | None = None,
) -> str:
    """Derive the spin-orbital CC equations of ``model`` as SeQuant text.

    Args:
        model: ``"ccd"``, ``"ccsd"``, ``"ccsdt"``, ``"ccsdtq"``, … (see
            :func:`model_ranks`).
        ranks: which residuals to write (default: the model's ranks), e.g. ``(3,)``.
        energy: also write the energy equation ``E = …``.
        keep: a selection of term families, for truncated models: ``keep(rank, h,
            t_ranks)`` with ``h`` ``"f"`` or ``"g"`` and ``t_ranks`` the sorted T ranks
            of the product. CCSDT-1a-like triples (only ⟨Φ3|[f,T3] + [g,T2]|0⟩):
            ``lambda n, h, ts: n < 3 or (h, ts) in {("f", (3,)), ("g", (2,))}``.

    Returns:
        One equation per line: ``E`` first, then ``R1``, ``R2``, … in rank order.

    Raises:
        InputError: an unknown model, or a residual rank below 1.

    Example:
        >>> r1 = cc_equations("ccsd", ranks=(1,), energy=False)
        >>> r1.split(" - ")[0], r1.count("Â{")
        ('R1{a_1;i_1} = Â{i_1;a_1} * f{a_1;i_1}', 14)
        >>> cc2 = lambda n, h, ts: n < 2 or 2 not in ts or (h, ts) == ("f", (2,))
        >>> cc_equations("ccsd", ranks=(2,), energy=False, keep=cc2).count("Â{")  # CC2-like
        11
        >>> t1a = lambda n, h, ts: n < 3 or (h, ts) in {("f", (3,)), ("g", (2,))}
        >>> cc_equations("ccsdt", ranks=(3,), energy=False, keep=t1a).count("Â{")
        4
    """
    t_ranks = model_ranks(model)
    wanted = tuple(t_ranks if ranks is None else ranks)
    if any(not isinstance(n, int) or n < 1 for n in wanted):
        raise InputError(
            f"ranks must be positive integers (1 for R1, 2 for R2, …); got {wanted!r}. "
            "The energy is written with energy=True."
        )
    lines = []
    if energy:
        lines.append("E = " + _sum(derive_terms(t_ranks, 0, keep=keep), 0))
    for n in sorted(set(wanted)):
        lhs = f"R{n}{{{_names('a', n)};{_names('i', n)}}}"
        lines.append(f"{lhs} = " + _sum(derive_terms(t_ranks, n, keep=keep), n))
    return "\n".join(lines) + "\n"


def _names(space: str, n: int) -> str:
    return ",".join(f"{space}_{k}" for k in range(1, n + 1))


def _display_order(term: RawTerm) -> tuple:
    amplitudes = term.factors[1:]
    return (len(amplitudes), tuple(f.rank for f in amplitudes), term.factors[0].label)


def _factor(f: Factor) -> str:
    return str(f) + ("" if f.label == "f" else ":A")


def _sum(terms: tuple[RawTerm, ...], rank: int) -> str:
    """``c1 X1 + c2 X2 …`` in ccsd_so's style; ``0`` for an empty sum."""
    if not terms:
        return "0"
    head = [f"Â{{{_names('i', rank)};{_names('a', rank)}}}"] if rank else []
    parts = []
    for k, term in enumerate(terms):
        c = term.coefficient
        body = " * ".join(head + [_factor(f) for f in term.factors])
        size = abs(c)
        text = body if size == 1 else f"{size} {body}"
        if k == 0:
            parts.append(text if c > 0 else f"-{text}" if size != 1 else f"-1 {text}")
        else:
            parts.append(f"{'+' if c > 0 else '-'} {text}")
    return " ".join(parts)
