"""A converged CC run's residual as a function of its *unique* amplitudes.

Spin-orbital T2 is stored in full, T2[a,b,i,j] antisymmetric in (a,b) and in (i,j); only
the components with a < b and i < j are independent. On the full stored space the CC
Jacobian J = ∂R/∂t has a null space (the non-antisymmetric directions), which a
Davidson solver would report as spurious roots. :class:`PackedResidual` therefore works
on the packed vector x of unique components: ``unpack`` writes each one to its four
signed positions, ``pack`` reads the a < b, i < j block, and

    R_p(x; f, g) = pack(R(unpack(x); f, g))

is the residual of the unique amplitude equations. Its Jacobian J_p = ∂R_p/∂x is the CC
Jacobian in the basis of unique excitations, whose eigenvalues are the EOM-EE excitation
energies; Jacobian-vector and vector-Jacobian products of R_p are those of the compiled
residual program (JAX differentiates through it).

Example:
    >>> from sq_jax import cc
    >>> space = PackedResidual(cc.ccsd())
    >>> space.size                      # 10 occ., 4 virt. spin-orbitals: 40 + 45 * 6
    310
    >>> x = space.pack(space.amplitudes)
    >>> bool(abs(space.residual(x)).max() < 1e-6)       # converged amplitudes
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import InputError
from ..forest.inputs import input_specs
from .unrestricted import refuse_spin_blocked

T1, T2 = "t{a;i}", "t{a,a;i,i}"
_RESIDUAL_OF = {"R1": T1, "R2": T2}
# (id(program), nocc, nvirt, keys) -> (program, J·v, Jᵀ·w); see PackedResidual.products.
_PRODUCTS: dict[tuple, tuple[Any, Any, Any]] = {}


def check_run(run: Any, what: str) -> None:
    """Refuse anything but a finished spin-orbital CC run that kept its integrals."""
    for name in ("result", "residual_program", "energy_program", "integrals", "nocc"):
        if not hasattr(run, name):
            raise InputError(
                f"{what} needs a finished `CCRun` (from `sq_jax.cc.solve_cc`); received a "
                f"{type(run).__name__} without `{name}`."
            )
    if not getattr(run.result, "converged", False):
        raise InputError(
            f"{what} needs converged amplitudes; this run stopped with status "
            f"{run.result.message!r} after {run.result.iterations} iterations. Rerun with "
            "a larger max_iter (and tight e_tol/t_tol)."
        )
    refuse_spin_blocked(run, what)
    if not run.integrals:
        raise InputError(
            f"{what}: the run carries no integrals (`run.integrals` is empty); rerun it "
            "with `sq_jax.cc.solve_cc`, which keeps them."
        )
    beyond = sorted(set(run.result.amplitudes) - set(_RESIDUAL_OF.values()))
    if beyond or getattr(run, "antisymmetrized_after", None):
        raise InputError(
            f"{what} takes CCD and CCSD runs (T1, T2); this {run.method!r} run also has "
            f"amplitudes {beyond}. Λ, densities and EOM of higher-rank models are not "
            "implemented yet; run method='ccsd' for them."
        )
    if not {"f", "g"} <= set(run.integrals):
        blocks = sorted(run.integrals)[:4]
        raise InputError(
            f"{what} needs the run's full Fock matrix and ⟨pq‖rs⟩ (`f`, `g`); this run "
            f"read integral blocks ({', '.join(blocks)}, ...), as runs on a PySCF object "
            "do. Run CC on full integrals instead: "
            "`cc.ccsd(cc.spin_orbital_integrals(mf))` (spin orbitals; RHF, UHF or ROHF)."
        )


class PackedResidual:
    """The residual of a spin-orbital run on its unique amplitudes (see module docstring).

    Attributes:
        nocc: occupied spin-orbitals.
        nvirt: virtual spin-orbitals.
        keys: the amplitude names, sorted (``t{a;i}``, ``t{a,a;i,i}``).
        amplitudes: the run's converged amplitudes.
        integrals: the run's integrals, keyed by input name.
        size: the number of unique amplitudes.
    """

    def __init__(self, run: Any) -> None:
        check_run(run, "PackedResidual")
        if run.closed_shell:
            raise InputError(
                "excitation energies need spin-orbital amplitudes; received a closed-shell "
                "run. Solve with `closed_shell=False` (the spin-orbital roots contain the "
                "singlets and the three components of each triplet)."
            )
        self.nocc, self.nvirt = int(run.nocc), int(run.nvirt)
        self.amplitudes = {k: jnp.asarray(v) for k, v in run.result.amplitudes.items()}
        self.keys = tuple(sorted(self.amplitudes))
        self.integrals = dict(run.integrals)
        self._program = run.residual_program
        self._energy_program = run.energy_program
        self._pairs_v = np.triu_indices(self.nvirt, 1)
        self._pairs_o = np.triu_indices(self.nocc, 1)
        nv, no = self.nvirt, self.nocc
        sizes = {T1: nv * no, T2: len(self._pairs_v[0]) * len(self._pairs_o[0])}
        self._sizes = [sizes[k] for k in self.keys]
        self.size = int(sum(self._sizes))

    # ---- packing -------------------------------------------------------------------

    def _t2_index(self) -> tuple[np.ndarray, ...]:
        (a, b), (i, j) = self._pairs_v, self._pairs_o
        return a[:, None], b[:, None], i[None, :], j[None, :]

    def pack(self, amplitudes: Mapping[str, Any]) -> jax.Array:
        """The unique components (T1 in full; T2 with a < b, i < j), one flat vector."""
        parts = []
        for key in self.keys:
            value = jnp.asarray(amplitudes[key])
            parts.append(value[self._t2_index()].ravel() if key == T2 else value.ravel())
        return jnp.concatenate(parts)

    def unpack(self, x: jax.Array) -> dict[str, jax.Array]:
        """Full antisymmetric amplitudes from unique components (inverse of ``pack``)."""
        out, start = {}, 0
        nv, no = self.nvirt, self.nocc
        for key, n in zip(self.keys, self._sizes, strict=True):
            part = x[start : start + n]
            start += n
            if key == T1:
                out[key] = part.reshape(nv, no)
                continue
            a, b, i, j = self._t2_index()
            u = part.reshape(a.shape[0], i.shape[1])
            t2 = jnp.zeros((nv, nv, no, no), x.dtype)
            t2 = t2.at[a, b, i, j].set(u).at[b, a, i, j].set(-u)
            out[key] = t2.at[a, b, j, i].set(-u).at[b, a, j, i].set(u)
        return out

    def segment(self, key: str) -> slice:
        """Where amplitude ``key``'s unique components sit in the packed vector."""
        start = 0
        for name, n in zip(self.keys, self._sizes, strict=True):
            if name == key:
                return slice(start, start + n)
            start += n
        raise InputError(f"no amplitudes {key!r} in this run; it has {list(self.keys)}.")

    # ---- the residual, energy and preconditioner ------------------------------------

    def residual(self, x: jax.Array, integrals: Mapping[str, Any] | None = None) -> jax.Array:
        """R_p(x): the packed residual at packed amplitudes ``x`` (run's integrals default)."""
        ints = self.integrals if integrals is None else {**self.integrals, **integrals}
        return self._residual(x, ints)

    def _residual(self, x: jax.Array, ints: Mapping[str, Any]) -> jax.Array:
        reads = self._reads(self._program)
        out = self._program({**{k: v for k, v in ints.items() if k in reads}, **self.unpack(x)})
        return self.pack({_RESIDUAL_OF[k]: v for k, v in out.items()})

    def products(self) -> tuple[Any, Any]:
        """Jitted ``(x, ints, v) -> J(x) v`` and ``(x, ints, w) -> J(x)ᵀ w``.

        Shared by every run of the same compiled residual program and orbital counts
        (a run at shifted integrals, say), so each compiles once.
        """
        key = (id(self._program), self.nocc, self.nvirt, self.keys)
        hit = _PRODUCTS.get(key)
        if hit is None or hit[0] is not self._program:
            f = self._residual
            right = jax.jit(lambda x, ints, v: jax.jvp(lambda y: f(y, ints), (x,), (v,))[1])
            left = jax.jit(lambda x, ints, w: jax.vjp(lambda y: f(y, ints), x)[1](w)[0])
            while len(_PRODUCTS) >= 8:  # a small cache: drop the oldest
                _PRODUCTS.pop(next(iter(_PRODUCTS)))
            _PRODUCTS[key] = hit = (self._program, right, left)
        return hit[1], hit[2]

    @staticmethod
    def _reads(program: Any) -> frozenset[str]:
        names: set[str] = set()
        for spec in input_specs(program.schedule.annotated.forest):
            names.update((spec.label, spec.block_key))
        return frozenset(names)

    def diagonal(self) -> np.ndarray:
        """Orbital-energy differences e_a − e_i and e_a + e_b − e_i − e_j, packed.

        The leading (diagonal-Fock) part of J_p, used as the Davidson and GMRES
        preconditioner (every run's integrals hold the full Fock matrix ``f``).
        """
        e = np.diag(np.asarray(self.integrals["f"]))
        e_o, e_v = e[: self.nocc], e[self.nocc :]
        d1 = e_v[:, None] - e_o[None, :]
        d2 = d1[:, None, :, None] + d1[None, :, None, :]
        return np.asarray(self.pack({T1: d1, T2: d2}))
