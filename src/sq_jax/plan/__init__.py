"""Batch plans and loop placement: where the batch loops of a forest open.

Example:
    >>> from sq_jax.plan import BatchPlan, LoopKind
    >>> BatchPlan.of({"a": 4}).is_batched("a", LoopKind.CONTRACTED)
    True
"""

from .annotate import AnnotatedForest as AnnotatedForest
from .annotate import LoopOpen as LoopOpen
from .annotate import OccurrenceId as OccurrenceId
from .annotate import annotate as annotate
from .annotate import annotate_by_hand as annotate_by_hand
from .annotate import preorder as preorder
from .annotate import summed_indices as summed_indices
from .batch import BatchPlan as BatchPlan
from .batch import LoopKind as LoopKind
from .batch import SpaceBatch as SpaceBatch
