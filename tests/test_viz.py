"""Pictures of a schedule (sq_jax.viz): the peak profile and the loop nest."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.figure
import matplotlib.image
import pytest

import sq_jax as sq
from sq_jax._units import human_bytes
from sq_jax.expr.spaces import Spaces
from sq_jax.forest.nodes import Forest
from sq_jax.plan import AnnotatedForest, BatchPlan
from sq_jax.schedule import ScheduledForest, schedule_annotated, schedule_forest
from sq_jax.schedule.ir import BuildStep
from sq_jax.schedule.peak import dag_path
from sq_jax.viz import plot_loop_nest, plot_peak_profile
from sq_jax.viz._figure import MISSING
from sq_jax.viz.loop_nest import BLOCK_GID_PREFIX
from sq_jax.viz.peak import CURVE_GID, LIVE_GID, LOOP_GID, MARKER_GID, live_bytes

SPACES = sq.Spaces(i=5, a=7, Κ=9)

CASES = {
    # DF contraction batched over the auxiliary index (a Sum escape).
    "df_kappa": (
        "g{p1,p2;p3,p4} = B{p1,p3;;K1} B{p2,p4;;K1}",
        {"Κ": {"batches": 3, "roles": "contracted"}},
    ),
    # Doubles residual batched over the occupied indices (two nested External loops).
    "doubles_occ": (
        "R{a1,a2;i1,i2} = 1/2 g{a1,a2;a3,a4} t{a3,a4;i1,i2} + f{a1;a3} t{a3,a2;i1,i2}"
        " - f{i3;i1} t{a1,a2;i3,i2} + 1/4 g{i3,i4;a3,a4} t{a3,a4;i1,i2} t{a1,a2;i3,i4}",
        {"i": {"batches": 2, "roles": "external"}},
    ),
    # Unbatched: a flat schedule (the root block only).
    "unbatched": ("R{a1;i1} = f{a1;a2} t{a2;i1} + f{i2;i1} t{a1;i2}", {}),
}

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _scheduled(name: str) -> ScheduledForest:
    text, plan = CASES[name]
    return schedule_forest(sq.build_forest(sq.parse(text), SPACES), BatchPlan.of(plan))


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request) -> tuple[str, ScheduledForest]:
    return request.param, _scheduled(request.param)


def _check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000, f"{path.name} is only {len(data)} bytes"
    img = matplotlib.image.imread(path)
    assert img.ndim == 3 and img.shape[2] in (3, 4)
    assert img.shape[0] > 150 and img.shape[1] > 600


def _gids(ax, prefix: str) -> list[str]:
    return [g for a in ax.get_children() if (g := a.get_gid()) and g.startswith(prefix)]


# -- the peak profile --------------------------------------------------------------------


def test_peak_profile_png_marks_the_binding_point(case, tmp_path):
    name, sf = case
    path = tmp_path / f"{name}_peak.png"
    fig = plot_peak_profile(sf, path)
    assert isinstance(fig, matplotlib.figure.Figure)
    _check_png(path)
    ax = fig.axes[0]
    [marker] = [ln for ln in ax.lines if ln.get_gid() == MARKER_GID]
    x, y = marker.get_xdata()[0], marker.get_ydata()[0]
    assert (x, y) == (sf.peak.binding_point, sf.peak.peak_bytes)
    # The step curve is the sweep: its maximum is the peak, reached at the binding point.
    [curve] = [p for p in ax.patches if p.get_gid() == CURVE_GID]
    values = list(curve.get_data().values)
    assert len(values) == sf.rich.num_points
    assert max(values) == sf.peak.peak_bytes == values[sf.peak.binding_point]
    # Every value live at the peak is listed, with its footprint.
    [box] = [t for t in ax.texts if t.get_gid() == LIVE_GID]
    cells = dag_path(sf.rich, sf.annotated).cells
    for k in sf.peak.live_at_binding:
        assert f"v{cells[k].value_id} [" in box.get_text()
        assert human_bytes(cells[k].footprint) in box.get_text()


def test_peak_profile_y_axis_uses_binary_units(case):
    _, sf = case
    fig = plot_peak_profile(sf)
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_text()]
    assert labels and all(lab.split()[-1] in ("B", "KiB", "MiB", "GiB") for lab in labels)


def test_peak_profile_loop_strip_matches_the_schedule(case):
    _, sf = case
    ax = plot_peak_profile(sf).axes[0]
    loops = {blk.loop for blk, _ in sf.ordered.walk() if not blk.is_root}
    bars = [p for p in ax.patches if p.get_gid() == LOOP_GID]
    assert bool(bars) == bool(loops)  # a strip exactly when there are loops
    strip = " ".join(t.get_text() for t in ax.texts)
    for space, slot in loops:
        assert f"{space}#{slot}" in strip


def test_live_bytes_is_the_sweep(case):
    _, sf = case
    live = live_bytes(dag_path(sf.rich, sf.annotated))
    assert max(live) == sf.peak.peak_bytes
    assert live.index(max(live)) == sf.peak.binding_point  # the first point wins a tie


def test_batched_against_unbatched_on_one_axes(tmp_path):
    batched = _scheduled("doubles_occ")
    flat = schedule_annotated(AnnotatedForest(batched.annotated.forest, BatchPlan()))
    fig = matplotlib.figure.Figure(figsize=(10, 6), layout="constrained")
    ax = fig.add_subplot()
    assert plot_peak_profile(flat, ax=ax) is fig
    assert plot_peak_profile(batched, ax=ax, title="unbatched vs i×2") is fig
    markers = [ln for ln in ax.lines if ln.get_gid() == MARKER_GID]
    assert [(m.get_xdata()[0], m.get_ydata()[0]) for m in markers] == [
        (flat.peak.binding_point, flat.peak.peak_bytes),
        (batched.peak.binding_point, batched.peak.peak_bytes),
    ]
    assert markers[0].get_color() != markers[1].get_color()
    assert batched.peak.peak_bytes < flat.peak.peak_bytes
    assert ax.get_ylim()[1] > flat.peak.peak_bytes  # the higher curve fits
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0].startswith("unbatched") and legend[1].startswith("i×2")
    assert ax.get_title() == "unbatched vs i×2"
    assert len([t for t in ax.texts if t.get_gid() == LIVE_GID]) == 2
    fig.savefig(tmp_path / "compare.png", dpi=120)
    _check_png(tmp_path / "compare.png")


def test_peak_profile_in_a_subfigure_returns_the_top_figure():
    fig = matplotlib.figure.Figure(figsize=(16, 6))
    left, _ = fig.subfigures(1, 2)
    ax = left.add_subplot()
    assert plot_peak_profile(_scheduled("df_kappa"), ax=ax) is fig


def test_empty_schedule_plots():
    empty = schedule_annotated(AnnotatedForest(Forest((), Spaces()), BatchPlan()))
    assert plot_peak_profile(empty).axes
    assert len(_gids(plot_loop_nest(empty).axes[0], BLOCK_GID_PREFIX)) == 1  # the root


# -- the loop nest -----------------------------------------------------------------------


def test_loop_nest_png_has_one_box_per_block(case, tmp_path):
    name, sf = case
    path = tmp_path / f"{name}_nest.png"
    fig = plot_loop_nest(sf, path)
    _check_png(path)
    ax = fig.axes[0]
    walk = sf.ordered.walk()
    boxes = _gids(ax, BLOCK_GID_PREFIX)
    assert len(boxes) == len(walk)
    assert sorted(boxes) == sorted(
        BLOCK_GID_PREFIX
        + ("root" if b.is_root else f"{b.level.space}#{b.level.loop_slot}/pass{b.level.latitude}")
        for b, _ in walk
    )
    builds = sorted(
        f"build:v{s.value_id}" for b, _ in walk for s in b.steps if isinstance(s, BuildStep)
    )
    outputs = sorted(f"{kind}:v{v}" for b, _ in walk for v, kind in b.outputs)
    assert sorted(_gids(ax, "build:")) == builds
    assert sorted(_gids(ax, "Sum:") + _gids(ax, "Scatter:")) == outputs


def test_loop_nest_labels_name_the_loops():
    sf = _scheduled("df_kappa")
    text = " ".join(t.get_text() for t in plot_loop_nest(sf).axes[0].texts)
    assert "loop Κ#0 over Κ_1 · Contracted · ×3 batches of 3 · pass 0" in text
    assert "↑ Sum" in text and "v1 [" in text


def _synthetic(n: int) -> str:
    terms = [f"F{k}{{a1;a2}} G{k}{{a2;a3}} t{{a3;i1}}" for k in range(n)]
    return "R{a1;i1} = " + " + ".join(terms)


def test_loop_nest_stays_legible_for_many_values():
    forest = sq.build_forest(sq.parse(_synthetic(25)), SPACES)
    sf = schedule_forest(forest, BatchPlan.of({"a": {"batches": 2, "roles": "contracted"}}))
    assert sum(1 for c in sf.rich.cells if not c.is_leaf) >= 50
    fig = plot_loop_nest(sf)
    ax = fig.axes[0]
    rows = len(_gids(ax, "build:")) + len(_gids(ax, "Sum:")) + len(_gids(ax, "Scatter:"))
    assert fig.get_size_inches()[1] >= 0.2 * rows  # the height grows with the rows
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax_box = ax.get_window_extent(renderer)
    for t in ax.texts:  # every label fits across the axes (truncated, not overflowing)
        box = t.get_window_extent(renderer)
        assert ax_box.x0 - 1 <= box.x0 and box.x1 <= ax_box.x1 + 1, t.get_text()
    peak = plot_peak_profile(sf).axes[0]
    assert max(next(p for p in peak.patches if p.get_gid() == CURVE_GID).get_data().values) == (
        sf.peak.peak_bytes
    )


# -- matplotlib is optional --------------------------------------------------------------


@pytest.mark.parametrize("plot", [plot_peak_profile, plot_loop_nest])
def test_missing_matplotlib_says_how_to_install(plot, monkeypatch):
    sf = _scheduled("unbatched")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError) as err:
        plot(sf)
    assert str(err.value) == MISSING == "plotting needs matplotlib: pip install 'sq_jax[notebooks]'"
