"""How one binary contraction runs as a matrix product, without copying its operands.

XLA on CPU (and cuBLAS on GPU) multiplies matrices; a contraction ``einsum(spec, x, y)``
becomes one ``dot_general`` on 2-D (or batched 3-D) views of its operands. A view is
free only when each operand's stored axes come in contiguous groups: the batch
(Hadamard) modes first, then the free modes and the contracted modes as two blocks in
either order (``B F K`` or ``B K F``; a transposed matrix costs nothing). Anything else
makes XLA materialise a transposed copy of the operand first — for the
``t1 · ⟨ab‖cd⟩`` term of CCSD, a copy of the whole 38⁴ integral block on every call
(``bench/README.md``, finding 3).

:func:`plan_gemm` chooses, for one contraction, which operand is the left matrix, the
order of the contracted (and batch) modes, and which operands must be transposed, to
copy as few bytes as possible. The result comes out as ``B F_left F_right`` — that
becomes the value's stored axis order (the lowering records it), so the product itself
is never transposed either.

Three refinements. An operand whose layout is the caller's to choose (``free_layout``: a
packed operand of :mod:`.pairs`, gathered anew) is transposed into the form that runs
fastest, a plain ``[F, K] x [K, F]``: XLA's CPU dot runs a transposed left matrix at
about half the rate (the benzene ladder, ``[2,P,Q]^T x [2,P,P]``: 47 against 121
GFLOP/s). And :attr:`GemmPlan.equal` holds, per transposed operand, the transpose that a
symmetry of its value makes equal and that products reading it alike share
(``sq_jax.lower.instructions``); the derivative keeps :attr:`GemmPlan.perms`. And an
antisymmetric operand may need no copy at all: ``t_ij^ab = -t_ij^ba``, so ``t`` stored as
``(a, b, i, j)`` is ``-t`` read as ``(b, a, i, j)``; where that order groups into a matrix,
the product reads it so and comes out negated (:attr:`GemmPlan.relabel`; its derivative,
exact in every direction, transposes the tangent). Spin-orbital CCSD at H2O/cc-pVDZ
sizes: 35 transposed copies instead of 41 unbatched; at a quarter of the memory, XLA's
figure for the planner's first plan fell from 1.07 to 0.95 of the budget (a whole copy
of ``t`` had been live with another in one loop), and that plan was kept.

Example:
    >>> from sq_jax.expr.nodes import Index
    >>> a, b, c, d, e = (Index("a", n) for n in range(1, 6))
    >>> g = plan_gemm((c, d, e, a), (a, b), (b, c, d, e), (8 * 38**4, 8 * 380))
    >>> g.perms, [str(ix) for ix in g.output]  # no copy; t1's free mode b comes out last
    ((None, None), ['a_3', 'a_4', 'a_5', 'a_2'])
    >>> str(g)  # the big operand is the (untransposed) left matrix
    'gemm abcd,de->abce [lhs BFK, rhs BKF]'
"""

from __future__ import annotations

import functools
import itertools
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from ..expr.nodes import Index

__all__ = ["GemmPlan", "plan_gemm"]


@dataclass(frozen=True, slots=True)
class GemmPlan:
    """One contraction as ``dot_general`` on grouped views of its operands.

    ``operands`` refers to the caller's two operands: ``swap`` says the second is the
    left matrix. After the optional transposes ``perms`` (per *caller* operand, in
    caller order), the left matrix is ``B F K`` or ``B K F`` (``lhs_k_first``) and the
    right one ``B K F`` or ``B F K`` (``rhs_k_first``).
    """

    swap: bool
    """Whether the caller's second operand is the left matrix."""
    perms: tuple[tuple[int, ...] | None, tuple[int, ...] | None]
    """Per caller operand: the transpose applied before the product, or ``None``."""
    groups: tuple[int, int, int, int]
    """``(batch, left free, contracted, right free)`` mode counts."""
    lhs_k_first: bool
    rhs_k_first: bool
    output: tuple[Index, ...]
    """The product's modes as it comes out: batch, left free, right free."""
    labels: tuple[tuple[Index, ...], tuple[Index, ...]]
    """Per caller operand, its modes after the transpose."""
    equal: tuple[tuple[int, ...] | None, tuple[int, ...] | None] = (None, None)
    """Per caller operand with a transpose: another one that gives the same array by a
    symmetry of its value (so products reading it alike share XLA's copy), applied to
    its value only; its derivative keeps ``perms`` (exact in every direction)."""
    relabel: tuple[tuple[tuple[int, ...], int] | None, tuple[tuple[int, ...], int] | None] = (
        None,
        None,
    )
    """Per caller operand read under a relabeling that an antisymmetry of its value allows
    (its stored array with its modes named in another order, at the price of a sign:
    ``sq_jax.lower.instructions``): ``(q, s)``, the array being ``s`` times the value
    transposed by ``q``. Its value is read as it is stored (no copy; the product is
    negated per sign, :attr:`sign`); its tangent is transposed by ``q`` and scaled by
    ``s``, so derivatives stay exact in every direction, as without the symmetry."""

    @property
    def sign(self) -> int:
        """The product of the relabeled operands' signs: the product comes out times it.

        Example:
            >>> from dataclasses import replace
            >>> from sq_jax.expr.nodes import Index
            >>> a, b, c = (Index("a", n) for n in range(1, 4))
            >>> plan = plan_gemm((a, b), (b, c), (a, c), (8, 8))
            >>> plan.sign, replace(plan, relabel=(((1, 0), -1), None)).sign
            (1, -1)
        """
        out = 1
        for named in self.relabel:
            if named is not None:
                out *= named[1]
        return out

    def transpose(self, k: int, x: Any) -> Any:
        """Caller operand ``k`` transposed for the product (``x`` itself if not).

        Example:
            >>> import numpy as np
            >>> from sq_jax.expr.nodes import Index
            >>> a, b, c = (Index("a", n) for n in range(1, 4))
            >>> plan = plan_gemm((a, b), (a, c), (b, c), (8, 8), free_layout=(True, False))
            >>> plan.transpose(0, np.arange(6.0).reshape(2, 3)).shape  # to [F, K]
            (3, 2)
        """
        if self.relabel[k] is not None:
            q, sign = self.relabel[k]
            x = _relabeled(x, q, sign)
        perm, made = self.perms[k], self.made(k)
        if perm is None or made == perm:
            return x if perm is None else jnp.transpose(x, perm)
        return _equal_transpose(x, made, perm)

    def made(self, k: int) -> tuple[int, ...] | None:
        """The transpose caller operand ``k``'s value gets (``None``: none).

        ``equal`` where there is one and ``perms`` still asks for a transpose (a prepared
        or hoisted copy clears ``perms``), else ``perms``.

        Example:
            >>> from dataclasses import replace
            >>> from sq_jax.expr.nodes import Index
            >>> a, b, c = (Index("a", n) for n in range(1, 4))
            >>> plan = plan_gemm((b, a), (a, c), (b, c), (8, 8))
            >>> symmetric = replace(plan, perms=((1, 0), None), equal=((0, 1), None))
            >>> plan.made(0) is None, symmetric.made(0)
            (True, (0, 1))
        """
        if self.perms[k] is None or self.equal[k] is None:
            return self.perms[k]
        return self.equal[k]

    @property
    def copies(self) -> int:
        """Operands transposed before the product (each a copy XLA makes)."""
        return sum(p is not None for p in self.perms)

    def __str__(self) -> str:
        table: dict[Index, str] = {}
        for ix in (*self.labels[0], *self.labels[1]):
            table.setdefault(ix, string.ascii_letters[len(table) % 52])
        lhs, rhs = (self.labels[1], self.labels[0]) if self.swap else self.labels
        text = ",".join("".join(table[ix] for ix in g) for g in (lhs, rhs))
        text += "->" + "".join(table[ix] for ix in self.output)
        forms = ("BKF" if self.lhs_k_first else "BFK", "BKF" if self.rhs_k_first else "BFK")
        sign = "-" if self.sign < 0 else ""
        return f"{sign}gemm {text} [lhs {forms[0]}, rhs {forms[1]}]"


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _equal_transpose(x: Any, equal: tuple[int, ...], perm: tuple[int, ...]) -> Any:
    """``x`` transposed by ``equal``: by a symmetry of ``x``, the same as by ``perm``.

    Its tangent is transposed by ``perm``, as without the symmetry.
    """
    return jnp.transpose(x, equal)


@_equal_transpose.defjvp
def _equal_transpose_jvp(
    equal: tuple[int, ...], perm: tuple[int, ...], primals: tuple, tangents: tuple
) -> tuple[Any, Any]:
    return jnp.transpose(primals[0], equal), jnp.transpose(tangents[0], perm)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _relabeled(x: Any, q: tuple[int, ...], sign: int) -> Any:
    """``x`` itself: by an antisymmetry of ``x``, ``sign`` times ``x`` transposed by ``q``.

    Its tangent is that transpose, times ``sign``, as without the symmetry.
    """
    return x


@_relabeled.defjvp
def _relabeled_jvp(
    q: tuple[int, ...], sign: int, primals: tuple, tangents: tuple
) -> tuple[Any, Any]:
    return primals[0], sign * jnp.transpose(tangents[0], q)


def _grouped(labels: Sequence[Index], batch: Sequence[Index], k: Sequence[Index]) -> str | None:
    """``"FK"``/``"KF"`` when ``labels`` is ``batch`` then free and ``k`` blocks, else None.

    A side with no free or no contracted modes fits both forms (``"FK"`` is returned).
    """
    nb = len(batch)
    if tuple(labels[:nb]) != tuple(batch):
        return None
    rest = tuple(labels[nb:])
    kk = tuple(k)
    nf = len(rest) - len(kk)
    if rest[nf:] == kk:
        return "FK"
    if rest[: len(kk)] == kk:
        return "KF"
    return None


def plan_gemm(
    left: Sequence[Index],
    right: Sequence[Index],
    out: Sequence[Index],
    nbytes: tuple[int, int],
    sliced: tuple[bool, bool] = (False, False),
    free_layout: tuple[bool, bool] = (False, False),
) -> GemmPlan | None:
    """The cheapest way to run ``einsum(left, right -> out)`` as one matrix product.

    Args:
        left: the first operand's modes in stored order.
        right: the second operand's modes in stored order.
        out: the result's modes (only the set matters: the product's order is chosen).
        nbytes: each operand's size, to prefer transposing the smaller one.
        sliced: whether each operand is cut to a batch on use; its slice is a copy
            anyway, so transposing it too costs nothing extra.
        free_layout: whether each operand's layout is the caller's to choose (a packed operand
            of :mod:`.pairs`, gathered anew): a transpose is neither a cost nor a copy,
            so the matrix roles that run fastest win.

    Returns:
        The plan, or ``None`` when the contraction is not a plain product (a mode twice
        on one operand, or a mode summed on one operand only): run it as ``einsum``.

    Example:
        >>> from sq_jax.expr.nodes import Index
        >>> i, j, a, b = Index("i", 1), Index("i", 2), Index("a", 1), Index("a", 2)
        >>> g = plan_gemm((a, i), (b, a, j), (b, i, j), (8, 8))  # K = a is the middle mode
        >>> g.copies, g.perms
        (1, (None, (0, 2, 1)))
    """
    return _plan_gemm(
        tuple(left), tuple(right), tuple(out), tuple(nbytes), tuple(sliced), tuple(free_layout)
    )


@functools.lru_cache(maxsize=8192)
def _plan_gemm(
    left: tuple[Index, ...],
    right: tuple[Index, ...],
    out: tuple[Index, ...],
    nbytes: tuple[int, int],
    sliced: tuple[bool, bool],
    free_layout: tuple[bool, bool],
) -> GemmPlan | None:
    # kept per arguments: the budget planner lowers one forest under dozens of plans,
    # and most products meet the same operand layouts in each
    out_set = set(out)
    lset, rset = set(left), set(right)
    if len(lset) != len(left) or len(rset) != len(right):
        return None
    if any(ix not in rset and ix not in out_set for ix in left):
        return None
    if any(ix not in lset and ix not in out_set for ix in right):
        return None
    if any(ix not in lset and ix not in rset for ix in out):
        return None
    batch_sets = [ix for ix in left if ix in rset and ix in out_set]
    k_sets = [ix for ix in left if ix in rset and ix not in out_set]
    best: tuple[tuple, GemmPlan] | None = None
    orders_b = dict.fromkeys(tuple(ix for ix in side if ix in batch_sets) for side in (left, right))
    orders_k = dict.fromkeys(tuple(ix for ix in side if ix in k_sets) for side in (left, right))
    first_b, first_k = next(iter(orders_b)), next(iter(orders_k))
    for swap, bo, ko in itertools.product((False, True), orders_b, orders_k):
        forms = []
        perms: list[tuple[int, ...] | None] = []
        labels = []
        cost = copies = 0
        # per matrix role (left, then right): the caller's operand, and its wanted form
        for k, want_k_first in ((1, False), (0, True)) if swap else ((0, False), (1, True)):
            side, want = (left, right)[k], "KF" if want_k_first else "FK"
            form = _grouped(side, bo, ko)
            free = tuple(ix for ix in side if ix not in batch_sets and ix not in k_sets)
            target = (*bo, *ko, *free) if want_k_first else (*bo, *free, *ko)
            # a free operand takes the wanted form: its gather writes any order
            if form is None or (free_layout[k] and form != want and target != side):
                perms.append(tuple(side.index(ix) for ix in target))
                labels.append(target)
                forms.append(want)
                if not free_layout[k]:
                    cost += 0 if sliced[k] else nbytes[k]
                    copies += 1
            else:
                perms.append(None)
                labels.append(tuple(side))
                forms.append(form)
        lfree = tuple(ix for ix in labels[0] if ix not in batch_sets and ix not in k_sets)
        rfree = tuple(ix for ix in labels[1] if ix not in batch_sets and ix not in k_sets)
        output = (*bo, *lfree, *rfree)
        # then the GEMM's own speed: a transposed left matrix runs at about half the
        # rate (measured on CPU: 1.6 vs 0.8 ms for 100x1444x100), a transposed right
        # one a little slower; then the node's own mode order (fewer transposed sums)
        flags = 2 * (forms[0] == "KF") + (forms[1] == "FK")
        key = (cost, copies, flags, output != tuple(out), swap, bo != first_b, ko != first_k)
        caller_perms = (perms[1], perms[0]) if swap else (perms[0], perms[1])
        caller_labels = (labels[1], labels[0]) if swap else (labels[0], labels[1])
        plan = GemmPlan(
            swap,
            caller_perms,  # type: ignore[arg-type]
            (len(bo), len(lfree), len(ko), len(rfree)),
            forms[0] == "KF",
            forms[1] == "KF",
            output,
            caller_labels,  # type: ignore[arg-type]
        )
        if best is None or key < best[0]:
            best = (key, plan)
    assert best is not None
    return best[1]
