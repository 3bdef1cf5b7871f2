"""The rich schedule: static points, occurrences, loop identity, values (V2 semantics).

:func:`compute_dag_boulevard` linearizes an annotated forest into the facts every later
pass reads. It follows SeQuant's as-built "loops first, values second" design (see
``shared/reference/sequant-schedule-digest.md`` §4 and SeQuant's
``doc/dev/specs/2026-09-12-batched-array-dag-eval-as-built.md`` §5), in our own code:

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

Leaves are inputs (``SCHEDULER.md`` §1): a leaf (or scalar) gets a cell so it can be
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
    >>> rich = compute_dag_boulevard(annotate(forest, BatchPlan.of({"i": 2})))
    >>> [str(o) for o in rich.cells[1].occurrences]
    ['@2->2 [i_3:0,i_4:1]']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .._errors import AnnotationError, InternalScheduleError, LoopKindConflictError
from ..expr.nodes import Index
from ..forest.dump import expr_text
from ..forest.nodes import EvalNode, NodeKind, stable_hash
from ..plan.annotate import AnnotatedForest, LoopOpen, OccurrenceId, summed_indices
from ..plan.batch import LoopKind

__all__ = [
    "LoopId",
    "OccurrenceRec",
    "RichSchedule",
    "ValueCell",
    "compute_dag_boulevard",
]

LoopId = tuple[str, int]
"""A loop instance: ``(space, loop_slot)``."""


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


# -- the walk ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Occ:
    """Mutable per-occurrence scratch record of the walk."""

    node: EvalNode
    occ: OccurrenceId
    parent: int  # index into the walk's list, -1 for a root
    ectx: tuple[int, ...]  # loop ids (indices into _Loops) enclosing this node
    opens: tuple[LoopOpen, ...]
    own_loops: tuple[int, ...] = ()
    children: tuple[int, ...] = ()
    point: int = -1
    home_pos: tuple[int, ...] = ()  # carried positions an enclosing loop slices
    pos_loop: tuple[int, ...] = ()  # per carried position: loop id or -1 (enclosing or own)
    red: tuple[tuple[Index, int], ...] = ()  # (mode, loop id) of batched reductions


@dataclass(slots=True)
class _Loops:
    """The conflict-aware union-find over physical loops (opener, mode).

    Rule 5 (equal enclosers): a fold never changes which loops must enclose a loop. A
    loop is required inside exactly the enclosing loops its opener depends on
    (:func:`_nesting_pairs`), so a partial sum invariant to some loop is free to run
    outside it. Folding it with a loop that must sit inside that loop would drag the sum
    back in; its reader, which runs outside, would then need the inner loop's result
    before the inner loop can run the reader's own consumers (a block-order cycle).
    Because every fold keeps enclosers equal, a later fold of an enclosing loop cannot
    add enclosers below it either.
    """

    mode: list[Index] = field(default_factory=list)
    kind: list[LoopKind] = field(default_factory=list)
    opener: list[int] = field(default_factory=list)  # walk index of the opener
    parent: list[int] = field(default_factory=list)
    touch: list[dict[int, object]] = field(default_factory=list)  # occ -> position token
    forbid: list[set[int]] = field(default_factory=list)
    inner: list[set[int]] = field(default_factory=list)  # loops this one must enclose
    outer: list[set[int]] = field(default_factory=list)  # loops that must enclose this one

    def add(self, mode: Index, kind: LoopKind, opener: int) -> int:
        n = len(self.parent)
        self.mode.append(mode)
        self.kind.append(kind)
        self.opener.append(opener)
        self.parent.append(n)
        self.touch.append({})
        self.forbid.append(set())
        self.inner.append(set())
        self.outer.append(set())
        return n

    def require(self, outer: int, inner: int) -> None:
        """Record that loop ``outer`` must enclose loop ``inner``."""
        self.inner[outer].add(inner)
        self.outer[inner].add(outer)

    def find(self, x: int) -> int:
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def _reaches(self, src: int, dst: int) -> bool:
        seen = {src}
        stack = [src]
        while stack:
            for nxt in self.inner[stack.pop()]:
                r = self.find(nxt)
                if r == dst:
                    return True
                if r not in seen:
                    seen.add(r)
                    stack.append(r)
        return False

    def enclosers(self, root: int) -> frozenset[int]:
        """Union-find roots of every loop that must enclose ``root``, transitively."""
        seen: set[int] = set()
        stack = [root]
        while stack:
            for nxt in self.outer[stack.pop()]:
                r = self.find(nxt)
                if r not in seen:
                    seen.add(r)
                    stack.append(r)
        return frozenset(seen)

    def try_unite(self, a: int, b: int) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return True
        if self.kind[ra] is not self.kind[rb]:
            return False  # rule 3: kind
        if any(self.find(x) == rb for x in self.forbid[ra]) or any(
            self.find(x) == ra for x in self.forbid[rb]
        ):
            return False  # rule 2: forbidden partner
        small, large = sorted((self.touch[ra], self.touch[rb]), key=len)
        if any(occ in large and large[occ] != tok for occ, tok in small.items()):
            return False  # rule 1: two positions of one occurrence
        if self._reaches(ra, rb) or self._reaches(rb, ra):
            return False  # rule 4: nesting
        if self.enclosers(ra) != self.enclosers(rb):
            return False  # rule 5: different enclosing loops (see _Loops docstring)
        if len(self.touch[ra]) < len(self.touch[rb]):
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.touch[ra].update(self.touch[rb])
        self.forbid[ra] |= self.forbid[rb]
        self.inner[ra] |= self.inner[rb]
        self.outer[ra] |= self.outer[rb]
        self.touch[rb], self.forbid[rb] = {}, set()
        self.inner[rb], self.outer[rb] = set(), set()
        return True


def _walk(ann: AnnotatedForest) -> tuple[list[_Occ], _Loops]:
    """Pre-order walk of every tree: occurrences, enclosing loops, points (post-order)."""
    opens_at = ann.opens_by_occurrence()
    occs: list[_Occ] = []
    loops = _Loops()
    point = 0
    for r, root in enumerate(ann.forest.roots):
        base = len(occs)
        stack: list[tuple[EvalNode, int, tuple[int, ...]]] = [(root.node, -1, ())]
        while stack:
            node, parent, ectx = stack.pop()
            me = len(occs)
            oid = OccurrenceId(r, me - base)
            opens = opens_at.get(oid, ())
            rec = _Occ(node, oid, parent, ectx, opens)
            occs.append(rec)
            own = tuple(loops.add(o.index, o.kind, me) for o in opens)
            rec.own_loops = own
            _check_opens(rec, occs, loops)
            if node.left is not None:
                inner = ectx + own
                stack.append((node.right, me, inner))  # type: ignore[arg-type]
                stack.append((node.left, me, inner))
        # children lists, then post-order points for this tree
        kids: dict[int, list[int]] = {}
        for k in range(base, len(occs)):
            if occs[k].parent >= 0:
                kids.setdefault(occs[k].parent, []).append(k)
        for k, ch in kids.items():
            occs[k].children = tuple(ch)
        order: list[int] = []
        todo = [base]
        while todo:
            k = todo.pop()
            order.append(k)
            todo.extend(occs[k].children)
        for k in reversed(order):
            occs[k].point = point
            point += 1
    return occs, loops


def _check_opens(rec: _Occ, occs: list[_Occ], loops: _Loops) -> None:
    """Each open must fit its node; no label may be re-used inside its own loop."""
    node = rec.node
    outer = {loops.mode[lp]: lp for lp in rec.ectx}
    summed = summed_indices(node)
    seen: set[Index] = set()
    for o in rec.opens:
        problem = ""
        if o.index in seen:
            problem = "is opened twice at this node"
        elif o.index in outer:
            problem = "is already the mode of an enclosing loop"
        elif o.kind is LoopKind.EXTERNAL and o.index not in node.indices:
            problem = "is not on the node's result, so it cannot open an External loop"
        elif o.kind is LoopKind.CONTRACTED and o.index not in summed:
            problem = "is not summed at the node, so it cannot open a Contracted loop"
        if problem:
            raise AnnotationError(
                f"loop `{o}` at {rec.occ}, value `{expr_text(node)}` (result "
                f"[{','.join(map(str, node.indices))}]): `{o.index}` {problem}. Fix the "
                "annotation (or the plan) so each loop opens once, at a node that carries "
                "(External) or sums (Contracted) its mode."
            )
        seen.add(o.index)
    for ix in summed:
        if ix in outer:
            lp = outer[ix]
            raise AnnotationError(
                f"value `{expr_text(node)}` at {rec.occ} sums `{ix}` inside the loop over "
                f"`{ix}` opened at {occs[loops.opener[lp]].occ} "
                f"(`{expr_text(occs[loops.opener[lp]].node)}`): a summed label may not "
                "shadow an enclosing loop's mode. Rename the dummy index."
            )


def _link(occs: list[_Occ], loops: _Loops) -> None:
    """Per-occurrence loop bindings, touch tokens, forbids and nesting constraints."""
    for k, rec in enumerate(occs):
        by_mode = {loops.mode[lp]: lp for lp in rec.ectx}
        own = {o.index: lp for o, lp in zip(rec.opens, rec.own_loops, strict=True)}
        pos_loop, home = [], []
        for p, ix in enumerate(rec.node.indices):
            lp = by_mode.get(ix, -1)
            if lp >= 0:
                home.append(p)
            elif ix in own and loops.kind[own[ix]] is LoopKind.EXTERNAL:
                lp = own[ix]
            pos_loop.append(lp)
            if lp >= 0 and not rec.node.is_leaf:
                loops.touch[lp][k] = p
        rec.pos_loop, rec.home_pos = tuple(pos_loop), tuple(home)
        rec.red = tuple(
            (o.index, lp)
            for o, lp in zip(rec.opens, rec.own_loops, strict=True)
            if o.kind is LoopKind.CONTRACTED
        )
        for ix, lp in rec.red:
            loops.touch[lp][k] = ("sum", ix)
            if rec.parent >= 0:  # rule 2: never around the reader of this partial sum
                reader = occs[rec.parent]
                loops.forbid[lp].update(reader.ectx + reader.own_loops)
        for a, b in _nesting_pairs(rec, loops):
            loops.require(a, b)


def _nesting_pairs(rec: _Occ, loops: _Loops) -> list[tuple[int, int]]:
    """(outer, inner) loop pairs this occurrence requires.

    An enclosing loop whose mode the node carries encloses the node's own loops and the
    later enclosing loops of other openers (nesting as in the tree); the node's own
    loops nest in the order they are listed. Two ``External`` loops impose no order,
    except enclosing-over-own.

    An enclosing loop whose mode the node does *not* carry requires nothing: no label
    bound by an enclosing loop may be summed below it (:func:`_check_opens`), so the
    whole subtree is then invariant to that loop and may run outside it (hoisting). A
    pair it would add could nest a loop-invariant value inside a loop whose other values
    read it from outside: a cycle the block order cannot break.
    """
    ext = LoopKind.EXTERNAL
    carried = set(rec.node.indices)
    pairs = []
    for j, a in enumerate(rec.ectx):
        if loops.mode[a] not in carried:
            continue
        for b in rec.ectx[j + 1 :]:
            if loops.opener[a] != loops.opener[b] and not (
                loops.kind[a] is ext and loops.kind[b] is ext
            ):
                pairs.append((a, b))
        pairs += [(a, b) for b in rec.own_loops]
    for j, a in enumerate(rec.own_loops):
        pairs += [
            (a, b)
            for b in rec.own_loops[j + 1 :]
            if not (loops.kind[a] is ext and loops.kind[b] is ext)
        ]
    return pairs


_FOLD_WINDOW = 8
"""How many preceding occurrences of a group each occurrence is also paired with."""


def _fold(occs: list[_Occ], loops: _Loops) -> None:
    """Try to fold the loops of occurrences that could be one value, in first-seen order.

    Each occurrence of a group is tried with the first and with the ``_FOLD_WINDOW``
    occurrences just before it, so two nearby occurrences fold even when neither may fold
    with the first.

    Repeated until no fold succeeds: a fold refused by rule 5 (its loops were enclosed by
    different loops) may succeed once those enclosing loops are folded, which for an
    enclosing loop opened higher in the tree happens in a later group.
    """
    groups: dict[tuple, list[int]] = {}
    for k in sorted(range(len(occs)), key=lambda k: occs[k].point):
        rec = occs[k]
        if rec.node.is_leaf or not (rec.home_pos or rec.red or rec.own_loops):
            continue
        own_pos = tuple(p for p, lp in enumerate(rec.pos_loop) if lp >= 0 and p not in rec.home_pos)
        spaces = tuple(sorted(ix.space for ix, _ in rec.red))
        groups.setdefault((rec.node.key, rec.home_pos, own_pos, spaces), []).append(k)
    # each member with the first, then with the few members just before it: a fold
    # refused with the first (an occurrence enclosed by other loops, in another term) may
    # be allowed between two later ones (the same subtree read twice in a row, e.g. a sum
    # under two relabelings); a window, not every pair, keeps this linear in the members
    pairs: list[tuple[int, int]] = []
    nearby: list[tuple[int, int]] = []
    for members in groups.values():
        for n, k in enumerate(members[1:], start=1):
            for k_rep in (members[0], *members[max(1, n - _FOLD_WINDOW) : n]):
                rep, other = occs[k_rep], occs[k]
                out = pairs if k_rep == members[0] else nearby
                out += [(lp, other.pos_loop[p]) for p, lp in enumerate(rep.pos_loop) if lp >= 0]
                out += [
                    (a, b)
                    for (_, a), (_, b) in zip(
                        sorted(rep.red, key=lambda t: t[0].space),
                        sorted(other.red, key=lambda t: t[0].space),
                        strict=True,
                    )
                ]
    seen = set(pairs)
    pairs += [pair for pair in dict.fromkeys(nearby) if pair not in seen and pair[0] != pair[1]]
    changed = True
    while changed:  # every round that folds something shrinks the number of classes
        changed = False
        for a, b in pairs:
            if loops.find(a) != loops.find(b) and loops.try_unite(a, b):
                changed = True


def _number(occs: list[_Occ], loops: _Loops) -> dict[int, LoopId]:
    """Slot numbers per space, in first-seen order (positions first, then reductions)."""
    ids: dict[int, LoopId] = {}
    next_slot: dict[str, int] = {}
    for rec in sorted(occs, key=lambda r: r.point):
        for lp in [lp for lp in rec.pos_loop if lp >= 0] + [lp for _, lp in rec.red]:
            r = loops.find(lp)
            if r not in ids:
                space = loops.mode[r].space
                ids[r] = (space, next_slot.get(space, 0))
                next_slot[space] = ids[r][1] + 1
    return ids


def compute_dag_boulevard(ann: AnnotatedForest) -> RichSchedule:
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
        >>> from sq_jax.expr.nodes import Index
        >>> from sq_jax.expr.spaces import Spaces
        >>> from sq_jax.forest.nodes import EvalNode, Forest, NodeKind, Root
        >>> from sq_jax.plan import BatchPlan, annotate
        >>> i1, k1 = Index("i", 1), Index("Κ", 1)
        >>> a = EvalNode(NodeKind.LEAF, (i1, k1), "A")
        >>> b = EvalNode(NodeKind.LEAF, (k1,), "B")
        >>> top = EvalNode(NodeKind.PRODUCT, (i1,), "AB", a, b)
        >>> forest = Forest((Root("R", (i1,), top),), Spaces(i=4, Κ=8))
        >>> rich = compute_dag_boulevard(annotate(forest, BatchPlan.of({"Κ": 2})))
        >>> [(c.value_id, c.is_leaf, c.first_use, c.last_use) for c in rich.cells]
        [(0, True, 0, 2), (1, True, 1, 2), (2, False, 2, 2)]
        >>> rich.loop_kind
        ((('Κ', 0), <LoopKind.CONTRACTED: 'Contracted'>),)
    """
    occs, loops = _walk(ann)
    _link(occs, loops)
    _fold(occs, loops)
    ids = _number(occs, loops)
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

    def slot(lp: int) -> int:
        return -1 if lp < 0 else ids[loops.find(lp)][1]

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
                tuple((p, slot(lp)) for p, lp in enumerate(rec.pos_loop) if lp >= 0),
                tuple(sorted((ix.space, slot(lp)) for ix, lp in rec.red)),
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

    records: dict[int, OccurrenceRec] = {}
    for k, rec in enumerate(occs):
        parent_point = occs[rec.parent].point if rec.parent >= 0 else rec.point
        records[k] = OccurrenceRec(
            point=rec.point,
            consumer_point=parent_point,
            carried=rec.node.indices,
            home=tuple(rec.node.indices[p] for p in rec.home_pos),
            ectx=tuple(loops.mode[lp] for lp in rec.ectx),
            ectx_opener_point=tuple(occs[loops.opener[lp]].point for lp in rec.ectx),
            ectx_slot=tuple(slot(lp) for lp in rec.ectx),
            operand_points=tuple(occs[c].point for c in rec.children),
            opens=rec.opens,
            loop_slot=tuple(slot(lp) for lp in rec.pos_loop),
            reduced_slot=tuple((ix, slot(lp)) for ix, lp in rec.red),
            contracted_batched=tuple(ix for ix, _ in rec.red),
            occurrence=rec.occ,
            node=rec.node,
        )
    # a value is built from its first occurrence: only that occurrence reads its operands
    read = [rec.parent < 0 or members[cell_of[rec.parent]][0] == rec.parent for rec in occs]
    cells = tuple(
        _make_cell(v, keys[v], [records[k] for k in ks], [records[k] for k in ks if read[k]])
        for v, ks in enumerate(members)
    )
    order: dict[tuple[LoopId, LoopId], int] = {}
    for k in by_point:
        for a, b in _nesting_pairs(occs[k], loops):
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


def _make_cell(
    value_id: int, key: int, recs: Sequence[OccurrenceRec], read: Sequence[OccurrenceRec]
) -> ValueCell:
    recs = sorted(recs, key=lambda r: r.point)
    first = recs[0]
    enclosing: dict[Index, None] = {}
    union: dict[Index, None] = {}
    inter = set(first.carried)
    for r in recs:
        enclosing.update(dict.fromkeys(r.ectx))
        union.update(dict.fromkeys(r.carried))
        inter &= set(r.carried)
    return ValueCell(
        value_id=value_id,
        key=key,
        hash=first.node.hash if first.node is not None else 0,
        is_leaf=first.node is not None and first.node.is_leaf,
        carried=first.carried,
        home_modes=first.home,
        enclosing_modes=tuple(enclosing),
        divergent_modes=tuple(ix for ix in union if ix not in inter),
        first_use=min(r.point for r in recs),
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
