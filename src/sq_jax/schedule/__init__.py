"""The scheduler: annotated forest → rich schedule → legality → ordered schedule.

The passes, in order (each a module with one public entry; no pass calls another):

1. :func:`sq_jax.plan.annotate` — where loops open (runs before the scheduler);
2. :func:`~sq_jax.schedule.rich.build_rich_schedule` — points, occurrences, loop
   identity (:mod:`~sq_jax.schedule.loop_identity`), values;
3. :func:`~sq_jax.schedule.legality.analyze_legality` — the role of every loop per value;
4. :func:`~sq_jax.schedule.ordered.build_ordered_schedule` — the block tree (must run
   after 3: it places values by their roles);
5. :func:`~sq_jax.schedule.peak.dag_path` + :func:`~sq_jax.schedule.peak.peak_profile_sweep`
   — the static peak (analysis only).

:func:`schedule_forest` runs 1–4 (and the peak) and keeps every intermediate
(:mod:`~sq_jax.schedule.driver`); :func:`ordered_schedule` returns only the ordered
schedule. Analyses of a schedule: :func:`~sq_jax.schedule.wellformed.well_formed`,
:func:`~sq_jax.schedule.wellformed.crossings`, :func:`~sq_jax.schedule.cost.schedule_flops`.
Its errors are the :class:`~sq_jax.ScheduleError` subclasses of :mod:`sq_jax._errors`.

Example:
    >>> import sq_jax as sq
    >>> from sq_jax.plan import BatchPlan
    >>> eqs = sq.parse("g{p1,p2;p3,p4} = B{p1,p3;;K1} B{p2,p4;;K1}")
    >>> forest = sq.build_forest(eqs, sq.Spaces(i=2, a=3, K=8))
    >>> print(ordered_schedule(forest, BatchPlan.of({"K": 4})))
    root
      loop Κ#0 depth 1 pass 0 Contracted
        output v1 Sum
"""

from .cost import FlopTerm as FlopTerm
from .cost import flop_terms as flop_terms
from .cost import schedule_flops as schedule_flops
from .driver import ScheduledForest as ScheduledForest
from .driver import ordered_schedule as ordered_schedule
from .driver import schedule_annotated as schedule_annotated
from .driver import schedule_forest as schedule_forest
from .dump import dump_schedule as dump_schedule
from .ir import BuildStep as BuildStep
from .ir import LoopId as LoopId
from .ir import OrderedSchedule as OrderedSchedule
from .ir import OutputKind as OutputKind
from .ir import ScopeBlock as ScopeBlock
from .ir import ScopeLevel as ScopeLevel
from .ir import Step as Step
from .legality import LegalitySchedule as LegalitySchedule
from .legality import LoopRole as LoopRole
from .legality import analyze_legality as analyze_legality
from .ordered import build_ordered_schedule as build_ordered_schedule
from .ordered import forced_split_levels as forced_split_levels
from .peak import PeakProfile as PeakProfile
from .peak import PeakSchedule as PeakSchedule
from .peak import dag_path as dag_path
from .peak import peak_profile_sweep as peak_profile_sweep
from .rich import OccurrenceRec as OccurrenceRec
from .rich import RichSchedule as RichSchedule
from .rich import ValueCell as ValueCell
from .rich import build_rich_schedule as build_rich_schedule
from .wellformed import crossings as crossings
from .wellformed import well_formed as well_formed
from .wellformed import well_formed_violations as well_formed_violations
