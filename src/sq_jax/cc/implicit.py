"""Implicit differentiation of the converged coupled-cluster energy.

The converged CC energy is a function of the integrals θ = (f, g) through the amplitudes
t*(θ) that solve the amplitude equations R(t; θ) = 0:

    E(θ) = E(t*(θ); θ),        R(t*(θ); θ) = 0.

Differentiating the iterations of a solver would be slow, memory-hungry and only as
accurate as the last iteration's derivative. Instead, :class:`ImplicitEnergy` uses the
adjoint (Lagrangian, "Λ-equation") form of the implicit function theorem. With the
Jacobian J = ∂R/∂t at t*, the Lagrangian

    L(t, λ; θ) = E(t; θ) + λᵀ R(t; θ)

is stationary in t when λ solves the adjoint equations

    Jᵀ λ = −∂E/∂t,

and then, for every direction dθ,

    dE = ∂L/∂θ · dθ = ∂E/∂θ · dθ + λᵀ (∂R/∂θ · dθ).

λ depends only on the point (t*, θ), not on the direction, so one adjoint solve serves a
``jax.jvp``, a ``jax.grad`` (whose vector-Jacobian product is the transpose of the same
linear map) and every column of a ``jax.jacfwd``. The rule is attached with
``jax.custom_jvp``; reverse mode comes from JAX transposing the (linear) tangent map.

Linear algebra:

* Jᵀ is applied matrix-free as the vector-Jacobian product of the residual program
  (``jax.vjp``); GMRES (lineax) solves the right-preconditioned system
  (P Jᵀ M P + (I − P)) y = −P ∂E/∂t, λ = M P y, with M = −1/D the orbital-energy
  denominators (R ≈ −D·t + …, so Jᵀ M ≈ I).
* P projects onto the physical amplitudes. Spin-orbital T2 is stored in full, and
  only its antisymmetric part is physical: J has a null space on the rest, so P is
  :func:`~sq_jax.cc.solvers.antisymmetrize`. Closed-shell T2 is physical only in its
  pair-symmetric part T2[a,b,i,j] = T2[b,a,j,i], so P symmetrizes it. Both P commute
  with M, and GMRES sees the identity on the complement. With t = P s, stationarity
  of L in s gives exactly P Jᵀ P λ = −P ∂E/∂t with λ = P λ.

Forward solve: Jacobi + DIIS (the scheme of :func:`~sq_jax.cc.solvers.solve_diis`:
t ← t + R/D, Pulay extrapolation over the last ``diis_space`` vectors, PySCF's two
stopping criteria) written as one ``lax.while_loop``, so that the whole energy is a
traceable JAX function (``jax.jit``-able) compiled once per :class:`ImplicitEnergy`, not
once per call (the Python-loop solvers retrace for every new set of integrals). It is
warm-started from the amplitudes of the :class:`~sq_jax.cc.drivers.CCRun` it is built
from. Jacobi+DIIS compiles only the residual; a Newton–Krylov forward solve would also
compile its Jacobian-vector product (about three times the compile time here).

Cost of a derivative: one forward solve, one adjoint GMRES solve (each step one
residual vjp), and one more vjp for ∂L/∂θ; the tangent map itself is two dot products
with ∂L/∂f and ∂L/∂g, so ``jax.jacfwd`` over many directions costs no more solves.

References:
    T. Helgaker and P. Jørgensen, Theor. Chim. Acta 75, 111 (1989) — the Lagrangian
    approach to CC energy derivatives. E. A. Salter, G. W. Trucks and R. J. Bartlett,
    J. Chem. Phys. 90, 1752 (1989) — the CC Λ equations. M. Blondel et al.,
    NeurIPS 2022, "Efficient and modular implicit differentiation".

Known limitations: first derivatives only (the tangent rule is not itself
differentiated, so ``jax.hessian`` is not supported); the forward solve is Jacobi +
DIIS only; orbital relaxation is not included (f and g are the independent inputs, as
for a fixed-orbital response).

Example:
    >>> import jax, jax.numpy as jnp
    >>> from sq_jax import cc
    >>> from sq_jax.cc.implicit import implicit_energy
    >>> from sq_jax.cc.integrals import default_spatial_system
    >>> ints = default_spatial_system()
    >>> energy = implicit_energy(cc.ccd(closed_shell=True))
    >>> f, g = jnp.asarray(ints.fock), jnp.asarray(ints.eri)
    >>> round(float(energy(f, g)), 8)
    -0.04919063
    >>> df = jax.grad(energy)(f, g)            # dE/df through one adjoint solve
    >>> df.shape, bool(jnp.isfinite(df).all())
    ((7, 7), True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from .._errors import ConvergenceError, InputError
from ..forest.inputs import input_specs
from ..lower.aot import compiler_options
from ..lower.program import Program
from ._diis import pulay_coefficients
from ._iterate import StopCriteria
from ._options import check_solver_options
from .solvers import CCStatus, antisymmetrize
from .unrestricted import refuse_spin_blocked

__all__ = ["ImplicitEnergy", "ImplicitSolution", "converged_energy", "implicit_energy"]

T1, T2 = "t{a;i}", "t{a,a;i,i}"
_RESIDUAL_OF = {"R1": T1, "R2": T2}


class ImplicitSolution(eqx.Module):
    """The forward solve of an :class:`ImplicitEnergy` (all fields are arrays).

    Attributes:
        energy: the correlation energy at the converged amplitudes (0-d).
        amplitudes: the converged amplitudes, keyed like the :class:`CCRun`'s.
        status: a :class:`~sq_jax.cc.solvers.CCStatus` item.
        iterations: Jacobi/DIIS iterations taken (0-d integer array).
        residual_norm: ‖R‖ at the start of the last iteration.
    """

    energy: jax.Array
    amplitudes: dict[str, jax.Array]
    status: Any
    iterations: jax.Array
    residual_norm: jax.Array


def _reads(program: Program) -> frozenset[str]:
    names: set[str] = set()
    for spec in input_specs(program.schedule.annotated.forest):
        names.update((spec.label, spec.block_key))
    return frozenset(names)


def _pair_symmetrize(amplitudes: Mapping[str, Any]) -> dict[str, jax.Array]:
    """Closed-shell projector: T2[a,b,i,j] → (T2[a,b,i,j] + T2[b,a,j,i]) / 2."""
    out = {}
    for key, value in amplitudes.items():
        a = jnp.asarray(value)
        out[key] = 0.5 * (a + a.transpose(1, 0, 3, 2)) if a.ndim == 4 else a
    return out


class ImplicitEnergy:
    """The converged CC correlation energy as a differentiable function of (f, g).

    Build it with :func:`implicit_energy`; call it as ``energy(fock, eri)``. Calls are
    jit-compiled once per object (integrals of the run's shapes). ``jax.grad``,
    ``jax.jvp``, ``jax.jacfwd`` and ``jax.jit`` all work; derivatives come from one
    adjoint solve (see the module docstring).

    Attributes:
        method: ``"ccsd"`` or ``"ccd"``.
        closed_shell: whether the run used the spin-adapted equations.
        nocc: occupied orbitals of the run.
        nvirt: virtual orbitals of the run.
    """

    def __init__(
        self,
        run: Any,
        *,
        e_tol: float = 1e-13,
        t_tol: float = 1e-11,
        max_iter: int = 100,
        diis_space: int = 6,
        gmres_restart: int = 20,
        gmres_max_steps: int = 50,
        adjoint_tol: float = 1e-12,
        throw: bool = True,
    ) -> None:
        try:
            import lineax as lx
        except ImportError as err:  # pragma: no cover - lineax is a declared dependency
            raise ImportError("ImplicitEnergy needs lineax: `pip install lineax`.") from err
        self._lx = lx
        for name in ("result", "residual_program", "energy_program", "nocc", "nvirt"):
            if not hasattr(run, name):
                raise InputError(
                    f"implicit_energy needs a finished `CCRun` (from `sq_jax.cc.solve_cc`); "
                    f"received a {type(run).__name__} without `{name}`."
                )
        refuse_spin_blocked(run, "implicit_energy")
        amplitudes = dict(run.result.amplitudes)
        expected = {T1, T2} if run.method == "ccsd" else {T2}
        if set(amplitudes) != expected:
            raise InputError(
                f"The run's amplitudes have keys {sorted(amplitudes)}; a {run.method} run "
                f"must have {sorted(expected)}."
            )
        self.method: str = run.method
        self.closed_shell: bool = bool(run.closed_shell)
        self.nocc: int = int(run.nocc)
        self.nvirt: int = int(run.nvirt)
        # the energy is solved at any (f, g) the caller passes, symmetric or not: no
        # products packed by the symmetries the integrals declare
        self._residual_program = run.residual_program.without_pair_symmetry()
        self._energy_program = run.energy_program
        self._reads_r = _reads(run.residual_program)
        self._reads_e = _reads(run.energy_program)
        if "g" not in self._reads_r:  # the derivative is taken with respect to (f, g)
            raise InputError(
                "implicit_energy differentiates with respect to (f, g); this run's equations "
                "do not read g (a density-fitted run, df=True). Run without df=True."
            )
        self._project = _pair_symmetrize if self.closed_shell else antisymmetrize
        self._x0, self._unravel = ravel_pytree(
            {k: jnp.asarray(v, dtype=jnp.float64) for k, v in amplitudes.items()}
        )
        self._stop = StopCriteria(max_iter=max_iter, e_tol=e_tol, t_tol=t_tol)
        check_solver_options(
            diis_space=diis_space,
            gmres_restart=gmres_restart,
            gmres_max_steps=gmres_max_steps,
            adjoint_tol=adjoint_tol,
        )
        self._diis_space = int(diis_space)
        self._restart, self._max_steps = int(gmres_restart), int(gmres_max_steps)
        self._adjoint_tol = float(adjoint_tol)
        self._throw = bool(throw)
        self._jitted = {"solve": jax.jit(self._solve), "adjoint": jax.jit(self._adjoint)}
        self._executables: dict[tuple, Any] = {}
        self._energy = self._make_energy()

    # ---- flat (raveled) residual, energy, projector and denominators --------------------

    def _integrals(self, fock: Any, eri: Any, reads: frozenset[str]) -> dict[str, Any]:
        return {k: v for k, v in (("f", fock), ("g", eri)) if k in reads}

    def _residual(self, x: jax.Array, fock: Any, eri: Any) -> jax.Array:
        t = self._unravel(x)
        out = self._residual_program({**self._integrals(fock, eri, self._reads_r), **t})
        r = {_RESIDUAL_OF[k]: v for k, v in out.items()}
        return ravel_pytree({k: r[k] for k in sorted(r)})[0]

    def _energy_of(self, x: jax.Array, fock: Any, eri: Any) -> jax.Array:
        t = {k: v for k, v in self._unravel(x).items() if k in self._reads_e}
        return self._energy_program({**self._integrals(fock, eri, self._reads_e), **t})["E"]

    def _p(self, x: jax.Array) -> jax.Array:
        p = self._project(self._unravel(x))
        return ravel_pytree({k: p[k] for k in sorted(p)})[0]

    def _precond(self, fock: jax.Array) -> jax.Array:
        e = jnp.diag(fock)
        d1 = e[None, : self.nocc] - e[self.nocc :, None]
        d2 = d1[:, None, :, None] + d1[None, :, None, :]
        d = {T1: d1, T2: d2}
        shapes = self._unravel(self._x0)
        return -1.0 / ravel_pytree({k: d[k] for k in sorted(shapes)})[0]

    # ---- forward: Jacobi + DIIS in one while_loop --------------------------------------

    def _solve(self, x0: jax.Array, fock: jax.Array, eri: jax.Array) -> tuple:
        m = self._precond(fock)  # −1/D: the Jacobi update is x + R/D = x − m·R
        space = self._diis_space

        def extrapolate(vecs, errs, n):
            return pulay_coefficients(errs @ errs.T, jnp.arange(space) < n, xp=jnp) @ vecs

        def cond(state):
            k, done, finite = state[3:6]
            return (k < self._stop.max_iter) & ~done & finite

        def body(state):
            x, e_old, _, k, _, _, vecs, errs = state
            r = self._residual(x, fock, eri)
            x_new = self._p(x - m * r)
            err = x_new - x
            normt = jnp.linalg.norm(err)
            slot = k % space
            vecs, errs = vecs.at[slot].set(x_new), errs.at[slot].set(err)
            x_new = extrapolate(vecs, errs, jnp.minimum(k + 1, space))
            e = self._energy_of(x_new, fock, eri)
            done = (jnp.abs(e - e_old) < self._stop.e_tol) & (normt < self._stop.t_tol)
            finite = jnp.isfinite(e) & jnp.isfinite(normt)
            return x_new, e, jnp.linalg.norm(r), k + 1, done, finite, vecs, errs

        x0 = self._p(x0)
        e0 = self._energy_of(x0, fock, eri)
        buffers = jnp.zeros((space, x0.size), x0.dtype)
        init = (x0, e0, jnp.asarray(jnp.inf, x0.dtype), 0, False, jnp.isfinite(e0))
        x, e, rnorm, k, done, finite, _, _ = jax.lax.while_loop(
            cond, body, (*init, buffers, buffers)
        )
        stopped = CCStatus.where(finite, CCStatus.MAX_ITERATIONS, CCStatus.NON_FINITE)
        status = CCStatus.where(done, CCStatus.CONVERGED, stopped)
        return x, e, status, k, rnorm

    # ---- backward: the adjoint (Λ) equations and ∂L/∂θ ----------------------------------

    def _adjoint(self, x: jax.Array, fock: jax.Array, eri: jax.Array) -> tuple:
        lx = self._lx
        m = self._precond(fock)
        _, vjp = jax.vjp(self._residual, x, fock, eri)
        de_dx, de_df, de_dg = jax.grad(self._energy_of, argnums=(0, 1, 2))(x, fock, eri)
        b = -self._p(de_dx)

        def matvec(y):
            py = self._p(y)
            return self._p(vjp(m * py)[0]) + (y - py)

        op = lx.FunctionLinearOperator(matvec, jax.eval_shape(lambda: b))
        atol = self._adjoint_tol * jnp.max(jnp.abs(b))
        gmres = lx.GMRES(
            rtol=0.0,
            atol=atol,
            restart=self._restart,
            max_steps=self._max_steps,
            stagnation_iters=10,
        )
        sol = lx.linear_solve(op, b, gmres, throw=False)
        lam = m * self._p(sol.value)
        _, dr_df, dr_dg = vjp(lam)  # λᵀ ∂R/∂θ
        ok = sol.result == lx.RESULTS.successful
        # what a failure reports: the residual GMRES left (max-norm, as its test), the
        # tolerance it was held to, and lineax's verdict. lineax also wants the iterate
        # to settle (change by less than atol between restarts): where the Jacobian is
        # singular, as along the rotation of a linear radical's UHF orbitals about its
        # axis (OH/STO-3G), the residual can be tiny while the iterate still drifts
        # along the null direction, and lineax stops it as stagnated. Accepting it there
        # gave a λ1 element 1e-4 off PySCF's in one run of three, so it is a failure.
        # (one more matvec, so only run when the solve failed: a cond runs one branch)
        left = jax.lax.cond(
            ok,
            lambda v: jnp.zeros((), b.dtype),
            lambda v: jnp.max(jnp.abs(matvec(v) - b)),
            sol.value,
        )
        done = (ok, sol.stats["num_steps"], left, atol, sol.result)
        return lam, de_df + dr_df, de_dg + dr_dg, *done

    def _run(self, stage: str, *args: jax.Array) -> Any:
        """Run ``solve`` or ``adjoint``: traced under ``jit``, else compiled ahead of time.

        Reverse mode evaluates the tangent rule inside a partial-evaluation trace, where
        calling a ``jax.jit`` function compiles a fresh, partially evaluated copy of it.
        With concrete arguments the rule calls the ahead-of-time executable instead, so
        the primal call, ``jax.jvp`` and ``jax.grad`` share one compilation per stage.
        """
        fn = self._jitted[stage]
        if any(isinstance(a, jax.core.Tracer) for a in args):
            return self._guard(stage, fn(*args))
        key = (stage, *((a.shape, a.dtype, getattr(a, "weak_type", False)) for a in args))
        executable = self._executables.get(key)
        if executable is None:
            executable = self._executables[key] = fn.lower(*args).compile(compiler_options())
        return self._guard(stage, executable(*args))

    def _guard(self, stage: str, out: tuple) -> tuple:
        """With ``throw``, fail on an unconverged stage.

        Concrete results raise :class:`~sq_jax.ConvergenceError`; traced ones get
        ``eqx.error_if`` on every array the caller may use (an error attached to one
        unused output would be dropped).
        """
        if not self._throw:
            return out
        if stage == "solve":
            ok, count, rnorm, guarded = out[2] == CCStatus.CONVERGED, out[3], out[4], 2
            what, unit = f"the {self.method.upper()} forward solve", "iterations"
            hint = "raise max_iter, loosen e_tol/t_tol, or pass throw=False"
        else:
            ok, count, rnorm, guarded = out[3], out[4], out[5], 3
            what, unit = "the adjoint (Λ) GMRES solve", "restart cycles"
            hint = "raise gmres_max_steps or adjoint_tol, or pass throw=False"
        if isinstance(ok, jax.core.Tracer):
            message = f"ImplicitEnergy: {what} did not converge ({hint})"
            return (*eqx.error_if(out[:guarded], ~ok, message), *out[guarded:])
        if not bool(ok):
            if stage == "solve":
                left = f"last residual norm ‖R‖ = {float(rnorm):.3g}"
            else:
                left = (
                    f"residual max-norm left {float(rnorm):.3g}, wanted ≤ {float(out[6]):.3g};"
                    f" lineax: {self._lx.RESULTS[out[7]]}"
                )
                if float(rnorm) <= float(out[6]):
                    # the residual is met but the iterate kept moving: Jᵀ is singular
                    # (the comment in `adjoint`). UHF OH/STO-3G: 50 restart cycles failed
                    # 5 solves of 8, 300 failed 3 of 6; taken with throw=False, Λ gave
                    # PySCF's 1-RDM to 3e-11 in two solves of three, to 4e-5 in the other
                    left += (
                        "; the residual is met but Λ kept changing along a direction the "
                        "equations leave free: the amplitude equations have a family of "
                        "solutions here (e.g. a linear radical's orbitals, free to rotate "
                        "about its axis), so Λ is not unique"
                    )
                    hint = (
                        "pass throw=False to take this Λ, one of the solutions (what depends "
                        "on the free direction, such as parts of the density, is not fixed "
                        "by the equations); more GMRES cycles (gmres_max_steps) settle it "
                        "only sometimes"
                    )
            raise ConvergenceError(
                f"ImplicitEnergy: {what} did not converge after {int(count)} {unit} ({left}); "
                f"{hint}.",
                iterations=int(count),
                residual_norm=float(rnorm),
            )
        return out

    # ---- the differentiable energy -----------------------------------------------------

    def _make_energy(self) -> Callable[[jax.Array, jax.Array], jax.Array]:
        @jax.custom_jvp
        def energy(fock, eri):
            return self._run("solve", self._x0, fock, eri)[1]

        @energy.defjvp
        def energy_jvp(primals, tangents):
            # Everything expensive depends on the primals only; the tangent map is two dot
            # products, linear and trivially transposed for reverse mode.
            fock, eri = primals
            dfock, deri = tangents
            x, e = self._run("solve", self._x0, fock, eri)[:2]
            _, g_fock, g_eri = self._run("adjoint", x, fock, eri)[:3]
            return e, jnp.vdot(g_fock, dfock) + jnp.vdot(g_eri, deri)

        return energy

    def _check(self, fock: Any, eri: Any) -> tuple[jax.Array, jax.Array]:
        n = self.nocc + self.nvirt
        f, g = jnp.asarray(fock), jnp.asarray(eri)
        if f.shape != (n, n) or g.shape != (n,) * 4:
            raise InputError(
                f"ImplicitEnergy expects fock of shape {(n, n)} and eri of shape {(n,) * 4} "
                f"(the run's {self.nocc}+{self.nvirt} orbitals); received {f.shape} and "
                f"{g.shape}."
            )
        if not (jnp.issubdtype(f.dtype, jnp.floating) and jnp.issubdtype(g.dtype, jnp.floating)):
            raise InputError(
                f"fock and eri must be floating point; received {f.dtype} and {g.dtype}."
            )
        return f, g

    def __call__(self, fock: Any, eri: Any) -> jax.Array:
        """The converged correlation energy at these integrals (differentiable).

        Args:
            fock: F[p, q] in the run's orbital basis, shape (n, n).
            eri: the run's two-electron integrals (⟨pq‖rs⟩ spin-orbital, ⟨pq|rs⟩
                closed-shell), shape (n,)*4.

        Returns:
            The correlation energy, a 0-d array.

        Raises:
            InputError: integrals of the wrong shape or dtype.
            ConvergenceError: with ``throw=True``, the forward or adjoint solve did not
                converge; the message says which, with the iteration count (under
                ``jax.jit`` this surfaces as ``equinox.EquinoxRuntimeError`` instead).
        """
        return self._energy(*self._check(fock, eri))

    def solve(self, fock: Any, eri: Any) -> ImplicitSolution:
        """The forward solve alone, with its diagnostics (not differentiable).

        Args:
            fock: F[p, q], shape (n, n).
            eri: two-electron integrals, shape (n,)*4.

        Returns:
            An :class:`ImplicitSolution`.
        """
        x, e, status, k, rnorm = self._run("solve", self._x0, *self._check(fock, eri))
        return ImplicitSolution(e, self._unravel(x), status, k, rnorm)

    def multipliers(
        self, fock: Any, eri: Any, amplitudes: Mapping[str, Any] | None = None
    ) -> dict[str, jax.Array]:
        """The Λ amplitudes: the solution λ of Jᵀ λ = −∂E/∂t at the converged t.

        Args:
            fock: F[p, q], shape (n, n).
            eri: two-electron integrals, shape (n,)*4.
            amplitudes: converged amplitudes at (fock, eri), keyed like the run's, to
                use as they are; default: converge them first (warm-started).

        Returns:
            λ keyed like the amplitudes (projected: antisymmetric or pair-symmetric T2).
        """
        fock, eri = self._check(fock, eri)
        if amplitudes is None:
            x = self._run("solve", self._x0, fock, eri)[0]
        else:
            x = ravel_pytree({k: jnp.asarray(amplitudes[k], jnp.float64) for k in amplitudes})[0]
        return self._unravel(self._run("adjoint", x, fock, eri)[0])

    def gradient(self, fock: Any, eri: Any) -> tuple[jax.Array, jax.Array]:
        """(dE/df, dE/dg) directly: what ``jax.grad(energy, argnums=(0, 1))`` returns.

        Args:
            fock: F[p, q], shape (n, n).
            eri: two-electron integrals, shape (n,)*4.

        Returns:
            ∂L/∂f = ∂E/∂f + λᵀ ∂R/∂f and ∂L/∂g likewise, in the shapes of the inputs.
        """
        fock, eri = self._check(fock, eri)
        x = self._run("solve", self._x0, fock, eri)[0]
        return self._run("adjoint", x, fock, eri)[1:3]


def implicit_energy(run: Any, **options: Any) -> ImplicitEnergy:
    """Make the converged CC energy of a run's method a differentiable function of (f, g).

    Args:
        run: a :class:`~sq_jax.cc.drivers.CCRun`; its compiled residual and energy
            programs are reused (batched ones too) and its amplitudes warm-start every
            forward solve.
        **options: ``e_tol`` (1e-13), ``t_tol`` (1e-11), ``max_iter`` (100),
            ``diis_space`` (6), ``gmres_restart`` (20) and ``gmres_max_steps`` (50) of
            the adjoint GMRES, ``adjoint_tol`` (1e-12,
            max-norm of the adjoint residual relative to that of ∂E/∂t) and ``throw``
            (True: a failed forward or adjoint solve raises
            :class:`~sq_jax.ConvergenceError`; through ``eqx.error_if`` under ``jit``).

    Returns:
        An :class:`ImplicitEnergy`, ``energy(fock, eri) -> E_corr``.

    Raises:
        InputError: ``run`` is not a finished CC run, or an option has a value the
            solve cannot use (a negative ``max_iter``, a NaN or non-positive tolerance).

    Example:
        ``implicit_energy(cc.ccsd())`` gives ``energy(fock, eri)`` (see the module
        example). Anything but a finished run is refused:

        >>> try:
        ...     implicit_energy("not a run")
        ... except InputError as err:
        ...     print(type(err).__name__)
        InputError
    """
    return ImplicitEnergy(run, **options)


def converged_energy(run: Any, fock: Any, eri: Any, **options: Any) -> jax.Array:
    """The converged correlation energy at (fock, eri), differentiable in both.

    A one-shot form of :func:`implicit_energy`; build the :class:`ImplicitEnergy` once
    and call it instead when evaluating repeatedly (each object compiles once).

    Args:
        run: a :class:`~sq_jax.cc.drivers.CCRun` of the same orbital space.
        fock: F[p, q], shape (n, n).
        eri: two-electron integrals, shape (n,)*4.
        **options: as for :func:`implicit_energy`.

    Returns:
        The correlation energy, a 0-d array.

    Example:
        >>> from sq_jax import cc
        >>> from sq_jax.cc.integrals import default_spatial_system
        >>> ints = default_spatial_system()
        >>> run = cc.ccd(closed_shell=True)
        >>> e = converged_energy(run, ints.fock, ints.eri)
        >>> bool(abs(float(e) - run.e_corr) < 1e-9)
        True
    """
    return ImplicitEnergy(run, **options)(fock, eri)
