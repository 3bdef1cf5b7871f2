"""Binarize one product: pick a pairwise contraction order and build PRODUCT nodes.

The order comes from opt_einsum's ``contract_path`` on the real extents (shapes from each
label's space extent), minimising opt_einsum's FLOP count (the convention of
:mod:`sq_jax.forest.cost`). ``optimize="auto"`` means an exhaustive search for at most 6
operands and opt_einsum's ``"dp"`` (dynamic programming) beyond; any opt_einsum optimizer
name or :class:`opt_einsum.paths.PathOptimizer` is passed through.

The exhaustive search is :class:`ExhaustivePath`, a ``PathOptimizer`` handed to
``contract_path``: a dynamic programme over subsets that visits every binary tree
(outer products included). It is used instead of opt_einsum's ``"optimal"`` because that
one prices a pairwise contraction whose only summed label is a trace (a label repeated
inside one tensor) as element-wise (x1), while ``contract_path``'s own report and the
forest count it as summed (x2); with traces its tree can be up to ~1.5x worse under the
reported cost. Without traces both give trees of equal cost.

Operands are first put in a label-blind order (:func:`canonical_operand_order`: by key,
then by how each mode connects to the result and to the other operands), so the same
network written with its factors in another order, or with other labels, is given to the
optimizer in the same order and, on ties, binarized the same way; that keeps common
subexpressions foldable.

Known limitations: ``"dp"`` does not search outer products between connected operands,
so beyond 6 operands the tree can be slightly worse than the true optimum; the optimizer
sees a scalar (rank-0) factor like any operand and places it where it is cheapest.

Example:
    >>> from sq_jax.expr.nodes import Index, Tensor
    >>> from sq_jax.expr.spaces import Spaces
    >>> from sq_jax.forest.canon import leaf_node
    >>> i1, a1, a2, a3 = Index("i", 1), Index("a", 1), Index("a", 2), Index("a", 3)
    >>> ops = [leaf_node(Tensor("x", (a1,), (a2,))), leaf_node(Tensor("y", (a2,), (a3,))),
    ...        leaf_node(Tensor("t", (a3,), (i1,)))]
    >>> node = binarize(ops, (a1, i1), Spaces(i=2, a=50))
    >>> node.kind.name, sorted(c.kind.name for c in node.children)
    ('PRODUCT', ['LEAF', 'PRODUCT'])
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from fractions import Fraction
from typing import Any

import opt_einsum

from ..expr.nodes import Constant, Index
from ..expr.spaces import Spaces
from .canon import product_node, scalar_node
from .nodes import EvalNode

__all__ = [
    "ExhaustivePath",
    "binarize",
    "canonical_operand_order",
    "count_labels",
    "resolve_optimizer",
]

_EXHAUSTIVE_MAX_OPERANDS = 6


class ExhaustivePath(opt_einsum.paths.PathOptimizer):
    """The cheapest of all binary contraction trees, traces priced as summed labels.

    A dynamic programme over subsets of operands (about 3^n/2 splits, so meant for n <= 6):
    the cost of a subset is the cheapest split into two parts plus the FLOPs of
    contracting the parts' results (:func:`sq_jax.forest.cost.contraction_flops`'s
    convention). A part's result keeps the labels needed outside it; a single operand is
    taken as written, so a trace is paid for by the contraction that consumes it.

    Args:
        terms: each operand's einsum subscript *with* repeats (e.g. ``"abb"``), in the
            order given to ``contract_path``; opt_einsum passes sets, which lose traces.

    Example:
        >>> import opt_einsum
        >>> eq, shapes = "a,abcdeef,f->bcdf", [(2,), (2,) * 7, (2,)]
        >>> opt = ExhaustivePath(["a", "abcdeef", "f"])
        >>> path, info = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=opt)
        >>> path, int(info.opt_cost)
        ([(0, 2), (0, 1)], 132)
        >>> _, info = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize="optimal")
        >>> int(info.opt_cost)
        192
    """

    def __init__(self, terms: Sequence[str]) -> None:
        self.terms = tuple(terms)

    def __call__(
        self,
        inputs: Any,
        output: Any,
        size_dict: dict[str, int],
        memory_limit: int | None = None,
    ) -> list[tuple[int, ...]]:
        """The linear path (opt_einsum's format) of the cheapest tree."""
        del inputs, memory_limit  # the subscripts with repeats were given at construction
        n = len(self.terms)
        full = (1 << n) - 1
        output = frozenset(output)
        own = [frozenset(t) for t in self.terms]
        labels = [frozenset()] * (full + 1)
        for mask in range(1, full + 1):
            low = (mask & -mask).bit_length() - 1
            labels[mask] = labels[mask & (mask - 1)] | own[low]
        out = [frozenset()] * (full + 1)
        for mask in range(1, full + 1):
            if mask & (mask - 1) == 0:
                out[mask] = labels[mask]
            elif mask == full:
                out[mask] = labels[mask] & output
            else:
                out[mask] = labels[mask] & (labels[full & ~mask] | output)
        best = [0] * (full + 1)
        split = [0] * (full + 1)
        for mask in range(1, full + 1):
            if mask & (mask - 1) == 0:
                continue
            low = mask & -mask
            best_cost: int | None = None
            sub = (mask - 1) & mask
            while sub:
                if sub & low:
                    rest = mask & ~sub
                    either = out[sub] | out[rest]
                    size = 1
                    for c in either:
                        size *= size_dict[c]
                    cost = best[sub] + best[rest] + size * (2 if either - out[mask] else 1)
                    if best_cost is None or cost < best_cost:
                        best_cost, split[mask] = cost, sub
                sub = (sub - 1) & mask
            best[mask] = best_cost  # type: ignore[assignment]
        ssa: list[tuple[int, int]] = []
        ids: dict[int, int] = {1 << k: k for k in range(n)}
        stack: list[tuple[int, bool]] = [(full, False)]
        while stack:  # post-order over the chosen splits
            mask, expanded = stack.pop()
            if mask in ids:
                continue
            sub = split[mask]
            if not expanded:
                stack += [(mask, True), (mask & ~sub, False), (sub, False)]
                continue
            ssa.append((ids[sub], ids[mask & ~sub]))
            ids[mask] = n + len(ssa) - 1
        return list(opt_einsum.paths.ssa_to_linear(ssa))


def resolve_optimizer(optimize: Any, num_operands: int) -> Any:
    """The opt_einsum optimizer used for a product of ``num_operands`` operands.

    Args:
        optimize: ``"auto"``, an opt_einsum optimizer name, or a ``PathOptimizer``.
        num_operands: the number of operands of the product.

    Returns:
        What to pass as ``contract_path(optimize=...)``; ``"exhaustive"`` stands for an
        :class:`ExhaustivePath` built for the product's subscripts.

    Raises:
        ValueError: if ``optimize`` is not a known optimizer.

    Example:
        >>> resolve_optimizer("auto", 4), resolve_optimizer("auto", 9)
        ('exhaustive', 'dp')
    """
    if isinstance(optimize, opt_einsum.paths.PathOptimizer):
        return optimize
    if optimize == "auto":
        return "exhaustive" if num_operands <= _EXHAUSTIVE_MAX_OPERANDS else "dp"
    if isinstance(optimize, str):
        try:
            opt_einsum.paths.get_path_fn(optimize)
        except KeyError:
            pass
        else:
            return optimize
    raise ValueError(
        f"optimize={optimize!r} is not a contraction-order optimizer; expected 'auto', an "
        "opt_einsum optimizer name ('optimal', 'dp', 'greedy', 'branch-2', ...) or an "
        "opt_einsum.paths.PathOptimizer instance."
    )


def _keep(
    ops: Sequence[EvalNode], others: Sequence[EvalNode], result: Collection[Index]
) -> set[Index]:
    """Labels of ``ops`` still needed: in the result or on an operand not yet contracted."""
    needed = set(result)
    for other in others:
        needed.update(other.indices)
    mine: set[Index] = set()
    for op in ops:
        mine.update(op.indices)
    return mine & needed


def _contract_path(
    operands: Sequence[EvalNode], result: Collection[Index], spaces: Spaces, optimize: Any
) -> list[tuple[int, ...]]:
    symbols: dict[Index, str] = {}
    for op in operands:
        for ix in op.indices:
            if ix not in symbols:
                symbols[ix] = opt_einsum.get_symbol(len(symbols))
    terms = ["".join(symbols[ix] for ix in op.indices) for op in operands]
    output = "".join(sorted(symbols[ix] for ix in result))
    shapes = [tuple(spaces.extent(ix.space) for ix in op.indices) for op in operands]
    chosen = resolve_optimizer(optimize, len(operands))
    path, _ = opt_einsum.contract_path(
        f"{','.join(terms)}->{output}",
        *shapes,
        shapes=True,
        optimize=ExhaustivePath(terms) if chosen == "exhaustive" else chosen,
        memory_limit=None,
    )
    return [tuple(step) for step in path]


def canonical_operand_order(
    operands: Sequence[EvalNode], result: Sequence[Index]
) -> list[EvalNode]:
    """``operands`` sorted by a label-blind signature (stable on full ties).

    The signature is the operand's key, then for each mode: its position in ``result``
    if kept, else the (key, slot) of every other place the label sits (a trace points at
    its own other slot). Renaming labels consistently, or permuting the operands, gives
    the same order up to operands that are indistinguishable by this signature.

    Args:
        operands: one term's operands.
        result: the term's result labels, in a label-blind order (the left-hand side's).

    Returns:
        The operands in canonical order.

    Example:
        >>> from sq_jax.expr.nodes import Index, Tensor
        >>> from sq_jax.forest.canon import leaf_node
        >>> i1, i2, a1 = Index("i", 1), Index("i", 2), Index("a", 1)
        >>> t1, t2 = leaf_node(Tensor("t", (a1,), (i1,))), leaf_node(Tensor("t", (a1,), (i2,)))
        >>> [str(n.tensor) for n in canonical_operand_order([t2, t1], (i1, i2))]
        ['t{a_1;i_1}:N-C-S', 't{a_1;i_2}:N-C-S']
    """
    where: dict[Index, list[tuple[int, int]]] = {}
    for k, op in enumerate(operands):
        for p, ix in enumerate(op.indices):
            where.setdefault(ix, []).append((k, p))
    position = {ix: p for p, ix in enumerate(result)}

    def signature(k: int) -> tuple:
        op = operands[k]
        modes = []
        for p, ix in enumerate(op.indices):
            if ix in position:
                modes.append(((0, "", position[ix]),))
            else:
                links = [
                    (1, "", q) if j == k else (2, operands[j].key, q)
                    for j, q in where[ix]
                    if (j, q) != (k, p)
                ]
                modes.append(tuple(sorted(links)))
        return (op.key, tuple(modes))

    order = sorted(range(len(operands)), key=signature)
    return [operands[k] for k in order]


def binarize(
    operands: Sequence[EvalNode],
    result: Sequence[Index],
    spaces: Spaces,
    optimize: Any = "auto",
) -> EvalNode:
    """Contract ``operands`` pairwise into one node whose modes are ``result``.

    Labels on two operands and not in ``result`` are summed; labels in ``result`` stay
    (a label on two operands and in ``result`` is a Hadamard product). A single operand
    that needs a trace or has modes outside ``result`` (a repeated label) is multiplied
    by the scalar ``1`` so that a PRODUCT does the trace; no operand gives the scalar
    ``1``.

    Args:
        operands: LEAF, SCALAR or SUM nodes (one term's factors).
        result: the labels of the term's result (every one on some operand), in a
            label-blind order such as the left-hand side's (it only breaks ties).
        spaces: extents for the cost model.
        optimize: see :func:`resolve_optimizer`.

    Returns:
        The term's top node (an operand itself when nothing needs computing).

    Example:
        >>> from sq_jax.expr.nodes import Index, Tensor
        >>> from sq_jax.forest.canon import leaf_node
        >>> i1 = Index("i", 1)
        >>> node = binarize([leaf_node(Tensor("f", (i1,), (i1,)))], (), Spaces(i=3))
        >>> node.kind.name, [c.kind.name for c in node.children]
        ('PRODUCT', ['LEAF', 'SCALAR'])
    """
    ordered = tuple(result)
    result = set(ordered)
    if not operands:
        return scalar_node(Constant(Fraction(1)))
    if len(operands) == 1:
        (op,) = operands
        if set(op.indices) == result and len(op.indices) == len(result):
            return op
        return product_node(op, scalar_node(Constant(Fraction(1))), result)
    ops = canonical_operand_order(operands, ordered)
    if len(ops) == 2:
        path = [(0, 1)]
    else:
        path = _contract_path(ops, result, spaces, optimize)
    for step in path:
        picked = [ops[p] for p in sorted(step)]
        ops = [op for p, op in enumerate(ops) if p not in set(step)]
        node = picked[0]
        for n, nxt in enumerate(picked[1:], start=1):
            node = product_node(node, nxt, _keep([node, nxt], picked[n + 1 :] + ops, result))
        ops.append(node)
    (top,) = ops
    if set(top.indices) != result or len(top.indices) != len(result):
        top = product_node(top, scalar_node(Constant(Fraction(1))), result)
    return top


def count_labels(operands: Sequence[EvalNode]) -> Counter[Index]:
    """How many operand modes carry each label (a trace counts twice).

    Example:
        >>> from sq_jax.expr.nodes import Index, Tensor
        >>> from sq_jax.forest.canon import leaf_node
        >>> i1 = Index("i", 1)
        >>> count_labels([leaf_node(Tensor("f", (i1,), (i1,)))])[i1]
        2
    """
    counts: Counter[Index] = Counter()
    for op in operands:
        counts.update(op.indices)
    return counts
