"""Eval nodes and forests as text: the forest dump (``str(forest)``) and ``expr_text``.

One line per distinct node, in post-order of first appearance, each with an id ``%n``:
leaves show their tensor, scalars their expression, products and sums their operands by
id with the labels of the node's first occurrence, the result modes in canonical order
and the node's FLOPs. Then one line per equation: ``name{lhs indices} = coef * %n``.

Example:
    >>> from fractions import Fraction
    >>> from sq_jax import Equation, Index, Product, Spaces, Tensor, Variable, build_forest
    >>> i1, i2, a1, a2 = Index("i", 1), Index("i", 2), Index("a", 1), Index("a", 2)
    >>> g, t = Tensor("g", (i1, i2), (a1, a2)), Tensor("t", (a1, a2), (i1, i2))
    >>> eq = Equation(Variable("E"), Product(Fraction(1, 4), (g, t)))
    >>> forest = build_forest([eq], Spaces(i=2, a=3))
    >>> print(format_forest(forest))
    forest: 1 equation, 2 leaves, 0 scalars, 1 value, 72 flops
    %0 = leaf g{i_1,i_2;a_1,a_2}:N-C-S
    %1 = leaf t{a_1,a_2;i_1,i_2}:N-C-S
    %2 = product %0[i_1,i_2,a_1,a_2] * %1[a_1,a_2,i_1,i_2] -> []  flops=72
    E = 1/4 * %2[]
"""

from __future__ import annotations

from collections.abc import Iterable

from ..expr.nodes import Index
from .cost import node_flops
from .nodes import EvalNode, Forest, NodeKind

__all__ = ["expr_text", "format_forest"]


def _ix(indices: Iterable[Index]) -> str:
    return "[" + ",".join(map(str, indices)) + "]"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def format_forest(forest: Forest) -> str:
    """The text dump described in the module docstring.

    Args:
        forest: the forest to print.

    Returns:
        The dump, lines joined by newlines (no trailing newline).

    Example:
        >>> from sq_jax import Equation, Index, Spaces, Tensor, Variable, build_forest
        >>> i1 = Index("i", 1)
        >>> f = build_forest(Equation(Variable("E"), Tensor("f", (i1,), (i1,))), Spaces(i=2))
        >>> print(format_forest(f))
        forest: 1 equation, 1 leaf, 1 scalar, 1 value, 4 flops
        %0 = leaf f{i_1;i_1}:N-C-S
        %1 = scalar 1
        %2 = product %0[i_1,i_1] * %1[] -> []  flops=4
        E = %2[]
    """
    nodes = forest.distinct()
    ids: dict[str, int] = {n.key: k for k, n in enumerate(nodes)}
    counts = {kind: sum(n.kind is kind for n in nodes) for kind in NodeKind}
    values = counts[NodeKind.PRODUCT] + counts[NodeKind.SUM]
    lines = [
        f"forest: {_plural(len(forest.roots), 'equation')}, "
        f"{_plural(counts[NodeKind.LEAF], 'leaf').replace('leafs', 'leaves')}, "
        f"{_plural(counts[NodeKind.SCALAR], 'scalar')}, {_plural(values, 'value')}, "
        f"{forest.flops} flops"
    ]

    def ref(child: EvalNode | None) -> str:
        assert child is not None
        return f"%{ids[child.key]}{_ix(child.indices)}"

    for k, node in enumerate(nodes):
        if node.kind is NodeKind.LEAF:
            lines.append(f"%{k} = leaf {node.tensor}")
        elif node.kind is NodeKind.SCALAR:
            lines.append(f"%{k} = scalar {node.scalar}")
        elif node.kind is NodeKind.PRODUCT:
            lines.append(
                f"%{k} = product {ref(node.left)} * {ref(node.right)} -> {_ix(node.indices)}"
                f"  flops={node_flops(node, forest.spaces)}"
            )
        else:
            lines.append(
                f"%{k} = sum {node.left_coef} * {ref(node.left)} + {node.right_coef} * "
                f"{ref(node.right)} -> {_ix(node.indices)}  flops={node_flops(node, forest.spaces)}"
            )
    for root in forest.roots:
        lhs = f"{root.name}{_ix(root.indices)}" if root.lhs_is_tensor else root.name
        coef = "" if root.coef == 1 else f"{root.coef} * "
        lines.append(f"{lhs} = {coef}{ref(root.node)}")
    return "\n".join(lines)


def expr_text(node: EvalNode, limit: int = 120) -> str:
    """A short, readable rendering of the expression a node computes.

    Products are written ``(l * r)``, sums ``(l + c·r)``; the text is cut at ``limit``
    characters (deep sum chains are never walked to the bottom).

    Example:
        >>> from sq_jax.expr.nodes import Index
        >>> from sq_jax.expr.nodes import Tensor
        >>> i, k = Index("i", 1), Index("Κ", 1)
        >>> a = EvalNode(NodeKind.LEAF, (i, k), "A", tensor=Tensor("A", (i,), (), (k,)))
        >>> b = EvalNode(NodeKind.LEAF, (k,), "B", tensor=Tensor("B", (), (), (k,)))
        >>> expr_text(EvalNode(NodeKind.PRODUCT, (i,), "AB", a, b))
        '(A{i_1;;Κ_1} * B{;;Κ_1})'
    """
    out: list[str] = []
    size = 0
    # Iterative rendering: a stack of pending nodes and literal strings.
    stack: list[EvalNode | str] = [node]
    while stack and size <= limit:
        item = stack.pop()
        if isinstance(item, str):
            piece = item
        elif item.kind is NodeKind.LEAF:
            piece = _leaf_text(item)
        elif item.kind is NodeKind.SCALAR:
            piece = str(item.scalar)
        else:
            assert item.left is not None and item.right is not None
            if item.kind is NodeKind.PRODUCT:
                stack += [")", item.right, " * ", item.left]
            else:
                lc = "" if item.left_coef == 1 else f"{item.left_coef}·"
                rc = "" if item.right_coef == 1 else f"{item.right_coef}·"
                stack += [")", item.right, f" + {rc}", item.left, f"({lc}"]
                continue
            piece = "("
        out.append(piece)
        size += len(piece)
    text = "".join(out)
    return text if size <= limit and not stack else text[: limit - 1] + "…"


def _leaf_text(node: EvalNode) -> str:
    t = node.tensor
    if t is None:
        return f"{node.key}[{','.join(map(str, node.indices))}]"
    parts = [",".join(map(str, t.bra)), ",".join(map(str, t.ket))]
    if t.aux:
        parts.append(",".join(map(str, t.aux)))
    return f"{t.label}{{{';'.join(parts)}}}"
