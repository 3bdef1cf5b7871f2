"""The static memory profile of a schedule, as a picture.

:func:`plot_peak_profile` draws the live bytes of the intermediates (inputs excluded, as
in :mod:`sq_jax.schedule.peak`) at every static point of the forest's post-order
timeline as a step curve, marks the binding (peak) point, and lists the values live
there with their footprints. A strip at the top shows which points each batch loop
encloses (one representative iteration stands for each loop, as in the peak model).
Calling it twice with the same ``ax`` overlays two schedules of one forest (for example
batched against unbatched: their static points are the same).

Known limitations: the picture is the static model (footprints and live intervals), not
XLA's allocation; with more than ~40 loop instances the strip gets crowded.

Example:
    >>> import sq_jax as sq
    >>> from sq_jax.plan import BatchPlan
    >>> from sq_jax.schedule import schedule_forest
    >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
    >>> fig = plot_peak_profile(schedule_forest(forest, BatchPlan()))
    >>> fig.axes[0].get_ylabel()
    'live intermediates'
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._units import human_bytes, unit_for
from ..plan.batch import LoopKind
from ..schedule import ScheduledForest
from ..schedule.peak import PeakSchedule, dag_path
from ._figure import axes_and_figure, require_matplotlib, save
from ._labels import plan_label, plural, truncate, value_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["CURVE_GID", "LIVE_GID", "LOOP_GID", "MARKER_GID", "live_bytes", "plot_peak_profile"]

CURVE_GID = "sq_jax.peak.curve"
"""``gid`` of the step curve of live bytes (one per profile on an axes)."""
MARKER_GID = "sq_jax.peak.binding"
"""``gid`` of the binding-point marker: its data point is ``(binding_point, peak_bytes)``."""
LOOP_GID = "sq_jax.peak.loop"
"""``gid`` of a loop bar in the top strip."""
LIVE_GID = "sq_jax.peak.live"
"""``gid`` of the box listing the values live at the binding point."""

_ROW = 0.045  # height of one loop row in the strip, as a fraction of the axes


def live_bytes(s: PeakSchedule) -> list[int]:
    """Bytes live at every static point (a difference-array sweep, like the peak's).

    Example:
        >>> from sq_jax.schedule.peak import PeakCell
        >>> live_bytes(PeakSchedule((PeakCell(0, -1, 100, 0, 2), PeakCell(1, -1, 40, 1, 3)), 5))
        [100, 140, 140, 40, 0]
    """
    delta = [0] * (s.num_points + 1)
    for c in s.cells:
        delta[c.first_use] += c.footprint
        delta[c.last_use + 1] -= c.footprint
    out, running = [], 0
    for p in range(s.num_points):
        running += delta[p]
        out.append(running)
    return out


def _loop_segments(sf: ScheduledForest) -> list[tuple[int, int, int, tuple[str, int], str]]:
    """``(row, first, last, loop, label)``: runs of points enclosed by one loop.

    Row ``r`` holds, at every point, the ``r``-th enclosing loop (outermost first) of the
    occurrence there; an opener's own point gets the loops it opens, so a loop's run ends
    where its batches are combined.
    """
    kinds = dict(sf.rich.loop_kind)
    grid: dict[tuple[int, int], tuple[str, int]] = {}
    mode: dict[tuple[str, int], Any] = {}
    for cell in sf.rich.cells:
        for occ in cell.occurrences:
            triples = zip(occ.ectx, occ.ectx_slot, occ.ectx_opener_point, strict=False)
            for row, (ix, slot, opener) in enumerate(triples):
                loop = (ix.space, slot)
                grid[(occ.point, row)] = grid[(opener, row)] = loop
                mode.setdefault(loop, ix)
    out: list[tuple[int, int, int, tuple[str, int], str]] = []
    rows = 1 + max((r for _, r in grid), default=-1)
    for row in range(rows):
        run: list[Any] = []  # [first, last, loop]
        for p in range(sf.rich.num_points + 1):
            loop = grid.get((p, row))
            if run and (loop != run[2] or p == sf.rich.num_points):
                space, slot = run[2]
                kind = kinds.get(run[2])
                label = f"{space}#{slot} ×{sf.annotated.num_batches(mode[run[2]])}"
                out.append((row, run[0], run[1], run[2], label + (f" {kind}" if kind else "")))
                run = []
            if loop is not None:
                run = [run[0] if run else p, p, loop]
    return out


def _byte_axis(ax: Axes, top: float) -> None:
    """Y ticks at round multiples of one binary unit, labelled ``12 KiB``."""
    mpl = require_matplotlib()
    name, scale = unit_for(top)
    locator = mpl.ticker.MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10])
    ticks = [t * scale for t in locator.tick_values(0, top / scale) if 0 <= t * scale <= top]
    ax.yaxis.set_major_locator(mpl.ticker.FixedLocator(ticks))
    ax.yaxis.set_major_formatter(mpl.ticker.FuncFormatter(lambda v, _: f"{v / scale:g} {name}"))


def plot_peak_profile(
    scheduled: ScheduledForest,
    path: str | Path | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    label: str | None = None,
    top: int = 8,
) -> Figure:
    """Plot live intermediate bytes along the schedule's static points.

    Args:
        scheduled: the scheduled forest to profile (``program.schedule`` or
            :func:`~sq_jax.schedule.schedule_forest`).
        path: when given, the figure is saved there as a PNG.
        ax: draw into this axes instead of a new figure; pass the same axes again to
            overlay another schedule of the same forest (each gets the next colour).
        title: the axes title (default: a description of the first profile drawn).
        label: the legend entry (default: the batch plan, e.g. ``Κ×3`` or ``unbatched``).
        top: at most this many of the values live at the peak are listed (largest first).

    Returns:
        The figure (``ax``'s figure when ``ax`` is given). The binding point is the
        line artist with ``gid`` :data:`MARKER_GID`.

    Raises:
        ImportError: matplotlib is not installed.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.plan import BatchPlan
        >>> from sq_jax.schedule import schedule_forest
        >>> forest = sq.build_forest(
        ...     sq.parse("g{p1,p2;p3,p4} = B{p1,p3;;K1} B{p2,p4;;K1}"), sq.Spaces(i=2, a=3, K=8))
        >>> sf = schedule_forest(forest, BatchPlan.of({"K": 4}))
        >>> fig = plot_peak_profile(sf)
        >>> [m] = [a for a in fig.axes[0].lines if a.get_gid() == MARKER_GID]
        >>> (int(m.get_xdata()[0]), int(m.get_ydata()[0])) == (sf.peak.binding_point,
        ...                                                    sf.peak.peak_bytes)
        True
    """
    mpl = require_matplotlib()
    ax, fig = axes_and_figure(ax, (10.0, 6.4))
    s = dag_path(scheduled.rich, scheduled.annotated)
    live = live_bytes(s)
    peak, at = scheduled.peak.peak_bytes, scheduled.peak.binding_point
    n = len(live)
    index = sum(1 for a in ax.patches if a.get_gid() == CURVE_GID)  # earlier profiles here
    color = f"C{index}"
    name = label if label is not None else plan_label(scheduled)

    # The curve: live bytes are constant over a point, so point p spans [p - 1/2, p + 1/2].
    values, edges = (live, [p - 0.5 for p in range(n + 1)]) if live else ([0], [-0.5, 0.5])
    ax.stairs(values, edges, fill=True, color=color, alpha=0.16, lw=0)
    ax.stairs(
        values,
        edges,
        color=color,
        lw=1.6,
        gid=CURVE_GID,
        label=f"{name}: peak {human_bytes(peak)} at point {at}",
    )
    ax.axvline(at, color=color, ls=":", lw=1.1, alpha=0.9)
    ax.plot(
        [at],
        [peak],
        ls="none",
        marker="o",
        ms=8,
        color=color,
        mec="black",
        mew=1.0,
        zorder=5,
        gid=MARKER_GID,
    )

    # The x range first: the loop strip's labels need the data-to-points scale.
    lo_x, hi_x = ax.get_xlim() if index else (0.0, 0.0)
    ax.set_xlim(min(lo_x, -0.6), max(hi_x, n - 0.4))
    rows = _draw_loop_strip(mpl, ax, fig, scheduled, color)

    # Bytes in binary units, with headroom for the strip.
    highest = max(
        max(float(v) for v in a.get_data().values) for a in ax.patches if a.get_gid() == CURVE_GID
    )
    highest = max(highest, 1.0)
    ax.set_ylim(0, highest / (1 - rows * _ROW - 0.06))
    _byte_axis(ax, highest * 1.02)
    _point_ticks(mpl, ax, scheduled, n)
    ax.set_xlabel("static point (post-order over the forest; leaves are inputs)")
    ax.set_ylabel("live intermediates")
    ax.grid(axis="y", color="0.88", lw=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    _legend(ax, 1 - rows * _ROW - 0.01)
    if title is not None or index == 0:
        ax.set_title(title if title is not None else _default_title(scheduled), fontsize=11)

    # The values live at the binding point, largest first, in a box under the axes.
    if peak > 0:
        _list_live(ax, scheduled, s, color, index, top)
    save(fig, path)
    return fig


def _draw_loop_strip(mpl: Any, ax: Axes, fig: Figure, sf: ScheduledForest, color: str) -> int:
    """Draw the loop rows under the top of the axes; return the rows used so far."""
    strip = ax.get_xaxis_transform()  # x in data, y in axes fraction
    previous = [a for a in ax.patches if a.get_gid() == LOOP_GID]  # earlier profiles' rows
    base = max((round((1 - a.get_y()) / _ROW) for a in previous), default=0)
    segments = _loop_segments(sf)
    lo_x, hi_x = ax.get_xlim()
    width_pt = fig.get_size_inches()[0] * ax.get_position().width * 72
    char = 0.62 * 7 * (hi_x - lo_x) / width_pt  # one 7-pt character, in data units
    kinds = dict(sf.rich.loop_kind)
    for row, first, last, loop, text in segments:
        y = 1 - (base + row + 1) * _ROW
        contracted = kinds.get(loop) is LoopKind.CONTRACTED
        ax.add_patch(
            mpl.patches.Rectangle(
                (first - 0.5, y + 0.004),
                last - first + 1,
                _ROW - 0.008,
                transform=strip,
                fc=color,
                alpha=0.22 if contracted else 0.38,
                ec="white",
                lw=0.8,
                hatch="///" if contracted else None,
                gid=LOOP_GID,
            )
        )
        room = last - first + 1
        if len(text) * char > room:
            text = text.split(" ")[0]  # the loop's name only
        if len(text) * char <= room:
            ax.text(
                (first + last) / 2,
                y + _ROW / 2,
                text,
                transform=strip,
                ha="center",
                va="center",
                fontsize=7,
                clip_on=True,
            )
    rows = base + 1 + max((r for r, *_ in segments), default=-1)
    if segments and not previous:
        hint = "\n(hatched:\nContracted)" if LoopKind.CONTRACTED in kinds.values() else ""
        ax.text(
            -0.008,
            1 - rows * _ROW / 2,
            "loops" + hint,
            transform=ax.transAxes,
            ha="right",
            va="center",
            fontsize=6.5,
            color="0.35",
        )
    return rows


def _point_ticks(mpl: Any, ax: Axes, sf: ScheduledForest, n: int) -> None:
    """Integer ticks; with few points, each labelled with the value made there."""
    if n > 24:
        ax.xaxis.set_major_locator(mpl.ticker.MaxNLocator(integer=True, nbins=12))
        return
    what = {}
    for cell in sf.rich.cells:
        for occ in cell.occurrences:
            node = occ.node if occ.node is not None else cell.node
            if not cell.is_leaf or node is None:
                what[occ.point] = f"v{cell.value_id}"
            else:  # an input: its tensor's label (or the scalar)
                what[occ.point] = node.tensor.label if node.tensor is not None else str(node.scalar)
    ax.set_xticks(range(n), [f"{p}\n{truncate(what.get(p, ''), 6)}" for p in range(n)], fontsize=8)


def _legend(ax: Axes, top: float) -> None:
    """The legend in an upper corner that no binding-point marker is under."""
    lo, hi = ax.get_xlim()
    xs = [(m.get_xdata()[0] - lo) / (hi - lo) for m in ax.lines if m.get_gid() == MARKER_GID]
    corners = (
        ("upper left", 0.0, (0.0, 0.4)),
        ("upper right", 1.0, (0.6, 1.0)),
        ("upper center", 0.5, (0.3, 0.7)),
    )
    free = [(c, x) for c, x, (a, b) in corners if not any(a <= v <= b for v in xs)]
    loc, x = free[0] if free else corners[0][:2]
    ax.legend(loc=loc, bbox_to_anchor=(x, top), fontsize=8.5, framealpha=0.92)


def _default_title(sf: ScheduledForest) -> str:
    n_values = sum(1 for c in sf.rich.cells if not c.is_leaf)
    return (
        f"Static memory profile: {plural(n_values, 'intermediate')}, {plan_label(sf)}, "
        f"peak {human_bytes(sf.peak.peak_bytes)}"
    )


def _list_live(
    ax: Axes, sf: ScheduledForest, s: PeakSchedule, color: str, index: int, top: int
) -> None:
    at, peak = sf.peak.binding_point, sf.peak.peak_bytes
    live = sorted((s.cells[k] for k in sf.peak.live_at_binding), key=lambda c: -c.footprint)
    lines = [f"● {plan_label(sf)}: {len(live)} values live at point {at}, {human_bytes(peak)}"]
    for c in live[:top]:
        lines.append(f"{human_bytes(c.footprint):>9}  {value_label(sf, c.value_id, 54)}")
    if len(live) > top:
        rest = sum(c.footprint for c in live[top:])
        lines.append(f"{human_bytes(rest):>9}  … {len(live) - top} more")
    ax.annotate(
        "\n".join(lines),
        xy=(0.5 * (index % 2), 0),
        xycoords=("axes fraction", ax.xaxis.label),  # under the x label, however tall
        xytext=(0, -8),
        textcoords="offset points",
        ha="left",
        va="top",
        fontsize=7.3,
        family="monospace",
        bbox={"boxstyle": "round,pad=0.5", "fc": "white", "ec": color, "lw": 1.2},
        gid=LIVE_GID,
    )
