"""Helpers shared by the plots: the lazy matplotlib import, value labels.

Nothing here imports matplotlib at module import time: :func:`require_matplotlib` does,
inside the plotting functions, so ``import sq_jax`` never needs it.

Byte sizes are written by :func:`sq_jax._units.human_bytes`.

Example:
    >>> plural(2, "value"), truncate("abcdef", 4)
    ('2 values', 'abc…')
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..forest.dump import expr_text
from ..schedule import ScheduledForest

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "axes_and_figure",
    "plan_label",
    "plural",
    "require_matplotlib",
    "save",
    "truncate",
    "value_label",
]

MISSING = "plotting needs matplotlib: pip install 'sq_jax[notebooks]'"
"""The one-line message of the :class:`ImportError` raised without matplotlib."""


def require_matplotlib() -> Any:
    """Import matplotlib (lazily) or raise a one-line :class:`ImportError`.

    Raises:
        ImportError: matplotlib is not installed.

    Example:
        >>> require_matplotlib().__name__
        'matplotlib'
    """
    try:
        import matplotlib
        import matplotlib.figure
        import matplotlib.patches
        import matplotlib.ticker
    except ImportError as err:
        raise ImportError(MISSING) from err
    return matplotlib


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


def axes_and_figure(
    ax: Axes | None, figsize: tuple[float, float], *, layout: str | None = "constrained"
) -> tuple[Axes, Figure]:
    """``ax`` and its top-level figure, or a new Agg figure (no pyplot, no global state).

    Example:
        >>> ax, fig = axes_and_figure(None, (4, 3))
        >>> ax.figure is fig, fig.get_size_inches().tolist(), type(fig.canvas).__name__
        (True, [4.0, 3.0], 'FigureCanvasAgg')
    """
    mpl = require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if ax is None:
        fig = mpl.figure.Figure(figsize=figsize, layout=layout)
        FigureCanvasAgg(fig)  # the non-interactive renderer: fig.canvas.draw() works
        return fig.add_subplot(), fig
    fig = ax.figure
    while not isinstance(fig, mpl.figure.Figure):  # a SubFigure: walk up to the root
        fig = fig.figure
    return ax, fig


def save(fig: Figure, path: str | Path | None) -> None:
    """Write ``fig`` as a PNG to ``path`` (nothing when ``path`` is ``None``).

    Example:
        >>> save(None, None)
    """
    if path is not None:
        fig.savefig(
            Path(path),
            format="png",
            dpi=120,
            facecolor="white",
            bbox_inches="tight",
            pad_inches=0.12,
        )
