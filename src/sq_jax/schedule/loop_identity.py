"""Loop identity: which physical loops of an annotated forest are one loop instance.

Steps 1-3 of the rich schedule (:mod:`sq_jax.schedule.rich`): an iterative post-order
walk numbers the static points and records every occurrence with its enclosing loops
(:class:`Occ`); the loops of different occurrences of one value are then folded by a
conflict-aware union-find (:class:`Loops`) and numbered per space.
:func:`identify_loops` runs the three steps; :func:`nesting_pairs` says which loops
must enclose which.

**Hoisting** (``BatchPlan.hoist``): with ``"invariant"``, an operand (not a leaf) whose
subtree carries no label of one of the loops around it is walked as if no loop enclosed
it: its value is built once, whole, before the loops, and its reader slices it on use
(``OccurrenceRec.read_slot``), as it slices an input. Without this, a value that does not
depend on a loop but sits inside it (e.g. a ring intermediate carrying ``i1`` inside the
loops of a residual over ``i1`` and ``i2``) is rebuilt for every batch of that loop. With
``"all"``, a value its tree reads under two labelings (``Y`` and ``Y`` with two labels
swapped) is hoisted too: inside the loops each read slices a different piece, so each
batch would build both. With ``"pairs"`` (and ``"all"``), a product that can run over
block pairs (:func:`~sq_jax.forest.symmetry.block_pair_products`: the closed-shell ladder
``Σ_cd g_ab^cd τ_cd^ij``) is hoisted out of every loop around it, and its computed
operands (``τ``) out of its own contracted loops: the two loops that cut its summed pair
then hold the product alone, with neither free pair cut, and it runs at about a quarter
of its FLOPs (:mod:`sq_jax.lower.block_pairs`) instead of a half or all of them.
Fewer FLOPs for more memory: the budget planner prices both.

Example (``B[i3, i4] = A[i3] A[i4]`` with ``i`` in 2 batches: one loop per result index):
    >>> import sq_jax as sq
    >>> from sq_jax.plan import BatchPlan, annotate
    >>> forest = sq.build_forest(sq.parse("B{i3;i4} = A{i3} A{i4}"), sq.Spaces(i=8))
    >>> occs, loops, ids = identify_loops(annotate(forest, BatchPlan.of({"i": 2})))
    >>> [o.point for o in occs], sorted(ids.values())
    ([2, 0, 1], [('i', 0), ('i', 1)])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .._errors import AnnotationError
from ..expr.nodes import Index
from ..forest.dump import expr_text
from ..forest.nodes import EvalNode
from ..forest.symmetry import block_pair_products
from ..plan.annotate import AnnotatedForest, LoopOpen, OccurrenceId, preorder, summed_indices
from ..plan.batch import LoopKind
from .ir import LoopId

__all__ = ["Loops", "Occ", "identify_loops", "nesting_pairs"]


@dataclass(slots=True)
class Occ:
    """Mutable per-occurrence scratch record of the walk."""

    node: EvalNode
    occ: OccurrenceId
    parent: int  # index into the walk's list, -1 for a root
    ectx: tuple[int, ...]  # loop ids (indices into Loops) enclosing this node
    opens: tuple[LoopOpen, ...]
    own_loops: tuple[int, ...] = ()
    children: tuple[int, ...] = ()
    point: int = -1
    home_pos: tuple[int, ...] = ()  # carried positions an enclosing loop slices
    pos_loop: tuple[int, ...] = ()  # per carried position: loop id or -1 (enclosing or own)
    red: tuple[tuple[Index, int], ...] = ()  # (mode, loop id) of batched reductions
    read_loops: tuple[int, ...] = ()  # hoisted: the loops its reader slices it by
    nesting: Sequence[tuple[int, int]] = ()  # nesting_pairs, once


@dataclass(slots=True)
class Loops:
    """The conflict-aware union-find over physical loops (opener, mode).

    Rule 5 (equal enclosers): a fold never changes which loops must enclose a loop. A
    loop is required inside exactly the enclosing loops its opener depends on
    (:func:`nesting_pairs`), so a partial sum invariant to some loop is free to run
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
    encloser_memo: dict[int, frozenset[int]] = field(default_factory=dict)  # until a fold
    members: list[set[int]] = field(default_factory=list)  # a class root's loops

    def add(self, mode: Index, kind: LoopKind, opener: int) -> int:
        """A new loop over ``mode`` opened by walk entry ``opener``; its index."""
        n = len(self.parent)
        self.mode.append(mode)
        self.kind.append(kind)
        self.opener.append(opener)
        self.parent.append(n)
        self.touch.append({})
        self.forbid.append(set())
        self.inner.append(set())
        self.outer.append(set())
        self.members.append({n})
        return n

    def require(self, outer: int, inner: int) -> None:
        """Record that loop ``outer`` must enclose loop ``inner``."""
        self.inner[outer].add(inner)
        self.outer[inner].add(outer)
        self.encloser_memo.clear()

    def find(self, x: int) -> int:
        """The union-find root of loop ``x`` (with path compression)."""
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
        memo = self.encloser_memo
        if root in memo:
            return memo[root]
        seen: set[int] = set()
        stack = [root]
        while stack:
            for nxt in self.outer[stack.pop()]:
                r = self.find(nxt)
                if r not in seen:
                    seen.add(r)
                    stack.append(r)
        memo[root] = out = frozenset(seen)
        return out

    def try_unite(self, a: int, b: int) -> bool:
        """Fold loops ``a`` and ``b`` into one instance unless a rule refuses it (rules 1-5)."""
        return self.unite(a, b) is None

    def unite(self, a: int, b: int) -> int | None:
        """:meth:`try_unite`, saying which rule refused (``None``: folded, or one already).

        Only rule 5 may change its answer after other folds: kinds never change, and
        forbidden partners, touched positions and nesting only grow as classes merge.

        Example:
            >>> loops = Loops()
            >>> a = loops.add(Index("a", 1), LoopKind.EXTERNAL, 0)
            >>> b = loops.add(Index("a", 2), LoopKind.CONTRACTED, 1)
            >>> c = loops.add(Index("a", 3), LoopKind.EXTERNAL, 2)
            >>> loops.unite(a, b), loops.unite(a, c), loops.find(c) == loops.find(a)
            (3, None, True)
        """
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return None
        if self.kind[ra] is not self.kind[rb]:
            return 3  # kind
        if not (
            self.forbid[ra].isdisjoint(self.members[rb])
            and self.forbid[rb].isdisjoint(self.members[ra])
        ):
            return 2  # forbidden partner
        small, large = sorted((self.touch[ra], self.touch[rb]), key=len)
        if any(occ in large and large[occ] != tok for occ, tok in small.items()):
            return 1  # two positions of one occurrence
        if self.enclosers(ra) != self.enclosers(rb):
            return 5  # different enclosing loops (see the class docstring)
        if self._reaches(ra, rb) or self._reaches(rb, ra):
            return 4  # nesting
        if len(self.touch[ra]) < len(self.touch[rb]):
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.touch[ra].update(self.touch[rb])
        self.forbid[ra] |= self.forbid[rb]
        self.inner[ra] |= self.inner[rb]
        self.outer[ra] |= self.outer[rb]
        self.members[ra] |= self.members[rb]
        self.touch[rb], self.forbid[rb] = {}, set()
        self.inner[rb], self.outer[rb], self.members[rb] = set(), set(), set()
        self.encloser_memo.clear()  # classes changed: enclosers are recomputed on demand
        return None


def _walk(ann: AnnotatedForest) -> tuple[list[Occ], Loops]:
    """Pre-order walk of every tree: occurrences, enclosing loops, points (post-order)."""
    opens_at = ann.opens_by_occurrence()
    hoist = ann.plan.hoist != "none"
    pairs = block_pair_products(ann.forest) if ann.plan.hoist in ("pairs", "all") else frozenset()
    memo: dict[int, frozenset[Index]] = {}
    occs: list[Occ] = []
    loops = Loops()
    point = 0
    for r, root in enumerate(ann.forest.roots):
        base = len(occs)
        permuted = _permuted_reads(root.node) if ann.plan.hoist == "all" else set()
        stack: list[tuple[EvalNode, int, tuple[int, ...], tuple[int, ...]]] = [
            (root.node, -1, (), ())
        ]
        while stack:
            node, parent, ectx, read_loops = stack.pop()
            me = len(occs)
            oid = OccurrenceId(r, me - base)
            opens = opens_at.get(oid, ())
            rec = Occ(node, oid, parent, ectx, opens, read_loops=read_loops)
            occs.append(rec)
            if opens:
                own = rec.own_loops = tuple(loops.add(o.index, o.kind, me) for o in opens)
                _check_opens(rec, occs, loops)
            else:
                own = ()
                if ectx and node.left is not None:  # a summed label may shadow a loop
                    _check_opens(rec, occs, loops)
            if node.left is not None:
                inner = ectx + own
                for child in (node.right, node.left):  # type: ignore[assignment]
                    if hoist and inner and not child.is_leaf:
                        labels = _labels(child, memo)
                        paired = child.key in pairs or node.key in pairs  # a block-pair product
                        if (
                            child.key in permuted
                            or paired
                            or any(loops.mode[lp] not in labels for lp in inner)
                        ):
                            stack.append((child, me, (), inner))  # built outside the loops
                            continue
                    stack.append((child, me, inner, ()))
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


def _permuted_reads(top: EvalNode) -> set[str]:
    """Keys of the values one tree reads under two labelings.

    ``Y`` and ``Y`` with two labels swapped: inside the tree's loops each read would
    slice a different piece, so each batch would build both.
    """
    seen: dict[str, set[tuple[Index, ...]]] = {}
    for _, node in preorder(top):
        if not node.is_leaf:
            seen.setdefault(node.key, set()).add(node.indices)
    return {key for key, labelings in seen.items() if len(labelings) > 1}


def _labels(node: EvalNode, memo: dict[int, frozenset[Index]]) -> frozenset[Index]:
    """Every label on a node of ``node``'s subtree (memoized per node object)."""
    stack, order = [node], []
    while stack:  # iterative: sums of thousands of terms are deep spines
        n = stack.pop()
        if id(n) in memo:
            continue
        order.append(n)
        if n.left is not None:
            stack += [n.left, n.right]  # type: ignore[list-item]
    for n in reversed(order):
        if id(n) not in memo:
            out = frozenset(n.indices)
            if n.left is not None:
                out = out | memo[id(n.left)] | memo[id(n.right)]  # type: ignore[arg-type]
            memo[id(n)] = out
    return memo[id(node)]


def _check_opens(rec: Occ, occs: list[Occ], loops: Loops) -> None:
    """Each open must fit its node; no label may be re-used inside its own loop."""
    node = rec.node
    summed = summed_indices(node)
    if not rec.opens and not (rec.ectx and summed):
        return  # nothing opens here, and nothing summed here can shadow a loop
    outer = {loops.mode[lp]: lp for lp in rec.ectx}
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


def _link(occs: list[Occ], loops: Loops) -> None:
    """Per-occurrence loop bindings, touch tokens, forbids and nesting constraints."""
    modes_of: dict[tuple[int, ...], dict[Index, int]] = {}  # siblings share their ectx
    for k, rec in enumerate(occs):
        if not rec.ectx and not rec.opens:  # no loop binds it: nothing to record
            rec.pos_loop = (-1,) * len(rec.node.indices)
            continue
        by_mode = modes_of.get(rec.ectx)
        if by_mode is None:
            by_mode = modes_of[rec.ectx] = {loops.mode[lp]: lp for lp in rec.ectx}
        own = (
            {o.index: lp for o, lp in zip(rec.opens, rec.own_loops, strict=True)}
            if rec.opens
            else {}
        )
        leaf = rec.node.is_leaf
        pos_loop, home = [], []
        for p, ix in enumerate(rec.node.indices):
            lp = by_mode.get(ix, -1)
            if lp >= 0:
                home.append(p)
            elif ix in own and loops.kind[own[ix]] is LoopKind.EXTERNAL:
                lp = own[ix]
            pos_loop.append(lp)
            if lp >= 0 and not leaf:
                loops.touch[lp][k] = p
        rec.pos_loop, rec.home_pos = tuple(pos_loop), tuple(home)
        if rec.opens:
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
        if len(rec.ectx) + len(rec.own_loops) > 1:  # else no two loops to order
            rec.nesting = nesting_pairs(rec, loops)
            for a, b in rec.nesting:
                loops.require(a, b)


def nesting_pairs(rec: Occ, loops: Loops) -> list[tuple[int, int]]:
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
    ectx, own = rec.ectx, rec.own_loops
    if len(ectx) + len(own) < 2:
        return []  # no two loops to order
    ext = LoopKind.EXTERNAL
    mode, opener, kind = loops.mode, loops.opener, loops.kind
    carried = rec.node.indices
    pairs = []
    for j, a in enumerate(ectx):
        if mode[a] not in carried:
            continue
        for b in ectx[j + 1 :]:
            if opener[a] != opener[b] and not (kind[a] is ext and kind[b] is ext):
                pairs.append((a, b))
        pairs += [(a, b) for b in own]
    for j, a in enumerate(own):
        pairs += [
            (a, b)
            for b in rec.own_loops[j + 1 :]
            if not (loops.kind[a] is ext and loops.kind[b] is ext)
        ]
    return pairs


_FOLD_WINDOW = 8
"""How many preceding occurrences of a group each occurrence is also paired with."""


def _fold(occs: list[Occ], loops: Loops) -> None:
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
                if rep.red:  # a group's members sum the same spaces (its key)
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
        retry = []
        for a, b in pairs:
            if loops.find(a) == loops.find(b):
                continue
            refused = loops.unite(a, b)
            if refused is None:
                changed = True
            elif refused == 5:  # the only refusal a later fold can lift
                retry.append((a, b))
        pairs = retry


def _number(occs: list[Occ], loops: Loops) -> dict[int, LoopId]:
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


def identify_loops(ann: AnnotatedForest) -> tuple[list[Occ], Loops, dict[int, LoopId]]:
    """Walk ``ann``, fold the loops of each value and number the loop instances.

    Returns:
        The occurrences in walk order, the union-find over physical loops, and the
        instance ``(space, loop_slot)`` of every root loop that slices something.

    Raises:
        AnnotationError: a loop opens at a node that neither carries nor sums its mode,
            opens twice, or a summed label shadows an enclosing loop's mode.

    Example:
        >>> from sq_jax.expr.spaces import Spaces
        >>> from sq_jax.forest.nodes import Forest
        >>> from sq_jax.plan import BatchPlan
        >>> occs, loops, ids = identify_loops(AnnotatedForest(Forest((), Spaces()), BatchPlan()))
        >>> occs, loops.parent, ids
        ([], [], {})
    """
    occs, loops = _walk(ann)
    _link(occs, loops)
    _fold(occs, loops)
    return occs, loops, _number(occs, loops)
