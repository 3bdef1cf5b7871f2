"""SeQuant's integral data files as a system the CC drivers accept.

SeQuant's evaluation tests read two files in the format of
:func:`~sq_jax.cc.integrals.read_sequant_tensor`: the Fock matrix (rank 2) and the
antisymmetrized integrals ⟨pq‖rs⟩ (rank 4) over spin-orbitals, occupied first, α and β
interleaved (``2p``, ``2p+1``). :func:`load_sequant_system` turns such a pair into the
integral containers of :mod:`sq_jax.cc.integrals`.

Which equations fit is read off the files: an ERI tensor antisymmetric in its ket pair,
⟨pq‖rs⟩ = −⟨pq‖sr⟩, is spin-orbital; one that is not, but has the symmetry ⟨pq|rs⟩ =
⟨qp|sr⟩ of plain integrals, is closed-shell ⟨pq|rs⟩ over spatial orbitals (``nocc``
counts doubly occupied orbitals). Either can be converted: spatial integrals always
expand to spin-orbitals, and spin-orbital integrals reduce to spatial ones when they are
those of a closed-shell (restricted) reference — checked exactly by expanding back.

The files carry no nuclear repulsion, so the reference energy ``e_hf`` is the electronic
Hartree–Fock energy computed from the integrals, plus ``e_nuc`` if you give it.

Example:
    >>> import os, tempfile
    >>> from sq_jax.cc.integrals import default_system, write_sequant_tensor
    >>> so, folder = default_system(), tempfile.mkdtemp()
    >>> fock, eri = os.path.join(folder, "fock.dat"), os.path.join(folder, "eri.dat")
    >>> write_sequant_tensor(fock, so.fock, so.nocc, so.nvirt, "H2O Fock")
    >>> write_sequant_tensor(eri, so.eri, so.nocc, so.nvirt, "H2O <pq||rs>")
    >>> ints = load_sequant_system(fock, eri)
    >>> type(ints).__name__, ints.nocc, ints.nvirt
    ('SpinOrbitalIntegrals', 10, 4)
"""

from __future__ import annotations

import math
import os

import numpy as np

from .._errors import InputError
from .integrals import (
    SpatialIntegrals,
    SpinOrbitalIntegrals,
    read_sequant_tensor,
    spin_orbital_from_spatial,
)

__all__ = ["load_sequant_system", "reference_energy", "spatial_from_spin_orbital"]

# Relative size of a symmetry violation still counted as rounding (17-digit files are exact;
# SeQuant's own files hold their symmetries to ~1e-15).
_SYMMETRY_TOL = 1e-9


def _violation(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a − b| relative to the size of the entries (0 for empty arrays)."""
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b))) / max(1.0, float(np.max(np.abs(a))))


def reference_energy(ints: SpinOrbitalIntegrals | SpatialIntegrals) -> float:
    """The electronic Hartree–Fock energy of the reference the integrals describe.

    Spin-orbital: Σ_i F_ii − ½ Σ_ij ⟨ij‖ij⟩; closed-shell: Σ_i 2 f_ii − Σ_ij (2⟨ij|ij⟩ −
    ⟨ij|ji⟩). Valid when ``fock`` is the Fock matrix of that reference (nuclear repulsion
    not included).

    Example:
        >>> from sq_jax.cc.integrals import default_reference, default_system
        >>> ref = default_reference()
        >>> abs(reference_energy(default_system()) + ref["e_nuc"] - ref["e_hf"]) < 1e-9
        True
    """
    spatial = isinstance(ints, SpatialIntegrals)
    return _electronic_energy(np.asarray(ints.fock), np.asarray(ints.eri), ints.nocc, spatial)


def _electronic_energy(fock: np.ndarray, eri: np.ndarray, nocc: int, spatial: bool) -> float:
    f, g = fock[:nocc, :nocc], eri[:nocc, :nocc, :nocc, :nocc]
    coulomb = np.einsum("ijij->", g)
    if spatial:
        return float(2 * np.trace(f) - 2 * coulomb + np.einsum("ijji->", g))
    return float(np.trace(f) - coulomb / 2)


def spatial_from_spin_orbital(so: SpinOrbitalIntegrals) -> SpatialIntegrals:
    """Reduce spin-orbital integrals of a closed-shell reference to spatial orbitals.

    The inverse of :func:`~sq_jax.cc.integrals.spin_orbital_from_spatial`: f[p, q] =
    F[2p, 2q] and ⟨pq|rs⟩ = ⟨2p 2q+1‖2r 2s+1⟩ (α β α β, which has no exchange part).

    Raises:
        InputError: if the spin-orbitals are not α/β pairs of a restricted closed-shell
            reference (odd counts, or integrals that do not expand back exactly).

    Example:
        >>> from sq_jax.cc.integrals import default_spatial_system, default_system
        >>> spatial = spatial_from_spin_orbital(default_system())
        >>> bool(np.allclose(spatial.eri, default_spatial_system().eri, atol=1e-12))
        True
    """
    if so.nocc % 2 or so.nvirt % 2:
        raise InputError(
            f"closed-shell equations need α/β pairs of spin-orbitals, but the integrals have "
            f"{so.nocc} occupied and {so.nvirt} virtual spin-orbitals (an odd count); run "
            "them spin-orbital instead (drop --closed-shell / closed_shell=True)."
        )
    fock, eri = np.asarray(so.fock, np.float64), np.asarray(so.eri, np.float64)
    spatial = SpatialIntegrals(
        fock=fock[0::2, 0::2].copy(),
        eri=eri[0::2, 1::2, 0::2, 1::2].copy(),
        mo_energies=np.diag(fock)[0::2].copy(),
        nocc=so.nocc // 2,
        nvirt=so.nvirt // 2,
        e_hf=float(so.e_hf),
    )
    back = spin_orbital_from_spatial(spatial)
    worst = max(_violation(fock, back.fock), _violation(eri, back.eri))
    if worst > _SYMMETRY_TOL:
        raise InputError(
            "the spin-orbital integrals are not those of a closed-shell (restricted) "
            f"reference with α/β interleaved orbitals (they differ from their spin-adapted "
            f"form by {worst:.2g}, relative); run them spin-orbital instead (drop "
            "--closed-shell / closed_shell=True)."
        )
    return spatial


def _read_pair(fock_path, eri_path) -> tuple[np.ndarray, np.ndarray, int, int]:
    fock, nocc, nvirt = read_sequant_tensor(fock_path)
    eri, nocc_g, nvirt_g = read_sequant_tensor(eri_path)
    names = f"{os.fspath(fock_path)!r} and {os.fspath(eri_path)!r}"
    if fock.ndim != 2 or eri.ndim != 4:
        raise InputError(
            f"expected a rank-2 Fock file and a rank-4 ERI file; {names} have ranks "
            f"{fock.ndim} and {eri.ndim} (line 1 of each). Pass the Fock file first."
        )
    if (nocc, nvirt) != (nocc_g, nvirt_g):
        raise InputError(
            f"the files disagree on the orbitals: {names} have nocc, nvirt = {nocc}, {nvirt} "
            f"and {nocc_g}, {nvirt_g} (line 1); both must describe the same system."
        )
    if nocc < 1 or nvirt < 1:
        raise InputError(
            f"coupled cluster needs occupied and virtual orbitals; {names} have nocc = {nocc} "
            f"and nvirt = {nvirt} (line 1)."
        )
    if _violation(fock, fock.T) > _SYMMETRY_TOL:
        raise InputError(
            f"the Fock matrix in {os.fspath(fock_path)!r} is not symmetric (largest relative "
            f"|F[p,q] − F[q,p]| = {_violation(fock, fock.T):.2g}); expected a real symmetric "
            "Fock matrix."
        )
    return fock, eri, nocc, nvirt


def load_sequant_system(
    fock: os.PathLike | str,
    eri: os.PathLike | str,
    *,
    closed_shell: bool | None = None,
    e_nuc: float = 0.0,
) -> SpinOrbitalIntegrals | SpatialIntegrals:
    """Read SeQuant's Fock and ERI files into integrals the CC drivers accept.

    Args:
        fock: the rank-2 Fock-matrix file.
        eri: the rank-4 two-electron-integral file (⟨pq‖rs⟩ spin-orbital, or ⟨pq|rs⟩
            spatial; see the module docstring for how they are told apart).
        closed_shell: ``None`` to follow the files, ``True`` for spatial integrals (the
            closed-shell equations), ``False`` for spin-orbital ones; converts if needed.
        e_nuc: nuclear repulsion added to the reference energy (the files lack it).

    Returns:
        :class:`~sq_jax.cc.integrals.SpinOrbitalIntegrals` or
        :class:`~sq_jax.cc.integrals.SpatialIntegrals`, with ``e_hf`` the electronic
        reference energy plus ``e_nuc``; pass it to :func:`sq_jax.cc.ccsd` with the
        matching ``closed_shell``.

    Raises:
        InputError: for missing or malformed files (file, line and what was found), files
            that disagree, integrals with neither symmetry, or a conversion that the
            integrals do not allow.

    Example:
        >>> import os, tempfile
        >>> from sq_jax import cc
        >>> from sq_jax.cc.integrals import default_system, write_sequant_tensor
        >>> so, folder = default_system(), tempfile.mkdtemp()
        >>> paths = [os.path.join(folder, name) for name in ("fock.dat", "eri.dat")]
        >>> for path, array in zip(paths, (so.fock, so.eri)):
        ...     write_sequant_tensor(path, array, so.nocc, so.nvirt)
        >>> ints = load_sequant_system(*paths, closed_shell=True)
        >>> round(cc.ccsd(ints, closed_shell=True).e_corr, 8)
        -0.04943856
    """
    if isinstance(e_nuc, bool) or not isinstance(e_nuc, int | float) or not math.isfinite(e_nuc):
        raise InputError(f"e_nuc must be a finite number (hartree); received {e_nuc!r}.")
    f, g, nocc, nvirt = _read_pair(fock, eri)
    ket_antisymmetric = _violation(g, -g.transpose(0, 1, 3, 2)) <= _SYMMETRY_TOL
    if ket_antisymmetric and _violation(g, -g.transpose(1, 0, 2, 3)) > _SYMMETRY_TOL:
        raise InputError(
            f"the ERI file {os.fspath(eri)!r} is antisymmetric in its ket pair but not in its "
            "bra pair; expected ⟨pq‖rs⟩ = −⟨qp‖rs⟩ = −⟨pq‖sr⟩ (spin-orbital)."
        )
    if not ket_antisymmetric and _violation(g, g.transpose(1, 0, 3, 2)) > _SYMMETRY_TOL:
        raise InputError(
            f"the ERI file {os.fspath(eri)!r} holds neither antisymmetrized spin-orbital "
            "integrals (⟨pq‖rs⟩ = −⟨pq‖sr⟩) nor spatial ones (⟨pq|rs⟩ = ⟨qp|sr⟩); expected "
            "one of the two, physicist order, occupied orbitals first."
        )
    kind = SpinOrbitalIntegrals if ket_antisymmetric else SpatialIntegrals
    e_hf = _electronic_energy(f, g, nocc, spatial=kind is SpatialIntegrals) + float(e_nuc)
    ints = kind(fock=f, eri=g, mo_energies=np.diag(f).copy(), nocc=nocc, nvirt=nvirt, e_hf=e_hf)
    if closed_shell is None or closed_shell == (kind is SpatialIntegrals):
        return ints
    if closed_shell:
        return spatial_from_spin_orbital(ints)
    return spin_orbital_from_spatial(ints)
