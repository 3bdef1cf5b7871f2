"""The loop nest of an ordered schedule, as nested boxes.

:func:`plot_loop_nest` draws every :class:`~sq_jax.schedule.ir.ScopeBlock` (the root
included) as a box with a header band (space, slot, kind, batch count, depth, pass), its
build steps as small entries in execution order (value, modes, expression, footprint),
and its escape outputs (``Sum``/``Scatter``) as coloured entries after them. Values live
at the static peak are outlined in red, linking the picture to
:func:`~sq_jax.viz.peak.plot_peak_profile`. One row per entry; the figure height grows
with the number of rows and the expression text is cut to the width available.

Known limitations: very deep nests (more than ~10 loops) squeeze the text; the
expression of a value is cut, the full text is in ``str(scheduled)``.

Example:
    >>> import sq_jax as sq
    >>> from sq_jax.plan import BatchPlan
    >>> from sq_jax.schedule import schedule_forest
    >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=4, a=4))
    >>> fig = plot_loop_nest(schedule_forest(forest, BatchPlan.of({"i": 2})))
    >>> sorted(p.get_gid() for p in fig.axes[0].patches if p.get_gid().startswith("block:"))
    ['block:i#0/pass0', 'block:root']
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._units import human_bytes
from ..plan.batch import LoopKind
from ..schedule import ScheduledForest
from ..schedule.ir import BuildStep, OutputKind, ScopeBlock
from ..schedule.peak import dag_path
from ._figure import axes_and_figure, require_matplotlib, save
from ._labels import plan_label, plural, truncate, value_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["BLOCK_GID_PREFIX", "plot_loop_nest"]

BLOCK_GID_PREFIX = "block:"
"""Every block box has ``gid`` ``block:root`` or ``block:<space>#<slot>/pass<n>``."""

_WIDTH = 100.0  # x extent of the drawing, in data units
_INDENT, _RINDENT = 2.4, 1.0  # left/right inset per nesting level
_FONT = 7.8  # points
_ROW_IN = 0.25  # inches per row
_GAP = 0.3  # rows of space after a block closes

_PALETTE = {
    None: ("#6b6b6b", "#f6f6f6"),  # root: header, body
    LoopKind.EXTERNAL: ("#3b75af", "#eef4fb"),
    LoopKind.CONTRACTED: ("#4f9a3c", "#eff7ec"),
}
_OUT = {
    OutputKind.ACCUMULATE_SUM: ("#fde9d9", "#e0782c"),  # face, edge
    OutputKind.ACCUMULATE_SCATTER: ("#ece4f5", "#8d69b8"),
}
_BUILD = ("white", "#9aa5b1")
_PEAK = "#c03d3e"


@dataclass(frozen=True, slots=True)
class _Box:
    block: ScopeBlock
    depth: int
    top: float
    bottom: float


@dataclass(frozen=True, slots=True)
class _Entry:
    value_id: int
    depth: int
    y: float
    output: OutputKind | None  # None for a build step


def plot_loop_nest(
    scheduled: ScheduledForest,
    path: str | Path | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    width: float = 11.0,
) -> Figure:
    """Draw the ordered schedule's block tree as nested boxes.

    Args:
        scheduled: the scheduled forest whose ordered block tree is drawn
            (``program.schedule`` or :func:`~sq_jax.schedule.schedule_forest`).
        path: when given, the figure is saved there as a PNG.
        ax: draw into this axes (its figure keeps its size) instead of a new figure,
            whose height grows with the number of rows.
        title: the title (default: counts and the batch plan).
        width: width in inches of a new figure.

    Returns:
        The figure. Every block box is a patch whose ``gid`` starts with
        :data:`BLOCK_GID_PREFIX`; entries carry ``gid`` ``build:v<id>`` or
        ``Sum:v<id>``/``Scatter:v<id>``.

    Raises:
        ImportError: matplotlib is not installed.

    Example:
        >>> import sq_jax as sq
        >>> forest = sq.build_forest(
        ...     sq.parse("g{p1,p2;p3,p4} = B{p1,p3;;K1} B{p2,p4;;K1}"), sq.Spaces(i=2, a=3, K=8))
        >>> fig = plot_loop_nest(sq.schedule_forest(forest, sq.BatchPlan.of({"K": 4})))
        >>> [p.get_gid() for p in fig.axes[0].patches if p.get_gid().startswith("Sum")]
        ['Sum:v1']
    """
    mpl = require_matplotlib()
    boxes, entries, height = _layout_rows(scheduled.ordered.root)
    own = ax is None
    fig_h = 0.85 + _ROW_IN * max(height, 2)
    ax, fig = axes_and_figure(ax, (width, fig_h), layout=None)
    if own:  # fixed margins (in inches), so the text width is known before drawing
        fig.subplots_adjust(
            left=0.06 / width, right=1 - 0.06 / width, bottom=0.08 / fig_h, top=1 - 0.72 / fig_h
        )
    s = dag_path(scheduled.rich, scheduled.annotated)
    footprint = {c.value_id: c.footprint for c in s.cells}
    at_peak = {s.cells[k].value_id for k in scheduled.peak.live_at_binding}

    ax.set_xlim(0, _WIDTH)
    ax.set_ylim(height - _GAP - 0.25, -0.62)
    ax.set_axis_off()
    fig_w = fig.get_size_inches()[0] * ax.get_position().width * 72  # axes width, points
    chars_per_unit = fig_w / _WIDTH / (0.66 * _FONT)  # a monospace glyph, hinted, is ~0.65 em

    for b in boxes:
        _draw_box(mpl, ax, scheduled, b, chars_per_unit)
    for e in entries:
        _draw_entry(
            mpl, ax, scheduled, e, footprint.get(e.value_id), e.value_id in at_peak, chars_per_unit
        )

    handles = [
        mpl.patches.Patch(fc=_PALETTE[LoopKind.EXTERNAL][0], label="External loop"),
        mpl.patches.Patch(fc=_PALETTE[LoopKind.CONTRACTED][0], label="Contracted loop"),
        mpl.patches.Patch(fc=_BUILD[0], ec=_BUILD[1], label="build step"),
        mpl.patches.Patch(
            fc=_OUT[OutputKind.ACCUMULATE_SUM][0],
            ec=_OUT[OutputKind.ACCUMULATE_SUM][1],
            label="↑ Sum escape",
        ),
        mpl.patches.Patch(
            fc=_OUT[OutputKind.ACCUMULATE_SCATTER][0],
            ec=_OUT[OutputKind.ACCUMULATE_SCATTER][1],
            label="↑ Scatter escape",
        ),
        mpl.patches.Patch(fc="white", ec=_PEAK, lw=1.6, label="live at peak"),
    ]
    ax.legend(
        handles=handles,
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        ncols=6,
        fontsize=8,
        frameon=False,
        handlelength=1.6,
    )
    ax.set_title(title if title is not None else _default_title(scheduled), fontsize=11, pad=22)
    save(fig, path)
    return fig


def _layout_rows(root: ScopeBlock) -> tuple[list[_Box], list[_Entry], float]:
    """Rows for every block header, build step and output, in execution order.

    Iterative: the stack holds ``("open", block, depth)``, ``("entry", value, depth,
    output kind or None)`` and ``("close", block, depth, header row)`` items.
    """
    boxes: list[_Box] = []
    entries: list[_Entry] = []
    y = 0.0
    stack: list[tuple] = [("open", root, 0)]
    while stack:
        tag, *item = stack.pop()
        if tag == "open":
            blk, depth = item
            todo: list[tuple] = [
                ("entry", s.value_id, depth + 1, None)
                if isinstance(s, BuildStep)
                else ("open", s, depth + 1)
                for s in blk.steps
            ]
            todo += [("entry", v, depth + 1, kind) for v, kind in blk.outputs]
            todo.append(("close", blk, depth, y))
            stack.extend(reversed(todo))
            y += 1  # the header row
        elif tag == "entry":
            vid, depth, kind = item
            entries.append(_Entry(vid, depth, y, kind))
            y += 1
        else:
            blk, depth, top = item
            boxes.append(_Box(blk, depth, top - 0.47, y - 0.5 + 0.14))
            y += _GAP
    boxes.sort(key=lambda b: (b.depth, b.top))  # outer boxes first: inner ones draw on top
    return boxes, entries, y


def _default_title(sf: ScheduledForest) -> str:
    walk = sf.ordered.walk()
    n_builds = sum(1 for b, _ in walk for s in b.steps if isinstance(s, BuildStep))
    n_out = sum(len(b.outputs) for b, _ in walk)
    return (
        f"Loop nest ({plan_label(sf)}): {plural(len(walk) - 1, 'loop block')}, "
        f"{plural(n_builds, 'build')}, {plural(n_out, 'escape output')}"
    )


def _header_text(sf: ScheduledForest, blk: ScopeBlock) -> str:
    if blk.is_root:
        n_values = sum(1 for c in sf.rich.cells if not c.is_leaf)
        peak = human_bytes(sf.peak.peak_bytes)
        return f"root: runs once · {plural(n_values, 'intermediate')} · static peak {peak}"
    lv, ann = blk.level, sf.annotated
    assert blk.axis is not None
    n, size = ann.num_batches(blk.axis), ann.block_of(blk.axis)
    return (
        f"loop {lv.space}#{lv.loop_slot} over {blk.axis} · {blk.kind} · ×{n} batches of {size}"
        f" · pass {lv.latitude}"
    )


def _draw_box(mpl: Any, ax: Axes, sf: ScheduledForest, b: _Box, chars_per_unit: float) -> None:
    head, body = _PALETTE[b.block.kind]
    x0, x1 = b.depth * _INDENT, _WIDTH - b.depth * _RINDENT
    lv = b.block.level
    gid = "root" if b.block.is_root else f"{lv.space}#{lv.loop_slot}/pass{lv.latitude}"
    z = 1 + 0.01 * b.depth
    ax.add_patch(
        mpl.patches.FancyBboxPatch(
            (x0, b.top),
            x1 - x0,
            b.bottom - b.top,
            boxstyle="round,pad=0,rounding_size=0.35",
            fc=body,
            ec=head,
            lw=1.3,
            zorder=z,
            gid=BLOCK_GID_PREFIX + gid,
            mutation_aspect=1 / 3,
        )
    )
    ax.add_patch(
        mpl.patches.Rectangle(
            (x0, b.top), x1 - x0, 0.86, fc=head, ec="none", zorder=z + 0.001, gid="block-header"
        )
    )
    text = truncate(_header_text(sf, b.block), int((x1 - x0 - 1.5) * chars_per_unit * 0.92))
    ax.text(
        x0 + 0.8,
        b.top + 0.43,
        text,
        ha="left",
        va="center",
        fontsize=_FONT + 0.4,
        color="white",
        fontweight="bold",
        zorder=z + 0.002,
    )


def _draw_entry(
    mpl: Any,
    ax: Axes,
    sf: ScheduledForest,
    e: _Entry,
    nbytes: int | None,
    at_peak: bool,
    chars_per_unit: float,
) -> None:
    x0 = e.depth * _INDENT + 0.6
    x1 = _WIDTH - e.depth * _RINDENT - 0.4
    face, edge = _BUILD if e.output is None else _OUT[e.output]
    tag = "build" if e.output is None else f"↑ {e.output}"
    gid = f"{'build' if e.output is None else e.output}:v{e.value_id}"
    ax.add_patch(
        mpl.patches.FancyBboxPatch(
            (x0, e.y - 0.36),
            x1 - x0,
            0.72,
            boxstyle="round,pad=0,rounding_size=0.25",
            fc=face,
            ec=_PEAK if at_peak else edge,
            lw=1.6 if at_peak else 0.8,
            zorder=3,
            gid=gid,
            mutation_aspect=1 / 3,
        )
    )
    right = (human_bytes(nbytes) if nbytes is not None else "") + ("  ● peak" if at_peak else "")
    room = int((x1 - x0 - 1.2) * chars_per_unit) - len(right) - 10 - 3  # tag column: 10
    ax.text(
        x0 + 0.6,
        e.y,
        f"{tag:<9} {value_label(sf, e.value_id, max(room, 12))}",
        ha="left",
        va="center",
        fontsize=_FONT,
        family="monospace",
        zorder=4,
    )
    ax.text(
        x1 - 0.6,
        e.y,
        right,
        ha="right",
        va="center",
        fontsize=_FONT,
        family="monospace",
        color=_PEAK if at_peak else "#333333",
        zorder=4,
    )
