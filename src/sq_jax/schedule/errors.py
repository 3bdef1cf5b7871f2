"""The scheduler's refusals: one :class:`~sq_jax.ScheduleError` subclass per case.

Each class is one row of the "Errors" table of ``docs/schedule.md`` (SeQuant's
V2 rules): every input the scheduler cannot express raises, never asserts. Messages name
the value (its id and expression), the loops involved, and how to fix the input.

Example:
    >>> from sq_jax.schedule.errors import LoopOrderCycleError
    >>> from sq_jax import ScheduleError
    >>> issubclass(LoopOrderCycleError, ScheduleError)
    True
"""

from __future__ import annotations

from .._errors import ScheduleError
from ..forest.nodes import EvalNode, NodeKind

__all__ = [
    "AnnotationError",
    "DemotionFixpointError",
    "InternalScheduleError",
    "LaterPassReaderError",
    "LoopKindConflictError",
    "LoopOrderCycleError",
    "MalformedScheduleError",
    "PartialSumReadError",
    "ReductionWithoutSlotError",
    "StepCycleError",
    "UnescapedNonLocalError",
    "UnknownValueError",
    "expr_text",
]


class AnnotationError(ScheduleError):
    """A loop annotation does not fit its node (wrong mode, shadowed label, ...)."""


class LoopKindConflictError(ScheduleError):
    """One loop instance was opened both as ``External`` and as ``Contracted``."""


class UnknownValueError(ScheduleError):
    """A value of the rich schedule has no node in the forest it is analysed against."""


class DemotionFixpointError(ScheduleError):
    """The legality demotion fixpoint did not settle within its round cap."""


class StepCycleError(ScheduleError):
    """The steps of one block cannot be ordered: their dependencies form a cycle."""


class LoopOrderCycleError(ScheduleError):
    """The required (outer, inner) loop nesting pairs contradict each other."""


class ReductionWithoutSlotError(ScheduleError):
    """A value reduces a batched mode that no loop instance was assigned to."""


class LaterPassReaderError(ScheduleError):
    """A later-pass reader in another nest needs a value that never leaves its loop."""


class UnescapedNonLocalError(ScheduleError):
    """Materializing a value across a pass split found a non-local axis with no escape."""


class PartialSumReadError(ScheduleError):
    """A value would read a sum escape from inside its loop in the same pass."""


class MalformedScheduleError(ScheduleError):
    """The ordered schedule the builder produced breaks a ``well_formed`` rule."""


class InternalScheduleError(ScheduleError):
    """An internal invariant of the scheduler does not hold (a bug; please report it)."""


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
