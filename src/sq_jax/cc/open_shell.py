"""Integral sources computed by PySCF: restricted (spatial) and unrestricted (spin-orbital).

Both hand :class:`~sq_jax.cc.blocks.BlockBuilder` chemist blocks (xz|yw) and
three-index factors B[x, y, K] for the orbitals of each space only (``i`` occupied, ``a``
virtual, ``p`` all, frozen orbitals left out).

* :class:`PySCFSource` — one set of spatial orbitals (RHF); the builder expands its
  spatial blocks to spin-orbitals when asked.
* :class:`OpenShellSource` — different α and β orbitals (UHF, or ROHF as PySCF converts
  it); its blocks are already over spin-orbitals, in the order **occupied α, occupied β,
  virtual α, virtual β** (within each space α first, then β). A block is assembled from
  the spatial blocks of the spin pairs it holds: (xσ zσ|yτ wτ) for σ, τ ∈ {α, β}.

Example:
    >>> import numpy as np
    >>> spin_positions(nocc=(2, 1), nvirt=(1, 2))["p"][1].tolist()   # β among all orbitals
    [2, 4, 5]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .df import _require_pyscf, auxbasis_name, fitting
from .orbitals import Reference

__all__ = ["OpenShellSource", "PySCFSource", "pyscf_chem", "pyscf_factors", "spin_positions"]


def pyscf_chem(mf: Any, coeffs: tuple[np.ndarray, ...]) -> np.ndarray:
    """(xz|yw) for the four coefficient blocks ``coeffs``, by ``ao2mo.general``.

    Uses the SCF's in-core AO integrals (``mf._eri``) when it kept them, else the molecule.

    Example:
        With PySCF: ``pyscf_chem(mf, (c_occ, c_vir, c_occ, c_vir))`` is (ia|jb).

        >>> pyscf_chem.__name__
        'pyscf_chem'
    """
    from pyscf import ao2mo

    eri = getattr(mf, "_eri", None)  # the AO integrals of an in-core SCF, if kept
    flat = ao2mo.general(mf.mol if eri is None else eri, coeffs, compact=False)
    return np.asarray(flat).reshape(tuple(c.shape[1] for c in coeffs))


def pyscf_factors(with_df: Any, pairs: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    """B[x, y, K] for each coefficient pair, in one pass over the AO factors.

    Example:
        With PySCF: ``pyscf_factors(fitting(mf), [(c_vir, c_occ)])``.

        >>> pyscf_factors.__name__
        'pyscf_factors'
    """
    _, lib, _ = _require_pyscf()
    chunks: list[list[np.ndarray]] = [[] for _ in pairs]
    nao = pairs[0][0].shape[0]
    for packed in with_df.loop():  # (K, μν) chunks of the AO factors
        lao = lib.unpack_tril(np.asarray(packed)).reshape(-1, nao, nao)
        for out, (cx, cy) in zip(chunks, pairs, strict=True):
            out.append(np.einsum("mx,Kmy->xyK", cx, lao @ cy))
    return [np.ascontiguousarray(np.concatenate(c, axis=2)) for c in chunks]


class _DFMixin:
    def _init_df(self, mf: Any, df: bool, auxbasis: Any) -> None:
        self.with_df = fitting(mf, auxbasis) if df else None
        self.naux = int(self.with_df.get_naoaux()) if df else 0
        self.auxbasis = auxbasis_name(self.with_df) if df else ""


class PySCFSource(_DFMixin):
    """Spatial blocks of a restricted reference's active orbitals."""

    spin_resolved = False

    def __init__(self, mf: Any, ref: Reference, df: bool, auxbasis: Any):
        (channel,) = ref.channels
        self.mf, self.c, self.nocc, self.fock = mf, channel.coeff, channel.nocc, channel.fock
        self.nmo, self.e_hf = channel.nmo, ref.e_hf
        self._init_df(mf, df, auxbasis)

    def _coeff(self, space: str) -> np.ndarray:
        return {"i": self.c[:, : self.nocc], "a": self.c[:, self.nocc :]}.get(space, self.c)

    def chem(self, spaces: tuple[str, ...]) -> np.ndarray:
        """(xz|yw) over spatial orbitals of the spaces ``(x, z, y, w)``."""
        return pyscf_chem(self.mf, tuple(self._coeff(x) for x in spaces))

    def factors(self, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], np.ndarray]:
        """B[x, y, K] over spatial orbitals for each pair of spaces."""
        pairs = list(pairs)
        coeffs = [(self._coeff(x), self._coeff(y)) for x, y in pairs]
        return dict(zip(pairs, pyscf_factors(self.with_df, coeffs), strict=True))


def spin_positions(nocc: tuple[int, int], nvirt: tuple[int, int]) -> dict[str, tuple]:
    """Where each spin's orbitals sit inside each space, in the open-shell order.

    Args:
        nocc: occupied (α, β) orbitals.
        nvirt: virtual (α, β) orbitals.

    Returns:
        space → (α positions, β positions) within that space's spin-orbitals.

    Example:
        >>> spin_positions(nocc=(2, 1), nvirt=(1, 2))["a"][0].tolist()
        [0]
    """
    (oa, ob), (va, vb) = nocc, nvirt
    occ = (np.arange(oa), oa + np.arange(ob))
    vir = (np.arange(va), va + np.arange(vb))
    every = tuple(np.concatenate([occ[s], oa + ob + vir[s]]) for s in (0, 1))
    return {"i": occ, "a": vir, "p": every}


class OpenShellSource(_DFMixin):
    """Spin-orbital blocks of an unrestricted reference (α and β orbitals differ)."""

    spin_resolved = True

    def __init__(self, mf: Any, ref: Reference, df: bool, auxbasis: Any):
        self.mf, self.channels, self.e_hf = mf, ref.channels, ref.e_hf
        nocc = tuple(ch.nocc for ch in ref.channels)
        nvirt = tuple(ch.nmo - ch.nocc for ch in ref.channels)
        self.nocc, self.nmo = sum(nocc), sum(nocc) + sum(nvirt)
        self.positions = spin_positions(nocc, nvirt)  # type: ignore[arg-type]
        self.fock = np.zeros((self.nmo, self.nmo))
        for s, ch in enumerate(ref.channels):
            where = self.positions["p"][s]
            self.fock[np.ix_(where, where)] = ch.fock
        self._init_df(mf, df, auxbasis)

    def _coeff(self, space: str, spin: int) -> np.ndarray:
        ch = self.channels[spin]
        return {"i": ch.coeff[:, : ch.nocc], "a": ch.coeff[:, ch.nocc :]}.get(space, ch.coeff)

    def coefficients(self, space: str, spin: int) -> np.ndarray:
        """The MO coefficients of one space (``i``, ``a`` or ``p``) and spin (0 α, 1 β)."""
        return self._coeff(space, spin)

    def _extent(self, space: str) -> int:
        return sum(len(x) for x in self.positions[space])

    def chem(self, spaces: tuple[str, ...]) -> np.ndarray:
        """(XZ|YW) over spin-orbitals: zero unless X, Z share a spin and Y, W share one."""
        out = np.zeros(tuple(self._extent(s) for s in spaces))
        done: dict[tuple[int, int], np.ndarray] = {}
        for s, t in ((0, 0), (0, 1), (1, 0), (1, 1)):
            pairs = list(zip(spaces, (s, s, t, t), strict=True))
            if (t, s) in done and spaces[:2] == spaces[2:]:  # (xβ zβ|xα zα) = (xα zα|xβ zβ)
                block = done[(t, s)].transpose(2, 3, 0, 1)
            else:
                block = pyscf_chem(self.mf, tuple(self._coeff(q, u) for q, u in pairs))
            done[(s, t)] = block
            out[np.ix_(*(self.positions[q][u] for q, u in pairs))] = block
        return out

    def factors(self, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], np.ndarray]:
        """B[X, Y, K] δ_σXσY over spin-orbitals for each pair of spaces."""
        pairs = list(pairs)
        coeffs = [(self._coeff(x, s), self._coeff(y, s)) for x, y in pairs for s in (0, 1)]
        spatial = iter(pyscf_factors(self.with_df, coeffs))
        out = {}
        for x, y in pairs:
            b = np.zeros((self._extent(x), self._extent(y), self.naux))
            for s in (0, 1):
                b[np.ix_(self.positions[x][s], self.positions[y][s])] = next(spatial)
            out[(x, y)] = b
        return out
