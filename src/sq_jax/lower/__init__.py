"""Lowering of an ordered schedule to one jitted JAX program.

:func:`lower_schedule` turns the block tree into an instruction tree
(:mod:`~sq_jax.lower.ir`); :func:`run_lowered` runs it inside a trace; :func:`make_program`
wraps it in one ``jax.jit``; :func:`memory_model` predicts what XLA allocates.

Example:
    >>> import sq_jax as sq
    >>> from sq_jax.lower import lower_schedule
    >>> from sq_jax.plan import BatchPlan
    >>> from sq_jax.schedule import schedule_forest
    >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
    >>> print(lower_schedule(schedule_forest(forest, BatchPlan())))
    v2 = gemm(ab,ba->) f{i;a} t{a;i}.T(1,0)
    result E = v2
"""

from .aot import AotJit as AotJit
from .aot import compiler_options as compiler_options
from .instructions import lower_schedule as lower_schedule
from .interpret import run_lowered as run_lowered
from .ir import Combine as Combine
from .ir import Contract as Contract
from .ir import Instr as Instr
from .ir import Loop as Loop
from .ir import LoweredProgram as LoweredProgram
from .ir import Read as Read
from .ir import Result as Result
from .memory import MemoryModel as MemoryModel
from .memory import memory_model as memory_model
from .program import Program as Program
from .program import make_program as make_program
from .shard import ShardPlan as ShardPlan
from .shard import make_shard_plan as make_shard_plan
