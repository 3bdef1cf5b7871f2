"""The lowered program's IR: a tree of instructions the JAX interpreter runs as is.

:func:`~sq_jax.lower.instructions.lower_schedule` emits these immutable records;
:mod:`sq_jax.lower.interpret` runs them, :mod:`sq_jax.lower.memory` prices them:

* :class:`Contract` — a PRODUCT value: one ``einsum`` of two operands;
* :class:`Combine` — a SUM value: ``c0 * a + c1 * b`` (operands permuted to its modes);
* :class:`Loop` — one scope block: its body, and how each escaping value leaves it
  (``sums``: accumulated partial sums; ``scatters``: per-batch pieces stacked along a
  mode; ``carries``: values invariant to the loop that later steps read; ``adds``:
  per-batch pieces added into a sum at each of their permuted places, :class:`LoopAdd`).

Every operand is a :class:`Read`: a computed value or an input, and the list of
``(position, loop)`` along which it is cut to the current batch on use.

Example:
    >>> print(Read(2, slices=((1, ("a", 0)),)))
    v2[1:a#0]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Union

from ..expr.nodes import Index
from ..forest.denominators import DENOMINATOR
from ..forest.nodes import EvalNode
from ..plan.batch import LoopKind
from ..schedule.ir import LoopId
from .block_pairs import BlockPairs
from .gemm import GemmPlan
from .pairs import PairPlan

__all__ = [
    "Accumulate",
    "Combine",
    "Contract",
    "Instr",
    "Layout",
    "Loop",
    "LoopAdd",
    "LoweredProgram",
    "Read",
    "Result",
    "Term",
    "walk",
]


Layout = tuple[Union[LoopId, None], ...]  # noqa: UP007
"""Per mode of a stored value: the loop instance whose batch it holds, or ``None``."""


@dataclass(frozen=True, slots=True)
class Read:
    """One operand: a computed value, an input block, or a scalar, cut on use.

    ``dims`` gives, per mode, the full extent and the loop whose batch the *stored*
    array holds (``None``: full); ``slices`` the ``(position, loop)`` pairs to cut now.
    """

    value_id: int
    """The value (cell) read."""
    input_key: str | None = None
    """Block key of an input tensor (``None`` for a computed value or a scalar)."""
    scalar: EvalNode | None = None
    """The SCALAR leaf node (constants and variables), else ``None``."""
    dims: tuple[tuple[int, LoopId | None], ...] = ()
    """Per mode: (full extent, loop of the stored batch or ``None``)."""
    slices: tuple[tuple[int, LoopId], ...] = ()
    """``(position, loop)``: cut this mode to the current batch of that loop."""
    axes: tuple[int, ...] | None = None
    """Per stored axis, the position of its mode in the node's canonical mode order
    (``None``: the same order, as for inputs)."""

    @property
    def generated(self) -> bool:
        """Whether this reads a generated denominator ``Δ``, built on use from the energies.

        Example:
            >>> Read(0, "Δ{a;i}").generated, Read(0, "t{a;i}").generated
            (True, False)
        """
        return self.input_key is not None and self.input_key.startswith(DENOMINATOR + "{")

    def modes(self, carried: Sequence[Index]) -> tuple[Index, ...]:
        """The stored axes' modes, given the reading occurrence's modes in node order.

        Example:
            >>> i1, a1 = Index("i", 1), Index("a", 1)
            >>> Read(0, axes=(1, 0)).modes((i1, a1)), Read(0).modes((i1, a1))
            ((Index('a_1'), Index('i_1')), (Index('i_1'), Index('a_1')))
        """
        return tuple(carried) if self.axes is None else tuple(carried[a] for a in self.axes)

    def __str__(self) -> str:
        head = self.input_key or (f"v{self.value_id}" if self.scalar is None else "scalar")
        if not self.slices:
            return head
        return head + "[" + ",".join(f"{p}:{s}#{n}" for p, (s, n) in self.slices) + "]"


@dataclass(frozen=True, slots=True)
class Contract:
    """A PRODUCT value: ``einsum(spec, left, right)``, run as one matrix product.

    ``gemm`` (:mod:`sq_jax.lower.gemm`) says how: which operands are transposed first
    and how the modes group into matrices; ``spec``'s output is the stored axis order
    the product comes out in. ``gemm`` is ``None`` for a contraction that is not a
    plain product (a mode twice on one operand): it runs as ``einsum``.
    """

    value_id: int
    spec: str
    """The einsum equation over the operands' stored modes and the result's stored order."""
    operands: tuple[Read, Read]
    dims: tuple[tuple[int, LoopId | None], ...]
    """The result's layout (per stored axis: extent and slicing loop)."""
    masks: tuple[tuple[int, int, LoopId], ...] = ()
    """``(operand, position, loop)`` for each mode summed here in batches of ``loop``:
    in an overlapping last batch, elements an earlier batch covered are zeroed there."""
    gemm: GemmPlan | None = None
    """The matrix-product plan, or ``None`` (plain ``einsum``)."""
    axes: tuple[int, ...] = ()
    """Per stored axis of the result, the position of its mode in the node's order."""
    pairs: PairPlan | None = None
    """Set when one operand's free pair is packed (:mod:`sq_jax.lower.pairs`); then
    ``gemm`` is ``None`` and ``pairs.gemm`` multiplies."""
    ready: tuple[str | None, str | None] = (None, None)
    """With ``pairs``: per operand, the key of an input block holding it already made
    ready (:func:`sq_jax.lower.pairs.ready_operand`; :mod:`sq_jax.lower.prepare`), read
    for the product instead of packing the operand; its derivatives still read it."""
    block_pairs: BlockPairs | None = None
    """Set on the one product of a nest of two contracted loops that cut a symmetric
    summed pair: the outer loop runs over block pairs (:mod:`sq_jax.lower.block_pairs`)."""

    def __str__(self) -> str:
        ops = []
        perms = self.gemm.perms if self.gemm else (None, None)
        for r, perm in zip(self.operands, perms, strict=True):
            ops.append(str(r) if perm is None else f"{r}.T{perm}".replace(" ", ""))
        if self.pairs is not None:
            return f"v{self.value_id} = pairs({self.spec}; {self.pairs}) {ops[0]} {ops[1]}"
        how = "einsum" if self.gemm is None else "-gemm" if self.gemm.sign < 0 else "gemm"
        tail = "" if self.block_pairs is None else f"; {self.block_pairs}"
        return f"v{self.value_id} = {how}({self.spec}) {ops[0]} {ops[1]}{tail}"


@dataclass(frozen=True, slots=True)
class Combine:
    """A SUM value: ``coefs[0] * left + coefs[1] * right``, each permuted by ``perms``."""

    value_id: int
    coefs: tuple[float, float]
    perms: tuple[tuple[int, ...], tuple[int, ...]]
    """Per operand, the transpose that brings it to the value's mode order."""
    operands: tuple[Read, Read]
    dims: tuple[tuple[int, LoopId | None], ...]
    axes: tuple[int, ...] = ()
    """Per stored axis of the result, the position of its mode in the node's order."""

    def __str__(self) -> str:
        (a, b), (ca, cb) = self.operands, self.coefs

        def term(coef: float, read: Read, perm: tuple[int, ...]) -> str:
            moved = perm != tuple(range(len(perm)))
            return f"{coef:g}*{read}" + (f".P{perm}" if moved else "")

        return f"v{self.value_id} = {term(ca, a, self.perms[0])} + {term(cb, b, self.perms[1])}"


@dataclass(frozen=True, slots=True)
class LoopAdd:
    """A sum a loop builds from its pieces: ``acc = start + Σ_π c_π π(piece)``, batch by batch.

    Each batch adds ``coef * transpose(piece, perm)`` into the slab of the accumulator
    where the piece's cut mode lands (mode ``perm.index(position)``): ``Σ_π ±π(Y)``
    (an antisymmetrizer) without ``Y`` stacked whole (:mod:`sq_jax.lower.adds`).

    Example:
        >>> print(LoopAdd(9, ((4, None), (4, None)), 5, 0, (((0, 1), 1.0), ((1, 0), -1.0)), 7))
        v9 = v7 + 1*v5 - 1*v5.P(1, 0)
    """

    value_id: int
    """The sum the loop leaves (its accumulator)."""
    dims: tuple[tuple[int, LoopId | None], ...]
    """The sum's layout (per stored axis: extent and slicing loop; never this loop)."""
    piece: int
    """The value the loop's body makes per batch (cut by the loop at ``position``)."""
    position: int
    """The stored axis of ``piece`` that the loop cuts."""
    parts: tuple[tuple[tuple[int, ...], float], ...]
    """``(perm, coef)`` per place: ``coef * transpose(piece, perm)`` is added."""
    start: int | None = None
    """The value the accumulator starts from (its buffer is taken over), else zeros."""

    def __str__(self) -> str:
        out = f"v{self.value_id} = " + ("0" if self.start is None else f"v{self.start}")
        for perm, coef in self.parts:
            moved = "" if perm == tuple(range(len(perm))) else f".P{perm}"
            out += f" {'-' if coef < 0 else '+'} {abs(coef):g}*v{self.piece}{moved}"
        return out


@dataclass(frozen=True, slots=True)
class Loop:
    """One scope block: a loop over the batches of one loop instance."""

    loop: LoopId
    """The loop instance ``(space, slot)``."""
    axis: Index
    """The loop's mode as labelled in the schedule."""
    kind: LoopKind
    extent: int
    """Elements of the mode."""
    block: int
    """Elements per full batch (the last batch holds ``extent % block`` if non-zero)."""
    body: tuple[Instr, ...]
    """Instructions run once per batch (raw productions of outputs last)."""
    sums: tuple[tuple[int, tuple[tuple[int, LoopId | None], ...]], ...] = ()
    """``(value, layout)`` of each ``Sum`` output: batch pieces are added."""
    scatters: tuple[tuple[int, int, tuple[tuple[int, LoopId | None], ...]], ...] = ()
    """``(value, position, layout)`` of each ``Scatter`` output: pieces are stacked."""
    carries: tuple[tuple[int, tuple[tuple[int, LoopId | None], ...]], ...] = ()
    """``(value, layout)`` of values produced inside, invariant to the loop, read after."""
    adds: tuple[LoopAdd, ...] = ()
    """Sums built from pieces the body makes, added in at their permuted places."""
    copies: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """``(input key, transpose)`` of the transposed copies of whole inputs made once
    before the first batch, for the products inside that read them
    (:mod:`sq_jax.lower.copies`)."""
    own_block: bool = False
    """Whether ``block`` is the loop's own, larger than its space's
    (:attr:`~sq_jax.plan.batch.BatchPlan.loop_blocks`): the memory model then prices the
    loop at that block whatever its space's."""
    derived: dict[str, object] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    """Facts of this loop kept by the pass that derives them (the values its body reads):
    the memory model and the sum sequencing ask for them once per enclosing body."""

    @property
    def full_batches(self) -> int:
        """Number of batches of ``block`` elements."""
        return self.extent // self.block

    @property
    def remainder(self) -> int:
        """Elements of the last, smaller batch (0 when ``block`` divides ``extent``)."""
        return self.extent % self.block

    @property
    def num_batches(self) -> int:
        """Number of batches, the last one possibly smaller."""
        return -(-self.extent // self.block)

    @property
    def holds_loops(self) -> bool:
        """Whether a loop runs inside this one (in a sequenced sum's terms included)."""
        known = self.derived.get("holds_loops")
        if known is None:
            known = self.derived["holds_loops"] = any(isinstance(i, Loop) for i in walk(self.body))
        return bool(known)

    @property
    def peel(self) -> bool:
        """Whether the smaller last batch is a second trace of the body.

        Only for a loop with a remainder and no nested loop (:attr:`holds_loops`):
        peeling a loop that holds loops would copy the whole nest (exponentially in the
        nesting depth). Otherwise the last batch *overlaps* the previous one (it starts
        at ``extent - block``): overlapping elements are zeroed where summed
        (``Contract.masks``) and dropped from scattered pieces.
        """
        return self.remainder > 0 and not self.holds_loops

    @property
    def product_nest(self) -> tuple[Loop, Contract] | None:
        """``(inner loop, product)`` when this loop holds one loop ending in a product.

        Any instructions before the product are neither loops nor sums: they make its
        operands for the batch (the closed-shell ladder's ``τ``).
        """
        if len(self.body) != 1 or not isinstance(self.body[0], Loop):
            return None
        inner = self.body[0]
        if not inner.body:
            return None
        *before, last = inner.body
        if not isinstance(last, Contract):
            return None
        if any(not isinstance(ins, (Contract, Combine)) for ins in before):
            return None
        return inner, last

    @property
    def block_pair_nest(self) -> tuple[Loop, Contract] | None:
        """``(inner loop, product)`` when this loop runs over block pairs, else ``None``.

        The outer loop of a nest whose inner loop holds one product marked with
        :attr:`Contract.block_pairs` (:mod:`sq_jax.lower.block_pairs`).
        """
        nest = self.product_nest
        if nest is None or nest[1].block_pairs is None or nest[1].block_pairs.inner != nest[0].loop:
            return None
        return nest

    def lines(self, indent: int = 0) -> list[str]:
        """The loop as indented text lines."""
        pad = "  " * indent
        space, slot = self.loop
        own = " (own)" if self.own_block else ""
        head = f"{pad}loop {space}#{slot} extent {self.extent} block {self.block}{own} {self.kind}"
        if self.copies:
            made = (f"{key}.T{perm}".replace(" ", "") for key, perm in self.copies)
            head += ", copies " + ", ".join(made)
        nest = self.block_pair_nest
        if nest is not None:
            head += f", over block pairs with {nest[0].loop[0]}#{nest[0].loop[1]}"
        out = [head]
        for ins in self.body:
            out += ins.lines(indent + 1) if hasattr(ins, "lines") else [f"{pad}  {ins}"]
        tail = []
        if self.sums:
            tail.append("sums " + ",".join(f"v{v}" for v, _ in self.sums))
        if self.scatters:
            tail.append("scatters " + ",".join(f"v{v}@{p}" for v, p, _ in self.scatters))
        if self.carries:
            tail.append("carries " + ",".join(f"v{v}" for v, _ in self.carries))
        if self.adds:
            tail.append("adds " + ", ".join(map(str, self.adds)))
        if tail:
            out[-1] += "... " + "; ".join(tail)
        return out


@dataclass(frozen=True, slots=True)
class Term:
    """One term of an :class:`Accumulate`: its own instructions, then ``coef * read``."""

    body: tuple[Instr, ...]
    """The instructions that make this term and nothing else (run in its turn)."""
    read: Read
    """The term's value (made by ``body``, or an earlier value or input)."""
    perm: tuple[int, ...]
    """The transpose that brings the term to the sum's stored mode order."""
    coef: float


@dataclass(frozen=True, slots=True)
class Accumulate:
    """A long SUM value run term by term (:mod:`sq_jax.lower.accumulate`).

    ``acc = 0; for term in terms: run(term.body); acc += term.coef * T(term.read)``, one
    term at a time (a ``lax.fori_loop`` over a ``lax.switch``), so only one term and its
    intermediates are alive beside the accumulator.
    """

    value_id: int
    terms: tuple[Term, ...]
    dims: tuple[tuple[int, LoopId | None], ...]
    axes: tuple[int, ...] = ()
    """Per stored axis of the result, the position of its mode in the node's order."""

    def lines(self, indent: int = 0) -> list[str]:
        """The sum as indented text lines: each term's instructions, then the term."""
        pad = "  " * indent
        out = [f"{pad}v{self.value_id} = sequenced sum of {len(self.terms)} terms"]
        for t in self.terms:
            for ins in t.body:
                out += ins.lines(indent + 2) if hasattr(ins, "lines") else [f"{pad}    {ins}"]
            out.append(f"{pad}  += {t.coef:g}*{t.read}")
        return out


Instr = Union[Contract, Combine, Loop, Accumulate]  # noqa: UP007
"""One instruction of a body."""


def walk(body: Sequence[Instr]) -> Iterator[Instr | Term]:
    """Every instruction of ``body`` and of the bodies it holds, pre-order.

    A loop or sequenced sum comes before what it holds; a sequenced sum's term after its
    own instructions.

    Example:
        >>> ins = Contract(2, "a,a->a", (Read(0, "x"), Read(1, "y")), ((2, None),))
        >>> [type(i).__name__ for i in walk((ins,))]
        ['Contract']
    """
    for ins in body:
        yield ins
        if isinstance(ins, Loop):
            yield from walk(ins.body)
        elif isinstance(ins, Accumulate):
            for term in ins.terms:
                yield from walk(term.body)
                yield term


@dataclass(frozen=True, slots=True)
class Result:
    """One equation's output: ``coef * transpose(read, perm)``."""

    name: str
    read: Read
    perm: tuple[int, ...]
    coef: float

    def __str__(self) -> str:
        coef = "" if self.coef == 1 else f"{self.coef:g}*"
        return f"result {self.name} = {coef}{self.read}"


@dataclass(frozen=True, slots=True)
class LoweredProgram:
    """The instruction tree of a whole schedule: the root body and the results."""

    body: tuple[Instr, ...]
    results: tuple[Result, ...]
    input_keys: tuple[str, ...]
    """Block keys (and variable names) the program reads."""

    def loops(self) -> tuple[Loop, ...]:
        """Every loop instruction, pre-order (those in a sequenced sum's terms included)."""
        out: list[Loop] = []

        def visit(body: Sequence[Instr]) -> None:
            for ins in body:
                if isinstance(ins, Loop):
                    out.append(ins)
                    visit(ins.body)
                elif isinstance(ins, Accumulate):
                    for term in ins.terms:
                        visit(term.body)

        visit(self.body)
        return tuple(out)

    def __str__(self) -> str:
        lines: list[str] = []
        for ins in self.body:
            lines += ins.lines() if hasattr(ins, "lines") else [str(ins)]
        lines += [str(r) for r in self.results]
        return "\n".join(lines)
