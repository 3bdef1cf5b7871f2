"""(T) over orbits of occupied block triples: memory-bounded at the unbatched FLOPs.

E(T) is a sum over occupied triples ``(i_1, i_2, i_3)`` of a summand built from ``W``,
an o³v³ value that is a sum of permuted reads of one contraction
``X = Σ_d g t`` (the permutation operator ``P(ijk)`` / ``Ŝ``). A batch loop over the
occupied indices (:func:`~sq_jax.cc.triples.triples_program` with ``batch=``) must
then build, for every batch ``(I, J, K)``, the blocks of ``X`` at all six permutations of
``(I, J, K)``: six times the unbatched work on the o³v⁴ term.

This module groups the block triples into **orbits** under permutation instead. With
the occupied orbitals cut into ``n`` blocks of ``block`` orbitals (the last padded
with orbitals whose amplitudes and integrals are zero), the sum over all ``n³`` block
triples is the sum, over each orbit ``{J, K, L}``, of the summand at every distinct
arrangement of that orbit. The orbit sum is written as equations over three *block
spaces* ``j``, ``k``, ``l`` (each ``block`` orbitals; the contracted occupied index
stays in ``i``) and compiled by :func:`sq_jax.compile` like any other: the six
arrangements read the same six ``X`` blocks under other labels, and the label-blind
common-subexpression folding builds each of them once. So each orbit costs what its
own blocks cost, and the whole loop costs the unbatched FLOPs (plus the padding).

Three orbit classes, each one program and one ``lax.fori_loop`` over its orbits:

=========  ===============  ============================  ======================
class      orbit            arrangements                  orbits
=========  ===============  ============================  ======================
distinct   J < K < L        the 6 permutations of (j,k,l) n(n−1)(n−2)/6
pair       {J, J, L}, J≠L   (j,j,l), (j,l,j), (l,j,j)     n(n−1)
diagonal   {J, J, J}        (j,j,j)                       n
=========  ===============  ============================  ======================

``6·n(n−1)(n−2)/6 + 3·n(n−1) + n = n³``: every block triple once.

Memory: the values of one orbit (o³v³ shrunk to ``block³``·v³) and the input blocks
sliced for it; the full amplitudes and integrals are the program's arguments. The
block is the largest one whose prediction (:attr:`TriplesOrbits.memory_bytes`) fits
``memory_budget``.

Example:
    >>> from sq_jax import cc
    >>> run = cc.ccsd(closed_shell=True)                 # shipped H2O/STO-3G, o = 5
    >>> orbits = cc.triples_orbits(run, block=2)         # 3 blocks, the last padded
    >>> print(orbits)
    TriplesOrbits(ccsd_t_cs: o = 5 in 3 blocks of 2; distinct 1, pair 6, diagonal 3 orbits)
    >>> abs(cc.ccsd_t(run, program=orbits) - cc.ccsd_t(run)) < 1e-12
    True
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import MemoryBudgetError, PlanError
from .._pipeline import compile as compile_program
from .._units import format_bytes, parse_bytes
from ..budget import default_step_cost
from ..expr import Equation, Index, Sum, Tensor, parse, relabel
from ..forest.inputs import InputSpec, bind_inputs, input_specs
from ..lower.aot import AotJit
from ..lower.program import Program
from .equations import load_equations

__all__ = ["OrbitClass", "TriplesOrbits", "orbit_equations", "orbit_loops"]

BLOCK_SPACES = ("j", "k", "l")
"""The keys of the three occupied block spaces (free in SeQuant's default registry)."""

_ARRANGEMENTS = {
    "distinct": tuple(itertools.permutations(BLOCK_SPACES)),
    "pair": (("j", "j", "l"), ("j", "l", "j"), ("l", "j", "j")),
    "diagonal": (("j", "j", "j"),),
}


def orbit_equations(
    equations: Sequence[Equation], arrangements: Sequence[tuple[str, ...]], *, output: str = "E"
) -> tuple[Equation, ...]:
    r"""The equations of one orbit sum: ``output`` summed over ``arrangements``.

    Each arrangement ``(s_1, s_2, s_3)`` puts the external occupied index ``i_k`` of the
    triple into block space ``s_k`` (``i_1`` → ``s_1_1`` …) in a renamed copy of every
    internal equation (``W`` → ``Wjkl``) and of the ``output`` term; other indices keep
    their spaces. ``output`` becomes the sum of its copies.

    Example:
        >>> eqs = parse("W{a1;i1} = g{a1;i1}\nE = W{a1;i1} t{a1;i1}")
        >>> for eq in orbit_equations(eqs, [("j",), ("k",)]):
        ...     print(eq)
        Wj{a_1;j_1}:N-C-S = g{a_1;j_1}:N-C-S
        Wk{a_1;k_1}:N-C-S = g{a_1;k_1}:N-C-S
        E = Wj{a_1;j_1}:N-C-S * t{a_1;j_1}:N-C-S + Wk{a_1;k_1}:N-C-S * t{a_1;k_1}:N-C-S
    """
    internal = [eq for eq in equations if eq.name != output]
    (target,) = [eq for eq in equations if eq.name == output]
    copies: list[Equation] = []
    terms = []
    for spaces in arrangements:
        mapping = {Index("i", k + 1): Index(s, k + 1) for k, s in enumerate(spaces)}
        names = {eq.name: eq.name + "".join(spaces) for eq in internal}
        for eq in internal:
            lhs = relabel(eq.lhs, mapping, names)
            assert isinstance(lhs, Tensor)
            copies.append(Equation(lhs, relabel(eq.rhs, mapping, names)))
        terms.append(relabel(target.rhs, mapping, names))
    return (*copies, Equation(target.lhs, Sum(tuple(terms))))


@dataclass(frozen=True)
class OrbitClass:
    """One class of orbits: its program and the block numbers of its orbits."""

    kind: str
    """``"distinct"``, ``"pair"`` or ``"diagonal"``."""
    program: Program
    """The compiled orbit sum (unbatched; its spaces ``j``, ``k``, ``l`` are blocks)."""
    orbits: np.ndarray
    """One row per orbit: the block number of each block space the program reads."""
    spaces: tuple[str, ...]
    """The block spaces of the columns of ``orbits``."""

    @property
    def flops(self) -> int:
        """FLOPs of all orbits of this class."""
        return self.program.flops * len(self.orbits)

    def sliced_bytes(self) -> int:
        """Bytes of the input blocks sliced for one orbit (8-byte floats)."""
        specs = input_specs(self.program.schedule.annotated.forest)
        return sum(8 * int(np.prod(s.shape)) for s in specs if _is_blocked(s))


def _is_blocked(spec: InputSpec) -> bool:
    return any(s in BLOCK_SPACES for s in spec.slot_spaces)


def _orbits(kind: str, n: int) -> tuple[np.ndarray, tuple[str, ...]]:
    if kind == "distinct":
        rows = list(itertools.combinations(range(n), 3))
        return np.array(rows, dtype=np.int32).reshape(-1, 3), BLOCK_SPACES
    if kind == "pair":
        rows = [(j, m) for j in range(n) for m in range(n) if j != m]
        return np.array(rows, dtype=np.int32).reshape(-1, 2), ("j", "l")
    return np.arange(n, dtype=np.int32).reshape(-1, 1), ("j",)


def _base_key(spec: InputSpec) -> str:
    """The block key of the full-occupied block a blocked input is cut from."""
    label, _, rest = spec.block_key.partition("{")
    groups = rest[:-1].split(";")
    base = [",".join("i" if s in BLOCK_SPACES else s for s in g.split(",")) for g in groups]
    return f"{label}{{{';'.join(base)}}}" if rest else label


@dataclass(frozen=True)
class TriplesOrbits:
    """E(T) as loops over orbits of occupied block triples (see the module docstring).

    Build it with :func:`sq_jax.cc.triples_orbits` (or :func:`orbit_loops`);
    :meth:`evaluate` runs it on the base program's inputs.
    """

    name: str
    """The (T) equation set (``ccsd_t_cs`` or ``ccsd_t_so``)."""
    nocc: int
    """Occupied orbitals of the run."""
    block: int
    """Occupied orbitals per block."""
    classes: tuple[OrbitClass, ...]
    """The orbit classes present (``distinct`` needs 3 blocks, ``pair`` 2)."""
    base: Program
    """The plain (T) program: its inputs are what :meth:`energy` cuts the blocks from."""

    @property
    def nblocks(self) -> int:
        """Number of occupied blocks."""
        return -(-self.nocc // self.block)

    @property
    def flops(self) -> int:
        """FLOPs of all orbits (padding included)."""
        return sum(c.flops for c in self.classes)

    @property
    def orbit_count(self) -> int:
        """Orbits of all classes (loop iterations)."""
        return sum(len(c.orbits) for c in self.classes)

    @property
    def memory_bytes(self) -> int:
        """Predicted temporaries: the largest orbit program's plus its sliced inputs."""
        return max(c.program.memory_bytes + c.sliced_bytes() for c in self.classes)

    def __str__(self) -> str:
        counts = ", ".join(f"{c.kind} {len(c.orbits)}" for c in self.classes)
        return (
            f"TriplesOrbits({self.name}: o = {self.nocc} in {self.nblocks} blocks of "
            f"{self.block}; {counts} orbits)"
        )

    def evaluate(self, inputs: Mapping[str, Any]) -> jax.Array:
        """E(T) from the inputs of :attr:`base` (amplitudes, integrals, energies).

        Example:
            >>> from sq_jax import cc
            >>> run = cc.ccsd(closed_shell=True)
            >>> orbits = cc.triples_orbits(run, block=3)
            >>> e_t = orbits.evaluate(cc.triples_inputs(run, orbits.base))
            >>> abs(float(e_t) - cc.ccsd_t(run)) < 1e-12
            True
        """
        return self.function(self.arguments(inputs))

    @functools.cached_property
    def function(self) -> AotJit:
        """E(T) of :meth:`arguments`: one jitted program, one ``fori_loop`` per class.

        Compiled ahead of time with sq_jax's XLA options at top level
        (:class:`~sq_jax.lower.aot.AotJit`), like a :class:`~sq_jax.lower.program.Program`.
        """
        return AotJit(_energy_function(self))

    def memory_analysis(self, inputs: Mapping[str, Any]) -> Any:
        """XLA's memory figures of the compiled loops (``temp_size_in_bytes`` …)."""
        return self.function.compiled(self.arguments(inputs)).memory_analysis()

    def arguments(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """The base blocks of ``inputs``, occupied axes padded to ``nblocks · block``.

        Padded amplitudes and integrals are zero, so every term vanishes there; padded
        orbital energies repeat the highest occupied one, so the denominators stay finite.
        """
        forest = self.base.schedule.annotated.forest
        blocks = bind_inputs(forest, inputs, xp=jnp)
        size = self.nblocks * self.block
        out: dict[str, Any] = {}
        for spec in input_specs(forest):
            x = blocks[spec.block_key]
            if spec.is_scalar_variable:
                out[spec.block_key] = x
                continue
            widths = [
                (0, size - n if s == "i" else 0)
                for s, n in zip(spec.slot_spaces, x.shape, strict=True)
            ]
            if spec.label == "ε":
                out[spec.block_key] = jnp.pad(x, widths, mode="edge")
            else:
                out[spec.block_key] = jnp.pad(x, widths)
        return out


def _energy_function(orbits: TriplesOrbits) -> Callable[[Mapping[str, Any]], jax.Array]:
    """E(T) of the padded base blocks (not jitted: :attr:`TriplesOrbits.function` is)."""
    block, nocc = orbits.block, orbits.nocc

    def cut(base: Mapping[str, Any], spec: InputSpec, starts: Mapping[str, Any]) -> Any:
        x = base[_base_key(spec)]
        for axis, space in enumerate(spec.slot_spaces):
            if space in BLOCK_SPACES:
                x = jax.lax.dynamic_slice_in_dim(x, starts[space] * block, block, axis=axis)
            elif space == "i":
                x = jax.lax.slice_in_dim(x, 0, nocc, axis=axis)
        return x

    def run_class(cls: OrbitClass, base: Mapping[str, Any], total: jax.Array) -> jax.Array:
        specs = input_specs(cls.program.schedule.annotated.forest)
        table = jnp.asarray(cls.orbits)

        def body(row: Any, acc: jax.Array) -> jax.Array:
            starts = {s: table[row, c] for c, s in enumerate(cls.spaces)}
            inputs = {s.block_key: cut(base, s, starts) for s in specs}
            return acc + cls.program.jitted(inputs)["E"]

        return jax.lax.fori_loop(0, len(cls.orbits), body, total)

    def energy(base: Mapping[str, Any]) -> jax.Array:
        total = jnp.zeros((), dtype=jnp.float64)
        for cls in orbits.classes:
            total = run_class(cls, base, total)
        return total

    return energy


def orbit_loops(
    base: Program,
    name: str,
    *,
    block: int | None = None,
    memory_budget: int | str | None = None,
    step_cost: float | None = None,
) -> TriplesOrbits:
    """Orbit loops for the plain (T) program ``base`` of equation set ``name``.

    Args:
        base: the unbatched (T) program (:func:`~sq_jax.cc.triples.triples_program`).
        name: its equation set, ``"ccsd_t_cs"`` or ``"ccsd_t_so"``.
        block: occupied orbitals per block (1 … o).
        memory_budget: bytes (or ``"2 GiB"``) for the temporaries: among the block
            sizes whose prediction fits, the cheapest in FLOPs plus ``step_cost`` per
            orbit (the planner's price of a step, :func:`sq_jax.budget.default_step_cost`
            when ``None``). Exactly one of ``block`` and ``memory_budget``.
        step_cost: FLOPs charged per orbit when choosing the block for a budget.

    Raises:
        MemoryBudgetError: not even one occupied orbital per block fits.
        PlanError: ``block`` out of range, or both or neither argument given.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.cc.equations import load_equations
        >>> base = sq.compile(load_equations("ccsd_t_cs"), sq.Spaces(i=21, a=93), outputs=("E",))
        >>> orbits = orbit_loops(base, "ccsd_t_cs", memory_budget="6 GiB")
        >>> orbits.block, round(orbits.flops / base.flops, 3)
        (3, 1.008)
    """
    if (block is None) == (memory_budget is None):
        raise PlanError(
            "the (T) orbit loops need exactly one of block= (occupied orbitals per block) "
            f"and memory_budget=; got block={block!r}, memory_budget={memory_budget!r}."
        )
    nocc = base.schedule.annotated.forest.spaces.extent("i")
    if block is not None:
        if isinstance(block, bool) or not isinstance(block, int) or not 1 <= block <= nocc:
            raise PlanError(
                f"block={block!r}: give the occupied orbitals per block as an int from 1 to "
                f"the number of occupied orbitals, {nocc}."
            )
        return _build(name, base, block)
    budget = parse_bytes(memory_budget)
    price = default_step_cost() if step_cost is None else step_cost
    tried: list[str] = []
    fitting: list[TriplesOrbits] = []
    for size in _block_sizes(nocc):
        orbits = _build(name, base, size)
        if orbits.memory_bytes > budget:
            tried.append(f"{size}: {format_bytes(orbits.memory_bytes)}")
            continue
        fitting.append(orbits)
        if len(fitting) == 3:  # smaller blocks only add orbits; padding is what varies
            break
    if not fitting:
        raise MemoryBudgetError(
            f"no occupied block size fits memory_budget={format_bytes(budget)} for (T) "
            f"(predicted temporaries per block size: {'; '.join(tried)}). Raise the budget."
        )
    return min(fitting, key=lambda o: o.flops + price * o.orbit_count)


def _block_sizes(nocc: int) -> list[int]:
    """Distinct block sizes ``ceil(o / n)``, largest first."""
    sizes: list[int] = []
    for n in range(1, nocc + 1):
        size = -(-nocc // n)
        if size not in sizes:
            sizes.append(size)
    return sizes


def _build(name: str, base: Program, block: int) -> TriplesOrbits:
    equations = parse(load_equations(name))
    spaces = base.schedule.annotated.forest.spaces
    nocc = spaces.extent("i")
    for key in BLOCK_SPACES:
        spaces = spaces.with_space(key, extent=block, description="occupied block of (T)")
    nblocks = -(-nocc // block)
    classes = []
    for kind, arrangements in _ARRANGEMENTS.items():
        table, used = _orbits(kind, nblocks)
        if not len(table):
            continue
        eqs = orbit_equations(equations, arrangements)
        program = compile_program(eqs, spaces, outputs=("E",))
        classes.append(OrbitClass(kind, program, table, used))
    return TriplesOrbits(name, nocc, block, tuple(classes), base)
