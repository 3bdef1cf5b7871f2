"""Static peak profile: footprints, live intervals and an event sweep.

Each value is charged its *footprint* — 8 bytes per element, with every home-sliced mode
at its block size and every other mode at full extent — from its first use to its last
use on the static-point timeline (:mod:`sq_jax.schedule.rich`). One representative
iteration stands for each loop. :func:`peak_profile_sweep` finds the peak with a
difference array in ``O(points + values)``; :func:`peak_profile_replay` is the
independent ``O(points × values)`` oracle the tests compare it with.

References: ``docs/schedule.md``, "Peak profile"; tinygrad's memory planner and cotengra's peak-size
analysis for the sweep shape. Known limitations: the model ignores XLA's buffer reuse
and fusion; inputs (leaves) are left out unless asked for.

Example:
    >>> s = PeakSchedule((PeakCell(0, -1, 100, 0, 3), PeakCell(1, -1, 40, 1, 2)), 5)
    >>> peak_profile_sweep(s)
    PeakProfile(peak_bytes=140, binding_point=1, live_at_binding=(0, 1))
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from ..expr.nodes import Index
from ..plan.annotate import AnnotatedForest
from .rich import RichSchedule

__all__ = [
    "PeakCell",
    "PeakProfile",
    "PeakSchedule",
    "cell_footprint",
    "dag_path",
    "home_depth_of",
    "peak_profile_replay",
    "peak_profile_sweep",
]


@dataclass(frozen=True, slots=True)
class PeakCell:
    """One value on the timeline."""

    value_id: int
    home_depth: int
    footprint: int
    """Bytes."""
    first_use: int
    last_use: int
    """Inclusive."""


@dataclass(frozen=True, slots=True)
class PeakSchedule:
    """Values with footprints and live intervals over ``num_points`` points."""

    cells: tuple[PeakCell, ...]
    num_points: int


@dataclass(frozen=True, slots=True)
class PeakProfile:
    """The peak, the first point where it occurs, and the values live there."""

    peak_bytes: int
    binding_point: int
    live_at_binding: tuple[int, ...]
    """Indices into ``PeakSchedule.cells``."""


def _mode(entry: Index | tuple) -> Index:
    return entry if isinstance(entry, Index) else entry[0]


def home_depth_of(home_modes: Collection[Index], ectx: Sequence[Index | tuple]) -> int:
    """Innermost position in ``ectx`` whose mode (identity) is a home mode, or -1.

    ``ectx`` entries are indices or ``(index, range)`` pairs, outermost first.

    Example:
        >>> o1, i1, a1, x1 = Index("o", 1), Index("i", 1), Index("a", 1), Index("x", 1)
        >>> [home_depth_of(h, [o1, i1, a1]) for h in ({a1}, {o1}, set(), {i1, x1}, {o1, a1})]
        [2, 0, -1, 1, 2]
    """
    for d in range(len(ectx) - 1, -1, -1):
        if _mode(ectx[d]) in home_modes:
            return d
    return -1


def cell_footprint(
    carried: Sequence[Index],
    home_modes: Collection[Index],
    extent_of: Callable[[Index], int],
    block_of: Callable[[Index], int],
    divergent: Collection[Index] = (),
    itemsize: int = 8,
) -> int:
    """Bytes of one value: home modes at block size, every other mode at full extent.

    ``divergent`` is accepted for interface symmetry and changes nothing.

    Example:
        >>> i1, a1 = Index("i", 1), Index("a", 1)
        >>> ext = lambda ix: 10
        >>> blk = lambda ix: 2 if ix == i1 else 10
        >>> cell_footprint([i1, a1], {i1}, ext, blk), cell_footprint([i1, a1], set(), ext, blk)
        (160, 800)
        >>> cell_footprint([i1, a1], {i1}, ext, blk, divergent={a1})
        160
    """
    del divergent
    size = itemsize
    for ix in carried:
        size *= block_of(ix) if ix in home_modes else extent_of(ix)
    return size


def dag_path(
    rich: RichSchedule, ann: AnnotatedForest, *, include_leaves: bool = False, itemsize: int = 8
) -> PeakSchedule:
    """Project every value of ``rich`` to a :class:`PeakCell` (leaves only if asked).

    Example:
        >>> from sq_jax.forest.nodes import Forest
        >>> from sq_jax.expr.spaces import Spaces
        >>> from sq_jax.plan import BatchPlan, AnnotatedForest
        >>> dag_path(RichSchedule((), 0), AnnotatedForest(Forest((), Spaces()), BatchPlan()))
        PeakSchedule(cells=(), num_points=0)
    """
    spaces = ann.forest.spaces
    cells = tuple(
        PeakCell(
            c.value_id,
            c.home_depth,
            cell_footprint(
                c.carried,
                set(c.home_modes),
                lambda ix: spaces.extent(ix.space),
                ann.block_of,
                itemsize=itemsize,
            ),
            c.first_use,
            c.last_use,
        )
        for c in rich.cells
        if include_leaves or not c.is_leaf
    )
    return PeakSchedule(cells, rich.num_points)


def peak_profile_sweep(s: PeakSchedule) -> PeakProfile:
    """The peak by a difference-array sweep; the lowest point wins a tie.

    Example:
        >>> s = PeakSchedule((PeakCell(0, -1, 100, 0, 1), PeakCell(1, -1, 100, 2, 3)), 4)
        >>> peak_profile_sweep(s)
        PeakProfile(peak_bytes=100, binding_point=0, live_at_binding=(0,))
    """
    delta = [0] * (s.num_points + 1)
    for c in s.cells:
        delta[c.first_use] += c.footprint
        delta[c.last_use + 1] -= c.footprint
    peak, at, running = 0, 0, 0
    for p in range(s.num_points):
        running += delta[p]
        if running > peak:
            peak, at = running, p
    live = tuple(k for k, c in enumerate(s.cells) if c.first_use <= at <= c.last_use)
    return PeakProfile(peak, at, live if peak > 0 else ())


def peak_profile_replay(s: PeakSchedule) -> int:
    """The peak by brute force: at every point, sum the footprints of covering values.

    Example:
        >>> peak_profile_replay(PeakSchedule((PeakCell(0, -1, 7, 0, 0),), 1))
        7
    """
    best = 0
    for p in range(s.num_points):
        best = max(best, sum(c.footprint for c in s.cells if c.first_use <= p <= c.last_use))
    return best
