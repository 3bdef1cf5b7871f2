"""(T) over orbits of block triples: memory-bounded at the unbatched FLOPs.

E(T) is a sum over index triples (occupied ``i_1, i_2, i_3``, or virtual ``a_1, a_2,
a_3``) of a summand built from ``W``, an o³v³ value that is a sum of permuted reads of
one contraction ``X = Σ_d g t`` (the permutation operator ``P(ijk)`` / ``Ŝ``). A batch
loop over those indices (:func:`~sq_jax.cc.triples.triples_program` with ``batch=``)
must build, for every batch ``(I, J, K)``, the blocks of ``X`` at all six permutations
of ``(I, J, K)``: up to six times the unbatched work on the o³v⁴ term.

This module groups the block triples into **orbits** under permutation instead. With the
space cut into ``n`` blocks (the last padded with orbitals whose amplitudes and
integrals are zero, and whose energies repeat the last real one), the sum over all
``n³`` block triples is, orbit by orbit, ``weight · Σ_{block triple} Σ_σ f(σ·)``: the
summand symmetrised over the six permutations σ of the triple, over one block triple of
the orbit. ``W``, ``V`` (and the spin-orbital ``Z``) are unchanged by a simultaneous
permutation of their (virtual, occupied) slot pairs (:data:`PAIR_SYMMETRIC`), so every σ
reads the *same* block of them, under permuted labels of the other space: one ``W`` and
one ``V`` per orbit. The orbit's equations (:func:`orbit_equations`, over three *block
spaces* ``j``, ``k``, ``l``) are compiled by :func:`sq_jax.compile` like any other.

Three orbit classes, each one program and one ``lax.fori_loop`` over its orbits:

=========  ===============  ==================  =================
class      orbit            block spaces        orbits  (weight)
=========  ===============  ==================  =================
distinct   J < K < L        (j, k, l)           n(n−1)(n−2)/6 (1)
pair       {J, J, L}, J≠L   (j, j, l)           n(n−1)  (1/2)
diagonal   {J, J, J}        (j, j, j)           n       (1/6)
=========  ===============  ==================  =================

Memory: the values of one orbit (o³v³ shrunk to ``block³``·o³ with virtual blocks) and
the input blocks sliced for it; the full amplitudes and integrals are the program's
arguments. Under a budget, the block is chosen among those whose prediction
(:attr:`TriplesOrbits.memory_bytes`) fits the budget and :data:`WORKING_SET`.

When the output is a scalar, the σ copies are renamed canonically in the other space's
summed indices and equal copies are summed once. The closed-shell set is written with a
pair-symmetric summand (``E = 1/3 Y Z``), so each orbit reads one block of ``Y`` and
``Z`` once instead of 36 transposed products. The element-wise work beyond the GEMMs,
which dominated an orbit on CPU, shrank: 0.6 CPU ms per orbit at benzene sizes
(virtual blocks of 1), from 1.9.

XLA runs one orbit's small GEMMs and loop fusions on one core.
:meth:`TriplesOrbits.evaluate` runs :attr:`TriplesOrbits.workers` shares of the orbits
(each class's rows cut evenly) concurrently, on threads, with one compiled program whose
loop bounds are arguments.
Benzene/cc-pVDZ on 2 cores: 37.5 s against PySCF ``ccsd_t``'s 69.9 s (``bench/README.md``,
"(T)").

Example:
    >>> from sq_jax import cc
    >>> run = cc.ccsd(closed_shell=True)                 # shipped H2O/STO-3G, v = 2
    >>> orbits = cc.triples_orbits(run, block=1)
    >>> print(orbits)
    TriplesOrbits(ccsd_t_cs: a = 2 in 2 blocks of 1; pair 2, diagonal 2 orbits)
    >>> abs(cc.ccsd_t(run, program=orbits) - cc.ccsd_t(run)) < 1e-12
    True
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import ExpressionError, MemoryBudgetError, PlanError
from .._pipeline import compile as compile_program
from .._units import format_bytes, parse_bytes
from ..budget import default_step_cost
from ..budget.model import step_terms
from ..expr import Equation, Expr, Index, Product, Sum, Tensor, parse, relabel
from ..expr.nodes import walk
from ..forest.denominators import DENOMINATOR
from ..forest.inputs import InputSpec, bind_inputs, input_specs
from ..lower.aot import AotJit
from ..lower.program import Program
from .equations import load_equations

__all__ = ["OrbitClass", "TriplesOrbits", "default_workers", "orbit_equations", "orbit_loops"]

BLOCK_SPACES = ("j", "k", "l")
"""The keys of the three block spaces (free in SeQuant's default registry)."""

_CLASSES = {  # the block spaces of (i_1, i_2, i_3) and the orbit's share of Σ_σ f(σ·)
    "distinct": (BLOCK_SPACES, Fraction(1)),
    "pair": (("j", "j", "l"), Fraction(1, 2)),
    "diagonal": (("j", "j", "j"), Fraction(1, 6)),
}

PAIR_SYMMETRIC = {
    "ccsd_t_cs": frozenset({"W", "V", "Y", "Z", "Δ"}),
    "ccsd_t_so": frozenset({"W", "V", "Z", "Δ"}),
}
"""Per (T) set: the tensors unchanged by a simultaneous permutation of their
(virtual, occupied) slot pairs (``W_{abc}^{ijk} = W_{bac}^{jik}``): ``Ŝ`` sums and
``P(i/jk)P(a/bc)`` antisymmetrisations, and the denominator."""

WORKING_SET = 4 * 2**20
"""Largest predicted temporaries of one orbit that a budget route chooses (bytes).

Larger orbits leave the caches, and XLA's element-wise passes over their values (the
transposed reads of ``W``, ``V``, ``Y``) gain nothing from the larger GEMMs.
Benzene/cc-pVDZ closed-shell (T) on a quiet machine (random inputs, the first orbits of
the distinct class, two workers), virtual blocks of 1, 2 and 3 (2.5, 10 and 29 MiB per
orbit): 39–43, 37–50 and 37–38 GFLOP per second. Before the pair-symmetric summand
(one worker): 6.9, 4.3 and 3.3 GFLOP per CPU second."""


def orbit_equations(
    equations: Sequence[Equation],
    blocks: tuple[str, str, str],
    *,
    symmetric: frozenset[str],
    weight: Fraction = Fraction(1),
    space: str = "i",
    output: str = "E",
) -> tuple[Equation, ...]:
    r"""The equations of one orbit: ``weight · Σ_σ f(σ(i_1, i_2, i_3))`` over one block.

    ``output`` is a sum over a triple ``(i_1, i_2, i_3)`` of ``space`` (``i`` or ``a``)
    of a summand ``f``. Summed over the blocks of one orbit of block triples, that is
    ``weight`` times the summand symmetrised over the six permutations σ of the triple,
    summed over one block triple: ``blocks`` gives the block space of each index
    (weight 1 for three distinct blocks, 1/2 for two equal, 1/6 for one).

    Each σ copy reads the ``symmetric`` tensors (pair-symmetric, see
    :data:`PAIR_SYMMETRIC`) with their slot pairs sorted back into triple order, so every
    copy reads the *same* block of ``W`` and ``V`` (under permuted labels of the other
    space: transposes). Internal results that are not symmetric are inlined (they may
    not sum indices of their own). The symmetric internal equations are kept, with the
    triple in its blocks and their own reads of symmetric tensors sorted. When ``output``
    is a scalar, each copy's summed indices of the other space are renamed in a canonical
    order, and equal copies are summed once.

    Example:
        >>> eqs = parse("W{a1,a2;i1,i2} = g{a1,a2;i1,i2} + g{a2,a1;i2,i1}\n"
        ...             "E = W{a1,a2;i1,i2} t{a1,a2;i1,i2}")
        >>> for eq in orbit_equations(eqs, ("j", "k", "l"), symmetric=frozenset("W")):
        ...     print(str(eq).replace(":N-C-S", ""))
        W{a_1,a_2;j_1,k_2} = g{a_1,a_2;j_1,k_2} + g{a_2,a_1;k_2,j_1}
        E = W{a_1,a_2;j_1,k_2} * t{a_1,a_2;j_1,k_2} + W{a_1,a_2;j_1,k_2} * t{a_2,a_1;k_2,j_1}

    Copies equal up to the names of the other space's summed indices are summed once:

        >>> eqs = parse("E = W{a1,a2;i1,i2} W{a1,a2;i1,i2}")
        >>> for eq in orbit_equations(eqs, ("j", "j", "l"), symmetric=frozenset("W")):
        ...     print(str(eq).replace(":N-C-S", ""))
        E = 2 W{a_1,a_2;j_1,j_2} * W{a_1,a_2;j_1,j_2}
    """
    triple = [Index(space, k + 1) for k in range(3)]
    (target,) = [eq for eq in equations if eq.name == output]
    inline = {eq.name: eq for eq in equations if eq.name != output and eq.name not in symmetric}
    present = {ix for ix in _indices(target.rhs) if ix in triple}
    scalar = not _indices(target.lhs)  # then the other space's indices are all dummies
    copies: dict[str, tuple[int, Expr]] = {}  # equal σ copies are summed as one
    for perm in itertools.permutations(sorted(present, key=lambda ix: ix.ordinal)):
        sigma = dict(zip(sorted(present, key=lambda ix: ix.ordinal), perm, strict=True))
        body = _sort_pairs(_inline(relabel(target.rhs, sigma), inline), symmetric, space)
        if scalar:
            body = _sort_pairs(_canonical_dummies(body, symmetric, space), symmetric, space)
        count, _ = copies.get(str(body), (0, body))
        copies[str(body)] = (count + 1, body)
    terms = [_times(n, body) for n, body in copies.values()]
    rhs: Expr = Sum(tuple(terms)) if len(terms) > 1 else terms[0]
    if weight != 1:
        rhs = Product(weight, (rhs,))
    to_blocks = {ix: Index(s, ix.ordinal) for ix, s in zip(triple, blocks, strict=True)}
    kept = [eq for eq in equations if eq.name != output and eq.name in symmetric]
    out = [
        Equation(
            relabel(eq.lhs, to_blocks), relabel(_sort_pairs(eq.rhs, symmetric, space), to_blocks)
        )
        for eq in kept
    ]
    return (*out, Equation(target.lhs, relabel(rhs, to_blocks)))


def _times(count: int, expr: Expr) -> Expr:
    if count == 1:
        return expr
    if isinstance(expr, Product):
        return Product(count * expr.scalar, expr.factors)
    return Product(Fraction(count), (expr,))


def _indices(expr: Expr) -> list[Index]:
    return [ix for node in walk(expr) if isinstance(node, Tensor) for ix in node.indices]


def _inline(expr: Expr, definitions: Mapping[str, Equation]) -> Expr:
    """Reads of ``definitions`` replaced by their right-hand sides, relabeled to the read."""
    if isinstance(expr, Tensor) and expr.label in definitions:
        eq = definitions[expr.label]
        assert isinstance(eq.lhs, Tensor)
        summed = set(_indices(eq.rhs)) - set(eq.lhs.indices)
        if summed:
            raise ExpressionError(
                f"cannot inline `{eq.name}` into the (T) orbit equations: it sums "
                f"{sorted(map(str, summed))}; declare it pair-symmetric or write it inline."
            )
        mapping = dict(zip(eq.lhs.indices, expr.indices, strict=True))
        return _inline(relabel(eq.rhs, mapping), definitions)
    if isinstance(expr, Product):
        return Product(expr.scalar, tuple(_inline(f, definitions) for f in expr.factors))
    if isinstance(expr, Sum):
        return Sum(tuple(_inline(t, definitions) for t in expr.terms))
    return expr


def _canonical_dummies(expr: Expr, symmetric: frozenset[str], space: str) -> Expr:
    """``expr`` with its summed indices of the other space renamed in a canonical order.

    The indices paired with the triple in the first pair-symmetric read are renamed to
    their sorted order (a permutation of summed indices, so the value is unchanged).
    After :func:`_sort_pairs`, σ copies that differ only by such a renaming become equal
    and are summed once: ``Y{a_1,a_2;i_2,i_1} Z{a_1,a_2;i_2,i_1}`` →
    ``Y{a_1,a_2;i_1,i_2} Z{a_1,a_2;i_1,i_2}``.
    """
    for node in walk(expr):
        if isinstance(node, Tensor) and node.label in symmetric and node.label != DENOMINATOR:
            side = node.bra if node.ket and node.ket[0].space == space else node.ket
            if len(set(side)) != len(side) or any(ix.space == space for ix in side):
                return expr
            ordered = sorted(side, key=lambda ix: ix.ordinal)
            return relabel(expr, dict(zip(side, ordered, strict=True)))
    return expr


def _sort_pairs(expr: Expr, symmetric: frozenset[str], space: str) -> Expr:
    """Reads of pair-symmetric tensors with their (bra, ket) slot pairs sorted.

    The order is that of each pair's ``space`` index:
    ``W{a_2,a_1,a_3;i_2,i_1,i_3}`` → ``W{a_1,a_2,a_3;i_1,i_2,i_3}``. The denominator
    depends on its bra and its ket as sets, so each side is sorted on its own: every
    read of it is then one value.
    """
    if isinstance(expr, Tensor) and expr.label == DENOMINATOR:
        return dataclasses.replace(
            expr,
            bra=tuple(sorted(expr.bra, key=lambda ix: ix.ordinal)),
            ket=tuple(sorted(expr.ket, key=lambda ix: ix.ordinal)),
        )
    if isinstance(expr, Tensor) and expr.label in symmetric:
        pairs = list(zip(expr.bra, expr.ket, strict=True))
        side = 1 if expr.ket and expr.ket[0].space == space else 0
        pairs.sort(key=lambda pair: pair[side].ordinal)
        return dataclasses.replace(
            expr, bra=tuple(p[0] for p in pairs), ket=tuple(p[1] for p in pairs)
        )
    if isinstance(expr, Product):
        return Product(expr.scalar, tuple(_sort_pairs(f, symmetric, space) for f in expr.factors))
    if isinstance(expr, Sum):
        return Sum(tuple(_sort_pairs(t, symmetric, space) for t in expr.terms))
    return expr


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

    @property
    def steps(self) -> int:
        """Executed steps of all orbits: the program's builds and one loop step, per orbit."""
        builds = sum(step_terms(self.program.schedule, ()).values())
        return (builds + 1) * len(self.orbits)

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


def _base_key(spec: InputSpec, space: str) -> str:
    """The block key of the base block (blocks of ``space`` whole) an input is cut from."""
    label, _, rest = spec.block_key.partition("{")
    groups = rest[:-1].split(";")
    base = [",".join(space if s in BLOCK_SPACES else s for s in g.split(",")) for g in groups]
    return f"{label}{{{';'.join(base)}}}" if rest else label


@dataclass(frozen=True)
class TriplesOrbits:
    """E(T) as loops over orbits of block triples (see the module docstring).

    Build it with :func:`sq_jax.cc.triples_orbits` (or :func:`orbit_loops`);
    :meth:`evaluate` runs it on the base program's inputs.
    """

    name: str
    """The (T) equation set (``ccsd_t_cs`` or ``ccsd_t_so``)."""
    space: str
    """The space cut into blocks: ``"i"`` (occupied) or ``"a"`` (virtual)."""
    extent: int
    """Orbitals of that space."""
    block: int
    """Orbitals per block."""
    classes: tuple[OrbitClass, ...]
    """The orbit classes present (``distinct`` needs 3 blocks, ``pair`` 2)."""
    base: Program
    """The plain (T) program: its inputs are what :meth:`evaluate` cuts the blocks from."""
    workers: int = 1
    """Concurrent calls of :attr:`function` in :meth:`evaluate`, each over its share of
    every class's orbits (threads: one orbit's XLA loops run on one core)."""

    @property
    def nblocks(self) -> int:
        """Number of blocks."""
        return -(-self.extent // self.block)

    @property
    def flops(self) -> int:
        """FLOPs of all orbits (padding included)."""
        return sum(c.flops for c in self.classes)

    @property
    def steps(self) -> int:
        """Executed steps (builds and loop iterations) of all orbits."""
        return sum(c.steps for c in self.classes)

    @property
    def orbit_count(self) -> int:
        """Orbits of all classes (loop iterations)."""
        return sum(len(c.orbits) for c in self.classes)

    @property
    def memory_bytes(self) -> int:
        """Predicted temporaries of all workers.

        One worker's are the largest orbit program's plus its sliced inputs.
        """
        return self.workers * max(c.program.memory_bytes + c.sliced_bytes() for c in self.classes)

    def __str__(self) -> str:
        counts = ", ".join(f"{c.kind} {len(c.orbits)}" for c in self.classes)
        return (
            f"TriplesOrbits({self.name}: {self.space} = {self.extent} in {self.nblocks} blocks of "
            f"{self.block}; {counts} orbits)"
        )

    def evaluate(self, inputs: Mapping[str, Any]) -> jax.Array:
        """E(T) from the inputs of :attr:`base` (amplitudes, integrals, energies).

        Example:
            >>> from sq_jax import cc
            >>> run = cc.ccsd(closed_shell=True)
            >>> orbits = cc.triples_orbits(run, block=1)
            >>> e_t = orbits.evaluate(cc.triples_inputs(run, orbits.base))
            >>> abs(float(e_t) - cc.ccsd_t(run)) < 1e-12
            True
        """
        arguments = self.arguments(inputs)
        shares = self.shares()
        if len(shares) == 1 or any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(inputs)):
            return sum((self.function(arguments, b) for b in shares), jnp.zeros(()))
        # XLA runs one orbit's small GEMMs and element-wise loops on one core: the shares
        # run concurrently on threads (JAX releases the GIL while a program runs), on the
        # one executable compiled here first (threads would race to compile it each).
        self.function.compiled(arguments, shares[0])
        with concurrent.futures.ThreadPoolExecutor(len(shares)) as pool:
            parts = list(
                pool.map(lambda b: self.function(arguments, b).block_until_ready(), shares)
            )
        return sum(parts[1:], parts[0])

    def shares(self) -> list[np.ndarray]:
        """The orbit ranges of each worker: ``[start, stop)`` rows of every class.

        Example:
            >>> from sq_jax import cc
            >>> orbits = cc.triples_orbits(cc.ccsd(closed_shell=True), block=1, workers=2)
            >>> [share.tolist() for share in orbits.shares()]
            [[[0, 1], [0, 1]], [[1, 2], [1, 2]]]
        """
        cuts = [
            np.linspace(0, len(c.orbits), self.workers + 1).round().astype(np.int32)
            for c in self.classes
        ]
        return [
            np.array([[c[w], c[w + 1]] for c in cuts], dtype=np.int32) for w in range(self.workers)
        ]

    @functools.cached_property
    def function(self) -> AotJit:
        """E(T) of :meth:`arguments` over one share of the orbits (:meth:`shares`).

        One jitted program, one ``fori_loop`` per class over its rows of the share.

        Compiled ahead of time with sq_jax's XLA options at top level
        (:class:`~sq_jax.lower.aot.AotJit`), like a :class:`~sq_jax.lower.program.Program`.
        """
        return AotJit(_energy_function(self))

    def memory_analysis(self, inputs: Mapping[str, Any]) -> Any:
        """XLA's memory figures of the compiled loops (``temp_size_in_bytes`` …).

        They are one worker's: :attr:`workers` of them run at once.
        """
        return self.function.compiled(self.arguments(inputs), self.shares()[0]).memory_analysis()

    def arguments(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """The base blocks of ``inputs``, axes of :attr:`space` padded to ``nblocks · block``.

        Padded amplitudes and integrals are zero, so every term vanishes there; padded
        orbital energies repeat the last real one, so the denominators stay finite.
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
                (0, size - n if s == self.space else 0)
                for s, n in zip(spec.slot_spaces, x.shape, strict=True)
            ]
            if spec.label == "ε":
                out[spec.block_key] = jnp.pad(x, widths, mode="edge")
            else:
                out[spec.block_key] = jnp.pad(x, widths)
        return out


def _energy_function(orbits: TriplesOrbits) -> Callable[[Mapping[str, Any]], jax.Array]:
    """E(T) of the padded base blocks (not jitted: :attr:`TriplesOrbits.function` is)."""
    block, extent, cut_space = orbits.block, orbits.extent, orbits.space

    def cut(base: Mapping[str, Any], spec: InputSpec, starts: Mapping[str, Any]) -> Any:
        x = base[_base_key(spec, cut_space)]
        for axis, space in enumerate(spec.slot_spaces):
            if space in BLOCK_SPACES:
                x = jax.lax.dynamic_slice_in_dim(x, starts[space] * block, block, axis=axis)
            elif space == cut_space:
                x = jax.lax.slice_in_dim(x, 0, extent, axis=axis)
        return x

    def run_class(
        cls: OrbitClass, base: Mapping[str, Any], total: jax.Array, rows: jax.Array
    ) -> jax.Array:
        specs = input_specs(cls.program.schedule.annotated.forest)
        table = jnp.asarray(cls.orbits)

        def body(row: Any, acc: jax.Array) -> jax.Array:
            starts = {s: table[row, c] for c, s in enumerate(cls.spaces)}
            inputs = {s.block_key: cut(base, s, starts) for s in specs}
            return acc + cls.program.jitted(inputs)["E"]

        return jax.lax.fori_loop(rows[0], rows[1], body, total)

    def energy(base: Mapping[str, Any], share: jax.Array) -> jax.Array:
        total = jnp.zeros((), dtype=jnp.float64)
        for k, cls in enumerate(orbits.classes):
            total = run_class(cls, base, total, share[k])
        return total

    return energy


def orbit_loops(
    base: Program,
    name: str,
    *,
    block: int | None = None,
    memory_budget: int | str | None = None,
    space: str | None = None,
    step_cost: float | None = None,
    workers: int | None = None,
) -> TriplesOrbits:
    """Orbit loops for the plain (T) program ``base`` of equation set ``name``.

    Args:
        base: the unbatched (T) program (:func:`~sq_jax.cc.triples.triples_program`).
        name: its equation set, ``"ccsd_t_cs"`` or ``"ccsd_t_so"``.
        block: orbitals of ``space`` per block.
        memory_budget: bytes (or ``"2 GiB"``) for the temporaries: among the block
            sizes whose prediction fits both the budget and :data:`WORKING_SET`, the
            cheapest in FLOPs plus ``step_cost`` per executed step (builds and loop
            iterations: the planner's price, :func:`sq_jax.budget.default_step_cost`
            when ``None``). Exactly one of
            ``block`` and ``memory_budget``.
        space: the space cut into blocks, ``"a"`` (virtual triples) or ``"i"``
            (occupied triples). ``None``: ``"a"`` (measured faster), and under a budget
            that not even one virtual orbital per block fits, ``"i"``.
        step_cost: FLOPs charged per executed step when choosing the block.
        workers: concurrent shares of the orbits (:attr:`TriplesOrbits.workers`).
            ``None``: one per CPU core on the CPU backend (fewer when the budget holds
            fewer copies of one orbit's temporaries), one on accelerators.

    Raises:
        MemoryBudgetError: not even one orbital per block fits.
        PlanError: ``block`` or ``workers`` out of range, or both or neither of
            ``block`` and ``memory_budget`` given.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.cc.equations import load_equations
        >>> base = sq.compile(load_equations("ccsd_t_cs"), sq.Spaces(i=21, a=93), outputs=("E",))
        >>> orbits = orbit_loops(base, "ccsd_t_cs", block=3, space="i")
        >>> round(orbits.flops / base.flops, 3), orbits.memory_bytes < base.memory_bytes / 50
        (0.918, True)
    """
    if (block is None) == (memory_budget is None):
        raise PlanError(
            "the (T) orbit loops need exactly one of block= (orbitals per block) "
            f"and memory_budget=; got block={block!r}, memory_budget={memory_budget!r}."
        )
    if space not in ("i", "a", None):
        raise PlanError(f"space={space!r}: the (T) orbit loops cut 'i' or 'a' into blocks.")
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
    ):
        raise PlanError(f"workers={workers!r}: give the concurrent shares as an int ≥ 1.")
    if block is not None:
        space = space or "a"
        extent = base.schedule.annotated.forest.spaces.extent(space)
        if isinstance(block, bool) or not isinstance(block, int) or not 1 <= block <= extent:
            raise PlanError(
                f"block={block!r}: give the orbitals per block of space {space!r} as an int "
                f"from 1 to its extent, {extent}."
            )
        return _build(name, base, block, space, workers or default_workers())
    if space is None:
        try:
            return orbit_loops(base, name, memory_budget=memory_budget, space="a", workers=workers)
        except MemoryBudgetError:
            return orbit_loops(base, name, memory_budget=memory_budget, space="i", workers=workers)
    extent = base.schedule.annotated.forest.spaces.extent(space)
    budget = parse_bytes(memory_budget)
    price = default_step_cost() if step_cost is None else step_cost
    smallest = _build(name, base, 1, space, 1)
    if smallest.memory_bytes > budget:
        raise MemoryBudgetError(
            f"no block size of space {space!r} fits memory_budget={format_bytes(budget)} for "
            f"(T): one orbital per block needs {format_bytes(smallest.memory_bytes)} of "
            "temporaries. Raise the budget."
        )
    count = workers or max(1, min(default_workers(), budget // smallest.memory_bytes))
    # Blocks larger than a working set stop paying: per-orbit values leave the caches and
    # XLA's element-wise passes over them (transposes of W and V) dominate the GEMMs.
    cap = min(budget // count, WORKING_SET)
    fitting = [smallest]
    for size in _block_sizes(extent)[:-1]:
        if smallest.memory_bytes * size**2 > 2 * cap:  # too big even growing as size²
            continue
        orbits = _build(name, base, size, space, 1)
        if orbits.memory_bytes <= cap:
            fitting.append(orbits)
            if len(fitting) == 4:  # smaller blocks only add orbits; padding is what varies
                break
    chosen = min(fitting, key=lambda o: o.flops + price * o.steps)
    return dataclasses.replace(chosen, workers=count)


def default_workers() -> int:
    """Concurrent orbit shares by default.

    On the CPU backend, the cores this process may use (one orbit's loops run on one
    core); one on accelerators.

    Example:
        >>> default_workers() >= 1
        True
    """
    if jax.default_backend() != "cpu":
        return 1
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1


def _block_sizes(extent: int) -> list[int]:
    """Distinct block sizes ``ceil(extent / n)``, largest first."""
    sizes: list[int] = []
    for n in range(1, extent + 1):
        size = -(-extent // n)
        if size not in sizes:
            sizes.append(size)
    return sizes


def _build(name: str, base: Program, block: int, space: str, workers: int) -> TriplesOrbits:
    equations = parse(load_equations(name))
    spaces = base.schedule.annotated.forest.spaces
    extent = spaces.extent(space)
    for key in BLOCK_SPACES:
        spaces = spaces.with_space(key, extent=block, description=f"block of `{space}` in (T)")
    nblocks = -(-extent // block)
    classes = []
    for kind, (blocks, weight) in _CLASSES.items():
        table, used = _orbits(kind, nblocks)
        if not len(table):
            continue
        eqs = orbit_equations(
            equations, blocks, symmetric=PAIR_SYMMETRIC[name], weight=weight, space=space
        )
        program = compile_program(eqs, spaces, outputs=("E",))
        classes.append(OrbitClass(kind, program, table, used))
    return TriplesOrbits(name, space, extent, block, tuple(classes), base, workers)
