"""Text on the plots: value labels, batch-plan names, plurals and cut text.

Byte sizes are written by :func:`sq_jax._units.human_bytes`.

Example:
    >>> plural(2, "value"), truncate("abcdef", 4)
    ('2 values', 'abc…')
"""

from __future__ import annotations

from ..forest.dump import expr_text
from ..schedule import ScheduledForest

__all__ = ["plan_label", "plural", "truncate", "value_label"]


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, with an ``s`` unless ``n`` is 1.

    Example:
        >>> plural(1, "value"), plural(3, "value")
        ('1 value', '3 values')
    """
    return f"{n} {word}{'' if n == 1 else 's'}"


def truncate(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, with ``…`` when cut.

    Example:
        >>> truncate("(g{a_1;a_2} * t{a_2;i_1})", 12)
        '(g{a_1;a_2}…'
    """
    width = max(width, 2)
    return text if len(text) <= width else text[: width - 1] + "…"


def value_label(sf: ScheduledForest, value_id: int, width: int = 60) -> str:
    """``v<id> [modes] = expression`` of one value, at most ``width`` characters.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.plan import BatchPlan
        >>> from sq_jax.schedule import schedule_forest
        >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
        >>> value_label(schedule_forest(forest, BatchPlan()), 2)
        'v2 [] = (f{i_1;a_1} * t{a_1;i_1})'
    """
    cell = sf.rich.cells[value_id]
    modes = ",".join(map(str, cell.carried))
    what = expr_text(cell.node, width) if cell.node is not None else f"#{cell.key:x}"
    return truncate(f"v{value_id} [{modes}] = {what}", width)


def plan_label(sf: ScheduledForest) -> str:
    """A short name of the schedule's batch plan: ``unbatched`` or ``Κ×3, i×2``.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.plan import BatchPlan
        >>> from sq_jax.schedule import schedule_forest
        >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=4, a=4))
        >>> plan_label(schedule_forest(forest, BatchPlan.of({"i": 2})))
        'i×2'
    """
    spaces = sf.annotated.forest.spaces
    parts = [f"{s.space}×{s.num_batches(spaces.extent(s.space))}" for s in sf.annotated.plan.spaces]
    return ", ".join(parts) if parts else "unbatched"
