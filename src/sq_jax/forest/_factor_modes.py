"""Switches of the factoring pass (:mod:`sq_jax.forest.factor`), scoped by context managers.

Each is a :class:`contextvars.ContextVar` set only inside a ``with`` block, so a switch
never leaks out of the build that asked for it (the builder's ``dress=`` option, the
reference evaluator's flat forest, one forest's price memo).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import TypeVar

__all__ = [
    "BLOCKS",
    "ENABLED",
    "PRICES",
    "priced_once",
    "unfactored",
    "with_blocks",
    "without_blocks",
]

T = TypeVar("T")

ENABLED: ContextVar[bool] = ContextVar("sq_jax_factoring", default=True)
# off by default: a block trades memory for FLOPs (build_forest(..., dress=True) asks)
BLOCKS: ContextVar[bool] = ContextVar("sq_jax_bilinear_blocks", default=False)
PRICES: ContextVar[dict | None] = ContextVar("sq_jax_factor_prices", default=None)


@contextmanager
def _set_within(switch: ContextVar[T], value: T) -> Iterator[None]:
    """Set ``switch`` to ``value`` inside the ``with`` block and restore it after."""
    token = switch.set(value)
    try:
        yield
    finally:
        switch.reset(token)


def priced_once() -> AbstractContextManager[None]:
    """Within this block, products are binarized and priced once (one forest's builds).

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.forest.factor import factor_terms
        >>> (eq,) = sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1} + f{a1;a3} u{a3;i1}")
        >>> with priced_once():
        ...     once = factor_terms(eq.rhs.terms, eq.lhs.indices, sq.Spaces(i=4, a=30))
        ...     again = factor_terms(eq.rhs.terms, eq.lhs.indices, sq.Spaces(i=4, a=30))
        >>> once == again
        True
    """
    return _set_within(PRICES, {})


def with_blocks(enabled: bool = True) -> AbstractContextManager[None]:
    """Within this block, sums may form bilinear blocks (``enabled``) or not.

    :func:`~sq_jax.forest.build.build_forest` uses it for its ``dress=`` option.

    Example:
        >>> with with_blocks():
        ...     BLOCKS.get()
        True
        >>> BLOCKS.get()
        False
    """
    return _set_within(BLOCKS, enabled)


def without_blocks() -> AbstractContextManager[None]:
    """Within this block, sums form no bilinear blocks (:mod:`sq_jax.forest._bilinear`).

    Why: a block trades memory for FLOPs — closed-shell CCSD's dressed ladder
    ``g_vvvv − 2 t1·g_vvvo`` is a v⁴ intermediate (and its dressing another), where the
    undressed forest keeps o³v-sized ones; this gives the lean forest back.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.cc.equations import load_equations
        >>> eqs, spaces = sq.parse(load_equations("ccsd_cs")), sq.Spaces(i=21, a=93)
        >>> with without_blocks():
        ...     lean = sq.build_forest(eqs, spaces)
        >>> sq.build_forest(eqs, spaces, dress=True).flops < lean.flops
        True
    """
    return with_blocks(False)


def unfactored() -> AbstractContextManager[None]:
    """Within this block, the factoring pass returns every sum's terms unchanged.

    Used to build the unfactored forest of the same equations (the reference evaluator's
    oracle, and FLOP comparisons).

    Example:
        >>> import sq_jax as sq
        >>> eqs = sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1} + f{a1;a3} u{a3;i1}")
        >>> with unfactored():
        ...     flat = sq.build_forest(eqs, sq.Spaces(i=4, a=30))
        >>> flat.flops > sq.build_forest(eqs, sq.Spaces(i=4, a=30)).flops
        True
    """
    return _set_within(ENABLED, False)
