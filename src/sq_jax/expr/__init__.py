"""Expressions: index spaces, the expression IR, the SeQuant-syntax parser and serializer.

Example:
    >>> from sq_jax.expr import parse, serialize
    >>> (eq,) = parse("R{a1;i1} = f{a1;a2} t{a2;i1}")
    >>> serialize(eq)
    'R{a_1;i_1}:N-C-S = f{a_1;a_2}:N-C-S * t{a_2;i_1}:N-C-S'
"""

from .nodes import Constant as Constant
from .nodes import Equation as Equation
from .nodes import Expr as Expr
from .nodes import Index as Index
from .nodes import NormalOperator as NormalOperator
from .nodes import Power as Power
from .nodes import Product as Product
from .nodes import Sum as Sum
from .nodes import Symmetry as Symmetry
from .nodes import Tensor as Tensor
from .nodes import Variable as Variable
from .parse import ParseOptions as ParseOptions
from .parse import parse as parse
from .parse import parse_expr as parse_expr
from .serialize import serialize as serialize
from .spaces import DEFAULT_SPACES as DEFAULT_SPACES
from .spaces import IndexSpace as IndexSpace
from .spaces import Spaces as Spaces
from .symmetrize import expand_symmetrizers as expand_symmetrizers
from .symmetrize import relabel as relabel
from .validate import validate as validate
