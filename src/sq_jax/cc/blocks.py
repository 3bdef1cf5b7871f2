"""Integral blocks built one at a time: exactly the blocks a compiled program reads.

A compiled program reads its two-electron integrals block by block (``g{i,i;a,a}``,
``B{a,i;;Κ}``, see :mod:`sq_jax.forest.inputs`), so the full four-index tensor need never
exist. :class:`BlockBuilder` builds only the blocks asked for:

* ``g{X,Y;Z,W}`` — ⟨xy|zw⟩ over spatial orbitals, or ⟨xy‖zw⟩ over spin-orbitals, each
  from the spatial chemist blocks (xz|yw) and (xw|yz) of those spaces alone;
* ``B{X,Y;;Κ}`` — the three-index density-fitting factor, B[x, y, K] over spatial
  orbitals or B[x, y, K] δ_σxσy over spin-orbitals,

for X, Y, Z, W among ``i`` (occupied), ``a`` (virtual) and ``p`` (all). Spin-orbital
``2p + σ`` is spatial orbital ``p`` with spin σ, as in :mod:`sq_jax.cc.integrals`. The
spatial blocks come from PySCF (``ao2mo.general`` on the orbitals of each space, or the
density-fitting object's AO factors) or from integrals already in memory.

:func:`read_blocks` lists the integral blocks compiled programs read; the drivers build
exactly those (plus ``g{a,a;i,i}`` or ``B{a,i;;Κ}`` for the MP2 starting guess).

Example:
    >>> from sq_jax.cc.blocks import block_builder
    >>> builder = block_builder(None, spin_orbital=True, df=True)   # shipped H2O/STO-3G
    >>> ints = builder.build(["B{i,a;;Κ}"])
    >>> sorted(ints.blocks), ints.blocks["B{i,a;;Κ}"].shape[:2]
    (['B{a,i;;Κ}', 'B{i,a;;Κ}'], (10, 4))
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .._errors import InputError
from ..expr.spaces import Spaces
from ..forest.inputs import input_specs
from .df import DFIntegrals, df_from_spatial
from .integrals import SpatialIntegrals, default_spatial_system, orbital_denominators
from .open_shell import OpenShellSource, PySCFSource
from .orbitals import freeze_integrals, reference_orbitals

__all__ = ["BlockBuilder", "BlockIntegrals", "block_builder", "integral_source", "read_blocks"]

ORBITAL_SPACES = ("i", "a", "p")
_KEY = re.compile(r"^(\w+)\{([^{}]*)\}$")
CHEM_SYMMETRIES = (
    (0, 1, 2, 3),
    (1, 0, 2, 3),
    (0, 1, 3, 2),
    (1, 0, 3, 2),
    (2, 3, 0, 1),
    (3, 2, 0, 1),
    (2, 3, 1, 0),
    (3, 2, 1, 0),
)
"""The permutations of (pq|rs) that leave real chemist integrals unchanged."""


def read_blocks(*programs: Any) -> tuple[str, ...]:
    """The keys of the integral blocks (labels ``g`` and ``B``) the programs read.

    Args:
        *programs: compiled :class:`~sq_jax.lower.program.Program` objects (or forests).

    Returns:
        The block keys, sorted, each once.

    Example:
        >>> import sq_jax as sq
        >>> prog = sq.compile("E = 1/4 g{i1,i2;a1,a2} t{a1,a2;i1,i2}", sq.Spaces(i=2, a=3))
        >>> read_blocks(prog)
        ('g{i,i;a,a}',)
    """
    keys: set[str] = set()
    for program in programs:
        forest = getattr(getattr(program, "schedule", None), "annotated", None)
        forest = program if forest is None else forest.forest
        keys.update(s.block_key for s in input_specs(forest) if s.label in ("g", "B"))
    return tuple(sorted(keys))


def _parse_key(key: str, df: bool) -> tuple[str, ...]:
    """The orbital spaces of an integral block key, checked against the route."""
    match = _KEY.match(key)
    groups = match.group(2).split(";") if match else []
    label = match.group(1) if match else ""
    want = "B{X,Y;;Κ}" if df else "g{X,Y;Z,W}"
    if df:
        ok = label == "B" and len(groups) == 3 and not groups[1] and groups[2] in ("Κ", "K")
        slots = groups[0].split(",") if ok else []
        ok = ok and len(slots) == 2
    else:
        ok = label == "g" and len(groups) == 2
        slots = [s for g in groups for s in g.split(",")] if ok else []
        ok = ok and len(slots) == 4 and all(len(g.split(",")) == 2 for g in groups)
    if not ok or any(s not in ORBITAL_SPACES for s in slots):
        raise InputError(
            f"cannot build integral block {key!r}: expected {want} with X, Y, Z, W among "
            f"{', '.join(ORBITAL_SPACES)}. Ask for the blocks a program reads "
            "(`read_blocks(program)`)."
        )
    return tuple(slots)


@dataclasses.dataclass(frozen=True, eq=False)
class BlockIntegrals:
    """The Fock matrix and the two-electron integral blocks one equation set reads.

    Attributes:
        fock: F[p, q] over all orbitals (spin-orbitals or spatial), occupied first.
        blocks: block key → array, e.g. ``"g{i,i;a,a}"`` or ``"B{a,i;;Κ}"``.
        nocc: occupied orbitals (spin-orbitals on the spin-orbital route).
        nvirt: virtual orbitals.
        e_hf: the reference total energy.
        spin_orbital: whether the blocks are over spin-orbitals (⟨pq‖rs⟩).
        naux: auxiliary functions of the density fitting (0 without).
        auxbasis: a description of the auxiliary basis ("" without).

    Example:
        >>> ints = block_builder(None, spin_orbital=True).build(["g{i,i;a,a}"])
        >>> ints.blocks["g{i,i;a,a}"].shape, ints.nbytes
        ((10, 10, 4, 4), 25600)
    """

    fock: np.ndarray
    blocks: Mapping[str, np.ndarray]
    nocc: int
    nvirt: int
    e_hf: float
    spin_orbital: bool
    naux: int = 0
    auxbasis: str = ""

    @property
    def nbytes(self) -> int:
        """Bytes held by the integral blocks (the Fock matrix not counted)."""
        return sum(int(b.nbytes) for b in self.blocks.values())

    def inputs(self) -> dict[str, np.ndarray]:
        """The program inputs: ``"f"`` (the full Fock matrix) and every block by its key.

        Example:
            >>> sorted(block_builder(None, spin_orbital=False).build([]).inputs())
            ['f', 'g{a,a;i,i}']
        """
        return {"f": self.fock, **self.blocks}

    def denominators(self) -> tuple[np.ndarray, np.ndarray]:
        """(D1[a, i], D2[a, b, i, j]) = (f_ii − f_aa, f_ii + f_jj − f_aa − f_bb).

        Example:
            >>> d1, d2 = block_builder(None, spin_orbital=False).build([]).denominators()
            >>> d1.shape, d2.shape
            ((2, 5), (2, 2, 5, 5))
        """
        return orbital_denominators(self.fock, self.nocc)

    def mp2_amplitudes(self) -> tuple[np.ndarray, np.ndarray]:
        """The starting guess t1 = f_ai / D1, t2 = ⟨ab‖ij⟩ / D2 (⟨ab|ij⟩ closed-shell).

        ⟨ab‖ij⟩ comes from block ``g{a,a;i,i}``, or from ``B{a,i;;Κ}`` when density fitted
        (⟨ab|ij⟩ = (ai|bj)); :meth:`BlockBuilder.build` always builds that block.

        Example:
            >>> t1, t2 = block_builder(None, spin_orbital=True, df=True).build([]).mp2_amplitudes()
            >>> t1.shape, t2.shape
            ((4, 10), (4, 4, 10, 10))
        """
        d1, d2 = self.denominators()
        if self.naux:
            b = self.blocks["B{a,i;;Κ}"]
            vvoo = np.einsum("aiK,bjK->abij", b, b)
            if self.spin_orbital:
                vvoo = vvoo - vvoo.transpose(0, 1, 3, 2)
        else:
            vvoo = self.blocks["g{a,a;i,i}"]
        fock = np.asarray(self.fock)
        return fock[self.nocc :, : self.nocc] / d1, vvoo / d2


class _ArraySource:
    """Spatial blocks cut from integrals in memory (⟨pq|rs⟩ or three-index factors)."""

    def __init__(self, fock, nocc, e_hf, *, eri=None, dfi: DFIntegrals | None = None):
        self.fock, self.nocc, self.e_hf = np.asarray(fock, dtype=np.float64), nocc, e_hf
        self.nmo = self.fock.shape[0]
        self.eri, self.dfi = eri, dfi
        self.naux = dfi.naux if dfi is not None else 0
        self.auxbasis = dfi.auxbasis if dfi is not None else ""

    def _slice(self, space: str) -> slice:
        return {"i": slice(0, self.nocc), "a": slice(self.nocc, self.nmo)}.get(space, slice(None))

    def chem(self, spaces: tuple[str, ...]) -> np.ndarray:
        s = [self._slice(x) for x in spaces]
        if self.eri is None:  # (AB|CD) = Σ_K B[A,B,K] B[C,D,K]
            b = np.asarray(self.dfi.b)  # type: ignore[union-attr]
            return np.einsum("abK,cdK->abcd", b[s[0], s[1]], b[s[2], s[3]])
        return np.asarray(self.eri)[s[0], s[2], s[1], s[3]].transpose(0, 2, 1, 3)

    def factors(self, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], np.ndarray]:
        b = np.asarray(self.dfi.b)  # type: ignore[union-attr]
        return {(x, y): b[self._slice(x), self._slice(y)].copy() for x, y in pairs}


def _spin_block(direct: np.ndarray, exchange: np.ndarray) -> np.ndarray:
    """⟨PQ‖RS⟩ = ⟨pq|rs⟩ δ_σPσR δ_σQσS − ⟨pq|sr⟩ δ_σPσS δ_σQσR, spins interleaved.

    ``direct[p, q, r, s]`` = ⟨pq|rs⟩ and ``exchange[p, q, r, s]`` = ⟨pq|sr⟩.
    """
    nx, ny, nz, nw = direct.shape
    out = np.zeros((nx, 2, ny, 2, nz, 2, nw, 2))
    for s in (0, 1):
        for t in (0, 1):
            out[:, s, :, t, :, s, :, t] += direct
            out[:, s, :, t, :, t, :, s] -= exchange
    return out.reshape(2 * nx, 2 * ny, 2 * nz, 2 * nw)


def _spin_factor(b: np.ndarray) -> np.ndarray:
    """B[P, Q, K] = B[p, q, K] δ_σPσQ, spins interleaved."""
    nx, ny, naux = b.shape
    out = np.zeros((nx, 2, ny, 2, naux))
    out[:, 0, :, 0] = b
    out[:, 1, :, 1] = b
    return out.reshape(2 * nx, 2 * ny, naux)


class BlockBuilder:
    """Builds the integral blocks of one route (spin-orbital or spatial, DF or not).

    Make one with :func:`block_builder`; :meth:`spaces` gives the extents to compile the
    equations with, :meth:`build` the blocks they read.

    Attributes:
        spin_orbital: blocks over spin-orbitals (⟨pq‖rs⟩) rather than spatial (⟨pq|rs⟩).
        df: blocks are three-index factors ``B{X,Y;;Κ}`` rather than ``g{X,Y;Z,W}``.
    """

    def __init__(self, source: Any, *, spin_orbital: bool, df: bool):
        self._source = source
        self.spin_orbital = spin_orbital
        self.df = df
        # A spatial source's blocks are expanded to spin-orbitals here (α/β interleaved);
        # an open-shell source's blocks already are over spin-orbitals.
        self._expand = spin_orbital and not getattr(source, "spin_resolved", False)

    @property
    def nocc(self) -> int:
        """Occupied orbitals of the route (spin-orbitals when ``spin_orbital``)."""
        return self._source.nocc * (2 if self._expand else 1)

    @property
    def nvirt(self) -> int:
        """Virtual orbitals of the route."""
        return (self._source.nmo - self._source.nocc) * (2 if self._expand else 1)

    @property
    def spin_positions(self) -> tuple[tuple[int, ...], ...] | None:
        """Positions of occupied α, occupied β, virtual α, virtual β spin-orbitals.

        Counted among the route's occupied (and virtual) spin-orbitals; ``None`` on the
        spatial route.

        Example:
            >>> [p[:3] for p in block_builder(None, spin_orbital=True).spin_positions]
            [(0, 2, 4), (1, 3, 5), (0, 2), (1, 3)]
        """
        if not self.spin_orbital:
            return None
        if self._expand:  # α/β interleaved: spin-orbital 2p + σ
            o, v = self.nocc, self.nvirt
            return tuple(tuple(range(s, n, 2)) for n in (o, v) for s in (0, 1))
        where = self._source.positions
        return tuple(tuple(int(k) for k in where[x][s]) for x in ("i", "a") for s in (0, 1))

    def spaces(self) -> Spaces:
        """The index spaces: ``i``, ``a`` and, density-fitted, the auxiliary ``Κ``.

        Example:
            >>> print(block_builder(None, spin_orbital=True).spaces().extent("a"))
            4
        """
        aux = {"Κ": self._source.naux} if self.df else {}
        return Spaces(aux, i=self.nocc, a=self.nvirt)

    def build(self, keys: Iterable[str]) -> BlockIntegrals:
        """Build the blocks ``keys`` (and the one the MP2 guess needs), nothing else.

        Args:
            keys: block keys such as ``"g{i,i;a,a}"`` or ``"B{a,i;;Κ}"`` — see
                :func:`read_blocks`.

        Returns:
            The :class:`BlockIntegrals`.

        Raises:
            InputError: a key that is not an integral block of this route.

        Example:
            >>> b = block_builder(None, spin_orbital=False).build(["g{i,a;a,i}"])
            >>> sorted(b.blocks)
            ['g{a,a;i,i}', 'g{i,a;a,i}']
        """
        keys = set(keys) | {"B{a,i;;Κ}" if self.df else "g{a,a;i,i}"}
        parsed = {k: _parse_key(k, self.df) for k in sorted(keys)}
        if self.df:
            factors = self._source.factors(sorted(set(parsed.values())))
            wrap = _spin_factor if self._expand else np.asarray
            blocks = {k: wrap(factors[s]) for k, s in parsed.items()}
        else:
            blocks = self._four_index(parsed)
        fock = np.asarray(self._source.fock)
        return BlockIntegrals(
            fock=np.kron(fock, np.eye(2)) if self._expand else fock.copy(),
            blocks=blocks,
            nocc=self.nocc,
            nvirt=self.nvirt,
            e_hf=float(self._source.e_hf),
            spin_orbital=self.spin_orbital,
            naux=self._source.naux if self.df else 0,
            auxbasis=self._source.auxbasis if self.df else "",
        )

    def _four_index(self, parsed: Mapping[str, tuple[str, ...]]) -> dict[str, np.ndarray]:
        def canonical(spaces: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[int, ...]]:
            # The smallest equivalent space order; each chemist block is computed once.
            return min((tuple(spaces[k] for k in perm), perm) for perm in CHEM_SYMMETRIES)

        def needs(x: str, y: str, z: str, w: str) -> list[tuple[str, ...]]:
            exchange = [(x, w, y, z)] if self.spin_orbital else []
            return [(x, z, y, w), *exchange]  # ⟨xy|zw⟩ = (xz|yw), ⟨xy|wz⟩ = (xw|yz)

        uses = Counter(canonical(c)[0] for s in parsed.values() for c in needs(*s))
        cache: dict[tuple[str, ...], np.ndarray] = {}

        def chem(spaces: tuple[str, ...]) -> np.ndarray:
            key, perm = canonical(spaces)
            if key not in cache:
                cache[key] = self._source.chem(key)
            block = cache[key].transpose(np.argsort(perm))
            uses[key] -= 1
            if not uses[key]:  # last use: drop it, so the peak stays near one block's size
                del cache[key]
            return block

        blocks = {}
        for key, (x, y, z, w) in parsed.items():
            direct, *exchange = (chem(c) for c in needs(x, y, z, w))
            direct = direct.transpose(0, 2, 1, 3)
            if self._expand:
                blocks[key] = _spin_block(direct, exchange[0].transpose(0, 2, 3, 1))
            elif self.spin_orbital:  # spin-orbital chemist blocks: ⟨xy‖zw⟩ = ⟨xy|zw⟩ − ⟨xy|wz⟩
                blocks[key] = direct - exchange[0].transpose(0, 2, 3, 1)
            else:
                blocks[key] = np.ascontiguousarray(direct)
        return blocks


def block_builder(
    system: Any,
    *,
    spin_orbital: bool,
    df: bool = False,
    auxbasis: Any = None,
    frozen: Any = None,
) -> BlockBuilder:
    """A :class:`BlockBuilder` for a PySCF HF object or closed-shell integrals in memory.

    Args:
        system: a converged PySCF RHF, UHF or ROHF object (UHF and ROHF on the
            spin-orbital route only, see :mod:`sq_jax.cc.open_shell` for the orbital
            order); :class:`~sq_jax.cc.integrals.SpatialIntegrals` or
            :class:`~sq_jax.cc.df.DFIntegrals`; or ``None`` for the shipped H2O/STO-3G.
        spin_orbital: build spin-orbital blocks (⟨pq‖rs⟩) rather than spatial ones.
        df: build three-index factors ``B{X,Y;;Κ}``. From PySCF they use ``auxbasis``, or
            the basis ``mf.density_fit()`` picks (``mf.with_df``'s for a density-fitted
            SCF); from :class:`SpatialIntegrals` they are the exact factorization
            (:func:`~sq_jax.cc.df.df_from_spatial`).
        auxbasis: the auxiliary basis for PySCF (any form ``pyscf.df.DF`` accepts).
        frozen: orbitals left uncorrelated, as PySCF's ``frozen`` (a count of the lowest,
            or a list of indices; see :mod:`sq_jax.cc.orbitals`).

    Returns:
        The builder; nothing four-index is computed until :meth:`BlockBuilder.build`.

    Raises:
        InputError: an unsupported system, an open-shell reference on the closed-shell
            route, a bad ``frozen``, or ``auxbasis`` without PySCF density fitting.

    Example:
        >>> builder = block_builder(None, spin_orbital=False, df=True)
        >>> builder.spaces().extent("Κ") > 0, builder.nocc
        (True, 5)
    """
    if auxbasis is not None and not (df and hasattr(system, "mol")):
        raise InputError(
            f"auxbasis={auxbasis!r} applies only to density fitting from a PySCF mean-field "
            "object; pass df=True and a PySCF RHF object, or drop auxbasis."
        )
    source = integral_source(system, frozen=frozen, df=df, auxbasis=auxbasis)
    if getattr(source, "spin_resolved", False) and not spin_orbital:
        raise InputError(
            f"the closed-shell (spin-adapted) equations need an RHF reference; received "
            f"{type(system).__name__}, whose α and β orbitals are not doubly occupied "
            "pairs. Use the spin-orbital route (closed_shell=False)."
        )
    return BlockBuilder(source, spin_orbital=spin_orbital, df=df)


def integral_source(
    system: Any, *, frozen: Any = None, df: bool = False, auxbasis: Any = None
) -> Any:
    """The spatial-block source of a system's active orbitals (what builders cut from).

    A PySCF RHF object or integrals in memory give one set of spatial orbitals; a UHF or
    ROHF object gives an :class:`~sq_jax.cc.open_shell.OpenShellSource` (α and β apart).

    Raises:
        InputError: an unsupported system or a bad ``frozen``.

    Example:
        >>> integral_source(None, frozen=1).nocc
        4
    """
    if system is None:
        system = default_spatial_system()
    if hasattr(system, "mo_coeff") and hasattr(system, "mol"):
        ref = reference_orbitals(system, frozen)
        kind = PySCFSource if ref.restricted else OpenShellSource
        return kind(system, ref, df, auxbasis)
    system = freeze_integrals(system, frozen)
    if isinstance(system, DFIntegrals):
        return _ArraySource(system.fock, system.nocc, system.e_hf, dfi=system)
    if isinstance(system, SpatialIntegrals):
        dfi = df_from_spatial(system) if df else None
        return _ArraySource(system.fock, system.nocc, system.e_hf, eri=system.eri, dfi=dfi)
    raise InputError(
        "block integrals need a PySCF RHF, UHF or ROHF object, SpatialIntegrals, "
        f"DFIntegrals or None (the shipped H2O/STO-3G); received {type(system).__name__}. "
        "Spin-orbital integrals cannot be refactored; pass the closed-shell ones they came "
        "from."
    )
