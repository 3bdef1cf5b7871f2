"""Spin-blocked integrals and amplitudes for the unrestricted equations (``ccsd_uhf``).

The unrestricted equation sets (``ccsd_uhf``, ``ccd_uhf``) read every tensor in spin
blocks named by spin-labelled spaces (``i↑`` occupied α, ``a↓`` virtual β, …):

* ``f{x↑;y↑}`` — the α Fock matrix between the spaces x, y (likewise β);
* ``g{x↑,y↑;z↑,w↑}`` — ⟨xy‖zw⟩ = (xz|yw) − (xw|yz) over α orbitals (likewise β);
* ``g{x↑,y↓;z↑,w↓}`` — ⟨xy|zw⟩ = (xα zα|yβ wβ), the plain integral (α first in bra and ket);

for x, y, z, w among ``i``, ``a`` and ``p``. :class:`SpinBlockBuilder` builds exactly the
blocks a compiled program reads (plus the three ``g{a,a;i,i}`` blocks of the MP2 guess),
each from the spatial chemist blocks (xz|yw) of those orbitals alone: nothing over all
spin-orbitals is ever formed. The amplitudes are ``t{a↑;i↑}``, ``t{a↓;i↓}``,
``t{a↑,a↑;i↑,i↑}``, ``t{a↑,a↓;i↑,i↓}`` and ``t{a↓,a↓;i↓,i↓}`` (SeQuant layout, virtual
slots first); their Jacobi denominators are built per block.

Example:
    >>> builder = spin_block_builder(None)        # the shipped H2O/STO-3G (RHF orbitals)
    >>> ints = builder.build(["g{i↑,a↓;i↑,a↓}"])
    >>> sorted(ints.blocks)[:2], ints.blocks["g{i↑,a↓;i↑,a↓}"].shape
    (['f{a↑;i↑}', 'f{a↓;i↓}'], (5, 2, 5, 2))
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
from .blocks import CHEM_SYMMETRIES, integral_source
from .open_shell import pyscf_chem

__all__ = [
    "AMPLITUDES",
    "RESIDUAL_OF",
    "SpinBlockBuilder",
    "SpinBlockIntegrals",
    "read_spin_blocks",
    "refuse_spin_blocked",
    "spin_block_builder",
]

T1A, T1B = "t{a↑;i↑}", "t{a↓;i↓}"
T2AA, T2AB, T2BB = "t{a↑,a↑;i↑,i↑}", "t{a↑,a↓;i↑,i↓}", "t{a↓,a↓;i↓,i↓}"
AMPLITUDES = (T1A, T1B, T2AA, T2AB, T2BB)
"""The amplitude blocks, in PySCF's order (t1a, t1b, t2aa, t2ab, t2bb)."""
RESIDUAL_OF = {"R1a": T1A, "R1b": T1B, "R2aa": T2AA, "R2ab": T2AB, "R2bb": T2BB}
"""Residual equation name → the amplitude block it updates."""
_MP2_BLOCKS = ("g{a↑,a↑;i↑,i↑}", "g{a↑,a↓;i↑,i↓}", "g{a↓,a↓;i↓,i↓}")
_SPINS = {"↑": 0, "↓": 1}
_KEY = re.compile(r"^([fg])\{([^{}]*)\}$")


def read_spin_blocks(*programs: Any) -> tuple[str, ...]:
    """The keys of the Fock and integral blocks (labels ``f``, ``g``) the programs read.

    Example:
        >>> import sq_jax as sq
        >>> s = sq.Spaces({"i↑": 2, "a↑": 3, "i↓": 1, "a↓": 4})
        >>> prog = sq.compile("E = g{i↑_1,i↓_1;a↑_1,a↓_1} * t{a↑_1,a↓_1;i↑_1,i↓_1}", s)
        >>> read_spin_blocks(prog)
        ('g{i↑,i↓;a↑,a↓}',)
    """
    keys: set[str] = set()
    for program in programs:
        forest = program.schedule.annotated.forest
        keys.update(s.block_key for s in input_specs(forest) if s.label in ("f", "g"))
    return tuple(sorted(keys))


def _parse_key(key: str) -> tuple[str, tuple[tuple[str, int], ...]]:
    """(label, ((space, spin), …)) of a spin-blocked key, checked."""
    match = _KEY.match(key)
    groups = match.group(2).split(";") if match else []
    slots = [s for g in groups for s in g.split(",")]
    label = match.group(1) if match else ""
    rank = {"f": 2, "g": 4}.get(label, -1)
    ok = (
        len(groups) == 2
        and len(slots) == rank
        and all(len(g.split(",")) == rank // 2 for g in groups)
    )
    ok = ok and all(len(s) == 2 and s[0] in "iap" and s[1] in _SPINS for s in slots)
    parsed = tuple((s[0], _SPINS[s[1]]) for s in slots) if ok else ()
    spins = [s for _, s in parsed]
    if ok and label == "f":
        ok = spins[0] == spins[1]
    elif ok:
        ok = len(set(spins)) == 1 or spins == [0, 1, 0, 1]
    if not ok:
        raise InputError(
            f"cannot build the spin block {key!r}: expected f{{X;Y}} with one spin, or "
            "g{X,Y;Z,W} with one spin (⟨xy‖zw⟩) or spins ↑,↓;↑,↓ (⟨xy|zw⟩), X..W among "
            "i, a, p with ↑ or ↓. Ask for the blocks a program reads (`read_spin_blocks`)."
        )
    return label, parsed


@dataclasses.dataclass(frozen=True, eq=False)
class SpinBlockIntegrals:
    """The Fock and integral blocks one unrestricted equation set reads.

    Attributes:
        focks: the active MO Fock matrices (α, β), occupied first (non-canonical allowed).
        nocc: active occupied orbitals (α, β).
        blocks: block key → array (``f{a↑;i↑}``, ``g{i↑,a↓;i↑,a↓}``, …).
        e_hf: the reference total energy.

    Example:
        >>> ints = spin_block_builder(None).build([])
        >>> ints.nocc, sorted(ints.denominators())[0]
        ((5, 5), 't{a↑,a↑;i↑,i↑}')
    """

    focks: tuple[np.ndarray, np.ndarray]
    nocc: tuple[int, int]
    blocks: Mapping[str, np.ndarray]
    e_hf: float

    @property
    def nvirt(self) -> tuple[int, int]:
        """Active virtual orbitals (α, β)."""
        return tuple(f.shape[0] - n for f, n in zip(self.focks, self.nocc, strict=True))  # type: ignore[return-value]

    def inputs(self) -> dict[str, np.ndarray]:
        """The program inputs: every block by its key."""
        return dict(self.blocks)

    def denominators(self) -> dict[str, np.ndarray]:
        """D per amplitude block: D1[a, i] = f_ii − f_aa, D2 = f_ii + f_jj − f_aa − f_bb.

        Each orbital's energy is the diagonal Fock element of its own spin.
        """
        eo = [np.diag(f)[:n] for f, n in zip(self.focks, self.nocc, strict=True)]
        ev = [np.diag(f)[n:] for f, n in zip(self.focks, self.nocc, strict=True)]
        d1 = [eo[s][None, :] - ev[s][:, None] for s in (0, 1)]

        def d2(s: int, t: int) -> np.ndarray:
            return d1[s][:, None, :, None] + d1[t][None, :, None, :]

        return {T1A: d1[0], T1B: d1[1], T2AA: d2(0, 0), T2AB: d2(0, 1), T2BB: d2(1, 1)}

    def mp2_amplitudes(self) -> dict[str, np.ndarray]:
        """The starting guess t1 = f_ai / D1, t2 = ⟨ab‖ij⟩ / D2 (⟨ab|ij⟩ for αβ), per block."""
        d = self.denominators()
        t1 = [f[n:, :n] for f, n in zip(self.focks, self.nocc, strict=True)]
        out = {T1A: t1[0] / d[T1A], T1B: t1[1] / d[T1B]}
        for key, block in zip((T2AA, T2AB, T2BB), _MP2_BLOCKS, strict=True):
            out[key] = self.blocks[block] / d[key]
        return out


class SpinBlockBuilder:
    """Builds the spin blocks of an unrestricted (or restricted) reference's orbitals.

    Make one with :func:`spin_block_builder`; :meth:`spaces` gives the extents to compile
    the equations with, :meth:`build` the blocks they read.
    """

    def __init__(self, source: Any):
        self._source = source
        self._open = bool(getattr(source, "spin_resolved", False))
        if self._open:
            self.focks = tuple(np.asarray(ch.fock) for ch in source.channels)
            self.nocc = tuple(int(ch.nocc) for ch in source.channels)
        else:
            self.focks = (np.asarray(source.fock),) * 2
            self.nocc = (int(source.nocc),) * 2
        self.nvirt = tuple(f.shape[0] - n for f, n in zip(self.focks, self.nocc, strict=True))

    @property
    def spin_positions(self) -> tuple[tuple[int, ...], ...]:
        """Occupied α, occupied β, virtual α, virtual β among the spin-orbitals' order.

        The order is that of :mod:`sq_jax.cc.open_shell`: occupied α then β, virtual α
        then β.
        """
        (oa, ob), (va, vb) = self.nocc, self.nvirt
        return (
            tuple(range(oa)),
            tuple(range(oa, oa + ob)),
            tuple(range(va)),
            tuple(range(va, va + vb)),
        )

    def spaces(self) -> Spaces:
        """The spin-labelled index spaces ``i↑``, ``a↑``, ``i↓``, ``a↓`` with their extents.

        Example:
            >>> print(spin_block_builder(None).spaces().extent("a↓"))
            2
        """
        (oa, ob), (va, vb) = self.nocc, self.nvirt
        return Spaces({"i↑": oa, "a↑": va, "i↓": ob, "a↓": vb})

    def _range(self, space: str, spin: int) -> slice:
        n = self.nocc[spin]
        return {"i": slice(0, n), "a": slice(n, None)}.get(space, slice(None))

    def _chem(self, slots: tuple[tuple[str, int], ...]) -> np.ndarray:
        """(xz|yw) for slots ((x, σ), (z, σ), (y, τ), (w, τ))."""
        if self._open:
            coeffs = tuple(self._source.coefficients(x, s) for x, s in slots)
            return pyscf_chem(self._source.mf, coeffs)
        return self._source.chem(tuple(x for x, _ in slots))

    def build(self, keys: Iterable[str]) -> SpinBlockIntegrals:
        """The :class:`SpinBlockIntegrals` of ``keys`` and of what the guesses read.

        ``keys`` are spin blocks as :func:`read_spin_blocks` names them
        (``"g{i↑,a↓;i↑,a↓}"``, ``"f{a↓;a↓}"``); the blocks the MP2 and T1 guesses read
        are built too, nothing else. Raises :class:`~sq_jax.InputError` for a key that
        is not a spin block of ``f`` or ``g``.
        """
        keys = set(keys) | set(_MP2_BLOCKS) | {"f{a↑;i↑}", "f{a↓;i↓}"}
        parsed = {k: _parse_key(k) for k in sorted(keys)}

        def needs(slots: tuple[tuple[str, int], ...]) -> list[tuple[tuple[str, int], ...]]:
            x, y, z, w = slots
            exchange = [(x, w, y, z)] if x[1] == y[1] else []
            return [(x, z, y, w), *exchange]  # ⟨xy|zw⟩ = (xz|yw), ⟨xy|wz⟩ = (xw|yz)

        def canonical(slots: tuple) -> tuple[tuple, tuple[int, ...]]:
            return min((tuple(slots[k] for k in perm), perm) for perm in CHEM_SYMMETRIES)

        four = {k: s for k, (label, s) in parsed.items() if label == "g"}
        uses = Counter(canonical(c)[0] for s in four.values() for c in needs(s))
        cache: dict[tuple, np.ndarray] = {}

        def chem(slots: tuple) -> np.ndarray:
            key, perm = canonical(slots)
            if key not in cache:
                cache[key] = self._chem(key)
            block = cache[key].transpose(np.argsort(perm))
            uses[key] -= 1
            if not uses[key]:  # last use: drop it, so the peak stays near one block's size
                del cache[key]
            return block

        blocks: dict[str, np.ndarray] = {}
        for key, (label, slots) in parsed.items():
            if label == "f":
                (x, s), (y, _) = slots
                blocks[key] = self.focks[s][self._range(x, s), self._range(y, s)].copy()
                continue
            direct, *exchange = (chem(c) for c in needs(slots))
            block = direct.transpose(0, 2, 1, 3)
            if exchange:  # same spin: ⟨xy‖zw⟩ = ⟨xy|zw⟩ − ⟨xy|wz⟩
                block = block - exchange[0].transpose(0, 2, 3, 1)
            blocks[key] = np.ascontiguousarray(block)
        return SpinBlockIntegrals(
            focks=tuple(f.copy() for f in self.focks),  # type: ignore[arg-type]
            nocc=self.nocc,  # type: ignore[arg-type]
            blocks=blocks,
            e_hf=float(self._source.e_hf),
        )


def refuse_spin_blocked(run: Any, what: str) -> None:
    """Refuse a run of the spin-blocked unrestricted equations (``*_uhf``), with the fix.

    Example:
        >>> from types import SimpleNamespace
        >>> try:
        ...     refuse_spin_blocked(SimpleNamespace(equations="ccsd_uhf"), "solve_lambda")
        ... except InputError as err:
        ...     print(str(err).split("Rerun ")[1])
        the UHF/ROHF reference with `equations='ccsd_so'`.
    """
    name = str(getattr(run, "equations", ""))
    if name.endswith("_uhf"):
        spin_orbital = name.replace("_uhf", "_so")
        raise InputError(
            f"{what} is not supported for the spin-blocked unrestricted equations "
            f"({name!r}: amplitudes in α/β blocks); it needs spin-orbital or closed-shell "
            f"amplitudes. Rerun the UHF/ROHF reference with `equations={spin_orbital!r}`."
        )


def spin_block_builder(system: Any, *, frozen: Any = None) -> SpinBlockBuilder:
    """A :class:`SpinBlockBuilder` for a PySCF HF object or closed-shell integrals.

    Args:
        system: a converged PySCF UHF, ROHF (converted to UHF, as PySCF's CCSD does: its
            Fock is then non-canonical) or RHF object; :class:`SpatialIntegrals`; or
            ``None`` for the shipped H2O/STO-3G. A restricted reference serves both spins.
        frozen: orbitals left uncorrelated, as PySCF's ``frozen`` (a count, a list, or
            for UHF/ROHF a pair of lists).

    Returns:
        The builder; nothing four-index is computed until :meth:`SpinBlockBuilder.build`.

    Raises:
        InputError: an unsupported system or a bad ``frozen``.

    Example:
        >>> spin_block_builder(None, frozen=1).nocc
        (4, 4)
    """
    return SpinBlockBuilder(integral_source(system, frozen=frozen))
