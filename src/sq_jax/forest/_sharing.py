"""Group sharing across the sums of one build: which group values each sum chose.

Why: two sums often need the same factored value (``t·(g − ½ g')`` in two closed-shell
CCSD ring intermediates), and a sum that can factor two ways of equal worth picks one
blindly. The builder (:func:`sq_jax.forest.build.build_forest`) builds once recording
each sum's choices, then again with that record: each sum of
:func:`sq_jax.forest.factor.factor_terms` prices a group value that *another* sum chose
as already paid, and the builder keeps the cheaper forest.

The example is :func:`sharing_groups`'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["GroupSharing", "current_sharing", "sharing_groups"]


class GroupSharing:
    """The group values each sum chose, and the ones other sums chose in an earlier build.

    Why: two sums often need the same factored value (``t·(g − ½ g')`` in two CCSD ring
    intermediates), and a sum that can factor two ways of equal worth picks one blindly; a
    value that another sum builds anyway costs it nothing. The builder builds once while
    recording (``free`` empty), then again with the record as ``free``: each sum prices a
    group value that *another* sum chose as already paid, and the cheaper forest is kept.
    """

    def __init__(self, previous: GroupSharing | None = None, *, blocks: bool = True) -> None:
        self.blocks = blocks
        """Whether sums look for bilinear blocks (:mod:`sq_jax.forest._bilinear`)."""
        self.blocks_taken = 0
        self.chosen: dict[str, set[str]] = {}
        """A sum's identity (its text digest) → the keys of the group values it chose."""
        self._by_key: dict[str, set[str]] = {}
        if previous is not None:
            for call, keys in previous.chosen.items():
                for key in keys:
                    self._by_key.setdefault(key, set()).add(call)

    def free(self, call: str) -> frozenset[str]:
        """The group values that a sum other than ``call`` chose in the earlier build."""
        return frozenset(k for k, calls in self._by_key.items() if calls - {call})


_SHARING: ContextVar[GroupSharing | None] = ContextVar("sq_jax_group_sharing", default=None)


@contextmanager
def sharing_groups(
    previous: GroupSharing | None = None, *, blocks: bool = True
) -> Iterator[GroupSharing]:
    """Within this block, sums record their groups; ``previous`` prices other sums' as paid.

    ``blocks=False`` turns the bilinear blocks off (the builder compares both).

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.forest.factor import factor_terms
        >>> (eq,) = sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1} + f{a1;a3} u{a3;i1}")
        >>> with sharing_groups() as record:
        ...     _ = factor_terms(eq.rhs.terms, eq.lhs.indices, sq.Spaces(i=4, a=30))
        >>> [len(keys) for keys in record.chosen.values()]
        [1]
    """
    sharing = GroupSharing(previous, blocks=blocks)
    token = _SHARING.set(sharing)
    try:
        yield sharing
    finally:
        _SHARING.reset(token)


def current_sharing() -> GroupSharing | None:
    """The record of the enclosing :func:`sharing_groups` block (``None`` outside one)."""
    return _SHARING.get()
