"""The eval forest: binary trees of leaves, products and sums, one per equation.

An :class:`EvalNode` is one node at one position of one tree (an *occurrence*). Its
``indices`` are its result modes **in canonical order**, written with the labels of
this occurrence; its ``key`` is a label-blind canonical identity. Two nodes with the same
``key`` compute the same array, mode for mode, whatever their labels — that is how common
subexpressions are folded: evaluators and schedulers treat every node of one key as one
*value*, computed once.

Node kinds (:class:`NodeKind`):

* ``LEAF`` — an input tensor (``tensor`` is set; ``indices`` are its slots, bra then ket
  then aux, possibly with repeats for a trace).
* ``SCALAR`` — a rank-0 factor that is not a tensor: a :class:`~sq_jax.expr.nodes.Variable`,
  :class:`~sq_jax.expr.nodes.Power` or :class:`~sq_jax.expr.nodes.Constant` (``scalar``
  is set).
* ``PRODUCT`` — ``einsum(left, right)`` over ``left.indices`` and ``right.indices`` into
  ``indices``: labels in both operands and not in the result are summed; labels in both
  and in the result are a Hadamard (element-wise) product. Products carry no prefactor.
* ``SUM`` — ``left_coef * left + right_coef * right``, each operand permuted to
  ``indices``. A sum of many terms is a left-deep chain of binary sums, so walks over the
  forest must be iterative (chains can be thousands deep).

Example:
    >>> import sq_jax as sq
    >>> eqs = sq.parse("E = 1/4 g{i1,i2;a1,a2} t{a1,a2;i1,i2}")
    >>> forest = sq.build_forest(eqs, sq.Spaces(i=4, a=6))
    >>> root = forest.roots[0]
    >>> root.name, root.coef, root.node.kind.name
    ('E', Fraction(1, 4), 'PRODUCT')
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from fractions import Fraction

from ..expr.nodes import Constant, Index, Power, Tensor, Variable
from ..expr.spaces import Spaces

__all__ = ["EvalNode", "Forest", "NodeKind", "Root", "post_order", "stable_hash"]


class NodeKind(enum.Enum):
    """What an :class:`EvalNode` computes."""

    LEAF = "leaf"
    SCALAR = "scalar"
    PRODUCT = "product"
    SUM = "sum"


def stable_hash(key: str) -> int:
    """A 63-bit hash of ``key`` that is the same in every process (unlike ``hash(str)``).

    Example:
        >>> stable_hash("abc") == stable_hash("abc")
        True
    """
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


@dataclass(frozen=True, slots=True, eq=False)
class EvalNode:
    """One node of a binary eval tree (see the module docstring for the kinds).

    Equality and hashing are by identity of the Python object (``eq=False``); use
    ``key`` (or ``hash``) for value identity.
    """

    kind: NodeKind
    """What this node computes."""
    indices: tuple[Index, ...]
    """Result modes in canonical order, with this occurrence's labels."""
    key: str
    """Label-blind canonical identity: equal keys mean equal arrays, mode for mode."""
    left: EvalNode | None = None
    """First operand (PRODUCT, SUM)."""
    right: EvalNode | None = None
    """Second operand (PRODUCT, SUM)."""
    tensor: Tensor | None = None
    """The input tensor (LEAF)."""
    scalar: Constant | Variable | Power | None = None
    """The scalar factor (SCALAR)."""
    left_coef: Fraction = Fraction(1)
    """Coefficient of ``left`` (SUM)."""
    right_coef: Fraction = Fraction(1)
    """Coefficient of ``right`` (SUM)."""
    _hash: int | None = field(default=None, init=False, repr=False)
    """:attr:`hash`, kept once computed: the schedulers ask for it per occurrence."""
    _summed: tuple[Index, ...] | None = field(default=None, init=False, repr=False)
    """:meth:`summed_indices`, kept once computed (asked per occurrence, too)."""

    def __repr__(self) -> str:
        # Shallow on purpose: the default dataclass repr recurses into the children and
        # overflows the stack on a sum chain thousands deep.
        key = self.key if len(self.key) <= 60 else self.key[:57] + "..."
        return (
            f"EvalNode({self.kind.name}, indices=[{', '.join(map(str, self.indices))}], "
            f"key={key!r})"
        )

    @property
    def hash(self) -> int:
        """A process-independent integer hash of ``key``."""
        if self._hash is None:
            object.__setattr__(self, "_hash", stable_hash(self.key))
        return self._hash  # type: ignore[return-value]

    @property
    def is_leaf(self) -> bool:
        """True for LEAF and SCALAR nodes (inputs, never computed)."""
        return self.kind in (NodeKind.LEAF, NodeKind.SCALAR)

    @property
    def children(self) -> tuple[EvalNode, ...]:
        """The operands, left first (empty for leaves)."""
        return () if self.left is None else (self.left, self.right)  # type: ignore[return-value]

    def summed_indices(self) -> tuple[Index, ...]:
        """Labels summed here: on an operand and not on the result (left first).

        Empty for anything but a product. For the trees the forest builder makes this
        equals :meth:`contracted_indices` (a summed label is on both operands).

        Example:
            >>> i, k = Index("i", 1), Index("a", 1)
            >>> l = EvalNode(NodeKind.LEAF, (i, k), "L")
            >>> r = EvalNode(NodeKind.LEAF, (k,), "R")
            >>> EvalNode(NodeKind.PRODUCT, (i,), "P", l, r).summed_indices()
            (Index('a_1'),)
        """
        if self._summed is None:
            out: list[Index] = []
            if self.kind is NodeKind.PRODUCT:
                assert self.left is not None and self.right is not None
                result = set(self.indices)
                for ix in self.left.indices + self.right.indices:
                    if ix not in result and ix not in out:
                        out.append(ix)
            object.__setattr__(self, "_summed", tuple(out))
        return self._summed  # type: ignore[return-value]

    def contracted_indices(self) -> tuple[Index, ...]:
        """Labels summed at this node: in both operands and not in the result (left order).

        Example:
            >>> import sq_jax as sq
            >>> eqs = sq.parse("E = g{i1,i2;a1,a2} t{a1,a2;i1,i2}")
            >>> f = sq.build_forest(eqs, sq.Spaces(i=2, a=3))
            >>> sorted(str(i) for i in f.roots[0].node.contracted_indices())
            ['a_1', 'a_2', 'i_1', 'i_2']
        """
        if self.kind is not NodeKind.PRODUCT:
            return ()
        assert self.left is not None and self.right is not None
        right, result = set(self.right.indices), set(self.indices)
        seen: list[Index] = []
        for ix in self.left.indices:
            if ix in right and ix not in result and ix not in seen:
                seen.append(ix)
        return tuple(seen)


def post_order(
    node: EvalNode,
    seen: set[Hashable] | None = None,
    key: Callable[[EvalNode], Hashable] = id,
) -> list[EvalNode]:
    """The nodes of ``node``'s tree, children before parents; iterative (deep sum chains).

    With ``seen``, a node whose ``key`` is already in it is skipped with its subtree, and
    every node listed adds its ``key``: ``seen=set()`` lists each object once (a subtree
    shared by identity once), ``key=lambda n: n.key`` each value once, and passing the
    same set on to the next tree continues the walk over a forest. ``seen=None`` lists
    every occurrence.

    Example:
        >>> from sq_jax.expr.nodes import Index, Tensor
        >>> from sq_jax.forest.canon import leaf_node, sum_node
        >>> i1, a1 = Index("i", 1), Index("a", 1)
        >>> f = leaf_node(Tensor("f", (i1,), (a1,)))
        >>> s = sum_node(f, 1, f, 2, (i1, a1))
        >>> [n.kind.name for n in post_order(s)], [n.kind.name for n in post_order(s, set())]
        (['LEAF', 'LEAF', 'SUM'], ['LEAF', 'SUM'])
    """
    out: list[EvalNode] = []
    stack: list[tuple[EvalNode, bool]] = [(node, False)]
    while stack:
        current, expanded = stack.pop()
        if seen is not None and key(current) in seen:
            continue  # an equal key has equal children keys: all already listed
        if expanded or current.left is None:
            if seen is not None:
                seen.add(key(current))
            out.append(current)
            continue
        stack.append((current, True))
        stack.append((current.right, False))  # type: ignore[arg-type]
        stack.append((current.left, False))
    return out


@dataclass(frozen=True, slots=True, eq=False)
class Root:
    """One equation's tree: ``name[indices] = coef * node`` (node permuted to ``indices``)."""

    name: str
    """The equation's result label (the key of its value in a results dict)."""
    indices: tuple[Index, ...]
    """The result's modes in the order of the left-hand side (empty for a scalar)."""
    node: EvalNode
    """The tree's top node."""
    coef: Fraction = Fraction(1)
    """Overall prefactor (for a single-term right-hand side)."""
    lhs_is_tensor: bool = True
    """Whether the left-hand side is a tensor (else a variable)."""


@dataclass(frozen=True, slots=True, eq=False)
class Forest:
    """The binarized, CSE-folded eval forest of a set of equations.

    Built by :func:`sq_jax.build_forest`; one :class:`Root` per equation, in input order.
    """

    roots: tuple[Root, ...]
    """One tree per equation."""
    spaces: Spaces
    """The index spaces (with extents) the forest was built for."""
    unread_inputs: frozenset[str] = frozenset()
    """Input names (labels and block keys) that only equations left out of the roots by
    ``outputs=`` read: accepted as inputs and ignored, never reported as unknown."""
    pair_symmetry: bool = False
    """Whether the inputs are trusted to have the symmetries they declare, so that the
    lowering computes products over symmetric pairs of modes at half the FLOPs
    (:mod:`sq_jax.lower.pairs`; ``sq.compile(..., pair_symmetry=True)``)."""
    fixed_inputs: frozenset[str] = frozenset()
    """Labels of inputs that stay the same between calls (``sq.compile(...,
    fixed_inputs=)``): their packed copies are made once, so packing them costs nothing
    per call (:meth:`sq_jax.lower.program.Program.prepare`)."""
    derived: dict[str, object] = field(default_factory=dict, init=False, repr=False)
    """Facts of this forest that do not depend on a plan, kept by the pass that derives
    them the first time (e.g. :func:`sq_jax.forest.symmetry.value_symmetries`): the
    budget planner lowers one forest under dozens of plans."""

    # -- walks (all iterative: sum chains can be thousands deep) -------------------------

    def occurrences(self) -> tuple[EvalNode, ...]:
        """Every node of every tree (shared values repeated), post-order, roots in order.

        This is the global static-point order: children before parents, leaves included.

        Example:
            >>> import sq_jax as sq
            >>> eqs = sq.parse("E = g{i1,i2;a1,a2} t{a1,a2;i1,i2}")
            >>> f = sq.build_forest(eqs, sq.Spaces(i=2, a=3))
            >>> [n.kind.name for n in f.occurrences()]
            ['LEAF', 'LEAF', 'PRODUCT']
        """
        return self._post_order(distinct=False)

    def distinct(self) -> tuple[EvalNode, ...]:
        """One node per key (its first occurrence), leaves included, post-order.

        Example:
            >>> import sq_jax as sq
            >>> f = sq.build_forest(sq.parse("E = g{i1;i1} g{i2;i2}"), sq.Spaces(i=2))
            >>> [n.kind.name for n in f.occurrences()], [n.kind.name for n in f.distinct()]
            (['LEAF', 'LEAF', 'PRODUCT'], ['LEAF', 'PRODUCT'])
        """
        return self._post_order(distinct=True)

    def _post_order(self, *, distinct: bool) -> tuple[EvalNode, ...]:
        """Every node (or the first node of each key), children first; iterative."""
        seen: set[Hashable] | None = set() if distinct else None
        out: list[EvalNode] = []
        for root in self.roots:
            out += post_order(root.node, seen, key=lambda n: n.key)
        return tuple(out)

    def values(self) -> tuple[EvalNode, ...]:
        """The distinct computed values (PRODUCT and SUM), one node per key, post-order.

        Example:
            >>> import sq_jax as sq
            >>> eqs = sq.parse("E = g{i1,i2;a1,a2} t{a1,a2;i1,i2}")
            >>> f = sq.build_forest(eqs, sq.Spaces(i=2, a=3))
            >>> [v.kind.name for v in f.values()]
            ['PRODUCT']
        """
        return tuple(n for n in self.distinct() if not n.is_leaf)

    def leaves(self) -> tuple[EvalNode, ...]:
        """The distinct input tensors (LEAF nodes), one node per key, post-order.

        Example:
            >>> import sq_jax as sq
            >>> f = sq.build_forest(sq.parse("E = f{i1;i1} + g{i1;i1}"), sq.Spaces(i=2))
            >>> [n.tensor.label for n in f.leaves()]
            ['f', 'g']
        """
        return tuple(n for n in self.distinct() if n.kind is NodeKind.LEAF)

    def scalars(self) -> tuple[EvalNode, ...]:
        """The distinct scalar factors (SCALAR nodes), one node per key, post-order.

        Example:
            >>> import sq_jax as sq
            >>> f = sq.build_forest(sq.parse("E = ω * f{i1;i1}"), sq.Spaces(i=2))
            >>> [str(n.scalar) for n in f.scalars()]
            ['ω']
        """
        return tuple(n for n in self.distinct() if n.kind is NodeKind.SCALAR)

    @property
    def num_occurrences(self) -> dict[str, int]:
        """How many times each key occurs over all trees, in first-appearance order.

        Example:
            >>> import sq_jax as sq
            >>> f = sq.build_forest(sq.parse("E = f{i1;i1} + f{i2;i2}"), sq.Spaces(i=2))
            >>> sorted(f.num_occurrences.values())
            [1, 2, 2, 2]
        """
        counts: dict[str, int] = {}
        for node in self.occurrences():
            counts[node.key] = counts.get(node.key, 0) + 1
        return counts

    # -- cost ----------------------------------------------------------------------------

    def node_flops(self, node: EvalNode) -> int:
        """FLOPs of one node on this forest's extents (see :mod:`sq_jax.forest.cost`).

        Example:
            >>> import sq_jax as sq
            >>> eqs = sq.parse("E = g{i1,i2;a1,a2} t{a1,a2;i1,i2}")
            >>> f = sq.build_forest(eqs, sq.Spaces(i=2, a=3))
            >>> f.node_flops(f.roots[0].node)
            72
        """
        from .cost import node_flops

        return node_flops(node, self.spaces)

    def node_bytes(self, node: EvalNode, itemsize: int = 8) -> int:
        """Bytes of one node's array on this forest's extents.

        Example:
            >>> import sq_jax as sq
            >>> eqs = sq.parse("E = g{i1,i2;a1,a2} t{a1,a2;i1,i2}")
            >>> f = sq.build_forest(eqs, sq.Spaces(i=2, a=3))
            >>> f.node_bytes(f.leaves()[0]), f.node_bytes(f.roots[0].node)
            (288, 8)
        """
        from .cost import node_bytes

        return node_bytes(node, self.spaces, itemsize)

    @property
    def flops(self) -> int:
        """Total FLOPs, counting each distinct value once.

        Generated denominators read by a value are charged with it
        (:func:`~sq_jax.forest.cost.generated_operand_flops`).

        Example:
            >>> import sq_jax as sq
            >>> eqs = sq.parse("E = g{i1,i2;a1,a2} t{a1,a2;i1,i2}")
            >>> f = sq.build_forest(eqs, sq.Spaces(i=2, a=3))
            >>> f.flops
            72
        """
        from .cost import generated_operand_flops, node_flops

        return sum(
            node_flops(v, self.spaces) + generated_operand_flops(v, self.spaces)
            for v in self.values()
        )

    def __str__(self) -> str:
        from .dump import format_forest

        return format_forest(self)
