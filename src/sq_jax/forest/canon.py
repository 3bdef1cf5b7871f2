"""Canonical eval-node constructors: result mode order and label-blind keys.

Every :class:`~sq_jax.forest.nodes.EvalNode` of a forest is made by one of the four
constructors here, which compute its ``indices`` (result modes in canonical order) and its
``key`` (label-blind identity). The guarantees:

* **Soundness** — equal keys mean equal arrays, mode for mode. A key is an injective
  encoding of the computation: a leaf key names the input block and its repeat pattern; a
  product key holds both children's keys (length-prefixed, so the text parses one way
  only), which label sits on each child mode (numbered by first appearance) and which
  labels are kept, and the result modes are the kept labels in number order; a sum key
  holds both coefficients, both children's keys and where each result mode sits in each
  child. Sum keys are compressed to a 128-bit BLAKE2b digest of that text (written
  ``Σ#<hex>``), so a left-deep chain of thousands of sums has short keys; two different
  sums share a key only on a digest collision (probability about 2^-64 even for 2^32
  sums), which we accept as sound.
* **Invariance** — keys do not change when *all* labels of a subtree (summed and free)
  are renamed consistently, nor when the two operands of a product are swapped: the
  product key is the smaller of the encodings for both operand orders.

Known limitations: invariance is structural, not graph-canonical. Two products that are
equal only through a tensor's permutational symmetry, or through a different
binarization of the same network, get different keys (they are computed twice, never
wrongly merged). A sum's key depends on its operand order (sums are not reordered:
the scheduler accumulates into the left operand).

Example:
    >>> from sq_jax.expr.nodes import Index, Tensor
    >>> i1, i2, a1 = Index("i", 1), Index("i", 2), Index("a", 1)
    >>> f = leaf_node(Tensor("f", bra=(i1,), ket=(a1,)))
    >>> t = leaf_node(Tensor("t", bra=(a1,), ket=(i2,)))
    >>> p = product_node(f, t, (i1, i2))
    >>> q = product_node(t, f, (i2, i1))
    >>> p.key == q.key, [str(ix) for ix in p.indices]
    (True, ['i_1', 'i_2'])
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from fractions import Fraction

from .._errors import ExpressionError
from ..expr.nodes import Constant, Index, Power, Tensor, Variable
from .nodes import EvalNode, NodeKind

__all__ = ["leaf_node", "product_node", "scalar_node", "sum_node"]


def _numbering(indices: Iterable[Index]) -> dict[Index, int]:
    """Number labels 0, 1, 2 … by first appearance."""
    num: dict[Index, int] = {}
    for ix in indices:
        if ix not in num:
            num[ix] = len(num)
    return num


def _fmt(numbers: Iterable[int]) -> str:
    return ",".join(map(str, numbers))


def leaf_node(tensor: Tensor) -> EvalNode:
    """The LEAF node of an input tensor; ``indices`` are its slots (bra, ket, aux).

    The key holds the label, the (bra, ket, aux) signature, the symmetry, each slot's
    space and the pattern of repeated labels (a trace), never the labels themselves.

    Args:
        tensor: the input tensor (plain indices only).

    Returns:
        The leaf node.

    Example:
        >>> from sq_jax.expr.nodes import Index, Tensor
        >>> i1, i2 = Index("i", 1), Index("i", 2)
        >>> leaf_node(Tensor("f", (i1,), (i2,))).key == leaf_node(Tensor("f", (i2,), (i1,))).key
        True
        >>> leaf_node(Tensor("f", (i1,), (i1,))).key == leaf_node(Tensor("f", (i1,), (i2,))).key
        False
    """
    slots = tensor.indices
    num = _numbering(slots)
    spaces = ",".join(repr(ix.space) for ix in slots)
    nb, nk, na = tensor.signature
    key = (
        f"T[{tensor.label!r};{nb},{nk},{na};{tensor.symmetry};"
        f"{spaces};{_fmt(num[ix] for ix in slots)}]"
    )
    return EvalNode(NodeKind.LEAF, slots, key, tensor=tensor)


def scalar_node(expr: Constant | Variable | Power) -> EvalNode:
    """The SCALAR (rank-0) node of a variable, power or constant factor.

    Args:
        expr: the scalar factor.

    Returns:
        The scalar node, with empty ``indices``.

    Example:
        >>> from sq_jax.expr.nodes import Variable
        >>> scalar_node(Variable("ω")).key
        "S[Variable(name='ω', conjugated=False)]"
    """
    return EvalNode(NodeKind.SCALAR, (), f"S[{expr!r}]", scalar=expr)


def product_node(left: EvalNode, right: EvalNode, result_labels: Iterable[Index]) -> EvalNode:
    """The PRODUCT ``einsum(left, right)`` keeping ``result_labels`` (any order).

    The result's canonical mode order is: the kept labels sorted by their first
    appearance in (first operand's modes, second operand's modes), where the first operand
    is the one whose encoding is lexicographically smaller. ``left``/``right`` of the
    returned node are in that canonical order too.

    Args:
        left: one operand.
        right: the other operand.
        result_labels: the labels to keep; each must be a mode of an operand.

    Returns:
        The product node.

    Raises:
        ExpressionError: if a result label is repeated or on neither operand.

    Example:
        >>> from sq_jax.expr.nodes import Index, Tensor
        >>> i1, a1, a2 = Index("i", 1), Index("a", 1), Index("a", 2)
        >>> g = leaf_node(Tensor("g", (a1,), (a2,)))
        >>> t = leaf_node(Tensor("t", (a2,), (i1,)))
        >>> p = product_node(g, t, [i1, a1])
        >>> [str(ix) for ix in p.indices], [str(ix) for ix in p.contracted_indices()]
        (['a_1', 'i_1'], ['a_2'])
    """
    result = tuple(result_labels)
    present = set(left.indices) | set(right.indices)
    if len(set(result)) != len(result) or not set(result) <= present:
        raise ExpressionError(
            f"a product's result labels must be distinct modes of its operands; got "
            f"{', '.join(map(str, result))} for operands with modes "
            f"{', '.join(map(str, left.indices))} and {', '.join(map(str, right.indices))}."
        )
    kept = set(result)
    best: tuple[str, EvalNode, EvalNode, tuple[Index, ...]] | None = None
    for first, second in ((left, right), (right, left)):
        num = _numbering(first.indices + second.indices)
        ext = sorted(num[ix] for ix in kept)
        text = (
            f"P[{len(first.key)}:{first.key}{len(second.key)}:{second.key}"
            f"|{_fmt(num[ix] for ix in first.indices)}|{_fmt(num[ix] for ix in second.indices)}"
            f"|{_fmt(ext)}]"
        )
        if best is None or text < best[0]:
            order = tuple(sorted(kept, key=num.__getitem__))
            best = (text, first, second, order)
    assert best is not None
    key, first, second, order = best
    return EvalNode(NodeKind.PRODUCT, order, key, left=first, right=second)


def _positions(operand: EvalNode, result: Sequence[Index], which: str) -> str:
    if len(set(operand.indices)) != len(operand.indices) or set(operand.indices) != set(result):
        raise ExpressionError(
            f"the {which} operand of a sum has modes {', '.join(map(str, operand.indices))} "
            f"but the sum's result has {', '.join(map(str, result))}; every term of a sum "
            "must carry exactly the result's indices, each once."
        )
    pos = {ix: n for n, ix in enumerate(operand.indices)}
    return _fmt(pos[ix] for ix in result)


def sum_node(
    left: EvalNode,
    left_coef: Fraction,
    right: EvalNode,
    right_coef: Fraction,
    result_labels: Sequence[Index],
) -> EvalNode:
    """The SUM ``left_coef * left + right_coef * right``, modes in ``result_labels`` order.

    The builder passes the left operand's canonical order (so a left-deep chain keeps the
    first term's order and its key does not depend on how the equation wrote its
    left-hand side); any order is sound, as the key records where each result mode sits
    in each operand.

    Args:
        left: first operand (the accumulator of a chain).
        left_coef: its coefficient.
        right: second operand.
        right_coef: its coefficient.
        result_labels: the result's modes, in the order the node will carry them.

    Returns:
        The sum node; its key is ``Σ#`` and a 128-bit digest.

    Raises:
        ExpressionError: if an operand's modes are not exactly the result labels.

    Example:
        >>> from fractions import Fraction
        >>> from sq_jax.expr.nodes import Index, Tensor
        >>> i1, a1 = Index("i", 1), Index("a", 1)
        >>> f = leaf_node(Tensor("f", (a1,), (i1,)))
        >>> h = leaf_node(Tensor("h", (i1,), (a1,)))
        >>> s = sum_node(f, Fraction(1), h, Fraction(-1, 2), f.indices)
        >>> s.key.startswith("Σ#"), [str(ix) for ix in s.indices]
        (True, ['a_1', 'i_1'])
    """
    result = tuple(result_labels)
    pl = _positions(left, result, "left")
    pr = _positions(right, result, "right")
    lc, rc = Fraction(left_coef), Fraction(right_coef)
    text = f"Σ[{lc}|{len(left.key)}:{left.key}|{pl}|{rc}|{len(right.key)}:{right.key}|{pr}]"
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()
    return EvalNode(
        NodeKind.SUM,
        result,
        f"Σ#{digest}",
        left=left,
        right=right,
        left_coef=lc,
        right_coef=rc,
    )
