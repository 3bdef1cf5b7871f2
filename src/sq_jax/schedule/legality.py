"""Legality: the role each batch loop plays for each value.

For every value of a :class:`~sq_jax.schedule.rich.RichSchedule`,
:func:`analyze_legality` computes its *build site* (the loop axes it touches at its own
node) and the role of each of them (:class:`LoopRole`):

* ``LoopLocal`` — the value stays sliced, in lockstep with its enclosing loop; it is
  built inside that loop and dies with the batch;
* ``Reduction`` — the value sums the axis at its own node: per-batch partials are added
  (an ``AccumulateSum`` escape);
* ``LoopCarried`` — the axis survives into the value's result with no enclosing loop to
  lock it to (a loop opened by the value itself, or a cross-iteration read): per-batch
  pieces are scattered (an ``AccumulateScatter`` escape);
* ``LoopInvariant`` — the loop encloses the value but the value does not touch it
  (never stored: it is the *absence* of an entry).

References: ``docs/schedule.md``, "Legality" (SeQuant's ``legality.hpp``, re-derived).
Build sites come from the loop annotations (V2), not from a
policy predicate.

Deliberate deviation: :func:`classify_axis` calls an axis that the value *itself* sums
in batches (an identity match in ``contracted_below`` that is not carried) a
``Reduction`` even when the value carries another index of the same space — otherwise a
partial sum would be read as complete. SeQuant's type-level rule reaches the
``LoopLocal`` branch there.

Example:
    >>> from sq_jax.expr.nodes import Index
    >>> from sq_jax.schedule.rich import OccurrenceRec
    >>> i1, i2 = Index("i", 1), Index("i", 2)
    >>> occ = OccurrenceRec(0, 1, carried=(i1, i2), ectx=(i1,))
    >>> classify_axis((i1, i2), (), i1, [occ]).value
    'LoopCarried'
    >>> classify_axis((i1, i2), (), i1, [occ], sliced=(i1,)).value  # i_2 is a spectator
    'LoopLocal'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .._enums import ValueEnum
from .._errors import DemotionFixpointError, UnknownValueError
from ..expr.nodes import Index
from ..forest.dump import expr_text
from ..forest.nodes import Forest
from ..plan.annotate import AnnotatedForest, preorder, summed_indices
from .rich import OccurrenceRec, RichSchedule, ValueCell

__all__ = [
    "AxisClass",
    "CellLegality",
    "DemotionSource",
    "LegalitySchedule",
    "LoopRole",
    "analyze_legality",
    "build_site_of",
    "classify_axis",
    "forced_split_demotions",
    "forced_split_types",
]


class LoopRole(ValueEnum):
    """The role of one batch loop for one value."""

    LOOP_LOCAL = "LoopLocal"
    REDUCTION = "Reduction"
    LOOP_CARRIED = "LoopCarried"
    LOOP_INVARIANT = "LoopInvariant"


@dataclass(frozen=True, slots=True)
class AxisClass:
    """One build-site axis of a value and its role."""

    axis: Index
    """The mode (first occurrence's label)."""
    role: LoopRole
    """Never ``LOOP_INVARIANT`` inside a :class:`CellLegality`."""

    def __str__(self) -> str:
        return f"{self.axis}:{self.role}"


@dataclass(frozen=True, slots=True)
class CellLegality:
    """The legality record of one value; ``key`` joins it with its rich cell."""

    key: int
    """The value key (``ValueCell.key``)."""
    build_site: tuple[Index, ...] = ()
    """Loop axes the value touches at its own node: sliced carried modes, then modes it
    sums in batches."""
    per_axis: tuple[AxisClass, ...] = ()
    """One role per build-site axis (never ``LoopInvariant``)."""
    home_floor: tuple[Index, ...] = ()
    """The ``LoopLocal`` axes: the loops the value must stay inside."""
    forced_split_axes: tuple[Index, ...] = ()
    """The ``LoopCarried`` axes, per index instance."""

    def __str__(self) -> str:
        return f"#{self.key:x} [" + ", ".join(map(str, self.per_axis)) + "]"


@dataclass(frozen=True, slots=True)
class LegalitySchedule:
    """One :class:`CellLegality` per rich cell, same order."""

    cells: tuple[CellLegality, ...]
    """``cells[v]`` belongs to ``rich.cells[v]``."""
    rounds: int = 1
    """Rounds the demotion fixpoint ran."""

    def __str__(self) -> str:
        return "\n".join(f"v{v} {c}" for v, c in enumerate(self.cells))


DemotionSource = Callable[[LegalitySchedule], Iterable[tuple[int, str]]]
"""Reports ``(value key, space)`` pairs whose ``LoopLocal`` role must become carried."""


def build_site_of(cell: ValueCell) -> tuple[Index, ...]:
    """The loop axes a value touches at its own node (not its operands').

    Carried modes that a loop slices (enclosing, or opened by the node itself), in
    carried order, then the modes it sums in batches. Leaves have an empty build site:
    they are inputs.

    Example:
        >>> from sq_jax.expr.nodes import Index
        >>> i1, a3 = Index("i", 1), Index("a", 3)
        >>> occ = OccurrenceRec(0, 0, carried=(i1,), loop_slot=(-1,), contracted_batched=(a3,))
        >>> cell = ValueCell(0, 0, 0, False, (i1,), (), (), (), 0, 0, -1, (occ,))
        >>> build_site_of(cell)
        (Index('a_3'),)
    """
    if cell.is_leaf:
        return ()
    first = cell.occurrences[0]
    slots = first.loop_slot or (-1,) * len(first.carried)
    site = [ix for ix, s in zip(first.carried, slots, strict=True) if s >= 0]
    return tuple(dict.fromkeys(site + list(first.contracted_batched)))


def classify_axis(
    carried: Sequence[Index],
    contracted_below: Sequence[Index],
    axis: Index,
    occurrences: Sequence[OccurrenceRec],
    sliced: Sequence[Index] | None = None,
    enclosing_slot: Callable[[OccurrenceRec, Index], int] | None = None,
) -> LoopRole:
    """Classify the loop over ``axis`` against one value (four-way decision).

    Args:
        carried: the value's result modes (first occurrence's labels).
        contracted_below: modes summed at the value's own node.
        axis: the loop's mode.
        occurrences: every use-site of the value.
        sliced: the carried modes a loop slices; other same-space modes are spectators
            (full, unbatched) and ignored. ``None``: every carried mode counts.
        enclosing_slot: ``(occurrence, label) -> slot`` of its enclosing loop over that
            label; when given, a same-space enclosing loop of another instance than the
            value's own (``occurrence.loop_slot``) does not bind it.

    Returns:
        ``Reduction`` if the value sums ``axis`` (by identity, or by space when it carries
        no index of the space); ``LoopInvariant`` if it neither carries nor sums the
        space; ``LoopLocal`` if every occurrence with an enclosing loop of the space has
        each of its sliced same-space modes bound to such a loop (and at least one
        occurrence has one); else ``LoopCarried``.

    Example:
        >>> from sq_jax.expr.nodes import Index
        >>> k = Index("Κ", 1)
        >>> classify_axis((), (k,), k, []).value, classify_axis((), (), k, []).value
        ('Reduction', 'LoopInvariant')
    """
    space = axis.space
    if axis in contracted_below and axis not in carried:
        return LoopRole.REDUCTION
    same = [p for p, ix in enumerate(carried) if ix.space == space]
    if not same:
        if any(ix.space == space for ix in contracted_below):
            return LoopRole.REDUCTION
        return LoopRole.LOOP_INVARIANT
    if sliced is not None:
        same = [p for p in same if carried[p] in sliced]
    checked = False
    for occ in occurrences:
        enclosing = [ix for ix in occ.ectx if ix.space == space]
        if not enclosing:
            continue
        checked = True
        if not same:
            return LoopRole.LOOP_CARRIED
        for p in same:
            label = occ.carried[p] if p < len(occ.carried) else carried[p]
            if label not in enclosing:
                return LoopRole.LOOP_CARRIED
            if enclosing_slot is not None and occ.loop_slot:
                if enclosing_slot(occ, label) != occ.loop_slot[p]:
                    return LoopRole.LOOP_CARRIED
    return LoopRole.LOOP_LOCAL if checked else LoopRole.LOOP_CARRIED


def forced_split_types(cell: CellLegality) -> tuple[Index, ...]:
    """``forced_split_axes`` with one representative per space, discovery order.

    Example:
        >>> from sq_jax.expr.nodes import Index
        >>> i3, i4, a1 = Index("i", 3), Index("i", 4), Index("a", 1)
        >>> forced_split_types(CellLegality(0, forced_split_axes=(i3, i4, a1)))
        (Index('i_3'), Index('a_1'))
    """
    seen: dict[str, Index] = {}
    for ix in cell.forced_split_axes:
        seen.setdefault(ix.space, ix)
    return tuple(seen.values())


def _classify_cell(cell: ValueCell, demoted: set[tuple[int, str]]) -> CellLegality:
    if cell.is_leaf:
        return CellLegality(cell.key)
    site = build_site_of(cell)
    first = cell.occurrences[0]
    below = summed_indices(cell.node) if cell.node is not None else first.contracted_batched
    below = tuple(dict.fromkeys(tuple(below) + first.contracted_batched))
    per_axis = []
    for axis in site:
        role = classify_axis(
            first.carried,
            below,
            axis,
            cell.occurrences,
            sliced=site,
            enclosing_slot=lambda occ, label: occ.enclosing_slot(label),
        )
        if role is LoopRole.LOOP_LOCAL and (cell.key, axis.space) in demoted:
            role = LoopRole.LOOP_CARRIED
        per_axis.append(AxisClass(axis, role))
    return CellLegality(
        key=cell.key,
        build_site=site,
        per_axis=tuple(per_axis),
        home_floor=tuple(a.axis for a in per_axis if a.role is LoopRole.LOOP_LOCAL),
        forced_split_axes=tuple(a.axis for a in per_axis if a.role is LoopRole.LOOP_CARRIED),
    )


def _check_resolves(rich: RichSchedule, forest: Forest) -> None:
    hashes = {n.hash for root in forest.roots for _, n in preorder(root.node)}
    for cell in rich.cells:
        if cell.hash not in hashes:
            what = expr_text(cell.node) if cell.node is not None else f"hash #{cell.hash:x}"
            raise UnknownValueError(
                f"value v{cell.value_id} `{what}` of the rich schedule has no node in the "
                "forest it is analysed against; build the rich schedule and the legality "
                "from the same forest."
            )


def analyze_legality(
    rich: RichSchedule,
    forest: AnnotatedForest | Forest | None = None,
    demotion_source: DemotionSource | None = None,
) -> LegalitySchedule:
    """Classify every loop axis of every value, with an optional demotion fixpoint.

    Args:
        rich: the rich schedule.
        forest: if given, every rich value must have a node in it (checked first).
        demotion_source: called with each round's result; the ``(value key, space)``
            pairs it reports turn ``LoopLocal`` into ``LoopCarried``. Rounds repeat until
            it reports nothing new, at most ``Σ|per_axis| + 1`` times. Without a source
            one round runs.

    Returns:
        One record per rich cell, same order.

    Raises:
        UnknownValueError: if a rich value has no node in ``forest``.
        DemotionFixpointError: if the source keeps reporting new pairs past the cap.

    Example:
        >>> analyze_legality(RichSchedule((), 0)).cells
        ()
    """
    if forest is not None:
        _check_resolves(rich, forest.forest if isinstance(forest, AnnotatedForest) else forest)
    demoted: set[tuple[int, str]] = set()
    result = LegalitySchedule(tuple(_classify_cell(c, demoted) for c in rich.cells))
    if demotion_source is None:
        return result
    cap = sum(len(c.per_axis) for c in result.cells) + 1
    rounds = 1
    while True:
        new = {tuple(p) for p in demotion_source(result)} - demoted
        if not new:
            return LegalitySchedule(result.cells, rounds)
        if rounds >= cap:
            sample = ", ".join(f"(#{k:x}, {s})" for k, s in sorted(new)[:5])
            raise DemotionFixpointError(
                f"the demotion fixpoint did not settle after {rounds} rounds (cap "
                f"Σ|per_axis|+1 = {cap}); the source still reports new pairs: {sample}. "
                "A demotion source must eventually report only pairs it reported before."
            )
        demoted |= new  # type: ignore[arg-type]
        result = LegalitySchedule(tuple(_classify_cell(c, demoted) for c in rich.cells))
        rounds += 1


def forced_split_demotions(
    rich: RichSchedule, legality: LegalitySchedule
) -> tuple[tuple[int, str], ...]:
    """SeQuant's V1 demotion source (single-sided trigger), kept for comparison.

    For each forced-split space ``L``: the consumer pass is every strict dependency
    ancestor of a value ``LoopCarried`` on ``L``; a value ``LoopLocal`` on ``L``, outside
    the consumer pass, with at least one direct consumer inside it, is reported.

    Example:
        >>> forced_split_demotions(RichSchedule((), 0), LegalitySchedule(()))
        ()
    """
    _, consumers = rich.dependencies()
    spaces: dict[str, None] = {}
    for c in legality.cells:
        spaces.update(dict.fromkeys(ix.space for ix in forced_split_types(c)))
    out: list[tuple[int, str]] = []
    for space in spaces:
        carried = [
            v
            for v, c in enumerate(legality.cells)
            if any(a.role is LoopRole.LOOP_CARRIED and a.axis.space == space for a in c.per_axis)
        ]
        consumer_pass: set[int] = set()
        stack = [w for v in carried for w in consumers[v]]
        while stack:
            w = stack.pop()
            if w not in consumer_pass:
                consumer_pass.add(w)
                stack.extend(consumers[w])
        for v, c in enumerate(legality.cells):
            local = any(a.role is LoopRole.LOOP_LOCAL and a.axis.space == space for a in c.per_axis)
            if local and v not in consumer_pass and any(w in consumer_pass for w in consumers[v]):
                out.append((c.key, space))
    return tuple(out)
