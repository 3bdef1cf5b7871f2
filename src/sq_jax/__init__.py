"""sq_jax: compile tensor-contraction equations into one jitted, differentiable JAX program.

Float64 is enabled on import (``jax_enable_x64``): coupled-cluster energies are compared
to 1e-9 Eh, which float32 cannot reach.

Example:
    >>> import sq_jax as sq
    >>> eqs = sq.parse("E = 1/4 g{i1,i2;a1,a2} t{a1,a2;i1,i2}")
    >>> str(eqs[0])
    'E = 1/4 g{i_1,i_2;a_1,a_2}:N-C-S * t{a_1,a_2;i_1,i_2}:N-C-S'
"""

import jax as _jax

_jax.config.update("jax_enable_x64", True)

from . import derive as derive  # noqa: E402
from ._errors import ConvergenceError as ConvergenceError  # noqa: E402
from ._errors import ExpressionError as ExpressionError  # noqa: E402
from ._errors import InputError as InputError  # noqa: E402
from ._errors import LoweringError as LoweringError  # noqa: E402
from ._errors import MemoryBudgetError as MemoryBudgetError  # noqa: E402
from ._errors import ParseError as ParseError  # noqa: E402
from ._errors import PipelineOrderError as PipelineOrderError  # noqa: E402
from ._errors import PlanError as PlanError  # noqa: E402
from ._errors import ScheduleError as ScheduleError  # noqa: E402
from ._errors import SpaceError as SpaceError  # noqa: E402
from ._errors import SqJaxError as SqJaxError  # noqa: E402
from ._pipeline import clear_budget_plans as clear_budget_plans  # noqa: E402
from ._pipeline import compile as compile  # noqa: E402
from ._units import format_bytes as format_bytes  # noqa: E402
from ._units import parse_bytes as parse_bytes  # noqa: E402
from .budget import plan_for_budget as plan_for_budget  # noqa: E402
from .expr.nodes import Constant as Constant  # noqa: E402
from .expr.nodes import Equation as Equation  # noqa: E402
from .expr.nodes import Index as Index  # noqa: E402
from .expr.nodes import NormalOperator as NormalOperator  # noqa: E402
from .expr.nodes import Power as Power  # noqa: E402
from .expr.nodes import Product as Product  # noqa: E402
from .expr.nodes import Sum as Sum  # noqa: E402
from .expr.nodes import Symmetry as Symmetry  # noqa: E402
from .expr.nodes import Tensor as Tensor  # noqa: E402
from .expr.nodes import Variable as Variable  # noqa: E402
from .expr.parse import ParseOptions as ParseOptions  # noqa: E402
from .expr.parse import parse as parse  # noqa: E402
from .expr.parse import parse_expr as parse_expr  # noqa: E402
from .expr.serialize import serialize as serialize  # noqa: E402
from .expr.spaces import DEFAULT_SPACES as DEFAULT_SPACES  # noqa: E402
from .expr.spaces import IndexSpace as IndexSpace  # noqa: E402
from .expr.spaces import Spaces as Spaces  # noqa: E402
from .forest.build import build_forest as build_forest  # noqa: E402
from .forest.nodes import EvalNode as EvalNode  # noqa: E402
from .forest.nodes import Forest as Forest  # noqa: E402
from .forest.nodes import NodeKind as NodeKind  # noqa: E402
from .forest.nodes import Root as Root  # noqa: E402
from .forest.reference import evaluate_reference as evaluate_reference  # noqa: E402
from .forest.reference import evaluate_reference_jax as evaluate_reference_jax  # noqa: E402
from .lower.program import PreparedProgram as PreparedProgram  # noqa: E402
from .lower.program import Program as Program  # noqa: E402
from .plan.batch import BatchPlan as BatchPlan  # noqa: E402
from .plan.batch import LoopKind as LoopKind  # noqa: E402
from .schedule import ScheduledForest as ScheduledForest  # noqa: E402
from .schedule import ordered_schedule as ordered_schedule  # noqa: E402
from .schedule import schedule_forest as schedule_forest  # noqa: E402
from .schedule.ir import OrderedSchedule as OrderedSchedule  # noqa: E402

__version__ = "0.1.0"
