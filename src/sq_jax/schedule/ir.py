"""The ordered-schedule IR: blocks of batch loops holding ordered build steps.

An :class:`OrderedSchedule` is a tree of :class:`ScopeBlock`. The root block is not a
loop; every other block is one loop over the batches of one loop instance
``(space, loop_slot)``. A block's ``steps`` run in order once per batch: a
:class:`BuildStep` computes one value from its operands (sliced to the current batches),
a nested block runs its whole loop. After the steps, each ``outputs`` entry combines the
batch's piece of a value into its result one level out: ``AccumulateSum`` adds partial
sums, ``AccumulateScatter`` writes a disjoint slice.

A value is *produced* by its ``BuildStep`` or, when it has none, at the deepest block
that lists it as an output (raw production there; every shallower output entry forwards
the inner block's result: an escape chain).

Example:
    >>> from sq_jax.expr.nodes import Index
    >>> from sq_jax.plan import LoopKind
    >>> blk = ScopeBlock(Index("Κ", 1), ScopeLevel(1, "Κ", 0, 0), LoopKind.CONTRACTED,
    ...                  (BuildStep(0),), ((1, OutputKind.ACCUMULATE_SUM),))
    >>> print(OrderedSchedule(ScopeBlock(steps=(blk, BuildStep(2))), 3))
    root
      loop Κ#0 depth 1 pass 0 Contracted
        build v0
        output v1 Sum
      build v2
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .._enums import ValueEnum
from ..expr.nodes import Index
from ..plan.batch import LoopKind

__all__ = [
    "BuildStep",
    "LoopId",
    "OrderedSchedule",
    "OutputKind",
    "ScopeBlock",
    "ScopeLevel",
    "Step",
    "loop_name",
]

LoopId = tuple[str, int]
"""A loop instance: ``(space, loop_slot)``."""


def loop_name(loop: LoopId) -> str:
    """A loop instance as text: ``a#0``.

    Example:
        >>> loop_name(("a", 0))
        'a#0'
    """
    return f"{loop[0]}#{loop[1]}"


class OutputKind(ValueEnum):
    """How a value leaves a block (``Transient`` is the absence of an output entry)."""

    ACCUMULATE_SUM = "Sum"
    """Partial sums over the block's batches are added (a Reduction escape)."""
    ACCUMULATE_SCATTER = "Scatter"
    """Each batch writes a disjoint slice of the full mode (a LoopCarried escape)."""


@dataclass(frozen=True, slots=True)
class BuildStep:
    """Compute value ``value_id`` here from operands that are already available."""

    value_id: int

    def __str__(self) -> str:
        return f"build v{self.value_id}"


@dataclass(frozen=True, slots=True)
class ScopeLevel:
    """Where a block sits: its loop's identity and its layout."""

    depth: int = 0
    """1-based position of the loop instance in the global chain (0 for the root)."""
    space: str = ""
    """Space of the loop's mode (a colour, not identity)."""
    loop_slot: int = -1
    """The loop instance within its space (-1 for the root)."""
    latitude: int = 0
    """Pass number: sibling blocks of one nest in different passes differ here."""

    @property
    def key(self) -> tuple[int, int, int]:
        """``(depth, loop_slot, latitude)``: unique among sibling blocks."""
        return (self.depth, self.loop_slot, self.latitude)


@dataclass(frozen=True, slots=True)
class ScopeBlock:
    """One loop (or the root) with its ordered steps and escape outputs."""

    axis: Index | None = None
    """The loop's mode (as labelled at one of its values); ``None`` for the root."""
    level: ScopeLevel = ScopeLevel()
    """Identity and layout of the loop."""
    kind: LoopKind | None = None
    """``Contracted`` or ``External`` (``None`` for the root)."""
    steps: tuple[Step, ...] = ()
    """Build steps and nested blocks, in execution order."""
    outputs: tuple[tuple[int, OutputKind], ...] = ()
    """Values leaving this block, with how their batch pieces combine."""

    @property
    def is_root(self) -> bool:
        """Whether this is the root block (not a loop)."""
        return self.axis is None

    @property
    def loop(self) -> tuple[str, int]:
        """The loop instance ``(space, loop_slot)``."""
        return (self.level.space, self.level.loop_slot)

    def blocks(self) -> tuple[ScopeBlock, ...]:
        """The direct child blocks, in order."""
        return tuple(s for s in self.steps if isinstance(s, ScopeBlock))

    def lines(self, indent: int = 0) -> list[str]:
        """The block as indented text lines."""
        pad = "  " * indent
        if self.is_root:
            out = [pad + "root"]
        else:
            lv = self.level
            where = f"depth {lv.depth} pass {lv.latitude}"
            out = [f"{pad}loop {lv.space}#{lv.loop_slot} {where} {self.kind}"]
        for step in self.steps:
            if isinstance(step, ScopeBlock):
                out += step.lines(indent + 1)
            else:
                out.append(f"{pad}  {step}")
        out += [f"{pad}  output v{v} {k}" for v, k in self.outputs]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


Step = Union[BuildStep, ScopeBlock]  # noqa: UP007
"""One entry of a block's ``steps``."""


@dataclass(frozen=True, slots=True)
class OrderedSchedule:
    """The block tree plus what is needed to read it."""

    root: ScopeBlock
    """The root block."""
    num_values: int
    """Number of values (``len(rich.cells)``); every id is below it."""
    operand_vids: tuple[tuple[int, ...], ...] = ()
    """Per value, its operands' value ids, left then right (leaves included)."""

    def walk(self) -> list[tuple[ScopeBlock, tuple[ScopeBlock, ...]]]:
        """Every block with its ancestors (outermost first), pre-order, iteratively."""
        out = []
        stack: list[tuple[ScopeBlock, tuple[ScopeBlock, ...]]] = [(self.root, ())]
        while stack:
            blk, anc = stack.pop()
            out.append((blk, anc))
            stack.extend((c, (*anc, blk)) for c in reversed(blk.blocks()))
        return out

    def __str__(self) -> str:
        return str(self.root)
