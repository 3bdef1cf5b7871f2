"""FLOP and byte accounting for eval nodes, on the real extents of the index spaces.

The FLOP convention is opt_einsum's ``flop_count`` for a pairwise contraction, so the
cost the binarizer minimises and the cost reported for the forest are the same number:

* PRODUCT: the size of the full index set of both operands, times 2 if some label is
  summed (an operand label that is not in the result, a trace included), else times 1
  (a pure outer or Hadamard product).
* SUM: one add per result element, the result's size (coefficients are free).
* LEAF and SCALAR: 0 (inputs are not computed).
* A generated denominator ``Δ`` (:mod:`sq_jax.forest.denominators`) is built where it
  is read: :func:`generated_operand_flops` charges its reader ``rank`` FLOPs per element
  of it, on top of :func:`node_flops`.

Example:
    >>> from sq_jax.expr.nodes import Index, Tensor
    >>> from sq_jax.expr.spaces import Spaces
    >>> from sq_jax.forest.canon import leaf_node, product_node
    >>> i1, a1, a2 = Index("i", 1), Index("a", 1), Index("a", 2)
    >>> g = leaf_node(Tensor("g", (a1,), (a2,)))
    >>> t = leaf_node(Tensor("t", (a2,), (i1,)))
    >>> node_flops(product_node(g, t, [a1, i1]), Spaces(i=2, a=3))
    36
"""

from __future__ import annotations

from collections.abc import Iterable

from ..expr.nodes import Index
from ..expr.spaces import Spaces
from .denominators import generated_flops, is_denominator
from .nodes import EvalNode, NodeKind

__all__ = [
    "contraction_flops",
    "generated_operand_flops",
    "mode_size",
    "node_bytes",
    "node_flops",
]


def mode_size(indices: Iterable[Index], spaces: Spaces) -> int:
    """The product of the extents of ``indices`` (repeats counted; 1 for none).

    Example:
        >>> from sq_jax.expr.nodes import Index
        >>> mode_size([Index("i", 1), Index("a", 1)], Spaces(i=2, a=5))
        10
    """
    size = 1
    for ix in indices:
        size *= spaces.extent(ix.space)
    return size


def contraction_flops(
    operands: Iterable[Iterable[Index]], result: Iterable[Index], spaces: Spaces
) -> int:
    """opt_einsum's FLOP count of one pairwise contraction of ``operands`` into ``result``.

    Example:
        >>> from sq_jax.expr.nodes import Index
        >>> i1, i2 = Index("i", 1), Index("i", 2)
        >>> contraction_flops([(i1, i2), (i2,)], (i1,), Spaces(i=3))
        18
    """
    labels: dict[Index, None] = {}
    for op in operands:
        labels.update(dict.fromkeys(op))
    summed = bool(set(labels) - set(result))
    return mode_size(labels, spaces) * (2 if summed else 1)


def node_flops(node: EvalNode, spaces: Spaces) -> int:
    """FLOPs to compute ``node`` from its operands (see the module docstring).

    Example:
        >>> from sq_jax.expr.nodes import Index, Tensor
        >>> from sq_jax.forest.canon import leaf_node
        >>> node_flops(leaf_node(Tensor("f", (Index("i", 1),))), Spaces(i=4))
        0
    """
    if node.kind is NodeKind.PRODUCT:
        assert node.left is not None and node.right is not None
        return contraction_flops((node.left.indices, node.right.indices), node.indices, spaces)
    if node.kind is NodeKind.SUM:
        return mode_size(node.indices, spaces)
    return 0


def generated_operand_flops(node: EvalNode, spaces: Spaces) -> int:
    """FLOPs to build the generated denominators ``node`` reads, unbatched.

    Each operand that is a ``Δ`` leaf is built once per production of ``node``:
    ``rank`` FLOPs per element (:func:`~sq_jax.forest.denominators.generated_flops`).

    Example:
        >>> import sq_jax as sq
        >>> f = sq.build_forest(sq.parse("R{a1;i1} = Δ{a1;i1} t{a1;i1}"), sq.Spaces(i=2, a=3))
        >>> generated_operand_flops(f.roots[0].node, f.spaces)
        12
    """
    total = 0
    for child in node.children:
        if child.kind is NodeKind.LEAF and is_denominator(child.tensor):
            total += generated_flops([spaces.extent(ix.space) for ix in child.indices])
    return total


def node_bytes(node: EvalNode, spaces: Spaces, itemsize: int = 8) -> int:
    """Bytes of ``node``'s array (a leaf with a repeated label stores every slot).

    Example:
        >>> from sq_jax.expr.nodes import Index, Tensor
        >>> from sq_jax.forest.canon import leaf_node
        >>> i1 = Index("i", 1)
        >>> node_bytes(leaf_node(Tensor("f", (i1,), (i1,))), Spaces(i=4))
        128
    """
    return mode_size(node.indices, spaces) * itemsize
