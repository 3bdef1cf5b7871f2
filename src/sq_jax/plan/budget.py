"""The memory-budget planner: the cheapest batch plan whose memory fits a budget.

Users say how much memory they have, not which modes to batch. :func:`plan_for_budget`
chooses the batched spaces, their roles (external / contracted) and their batch counts
that minimise the FLOPs of the scheduled program, recomputation included
(:func:`sq_jax.schedule.cost.schedule_flops`), subject to its memory fitting the budget
— SeQuant's "perf-first" objective (``docs/schedule.md``, "Loop placement").

**What the budget counts.** What the compiled program allocates, as XLA's
``memory_analysis()`` reports it (temporaries + outputs): every intermediate, the
operand copies XLA makes (slices cut on use, transposes into matrix layout), loop
accumulators and stacked pieces, the fused sum chains that keep their products alive,
and the results — predicted by :func:`sq_jax.lower.memory.memory_model` from the
lowered program — times :data:`XLA_HEADROOM` for XLA's heap packing. The schedule's
own peak profile (SeQuant's model, one footprint per value) must fit too; it is always
the smaller of the two in practice. Inputs (integrals, amplitudes) are *not* counted:
they are the caller's arrays. Results are never sliced at their home, so the budget
can never drop below the results and what is live with them.

**Search.** A *configuration* is a role choice per space: not batched, external,
contracted, or both. The schedule's structure (loops, placement, recomputation) depends
only on the configuration, not on the batch counts, so each configuration is scheduled
and lowered once, and its memory and FLOPs are then exact functions of the counts: the
memory is a sweep over live buffers whose sizes are monomials in the block sizes (some
only present when a block size leaves an uneven last batch), the FLOPs a polynomial in
the batch counts (:func:`sq_jax.schedule.cost.flop_terms`). The FLOPs rise with every
count, so for every count of all but the last batched space on a ladder of distinct
block sizes (``ceil(extent / n)``), the last space's counts are tried from the fewest
up and the first that fits is kept; a combination is skipped when its cheapest count
already costs more than the best plan found. Configurations are visited
by the number of batched roles; once a plan without recomputation is found, levels with
more batched roles are not visited (they cannot win the tie-break).

**Objective and ties.** Minimise ``(FLOPs, batched roles, loop blocks in the schedule,
total batches, configuration order)``: at equal FLOPs the plan with fewer batched roles,
then fewer loops, then fewer batches wins. The result is deterministic. The returned plan
is scheduled once more to check its peak and FLOPs against the model.

References: SeQuant's batched evaluation (``docs/schedule.md``); cotengra's
slicing search for the idea of pricing recomputation against memory (not its code).

External loops open at the roots, or at the reads of the values a permuted sum reads
(``external_site="root"``, :mod:`sq_jax.plan.annotate`); plans with loops at the roots
themselves (``"top"``: lower memory floor, more FLOPs) are searched too when the first
search finds nothing or nothing below twice the unbatched FLOPs; the fewest FLOPs win.

Known limitations: the memory model predicts XLA's live buffers, not its heap fragmentation,
which grows with the number of loops (a plan with 80 loop instances measured 1.6x its
live peak) — :data:`XLA_HEADROOM` covers the plans measured in ``tests/``; a
configuration that the scheduler cannot express (a :class:`~sq_jax.ScheduleError`) is
left out.

Example:
    >>> import sq_jax as sq
    >>> eqs = sq.parse("E = g{i1,i2;a1,a2} t{a1;i1} t{a2;i2}")
    >>> forest = sq.build_forest(eqs, sq.Spaces(i=40, a=80))
    >>> str(plan_for_budget(forest, None))  # no limit: nothing batched
    'BatchPlan()'
    >>> str(plan_for_budget(forest, "300 kB"))  # g is 82 MB; its slices are copies
    'BatchPlan(i: 20 batches [contracted])'
"""

from __future__ import annotations

import itertools
import math
import numbers
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from .._errors import MemoryBudgetError, PlanError, ScheduleError, SqJaxError
from ..forest.nodes import Forest, NodeKind
from ..lower.instructions import lower_schedule
from ..lower.memory import memory_model
from ..schedule import ScheduledForest, schedule_forest
from ..schedule.cost import flop_terms, schedule_flops
from ..schedule.errors import expr_text
from ..schedule.peak import dag_path, peak_profile_sweep
from .annotate import permuted_summands
from .batch import BatchPlan, SpaceBatch

__all__ = ["XLA_HEADROOM", "format_bytes", "parse_bytes", "plan_for_budget", "required_bytes"]

_ITEMSIZE = 8

XLA_HEADROOM = 1.25
"""The budget must hold the predicted XLA memory times this: XLA packs its buffers into
one heap with some fragmentation, and its scheduler does not follow our order exactly.
Measured (``tests/test_memory_model.py``, CCSD/CCD plans): XLA's temporaries + outputs
were 0.6-1.19x the prediction."""

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_BYTES_RE = re.compile(
    r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?\s*([A-Za-z]*)\s*$"
)
_ACCEPTED = (
    "an int of bytes, or a number with a unit: B, kB/MB/GB/TB (powers of 1000) or "
    "KiB/MiB/GiB/TiB (powers of 1024), e.g. '2 GiB', '512 MiB', '1.5GB', '100 kB'"
)


def parse_bytes(size: int | str) -> int:
    """A memory size in bytes, from an int or text such as ``"2 GiB"``.

    Units are case-insensitive: ``kB``/``MB``/``GB``/``TB`` are decimal (10³, 10⁶ …),
    ``KiB``/``MiB``/``GiB``/``TiB`` binary (2¹⁰, 2²⁰ …), ``B`` or no unit bytes. A
    fractional result is rounded down.

    Args:
        size: a positive int, or a number with an optional unit.

    Returns:
        The size in bytes (a positive int).

    Raises:
        PlanError: for text that is not a number with a known unit, or a size below 1.

    Example:
        >>> parse_bytes("2 GiB"), parse_bytes("512 MiB"), parse_bytes("1.5GB")
        (2147483648, 536870912, 1500000000)
        >>> parse_bytes("100 kB"), parse_bytes(4096), parse_bytes("64")
        (100000, 4096, 64)
    """
    if isinstance(size, bool) or not isinstance(size, (numbers.Integral, str)):
        raise PlanError(f"memory size {size!r} ({type(size).__name__}): expected {_ACCEPTED}.")
    if isinstance(size, numbers.Integral):
        value = Fraction(int(size))
    else:
        match = _BYTES_RE.match(size)
        unit = match.group(3).lower() if match else None
        if match is None or unit not in _UNITS:
            raise PlanError(f"cannot read memory size {size!r}: expected {_ACCEPTED}.")
        value = Fraction(match.group(1)) * _UNITS[unit]
        if match.group(2):
            value *= Fraction(10) ** int(match.group(2))
    if value < 1:
        raise PlanError(f"memory size {size!r} is below 1 byte: expected {_ACCEPTED}.")
    return math.floor(value)


def format_bytes(size: int) -> str:
    """``size`` in bytes, with a binary unit, for messages.

    Example:
        >>> format_bytes(1536), format_bytes(3 * 2**30), format_bytes(12)
        ('1.50 KiB', '3.00 GiB', '12 B')
    """
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size} B"


# -- the per-configuration model -------------------------------------------------------

_ROLES = ((True, False), (False, True), (True, True))  # external, contracted, both


@dataclass(frozen=True, slots=True)
class _Config:
    """Roles per batched space: ``((space, external, contracted), ...)``."""

    roles: tuple[tuple[str, bool, bool], ...]
    rank: int
    site: str = "root"

    @property
    def spaces(self) -> tuple[str, ...]:
        return tuple(s for s, _, _ in self.roles)

    @property
    def flags(self) -> int:
        return sum(int(e) + int(c) for _, e, c in self.roles)

    def plan(self, counts: Sequence[int]) -> BatchPlan:
        return BatchPlan(
            tuple(
                SpaceBatch(s, batches=n, external=e, contracted=c)
                for (s, e, c), n in zip(self.roles, counts, strict=True)
            ),
            self.site,
        )


@dataclass(frozen=True, slots=True)
class _Model:
    """Peak and FLOPs of one configuration as functions of the batch counts."""

    config: _Config
    peak_exponents: np.ndarray  # (G, S): per footprint signature, home modes per space
    peak_live: np.ndarray  # (G, P): bytes at full block live at each point, per signature
    flop_polynomial: tuple[tuple[tuple[int, ...], int], ...]  # (exponents per space, flops)
    loops: int  # loop blocks in the ordered schedule
    xla_exponents: np.ndarray  # (M, S): per monomial of the lowered model, powers per space
    xla_uneven: np.ndarray  # (M,): space index whose uneven last batch it needs, or -1
    xla_live: np.ndarray  # (M, Q): coefficient of each monomial at each point
    extents: tuple[int, ...]  # per batched space

    def static_peak(self, blocks: Sequence[int]) -> int:
        """The schedule's peak profile (SeQuant's model) at these block sizes."""
        weights = np.prod(np.asarray(blocks, dtype=np.int64) ** self.peak_exponents, axis=1)
        if self.peak_live.shape[1] == 0:
            return 0
        return int(max(0, (weights @ self.peak_live).max()))

    def xla_peak(self, blocks: Sequence[int]) -> int:
        """The lowered program's predicted XLA temporaries + outputs (lower/memory.py)."""
        if self.xla_live.shape[1] == 0:
            return 0
        b = np.asarray(blocks, dtype=np.int64)
        weights = np.prod(b**self.xla_exponents, axis=1)
        # per space: does its block size leave an uneven last batch; index -1 (no
        # condition) reads the appended True
        uneven = np.append(np.asarray(self.extents, dtype=np.int64) % b != 0, True)
        weights = weights * uneven[self.xla_uneven]
        return int(max(0, (weights @ self.xla_live).max()))

    def peak(self, blocks: Sequence[int]) -> int:
        """What the budget must hold: the larger of the two models, XLA's with headroom."""
        return max(self.static_peak(blocks), math.ceil(self.xla_peak(blocks) * XLA_HEADROOM))

    def flops(self, counts: Sequence[int]) -> int:
        total = 0
        for exps, flops in self.flop_polynomial:
            term = flops
            for n, k in zip(counts, exps, strict=True):
                term *= n**k
            total += term
        return total


def _model(sf: ScheduledForest, config: _Config) -> _Model:
    spaces = config.spaces
    extents: dict[str, int] = {}
    extent = sf.annotated.forest.spaces.extent
    where = {s: k for k, s in enumerate(spaces)}
    sigs: dict[tuple[int, ...], np.ndarray] = {}
    npoints = sf.rich.num_points
    for cell in sf.rich.cells:
        if cell.is_leaf:
            continue
        exps = [0] * len(spaces)
        coef = _ITEMSIZE
        for ix in cell.carried:
            if ix in cell.home_modes and ix.space in where:
                exps[where[ix.space]] += 1
            else:
                if ix.space not in extents:
                    extents[ix.space] = extent(ix.space)
                coef *= extents[ix.space]
        delta = sigs.setdefault(tuple(exps), np.zeros(npoints + 1, dtype=np.int64))
        delta[cell.first_use] += coef
        delta[cell.last_use + 1] -= coef
    keys = sorted(sigs)
    live = np.array([np.cumsum(sigs[k])[:npoints] for k in keys], dtype=np.int64)
    poly: dict[tuple[int, ...], int] = {}
    for term in flop_terms(sf):
        exps = tuple(term.recompute.count(s) for s in spaces)
        poly[exps] = poly.get(exps, 0) + term.flops
    monos, coefs = memory_model(lower_schedule(sf)).totals()
    xla_exps = np.zeros((len(monos), len(spaces)), dtype=np.int64)
    for g, (powers, _) in enumerate(monos):
        for space, k in powers:
            xla_exps[g, where[space]] = k
    return _Model(
        config,
        np.array(keys, dtype=np.int64).reshape(len(keys), len(spaces)),
        live.reshape(len(keys), npoints),
        tuple(sorted(poly.items())),
        sum(1 for blk, _ in sf.ordered.walk() if not blk.is_root),
        xla_exps,
        np.array([where.get(c, -1) if c is not None else -1 for _, c in monos], dtype=np.int64),
        np.array(coefs, dtype=np.int64).reshape(len(monos), -1),
        tuple(extent(s) for s in spaces),
    )


def _ladder(extent: int, max_batches: int | None) -> tuple[tuple[int, int], ...]:
    """``(batches, block)`` for every distinct block size below ``extent``, fewest first."""
    out: dict[int, int] = {}
    for n in range(2, extent + 1):
        block = -(-extent // n)
        nb = -(-extent // block)
        if max_batches is not None and nb > max_batches:
            break
        out.setdefault(nb, block)
    return tuple(sorted(out.items()))


def _configs(spaces: Sequence[str]) -> list[_Config]:
    """Every role choice over ``spaces`` (the empty one first), by batched roles."""
    out = []
    for choice in itertools.product((None, *_ROLES), repeat=len(spaces)):
        roles = tuple((s, *r) for s, r in zip(spaces, choice, strict=True) if r is not None)
        out.append(roles)
    out.sort(key=lambda r: (sum(int(e) + int(c) for _, e, c in r), len(r)))
    return [_Config(r, k) for k, r in enumerate(out)]


def _batchable_spaces(forest: Forest, allowed: Iterable[str] | None) -> tuple[str, ...]:
    present: dict[str, None] = {}
    for node in forest.occurrences():
        present.update(dict.fromkeys(ix.space for ix in node.indices))
    spaces = forest.spaces
    if allowed is not None:
        keep = set()
        for name in [allowed] if isinstance(allowed, str) else allowed:
            try:
                keep.add(spaces.resolve(name))
            except SqJaxError as err:
                raise PlanError(f"spaces_allowed names an unknown space: {err}") from None
        present = {s: None for s in present if s in keep}
    return tuple(sorted(s for s in present if spaces.has_extent(s) and spaces.extent(s) > 1))


# -- the search ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Point:
    key: tuple[int, ...]
    config: _Config
    counts: tuple[int, ...]
    peak: int
    flops: int


def _search(
    model: _Model, ladders: Sequence[Sequence[tuple[int, int]]], budget: int, best: _Point | None
) -> _Point | None:
    """The best point of one configuration under ``budget`` (``best`` if none beats it)."""
    cfg = model.config

    def point(combo: Sequence[tuple[int, int]]) -> _Point:
        counts = tuple(n for n, _ in combo)
        flops = model.flops(counts)
        key = (flops, cfg.flags, model.loops, sum(counts), cfg.rank)
        return _Point(key, cfg, counts, -1, flops)

    if not ladders:
        pt = point(())
        peak = model.peak(())
        if peak <= budget and (best is None or pt.key < best.key):
            return _Point(pt.key, cfg, (), peak, pt.flops)
        return best
    *outer, last = ladders
    for head in itertools.product(*outer):
        cheapest = point((*head, last[0]))
        if best is not None and cheapest.key >= best.key:
            continue  # FLOPs only grow with the last count
        blocks = [b for _, b in head]
        # FLOPs grow with the last count, so the first count that fits is this head's
        # best; the peak is not monotone (an uneven last batch costs extra buffers), so
        # every count is tried rather than bisected.
        fits = next(
            (k for k, (_, b) in enumerate(last) if model.peak([*blocks, b]) <= budget), None
        )
        if fits is None:
            continue
        pt = point((*head, last[fits]))
        if best is None or pt.key < best.key:
            best = _Point(pt.key, cfg, pt.counts, model.peak([*blocks, last[fits][1]]), pt.flops)
    return best


def _describe(sf: ScheduledForest, value_id: int) -> str:
    """A value as text: the result's name, or its expression (a sum chain by its size)."""
    for root, v in zip(sf.annotated.forest.roots, sf.rich.root_values, strict=False):
        if v == value_id:
            modes = ",".join(map(str, root.indices))
            return f"the result `{root.name}[{modes}]`"
    node = sf.rich.cells[value_id].node
    if node is None:
        return f"value v{value_id}"
    terms = 1
    while node.kind is NodeKind.SUM and node.left is not None:
        terms, node = terms + 1, node.left
    text = f"`{expr_text(node, 100)}`"
    return text if terms == 1 else f"a sum of {terms} terms starting with {text}"


def required_bytes(sf: ScheduledForest) -> int:
    """The smallest ``memory_budget`` a scheduled forest fits in.

    The larger of the schedule's peak profile and the lowered program's predicted XLA
    memory (:func:`sq_jax.lower.memory.memory_model`) times :data:`XLA_HEADROOM`.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.plan import BatchPlan
        >>> forest = sq.build_forest(sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1}"), sq.Spaces(i=2, a=4))
        >>> sf = schedule_forest(forest, BatchPlan())
        >>> sf.peak.peak_bytes, required_bytes(sf)  # 64 B + 64 B of alignment, +25%
        (64, 160)
    """
    xla = memory_model(lower_schedule(sf)).peak()
    return max(sf.peak.peak_bytes, math.ceil(xla * XLA_HEADROOM))


def _dominant(sf: ScheduledForest) -> str:
    """The largest buffer live where the peak binds, as text."""
    model = memory_model(lower_schedule(sf))
    blocks = dict(model.blocks)
    xla = math.ceil(model.peak(blocks) * XLA_HEADROOM)
    if sf.peak.peak_bytes >= xla:  # the schedule's own peak profile binds
        cells = dag_path(sf.rich, sf.annotated).cells
        live = [cells[k] for k in sf.peak.live_at_binding]
        if not live:
            return "nothing (the peak is 0 bytes)"
        top = max(live, key=lambda c: (c.footprint, -c.value_id))
        what = _describe(sf, top.value_id)
        if top.value_id in sf.rich.root_values:
            what += " (results are never batched in memory)"
        return (
            f"{what}: {format_bytes(top.footprint)} of the "
            f"{format_bytes(sf.peak.peak_bytes)} live there ({len(live)} value(s))"
        )
    at = model.binding(blocks)
    items = model.items_at(at, blocks)
    name, size = items[0]
    match = re.match(r"v(\d+)(.*)", name)
    what = name if match is None else _describe(sf, int(match.group(1))) + match.group(2)
    return (
        f"{what}: {format_bytes(size)} of the {format_bytes(model.peak(blocks))} the lowered "
        f"program holds there ({len(items)} buffer(s), while running {model.labels[at]})"
    )


def _with_counts(sf: ScheduledForest, plan: BatchPlan) -> ScheduledForest:
    """``sf`` (scheduled for the same roles) re-priced with ``plan``'s batch counts.

    The structure of a schedule depends on which spaces are batched in which roles, not
    on the counts, so only the peak (block sizes) changes.
    """
    ann = replace(sf.annotated, plan=plan.resolved(sf.annotated.forest.spaces))
    return replace(sf, annotated=ann, peak=peak_profile_sweep(dag_path(sf.rich, ann)))


def _infeasible(
    budget: int,
    floor: tuple[_Point, ScheduledForest] | None,
    spaces: Sequence[str],
    all_spaces: Sequence[str],
    max_batches: int | None,
) -> MemoryBudgetError:
    if floor is None:
        return MemoryBudgetError(
            f"memory_budget={format_bytes(budget)} ({budget} bytes): no batch plan over "
            f"spaces {list(spaces)} could be scheduled. Fix: allow other spaces "
            "(spaces_allowed=None), or pass memory_budget=None to run unbatched."
        )
    point, sf = floor
    plan = point.config.plan(point.counts)
    sf = _with_counts(sf, plan)
    need = required_bytes(sf)
    fixes = [f"raise the budget to memory_budget>={need} ({format_bytes(need)})"]
    others = [s for s in all_spaces if s not in spaces]
    if others:
        fixes.append(f"allow batching over {', '.join(f'`{s}`' for s in others)} (spaces_allowed)")
    if max_batches is not None:
        fixes.append(f"raise max_batches={max_batches}")
    err = MemoryBudgetError(
        f"memory_budget={format_bytes(budget)} ({budget} bytes) is below the memory of every "
        f"batch plan. The smallest found is {format_bytes(need)} ({need} bytes), with {plan}. "
        f"At its peak the largest buffer is {_dominant(sf)}. The budget counts what the "
        "program allocates (intermediates, operand copies, results, with "
        f"{XLA_HEADROOM:g}x headroom for XLA's buffer packing), not the inputs. "
        f"Fix: {'; or '.join(fixes)}."
    )
    err.requested = budget  # type: ignore[attr-defined]
    err.smallest_feasible = need  # type: ignore[attr-defined]
    err.plan = plan  # type: ignore[attr-defined]
    return err


def plan_for_budget(
    forest: Forest,
    budget: int | str | float | None,
    *,
    spaces_allowed: Iterable[str] | None = None,
    max_batches: int | None = None,
) -> BatchPlan:
    """The batch plan with the fewest FLOPs whose static peak fits ``budget``.

    Args:
        forest: the eval forest (:func:`sq_jax.build_forest`).
        budget: bytes for the static peak of intermediates and results (inputs excluded;
            module docstring): an int, text for :func:`parse_bytes` (``"2 GiB"``), or
            ``None`` / ``math.inf`` for no limit (the empty plan).
        spaces_allowed: the spaces the plan may batch (default: every space of the
            forest with an extent above 1).
        max_batches: at most this many batches per space (default: one per element).

    Returns:
        The plan (``BatchPlan()`` when nothing needs batching), deterministic.

    Raises:
        PlanError: for a bad budget, an unknown space or ``max_batches`` below 1.
        MemoryBudgetError: when no plan fits; the message gives the smallest peak found,
            its plan, the value dominating that peak, and how to fix it.

    Example:
        >>> import sq_jax as sq
        >>> eqs = sq.parse("E = g{i1,i2;a1,a2} t{a1;i1} t{a2;i2}")
        >>> forest = sq.build_forest(eqs, sq.Spaces(i=40, a=80))
        >>> str(plan_for_budget(forest, "300 kB", spaces_allowed=["i"]))
        'BatchPlan(i: 20 batches [contracted])'
        >>> try:
        ...     plan_for_budget(forest, 8)
        ... except sq.MemoryBudgetError as err:
        ...     print(err.smallest_feasible, err.plan)
        1910 BatchPlan(a: 80 batches [contracted]; i: 40 batches [contracted])
    """
    if budget is None or (isinstance(budget, float) and math.isinf(budget) and budget > 0):
        return BatchPlan()
    if isinstance(budget, float):
        if not math.isfinite(budget) or budget < 1:
            raise PlanError(f"memory budget {budget!r}: expected {_ACCEPTED}, or None.")
        budget = math.floor(budget)
    limit = parse_bytes(budget)
    if max_batches is not None and (
        isinstance(max_batches, bool) or not isinstance(max_batches, int) or max_batches < 1
    ):
        raise PlanError(f"max_batches must be a positive int or None, got {max_batches!r}.")
    spaces = _batchable_spaces(forest, spaces_allowed)
    extent = forest.spaces.extent
    ladders = {s: _ladder(extent(s), max_batches) for s in spaces}
    spaces = tuple(s for s in spaces if ladders[s])
    f0 = forest.flops
    best: _Point | None = None
    floor: tuple[_Point, ScheduledForest] | None = None  # the smallest peak seen
    scheduled: dict[_Config, ScheduledForest] = {}
    level = -1
    # External loops open at the reads of a permuted sum's values first (Y built once
    # per batch). Loops at the roots themselves (Y built per orientation: more FLOPs, but
    # a lower memory floor) are searched only when that finds nothing, or nothing that
    # costs less than twice the unbatched FLOPs (each search schedules every role
    # choice: the planner's time doubles).
    configs = _configs(spaces)
    tops = [replace(c, site="top") for c in configs if any(e for _, e, _ in c.roles)]
    if not any(permuted_summands(root.node) for root in forest.roots):
        tops = []  # the two sites are the same
    configs += tops
    for cfg in configs:
        if cfg.site == "top" and best is not None and best.flops <= 2 * f0:
            break
        if best is not None and best.flops == f0 and cfg.flags > level:
            break  # nothing at a higher level can win the tie-break
        level = cfg.flags
        try:  # the structure does not depend on the counts: schedule with 2 each
            sf = schedule_forest(forest, cfg.plan([2] * len(cfg.spaces)))
        except ScheduleError:
            continue  # this configuration cannot be expressed: leave it out
        scheduled[cfg] = sf
        model = _model(sf, cfg)
        lad = [ladders[s] for s in cfg.spaces]
        if best is None:  # only needed for the error message
            low, counts = min(
                (model.peak([b for _, b in combo]), tuple(n for n, _ in combo))
                for combo in itertools.product(*lad)
            )
            if floor is None or (low, cfg.rank) < (floor[0].peak, floor[0].config.rank):
                floor = (_Point((), cfg, counts, low, 0), sf)
        best = _search(model, lad, limit, best)
    if best is None:
        raise _infeasible(limit, floor, spaces, _batchable_spaces(forest, None), max_batches)
    plan = best.config.plan(best.counts)
    check = _with_counts(scheduled[best.config], plan)
    need = required_bytes(check)
    if need != best.peak or schedule_flops(check) != best.flops:
        raise PlanError(  # a bug in the model, not in the user's input
            f"internal: the planner's model of {plan} predicted peak {best.peak} and "
            f"{best.flops} FLOPs, the schedule has {need} and {schedule_flops(check)}. "
            "Please report this with the equations."
        )
    return plan
