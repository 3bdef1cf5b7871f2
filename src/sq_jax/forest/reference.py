"""The reference evaluator: every value computed once, node by node, unbatched.

This is the oracle every later stage is tested against. It walks the forest bottom-up
(iteratively — sum chains can be thousands deep), computes each distinct value (one per
node ``key``) once with a binary ``einsum``, and returns one array per equation, with the
modes in the order of the equation's left-hand side.

:func:`evaluate_reference` uses ``numpy.einsum``; :func:`evaluate_reference_jax` is its
twin on ``jax.numpy`` — traceable, so it can be ``jax.jit``-ed and differentiated.

Example:
    >>> import numpy as np, sq_jax as sq
    >>> eqs = sq.parse("R{a1;i1} = f{a1;i1} + 1/2 g{a1,i2;i1,a2} t{a2;i2}")
    >>> rng = np.random.default_rng(0)
    >>> inputs = {"f": rng.random((5, 5)), "g": rng.random((5,) * 4), "t{a;i}": rng.random((3, 2))}
    >>> out = sq.evaluate_reference(eqs, sq.Spaces(i=2, a=3), inputs)
    >>> f, g, t = inputs["f"][2:, :2], inputs["g"][2:, :2, :2, 2:], inputs["t{a;i}"]
    >>> bool(np.allclose(out["R"], f + 0.5 * np.einsum("ajib,bj->ai", g, t)))
    True
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from .._errors import ExpressionError
from ..expr.nodes import Constant, Equation, Index, Power, Variable
from ..expr.spaces import Spaces
from .denominators import build_denominator, is_denominator
from .inputs import bind_inputs, block_key, input_names
from .nodes import EvalNode, Forest, NodeKind

__all__ = ["evaluate_forest", "evaluate_reference", "evaluate_reference_jax", "scalar_value"]

_LETTERS = string.ascii_letters


def _letters(*groups: Sequence[Index]) -> dict[Index, str]:
    table: dict[Index, str] = {}
    for group in groups:
        for ix in group:
            if ix not in table:
                if len(table) == len(_LETTERS):
                    raise ExpressionError(
                        f"a contraction uses more than {len(_LETTERS)} distinct indices; "
                        "einsum cannot name them."
                    )
                table[ix] = _LETTERS[len(table)]
    return table


def _spec(indices: Sequence[Index], table: Mapping[Index, str]) -> str:
    return "".join(table[ix] for ix in indices)


def _permute(xp: Any, array: Any, src: Sequence[Index], dst: Sequence[Index]) -> Any:
    """Reorder ``array``'s modes from labels ``src`` to labels ``dst`` (same set)."""
    if tuple(src) == tuple(dst):
        return array
    return xp.transpose(array, [list(src).index(ix) for ix in dst])


def scalar_value(xp: Any, expr: Any, blocks: Mapping[str, Any]) -> Any:
    """The value of a scalar factor (constant, variable or power) with array module ``xp``.

    Variables are read from ``blocks`` by name (the reference evaluator and the lowered
    program share this).

    Example:
        >>> import numpy as np
        >>> from sq_jax.expr.nodes import Power
        >>> float(scalar_value(np, Power(Variable("w"), Fraction(2)), {"w": np.asarray(3.0)}))
        9.0
    """
    if isinstance(expr, Constant):
        return float(expr.value)
    if isinstance(expr, Variable):
        value = blocks[expr.name]
        return xp.conj(value) if expr.conjugated else value
    if isinstance(expr, Power):
        value = scalar_value(xp, expr.base, blocks) ** float(expr.exponent)
        return xp.conj(value) if expr.conjugated else value
    raise ExpressionError(f"cannot evaluate scalar factor {expr!s}")


def _coef(c: Fraction) -> float:
    return float(c)


def evaluate_forest(forest: Forest, blocks: Mapping[str, Any], *, xp: Any = np) -> dict[str, Any]:
    """Evaluate an already-built forest on already-bound input blocks.

    Args:
        forest: the eval forest.
        blocks: arrays by block key, as :func:`~sq_jax.forest.inputs.bind_inputs` returns.
        xp: ``numpy`` or ``jax.numpy``.

    Returns:
        One array per equation name, modes in left-hand-side order.

    Example:
        >>> import numpy as np, sq_jax as sq
        >>> forest = sq.build_forest(sq.parse("E = 2 x{i1;i1}"), sq.Spaces(i=3))
        >>> float(evaluate_forest(forest, {"x{i;i}": np.eye(3)})["E"])
        6.0
    """
    values: dict[str, Any] = {}
    results: dict[str, Any] = {}
    for root in forest.roots:
        # Iterative post-order: a node is computed after both operands are in `values`.
        stack: list[tuple[EvalNode, bool]] = [(root.node, False)]
        while stack:
            node, expanded = stack.pop()
            if node.key in values:
                continue
            if not expanded and not node.is_leaf:
                stack.append((node, True))
                stack.append((node.right, False))  # type: ignore[arg-type]
                stack.append((node.left, False))  # type: ignore[arg-type]
                continue
            values[node.key] = _compute(node, values, blocks, xp)
        value = _permute(xp, values[root.node.key], root.node.indices, root.indices)
        results[root.name] = value * _coef(root.coef) if root.coef != 1 else value
    return results


def _compute(node: EvalNode, values: Mapping[str, Any], blocks: Mapping[str, Any], xp: Any) -> Any:
    if node.kind is NodeKind.LEAF:
        assert node.tensor is not None
        if is_denominator(node.tensor):  # generated whole from the orbital energies
            return build_denominator(xp, block_key(node.tensor), blocks)
        return blocks[block_key(node.tensor)]
    if node.kind is NodeKind.SCALAR:
        return xp.asarray(scalar_value(xp, node.scalar, blocks))
    left, right = node.left, node.right
    assert left is not None and right is not None
    a, b = values[left.key], values[right.key]
    if node.kind is NodeKind.PRODUCT:
        table = _letters(left.indices, right.indices, node.indices)
        spec = (
            f"{_spec(left.indices, table)},{_spec(right.indices, table)}"
            f"->{_spec(node.indices, table)}"
        )
        return xp.einsum(spec, a, b)
    # SUM: each operand permuted onto the sum's mode order, then the weighted add.
    a = _permute(xp, a, left.indices, node.indices)
    b = _permute(xp, b, right.indices, node.indices)
    return _coef(node.left_coef) * a + _coef(node.right_coef) * b


def _as_forest(
    source: Forest | Sequence[Equation] | str,
    spaces: Spaces | None,
    outputs: Sequence[str] | None = None,
) -> Forest:
    from ..expr.parse import parse
    from .build import build_forest, select_outputs  # the builder imports this package
    from .factor import unfactored

    if isinstance(source, Forest):
        keep = select_outputs(outputs, [root.name for root in source.roots])
        if len(keep) == len(source.roots):
            return source
        kept = Forest(tuple(r for r in source.roots if r.name in keep), source.spaces)
        unread = input_names(source) - input_names(kept)
        return Forest(kept.roots, source.spaces, source.unread_inputs | unread)
    if spaces is None:
        raise ExpressionError(
            "evaluate_reference needs `spaces` (with extents) when given equations; "
            "pass e.g. sq.Spaces(i=10, a=38), or pass a Forest."
        )
    equations = parse(source, spaces=spaces) if isinstance(source, str) else tuple(source)
    with unfactored():  # the oracle evaluates the flat expansion, not the factored sums
        return build_forest(equations, spaces, outputs=outputs)


def evaluate_reference(
    source: Forest | Sequence[Equation] | str,
    spaces: Spaces | None,
    inputs: Mapping[str, Any],
    *,
    outputs: Sequence[str] | None = None,
    xp: Any = np,
) -> dict[str, np.ndarray]:
    """Evaluate equations with ``numpy.einsum``, unbatched: the test oracle.

    Args:
        source: a :class:`~sq_jax.Forest`, parsed equations, or equation text.
        spaces: index spaces with extents (ignored when ``source`` is a Forest).
        inputs: input tensors, see :mod:`sq_jax.forest.inputs` for the naming
            (block key such as ``"g{i,i;a,a}"``, or the full tensor under ``"g"``).
        outputs: the result labels to return (``None``: every equation's). As in
            :func:`sq_jax.compile`, a result read by a later equation is that equation's
            value, not an input.
        xp: the array module: ``numpy``, or ``jax.numpy`` (what
            :func:`evaluate_reference_jax` passes) for a traceable evaluation.

    Returns:
        One array of ``xp`` per returned result; modes in the order of the left-hand side.

    Raises:
        InputError: for missing or mis-shaped inputs.
        PlanError: for ``outputs`` naming an unknown result.

    Example:
        >>> import numpy as np, sq_jax as sq
        >>> out = sq.evaluate_reference("E = f{i1;i1}", sq.Spaces(i=2), {"f{i;i}": np.eye(2)})
        >>> float(out["E"])
        2.0
    """
    forest = _as_forest(source, spaces, outputs)
    return evaluate_forest(forest, bind_inputs(forest, inputs, xp=xp), xp=xp)


def evaluate_reference_jax(
    source: Forest | Sequence[Equation] | str,
    spaces: Spaces | None,
    inputs: Mapping[str, Any],
    *,
    outputs: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The ``jax.numpy`` twin of :func:`evaluate_reference`: traceable and differentiable.

    Takes the same arguments as :func:`evaluate_reference`.

    Example:
        >>> import jax, jax.numpy as jnp, sq_jax as sq
        >>> forest = sq.build_forest(sq.parse("E = t{a1;i1} t{a1;i1}"), sq.Spaces(i=2, a=2))
        >>> energy = lambda t: sq.evaluate_reference_jax(forest, None, {"t{a;i}": t})["E"]
        >>> jax.grad(energy)(jnp.ones((2, 2))).tolist()
        [[2.0, 2.0], [2.0, 2.0]]
    """
    import jax.numpy as jnp

    return evaluate_reference(source, spaces, inputs, outputs=outputs, xp=jnp)
