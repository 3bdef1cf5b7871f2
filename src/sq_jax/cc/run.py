"""The result of a coupled-cluster run: amplitudes, energies and what produced them.

:class:`CCRun` is what :func:`sq_jax.cc.solve_cc` returns, shaped like PySCF's CC objects
(``e_corr``, ``e_tot``, ``t1``, ``t2``, ``converged``, ``e_t``) and keeping the compiled
programs and integrals that Λ, EOM, (T) and implicit differentiation reuse.

Example:
    >>> from sq_jax import cc
    >>> run = cc.ccsd()
    >>> run.t2.shape == (run.nocc, run.nocc, run.nvirt, run.nvirt)
    True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._errors import InputError
from ..lower.program import Program
from .blocks import BlockBuilder
from .solvers import CCResult
from .unrestricted import AMPLITUDES as UHF_AMPLITUDES

__all__ = ["T1", "T2", "CCRun", "amplitude_key"]


def amplitude_key(rank: int) -> str:
    """The input name of the rank-n amplitude: ``t{a;i}``, ``t{a,a;i,i}``, ….

    Example:
        >>> amplitude_key(3)
        't{a,a,a;i,i,i}'
    """
    return "t{" + ",".join("a" * rank) + ";" + ",".join("i" * rank) + "}"


T1, T2 = amplitude_key(1), amplitude_key(2)


@dataclasses.dataclass(frozen=True)
class CCRun:
    """A finished coupled-cluster calculation.

    Attributes:
        method: ``"ccsd"``, ``"ccd"``, ``"ccsdt"``, ….
        closed_shell: whether spin-adapted (spatial-orbital) equations were used.
        result: the solver's :class:`~sq_jax.cc.solvers.CCResult` (correlation energy,
            amplitudes, status, history, timings).
        e_hf: the reference (Hartree–Fock) energy.
        residual_program: the compiled residual program (schedule, FLOPs, peak).
        energy_program: the compiled energy program.
        nocc: active occupied orbitals (spin-orbitals for spin-orbital runs), frozen
            ones left out.
        nvirt: active virtual orbitals.
        spin_positions: for spin-orbital runs whose orbital order is known, the positions
            of occupied α, occupied β, virtual α and virtual β among the occupied and
            virtual spin-orbitals (see :meth:`unrestricted_amplitudes`); else ``None``.
        integrals: the integral arrays the programs read, keyed by input name (``"f"``,
            ``"g"``, or block keys), so that Λ, densities and EOM can re-evaluate the
            residual at the converged amplitudes.
        block_source: the :class:`~sq_jax.cc.blocks.BlockBuilder` the integral blocks
            came from (``None`` for integrals given whole), so that (T) can build the
            blocks it reads.
        triples: what :meth:`ccsd_t` found (``"e_t"``); read it as :attr:`e_t`.
        antisymmetrized_after: residual name → rank n for the residuals whose ``Â`` the
            program does not compute (triples and up, see
            :mod:`sq_jax.cc.antisymmetrizer`): R_n is
            ``apply_antisymmetrizer(residual_program(...)[name], n)``. Empty for CCSD.
        prepared_bytes: bytes held through the solve by what the residual program
            computed once from the integrals (:meth:`sq_jax.Program.prepare`: their sums
            and transposed or packed copies); 0 where nothing is prepared: under a
            memory budget, or below ``cc.drivers.PREPARE_MIN_FLOPS``.
    """

    method: str
    closed_shell: bool
    result: CCResult
    e_hf: float
    residual_program: Program
    energy_program: Program
    nocc: int
    nvirt: int
    spin_positions: tuple[tuple[int, ...], ...] | None = None
    integrals: Mapping[str, Any] = dataclasses.field(
        default_factory=dict, repr=False, compare=False
    )
    block_source: BlockBuilder | None = dataclasses.field(default=None, repr=False, compare=False)
    triples: dict[str, float] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    equations: str = ""
    antisymmetrized_after: Mapping[str, int] = dataclasses.field(default_factory=dict)
    prepared_bytes: int = 0

    @property
    def e_t(self) -> float | None:
        """E(T) once :meth:`ccsd_t` has run (PySCF's ``e_t``), else ``None``."""
        return self.triples.get("e_t")

    def ccsd_t(self, **options: Any) -> float:
        """The (T) correction on the converged amplitudes; also sets :attr:`e_t`.

        Takes the options of :func:`sq_jax.cc.triples.ccsd_t` (``batch``,
        ``memory_budget``, ``block``, ``canonical_tol``).

        Example:
            >>> from sq_jax.cc import ccsd
            >>> run = ccsd()
            >>> e_t = run.ccsd_t(memory_budget="64 KiB")
            >>> run.e_t == e_t, round(e_t, 8)
            (True, -6.741e-05)
        """
        from .triples import ccsd_t

        return ccsd_t(self, **options)

    @property
    def spin_blocked(self) -> bool:
        """Whether the unrestricted spin-blocked equations (``*_uhf``) were solved."""
        return self.equations.endswith("_uhf")

    def _spin_orbital(self, blocks: tuple[str, ...]) -> np.ndarray:
        """Assemble spin-orbital amplitudes (open-shell order) from the spin blocks."""
        oa, ob, va, vb = (np.asarray(p, dtype=int) for p in self.spin_positions or ())
        amps = self.result.amplitudes
        if len(blocks) == 2:
            out = np.zeros((self.nvirt, self.nocc))
            for key, (v, o) in zip(blocks, ((va, oa), (vb, ob)), strict=True):
                if key in amps:
                    out[np.ix_(v, o)] = np.asarray(amps[key])
            return out
        out = np.zeros((self.nvirt, self.nvirt, self.nocc, self.nocc))
        aa, ab, bb = (np.asarray(amps[k]) for k in blocks)
        out[np.ix_(va, va, oa, oa)] = aa
        out[np.ix_(vb, vb, ob, ob)] = bb
        out[np.ix_(va, vb, oa, ob)] = ab  # the other three mixed blocks by antisymmetry
        out[np.ix_(vb, va, oa, ob)] = -ab.transpose(1, 0, 2, 3)
        out[np.ix_(va, vb, ob, oa)] = -ab.transpose(0, 1, 3, 2)
        out[np.ix_(vb, va, ob, oa)] = ab.transpose(1, 0, 3, 2)
        return out

    @property
    def e_corr(self) -> float:
        """The correlation energy."""
        return float(self.result.energy)

    @property
    def converged(self) -> bool:
        """Whether the amplitude equations converged (``result.converged``)."""
        return bool(self.result.converged)

    @property
    def t1(self) -> np.ndarray:
        """T1 in PySCF's layout ``t1[i, a]`` (zeros for CCD).

        Closed-shell: spatial orbitals, as PySCF's RCCSD. Spin-orbital: the route's
        spin-orbitals — α/β interleaved (``2p + σ``) for an RHF reference, and occupied α,
        occupied β, virtual α, virtual β for UHF/ROHF (see :mod:`sq_jax.cc.open_shell`).
        """
        if self.spin_blocked:
            return self._spin_orbital(UHF_AMPLITUDES[:2]).T
        t = self.result.amplitudes.get(T1)
        return np.zeros((self.nocc, self.nvirt)) if t is None else np.asarray(t).T

    @property
    def t2(self) -> np.ndarray:
        """T2 in PySCF's layout ``t2[i, j, a, b]``, orbitals as for :attr:`t1`."""
        if self.spin_blocked:
            return self._spin_orbital(UHF_AMPLITUDES[2:]).transpose(2, 3, 0, 1)
        return np.asarray(self.result.amplitudes[T2]).transpose(2, 3, 0, 1)

    def unrestricted_amplitudes(self) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
        """The spin blocks of a spin-orbital run in PySCF's UCCSD layout.

        Returns:
            ``((t1a, t1b), (t2aa, t2ab, t2bb))`` with ``t1a[i, a]``, ``t2ab[i, J, a, B]``
            (i, a α; J, B β) and so on, as ``pyscf.cc.UCCSD``'s ``t1`` and ``t2``.

        Raises:
            InputError: a closed-shell run, or spin-orbital integrals given directly
                (their spin order is not known).

        Example:
            >>> from sq_jax.cc import ccsd
            >>> (t1a, t1b), (t2aa, t2ab, t2bb) = ccsd().unrestricted_amplitudes()
            >>> t1a.shape, t2ab.shape, bool(abs(t1a - t1b).max() < 1e-8)
            ((5, 2), (5, 5, 2, 2), True)
        """
        if self.spin_positions is None:
            why = "a closed-shell run" if self.closed_shell else "integrals of unknown spin order"
            raise InputError(
                f"unrestricted_amplitudes needs a spin-orbital run from the shipped system or "
                f"a PySCF object; this is {why}. Use `run.t1` and `run.t2` as they are."
            )
        if self.spin_blocked:  # the blocks themselves, in PySCF's layout
            amps = self.result.amplitudes
            oa, ob, va, vb = (len(p) for p in self.spin_positions or ())
            t1a, t1b = (
                np.asarray(amps[k]).T if k in amps else np.zeros(shape)  # zeros for CCD
                for k, shape in zip(UHF_AMPLITUDES[:2], ((oa, va), (ob, vb)), strict=True)
            )
            doubles = tuple(np.asarray(amps[k]).transpose(2, 3, 0, 1) for k in UHF_AMPLITUDES[2:])
            return (t1a, t1b), doubles
        oa, ob, va, vb = (np.asarray(p, dtype=int) for p in self.spin_positions)
        t1, t2 = self.t1, self.t2
        singles = (t1[np.ix_(oa, va)], t1[np.ix_(ob, vb)])
        doubles = tuple(
            t2[np.ix_(o1, o2, v1, v2)]
            for o1, o2, v1, v2 in ((oa, oa, va, va), (oa, ob, va, vb), (ob, ob, vb, vb))
        )
        return singles, doubles

    @property
    def e_tot(self) -> float:
        """The total energy, reference plus correlation."""
        return self.e_hf + self.e_corr
