"""Systems, inputs and the competing implementations for ``bench/run.py``.

Everything here builds things; nothing times anything. The competitors of one CCSD
iteration are:

* PySCF's ``GCCSD.update_amps`` / ``RCCSD.update_amps`` on the *same* integrals and
  amplitudes (for GCCSD the ``_PhysicistsERIs`` blocks are cut from sq_jax's
  antisymmetrized spin-orbital ``eri``; for RCCSD PySCF's own ``ao2mo`` of the same
  orbitals). Its residual is recovered as R = (t_new − t)·D, and is checked against
  sq_jax's.
* "plain JAX": one ``jnp.einsum(..., optimize=True)`` per expanded term of the parsed
  equations (after the Â/Ŝ expansion, so 124 terms for the spin-orbital R2), summed, in
  one ``jax.jit``. No forest, no common-subexpression folding, no batching.
* sq_jax: ``sq.compile`` of the same equations, unbatched or batched.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import sq_jax as sq
from sq_jax.cc.drivers import integral_labels
from sq_jax.cc.equations import load_equations
from sq_jax.cc.integrals import SpatialIntegrals, SpinOrbitalIntegrals
from sq_jax.forest.inputs import block_key, input_specs

H2O = "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692"
# The S22 water dimer of docs/benchmarks.md, "Systems".
H2O_DIMER = (
    "O -1.551007 -0.114520 0.000000; H -1.934259 0.762503 0.000000; "
    "H -0.599677 0.040712 0.000000; O 1.350625 0.111469 0.000000; "
    "H 1.680398 -0.373741 -0.758561; H 1.680398 -0.373741 0.758561"
)


def benzene_geometry(r_c: float = 1.39, r_h: float = 2.48) -> str:
    """Benzene of docs/benchmarks.md: a regular hexagon in the xy plane, C at radius
    ``r_c`` and H at ``r_h`` (Å), atom k at k·60°, carbons first, 6 decimals."""
    import math

    atoms = []
    for element, radius in (("C", r_c), ("H", r_h)):
        for k in range(6):
            angle = math.radians(60 * k)
            x, y = radius * math.cos(angle), radius * math.sin(angle)
            # round, then + 0.0: no "-0.000000" for a coordinate of -1e-16
            atoms.append(f"{element} {round(x, 6) + 0.0:.6f} {round(y, 6) + 0.0:.6f} 0.000000")
    return "; ".join(atoms)


BENZENE = benzene_geometry()


@dataclasses.dataclass(frozen=True)
class SystemSpec:
    """One molecule/basis of docs/benchmarks.md, with its reference numbers (None: not given)."""

    name: str
    atom: str
    basis: str
    large: bool = False
    ref_rccsd: float | None = None
    ref_gccsd: float | None = None
    ref_iters: int | None = None
    ref_s_per_iter_gccsd: float | None = None
    ref_s_per_iter_rccsd: float | None = None


SYSTEMS: dict[str, SystemSpec] = {
    s.name: s
    for s in (
        SystemSpec(
            "h2o-sto3g",
            H2O,
            "sto-3g",
            ref_rccsd=-0.04943856303089,
            ref_iters=36,
            ref_s_per_iter_rccsd=0.018,
        ),
        SystemSpec(
            "h2o-631g",
            H2O,
            "6-31g",
            ref_rccsd=-0.13537949962050,
            ref_iters=33,
            ref_s_per_iter_rccsd=0.022,
        ),
        SystemSpec(
            "h2o-ccpvdz",
            H2O,
            "cc-pvdz",
            ref_rccsd=-0.21332742687298,
            ref_gccsd=-0.21332742687301,
            ref_iters=40,
            ref_s_per_iter_gccsd=0.22,
            ref_s_per_iter_rccsd=0.028,
        ),
        SystemSpec(
            "h2o-ccpvtz",
            H2O,
            "cc-pvtz",
            large=True,
            ref_gccsd=-0.28086612094323,
            ref_iters=40,
            ref_s_per_iter_gccsd=6.2,
        ),
        SystemSpec(
            "h2o2-ccpvdz",
            H2O_DIMER,
            "cc-pvdz",
            large=True,
            ref_rccsd=-0.42870769899791,
            ref_gccsd=-0.42870769899801,
            ref_iters=56,
            ref_s_per_iter_gccsd=5.2,
            ref_s_per_iter_rccsd=0.20,
        ),
        SystemSpec(
            "benzene-ccpvdz",
            BENZENE,
            "cc-pvdz",
            large=True,
            ref_rccsd=-0.83645521387070,
            ref_iters=52,
            ref_s_per_iter_rccsd=9.0,
        ),
    )
}
DEFAULT_SYSTEMS = ("h2o-ccpvdz",)
QUICK_SYSTEMS = ("h2o-sto3g", "h2o-631g")

T1, T2 = "t{a;i}", "t{a,a;i,i}"


@dataclasses.dataclass
class System:
    """A converged RHF and its integrals in both bases."""

    spec: SystemSpec
    mf: Any
    so: SpinOrbitalIntegrals | None
    cs: SpatialIntegrals
    scf_s: float

    @property
    def name(self) -> str:
        return self.spec.name


def load_system(name: str, *, spin_orbital: bool = True) -> System:
    """RHF (conv_tol 1e-12, all electrons) and sq_jax's spatial integrals, plus the
    spin-orbital ones unless ``spin_orbital=False`` (``so`` is then None: benzene's
    spin-orbital ⟨pq‖rs⟩ would take 22 GB)."""
    import time

    from pyscf import gto, scf

    from sq_jax.cc.integrals import spatial_integrals, spin_orbital_from_spatial

    spec = SYSTEMS[name]
    t0 = time.perf_counter()
    mol = gto.M(atom=spec.atom, basis=spec.basis, verbose=0)
    mf = scf.RHF(mol)
    mf.conv_tol = 1e-12
    mf.run()
    cs = spatial_integrals(mf)
    so = spin_orbital_from_spatial(cs) if spin_orbital else None
    return System(spec, mf, so, cs, time.perf_counter() - t0)


def amplitudes(ints: SpinOrbitalIntegrals | SpatialIntegrals) -> dict[str, np.ndarray]:
    """Non-trivial, physical amplitudes: the MP2 start (the same for every competitor)."""
    m1, m2 = ints.mp2_amplitudes()
    return {T1: np.ascontiguousarray(m1), T2: np.ascontiguousarray(m2)}


def all_blocks(ints: Any) -> dict[str, Any]:
    """Every occupied/virtual block of f and g, cut on the host, plus the MP2 amplitudes.

    All competitors get pre-cut blocks, as PySCF's ``eris`` are; a program given the full
    ``f``/``g`` instead cuts (copies) them on every call inside XLA.
    """
    import itertools

    o = ints.nocc
    sl = {"i": slice(0, o), "a": slice(o, ints.nmo)}
    out: dict[str, Any] = {}
    for label, arr, groups in (("f", ints.fock, (1, 1)), ("g", ints.eri, (2, 2))):
        for combo in itertools.product("ia", repeat=sum(groups)):
            bra, ket = combo[: groups[0]], combo[groups[0] :]
            key = f"{label}{{{','.join(bra)};{','.join(ket)}}}"
            out[key] = np.ascontiguousarray(np.asarray(arr)[tuple(sl[c] for c in combo)])
    out.update(amplitudes(ints))
    return {k: jnp.asarray(v) for k, v in out.items()}


def inputs_for(program: sq.Program, blocks: Mapping[str, Any]) -> dict[str, Any]:
    """The blocks (or full tensors, by label) ``program`` reads (it refuses keys no leaf
    reads)."""
    specs = input_specs(program.schedule.annotated.forest)
    keys = {s.block_key for s in specs} | {s.label for s in specs}
    return {k: v for k, v in blocks.items() if k in keys}


def block_inputs(program: sq.Program, ints: Any) -> dict[str, Any]:
    return inputs_for(program, all_blocks(ints))


def as_solved(text: str, spaces: sq.Spaces) -> dict[str, Any]:
    """The options ``cc.ccsd`` compiles a large residual with (no memory budget, from
    ``PREPARE_MIN_FLOPS`` up): the declared symmetries trusted, every input but ``t`` fixed."""
    fixed = integral_labels(sq.parse(text, spaces=spaces))
    return {"pair_symmetry": True, "fixed_inputs": fixed}


@dataclasses.dataclass(frozen=True)
class Solved:
    """A program prepared as ``cc.ccsd`` runs a large one in a solve, and its amplitudes."""

    step: Any
    """The :class:`sq_jax.PreparedProgram` (every input but the amplitudes bound)."""
    amplitudes: dict[str, Any]

    @property
    def flops(self) -> int:
        return self.step.program.flops

    @property
    def peak_bytes(self) -> int:
        return self.step.program.peak_bytes

    @property
    def memory_bytes(self) -> int:
        return self.step.memory_bytes

    @property
    def jitted(self) -> Any:
        return self.step.jitted


def prepared(program: sq.Program, blocks: Mapping[str, Any]) -> Solved:
    """``program`` prepared with every block it reads but the amplitudes ``t``, as
    ``cc.ccsd`` runs it (:meth:`sq_jax.Program.prepare`)."""
    inputs = {k: jnp.asarray(x) for k, x in inputs_for(program, blocks).items()}
    amplitudes = {k: x for k, x in inputs.items() if k.startswith("t{")}
    step = program.prepare({k: x for k, x in inputs.items() if k not in amplitudes})
    return Solved(step, amplitudes)


def prepared_args(solved: Solved) -> tuple[Any, ...]:
    """The arguments of a prepared program's jitted call."""
    return (solved.step.fixed, solved.step.prepared, solved.amplitudes)


# --------------------------------------------------------------------------------------
# Plain JAX: one einsum per expanded term


def plain_jax_function(name: str, o: int, v: int) -> tuple[Callable, int, list[str]]:
    """``fn(blocks) -> {"E", "R1", "R2"}`` with one ``jnp.einsum(optimize=True)`` per term.

    Returns the function (not jitted), the number of einsum calls it makes, and the block
    keys it reads.
    """
    eqs = sq.parse(load_equations(name), spaces=sq.Spaces(i=o, a=v))
    plan = []  # per equation: (name, [(coef, spec, [(label, rank, slices)])])
    n_einsums = 0
    for eq in eqs:
        out_ix = eq.lhs.indices if isinstance(eq.lhs, sq.Tensor) else ()
        terms = []
        for term in eq.rhs.terms:
            if isinstance(term, sq.Tensor):
                coef, factors = Fraction(1), (term,)
            else:
                coef, factors = term.scalar, term.factors
            letters: dict[Any, str] = {}

            def let(ix, letters=letters):
                if ix not in letters:
                    letters[ix] = string.ascii_letters[len(letters)]
                return letters[ix]

            ops, subs = [], []
            for f in factors:
                if not isinstance(f, sq.Tensor):
                    raise TypeError(f"unexpected factor {f}")
                # every competitor gets the same pre-cut blocks (as PySCF's eris are)
                ops.append(block_key(f))
                subs.append("".join(let(ix) for ix in f.indices))
            spec = ",".join(subs) + "->" + "".join(let(ix) for ix in out_ix)
            terms.append((float(coef), spec, ops))
            n_einsums += 1
        plan.append((eq.name, terms))

    def fn(inputs: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for eq_name, terms in plan:
            total = None
            for coef, spec, ops in terms:
                x = jnp.einsum(spec, *(inputs[k] for k in ops), optimize=True)
                x = coef * x
                total = x if total is None else total + x
            out[eq_name] = total
        return out

    keys = sorted({k for _, terms in plan for _, _, ops in terms for k in ops})
    return fn, n_einsums, keys


# --------------------------------------------------------------------------------------
# PySCF competitors


def pyscf_gccsd(so: SpinOrbitalIntegrals) -> tuple[Callable[[], Any], Callable[[], dict]]:
    """PySCF's GCCSD ``update_amps`` on sq_jax's spin-orbital integrals and MP2 amplitudes.

    Returns ``(call, residual)``: ``call()`` runs one ``update_amps``; ``residual()``
    returns R1[a,i], R2[a,b,i,j] recovered from it as (t_new − t)·D.
    """
    from pyscf import gto, scf
    from pyscf.cc import gccsd

    nocc, nso = so.nocc, so.nmo
    eris = gccsd._PhysicistsERIs()
    eris.fock, eris.mo_energy, eris.nocc, eris.e_hf = (
        np.asarray(so.fock),
        np.diag(so.fock).copy(),
        nocc,
        float(so.e_hf),
    )
    o, v = slice(0, nocc), slice(nocc, nso)
    for blk in ("oooo", "ooov", "oovv", "ovov", "ovvo", "ovvv", "vvvv"):
        setattr(eris, blk, np.ascontiguousarray(so.eri[tuple(o if c == "o" else v for c in blk)]))
    mycc = gccsd.GCCSD(scf.GHF(gto.M(atom="He", basis="sto-3g", verbose=0)))
    amp = amplitudes(so)
    t1, t2 = amp[T1].T.copy(), amp[T2].transpose(2, 3, 0, 1).copy()

    def call():
        return mycc.update_amps(t1, t2, eris)

    def residual():
        n1, n2 = call()
        d1, d2 = so.denominators()
        return {"R1": (n1.T - amp[T1]) * d1, "R2": (n2.transpose(2, 3, 0, 1) - amp[T2]) * d2}

    return call, residual


def pyscf_rccsd(mf: Any, cs: SpatialIntegrals) -> tuple[Callable[[], Any], Callable[[], dict]]:
    """PySCF's ``rccsd.RCCSD.update_amps`` (PySCF's own ``ao2mo`` of the same orbitals)."""
    from pyscf.cc import rccsd

    mycc = rccsd.RCCSD(mf)
    eris = mycc.ao2mo()
    amp = amplitudes(cs)
    t1, t2 = amp[T1].T.copy(), amp[T2].transpose(2, 3, 0, 1).copy()

    def call():
        return mycc.update_amps(t1, t2, eris)

    def residual():
        n1, n2 = call()
        d1, d2 = cs.denominators()
        return {"R1": (n1.T - amp[T1]) * d1, "R2": (n2.transpose(2, 3, 0, 1) - amp[T2]) * d2}

    return call, residual


def pyscf_solve(
    sys_: System, *, closed_shell: bool, conv_tol: float, conv_tol_normt: float
) -> dict[str, Any]:
    """A full PySCF CCSD solve (RCCSD or GCCSD from ``convert_to_ghf``), MP2 start."""
    import time

    from pyscf import scf
    from pyscf.cc import gccsd, rccsd

    if closed_shell:
        mycc = rccsd.RCCSD(sys_.mf)
    else:
        mycc = gccsd.GCCSD(scf.addons.convert_to_ghf(sys_.mf))
    mycc.conv_tol, mycc.conv_tol_normt, mycc.verbose = conv_tol, conv_tol_normt, 0
    t0 = time.perf_counter()
    mycc.kernel()
    wall = time.perf_counter() - t0
    return {
        "e_corr": float(mycc.e_corr),
        "converged": bool(mycc.converged),
        "iterations": int(mycc.cycles),
        "total_s": wall,
    }


def lagrangian(program: sq.Program, lam: Mapping[str, Any]) -> Callable:
    """L(t; fixed) = E + ⟨λ1, R1⟩ + ⟨λ2, R2⟩, the CC Lagrangian whose gradient is what a
    CC gradient/Λ step needs (a scalar that depends on every output of the program)."""

    def fn(t: Mapping[str, Any], fixed: Mapping[str, Any]) -> Any:
        out = program({**fixed, **t})
        return out["E"] + jnp.vdot(lam["R1"], out["R1"]) + jnp.vdot(lam["R2"], out["R2"])

    return fn


def block_until_ready(x: Any) -> Any:
    return jax.block_until_ready(x)
