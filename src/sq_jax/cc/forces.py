"""Orbital-relaxed CC energies of nuclear coordinates and a field: forces and dipoles.

:class:`~sq_jax.cc.implicit.ImplicitEnergy` differentiates the converged CC energy with
respect to the MO integrals (f, g) at fixed orbitals. Forces and relaxed properties also
need how the orbitals and integrals move with the nuclei or an external field. pyscfad
(a JAX re-implementation of PySCF's SCF) supplies that part: its AO integrals carry
derivatives with respect to the nuclear coordinates, and with
``pyscfad_scf_implicit_diff`` its RHF solve is differentiated implicitly (one GMRES solve
of the SCF fixed-point equations for the adjoint density, not the unrolled iterations).
:func:`ccsd_energy_function` composes the two:

    E(R, F) = E_HF(R, F) + E_CC(f(R, F), g(R, F)),

    f = Cᵀ F_AO C,    ⟨pq|rs⟩ = (pr|qs) over the RHF orbitals C(R, F),

where the one-electron Hamiltonian carries the dipole coupling h += F·r (electrons) and
the nuclear repulsion the nuclear term −F·Σ_A Z_A R_A, so that −∂E/∂F is the total
dipole moment. ``jax.grad`` of the result gives the nuclear gradient (Eh/Bohr) and the
orbital-relaxed dipole (a.u.): the CC Λ equations come from sq_jax's adjoint solve, the
orbital response (the Z-vector) from pyscfad's implicit SCF derivative, and no gradient
formula is written by hand. Every method sq_jax compiles (CCSD, CCD; closed-shell or
spin-orbital equations) gets derivatives the same way.

Orbital phases: eigenvectors are defined up to sign, and sign flips between geometries
would make the previous amplitudes a bad starting guess; each orbital's sign is fixed so
that its largest AO coefficient is positive (a constant factor, so derivatives are
unchanged).

Known limitations: reverse mode only (``jax.grad``, ``jax.value_and_grad``,
``jax.vjp``): pyscfad's implicit SCF derivative is a ``custom_vjp``, so ``jax.jvp`` and
``jax.jacfwd`` fail, and its SCF runs eagerly (Python loops over concrete values), so the
energy cannot be ``jax.jit``-ed or ``jax.vmap``-ed; closed-shell RHF references, all
electrons correlated or a frozen core (``frozen=<count>``), no ECPs, no density fitting
(ImplicitEnergy needs the full g); first derivatives only.

References:
    X. Zhang and G. K.-L. Chan, J. Chem. Phys. 157, 204801 (2022) — differentiable
    quantum chemistry with PySCF for molecules and materials at the mean-field level and
    beyond (pyscfad). T. Helgaker and P. Jørgensen, Theor. Chim. Acta 75, 111 (1989) —
    the Lagrangian approach to CC energy derivatives.

Example:
    >>> import jax
    >>> from pyscf import gto
    >>> from sq_jax.cc.forces import ccsd_energy_function
    >>> mol = gto.M(atom="H 0 0 0; H 0 0 0.74", basis="sto-3g", verbose=0)
    >>> energy = ccsd_energy_function(mol)           # compiles the CC programs once
    >>> e, grad = jax.value_and_grad(energy)(energy.coords)
    >>> round(float(e), 6)                           # FCI for two electrons
    -1.137284
    >>> bool(abs(float(grad[0, 2] + grad[1, 2])) < 1e-10)  # translational invariance
    True
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import InputError
from .drivers import solve_cc
from .implicit import ImplicitEnergy, implicit_energy
from .integrals import SpatialIntegrals, SpinOrbitalIntegrals

__all__ = ["RelaxedEnergy", "ccsd_energy_function", "relaxed_dipole"]


def _pyscfad() -> Any:
    """Import pyscfad (the optional ``forces`` extra), with the fix in the message."""
    try:
        import pyscfad  # noqa: F401
        from pyscfad import gto
        from pyscfad.scf import hf
    except ImportError as err:
        raise InputError(
            "Orbital-relaxed CC derivatives need pyscfad, which is not installed; install "
            "it with `pip install sq_jax[forces]`."
        ) from err
    return gto, hf


@functools.cache
def _field_rhf_class() -> type:
    """The RHF class of pyscfad with a uniform electric field as a differentiable leaf."""
    _, hf = _pyscfad()

    class FieldRHF(hf.RHF):
        """RHF with h += F·r and E_nuc −= F·Σ Z_A R_A; ``field=None`` is no field."""

        _dynamic_attr = ("field",)

        def get_hcore(self, mol: Any = None, **kwargs: Any) -> Any:
            mol = self.mol if mol is None else mol
            h = super().get_hcore(mol)
            if self.field is None:
                return h
            with mol.with_common_orig((0, 0, 0)):
                r = mol.intor("int1e_r", comp=3)
            return h + jnp.einsum("x,xij->ij", self.field, r)

        def energy_nuc(self) -> Any:
            e = super().energy_nuc()
            if self.field is None:
                return e
            charges = jnp.asarray(self.mol.atom_charges(), dtype=jnp.float64)
            return e - jnp.dot(self.field, charges @ self.mol.atom_coords())

    return FieldRHF


def _check_molecule(mol: Any) -> None:
    """Refuse molecules the relaxed route cannot treat, in chemistry terms."""
    if not (hasattr(mol, "atom_coords") and hasattr(mol, "_basis")):
        raise InputError(
            f"ccsd_energy_function needs a built PySCF molecule (`pyscf.gto.M(...)`); "
            f"received {type(mol).__name__}."
        )
    problems = []
    if mol.spin != 0:
        problems.append(f"spin={mol.spin}: only closed-shell (RHF) references, spin=0")
    if mol.nelectron < 2:
        problems.append(f"{mol.nelectron} electron(s): coupled cluster needs at least 2")
    if getattr(mol, "_ecp", None):
        problems.append("ECPs: pyscfad's ECP integral derivatives are not wired in here")
    if problems:
        raise InputError(
            "ccsd_energy_function cannot treat this molecule:\n"
            + "\n".join(f"  * {p}" for p in problems)
        )


def _ad_molecule(mol: Any, coords: Any) -> Any:
    """A pyscfad Mole at ``coords`` (Bohr) whose ``coords`` leaf carries the derivative.

    pyscfad evaluates integrals at the geometry in the molecule's libcint environment and
    their derivatives from the ``coords`` leaf, so the geometry is set from the concrete
    value and the leaf is the (possibly traced) input. Exponents and contraction
    coefficients are not traced (their derivatives are not wanted and cost time).
    """
    gto, _ = _pyscfad()
    try:
        concrete = np.asarray(jax.lax.stop_gradient(coords), dtype=np.float64)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError) as err:
        raise InputError(
            "The relaxed CC energy runs pyscfad's SCF eagerly and needs concrete "
            "coordinates: call it directly or under jax.grad / jax.value_and_grad / "
            "jax.vjp, not under jax.jit, jax.vmap or forward mode (jax.jvp, jax.jacfwd)."
        ) from err
    atoms = [(mol.atom_symbol(i), tuple(concrete[i])) for i in range(mol.natm)]
    admol = gto.Mole(
        atom=atoms,
        unit="Bohr",
        basis=mol._basis,
        charge=mol.charge,
        spin=mol.spin,
        cart=mol.cart,
        verbose=0,
    )
    admol.build(trace_exp=False, trace_ctr_coeff=False)
    admol.coords = coords
    return admol


def _fix_phases(c: jax.Array) -> jax.Array:
    """Sign each orbital so that its largest |coefficient| is positive (constant factor)."""
    c0 = jax.lax.stop_gradient(c)
    big = c0[jnp.argmax(jnp.abs(c0), axis=0), jnp.arange(c0.shape[1])]
    return c * jnp.where(big < 0, -1.0, 1.0)


def _spin_orbital(fock: jax.Array, eri: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Spatial (F, ⟨pq|rs⟩) → spin-orbital (F, ⟨pq‖rs⟩), α/β interleaved (traceable).

    The same layout as :func:`~sq_jax.cc.integrals.spin_orbital_from_spatial`.
    """
    n = fock.shape[0]
    eye2 = jnp.eye(2, dtype=fock.dtype)
    v = jnp.einsum("pqrs,xz,yw->pxqyrzsw", eri, eye2, eye2).reshape((2 * n,) * 4)
    return jnp.kron(fock, eye2), v - v.transpose(0, 1, 3, 2)


@dataclasses.dataclass(frozen=True)
class _Reference:
    """The RHF solution of one energy evaluation (arrays may be traced)."""

    e_hf: Any
    fock: Any
    eri: Any
    nocc: int


def _cc_inputs(ref: _Reference, *, frozen: int, closed_shell: bool) -> tuple[Any, Any, int]:
    """The CC equations' (f, g, nocc): the active block, spin-orbital if asked (traceable).

    The frozen orbitals stay in the reference (their Coulomb and exchange fields are in
    F, their energy in E_HF); only the correlation treatment leaves them out.
    """
    act = slice(frozen, None)
    fock, eri, nocc = ref.fock[act, act], ref.eri[act, act, act, act], ref.nocc - frozen
    if closed_shell:
        return fock, eri, nocc
    fock, eri = _spin_orbital(fock, eri)
    return fock, eri, 2 * nocc


@contextlib.contextmanager
def _pyscfad_config() -> Iterator[None]:
    """The pyscfad settings of the relaxed energy, restored afterwards.

    ``scf_implicit_diff``: differentiate the SCF by its fixed-point equations.
    ``moleintor_opt``: reverse-mode integral derivatives, and the SCF adjoint solved by
    SciPy's GMRES over eager vector-Jacobian products (JAX's GMRES would compile a new
    while loop, seconds, on every gradient: its matvec closes over new arrays).
    """
    from pyscfad import config_update

    with config_update("pyscfad_scf_implicit_diff", True):
        with config_update("pyscfad_moleintor_opt", True):
            yield


def rhf_reference(mol: Any, coords: Any, field: Any = None, *, conv_tol: float) -> _Reference:
    """Run pyscfad's RHF at (coords, field) and transform the integrals to its MOs.

    The SCF is differentiated implicitly (``pyscfad_scf_implicit_diff``), the AO
    integrals through the ``coords`` leaf of the pyscfad molecule.

    Args:
        mol: the PySCF molecule (basis, charge, atom order).
        coords: nuclear positions (Bohr), shape (natm, 3); may be traced by ``jax.grad``.
        field: electric field (a.u.), shape (3,), or None.
        conv_tol: the SCF energy convergence threshold.

    Returns:
        E_HF, the MO Fock matrix, the MO integrals (physicist ⟨pq|rs⟩, spatial) and the
        number of doubly occupied orbitals.

    Raises:
        InputError: the SCF did not converge.
    """
    from pyscfad.ao2mo import incore

    mf = _field_rhf_class()(_ad_molecule(mol, coords))
    mf.field = field
    mf.conv_tol = conv_tol
    if getattr(mf, "_chkfile", None) is not None:  # PySCF's temporary chkfile: not wanted
        mf._chkfile.close()
    mf.chkfile = None
    with _pyscfad_config():
        mf.kernel()
    if not mf.converged:
        raise InputError(
            f"pyscfad's RHF did not converge (conv_tol={conv_tol:g}) at this geometry/field; "
            "a derivative of an unconverged SCF is meaningless. Start closer to a minimum "
            "or loosen conv_tol."
        )
    c = _fix_phases(mf.mo_coeff)
    n = c.shape[1]
    eri = incore.general(mf._eri, (c,) * 4, compact=False).reshape((n,) * 4)
    nocc = int(np.count_nonzero(np.asarray(mf.mo_occ) > 0))
    return _Reference(mf.e_tot, c.T @ mf.get_fock() @ c, eri.transpose(0, 2, 1, 3), nocc)


class RelaxedEnergy:
    """The total CC energy E(coords, field) with orbital relaxation, for ``jax.grad``.

    Build it with :func:`ccsd_energy_function`; call it as ``energy(coords)`` or
    ``energy(coords, field)``. ``coords`` are the nuclear positions in Bohr, shape
    (natm, 3), in the molecule's atom order; ``field`` a uniform electric field in a.u.,
    shape (3,). ``jax.grad`` with respect to ``coords`` is the nuclear gradient (minus
    the forces), with respect to ``field`` minus the dipole moment.

    Attributes:
        method: ``"ccsd"`` or ``"ccd"``.
        closed_shell: spin-adapted (True) or spin-orbital (False) CC equations.
        frozen: the number of lowest (core) orbitals left uncorrelated.
        coords: the molecule's coordinates (Bohr) at construction, shape (natm, 3).
        cc: the :class:`~sq_jax.cc.implicit.ImplicitEnergy` of the correlation energy.
        conv_tol: the SCF energy convergence threshold.
    """

    def __init__(
        self, mol: Any, cc: ImplicitEnergy, *, closed_shell: bool, frozen: int, conv_tol: float
    ) -> None:
        self._mol = mol
        self.cc = cc
        self.method: str = cc.method
        self.closed_shell = bool(closed_shell)
        self.frozen = int(frozen)
        self.coords: jax.Array = jnp.asarray(mol.atom_coords(), dtype=jnp.float64)
        self.conv_tol = float(conv_tol)

    def _check(self, coords: Any, field: Any) -> tuple[jax.Array, jax.Array | None]:
        coords = jnp.asarray(coords)
        if coords.shape != self.coords.shape or not jnp.issubdtype(coords.dtype, jnp.floating):
            raise InputError(
                f"coords must be a float array of shape {self.coords.shape} (Bohr, one row "
                f"per atom); received {coords.dtype} of shape {coords.shape}."
            )
        if field is not None:
            field = jnp.asarray(field)
            if field.shape != (3,) or not jnp.issubdtype(field.dtype, jnp.floating):
                raise InputError(
                    f"field must be a float array of shape (3,) (a.u.) or None; received "
                    f"{field.dtype} of shape {field.shape}."
                )
        return coords, field

    def __call__(self, coords: Any, field: Any = None) -> jax.Array:
        """The total energy (Eh): E_HF + E_corr, differentiable in coords and field.

        Args:
            coords: nuclear positions (Bohr), shape (natm, 3).
            field: electric field (a.u.), shape (3,), or None (no field).

        Returns:
            The total energy, a 0-d array.

        Raises:
            InputError: inputs of the wrong shape, traced under ``jax.jit``/``vmap``, or an
                SCF that does not converge.
            ConvergenceError: the CC forward or adjoint solve did not converge.
        """
        ref = rhf_reference(self._mol, *self._check(coords, field), conv_tol=self.conv_tol)
        fock, eri, _ = _cc_inputs(ref, frozen=self.frozen, closed_shell=self.closed_shell)
        return ref.e_hf + self.cc(fock, eri)


def _check_options(mol: Any, method: str, frozen: Any, cc_options: dict[str, Any]) -> None:
    """Refuse an unknown method or option before any SCF is run or anything compiled."""
    accepted = [
        p.name
        for p in inspect.signature(ImplicitEnergy.__init__).parameters.values()
        if p.kind is p.KEYWORD_ONLY
    ]
    problems = []
    if method not in ("ccsd", "ccd"):
        problems.append(f"method={method!r}: expected 'ccsd' or 'ccd'")
    pairs = mol.nelectron // 2
    if not (isinstance(frozen, int | np.integer) and 0 <= frozen < pairs):
        problems.append(
            f"frozen={frozen!r}: expected the number of lowest orbitals to leave "
            f"uncorrelated, a whole number from 0 to {pairs - 1} ({pairs} occupied)"
        )
    problems += [
        f"{k}=: unknown; accepted: {', '.join(accepted)}" for k in cc_options if k not in accepted
    ]
    if problems:
        raise InputError(
            "ccsd_energy_function: invalid argument"
            + ("s" if len(problems) > 1 else "")
            + ":\n"
            + "\n".join(f"  * {p}" for p in problems)
        )


def ccsd_energy_function(
    mol: Any,
    *,
    method: str = "ccsd",
    closed_shell: bool = True,
    frozen: int = 0,
    conv_tol: float = 1e-12,
    **cc_options: Any,
) -> RelaxedEnergy:
    """The orbital-relaxed CC total energy of a molecule as a function of coords and field.

    Runs one pyscfad RHF and one sq_jax CC solve at the molecule's geometry to compile the
    CC programs and obtain starting amplitudes; every later call reuses them.

    Args:
        mol: a built ``pyscf.gto.Mole`` (closed shell, no ECP); its basis, charge and
            atom order are kept, its coordinates are the default point.
        method: ``"ccsd"`` or ``"ccd"``.
        closed_shell: the spin-adapted equations (default) or the spin-orbital ones.
        frozen: the number of lowest (core) orbitals left uncorrelated, as PySCF's
            ``frozen=<int>``; their response to the nuclei is still included.
        conv_tol: the RHF energy convergence threshold (tight: derivatives of the
            implicit SCF solve assume it converged).
        **cc_options: options of :func:`~sq_jax.cc.implicit.implicit_energy` (``e_tol``,
            ``t_tol``, ``max_iter``, ``adjoint_tol``, ...).

    Returns:
        A :class:`RelaxedEnergy` ``energy(coords, field=None) -> E_tot``.

    Raises:
        InputError: pyscfad is not installed, the molecule is open-shell, has fewer than
            two electrons or ECPs, or the method or an option is unknown or invalid.

    Example:
        See the module example. An open-shell molecule is refused:

        >>> from pyscf import gto
        >>> try:
        ...     ccsd_energy_function(gto.M(atom="O 0 0 0; O 0 0 1.2", spin=2, verbose=0))
        ... except InputError as err:
        ...     print(str(err).splitlines()[1])
          * spin=2: only closed-shell (RHF) references, spin=0
    """
    _check_molecule(mol)
    _check_options(mol, method, frozen, cc_options)
    _pyscfad()
    options = {"e_tol": 1e-12, "t_tol": 1e-10, **cc_options}
    coords = jnp.asarray(mol.atom_coords(), dtype=jnp.float64)
    ref = rhf_reference(mol, coords, conv_tol=conv_tol)
    fock, eri, nocc = _cc_inputs(ref, frozen=frozen, closed_shell=closed_shell)
    fock, eri = np.asarray(fock), np.asarray(eri)
    kind = SpatialIntegrals if closed_shell else SpinOrbitalIntegrals
    ints = kind(
        fock=fock,
        eri=eri,
        mo_energies=np.diag(fock).copy(),
        nocc=nocc,
        nvirt=fock.shape[0] - nocc,
        e_hf=float(ref.e_hf),
    )
    solve_options = {k: options[k] for k in ("e_tol", "t_tol", "max_iter") if k in options}
    run = solve_cc(ints, method=method, closed_shell=closed_shell, **solve_options)
    energy = implicit_energy(run, **options)
    return RelaxedEnergy(mol, energy, closed_shell=closed_shell, frozen=frozen, conv_tol=conv_tol)


def relaxed_dipole(energy: RelaxedEnergy, coords: Any = None) -> jax.Array:
    """The orbital-relaxed CC dipole moment −∂E/∂F at zero field (a.u., origin 0).

    Args:
        energy: a :class:`RelaxedEnergy`.
        coords: nuclear positions (Bohr); default: the molecule's.

    Returns:
        The dipole moment vector, shape (3,), nuclear part included.

    Example:
        ``relaxed_dipole(ccsd_energy_function(mol))``; for H2 it vanishes by symmetry.
    """
    coords = energy.coords if coords is None else coords
    return -jax.grad(energy, argnums=1)(coords, jnp.zeros(3))
