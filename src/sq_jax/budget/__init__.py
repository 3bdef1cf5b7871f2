"""The memory-budget planner: the cheapest batch plan whose memory fits a budget.

A stage of its own, above the lowering: it schedules and lowers every candidate
configuration to price it. :mod:`.model` prices one configuration as functions of the
batch counts, :mod:`.search` finds the cheapest plan that fits, :mod:`.trim` keeps whole
the products whose contracted loops it does not need, :mod:`.widen` runs the loops
whose nests leave room in fewer batches, :mod:`.explain` says why none does.

Users say how much memory they have, not which modes to batch. :func:`plan_for_budget`
chooses the batched spaces, their roles (external / contracted) and their batch counts
that minimise the program's cost — its FLOPs, recomputation included
(:func:`sq_jax.schedule.cost.schedule_flops`) and, with ``pair_symmetry``, products over
symmetric pairs at the share of their FLOPs the lowering runs them
(:mod:`sq_jax.lower.pairs`, :mod:`sq_jax.lower.block_pairs`), plus a price per executed step (each
build and loop iteration, :data:`~sq_jax.budget.search.STEP_COST`) — subject to its
memory fitting the budget. SeQuant's "perf-first" objective (``docs/schedule.md``,
"Loop placement") counts FLOPs alone (``step_cost=0``); the step price keeps a plan
from cutting a space into one batch per element when a few larger batches cost nearly
the same FLOPs (spin-orbital CCSD, H2O/cc-pVDZ at 1/4 of its memory: FLOPs alone chose
38 batches, 68,000 executed steps and 5.15x the unbatched time).

**What the budget counts.** What the compiled program allocates, as XLA's
``memory_analysis()`` reports it (temporaries + outputs): every intermediate, the
operand copies XLA makes (slices cut on use, transposes into matrix layout), loop
accumulators and stacked pieces, the fused sum chains that keep their products alive,
and the results — predicted by :func:`sq_jax.lower.memory.memory_model` from the
lowered program — times :data:`XLA_HEADROOM` for XLA's heap packing. The schedule's
own peak profile (SeQuant's model, one footprint per value) is not held to the budget:
the lowering holds less than it where a loop adds its pieces into a sum or a sum runs
term by term (:meth:`~sq_jax.budget.model.BudgetModel.peak`). Inputs (integrals,
amplitudes) are *not* counted: they are the caller's arrays. Results are never sliced
at their home, so the budget can never drop below the results and what is live with
them.

**Search.** A *configuration* is a role choice per space: not batched, external,
contracted, or both. The schedule's structure (loops, placement, recomputation) depends
only on the configuration, not on the batch counts, so each configuration is scheduled
and lowered once, and its memory and FLOPs are then exact functions of the counts: the
memory is a sweep over live buffers whose sizes are monomials in the block sizes (some
only present when a block size leaves an uneven last batch), the FLOPs a polynomial in
the batch counts (:func:`sq_jax.schedule.cost.flop_terms`), and so are the executed
steps (:func:`~sq_jax.budget.model.step_terms`). The packed products' shares are
read from the configuration's lowering (over block pairs, a function of the block
size); before it is lowered, a configuration is bounded with the unbatched program's
shares. The cost rises with every
count (but for a few percent in a block-pair product's share, with the fit of an
uneven last batch), so for every count of all but the last batched space on a ladder of distinct
block sizes (``ceil(extent / n)``), the last space's counts are tried from the fewest
up and the first that fits is kept; a combination is skipped when its cheapest count
already costs more than the best plan found. Configurations are visited
by the number of batched roles; once a plan without recomputation is found, levels with
more batched roles are not visited (they rarely win: more roles, more loops).

**Objective and ties.** Minimise ``(cost, batched roles, loop blocks in the schedule,
total batches, FLOPs, configuration order)``, the cost in steps of
:data:`~sq_jax.budget.search.COST_RESOLUTION` of the unbatched program's (plans closer
than that are equally cheap to the model, and fewer loops ran faster). The result is
deterministic for one JAX backend (the step price depends on it). The returned plan is
scheduled once more to check its peak and FLOPs against the model.

**Trim.** A role batches every product over the space, though the budget binds in a
few places only; each contracted loop costs time its FLOPs do not show (slices,
smaller products, partial sums added per batch). :mod:`.trim` then keeps products
whole (``BatchPlan.whole``: no contracted loop) while the plan's requirement does not
grow and its FLOPs do not rise, within a few dozen trial schedules. Where XLA measures a
trimmed plan over the budget, :func:`fit_to_budget` takes the same plan with only its heavy
products whole (:func:`~.trim.heavy_products_only`), then untrimmed.

**Widen.** One batch count per space is set by the nest where the memory binds; every
other loop of the space runs as many batches. :func:`fit_to_budget` first tries each
plan with the loops whose nests leave room in larger blocks of their own
(``BatchPlan.loop_blocks``, :func:`~.widen.widen_loops`: each block dividing the extent,
two batches at least, the model's peak no higher than the plan's), then, where XLA
measures that over the budget, the plan as it is.

References: SeQuant's batched evaluation (``docs/schedule.md``); cotengra's
slicing search for the idea of pricing recomputation against memory (not its code).

External loops open at the roots, or at the reads of the values a permuted sum reads
(``external_site="root"``, :mod:`sq_jax.plan.annotate`), one loop per batched result
index. The variants of :data:`~sq_jax.budget.search.EXTENDED_PHASES` follow (turned
off by ``extended=False``), each searched only when nothing found before costs at most
:data:`~sq_jax.budget.search.EXTENDED_GATE` times the unbatched program: sums run
term by term (``BatchPlan.sums="sequenced"``, :mod:`sq_jax.lower.accumulate`; the
unbatched program first, which costs no FLOP), then with operands hoisted out of loops
(``BatchPlan.hoist``, products over symmetric pairs built whole included) and one
external loop per space (``BatchPlan.external_modes="first"``). The lowered-memory
model is less exact on some of these plans (external loops at the terms: 0.83-1.14x
XLA's figure on CCSD; external loops at the roots with hoisted operands: 0.94-1.07x);
``sq.compile`` holds every budgeted program to XLA's own figures
(:func:`~sq_jax.budget.fit_to_budget`), and tries first the plan the model fits without
:data:`XLA_HEADROOM`. Each phase schedules every role choice again (planner time).
Loops at the roots themselves (``"top"``: lower memory floor, more FLOPs; sums run term
by term) are searched last, when nothing found costs below twice the unbatched program.
A configuration that hoists is not scheduled (one that fuses its sums, not lowered) where
the same configuration hoisting nothing (running its sums term by term) needs more than
:data:`~sq_jax.budget.search.TWIN_FLOOR_MARGIN` times the budget at its most batches
(hoisting keeps values whole, fused sums hold their terms together: neither often
lowers that floor); where nothing fits, those are searched too.

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

from .explain import required_bytes as required_bytes
from .model import XLA_HEADROOM as XLA_HEADROOM
from .search import default_step_cost as default_step_cost
from .search import plan_for_budget as plan_for_budget
from .verify import BudgetSteps as BudgetSteps
from .verify import budget_steps as budget_steps
from .verify import fit_to_budget as fit_to_budget
from .verify import xla_bytes as xla_bytes

__all__ = [
    "XLA_HEADROOM",
    "BudgetSteps",
    "budget_steps",
    "fit_to_budget",
    "plan_for_budget",
    "required_bytes",
    "xla_bytes",
]
