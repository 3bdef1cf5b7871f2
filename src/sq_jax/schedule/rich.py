"""The rich schedule: static points, occurrences, loop identity, values (V2 semantics).

:func:`build_rich_schedule` linearizes an annotated forest into the facts every later
pass reads. It follows SeQuant's as-built "loops first, values second" design (see
``docs/schedule.md``, "Rich schedule"), in our own code:

1. **Points.** A global post-order counter over the whole forest (children before parent,
   trees in forest order, leaves included). A root's consumer point is its own point.
   The walk is iterative: sum chains can be thousands deep.
2. **Occurrences.** One :class:`OccurrenceRec` per node occurrence, with its enclosing
   loops (``ectx``, outermost first, *excluding* the loops the node opens itself — a
   node's own loop slices its operands, never its result) and the carried positions that
   an enclosing loop slices (``home``).
3. **Loop identity.** A physical loop of one tree is named by its opener and its mode.
   Loops of different occurrences of one value are *folded* into one instance by a
   conflict-aware union-find, refusing a fold that would (1) slice two positions of one
   occurrence, (2) put a value's reduction loop around a reader of that value,
   (3) mix ``External`` and ``Contracted``, (4) merge two loops one of which must
   enclose the other, or (5) merge two loops that must be enclosed by different sets of
   loops. Refused folds leave separate instances. Each instance gets a
   ``loop_slot``, numbered per space in first-seen order. A loop *must enclose* another
   only when the inner loop's opener carries the outer loop's mode: a subtree that does
   not is invariant to that loop and runs outside it (``loop_order``).
4. **Values.** A value key combines the node's label-blind key, the slots of its sliced
   positions and batched reductions, and its operands' values. Occurrences with equal
   keys form one :class:`ValueCell`, ids in first-seen (topological) order. A value is
   built once, from its *first* occurrence's operands (what the lowering does), so an
   occurrence under a later occurrence of its reader's value is never read: a value's
   ``last_use`` is the latest consumer point of the occurrences that are read. (A sum
   that reads one value under several relabelings, e.g. ``Y`` and ``Y`` with two labels
   swapped, repeats ``Y``'s whole subtree; those repeats do not keep ``Y``'s operands
   alive.)

Steps 1-3 live in :mod:`sq_jax.schedule.loop_identity`; this module holds the rich
schedule's IR and step 4.

Leaves are inputs (``docs/schedule.md``, "Semantics"): a leaf (or scalar) gets a cell so it can be
named, but it never folds loops and is never scheduled; its occurrences keep their
per-position ``loop_slot`` so a consumer can slice it on use.

Known limitations: folding is greedy in first-seen order (a valid choice, not an optimal
one); reductions of one value fold in the order of their spaces.

Example:
    >>> from sq_jax.expr.nodes import Index
    >>> from sq_jax.expr.spaces import Spaces
    >>> from sq_jax.forest.nodes import EvalNode, Forest, NodeKind, Root
    >>> from sq_jax.plan import BatchPlan, annotate
    >>> i3, i4 = Index("i", 3), Index("i", 4)
    >>> outer = EvalNode(NodeKind.PRODUCT, (i3, i4), "B",
    ...     EvalNode(NodeKind.LEAF, (i3,), "A"), EvalNode(NodeKind.LEAF, (i4,), "A"))
    >>> forest = Forest((Root("B", (i3, i4), outer),), Spaces(i=8))
    >>> rich = build_rich_schedule(annotate(forest, BatchPlan.of({"i": 2})))
    >>> [str(o) for o in rich.cells[1].occurrences]
    ['@2->2 [i_3:0,i_4:1]']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .._errors import InternalScheduleError, LoopKindConflictError
from ..expr.nodes import Index
from ..forest.dump import expr_text
from ..forest.nodes import EvalNode, NodeKind, stable_hash
from ..plan.annotate import AnnotatedForest, LoopOpen, OccurrenceId
from ..plan.batch import LoopKind
from .ir import LoopId
from .loop_identity import Loops, Occ, identify_loops

__all__ = [
    "OccurrenceRec",
    "RichSchedule",
    "ValueCell",
    "build_rich_schedule",
]


@dataclass(frozen=True, slots=True)
class ValueCell:
    """One value: a distinct computed quantity, with all its occurrences."""

    value_id: int
    """Index of this cell in ``RichSchedule.cells``."""
    key: int
    """Value key: the node hash when nothing in its subtree is sliced, else salted."""
    hash: int
    """Label-blind node hash (``EvalNode.hash``)."""
    is_leaf: bool
    """Whether this is an input (leaf or scalar): never scheduled."""
    carried: tuple[Index, ...]
    """Result modes (first occurrence's labels)."""
    home_modes: tuple[Index, ...]
    """Carried modes an enclosing loop slices (first occurrence)."""
    enclosing_modes: tuple[Index, ...]
    """Union of the enclosing loop modes over occurrences (first-seen order)."""
    divergent_modes: tuple[Index, ...]
    """Carried labels that differ between occurrences (informational)."""
    first_use: int
    """Earliest point of an occurrence."""
    last_use: int
    """Latest consumer point of an occurrence that is read (inclusive): a root, or an
    operand of its reader's first occurrence (of any occurrence if none is read)."""
    home_depth: int
    """Position in the first occurrence's ``ectx`` of the innermost home mode, or -1."""
    occurrences: tuple[OccurrenceRec, ...]
    """Every use-site, in point order."""
    node: EvalNode | None = field(default=None, compare=False, repr=False)
    """A representative eval node (the first occurrence's)."""

    def __str__(self) -> str:
        what = expr_text(self.node, 80) if self.node is not None else f"#{self.hash:x}"
        kind = "leaf " if self.is_leaf else ""
        modes = ",".join(map(str, self.carried))
        return (
            f"v{self.value_id} {kind}[{modes}] [{self.first_use},{self.last_use}] "
            f"x{len(self.occurrences)} {what}"
        )


@dataclass(frozen=True, slots=True)
class OccurrenceRec:
    """One use-site of a value (one node at one position of one tree)."""

    point: int
    """This occurrence's production static point."""
    consumer_point: int
    """Its parent's point (its own point for a tree root)."""
    carried: tuple[Index, ...] = ()
    """Its result modes (the node's canonical indices, this tree's labels)."""
    home: tuple[Index, ...] = ()
    """The carried modes an enclosing loop slices (its per-occurrence home)."""
    ectx: tuple[Index, ...] = ()
    """Modes of the enclosing loops, outermost first, excluding the node's own."""
    ectx_opener_point: tuple[int, ...] = ()
    """Per ``ectx`` entry, the point of the occurrence that opened that loop."""
    ectx_slot: tuple[int, ...] = ()
    """Per ``ectx`` entry, the loop slot of that loop instance."""
    operand_points: tuple[int, ...] = ()
    """Points of the left and right operand occurrences (empty for a leaf)."""
    opens: tuple[LoopOpen, ...] = ()
    """Loops this node opens, outermost first."""
    loop_slot: tuple[int, ...] = ()
    """Per carried position, the slot of the loop slicing it (enclosing or own), or -1."""
    reduced_slot: tuple[tuple[Index, int], ...] = ()
    """``(mode, slot)`` for every mode this node sums in batches."""
    contracted_batched: tuple[Index, ...] = ()
    """Modes summed here in batches (its ``Contracted`` opens)."""
    occurrence: OccurrenceId | None = None
    """Which tree and pre-order position (``None`` for a hand-built record)."""
    node: EvalNode | None = field(default=None, compare=False, repr=False)
    """The eval node (``None`` for a hand-built record)."""
    read_slot: tuple[int, ...] = ()
    """A hoisted occurrence (built whole outside its reader's loops): per carried
    position, the slot of the reader's loop that slices it on use, or -1. Empty
    otherwise."""

    @property
    def is_root(self) -> bool:
        """Whether this occurrence is a tree root."""
        return self.point == self.consumer_point

    def read_slices(self) -> tuple[tuple[int, LoopId], ...]:
        """``(position, loop)`` for every mode a reader slices this operand on.

        These are the home positions (sliced by an enclosing loop); a loop the node opens
        itself slices its operands, not its result as seen by its reader.

        Example:
            >>> i1, i2 = Index("i", 1), Index("i", 2)
            >>> OccurrenceRec(0, 1, carried=(i1, i2), home=(i2,), loop_slot=(0, 1)).read_slices()
            ((1, ('i', 1)),)
        """
        if self.read_slot:
            return tuple(
                (p, (ix.space, s))
                for p, (ix, s) in enumerate(zip(self.carried, self.read_slot, strict=True))
                if s >= 0
            )
        return tuple(
            (p, (ix.space, s))
            for p, (ix, s) in enumerate(zip(self.carried, self.loop_slot, strict=False))
            if s >= 0 and ix in self.home
        )

    def enclosing_slot(self, mode: Index) -> int:
        """Slot of the innermost enclosing loop over ``mode`` (identity), or -1."""
        for ix, slot in zip(reversed(self.ectx), reversed(self.ectx_slot), strict=False):
            if ix == mode:
                return slot
        return -1

    def __str__(self) -> str:
        sl = ",".join(
            f"{ix}:{s}" if s >= 0 else str(ix)
            for ix, s in zip(self.carried, self.loop_slot or (-1,) * len(self.carried), strict=True)
        )
        extra = ""
        if self.ectx:
            extra += " in " + ",".join(
                f"{ix}:{s}"
                for ix, s in zip(self.ectx, self.ectx_slot or (-1,) * len(self.ectx), strict=True)
            )
        if self.reduced_slot:
            extra += " sums " + ",".join(f"{ix}:{s}" for ix, s in self.reduced_slot)
        return f"@{self.point}->{self.consumer_point} [{sl}]{extra}"


@dataclass(frozen=True, slots=True)
class RichSchedule:
    """The linearized forest: values, occurrences, loop instances and their nesting."""

    cells: tuple[ValueCell, ...]
    """Every value, ``cells[v].value_id == v``, in topological (first-seen) order."""
    num_points: int
    """Number of static points (= occurrences)."""
    loop_kind: tuple[tuple[LoopId, LoopKind], ...] = ()
    """Kind of every loop instance, sorted by ``(space, slot)``."""
    loop_order: tuple[tuple[LoopId, LoopId, int], ...] = ()
    """Required ``(outer, inner, witness value id)`` nesting pairs, sorted."""
    root_values: tuple[int, ...] = ()
    """The value id of every forest root, in forest order."""

    def value_name(self, v: int) -> str:
        """Value ``v`` for messages: ``v3 `(f{a_1;a_2} * t{a_2;i_1})```.

        Example:
            >>> import sq_jax as sq
            >>> from sq_jax.plan import BatchPlan
            >>> from sq_jax.schedule import schedule_forest
            >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
            >>> schedule_forest(forest, BatchPlan()).rich.value_name(2)
            'v2 `(f{i_1;a_1} * t{a_1;i_1})`'
        """
        cell = self.cells[v]
        text = expr_text(cell.node) if cell.node is not None else f"#{cell.key:x}"
        return f"v{v} `{text}`"

    def kind_of(self, loop: LoopId) -> LoopKind | None:
        """The kind of a loop instance (``None`` if unknown)."""
        return dict(self.loop_kind).get(loop)

    def point_owner(self) -> list[int]:
        """``owner[point]`` = the value id whose occurrence sits at that point."""
        owner = [-1] * self.num_points
        for cell in self.cells:
            for occ in cell.occurrences:
                owner[occ.point] = cell.value_id
        return owner

    def dependencies(self) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
        """``(depends_on, consumers_of)``: direct operand / reader value ids per value.

        Recovered from the occurrences alone (each non-root occurrence's consumer point
        names its reader); de-duplicated, first-seen order.

        Example:
            >>> occ = lambda p, c: OccurrenceRec(point=p, consumer_point=c)
            >>> def cell(v, *occs):
            ...     return ValueCell(v, v, v, False, (), (), (), (), min(o.point for o in occs),
            ...                      max(o.consumer_point for o in occs), -1, occs)
            >>> rich = RichSchedule((cell(0, occ(0, 2)), cell(1, occ(1, 2)), cell(2, occ(2, 2))), 3)
            >>> rich.dependencies()
            (((), (), (0, 1)), ((2,), (2,), ()))
        """
        owner = self.point_owner()
        deps: list[dict[int, None]] = [{} for _ in self.cells]
        cons: list[dict[int, None]] = [{} for _ in self.cells]
        for cell in self.cells:
            for occ in cell.occurrences:
                if occ.point != occ.consumer_point:
                    reader = owner[occ.consumer_point]
                    deps[reader][cell.value_id] = None
                    cons[cell.value_id][reader] = None
        return tuple(tuple(d) for d in deps), tuple(tuple(c) for c in cons)

    def __str__(self) -> str:
        lines = [f"RichSchedule: {len(self.cells)} values, {self.num_points} points"]
        for (space, slot), kind in self.loop_kind:
            lines.append(f"  loop {space}#{slot}: {kind}")
        for (o_s, o_n), (i_s, i_n), w in self.loop_order:
            lines.append(f"  order {o_s}#{o_n} > {i_s}#{i_n} (v{w})")
        lines += [f"  {c}" for c in self.cells]
        return "\n".join(lines)


def build_rich_schedule(ann: AnnotatedForest) -> RichSchedule:
    """Build the rich schedule of an annotated forest (module docstring: the four steps).

    Args:
        ann: the forest with its loop openings (from :func:`sq_jax.plan.annotate` or
            :func:`sq_jax.plan.annotate_by_hand`).

    Returns:
        The rich schedule.

    Raises:
        AnnotationError: if a loop opens at a node that neither carries (External) nor
            sums (Contracted) its mode, opens twice, or a summed label shadows an
            enclosing loop's mode.
        LoopKindConflictError: if one loop instance ends up with both kinds (a bug).

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.plan import BatchPlan, annotate
        >>> forest = sq.build_forest(sq.parse("R{i1} = A{i1;;Κ1} B{;;Κ1}"), sq.Spaces(i=4, Κ=8))
        >>> rich = build_rich_schedule(annotate(forest, BatchPlan.of({"Κ": 2})))
        >>> [(c.value_id, c.is_leaf, c.first_use, c.last_use) for c in rich.cells]
        [(0, True, 0, 2), (1, True, 1, 2), (2, False, 2, 2)]
        >>> rich.loop_kind
        ((('Κ', 0), <LoopKind.CONTRACTED: 'Contracted'>),)
    """
    occs, loops, ids = identify_loops(ann)  # steps 1-3
    kinds: dict[LoopId, LoopKind] = {}
    for lp in range(len(loops.parent)):
        lid = ids.get(loops.find(lp))
        if lid is None:
            continue
        if kinds.setdefault(lid, loops.kind[lp]) is not loops.kind[lp]:
            raise LoopKindConflictError(
                f"loop {lid[0]}#{lid[1]} is opened both as {kinds[lid]} and as "
                f"{loops.kind[lp]} (at `{expr_text(occs[loops.opener[lp]].node)}`)."
            )

    # the folds are done: every physical loop's instance slot, looked up once
    slot_of = {lp: ids[r][1] for lp in range(len(loops.parent)) if (r := loops.find(lp)) in ids}
    slot_of[-1] = -1
    slot = slot_of.__getitem__

    by_point = sorted(range(len(occs)), key=lambda k: occs[k].point)
    cell_of = [-1] * len(occs)
    groups: dict[tuple, int] = {}
    members: list[list[int]] = []
    keys: list[int] = []
    used_keys: set[int] = set()
    for k in by_point:
        rec = occs[k]
        node = rec.node
        if node.is_leaf:
            gkey: tuple = ("leaf", node.key)
        else:
            ops = tuple(cell_of[c] for c in rec.children)
            if node.kind is NodeKind.PRODUCT:
                ops = tuple(sorted(ops))
            gkey = (
                node.key,
                node.kind.value,
                tuple((p, slot_of[lp]) for p, lp in enumerate(rec.pos_loop) if lp >= 0),
                tuple(sorted((ix.space, slot_of[lp]) for ix, lp in rec.red)),
                ops,
            )
        v = groups.get(gkey)
        if v is None:
            v = len(members)
            groups[gkey] = v
            members.append([])
            plain = node.is_leaf or (
                not gkey[2]
                and not gkey[3]
                and all(keys[c] == occs[members[c][0]].node.hash for c in gkey[4])
            )
            key = node.hash
            if not plain or key in used_keys:
                key = stable_hash(repr(gkey[:4]) + repr(tuple(keys[c] for c in gkey[4])))
                salt = 0
                while key in used_keys:
                    salt += 1
                    key = stable_hash(f"{key}#{salt}")
            used_keys.add(key)
            keys.append(key)
        cell_of[k] = v
        members[v].append(k)

    def read_slot(lp: int) -> int:
        return slot_of.get(lp, -1)

    opener_point = [occs[k].point for k in loops.opener]
    points = [rec.point for rec in occs]
    records: dict[int, OccurrenceRec] = {}
    for k, rec in enumerate(occs):
        ectx = rec.ectx
        records[k] = OccurrenceRec(
            point=rec.point,
            consumer_point=points[rec.parent] if rec.parent >= 0 else rec.point,
            carried=rec.node.indices,
            home=tuple(map(rec.node.indices.__getitem__, rec.home_pos)) if rec.home_pos else (),
            ectx=tuple(map(loops.mode.__getitem__, ectx)) if ectx else (),
            ectx_opener_point=tuple(map(opener_point.__getitem__, ectx)) if ectx else (),
            ectx_slot=tuple(map(slot, ectx)) if ectx else (),
            operand_points=tuple(map(points.__getitem__, rec.children)) if rec.children else (),
            opens=rec.opens,
            loop_slot=tuple(map(slot, rec.pos_loop)),
            reduced_slot=tuple((ix, slot_of[lp]) for ix, lp in rec.red) if rec.red else (),
            contracted_batched=tuple(ix for ix, _ in rec.red) if rec.red else (),
            occurrence=rec.occ,
            node=rec.node,
            read_slot=_read_slot(rec, loops, read_slot) if rec.read_loops else (),
        )
    # a value is built from its first occurrence: only that occurrence reads its operands
    read = [rec.parent < 0 or members[cell_of[rec.parent]][0] == rec.parent for rec in occs]
    cells = tuple(
        _make_cell(v, keys[v], [records[k] for k in ks], [records[k] for k in ks if read[k]])
        for v, ks in enumerate(members)
    )
    order: dict[tuple[LoopId, LoopId], int] = {}
    for k in by_point:
        for a, b in occs[k].nesting:
            pair = (ids[loops.find(a)], ids[loops.find(b)])
            if pair[0] == pair[1]:
                raise InternalScheduleError(f"loop {pair[0]} must enclose itself")
            order.setdefault(pair, cell_of[k])
    roots = tuple(cell_of[k] for k, rec in enumerate(occs) if rec.parent < 0)
    return RichSchedule(
        cells=cells,
        num_points=len(occs),
        loop_kind=tuple(sorted(kinds.items())),
        loop_order=tuple(sorted((a, b, w) for (a, b), w in order.items())),
        root_values=roots,
    )


def _read_slot(rec: Occ, loops: Loops, slot: Callable[[int], int]) -> tuple[int, ...]:
    """Per carried position of a hoisted occurrence, the slot its reader slices it by."""
    if not rec.read_loops:
        return ()
    by_mode = {loops.mode[lp]: lp for lp in rec.read_loops}
    out = tuple(slot(by_mode[ix]) if ix in by_mode else -1 for ix in rec.node.indices)
    return out if any(s >= 0 for s in out) else ()


def _make_cell(
    value_id: int, key: int, recs: Sequence[OccurrenceRec], read: Sequence[OccurrenceRec]
) -> ValueCell:
    if len(recs) == 1:  # most values: one occurrence, one labeling
        first = recs[0]
        enclosing: tuple[Index, ...] = first.ectx
        divergent: tuple[Index, ...] = ()
    else:
        recs = sorted(recs, key=lambda r: r.point)
        first = recs[0]
        modes: dict[Index, None] = {}
        for r in recs:
            if r.ectx:
                modes.update(dict.fromkeys(r.ectx))
        enclosing = tuple(modes)
        labelings = dict.fromkeys(r.carried for r in recs)  # mostly one
        union: dict[Index, None] = {}
        inter = set(first.carried)
        if len(labelings) > 1:
            for carried in labelings:
                union.update(dict.fromkeys(carried))
                inter &= set(carried)
        divergent = tuple(ix for ix in union if ix not in inter)
    return ValueCell(
        value_id=value_id,
        key=key,
        hash=first.node.hash if first.node is not None else 0,
        is_leaf=first.node is not None and first.node.is_leaf,
        carried=first.carried,
        home_modes=first.home,
        enclosing_modes=enclosing,
        divergent_modes=divergent,
        first_use=first.point,
        last_use=max(r.consumer_point for r in (read or recs)),
        home_depth=_home_depth(first.home, first.ectx),
        occurrences=tuple(recs),
        node=first.node,
    )


def _home_depth(home: Sequence[Index], ectx: Sequence[Index]) -> int:
    for d in range(len(ectx) - 1, -1, -1):
        if ectx[d] in home:
            return d
    return -1
