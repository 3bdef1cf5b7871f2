"""The budget search: every configuration, every batch count, the cheapest plan that fits.

See :mod:`sq_jax.budget` for the objective, the ties and what the budget counts.

Example:
    >>> _ladder(10, None)
    ((2, 5), (3, 4), (4, 3), (5, 2), (10, 1))
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace

from .._errors import PlanError, ScheduleError, SqJaxError
from .._units import ACCEPTED_SIZES, parse_bytes
from ..forest.nodes import Forest
from ..forest.symmetry import block_pair_products
from ..lower.instructions import lower_schedule, sequence_sums_of
from ..lower.ir import LoweredProgram
from ..lower.pairs import pair_shares
from ..plan.annotate import permuted_summands
from ..plan.batch import BatchPlan
from ..schedule import ScheduledForest, schedule_forest
from ..schedule.cost import FlopTerm, flop_terms, schedule_flops
from .explain import infeasible_error, required_bytes, with_counts
from .model import (
    ROLES,
    BudgetModel,
    Configuration,
    SearchPoint,
    budget_model,
    schedule_model,
    step_terms,
)
from .trim import trim_contracted_loops

__all__ = ["PlanCache", "default_step_cost", "plan_for_budget"]


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


EXTENDED_GATE = 1.10
"""With ``extended=True``, each variant of :data:`EXTENDED_PHASES` is searched only when
the plans found before it cost more than this times the unbatched FLOPs (or none fits)."""

EXTENDED_PHASES = (
    ("all", "none", "sequenced"),
    ("all", "invariant", "sequenced"),
    ("first", "invariant", "sequenced"),
    ("first", "pairs", "sequenced"),
    ("first", "none", "sequenced"),
    ("all", "all", "sequenced"),
)
"""``(BatchPlan.external_modes, BatchPlan.hoist, BatchPlan.sums)`` of the extended
search, in order: sums run term by term hold one term at a time instead of all of them
(the unbatched program itself may fit that way: no extra FLOPs; batched, they needed
0.74-1.0x the memory of fused sums at the same FLOPs, spin-orbital CCSD at i=10, a=38,
``bench/bench_sums.py``, so the later variants keep them); hoisting loop-invariant
operands never adds FLOPs and costs memory; one loop per space trades larger batches
against no rebuild per batch of a second loop of the space; hoisting the products that
can run over block pairs (:func:`~sq_jax.forest.symmetry.block_pair_products`, searched
only where the forest has some) keeps the closed-shell ladder at about a quarter of its
FLOPs inside loops (benzene/cc-pVDZ at a quarter of the unbatched memory: 1.01x the
unbatched program's FLOPs instead of 1.16x, ``bench/results/large-w3.md``); hoisting
the values read under two labelings removes the last duplicates at the largest
memory."""


TWIN_FLOOR_MARGIN = {"invariant": 1.5, "pairs": 1.5, "all": 2.5, "fused": 1.05}
"""A configuration is left unscheduled (fused, unlowered: it shares its twin's schedule)
where its *twin* needs more than this times the budget at every batch count. The twin of
a configuration that hoists (by ``BatchPlan.hoist``, the key) is the one that differs
from it in hoisting nothing; of one whose sums are fused (``"fused"``), the one with its
sums run term by term. Hoisting keeps values whole across loops, and a fused sum holds
all its terms at once, so either seldom needs less memory at the most batches than its
twin: over spin-orbital and closed-shell CCD and CCSD at seven sizes (up to
benzene/cc-pVDZ), the hoisting configurations needed at least 0.79x (``"invariant"``),
0.89x (``"pairs"``) and 0.50x (``"all"``) of their twins' smallest memory, the fused
ones 0.9986x. At 1/8 of the unbatched memory the rule leaves 7-54 of the 57 hoisting
configurations unscheduled, and at budgets of 1/2 to 1/16 none that would have fitted
(scratch measurement; the rule's test checks it on small forests). Where nothing fits,
the configurations left out are searched after all."""


COST_RESOLUTION = 0.01
"""Plans whose costs fall in one step of this fraction of the unbatched program's cost
are taken as equally cheap; of them, the fewest batched roles, then loops, then batches
win (then the FLOPs). The model does not price what separates such plans (gathers,
smaller products): closed-shell CCSD at benzene/cc-pVDZ sizes, a quarter of its memory,
``a`` in 3 batches and ``i`` in 3 ran 1.73x the unbatched time at 1.008x its FLOPs, ``a``
in 5 batches alone 1.47x at 1.012x (both with the ladder hoisted)."""

STEP_COST = {"cpu": 1e5}
"""FLOPs charged per executed step, by JAX backend: on this project's 2-core CPU a
step inside a loop cost about 0.7 us beyond its FLOPs (spin-orbital CCSD, H2O/cc-pVDZ,
``a`` in 38 external batches: 5.15x the unbatched time at 1.09x the FLOPs), i.e.
about 7e4 FLOPs at the ~95 GFLOP/s the unbatched program ran at. Accelerators launch a
kernel per step (microseconds) at a far higher rate: :data:`STEP_COST_ACCELERATOR`."""

STEP_COST_ACCELERATOR = 1e8


def default_step_cost() -> float:
    """:data:`STEP_COST` for the default JAX backend (accelerators: the larger figure).

    Example:
        >>> import jax
        >>> default_step_cost() == (1e5 if jax.default_backend() == "cpu" else 1e8)
        True
    """
    import jax  # the planner itself does not need JAX; the backend only sets a price

    return STEP_COST.get(jax.default_backend(), STEP_COST_ACCELERATOR)


@dataclass
class PlanCache:
    """What :func:`plan_for_budget` learns about one forest, kept for its next call.

    A configuration's schedule, lowering and models do not depend on the budget, so a
    second call (:func:`~sq_jax.budget.fit_to_budget` planning again for a tighter
    budget after XLA measured the first plan) only searches the counts again. Given
    another forest, the cache starts over.

    Example:
        >>> import sq_jax as sq
        >>> forest = sq.build_forest(sq.parse("E = g{i1,i2;a1,a2} t{a1;i1} t{a2;i2}"),
        ...                          sq.Spaces(i=40, a=80))
        >>> cache = PlanCache()
        >>> [str(plan_for_budget(forest, b, cache=cache)) for b in ("900 kB", "300 kB")]
        ['BatchPlan(a: 12 batches [contracted])', 'BatchPlan(i: 20 batches [contracted])']
        >>> len(cache.models) > 0
        True
    """

    forest: Forest | None = None
    schedules: dict[BatchPlan, ScheduledForest | None] = field(default_factory=dict)
    """Per fused plan (the sums change the lowering only); ``None``: inexpressible."""
    lowered: dict[BatchPlan, LoweredProgram] = field(default_factory=dict)
    """Per fused plan, its instruction tree with every sum a chain of adds."""
    terms: dict[BatchPlan, tuple[FlopTerm, ...]] = field(default_factory=dict)
    """Per fused plan, its schedule's FLOP terms."""
    cheap: dict[Configuration, BudgetModel] = field(default_factory=dict)
    """Per configuration, :func:`~sq_jax.budget.model.schedule_model`."""
    models: dict[Configuration, BudgetModel] = field(default_factory=dict)
    """Per configuration, :func:`~sq_jax.budget.model.budget_model`."""
    floors: dict[int, float] | None = None
    """Per label-blind node hash, the share of its FLOPs the unbatched program's lowering
    runs (packed products, :mod:`sq_jax.lower.pairs`)."""

    def using(self, forest: Forest) -> PlanCache:
        """This cache, emptied first when it was filled for another forest."""
        if self.forest is not forest:
            self.forest = forest
            self.schedules.clear()
            self.lowered.clear()
            self.terms.clear()
            self.cheap.clear()
            self.models.clear()
            self.floors = None
        return self

    def schedule(self, forest: Forest, plan: BatchPlan) -> ScheduledForest | None:
        """The schedule of ``plan`` (fused sums), ``None`` when it cannot be expressed."""
        if plan not in self.schedules:
            try:
                self.schedules[plan] = schedule_forest(forest, plan)
            except ScheduleError:
                self.schedules[plan] = None
        return self.schedules[plan]

    def structure(self, forest: Forest, cfg: Configuration) -> ScheduledForest | None:
        """``cfg``'s schedule at any counts, with its sums in its plan (``None``: none).

        The structure does not need the counts; configurations that differ in their sums
        only share one schedule (the sums change the lowering, not the schedule).
        """
        plan = cfg.plan([2] * len(cfg.spaces))
        sf = self.schedule(forest, replace(plan, sums="fused"))
        if sf is None or plan.sums == "fused":
            return sf
        return replace(
            sf, annotated=replace(sf.annotated, plan=replace(sf.annotated.plan, sums=plan.sums))
        )

    def cheap_model(self, cfg: Configuration, sf: ScheduledForest) -> BudgetModel:
        """:func:`~sq_jax.budget.model.schedule_model` of ``cfg`` (``sf``: its structure).

        Configurations that share a schedule share its FLOP terms.
        """
        if cfg not in self.cheap:
            fused = replace(cfg.plan([2] * len(cfg.spaces)), sums="fused")
            if fused not in self.terms:
                self.terms[fused] = flop_terms(sf)
            self.cheap[cfg] = schedule_model(sf, cfg, self.floors, self.terms[fused])
        return self.cheap[cfg]

    def model(self, cfg: Configuration, sf: ScheduledForest) -> BudgetModel:
        """:func:`~sq_jax.budget.model.budget_model` of ``cfg`` (``sf``: its structure).

        Made once, from the lowering the configurations of one schedule share.
        """
        if cfg not in self.models:
            fused = replace(cfg.plan([2] * len(cfg.spaces)), sums="fused")
            if fused not in self.lowered:
                self.lowered[fused] = lower_schedule(self.schedules[fused], sequence=False)
            # sequencing rewrites it (lower/accumulate.py)
            tree = sequence_sums_of(self.lowered[fused], cfg.sums)
            self.models[cfg] = budget_model(sf, cfg, tree, scheduled=self.cheap_model(cfg, sf))
        return self.models[cfg]


def _unbatched(forest: Forest, cache: PlanCache, step_cost: float) -> tuple[float, float]:
    """The unbatched program's cost and packed FLOPs; fills ``cache.floors``.

    Its cost is its FLOPs, at the shares its lowering packs products to, plus
    ``step_cost`` per build step (one per computed value). Those shares are the floors
    of every configuration's cheap bound (:func:`~sq_jax.budget.model.schedule_model`).
    """
    plan = BatchPlan()
    sf = cache.schedule(forest, plan)
    assert sf is not None  # the empty plan always schedules
    if cache.floors is None:
        cache.floors = {}
        if forest.pair_symmetry:  # else nothing is packed
            if plan not in cache.lowered:
                cache.lowered[plan] = lower_schedule(sf, sequence=False)
            cells = sf.rich.cells
            for v, share in pair_shares(cache.lowered[plan]).items():
                h = cells[v].hash
                cache.floors[h] = min(share, cache.floors.get(h, 1.0))
    packed = schedule_model(sf, Configuration((), 0), cache.floors).packed_flops((), ())
    return packed + step_cost * sum(step_terms(sf, ()).values()), packed


def _pairs_lost(
    point: SearchPoint,
    model: BudgetModel,
    sf: ScheduledForest,
    floors: dict[int, float],
    pairs: frozenset[str],
) -> bool:
    """Whether ``point``'s plan runs a block-pair product above its unbatched share.

    Only then can hoisting those products (``hoist="pairs"``) save FLOPs: where the
    best plan packs them as the unbatched program does (spin-orbital CCSD at W3's
    budgets) the phase is not searched.
    """
    extents = model.extents
    blocks = [-(-e // n) for e, n in zip(extents, point.counts, strict=True)]
    shares = {t.value_id: t.share_at(blocks, extents) for t in model.packed}
    for cell in sf.rich.cells:
        if cell.node is not None and cell.node.key in pairs:
            if shares.get(cell.value_id, 1.0) > floors.get(cell.hash, 1.0) * (1 + 1e-9):
                return True
    return False


def _two_modes_of_one_space(forest: Forest, spaces: Sequence[str]) -> bool:
    """Whether some result has two indices of one batchable space (two external loops)."""
    for root in forest.roots:
        seen: set[str] = set()
        for ix in dict.fromkeys(root.node.indices):
            if ix.space in spaces and ix.space in seen:
                return True
            seen.add(ix.space)
    return False


SPIN_MARKS = "↑↓"
"""Spin labels of the built-in spin-blocked spaces (``i↑``, ``a↓``, ...)."""


def _spin_groups(spaces: Sequence[str]) -> list[tuple[str, ...]]:
    """``spaces`` grouped with their spin partners (``a↑`` with ``a↓``), in order.

    Example:
        >>> _spin_groups(("a↑", "a↓", "i↑", "i↓", "x"))
        [('a↑', 'a↓'), ('i↑', 'i↓'), ('x',)]
    """
    groups: dict[str, list[str]] = {}
    for s in spaces:
        groups.setdefault(s.rstrip(SPIN_MARKS) if s[-1:] in SPIN_MARKS else s, []).append(s)
    return [tuple(g) for g in groups.values()]


def _configs(spaces: Sequence[str]) -> list[Configuration]:
    """Every role choice over ``spaces`` (the empty one first), by batched roles.

    Spin partners (``a↑``, ``a↓``) take the same role (their batch counts stay
    independent): the α and β blocks of an unrestricted program are alike, and four
    independent spin spaces would mean 256 role choices to schedule instead of 16.
    """
    groups = _spin_groups(spaces)
    out = []
    for choice in itertools.product((None, *ROLES), repeat=len(groups)):
        roles = tuple(
            (s, *r) for g, r in zip(groups, choice, strict=True) if r is not None for s in g
        )
        out.append(roles)
    out.sort(key=lambda r: (sum(int(e) + int(c) for _, e, c in r), len(r)))
    return [Configuration(r, k) for k, r in enumerate(out)]


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


def _key(cost: float, unit: float, flops: int, model: BudgetModel, counts: Sequence[int]) -> tuple:
    """The search's sort key (:data:`COST_RESOLUTION`: ``unit`` is one step of cost)."""
    cfg = model.config
    return (math.floor(cost / unit), cfg.flags, model.loops, sum(counts), flops, cfg.rank)


def _lower_bound(
    model: BudgetModel, ladders: Sequence[Sequence[tuple[int, int]]], step_cost: float, unit: float
) -> tuple:
    """A key no plan of ``model``'s configuration beats: its fewest batches.

    FLOPs and steps only grow with the counts. Read from :func:`schedule_model`: the
    lowering and memory model cost as much planner time as the schedule, and a
    configuration whose cheapest counts already lose is never lowered. Its packed
    FLOPs are at the unbatched program's shares (:attr:`PlanCache.floors`).
    """
    counts = [lad[0][0] for lad in ladders]
    blocks = [lad[0][1] for lad in ladders]
    return _key(model.cost(counts, blocks, step_cost), unit, model.flops(counts), model, counts)


def _search(
    model: BudgetModel,
    ladders: Sequence[Sequence[tuple[int, int]]],
    budget: int,
    best: SearchPoint | None,
    step_cost: float,
    unit: float,
    exclude: frozenset[BatchPlan] = frozenset(),
) -> SearchPoint | None:
    """The best point of one configuration under ``budget`` (``best`` if none beats it).

    Points whose plan (products not kept whole) is in ``exclude`` are passed over.
    """
    cfg = model.config

    def allowed(counts: Sequence[int]) -> bool:
        return not exclude or cfg.plan(counts) not in exclude

    def point(combo: Sequence[tuple[int, int]], peak: int = -1) -> SearchPoint:
        counts = tuple(n for n, _ in combo)
        blocks = [b for _, b in combo]
        flops = model.flops(counts)
        packed = model.packed_flops(counts, blocks)
        cost = packed + step_cost * model.steps(counts)
        key = _key(cost, unit, flops, model, counts)
        return SearchPoint(key, cfg, counts, peak, flops, cost, packed)

    if not ladders:
        peak = model.peak(())
        pt = point((), peak)
        if peak <= budget and allowed(()) and (best is None or pt.key < best.key):
            return pt
        return best
    *outer, last = ladders
    for head in itertools.product(*outer):
        cheapest = point((*head, last[0]))
        if best is not None and cheapest.key >= best.key:
            continue  # FLOPs and steps only grow with the last count (packed shares
            # over block pairs move by a few percent with the fit of the last batch)
        blocks = [b for _, b in head]
        # the cost grows with the last count, so the first count that fits is this head's
        # best; the peak is not monotone (an uneven last batch costs extra buffers), so
        # every count is tried rather than bisected.
        counts = [n for n, _ in head]
        fits = next(
            (
                k
                for k, (n, b) in enumerate(last)
                if model.peak([*blocks, b]) <= budget and allowed([*counts, n])
            ),
            None,
        )
        if fits is None:
            continue
        pt = point((*head, last[fits]), model.peak([*blocks, last[fits][1]]))
        if best is None or pt.key < best.key:
            best = pt
    return best


def plan_for_budget(
    forest: Forest,
    budget: int | str | float | None,
    *,
    spaces_allowed: Iterable[str] | None = None,
    max_batches: int | None = None,
    extended: bool = True,
    step_cost: float | None = None,
    cache: PlanCache | None = None,
    exclude: Collection[BatchPlan] = (),
) -> BatchPlan:
    """The cheapest batch plan whose memory fits ``budget``.

    The cost of a plan is its FLOPs (recomputation included; with ``pair_symmetry``,
    packed products at the share of their FLOPs the lowering runs them,
    :mod:`sq_jax.lower.pairs`) plus ``step_cost`` FLOPs for every step the program
    executes (each build and loop iteration: the time a loop pays per batch that the
    FLOPs do not show).

    Args:
        forest: the eval forest (:func:`sq_jax.build_forest`).
        budget: bytes for the program's intermediates and results as XLA allocates
            them (predicted, with :data:`~sq_jax.budget.model.XLA_HEADROOM`; inputs
            excluded; module docstring): an int, text for :func:`parse_bytes` (``"2 GiB"``), or
            ``None`` / ``math.inf`` for no limit (the empty plan).
        spaces_allowed: the spaces the plan may batch (default: every space of the
            forest with an extent above 1).
        max_batches: at most this many batches per space (default: one per element).
        extended: also search the variants of :data:`EXTENDED_PHASES` (operands
            hoisted out of loops, one external loop per space), each when the plans found
            before cost more than :data:`EXTENDED_GATE` times the unbatched program
            (default). :mod:`sq_jax.lower.memory` is less exact on some of these plans
            (CCSD, i=6, a=16: one loop per space over-predicted by 1.1-1.4x; at benzene
            sizes, o=21, v=93, hoisted plans were predicted within 0.93-1.02x of XLA);
            ``sq.compile`` holds every budgeted program to XLA's own figures
            (:func:`~sq_jax.budget.fit_to_budget`).
        step_cost: FLOPs charged per executed step (default :func:`default_step_cost`
            for the default JAX backend); 0 minimises FLOPs alone.
        cache: a :class:`PlanCache` to reuse across calls on one forest (default: a
            new one).
        exclude: plans (as the search makes them: no products kept whole) it must not
            return: :func:`~sq_jax.budget.fit_to_budget` passes those XLA measured over
            the budget.

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
            raise PlanError(f"memory budget {budget!r}: expected {ACCEPTED_SIZES}, or None.")
        budget = math.floor(budget)
    limit = parse_bytes(budget)
    if max_batches is not None and (
        isinstance(max_batches, bool) or not isinstance(max_batches, int) or max_batches < 1
    ):
        raise PlanError(f"max_batches must be a positive int or None, got {max_batches!r}.")
    if not isinstance(extended, bool):
        raise PlanError(f"extended must be True or False, got {extended!r}.")
    if step_cost is None:
        step_cost = default_step_cost()
    elif isinstance(step_cost, bool) or not (
        isinstance(step_cost, int | float) and math.isfinite(step_cost) and step_cost >= 0
    ):
        raise PlanError(f"step_cost must be a finite number >= 0, got {step_cost!r}.")
    with _rare_collections():
        return _plan(
            forest,
            limit,
            spaces_allowed,
            max_batches,
            extended,
            step_cost,
            cache,
            frozenset(exclude),
        )


@contextlib.contextmanager
def _rare_collections(young: int = 1_000_000):
    """Python's cyclic garbage collector run less often, for the duration.

    The search allocates millions of small, short-lived objects (schedules, records),
    few of them in cycles (the rest are freed as they die, whatever the threshold); at
    the default threshold (700 allocations) the collector took about a sixth of the
    planner's time (spin-orbital CCSD, i=10, a=38), and 50,000 still about a tenth
    after an XLA compile had grown the heap it scans.
    """
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], young), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def search_phases(
    forest: Forest, spaces: Sequence[str], extended: bool = True
) -> list[tuple[float, list[Configuration]]]:
    """The configurations :func:`plan_for_budget` may schedule, phase by phase.

    Each phase is ``(gate, configurations)``: the search schedules a phase only while the
    best plan found so far costs more than ``gate`` times the unbatched program.

    Args:
        forest: the eval forest.
        spaces: the spaces the plans may batch.
        extended: with the variants of :data:`EXTENDED_PHASES`.

    Example:
        >>> import sq_jax as sq
        >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
        >>> [(gate, len(configs)) for gate, configs in search_phases(forest, ("a", "i"))]
        [(0.0, 16), (1.1, 16), (1.1, 15), (1.1, 0), (1.1, 0), (1.1, 0), (1.1, 15)]
    """
    # External loops open at the reads of a permuted sum's values first (Y built once
    # per batch), one loop per batched result index, nothing hoisted. With `extended`,
    # the variants of EXTENDED_PHASES follow, each searched only when nothing found so
    # far costs at most EXTENDED_GATE times the unbatched program. Loops at the roots
    # themselves (Y built per orientation: more FLOPs, but a lower memory floor) come
    # last, when nothing found costs below twice the unbatched program (its cost, not its
    # FLOPs: where the steps dominate, they can win; spin-orbital CCD at i=4, a=10 and
    # 1/5 of the memory, 477x the unbatched cost at 11.6x the FLOPs, against 672x at
    # 1.6x for the best plan without them), with their sums run
    # term by term (the lower floor is their reason; fused, closed-shell CCSD at
    # benzene/cc-pVDZ sizes and 1/8 of the unbatched memory cost 4.5x the FLOPs instead
    # of 3.1x). Each phase schedules every role choice again: it costs planner time.
    configs = _configs(spaces)
    phases: list[tuple[float, list[Configuration]]] = [(0.0, configs)]
    external = [c for c in configs if any(e for _, e, _ in c.roles)]
    two = _two_modes_of_one_space(forest, spaces)
    pairs = block_pair_products(forest)
    for k, (modes, hoist, sums) in enumerate(EXTENDED_PHASES if extended else ()):
        if modes == "all":  # the unbatched program differs from the first phase's in its sums
            pool = [c for c in configs if c.roles or (sums != "fused" and hoist == "none")]
        elif hoist == "pairs":  # its contracted loops too: block pairs over the summed pair
            pool = [c for c in configs if c.roles] if pairs else []
        else:
            pool = external if two else []
        rank = (k + 1) * len(configs)
        variant = [
            replace(c, modes=modes, hoist=hoist, sums=sums, rank=rank + c.rank) for c in pool
        ]
        phases.append((EXTENDED_GATE, variant))
    if any(permuted_summands(root.node) for root in forest.roots):  # else: the same site
        rank = len(phases) * len(configs)
        sums = "sequenced" if extended else "fused"
        phases.append(
            (2.0, [replace(c, site="top", sums=sums, rank=rank + c.rank) for c in external])
        )
    return phases


def _plan(
    forest: Forest,
    limit: int,
    spaces_allowed: Iterable[str] | None,
    max_batches: int | None,
    extended: bool,
    step_cost: float,
    cache: PlanCache | None,
    exclude: frozenset[BatchPlan] = frozenset(),
) -> BatchPlan:
    """:func:`plan_for_budget` once its arguments are checked."""
    spaces = _batchable_spaces(forest, spaces_allowed)
    extent = forest.spaces.extent
    ladders = {s: _ladder(extent(s), max_batches) for s in spaces}
    spaces = tuple(s for s in spaces if ladders[s])
    f0 = forest.flops
    cache = (PlanCache() if cache is None else cache).using(forest)
    c0, packed0 = _unbatched(forest, cache, step_cost)
    unit = COST_RESOLUTION * c0 if c0 > 0 else 1.0  # one step of cost
    best: SearchPoint | None = None
    floor: tuple[SearchPoint, ScheduledForest] | None = None  # the smallest peak seen
    scheduled: dict[Configuration, ScheduledForest] = {}
    phases = search_phases(forest, spaces, extended)
    pairs = block_pair_products(forest)
    gate_of: dict[Configuration, float] = {}
    twins: dict[tuple, Configuration] = {}  # (roles, site, modes, hoist, sums) -> config
    for gate, phase in phases:
        for cfg in phase:
            gate_of[cfg] = gate
            twins.setdefault((cfg.roles, cfg.site, cfg.modes, cfg.hoist, cfg.sums), cfg)
    lowest: dict[Configuration, tuple[int, tuple[int, ...]] | None] = {}

    def floor_over(cfg: Configuration, sf: ScheduledForest, bound: float) -> bool:
        """Whether ``cfg``'s memory floor is above ``bound`` at every count (no lowering)."""
        finest = [ladders[s][-1][1] for s in cfg.spaces]  # its smallest blocks
        return cache.cheap_model(cfg, sf).floor_peak(finest) > bound

    def smallest(cfg: Configuration) -> tuple[int, tuple[int, ...]] | None:
        """``cfg``'s smallest predicted memory over every count, and those counts."""
        if cfg not in lowest:
            sf = cache.structure(forest, cfg)
            if sf is None:
                lowest[cfg] = None
            else:
                model = cache.model(cfg, sf)
                lowest[cfg] = min(
                    (model.peak([b for _, b in combo]), tuple(n for n, _ in combo))
                    for combo in itertools.product(*(ladders[s] for s in cfg.spaces))
                )
        return lowest[cfg]

    def twin_too_large(cfg: Configuration) -> bool:
        """Whether ``cfg``'s twin needs more than :data:`TWIN_FLOOR_MARGIN` x ``limit``.

        The twin is priced here only where its own phase would be searched now: else
        it may never be needed.
        """
        if cfg.hoist != "none":
            kind, key = cfg.hoist, (cfg.roles, cfg.site, cfg.modes, "none", cfg.sums)
        elif cfg.sums == "fused":
            kind, key = "fused", (cfg.roles, cfg.site, cfg.modes, "none", "sequenced")
        else:
            return False
        twin = twins.get(key)
        if twin is None:
            return False
        if twin not in lowest and best is not None and best.cost <= gate_of[twin] * c0:
            return False
        if twin not in lowest:
            sf = cache.structure(forest, twin)
            if sf is not None and floor_over(twin, sf, TWIN_FLOOR_MARGIN[kind] * limit):
                return True
        low = smallest(twin)
        return low is not None and low[0] > TWIN_FLOOR_MARGIN[kind] * limit

    def note_floor(cfg: Configuration, sf: ScheduledForest) -> None:
        """Keep ``cfg``'s smallest peak if it is the smallest seen (for the error)."""
        nonlocal floor
        low = smallest(cfg)
        assert low is not None
        if floor is None or (low[0], cfg.rank) < (floor[0].peak, floor[0].config.rank):
            floor = (SearchPoint((), cfg, low[1], low[0], 0), sf)

    def consider(cfg: Configuration, twin_rule: bool = True) -> None:
        nonlocal best
        sf = cache.structure(forest, cfg)
        if sf is None:
            return  # this configuration cannot be expressed: leave it out
        scheduled[cfg] = sf
        lad = [ladders[s] for s in cfg.spaces]
        cheap = cache.cheap_model(cfg, sf)
        if best is not None and _lower_bound(cheap, lad, step_cost, unit) >= best.key:
            return  # it cannot win
        if floor_over(cfg, sf, limit):
            unfit.append(cfg)  # it cannot fit: lowered only for the error, if nothing fits
            return
        if twin_rule and cfg.hoist == "none" and twin_too_large(cfg):
            # a fused configuration shares its twin's schedule, and pricing the twin
            # lowers it as pricing this one would: the bounds above come first (closed-
            # shell CCSD at benzene/cc-pVDZ sizes, a quarter of the memory: 16 lowerings
            # instead of 22; the other W3 searches lower as many as before)
            left_out.append(cfg)
            return
        # every configuration that may win is lowered: the schedule's peak profile is
        # no bound on the lowered program's memory (BudgetModel.peak)
        model = cache.model(cfg, sf)
        if best is None:  # the smallest peak seen, only needed for the error message
            note_floor(cfg, sf)
        best = _search(model, lad, limit, best, step_cost, unit, exclude)

    left_out: list[Configuration] = []
    unfit: list[Configuration] = []
    for gate, phase in phases:
        if best is not None and best.cost <= gate * c0:
            continue  # not worth its planner time
        if best is not None and phase and phase[0].hoist == "pairs":
            model = cache.models[best.config]
            if not _pairs_lost(best, model, scheduled[best.config], cache.floors or {}, pairs):
                continue  # the pair products already run at their unbatched share
        level = -1
        for cfg in phase:
            if best is not None and best.flops == f0 and best.packed <= packed0:
                if cfg.flags > level:
                    continue  # nothing at a higher level can win the tie-break
            level = cfg.flags
            if cfg.hoist != "none" and twin_too_large(cfg):
                left_out.append(cfg)  # left unscheduled: its twin's schedule is another
                continue
            consider(cfg)
    if best is None:
        for cfg in left_out:  # the twin rule is a rule of thumb: where nothing fits, check
            consider(cfg, twin_rule=False)
    if best is None:
        for cfg in unfit:
            note_floor(cfg, scheduled[cfg])
        raise infeasible_error(limit, floor, spaces, _batchable_spaces(forest, None), max_batches)
    plan = best.config.plan(best.counts)
    check = with_counts(scheduled[best.config], plan)
    need = required_bytes(check)
    if need != best.peak or schedule_flops(check) != best.flops:
        raise PlanError(  # a bug in the model, not in the user's input
            f"internal: the planner's model of {plan} predicted peak {best.peak} and "
            f"{best.flops} FLOPs, the schedule has {need} and {schedule_flops(check)}. "
            "Please report this with the equations."
        )
    return trim_contracted_loops(forest, check, limit, need)
