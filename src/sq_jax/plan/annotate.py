"""Loop placement: record, for every node occurrence, the batch loops it opens.

:func:`annotate` turns a :class:`~sq_jax.plan.batch.BatchPlan` into per-occurrence loop
annotations. An *occurrence* is one node at one position of one tree, named by
:class:`OccurrenceId` ``(root number, pre-order position)`` — eval nodes are immutable
and shared between trees, so the annotation cannot live on the node itself.

Placement rules (deterministic, no cost model):

1. **External**: at each external site — the root node of every equation
   (``external_site="root"``; when the root sums values under several relabelings,
   ``Σ_π r_π π(Y) + ...``, each summand instead, so ``Y`` is built once per batch and
   permuted whole, and a summand read once, beside them, opens its own loops), the root
   node always (``"top"``), or every summand of its top-level
   sum chain
   (``external_site="term"``) — every result index whose space is batched in the
   external role opens its own loop, in the node's canonical index order. A doubles
   residual batched over both occupied indices therefore opens two loops, and its batch
   count is the product of the two. With ``external_modes="first"`` only the first
   result index of each batched space opens a loop (one loop per space and site):
   larger batches, but no nest of two loops of one space, in which a value carrying
   only one of the two indices is rebuilt for every batch of the other loop.
2. **Contracted**: at every product node, every index summed there (on an operand, not
   on the result; left operand first) whose space is batched in the contracted role opens
   a loop. The operand subtrees are sliced, the per-batch partials added. A product in
   ``plan.whole`` (by node hash) opens none: it runs over the whole summed range.
3. At one node, external loops come before (outside) contracted ones.

Tests and users can also annotate by hand with :func:`annotate_by_hand`.

Example:
    >>> from sq_jax.expr.nodes import Index
    >>> from sq_jax.forest.nodes import EvalNode, Forest, NodeKind, Root
    >>> from sq_jax.expr.spaces import Spaces
    >>> from sq_jax.plan import BatchPlan, annotate
    >>> i1, k1 = Index("i", 1), Index("Κ", 1)
    >>> a = EvalNode(NodeKind.LEAF, (i1, k1), "A")
    >>> b = EvalNode(NodeKind.LEAF, (k1,), "B")
    >>> top = EvalNode(NodeKind.PRODUCT, (i1,), "AB", a, b)
    >>> forest = Forest((Root("R", (i1,), top),), Spaces(i=4, Κ=8))
    >>> print(annotate(forest, BatchPlan.of({"i": 2, "Κ": {"block": 4, "roles": "contracted"}})))
    AnnotatedForest(BatchPlan(i: 2 batches [external, contracted]; Κ: block 4 [contracted]))
      root 0 @0: i_1 External, Κ_1 Contracted
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from .._errors import PlanError, SqJaxError
from ..expr.nodes import Index
from ..forest.nodes import EvalNode, Forest, NodeKind
from .batch import BatchPlan, LoopKind

__all__ = [
    "AnnotatedForest",
    "LoopOpen",
    "OccurrenceId",
    "annotate",
    "annotate_by_hand",
    "preorder",
    "summed_indices",
]


@dataclass(frozen=True, slots=True, order=True)
class OccurrenceId:
    """One node occurrence: tree number and pre-order position within the tree."""

    root: int
    """Index of the tree in ``forest.roots``."""
    position: int
    """Pre-order position in that tree (0 = the root node; left subtree before right)."""

    def __str__(self) -> str:
        return f"root {self.root} @{self.position}"


def preorder(node: EvalNode) -> Iterator[tuple[int, EvalNode]]:
    """``(position, node)`` for every node of a tree in pre-order, iteratively.

    Example:
        >>> from sq_jax.forest.nodes import EvalNode, NodeKind
        >>> leaf = EvalNode(NodeKind.LEAF, (), "x")
        >>> [p for p, _ in preorder(EvalNode(NodeKind.SUM, (), "s", leaf, leaf))]
        [0, 1, 2]
    """
    stack = [node]
    position = 0
    while stack:
        n = stack.pop()
        yield position, n
        position += 1
        if n.left is not None:
            stack.append(n.right)  # type: ignore[arg-type]
            stack.append(n.left)


@dataclass(frozen=True, slots=True)
class AnnotatedForest:
    """An eval forest together with the loops each occurrence opens."""

    forest: Forest
    """The eval forest."""
    plan: BatchPlan
    """The (space-resolved) plan; gives block sizes and batch counts."""
    opens: tuple[tuple[OccurrenceId, tuple[LoopOpen, ...]], ...] = ()
    """(occurrence, loops opened there, outermost first), sorted; only non-empty ones."""

    def opens_by_occurrence(self) -> dict[OccurrenceId, tuple[LoopOpen, ...]]:
        """``opens`` as a dict (build once, look up many times)."""
        return dict(self.opens)

    def block_of(self, ix: Index) -> int:
        """Block size of a loop over ``ix`` (the full extent when ``ix`` is not batched)."""
        extent = self.forest.spaces.extent(ix.space)
        batch = self.plan.batch_for(ix.space)
        return extent if batch is None else batch.block_size(extent)

    def num_batches(self, ix: Index) -> int:
        """Number of batches of a loop over ``ix`` (1 when ``ix`` is not batched)."""
        batch = self.plan.batch_for(ix.space)
        return 1 if batch is None else batch.num_batches(self.forest.spaces.extent(ix.space))

    def __str__(self) -> str:
        lines = [f"AnnotatedForest({self.plan})"]
        for occ, opens in self.opens:
            lines.append(f"  {occ}: " + ", ".join(str(o) for o in opens))
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class LoopOpen:
    """A batch loop opened at a node: the mode (with the node's label) and its kind.

    Example:
        >>> print(LoopOpen(Index("i", 1), LoopKind.EXTERNAL))
        i_1 External
    """

    index: Index
    """The batched mode, labelled as in the opening node's tree."""
    kind: LoopKind
    """``EXTERNAL`` (mode on the node's result) or ``CONTRACTED`` (summed there)."""

    def __str__(self) -> str:
        return f"{self.index} {self.kind}"


def summed_indices(node: EvalNode) -> tuple[Index, ...]:
    """Labels summed at ``node`` (:meth:`EvalNode.summed_indices`).

    Example:
        >>> from sq_jax.forest.nodes import EvalNode, NodeKind
        >>> i, k = Index("i", 1), Index("a", 1)
        >>> l = EvalNode(NodeKind.LEAF, (i, k), "L")
        >>> r = EvalNode(NodeKind.LEAF, (k,), "R")
        >>> summed_indices(EvalNode(NodeKind.PRODUCT, (i,), "P", l, r))
        (Index('a_1'),)
    """
    return node.summed_indices()


def permuted_summands(top: EvalNode) -> set[int]:
    """Positions of the summands of ``top`` when some value is read more than once.

    A sum the forest built as ``Σ_π r_π π(Y) + Σ_σ s_σ σ(Z) ...`` (antisymmetrizers or
    symmetrizers applied once, :mod:`sq_jax.forest._permsum`) reads each of ``Y``, ``Z``
    under several relabelings. Opened at the root, external loops would need ``Y``'s
    batch in every orientation and build ``Y`` once per orientation (CCSD's R2 cost 2.5x
    its FLOPs with ``a`` batched); opened at the reads, the loops of the reads of one
    value fold into one loop nest that builds it once, batch by batch, and the
    permutations are applied to the whole value after it. A summand read once beside
    them is a site of its own: closed-shell CCSD's R2 is ``Y + P(Y)`` plus two singles
    terms that the forest did not pair, and with the root as the site every term of
    ``Y`` was built twice (benzene/cc-pVDZ sizes, ``i`` in 7 external batches: 1.75x the
    FLOPs). Returns the empty set for a sum that reads every value once.

    Example:
        >>> import sq_jax as sq
        >>> text = "R{a1,a2;i1} = Â{;a1,a2} f{a1;a3} g{a3,a2;i1}"
        >>> forest = sq.build_forest(sq.parse(text), sq.Spaces(i=2, a=3))
        >>> sorted(permuted_summands(forest.roots[0].node))  # Y and Y with a1, a2 swapped
        [1, 4]
    """
    spine = [top]  # the left spine of sums, top first
    while spine[-1].kind is NodeKind.SUM and spine[-1].left is not None:
        spine.append(spine[-1].left)
    size = {id(spine[-1]): _size(spine[-1])}  # subtree sizes, bottom up: one walk in all
    for node in reversed(spine[:-1]):
        size[id(node)] = 1 + size[id(node.left)] + _size(node.right)  # type: ignore[arg-type]
    summands: list[tuple[int, EvalNode]] = []
    node, pos = top, 0
    while node.kind is NodeKind.SUM and node.left is not None and node.right is not None:
        summands.append((pos + 1 + size[id(node.left)], node.right))
        left = node.left
        if left.kind is not NodeKind.SUM or left.key in {n.key for _, n in summands}:
            summands.append((pos + 1, left))
            break
        node, pos = left, pos + 1
    counts: dict[str, int] = {}
    for _, n in summands:
        counts[n.key] = counts.get(n.key, 0) + 1
    if len(summands) < 2 or max(counts.values()) < 2:
        return set()  # nothing permuted: the root is the site
    return {p for p, _ in summands}


def _external_sites(top: EvalNode, site: str) -> set[int]:
    """Pre-order positions of the external sites of one tree."""
    if site == "top" or top.kind is not NodeKind.SUM:
        return {0}
    if site == "root":
        return permuted_summands(top) or {0}
    sites = set()
    stack: list[tuple[EvalNode, bool]] = [(top, True)]
    position = 0
    while stack:  # the same order as preorder(), carrying "on the top-level sum spine"
        n, spine = stack.pop()
        if spine and n.kind is not NodeKind.SUM:
            sites.add(position)
        position += 1
        if n.left is not None:
            on = spine and n.kind is NodeKind.SUM
            stack.append((n.right, on))  # type: ignore[arg-type]
            stack.append((n.left, on))
    return sites


def _external_opens(
    node: EvalNode, batched: Callable[[Index, LoopKind], bool], modes: str
) -> list[LoopOpen]:
    """The external loops of a site: every batched result mode, or the first per space."""
    out: list[LoopOpen] = []
    spaces: set[str] = set()
    for ix in dict.fromkeys(node.indices):
        if not batched(ix, LoopKind.EXTERNAL) or (modes == "first" and ix.space in spaces):
            continue
        spaces.add(ix.space)
        out.append(LoopOpen(ix, LoopKind.EXTERNAL))
    return out


def _size(node: EvalNode) -> int:
    return sum(1 for _ in preorder(node))


def annotate(forest: Forest, plan: BatchPlan) -> AnnotatedForest:
    """Open the plan's loops on ``forest`` by the placement rules of the module docstring.

    Args:
        forest: the eval forest.
        plan: which spaces to batch and in which roles.

    Returns:
        The annotated forest (the plan with its space keys resolved).

    A space cut into one batch opens no loop (the unbatched program, exactly).

    Raises:
        PlanError: if the plan names a space ``forest.spaces`` does not know.

    Example:
        >>> from sq_jax.forest.nodes import EvalNode, Forest, NodeKind, Root
        >>> from sq_jax.expr.spaces import Spaces
        >>> i1 = Index("i", 1)
        >>> leaf = EvalNode(NodeKind.LEAF, (i1,), "t")
        >>> forest = Forest((Root("R", (i1,), leaf),), Spaces(i=4))
        >>> [(str(occ), [str(o) for o in opens])
        ...  for occ, opens in annotate(forest, BatchPlan.of({"i": 2})).opens]
        [('root 0 @0', ['i_1 External'])]
    """
    plan = plan.resolved(forest.spaces)
    ann = AnnotatedForest(forest, plan)

    def batched(ix: Index, kind: LoopKind) -> bool:
        # a loop of one batch is no loop: the unbatched program, exactly
        return plan.is_batched(ix.space, kind) and ann.num_batches(ix) > 1

    opens: dict[OccurrenceId, list[LoopOpen]] = {}
    for r, root in enumerate(forest.roots):
        sites = _external_sites(root.node, plan.external_site)
        for pos, node in preorder(root.node):
            here: list[LoopOpen] = []
            if pos in sites:
                here += _external_opens(node, batched, plan.external_modes)
            if not plan.whole or node.hash not in plan.whole:
                here += [
                    LoopOpen(ix, LoopKind.CONTRACTED)
                    for ix in summed_indices(node)
                    if batched(ix, LoopKind.CONTRACTED)
                ]
            if here:
                opens[OccurrenceId(r, pos)] = here
    return AnnotatedForest(forest, plan, tuple((occ, tuple(o)) for occ, o in sorted(opens.items())))


def _parse_index(text: str) -> Index:
    head = text.rstrip("0123456789")
    digits = text[len(head) :]
    if not digits or not head:
        raise PlanError(f"cannot read index {text!r}; write it as e.g. 'i_1' or 'Κ_2'.")
    return Index(head.rstrip("_"), int(digits))


def annotate_by_hand(
    forest: Forest,
    plan: BatchPlan,
    opens: Mapping[tuple[int, int], Sequence[tuple[Index | str, LoopKind | str]]],
) -> AnnotatedForest:
    """Annotate ``forest`` with explicitly given loop openings.

    Args:
        forest: the eval forest.
        plan: gives block sizes (every opened space must be in it).
        opens: ``{(root, pre-order position): [(index, kind), ...]}``, outermost first;
            an index may be written ``"i_1"``, a kind ``"External"``/``"Contracted"``.

    Returns:
        The annotated forest. Whether each open makes sense for its node is checked when
        the rich schedule is built.

    Raises:
        PlanError: for a position outside its tree, an unknown kind or an opened space
            that the plan does not batch.

    Example:
        >>> from sq_jax.forest.nodes import EvalNode, Forest, NodeKind, Root
        >>> from sq_jax.expr.spaces import Spaces
        >>> i1 = Index("i", 1)
        >>> forest = Forest((Root("R", (i1,), EvalNode(NodeKind.LEAF, (i1,), "t")),), Spaces(i=4))
        >>> print(annotate_by_hand(forest, BatchPlan.of({"i": 2}), {(0, 0): [("i_1", "External")]}))
        AnnotatedForest(BatchPlan(i: 2 batches [external, contracted]))
          root 0 @0: i_1 External
    """
    plan = plan.resolved(forest.spaces)
    sizes = [_size(root.node) for root in forest.roots]
    out: dict[OccurrenceId, tuple[LoopOpen, ...]] = {}
    for (r, pos), items in opens.items():
        if not (0 <= r < len(sizes) and 0 <= pos < sizes[r]):
            raise PlanError(
                f"occurrence (root {r}, position {pos}) does not exist; the forest has "
                f"{len(sizes)} tree(s) of sizes {sizes}."
            )
        loops = []
        for ix, kind in items:
            index = _parse_index(ix) if isinstance(ix, str) else ix
            try:
                index = Index(forest.spaces.resolve(index.space), index.ordinal, index.protos)
            except SqJaxError as err:
                raise PlanError(f"loop over `{index}` at root {r} @{pos}: {err}") from None
            try:
                loop_kind = kind if isinstance(kind, LoopKind) else LoopKind(kind)
            except ValueError:
                raise PlanError(
                    f"unknown loop kind {kind!r}; use 'External' or 'Contracted'."
                ) from None
            if plan.batch_for(index.space) is None:
                raise PlanError(
                    f"loop over `{index}` at root {r} @{pos}: space `{index.space}` is not "
                    f"in the plan {plan}; add it so the loop has a batch count."
                )
            loops.append(LoopOpen(index, loop_kind))
        if loops:
            out[OccurrenceId(r, pos)] = tuple(loops)
    return AnnotatedForest(forest, plan, tuple(sorted(out.items())))
