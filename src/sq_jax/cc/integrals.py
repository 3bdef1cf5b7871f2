"""Integrals for coupled cluster: from PySCF, from SeQuant data files, or the shipped default.

Two containers hold molecular-orbital integrals of a closed-shell reference:

* :class:`SpinOrbitalIntegrals` — the Fock matrix F[p, q] and the antisymmetrized
  ⟨pq‖rs⟩ over spin-orbitals, the inputs of the spin-orbital equations ``ccsd_so`` and
  ``ccd_so`` (tensor labels ``f`` and ``g``).
* :class:`SpatialIntegrals` — F[p, q] and physicist ⟨pq|rs⟩ = (pr|qs) over spatial
  orbitals, the inputs of the closed-shell equations.

Orbital order follows SeQuant's data files: occupied orbitals first, then virtuals; in the
spin-orbital basis spatial orbital ``p`` gives spin-orbitals ``2p`` (α) and ``2p+1`` (β),
so α and β alternate inside each block.

The default system is H2O/STO-3G (geometry ``O 0 0 0.1173; H 0 0.7572 -0.4692;
H 0 -0.7572 -0.4692`` Å, all electrons, RHF), shipped as ``cc/data/h2o_sto3g.npz`` with
its reference energies in ``cc/data/h2o_sto3g.json``; it needs no PySCF. The script
``scripts/make_default_system.py`` regenerates both.

Example:
    >>> from sq_jax.cc.integrals import default_system
    >>> ints = default_system()
    >>> ints.nocc, ints.nvirt, ints.eri.shape
    (10, 4, (14, 14, 14, 14))
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any

import equinox as eqx
import numpy as np

from .._errors import InputError

__all__ = [
    "SpatialIntegrals",
    "SpinOrbitalIntegrals",
    "check_orbital_counts",
    "default_reference",
    "default_spatial_system",
    "default_system",
    "read_sequant_tensor",
    "rhf_orbitals",
    "spatial_integrals",
    "spin_orbital_from_spatial",
    "spin_orbital_integrals",
    "write_sequant_tensor",
]

_DATA_NPZ = "h2o_sto3g.npz"
_DATA_JSON = "h2o_sto3g.json"


def _check_square(name: str, array: np.ndarray, rank: int, n: int | None) -> int:
    if array.ndim != rank or len(set(array.shape)) != 1:
        raise InputError(
            f"`{name}` must be a square rank-{rank} array (n,)*{rank}; received shape "
            f"{array.shape}. Pass the full tensor over all orbitals, occupied first."
        )
    if n is not None and array.shape[0] != n:
        raise InputError(
            f"`{name}` has extent {array.shape[0]} but the Fock matrix has {n}; both must "
            "span the same orbitals (occupied first, then virtual)."
        )
    if not np.issubdtype(array.dtype, np.floating):
        raise InputError(
            f"`{name}` must hold real floating-point values; received dtype {array.dtype}. "
            "Convert with `np.asarray(x, dtype=np.float64)`."
        )
    return array.shape[0]


def check_orbital_counts(owner: str, nocc: int, nvirt: int, n: int) -> None:
    """Refuse ``nocc``/``nvirt`` that are not positive or do not add up to ``n`` orbitals.

    Raises:
        InputError: naming ``owner`` (the integral container) and quoting both counts.

    Example:
        >>> try:
        ...     check_orbital_counts("DFIntegrals", 3, 3, 7)
        ... except InputError as err:
        ...     print(err)
        DFIntegrals: nocc=3 and nvirt=3 must be positive and add up to the number of orbitals, 7.
    """
    if nocc < 1 or nvirt < 1 or nocc + nvirt != n:
        raise InputError(
            f"{owner}: nocc={nocc} and nvirt={nvirt} must be positive and add up to the "
            f"number of orbitals, {n}."
        )


def orbital_denominators(fock: Any, nocc: int) -> tuple[np.ndarray, np.ndarray]:
    """(D1[a, i], D2[a, b, i, j]) = (f_ii − f_aa, f_ii + f_jj − f_aa − f_bb) from the Fock diagonal.

    Args:
        fock: the Fock matrix, occupied orbitals first.
        nocc: the number of occupied orbitals.

    Returns:
        The two arrays, in the layouts of T1[a, i] and T2[a, b, i, j].

    Example:
        >>> import numpy as np
        >>> [d.ravel().tolist() for d in orbital_denominators(np.diag([-1.0, 0.5]), 1)]
        [[-1.5], [-3.0]]
    """
    e = np.diag(np.asarray(fock))
    d1 = e[None, :nocc] - e[nocc:, None]
    return d1, d1[:, None, :, None] + d1[None, :, None, :]


class _Integrals(eqx.Module):
    """Fields and helpers shared by both integral containers."""

    fock: np.ndarray
    eri: np.ndarray
    mo_energies: np.ndarray
    nocc: int = eqx.field(static=True)
    nvirt: int = eqx.field(static=True)
    e_hf: float = eqx.field(static=True)

    def __check_init__(self) -> None:
        name = type(self).__name__
        n = _check_square(f"{name}.fock", np.asarray(self.fock), 2, None)
        _check_square(f"{name}.eri", np.asarray(self.eri), 4, n)
        check_orbital_counts(name, self.nocc, self.nvirt, n)

    @property
    def nmo(self) -> int:
        """The number of orbitals, ``nocc + nvirt``."""
        return self.nocc + self.nvirt

    def denominators(self) -> tuple[np.ndarray, np.ndarray]:
        """Orbital-energy denominators (D1[a, i], D2[a, b, i, j]) from the Fock diagonal.

        D1[a, i] = f_ii − f_aa and D2[a, b, i, j] = f_ii + f_jj − f_aa − f_bb, *negative*
        for a normal reference (PySCF's ``eia`` sign). The residuals contain the diagonal
        Fock terms as ``R = … − D·t``, so the Jacobi update is ``t ← t + R / D``.

        Returns:
            The two denominator arrays, in the layouts of T1[a, i] and T2[a, b, i, j].

        Example:
            >>> from sq_jax.cc.integrals import default_system
            >>> d1, d2 = default_system().denominators()
            >>> d1.shape, d2.shape, bool((d2 < 0).all())
            ((4, 10), (4, 4, 10, 10), True)
        """
        return orbital_denominators(self.fock, self.nocc)

    def mp2_amplitudes(self) -> tuple[np.ndarray, np.ndarray]:
        """The usual CC starting guess t1 = f_ai / D1, t2 = g_abij / D2.

        ``g`` is ⟨ab‖ij⟩ for spin-orbital integrals and ⟨ab|ij⟩ for spatial ones.

        Returns:
            (T1[a, i], T2[a, b, i, j]).

        Example:
            >>> from sq_jax.cc.integrals import default_system
            >>> t1, t2 = default_system().mp2_amplitudes()
            >>> t1.shape, t2.shape
            ((4, 10), (4, 4, 10, 10))
        """
        d1, d2 = self.denominators()
        o, v = slice(0, self.nocc), slice(self.nocc, self.nmo)
        f, g = np.asarray(self.fock), np.asarray(self.eri)
        return f[v, o] / d1, g[v, v, o, o] / d2


class SpinOrbitalIntegrals(_Integrals):
    """Spin-orbital Fock matrix and antisymmetrized two-electron integrals.

    Attributes:
        fock: F[p, q], shape (nso, nso).
        eri: ⟨pq‖rs⟩ = ⟨pq|rs⟩ − ⟨pq|sr⟩, shape (nso,)*4.
        mo_energies: the Fock diagonal, shape (nso,).
        nocc: number of occupied spin-orbitals (they come first).
        nvirt: number of virtual spin-orbitals.
        e_hf: the reference (Hartree–Fock) total energy, nuclear repulsion included.

    Example:
        >>> from sq_jax.cc.integrals import default_system
        >>> ints = default_system()
        >>> g = ints.eri
        >>> bool(abs(g + g.transpose(0, 1, 3, 2)).max() == 0.0)
        True
    """


class SpatialIntegrals(_Integrals):
    """Closed-shell (spatial-orbital) Fock matrix and physicist two-electron integrals.

    Attributes:
        fock: F[p, q], shape (n, n).
        eri: ⟨pq|rs⟩ = (pr|qs), shape (n,)*4.
        mo_energies: the Fock diagonal, shape (n,).
        nocc: number of doubly occupied orbitals (they come first).
        nvirt: number of virtual orbitals.
        e_hf: the reference (Hartree–Fock) total energy, nuclear repulsion included.

    Example:
        >>> from sq_jax.cc.integrals import default_spatial_system
        >>> ints = default_spatial_system()
        >>> ints.nocc, ints.nvirt
        (5, 2)
    """


def spin_orbital_from_spatial(spatial: SpatialIntegrals) -> SpinOrbitalIntegrals:
    """Expand closed-shell spatial integrals to spin-orbitals (α/β interleaved).

    Spin-orbital ``2p + σ`` is spatial orbital ``p`` with spin σ (0 = α, 1 = β); since the
    occupied spatial orbitals come first, so do the occupied spin-orbitals.

    Args:
        spatial: the closed-shell integrals.

    Returns:
        The spin-orbital integrals, with ⟨PQ‖RS⟩ = ⟨pq|rs⟩ δ_σPσR δ_σQσS − ⟨pq|sr⟩
        δ_σPσS δ_σQσR.

    Example:
        >>> from sq_jax.cc.integrals import default_spatial_system, spin_orbital_from_spatial
        >>> so = spin_orbital_from_spatial(default_spatial_system())
        >>> so.nocc, so.nvirt
        (10, 4)
    """
    n = spatial.nmo
    eye2 = np.eye(2)
    fock = np.kron(np.asarray(spatial.fock, dtype=np.float64), eye2)
    v = np.einsum("pqrs,xz,yw->pxqyrzsw", np.asarray(spatial.eri, np.float64), eye2, eye2)
    v = v.reshape((2 * n,) * 4)
    return SpinOrbitalIntegrals(
        fock=fock,
        eri=v - v.transpose(0, 1, 3, 2),
        mo_energies=np.diag(fock).copy(),
        nocc=2 * spatial.nocc,
        nvirt=2 * spatial.nvirt,
        e_hf=float(spatial.e_hf),
    )


def _require_rhf(mf: Any) -> tuple[Any, Any]:
    try:
        from pyscf import ao2mo, scf
    except ImportError as err:  # pragma: no cover - exercised only without pyscf
        raise InputError(
            "Building integrals from a mean-field object needs PySCF, which is not "
            "installed; install it with `pip install sq_jax[chem]`."
        ) from err
    if not isinstance(mf, scf.hf.RHF) or isinstance(mf, scf.rohf.ROHF):
        raise InputError(
            f"Expected a converged PySCF RHF object (`pyscf.scf.RHF`); received "
            f"`{type(mf).__name__}`. Run `scf.RHF(mol).run()` for a closed-shell molecule "
            "(UHF and ROHF references: `spin_orbital_integrals` or the spin-orbital CC route)."
        )
    if getattr(mf, "mo_coeff", None) is None:
        raise InputError(
            "The RHF object has no orbitals (`mf.mo_coeff is None`); call `mf.run()` or "
            "`mf.kernel()` before building integrals."
        )
    return ao2mo, scf


def rhf_orbitals(mf: Any) -> tuple[np.ndarray, int, np.ndarray]:
    """The MO coefficients, occupied count and MO Fock matrix of a run PySCF RHF object.

    The Fock matrix is the AO Fock matrix of the RHF density transformed to the MO basis
    (as PySCF's coupled-cluster codes build it), so tiny off-diagonal elements of an
    incompletely converged SCF are kept rather than dropped.

    Args:
        mf: a converged ``pyscf.scf.RHF`` object, occupied orbitals first.

    Returns:
        ``(mo_coeff, nocc, fock)`` with ``mo_coeff`` of shape (nao, n) and ``fock`` (n, n).

    Raises:
        InputError: if PySCF is not installed, ``mf`` is not a run RHF object, or its
            orbitals are not ordered occupied first.

    Example:
        With PySCF: ``c, nocc, fock = rhf_orbitals(scf.RHF(mol).run())``. Anything else is
        refused:

        >>> try:
        ...     rhf_orbitals(42)
        ... except InputError as err:
        ...     print(type(err).__name__)
        InputError
    """
    _require_rhf(mf)
    c = np.asarray(mf.mo_coeff, dtype=np.float64)
    occ = np.asarray(mf.mo_occ)
    nocc = int(np.count_nonzero(occ > 0))
    if not np.all(occ[:nocc] > 0) or np.any(occ[nocc:] > 0):
        raise InputError(
            "RHF orbitals must be ordered occupied first; received occupations "
            f"{occ.tolist()}. Sort `mf.mo_coeff` and `mf.mo_occ` by occupation."
        )
    return c, nocc, c.T @ np.asarray(mf.get_fock(), dtype=np.float64) @ c


def spatial_integrals(mf: Any) -> SpatialIntegrals:
    """Closed-shell MO integrals from a converged PySCF RHF object.

    The Fock matrix is the AO Fock matrix of the RHF density transformed to the MO basis
    (as PySCF's coupled-cluster codes build it), so tiny off-diagonal elements of an
    incompletely converged SCF are kept rather than dropped.

    Args:
        mf: a converged ``pyscf.scf.RHF`` object.

    Returns:
        The :class:`SpatialIntegrals` (all electrons correlated).

    Raises:
        InputError: if PySCF is not installed, or ``mf`` is not a run RHF object.

    Example:
        With PySCF: ``spatial_integrals(scf.RHF(mol).run())``. Anything else is refused:

        >>> try:
        ...     spatial_integrals("not a mean-field object")
        ... except InputError as err:
        ...     print(type(err).__name__)
        InputError
    """
    ao2mo, _ = _require_rhf(mf)
    c, nocc, fock = rhf_orbitals(mf)
    n = c.shape[1]
    chem = ao2mo.restore(1, ao2mo.full(mf.mol, c, compact=False), n).reshape((n,) * 4)
    return SpatialIntegrals(
        fock=fock,
        eri=np.ascontiguousarray(chem.transpose(0, 2, 1, 3)),
        mo_energies=np.diag(fock).copy(),
        nocc=nocc,
        nvirt=n - nocc,
        e_hf=float(mf.e_tot),
    )


def spin_orbital_integrals(mf: Any, frozen: Any = None) -> SpinOrbitalIntegrals:
    """Spin-orbital integrals (occupied first) from a PySCF RHF, UHF or ROHF object.

    From RHF, spin-orbital ``2p + σ`` is spatial orbital ``p`` (α/β interleaved); from UHF
    or ROHF (converted to UHF, as PySCF's CCSD does) the order is occupied α, occupied β,
    virtual α, virtual β (see :mod:`sq_jax.cc.open_shell`).

    Args:
        mf: a converged ``pyscf.scf`` RHF, UHF or ROHF object.
        frozen: orbitals left out, as PySCF's ``frozen`` (see :mod:`sq_jax.cc.orbitals`).

    Returns:
        The :class:`SpinOrbitalIntegrals` of the active orbitals.

    Raises:
        InputError: if PySCF is not installed, ``mf`` is not a run HF object, or
            ``frozen`` is bad.

    Example:
        With PySCF: ``ints = spin_orbital_integrals(scf.RHF(mol).run())``, then
        ``ints.eri`` is ⟨pq‖rs⟩ of shape ``(2n,) * 4``. Anything else is refused:

        >>> try:
        ...     spin_orbital_integrals(None)
        ... except InputError as err:
        ...     print(type(err).__name__)
        InputError
    """
    from .blocks import block_builder  # both build on this module
    from .orbitals import freeze_integrals, reference_orbitals

    if reference_orbitals(mf).restricted:  # RHF: α/β interleaved, from the spatial ones
        return spin_orbital_from_spatial(freeze_integrals(spatial_integrals(mf), frozen))
    key = "g{p,p;p,p}"
    built = block_builder(mf, spin_orbital=True, frozen=frozen).build([key])
    return SpinOrbitalIntegrals(
        fock=built.fock,
        eri=built.blocks[key],
        mo_energies=np.diag(built.fock).copy(),
        nocc=built.nocc,
        nvirt=built.nvirt,
        e_hf=built.e_hf,
    )


# --------------------------------------------------------------------------------------
# SeQuant's integral data-file format


def _bad_file(path: os.PathLike | str, line: int, got: str, expected: str) -> InputError:
    return InputError(
        f"{os.fspath(path)}, line {line}: expected {expected}; received {got!r}. SeQuant "
        "tensor files hold a header `rank nocc nvirt # comment` and then "
        "(nocc+nvirt)**rank numbers, one per line, row-major."
    )


# SeQuant's files hold rank-2 and rank-4 tensors; a larger rank is a corrupt header (whose
# (nocc + nvirt) ** rank values could not be counted in reasonable time).
_MAX_FILE_RANK = 8


def _number_or_nan(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


def read_sequant_tensor(path: os.PathLike | str) -> tuple[np.ndarray, int, int]:
    """Read a tensor in SeQuant's integral data-file format.

    The first line is ``rank nocc nvirt`` with an optional ``# comment``; then follow
    ``(nocc + nvirt) ** rank`` numbers, one per line, row-major (last index fastest),
    occupied orbitals first.

    Args:
        path: the file to read.

    Returns:
        ``(array, nocc, nvirt)`` with ``array`` of shape ``(nocc + nvirt,) * rank``.

    Raises:
        InputError: if the file is missing or malformed; the message names the file, the
            line and what was expected there.

    Example:
        >>> import numpy as np, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "f.dat")
        >>> write_sequant_tensor(path, np.diag([-1.0, 0.5]), 1, 1, "toy Fock")
        >>> read_sequant_tensor(path)[0]
        array([[-1. ,  0. ],
               [ 0. ,  0.5]])
    """
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, ValueError) as err:  # ValueError: undecodable bytes, a NUL in the name
        raise InputError(f"Cannot read SeQuant tensor file {os.fspath(path)!r}: {err}.") from err
    if not lines:
        raise _bad_file(path, 1, "", "a header `rank nocc nvirt # comment`")
    header = lines[0].split("#", 1)[0].split()
    try:
        if len(header) != 3:
            raise ValueError
        rank, nocc, nvirt = (int(x) for x in header)
        if rank < 0 or nocc < 0 or nvirt < 0 or rank > _MAX_FILE_RANK:
            raise ValueError
    except ValueError:
        expected = "a header of three non-negative integers `rank nocc nvirt` (rank <= 8)"
        raise _bad_file(path, 1, lines[0], expected) from None
    count = (nocc + nvirt) ** rank
    body = lines[1:]
    while body and not body[-1].strip():
        body.pop()
    if len(body) != count:
        raise _bad_file(
            path,
            min(len(body), count) + 2 if len(body) < count else count + 2,
            f"{len(body)} value lines" if len(body) < count else body[count],
            f"exactly {count} value lines for rank {rank} with {nocc}+{nvirt} orbitals",
        )
    try:
        values = np.asarray(body, dtype=np.float64)  # fast path
    except ValueError:
        values = np.array([_number_or_nan(text) for text in body], dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        k = int(bad[0])
        raise _bad_file(path, k + 2, body[k], "one floating-point number (finite)")
    return values.reshape((nocc + nvirt,) * rank), nocc, nvirt


def write_sequant_tensor(
    path: os.PathLike | str, array: Any, nocc: int, nvirt: int, comment: str = ""
) -> None:
    """Write a tensor in SeQuant's integral data-file format (see :func:`read_sequant_tensor`).

    Values are written with 17 significant digits, so reading them back is exact.

    Args:
        path: the file to write.
        array: a real array of shape ``(nocc + nvirt,) * rank``.
        nocc: number of occupied orbitals (first along every axis).
        nvirt: number of virtual orbitals.
        comment: text for the header after ``#`` (one line).

    Raises:
        InputError: if the shape does not match ``nocc + nvirt`` or ``comment`` has a
            line break.

    Example:
        >>> import numpy as np, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "t.dat")
        >>> write_sequant_tensor(path, np.arange(4.0).reshape(2, 2), 1, 1, "demo")
        >>> import pathlib
        >>> pathlib.Path(path).read_text().splitlines()[:2]
        ['2 1 1 # demo', '0']
    """
    a = np.asarray(array, dtype=np.float64)
    n = nocc + nvirt
    if any(extent != n for extent in a.shape):
        raise InputError(
            f"write_sequant_tensor: every axis must have extent nocc+nvirt = {n}; received "
            f"shape {a.shape}. Pass the full tensor over occupied then virtual orbitals."
        )
    if "\n" in comment or "\r" in comment:
        raise InputError("write_sequant_tensor: `comment` must be a single line.")
    head = f"{a.ndim} {nocc} {nvirt}" + (f" # {comment}" if comment else "")
    body = "\n".join(f"{x:.17g}" for x in a.ravel())
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(head + "\n" + body + ("\n" if body else ""))


# --------------------------------------------------------------------------------------
# The shipped default system


def _load_npz() -> Mapping[str, np.ndarray]:
    ref = resources.files("sq_jax.cc") / "data" / _DATA_NPZ
    with ref.open("rb") as fh, np.load(fh) as npz:
        return {k: np.array(npz[k]) for k in npz.files}


def default_reference() -> Mapping[str, Any]:
    """Reference numbers of the shipped H2O/STO-3G system, computed with PySCF.

    Keys include ``e_hf``, ``e_corr_gccsd``, ``e_corr_rccsd``, ``pyscf_gccsd_cycles`` and
    ``pyscf_rccsd_cycles`` (iterations of PySCF's DIIS solver at ``conv_tol`` and
    ``conv_tol_normt``), the thresholds, the geometry, the basis and the PySCF version.

    Returns:
        A read-only mapping.

    Example:
        >>> ref = default_reference()
        >>> round(ref["e_corr_gccsd"], 6)
        -0.049439
    """
    ref = resources.files("sq_jax.cc") / "data" / _DATA_JSON
    return MappingProxyType(json.loads(ref.read_text(encoding="utf-8")))


def default_spatial_system() -> SpatialIntegrals:
    """The shipped H2O/STO-3G closed-shell integrals (5 occupied, 2 virtual orbitals).

    Returns:
        The :class:`SpatialIntegrals`; works without PySCF.

    Example:
        >>> ints = default_spatial_system()
        >>> round(float(ints.e_hf), 6)
        -74.963023
    """
    data = _load_npz()
    fock = data["fock"]
    return SpatialIntegrals(
        fock=fock,
        eri=data["eri"],
        mo_energies=np.diag(fock).copy(),
        nocc=int(data["nocc"]),
        nvirt=int(data["nvirt"]),
        e_hf=float(data["e_hf"]),
    )


def default_system() -> SpinOrbitalIntegrals:
    """The shipped H2O/STO-3G spin-orbital integrals (10 occupied, 4 virtual).

    Returns:
        The :class:`SpinOrbitalIntegrals`; works without PySCF.

    Example:
        >>> ints = default_system()
        >>> [round(float(e), 5) for e in ints.mo_energies[::2]]
        [-20.24186, -1.26816, -0.61756, -0.45302, -0.39124, 0.60517, 0.7416]
    """
    return spin_orbital_from_spatial(default_spatial_system())
