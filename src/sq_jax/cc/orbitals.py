"""Reference orbitals for coupled cluster: RHF, UHF or ROHF, with frozen orbitals removed.

:func:`reference_orbitals` reads a run PySCF mean-field object and returns its *active*
orbitals, one :class:`SpinChannel` for a restricted (RHF) reference or two (α, β) for an
unrestricted one. An ROHF reference is treated as PySCF treats it: converted to UHF
(``mf.to_uhf()``), so α and β share orbitals but each spin has its own (UHF) Fock matrix,
which is not diagonal between occupied and virtual orbitals.

``frozen`` follows PySCF: a count freezes the lowest orbitals (of each spin), a list
freezes those orbital indices (occupied or virtual; the same for both spins), and for an
unrestricted reference a pair of lists freezes per spin. The active Fock matrix is the
full reference's MO Fock matrix restricted to the active orbitals, so the frozen
orbitals' mean field is kept.

Example:
    >>> active_orbitals(5, 3, 1)
    array([1, 2, 3, 4])
    >>> active_orbitals(5, 3, [0, 4])
    array([1, 2, 3])
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._errors import InputError
from .integrals import rhf_orbitals

__all__ = [
    "Reference",
    "SpinChannel",
    "active_orbitals",
    "freeze_integrals",
    "frozen_per_spin",
    "reference_orbitals",
]


@dataclasses.dataclass(frozen=True, eq=False)
class SpinChannel:
    """The active orbitals of one spin (or of both, restricted).

    Attributes:
        coeff: MO coefficients (nao, n), occupied orbitals first.
        nocc: occupied active orbitals.
        fock: the MO Fock matrix over the active orbitals, (n, n).
    """

    coeff: np.ndarray
    nocc: int
    fock: np.ndarray

    @property
    def nmo(self) -> int:
        """Active orbitals of this channel."""
        return int(self.coeff.shape[1])


@dataclasses.dataclass(frozen=True, eq=False)
class Reference:
    """The active orbitals of a reference: one channel (RHF) or two (α, β).

    Attributes:
        channels: ``(restricted,)`` or ``(alpha, beta)``.
        e_hf: the reference total energy.
    """

    channels: tuple[SpinChannel, ...]
    e_hf: float

    @property
    def restricted(self) -> bool:
        """Whether one set of orbitals serves both spins."""
        return len(self.channels) == 1


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _bad_frozen(frozen: Any, why: str) -> InputError:
    return InputError(
        f"frozen={frozen!r}: {why}. Pass a count of lowest orbitals to freeze, a list of "
        "orbital indices, or (unrestricted) a pair of lists, as PySCF's `frozen`."
    )


def frozen_per_spin(frozen: Any, nspin: int) -> tuple[Any, ...]:
    """Split ``frozen`` into one entry (a count or a list of indices) per spin channel.

    Args:
        frozen: ``None``, a count, a list of indices, or a pair of lists (``nspin=2``).
        nspin: 1 (restricted) or 2 (α, β).

    Returns:
        ``nspin`` entries, each ``None``, an ``int`` or a list of ``int``.

    Raises:
        InputError: a value of no such form.

    Example:
        >>> frozen_per_spin(1, 2), frozen_per_spin([[0], [0, 1]], 2)
        ((1, 1), ([0], [0, 1]))
    """
    if frozen is None or _is_int(frozen):
        return (frozen,) * nspin
    if isinstance(frozen, str) or not hasattr(frozen, "__len__"):
        raise _bad_frozen(frozen, f"expected a count or a list, got {type(frozen).__name__}")
    items = list(frozen)
    if all(_is_int(x) for x in items):
        return ([int(x) for x in items],) * nspin
    pair = len(items) == 2 and all(
        not isinstance(x, str) and hasattr(x, "__len__") and all(_is_int(y) for y in x)
        for x in items
    )
    if nspin == 2 and pair:
        return tuple([int(y) for y in x] for x in items)
    want = "integers" if nspin == 1 else "integers, or two lists of integers (α, β)"
    raise _bad_frozen(frozen, f"expected {want}")


def active_orbitals(nmo: int, nocc: int, frozen: Any, spin: str = "") -> np.ndarray:
    """The indices of the orbitals left active once ``frozen`` ones are removed.

    Args:
        nmo: orbitals of the channel.
        nocc: occupied orbitals (they come first).
        frozen: ``None``, a count of lowest orbitals, or a list of indices.
        spin: a label for messages (``"α "``, ``"β "``).

    Returns:
        The sorted active indices; at least one occupied and one virtual remain.

    Raises:
        InputError: a negative or too large count, an index out of range or repeated, or
            nothing left to correlate.

    Example:
        >>> active_orbitals(4, 2, None)
        array([0, 1, 2, 3])
    """
    if frozen is None:
        drop: list[int] = []
    elif _is_int(frozen):
        if not 0 <= frozen < nocc:
            raise _bad_frozen(
                frozen, f"expected a count from 0 to {nocc - 1} ({nocc} {spin}occupied orbitals)"
            )
        drop = list(range(int(frozen)))
    else:
        bad = [x for x in frozen if not 0 <= x < nmo]
        if bad or len(set(frozen)) != len(frozen):
            what = f"index {bad[0]} is outside 0..{nmo - 1}" if bad else "an index repeats"
            raise _bad_frozen(frozen, what)
        drop = list(frozen)
    keep = np.array([p for p in range(nmo) if p not in set(drop)], dtype=int)
    if not (keep < nocc).any() or not (keep >= nocc).any():
        raise _bad_frozen(
            frozen, f"it leaves no {spin}occupied or no {spin}virtual orbital to correlate"
        )
    return keep


def _channel(coeff: Any, occ: Any, fock_ao: Any, frozen: Any, spin: str) -> SpinChannel:
    c, occ = np.asarray(coeff, dtype=np.float64), np.asarray(occ)
    nocc = int(np.count_nonzero(occ > 0))
    if not np.all(occ[:nocc] > 0) or np.any(occ[nocc:] > 0):
        raise InputError(
            f"{spin}orbitals must be ordered occupied first; received occupations "
            f"{occ.tolist()}. Sort `mf.mo_coeff` and `mf.mo_occ` by occupation."
        )
    keep = active_orbitals(c.shape[1], nocc, frozen, spin)
    c = c[:, keep]
    fock = c.T @ np.asarray(fock_ao, dtype=np.float64) @ c
    return SpinChannel(coeff=c, nocc=int((keep < nocc).sum()), fock=fock)


def reference_orbitals(mf: Any, frozen: Any = None) -> Reference:
    """The active orbitals and MO Fock matrices of a run PySCF RHF, UHF or ROHF object.

    Args:
        mf: a converged ``pyscf.scf`` RHF, UHF or ROHF object.
        frozen: orbitals to leave uncorrelated, as PySCF's ``frozen`` (see the module).

    Returns:
        The :class:`Reference`: one channel for RHF, two (α, β) for UHF and ROHF.

    Raises:
        InputError: no PySCF, an object of another kind or without orbitals, or a bad
            ``frozen``.

    Example:
        With PySCF: ``reference_orbitals(scf.UHF(mol).run(), frozen=1)``. Anything else
        is refused:

        >>> try:
        ...     reference_orbitals("not a mean-field object")
        ... except InputError as err:
        ...     print(type(err).__name__)
        InputError
    """
    try:
        from pyscf import scf
    except ImportError:  # pragma: no cover - exercised only without pyscf
        scf = None
    if scf is not None and isinstance(mf, scf.rohf.ROHF | scf.uhf.UHF):
        if getattr(mf, "mo_coeff", None) is None:
            raise InputError(
                f"The {type(mf).__name__} object has no orbitals (`mf.mo_coeff is None`); "
                "call `mf.run()` before coupled cluster."
            )
        uhf = mf.to_uhf() if isinstance(mf, scf.rohf.ROHF) else mf  # as PySCF's CCSD does
        fock_ao = uhf.get_fock(dm=uhf.make_rdm1())
        spins = frozen_per_spin(frozen, 2)
        channels = tuple(
            _channel(uhf.mo_coeff[s], uhf.mo_occ[s], fock_ao[s], spins[s], label)
            for s, label in ((0, "α "), (1, "β "))
        )
        return Reference(channels=channels, e_hf=float(mf.e_tot))
    c, nocc, fock = rhf_orbitals(mf)  # refuses anything that is not a run RHF
    (only,) = frozen_per_spin(frozen, 1)
    keep = active_orbitals(c.shape[1], nocc, only)
    channel = SpinChannel(coeff=c[:, keep], nocc=int((keep < nocc).sum()), fock=fock[keep][:, keep])
    return Reference(channels=(channel,), e_hf=float(mf.e_tot))


def is_open_shell(mf: Any) -> bool:
    """Whether ``mf`` is a PySCF UHF or ROHF object (α and β orbitals apart).

    Example:
        >>> is_open_shell(None)
        False
    """
    try:
        from pyscf import scf
    except ImportError:  # pragma: no cover - exercised only without pyscf
        return False
    return isinstance(mf, scf.rohf.ROHF | scf.uhf.UHF)


def _no_frozen(frozen: Any) -> bool:
    return (
        frozen is None
        or (_is_int(frozen) and frozen == 0)
        or (not isinstance(frozen, str) and hasattr(frozen, "__len__") and len(frozen) == 0)
    )


def freeze_integrals(ints: Any, frozen: Any) -> Any:
    """Integrals in memory with the ``frozen`` orbitals removed (their rows and columns).

    Indices count the container's own orbitals: spatial orbitals for
    :class:`~sq_jax.cc.integrals.SpatialIntegrals` and :class:`~sq_jax.cc.df.DFIntegrals`,
    spin-orbitals for :class:`~sq_jax.cc.integrals.SpinOrbitalIntegrals` (as PySCF's
    GCCSD counts them). The Fock matrix keeps the frozen orbitals' mean field.

    Args:
        ints: one of those containers (anything else is returned as is when nothing is
            frozen).
        frozen: ``None``, a count of lowest orbitals, or a list of indices.

    Returns:
        A container of the same type over the active orbitals.

    Raises:
        InputError: a bad ``frozen``, or ``frozen`` for something that is not integrals.

    Example:
        >>> from sq_jax.cc.integrals import default_spatial_system
        >>> ints = freeze_integrals(default_spatial_system(), 1)
        >>> ints.nocc, ints.nvirt, ints.eri.shape
        (4, 2, (6, 6, 6, 6))
    """
    from .df import DFIntegrals
    from .integrals import SpatialIntegrals, SpinOrbitalIntegrals

    if _no_frozen(frozen):
        return ints
    if not isinstance(ints, SpatialIntegrals | SpinOrbitalIntegrals | DFIntegrals):
        raise InputError(
            f"frozen={frozen!r} applies to a PySCF mean-field object or integrals in memory; "
            f"received {type(ints).__name__}."
        )
    (only,) = frozen_per_spin(frozen, 1)
    keep = active_orbitals(ints.nocc + ints.nvirt, ints.nocc, only)
    nocc = int((keep < ints.nocc).sum())
    fock = np.asarray(ints.fock)[np.ix_(keep, keep)]
    if isinstance(ints, DFIntegrals):
        b = np.asarray(ints.b)[np.ix_(keep, keep)]
        return DFIntegrals(
            fock=fock, b=b, nocc=nocc, nvirt=len(keep) - nocc, e_hf=ints.e_hf,
            auxbasis=ints.auxbasis,
        )  # fmt: skip
    return type(ints)(
        fock=fock,
        eri=np.asarray(ints.eri)[np.ix_(keep, keep, keep, keep)],
        mo_energies=np.diag(fock).copy(),
        nocc=nocc,
        nvirt=len(keep) - nocc,
        e_hf=ints.e_hf,
    )
