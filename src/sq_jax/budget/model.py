"""One configuration of the budget search, priced as functions of the batch counts.

A :class:`Configuration` is a role choice per batched space; :func:`budget_model`
schedules nothing itself: from one scheduled forest of that configuration it builds a
:class:`BudgetModel` whose memory (the lowered program's predicted XLA memory) and
FLOPs are exact functions of the block sizes and batch counts.

Example:
    >>> cfg = Configuration((("a", False, True),), rank=0)
    >>> str(cfg.plan([4])), cfg.flags
    ('BatchPlan(a: 4 batches [contracted])', 1)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..forest.nodes import NodeKind
from ..lower.instructions import BLOCK_PAIRS_MAX_FRACTION, lower_schedule
from ..lower.ir import LoweredProgram
from ..lower.memory import ITEMSIZE, memory_model
from ..lower.pairs import packed_products
from ..plan.batch import BatchPlan, SpaceBatch
from ..schedule import ScheduledForest
from ..schedule.cost import FlopTerm, flop_terms
from ..schedule.ir import BuildStep

__all__ = [
    "ROLES",
    "XLA_HEADROOM",
    "BudgetModel",
    "Configuration",
    "PackedTerm",
    "SearchPoint",
    "budget_model",
    "cost_polynomials",
    "evaluate",
    "memory_floor_terms",
    "schedule_model",
    "step_terms",
]

XLA_HEADROOM = 1.25
"""The budget must hold the predicted XLA memory times this: XLA packs its buffers into
one heap with some fragmentation, and its scheduler does not follow our order exactly.
Measured (``tests/test_memory_model.py``, CCSD/CCD plans): XLA's temporaries + outputs
were 0.6-1.19x the prediction; with many nested loops XLA's heap has gaps (closed-shell
CCSD at benzene sizes, ``i`` in 5 external batches around contracted ``a`` loops: XLA
1.35x the prediction, 1.2x its own live bytes)."""

ROLES = ((True, False), (False, True), (True, True))  # external, contracted, both


@dataclass(frozen=True, slots=True)
class Configuration:
    """Roles per batched space: ``((space, external, contracted), ...)``."""

    roles: tuple[tuple[str, bool, bool], ...]
    rank: int
    site: str = "root"
    modes: str = "all"  # BatchPlan.external_modes
    hoist: str = "none"  # BatchPlan.hoist
    sums: str = "fused"  # BatchPlan.sums

    @property
    def spaces(self) -> tuple[str, ...]:
        """The batched spaces, in role order."""
        return tuple(s for s, _, _ in self.roles)

    @property
    def flags(self) -> int:
        """The number of batched roles (a space batched in both roles counts twice)."""
        return sum(int(e) + int(c) for _, e, c in self.roles)

    def plan(self, counts: Sequence[int]) -> BatchPlan:
        """The batch plan of these roles with ``counts`` batches per space."""
        return BatchPlan(
            tuple(
                SpaceBatch(s, batches=n, external=e, contracted=c)
                for (s, e, c), n in zip(self.roles, counts, strict=True)
            ),
            self.site,
            self.modes,
            self.hoist,
            self.sums,
        )


@dataclass(frozen=True, slots=True)
class PackedTerm:
    """One production of a product the lowering packs (:mod:`sq_jax.lower.pairs`).

    Its FLOPs are ``flops * prod(n_s ** exponents)`` (as in the FLOP polynomial), of
    which it runs ``share``; over block pairs the share depends on the block size of
    the loops that pair up (:meth:`~sq_jax.lower.block_pairs.BlockPairs.fraction`).

    Example:
        >>> PackedTerm((1,), 100, 0.5).saved([3], [4], (12,))
        150.0
        >>> PackedTerm((1,), 100, 0.5).share_at([4], (12,))
        0.5
    """

    exponents: tuple[int, ...]
    flops: int
    share: float
    space: int = -1
    """Over block pairs: the index of the batched space whose two loops pair up."""
    block_pairs: Any = None
    """Over block pairs: its :class:`~sq_jax.lower.block_pairs.BlockPairs` plan."""
    value_id: int = -1
    """The value produced."""

    def share_at(self, blocks: Sequence[int], extents: Sequence[int]) -> float:
        """The share of its FLOPs the product runs at these block sizes."""
        if self.block_pairs is None:
            return self.share
        k = self.space
        share = self.block_pairs.fraction(extents[k], blocks[k])
        return share if share <= BLOCK_PAIRS_MAX_FRACTION else 1.0  # else run plainly

    def saved(self, counts: Sequence[int], blocks: Sequence[int], extents: Sequence[int]) -> float:
        """The FLOPs packing saves at these batch counts and block sizes."""
        share = self.share_at(blocks, extents)
        term = self.flops
        for n, e in zip(counts, self.exponents, strict=True):
            term *= n**e
        return term * (1.0 - share)


@dataclass(frozen=True, slots=True)
class BudgetModel:
    """Peak and FLOPs of one configuration as functions of the batch counts."""

    config: Configuration
    flop_polynomial: tuple[tuple[tuple[int, ...], int], ...]  # (exponents per space, flops)
    loops: int  # loop blocks in the ordered schedule
    xla_exponents: np.ndarray  # (M, S): per monomial of the lowered model, powers per space
    xla_uneven: np.ndarray  # (M,): space index whose uneven last batch it needs, or -1
    xla_live: np.ndarray  # (M, Q): coefficient of each monomial at each point
    extents: tuple[int, ...]  # per batched space
    step_polynomial: tuple[tuple[tuple[int, ...], int], ...] = ()  # (exponents, steps)
    packed: tuple[PackedTerm, ...] = ()
    """The packed products' productions: the FLOPs :meth:`packed_flops` takes off."""
    terms: tuple[FlopTerm, ...] = ()
    """The schedule's FLOP terms (:func:`~sq_jax.schedule.cost.flop_terms`), made once."""
    floor: tuple[tuple[tuple[int, ...], int], ...] = ()
    """:func:`memory_floor_terms`: bytes no lowering of the schedule can do without."""

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
        """What the budget must hold: the lowered program's predicted XLA memory, with headroom.

        Not the schedule's peak profile (SeQuant's model): the lowering holds less
        where a loop adds its pieces into a sum (:mod:`sq_jax.lower.adds`) or a sum runs
        term by term. Spin-orbital CCSD at H2O/cc-pVDZ sizes, ``a`` in 19 batches: the
        profile 3.53 MiB, the lowered program 1.94 MiB predicted, 1.92 MiB measured by
        XLA; held to the profile, the plan at 1/8 of the unbatched memory cost 11.4x
        the unbatched FLOPs instead of 1.22x.
        """
        return math.ceil(self.xla_peak(blocks) * XLA_HEADROOM)

    def floor_peak(self, blocks: Sequence[int]) -> int:
        """A lower bound of :meth:`peak` at these block sizes, read from the schedule alone.

        The largest product's result (:func:`memory_floor_terms`), with the headroom: a
        configuration whose floor is over the budget at its smallest blocks cannot fit
        at any count, and the search leaves it unlowered: spin-orbital CCSD at
        H2O/cc-pVDZ sizes and W3's budgets, 21 of 60 configurations at a quarter of the
        memory and 11 of 56 at an eighth (the search 3.0 s instead of 3.6, 4.8 instead
        of 5.3 s); at benzene/cc-pVDZ sizes none (many o²v² values live together there,
        which only the lowering sees).

        Example:
            >>> import sq_jax as sq
            >>> from sq_jax.schedule import schedule_forest
            >>> text = "R{a1;i1} = f{a1;a2} t{a2;i2} g{i2;i1}"
            >>> forest = sq.build_forest(sq.parse(text), sq.Spaces(i=3, a=4))
            >>> cfg = Configuration((("a", True, False),), rank=0)
            >>> model = schedule_model(schedule_forest(forest, cfg.plan([2])), cfg)
            >>> model.floor_peak([2])  # R whole, 96 bytes, with the headroom
            120
        """
        largest = 0
        for exps, coef in self.floor:
            size = coef
            for b, k in zip(blocks, exps, strict=True):
                size *= b**k
            largest = max(largest, size)
        return math.ceil(largest * XLA_HEADROOM)

    def flops(self, counts: Sequence[int]) -> int:
        """The schedule's FLOPs at these batch counts (recomputation included)."""
        return evaluate(self.flop_polynomial, counts)

    def packed_flops(self, counts: Sequence[int], blocks: Sequence[int]) -> float:
        """The FLOPs the lowered program runs: :meth:`flops` less what packing saves.

        From :func:`budget_model`, the products its lowering packs; from
        :func:`schedule_model`, the floor shares it was given (a lower bound).
        """
        out = float(self.flops(counts))
        for term in self.packed:
            out -= term.saved(counts, blocks, self.extents)
        return out

    def steps(self, counts: Sequence[int]) -> int:
        """Build steps and loop iterations the program executes at these batch counts."""
        return evaluate(self.step_polynomial, counts)

    def cost(self, counts: Sequence[int], blocks: Sequence[int], step_cost: float) -> float:
        """The search's objective: packed FLOPs plus ``step_cost`` FLOPs per executed step."""
        return self.packed_flops(counts, blocks) + step_cost * self.steps(counts)


def step_terms(sf: ScheduledForest, spaces: Sequence[str]) -> dict[tuple[int, ...], int]:
    """The executed steps of ``sf`` as a polynomial in the batch counts of ``spaces``.

    A build step runs once per iteration of every loop around it, and each loop
    iteration is a step of its own (slicing, carrying, the loop's bookkeeping): per
    block, ``(builds + 1) * prod(n_s ** loops over s around it)``.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.schedule import schedule_forest
        >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
        >>> cfg = Configuration((("a", False, True),), rank=0)
        >>> step_terms(schedule_forest(forest, cfg.plan([2])), ("a",))
        {(0,): 0, (1,): 1}
    """
    poly: dict[tuple[int, ...], int] = {}
    for blk, ancestors in sf.ordered.walk():
        loops = [b.level.space for b in (*ancestors, blk) if not b.is_root]
        exps = tuple(loops.count(s) for s in spaces)
        builds = sum(1 for step in blk.steps if isinstance(step, BuildStep))
        poly[exps] = poly.get(exps, 0) + builds + (0 if blk.is_root else 1)
    return poly


Polynomial = tuple[tuple[tuple[int, ...], int], ...]
"""``((exponent per batched space, coefficient), ...)``: a function of the batch counts."""


def cost_polynomials(
    sf: ScheduledForest, spaces: Sequence[str], terms: Sequence[FlopTerm] | None = None
) -> tuple[Polynomial, Polynomial]:
    """The FLOPs and the executed steps of ``sf`` as polynomials in the counts of ``spaces``.

    Read from the schedule alone (no lowering): the search prices a configuration with
    them before it pays for :func:`budget_model`'s memory model. ``terms``: ``sf``'s
    :func:`~sq_jax.schedule.cost.flop_terms` where the caller has them.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.schedule import schedule_forest
        >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
        >>> cfg = Configuration((("a", False, True),), rank=0)
        >>> cost_polynomials(schedule_forest(forest, cfg.plan([2])), ("a",))
        ((((0,), 16),), (((0,), 0), ((1,), 1)))
    """
    poly: dict[tuple[int, ...], int] = {}
    for term in flop_terms(sf) if terms is None else terms:
        exps = tuple(term.recompute.count(s) for s in spaces)
        poly[exps] = poly.get(exps, 0) + term.flops
    return tuple(sorted(poly.items())), tuple(sorted(step_terms(sf, spaces).items()))


def memory_floor_terms(sf: ScheduledForest, spaces: Sequence[str]) -> Polynomial:
    """Per product of ``sf``, the bytes of its result as a monomial in the block sizes.

    A product's result is one buffer in any lowering of the schedule, with its home
    modes (those the loops around it slice) at the block size of their space and its
    other modes whole; so the largest of them is a floor of the lowered program's memory
    (:func:`~sq_jax.lower.memory.memory_model`, which counts 8-byte elements and more).
    One monomial per distinct ``(powers, bytes)``.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.plan import BatchPlan
        >>> from sq_jax.schedule import schedule_forest
        >>> text = "R{a1;i1} = f{a1;a2} t{a2;i2} g{i2;i1}"
        >>> forest = sq.build_forest(sq.parse(text), sq.Spaces(i=3, a=4))
        >>> cut = BatchPlan.of({"a": {"batches": 2, "roles": "external"}})
        >>> memory_floor_terms(schedule_forest(forest, cut), ("a",))  # R whole; f t per block
        (((0,), 96), ((1,), 24))
    """
    where = {s: k for k, s in enumerate(spaces)}
    extent = sf.annotated.forest.spaces.extent
    out: set[tuple[tuple[int, ...], int]] = set()
    for cell in sf.rich.cells:
        if cell.is_leaf or cell.node is None or cell.node.kind is not NodeKind.PRODUCT:
            continue
        home = set(cell.home_modes)
        coef, powers = ITEMSIZE, [0] * len(spaces)
        for ix in cell.carried:
            if ix in home and ix.space in where:
                powers[where[ix.space]] += 1
            else:
                coef *= extent(ix.space)
        out.add((tuple(powers), coef))
    # only the monomials no other one dominates at every block size
    kept = [
        (p, c)
        for p, c in out
        if not any(
            (q, d) != (p, c) and d >= c and all(x >= y for x, y in zip(q, p, strict=True))
            for q, d in out
        )
    ]
    return tuple(sorted(kept))


def evaluate(polynomial: Polynomial, counts: Sequence[int]) -> int:
    """``polynomial`` (:data:`Polynomial`) at these batch counts.

    Example:
        >>> evaluate((((0,), 16), ((1,), 3)), [4])
        28
    """
    total = 0
    for exps, coef in polynomial:
        term = coef
        for n, k in zip(counts, exps, strict=True):
            term *= n**k
        total += term
    return total


def _packed_terms(
    terms: Sequence[FlopTerm],
    spaces: Sequence[str],
    shares: Mapping[int, tuple[float, tuple[str, Any] | None]],
) -> tuple[PackedTerm, ...]:
    """Of a schedule's FLOP ``terms``, those of the packed values ``shares`` names.

    ``shares``: per value id, as :func:`~sq_jax.lower.pairs.packed_products` gives them.
    """
    where = {s: k for k, s in enumerate(spaces)}
    out = []
    for term in terms:
        if term.value_id not in shares:
            continue
        share, rule = shares[term.value_id]
        exps = tuple(term.recompute.count(s) for s in spaces)
        v = term.value_id
        if rule is not None and rule[0] in where:
            out.append(PackedTerm(exps, term.flops, share, where[rule[0]], rule[1], v))
        else:
            out.append(PackedTerm(exps, term.flops, share, value_id=v))
    return tuple(out)


def schedule_model(
    sf: ScheduledForest,
    config: Configuration,
    floors: Mapping[int, float] | None = None,
    terms: tuple[FlopTerm, ...] | None = None,
) -> BudgetModel:
    """What the schedule alone says of ``config``: its FLOPs and steps.

    Nothing is lowered (its memory is 0; :func:`budget_model` adds it): the search
    drops a configuration on its cost before it pays for the lowering. Its packed FLOPs
    take ``floors`` (per label-blind node hash, the least share of its FLOPs a value's
    product runs; the search gives the unbatched program's shares) as the shares: a
    lower bound, as long as no batched program packs a product more tightly than the
    unbatched one. ``terms``: ``sf``'s :func:`~sq_jax.schedule.cost.flop_terms` where the
    caller has them (configurations that share a schedule share them).

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.schedule import schedule_forest
        >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
        >>> cfg = Configuration((("a", False, True),), rank=0)
        >>> model = schedule_model(schedule_forest(forest, cfg.plan([2])), cfg)
        >>> model.flops([2]), model.xla_peak([2])
        (16, 0)
    """
    spaces = config.spaces
    extent = sf.annotated.forest.spaces.extent
    terms = flop_terms(sf) if terms is None else terms
    flops, steps = cost_polynomials(sf, spaces, terms)
    cells = sf.rich.cells
    shares = {
        v: (floors[cell.hash], None)
        for v, cell in enumerate(cells)
        if floors and not cell.is_leaf and cell.hash in floors
    }
    return BudgetModel(
        config,
        flops,
        sum(1 for blk, _ in sf.ordered.walk() if not blk.is_root),
        np.zeros((0, len(spaces)), dtype=np.int64),
        np.zeros(0, dtype=np.int64),
        np.zeros((0, 0), dtype=np.int64),
        tuple(extent(s) for s in spaces),
        steps,
        _packed_terms(terms, spaces, shares),
        terms,
        memory_floor_terms(sf, spaces),
    )


def budget_model(
    sf: ScheduledForest,
    config: Configuration,
    lowered: LoweredProgram | None = None,
    *,
    scheduled: BudgetModel | None = None,
) -> BudgetModel:
    """The memory and FLOPs of ``config`` as functions of its batch counts.

    ``sf`` is the forest scheduled under ``config`` with any counts (the structure does
    not depend on them); ``lowered`` its instruction tree and ``scheduled`` its
    :func:`schedule_model` when the caller has them (default: made here).

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.schedule import schedule_forest
        >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
        >>> cfg = Configuration((("a", False, True),), rank=0)
        >>> model = budget_model(schedule_forest(forest, cfg.plan([2])), cfg)
        >>> model.flops([2]), model.flops([4])
        (16, 16)
    """
    base = scheduled if scheduled is not None else schedule_model(sf, config)
    where = {s: k for k, s in enumerate(config.spaces)}
    if lowered is None:
        lowered = lower_schedule(sf)
    monos, coefs = memory_model(lowered).totals()
    xla_exps = np.zeros((len(monos), len(where)), dtype=np.int64)
    for g, (powers, _) in enumerate(monos):
        for space, k in powers:
            xla_exps[g, where[space]] = k
    return replace(
        base,
        xla_exponents=xla_exps,
        xla_uneven=np.array(
            [where.get(c, -1) if c is not None else -1 for _, c in monos], dtype=np.int64
        ),
        xla_live=np.array(coefs, dtype=np.int64).reshape(len(monos), -1),
        packed=_packed_terms(base.terms or flop_terms(sf), config.spaces, packed_products(lowered)),
    )


@dataclass(frozen=True, slots=True)
class SearchPoint:
    """A plan found by the search: its sort key, configuration, counts, memory, FLOPs."""

    key: tuple[int, ...]
    config: Configuration
    counts: tuple[int, ...]
    peak: int
    flops: int
    cost: float = 0.0
    packed: float = 0.0
    """The FLOPs the lowered program runs (:meth:`BudgetModel.packed_flops`)."""
