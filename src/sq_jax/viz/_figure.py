"""The figure's life cycle: the lazy matplotlib import, a new figure, saving it.

Nothing here imports matplotlib at module import time: :func:`require_matplotlib` does,
inside the plotting functions, so ``import sq_jax`` never needs it. Figures are built
directly (no ``pyplot``, no global state) and drawn with the Agg renderer.

Example:
    >>> ax, fig = axes_and_figure(None, (4, 3))
    >>> type(fig.canvas).__name__
    'FigureCanvasAgg'
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["MISSING", "axes_and_figure", "require_matplotlib", "save"]

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
