"""Helpers shared by the permuted-sum grouping and factoring tests."""

from __future__ import annotations

from contextlib import contextmanager

import sq_jax.forest.build as forest_build
from sq_jax.forest.nodes import NodeKind


@contextmanager
def ungrouped():
    """Build forests as before the grouping: every expanded term its own summand."""
    saved = forest_build.group_permuted
    forest_build.group_permuted = lambda terms, result: list(terms)
    try:
        yield
    finally:
        forest_build.group_permuted = saved


def sum_reads(forest, name):
    """(distinct SUM values, their transposed operand reads) of one equation's tree."""
    root = next(r for r in forest.roots if r.name == name)
    seen, sums, stack = set(), [], [root.node]
    while stack:
        node = stack.pop()
        if node.is_leaf or node.key in seen:
            continue
        seen.add(node.key)
        if node.kind is NodeKind.SUM:
            sums.append(node)
        stack += [node.left, node.right]
    transposed = sum(op.indices != node.indices for node in sums for op in node.children)
    return len(sums), transposed
