"""Density-fitted (three-index) closed-shell integrals for the ``ccsd_cs_df`` equations.

Density fitting writes the chemist two-electron integrals over molecular orbitals as

    (pq|rs) ≈ Σ_K B[p, q, K] B[r, s, K],

with ``B[p, q, K] = Σ_L (pq|L) [J^{-1/2}]_{LK}`` and J the Coulomb metric of the
auxiliary basis. The equations ``ccsd_cs_df`` read B under the tensor label ``B`` with slots
``B{p,q;;Κ_1}`` (two orbital slots over ``p`` = occupied then virtual, one auxiliary slot),
so the physicist ⟨pq|rs⟩ = (pr|qs) of ``ccsd_cs`` becomes ``B{p,r;;Κ_1} * B{q,s;;Κ_1}``.

* :func:`df_integrals` builds B from a PySCF RHF object (PySCF's own density fitting,
  ``mf.with_df`` or ``pyscf.df.DF`` with the requested auxiliary basis), transformed to
  the MO basis here;
* :func:`df_from_spatial` factorizes given ⟨pq|rs⟩ exactly (eigen-decomposition of the
  positive semidefinite (pq|rs) supermatrix), which needs no PySCF — for tests and
  small systems.

References:
    O. Vahtras, J. Almlöf and M. W. Feyereisen, Chem. Phys. Lett. 213, 514 (1993) —
    density fitting (RI) of two-electron integrals. A. E. DePrince and C. D. Sherrill,
    J. Chem. Theory Comput. 9, 2687 (2013) — DF-CCSD.

Example:
    >>> import numpy as np
    >>> from sq_jax.cc.df import df_from_spatial
    >>> from sq_jax.cc.integrals import default_spatial_system
    >>> ints = default_spatial_system()
    >>> dfi = df_from_spatial(ints)
    >>> dfi.b.shape[:2], bool(np.abs(dfi.eri() - ints.eri).max() < 1e-10)
    ((7, 7), True)
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import numpy as np

from .._errors import InputError
from .integrals import (
    SpatialIntegrals,
    check_orbital_counts,
    orbital_denominators,
    rhf_orbitals,
)

__all__ = ["DFIntegrals", "auxbasis_name", "df_from_spatial", "df_integrals", "fitting"]


class DFIntegrals(eqx.Module):
    """Closed-shell Fock matrix and MO three-index density-fitting factors.

    Attributes:
        fock: F[p, q] over spatial orbitals, shape (n, n), occupied first.
        b: B[p, q, K], shape (n, n, naux), with (pq|rs) ≈ Σ_K B[p, q, K] B[r, s, K];
            symmetric in p, q (real orbitals).
        mo_energies: the Fock diagonal, shape (n,).
        nocc: number of doubly occupied orbitals (they come first).
        nvirt: number of virtual orbitals.
        e_hf: the reference total energy, nuclear repulsion included.
        auxbasis: a description of the auxiliary basis (for reports).

    Example:
        >>> import numpy as np
        >>> dfi = DFIntegrals(fock=np.diag([-1.0, 0.5]), b=np.ones((2, 2, 3)), nocc=1, nvirt=1)
        >>> dfi.naux, dfi.eri()[0, 0, 0, 0]
        (3, np.float64(3.0))
    """

    fock: np.ndarray
    b: np.ndarray
    nocc: int = eqx.field(static=True)
    nvirt: int = eqx.field(static=True)
    mo_energies: np.ndarray = None  # type: ignore[assignment]
    e_hf: float = eqx.field(static=True, default=0.0)
    auxbasis: str = eqx.field(static=True, default="")

    def __post_init__(self) -> None:
        if self.mo_energies is None:
            self.mo_energies = np.diag(np.asarray(self.fock)).copy()

    def __check_init__(self) -> None:
        fock, b = np.asarray(self.fock), np.asarray(self.b)
        if fock.ndim != 2 or fock.shape[0] != fock.shape[1]:
            raise InputError(
                f"DFIntegrals.fock must be a square (n, n) array; received shape {fock.shape}."
            )
        n = fock.shape[0]
        if b.ndim != 3 or b.shape[:2] != (n, n) or b.shape[2] < 1:
            raise InputError(
                f"DFIntegrals.b must have shape (n, n, naux) = ({n}, {n}, naux) with naux ≥ 1 "
                f"to match the Fock matrix; received shape {b.shape}. Pass B[p, q, K] over "
                "all orbitals, occupied first, auxiliary index last."
            )
        for name, arr in (("fock", fock), ("b", b)):
            if not np.issubdtype(arr.dtype, np.floating):
                raise InputError(
                    f"DFIntegrals.{name} must hold real floating-point values; received dtype "
                    f"{arr.dtype}. Convert with `np.asarray(x, dtype=np.float64)`."
                )
        check_orbital_counts("DFIntegrals", self.nocc, self.nvirt, n)

    @property
    def nmo(self) -> int:
        """The number of orbitals, ``nocc + nvirt``."""
        return self.nocc + self.nvirt

    @property
    def naux(self) -> int:
        """The number of auxiliary functions (extent of the ``Κ`` space)."""
        return int(np.shape(self.b)[2])

    def eri(self) -> np.ndarray:
        """The physicist ⟨pq|rs⟩ = (pr|qs) = Σ_K B[p, r, K] B[q, s, K], shape (n,)*4.

        Returns:
            The dense four-index integrals implied by B (for checks; O(n⁴) memory).

        Example:
            >>> import numpy as np
            >>> b = np.arange(8.0).reshape(2, 2, 2)
            >>> dfi = DFIntegrals(fock=np.diag([-1.0, 1.0]), b=b + b.transpose(1, 0, 2),
            ...                   nocc=1, nvirt=1)
            >>> g = dfi.eri()
            >>> bool(np.allclose(g, g.transpose(1, 0, 3, 2)))
            True
        """
        b = np.asarray(self.b)
        return np.einsum("prK,qsK->pqrs", b, b)

    def denominators(self) -> tuple[np.ndarray, np.ndarray]:
        """(D1[a, i], D2[a, b, i, j]) = (f_ii − f_aa, f_ii + f_jj − f_aa − f_bb).

        Returns:
            The two arrays, in the layouts of T1[a, i] and T2[a, b, i, j].

        Example:
            >>> import numpy as np
            >>> dfi = DFIntegrals(fock=np.diag([-1.0, 0.5]), b=np.ones((2, 2, 1)),
            ...                   nocc=1, nvirt=1)
            >>> [d.ravel().tolist() for d in dfi.denominators()]
            [[-1.5], [-3.0]]
        """
        return orbital_denominators(self.fock, self.nocc)

    def mp2_amplitudes(self) -> tuple[np.ndarray, np.ndarray]:
        """The usual starting guess t1 = f_ai / D1, t2 = ⟨ab|ij⟩ / D2 (closed shell).

        Returns:
            (T1[a, i], T2[a, b, i, j]).

        Example:
            >>> from sq_jax.cc.integrals import default_spatial_system
            >>> t1, t2 = df_from_spatial(default_spatial_system()).mp2_amplitudes()
            >>> t1.shape, t2.shape
            ((2, 5), (2, 2, 5, 5))
        """
        d1, d2 = self.denominators()
        o, v = slice(0, self.nocc), slice(self.nocc, self.nmo)
        f, b = np.asarray(self.fock), np.asarray(self.b)
        # <ab|ij> = (ai|bj)
        vvoo = np.einsum("aiK,bjK->abij", b[v, o], b[v, o])
        return f[v, o] / d1, vvoo / d2

    def to_spatial(self) -> SpatialIntegrals:
        """The :class:`SpatialIntegrals` with ⟨pq|rs⟩ built from B (for the non-DF equations).

        Returns:
            Spatial integrals with the same Fock matrix, orbitals and reference energy.

        Example:
            >>> from sq_jax.cc.integrals import default_spatial_system
            >>> df_from_spatial(default_spatial_system()).to_spatial().eri.shape
            (7, 7, 7, 7)
        """
        return SpatialIntegrals(
            fock=np.asarray(self.fock),
            eri=self.eri(),
            mo_energies=np.asarray(self.mo_energies),
            nocc=self.nocc,
            nvirt=self.nvirt,
            e_hf=float(self.e_hf),
        )


def df_from_spatial(ints: SpatialIntegrals, *, tol: float = 1e-12) -> DFIntegrals:
    """Exact three-index factors of given closed-shell integrals (no PySCF needed).

    The (pq|rs) supermatrix over pairs (pq) is real symmetric positive semidefinite; its
    eigenvectors with eigenvalues above ``tol`` × the largest give B = V √w, so
    Σ_K B[p, q, K] B[r, s, K] reproduces (pq|rs) up to the dropped eigenvalues.

    Args:
        ints: the :class:`SpatialIntegrals` (physicist ⟨pq|rs⟩ = (pr|qs)).
        tol: relative eigenvalue threshold below which directions are dropped.

    Returns:
        The :class:`DFIntegrals` with ``auxbasis="eigendecomposition"``.

    Raises:
        InputError: if the supermatrix has a clearly negative eigenvalue (the integrals
            are not a Coulomb matrix, e.g. random numbers).

    Example:
        >>> from sq_jax.cc.integrals import default_spatial_system
        >>> dfi = df_from_spatial(default_spatial_system())
        >>> dfi.nocc, dfi.nvirt, dfi.naux <= 28
        (5, 2, True)
    """
    n = ints.nmo
    chem = np.asarray(ints.eri, dtype=np.float64).transpose(0, 2, 1, 3)  # (pq|rs)
    mat = chem.reshape(n * n, n * n)
    mat = 0.5 * (mat + mat.T)
    w, vec = np.linalg.eigh(mat)
    top = float(w[-1]) if w.size else 0.0
    if top <= 0.0 or w[0] < -1e-8 * top:
        raise InputError(
            "df_from_spatial: the (pq|rs) supermatrix is not positive semidefinite "
            f"(eigenvalues from {w[0]:.3g} to {top:.3g}); pass real two-electron integrals."
        )
    keep = w > tol * top
    b = (vec[:, keep] * np.sqrt(w[keep])).reshape(n, n, -1)
    b = 0.5 * (b + b.transpose(1, 0, 2))
    return DFIntegrals(
        fock=np.asarray(ints.fock, dtype=np.float64),
        b=np.ascontiguousarray(b),
        mo_energies=np.asarray(ints.mo_energies, dtype=np.float64),
        nocc=ints.nocc,
        nvirt=ints.nvirt,
        e_hf=float(ints.e_hf),
        auxbasis="eigendecomposition",
    )


def _require_pyscf() -> Any:
    try:
        from pyscf import df, lib, scf
    except ImportError as err:  # pragma: no cover - exercised only without pyscf
        raise InputError(
            "df_integrals needs PySCF, which is not installed; install it with "
            "`pip install sq_jax[chem]` (or `pip install pyscf`), or factorize integrals "
            "you already have with `df_from_spatial`."
        ) from err
    return df, lib, scf


def fitting(mf: Any, auxbasis: Any = None) -> Any:
    """PySCF's built density-fitting object for ``mf`` and the requested auxiliary basis.

    ``auxbasis`` when given (any form ``pyscf.df.DF`` accepts), otherwise ``mf.with_df``
    of a density-fitted SCF, otherwise ``pyscf.df.make_auxbasis(mol)`` — the basis
    ``mf.density_fit()`` picks.

    Args:
        mf: a PySCF mean-field object.
        auxbasis: the auxiliary basis, or ``None`` for the default described above.

    Returns:
        A built ``pyscf.df.DF`` (its three-index AO factors computed).

    Example:
        With PySCF: ``fitting(scf.RHF(mol).run(), "weigend").get_naoaux()``.

        >>> fitting.__name__
        'fitting'
    """
    df, _, _ = _require_pyscf()
    with_df = getattr(mf, "with_df", None)
    if auxbasis is not None or with_df is None:
        with_df = df.DF(mf.mol)
        with_df.auxbasis = df.make_auxbasis(mf.mol) if auxbasis is None else auxbasis
    if getattr(with_df, "_cderi", None) is None:
        with_df.build()
    return with_df


def auxbasis_name(with_df: Any) -> str:
    """A short description of a density-fitting object's auxiliary basis (for reports).

    Example:
        >>> from types import SimpleNamespace
        >>> auxbasis_name(SimpleNamespace(auxbasis="weigend"))
        'weigend'
    """
    aux = with_df.auxbasis
    return aux if isinstance(aux, str) else repr(aux)


def df_integrals(mf: Any, auxbasis: Any = None) -> DFIntegrals:
    """Density-fitted closed-shell MO integrals from a converged PySCF RHF object.

    The auxiliary basis is ``auxbasis`` when given (any form ``pyscf.df.DF`` accepts, e.g.
    ``"weigend"`` or ``"cc-pvdz-ri"``); otherwise that of ``mf.with_df`` for a
    density-fitted SCF (``scf.RHF(mol).density_fit()``), otherwise PySCF's default for the
    orbital basis (``pyscf.df.make_auxbasis(mol)``, a JK-fitting basis). PySCF's DF-CCSD on
    a conventional SCF uses ``pyscf.df.make_auxbasis(mol, mp2fit=True)``; pass that to
    reproduce it. The Fock matrix is ``mf.get_fock()`` in the MO basis (density-fitted for a
    density-fitted SCF), as PySCF's coupled-cluster codes build it.

    Args:
        mf: a converged ``pyscf.scf.RHF`` object (density-fitted or not).
        auxbasis: the auxiliary basis, or ``None`` for the default described above.

    Returns:
        The :class:`DFIntegrals` (all electrons correlated).

    Raises:
        InputError: if PySCF is not installed, or ``mf`` is not a run RHF object.

    Example:
        With PySCF: ``dfi = df_integrals(scf.RHF(mol).density_fit().run())``, then
        ``dfi.b`` is B[p, q, K]. Anything else is refused:

        >>> try:
        ...     df_integrals("not a mean-field object")
        ... except InputError as err:
        ...     print(type(err).__name__)
        InputError
    """
    _, lib, _ = _require_pyscf()
    c, nocc, fock = rhf_orbitals(mf)
    with_df = fitting(mf, auxbasis)
    nao, n = c.shape
    blocks = []
    for packed in with_df.loop():
        lao = lib.unpack_tril(np.asarray(packed)).reshape(-1, nao, nao)  # (K, μ, ν)
        blocks.append(np.einsum("Kmn,mp,nq->pqK", lao, c, c, optimize=True))
    b = np.ascontiguousarray(np.concatenate(blocks, axis=2))
    return DFIntegrals(
        fock=fock,
        b=b,
        mo_energies=np.diag(fock).copy(),
        nocc=nocc,
        nvirt=n - nocc,
        e_hf=float(mf.e_tot),
        auxbasis=auxbasis_name(with_df),
    )
