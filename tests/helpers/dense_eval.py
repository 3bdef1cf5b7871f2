"""A tiny NumPy evaluator of eval forests and equations, independent of sq_jax's own.

It evaluates every *occurrence* of a forest separately (memo by object identity, never by
key), so tests can check that equal canonical keys really mean equal arrays, and it
evaluates an equation straight from its expression (one ``numpy.einsum`` per term).
Used by ``test_cse``, ``test_forest`` and ``test_permsum``.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

import sq_jax as sq
from sq_jax.expr.nodes import Constant, Equation, Product, Sum, Tensor, Variable
from sq_jax.forest.nodes import EvalNode, NodeKind

LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def leaf_array(tensor: Tensor, spaces: sq.Spaces, bank: dict) -> np.ndarray:
    """The input block of ``tensor``: small integers, one array per (label, slot spaces)."""
    block = (tensor.label, tensor.signature, tuple(ix.space for ix in tensor.indices))
    if block not in bank:
        rng = np.random.default_rng(len(bank) + 7)
        shape = tuple(spaces.extent(ix.space) for ix in tensor.indices)
        bank[block] = rng.integers(-3, 4, size=shape).astype(np.float64)
    return bank[block]


def scalar_value(expr, variables: dict) -> float:
    if isinstance(expr, Constant):
        return float(expr.value)
    if isinstance(expr, Variable):
        return variables[expr.name]
    raise AssertionError(f"unexpected scalar {expr!r}")


def _spec(indices, table) -> str:
    return "".join(table.setdefault(ix, LETTERS[len(table)]) for ix in indices)


def evaluate_occurrences(
    roots: list[EvalNode], spaces: sq.Spaces, bank: dict, variables: dict
) -> dict[int, np.ndarray]:
    """The array of every occurrence (by ``id``), modes in ``node.indices`` order."""
    out: dict[int, np.ndarray] = {}
    for root in roots:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in out:
                continue
            if node.kind is NodeKind.LEAF:
                out[id(node)] = leaf_array(node.tensor, spaces, bank)
            elif node.kind is NodeKind.SCALAR:
                out[id(node)] = np.asarray(scalar_value(node.scalar, variables))
            elif not expanded:
                stack += [(node, True), (node.right, False), (node.left, False)]
            elif node.kind is NodeKind.PRODUCT:
                table: dict = {}
                spec = (
                    f"{_spec(node.left.indices, table)},{_spec(node.right.indices, table)}"
                    f"->{_spec(node.indices, table)}"
                )
                out[id(node)] = np.einsum(spec, out[id(node.left)], out[id(node.right)])
            else:
                parts = []
                for child, coef in ((node.left, node.left_coef), (node.right, node.right_coef)):
                    perm = [child.indices.index(ix) for ix in node.indices]
                    parts.append(float(coef) * np.transpose(out[id(child)], perm))
                out[id(node)] = parts[0] + parts[1]
    return out


def evaluate_roots(forest: sq.Forest, bank: dict, variables: dict) -> dict[str, np.ndarray]:
    """Each equation's result in left-hand-side order, from the forest."""
    arrays = evaluate_occurrences([r.node for r in forest.roots], forest.spaces, bank, variables)
    results = {}
    for root in forest.roots:
        value = arrays[id(root.node)]
        perm = [root.node.indices.index(ix) for ix in root.indices]
        results[root.name] = float(root.coef) * np.transpose(value, perm)
    return results


def evaluate_direct(eq: Equation, spaces: sq.Spaces, bank: dict, variables: dict) -> np.ndarray:
    """The equation evaluated straight from the expression: one einsum per term."""
    out_ix = eq.lhs.indices if isinstance(eq.lhs, Tensor) else ()

    def term_value(term, result) -> np.ndarray:
        coef, ops, specs, table = 1.0, [], [], {}
        stack = [term]
        while stack:
            node = stack.pop()
            if isinstance(node, Product):
                coef *= float(node.scalar)
                stack.extend(reversed(node.factors))
            elif isinstance(node, Constant):
                coef *= float(node.value)
            elif isinstance(node, Variable):
                coef *= variables[node.name]
            elif isinstance(node, Tensor):
                ops.append(leaf_array(node, spaces, bank))
                specs.append(_spec(node.indices, table))
            else:  # a nested sum: its result is what it shares with the rest
                raise AssertionError("nested sums are checked through the corpus")
        spec = ",".join(specs) + "->" + _spec(result, table)
        return coef * (np.einsum(spec, *ops) if ops else np.asarray(1.0))

    terms = eq.rhs.terms if isinstance(eq.rhs, Sum) else (eq.rhs,)
    return sum(term_value(t, out_ix) for t in terms)


def occurrences_by_key(forest: sq.Forest) -> dict[str, list[EvalNode]]:
    groups: dict[str, list[EvalNode]] = defaultdict(list)
    for node in forest.occurrences():
        groups[node.key].append(node)
    return groups
