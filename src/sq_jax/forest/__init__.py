"""The eval forest: binarized, CSE-folded trees, input binding and the reference evaluator.

Example:
    >>> import sq_jax as sq
    >>> from sq_jax.forest import build_forest
    >>> build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4)).flops
    16
"""

from .build import build_forest as build_forest
from .cost import contraction_flops as contraction_flops
from .cost import mode_size as mode_size
from .cost import node_bytes as node_bytes
from .cost import node_flops as node_flops
from .dump import expr_text as expr_text
from .dump import format_forest as format_forest
from .inputs import InputSpec as InputSpec
from .inputs import bind_inputs as bind_inputs
from .inputs import block_key as block_key
from .inputs import input_specs as input_specs
from .nodes import EvalNode as EvalNode
from .nodes import Forest as Forest
from .nodes import NodeKind as NodeKind
from .nodes import Root as Root
from .reference import evaluate_forest as evaluate_forest
from .reference import evaluate_reference as evaluate_reference
from .reference import evaluate_reference_jax as evaluate_reference_jax
from .reference import scalar_value as scalar_value
