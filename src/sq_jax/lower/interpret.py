"""Lowering, traced half: run an instruction tree inside one JAX trace.

:func:`run_lowered` is a tiny interpreter over a
:class:`~sq_jax.lower.instructions.LoweredProgram`. Called under ``jax.jit`` it traces
the whole schedule once: every :class:`~sq_jax.lower.instructions.Loop` becomes one
``lax.fori_loop`` (only ``Sum`` escapes: partial sums in the carry) or one ``lax.scan``
(``Scatter`` escapes: per-batch pieces as stacked outputs, moved into the full mode
afterwards), followed, when the block size does not divide the extent, by one more
trace of the body for the smaller last batch — exact, and nothing is padded.

Operands are cut to the current batch on use with ``lax.dynamic_slice``; values
produced outside a loop are captured by its body, never recomputed. With ``remat=True``
every loop body is wrapped in ``jax.checkpoint``, so reverse mode recomputes a batch's
intermediates instead of storing them for every batch.

Example:
    >>> import jax, numpy as np, sq_jax as sq
    >>> from sq_jax.plan import BatchPlan
    >>> from sq_jax.schedule import schedule_forest
    >>> from sq_jax.lower.instructions import lower_schedule
    >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=5))
    >>> lowered = lower_schedule(schedule_forest(forest, BatchPlan.of({"a": 2})))
    >>> blocks = {"f{i;a}": np.ones((2, 5)), "t{a;i}": np.ones((5, 2))}
    >>> float(jax.jit(lambda b: run_lowered(lowered, b))(blocks)["E"])
    10.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
from jax import lax

from ..forest.reference import _scalar_value
from ..schedule.ir import LoopId
from .ir import Combine, Contract, Instr, Loop, LoweredProgram, Read

if TYPE_CHECKING:
    from .shard import ShardPlan

__all__ = ["run_lowered"]

_Ctx = Mapping[LoopId, tuple[Any, int, Any]]
"""Active loops: loop instance -> (start of the current batch, its static size, first
valid element or ``None``). In an overlapping last batch, elements before the first
valid one were covered by the previous batch."""


def _shape(dims: tuple[tuple[int, LoopId | None], ...], ctx: _Ctx) -> tuple[int, ...]:
    return tuple(extent if lp is None else ctx[lp][1] for extent, lp in dims)


def _read(
    read: Read, env: Mapping[int, Any], ctx: _Ctx, blocks: Mapping[str, Any], dtype: Any
) -> Any:
    """The operand, cut on use: ``x[..., start:start+size, ...]`` along each sliced mode."""
    if read.scalar is not None:
        return jnp.asarray(_scalar_value(jnp, read.scalar.scalar, blocks), dtype=dtype)
    x = blocks[read.input_key] if read.input_key is not None else env[read.value_id]
    if not read.slices:
        return x
    starts: list[Any] = [0] * x.ndim
    sizes = list(x.shape)
    for p, lp in read.slices:
        starts[p], sizes[p], _ = ctx[lp]
    # one dynamic_slice for all cut modes; starts are never negative
    return lax.dynamic_slice(x, starts, sizes, allow_negative_indices=False)


def _mask(x: Any, position: int, size: int, valid_from: Any) -> Any:
    """Zero the elements ``x[..., j, ...]`` with ``j < valid_from`` along ``position``."""
    keep = lax.broadcasted_iota(jnp.int32, x.shape, position) >= valid_from
    return jnp.where(keep, x, jnp.zeros((), x.dtype))


def _contract(ins: Contract, ops: list[Any]) -> Any:
    """One contraction: ``dot_general`` on grouped 2-D/3-D views (:mod:`..gemm`)."""
    plan = ins.gemm
    if plan is None:
        return jnp.einsum(ins.spec, *ops, precision=lax.Precision.HIGHEST)
    ops = [
        x if perm is None else jnp.transpose(x, perm)
        for x, perm in zip(ops, plan.perms, strict=True)
    ]
    lhs, rhs = (ops[1], ops[0]) if plan.swap else (ops[0], ops[1])
    nb, nfl, nk, nfr = plan.groups
    batch = lhs.shape[:nb]
    if plan.lhs_k_first:
        kshape, lfree = lhs.shape[nb : nb + nk], lhs.shape[nb + nk :]
    else:
        lfree, kshape = lhs.shape[nb : nb + nfl], lhs.shape[nb + nfl :]
    rfree = rhs.shape[nb + nk :] if plan.rhs_k_first else rhs.shape[nb : nb + nfr]
    b, k, fl, fr = map(math.prod, (batch, kshape, lfree, rfree))
    lead = (b,) if nb else ()
    lhs = lhs.reshape(lead + ((k, fl) if plan.lhs_k_first else (fl, k)))
    rhs = rhs.reshape(lead + ((k, fr) if plan.rhs_k_first else (fr, k)))
    lc = len(lead) + (0 if plan.lhs_k_first else 1)
    rc = len(lead) + (0 if plan.rhs_k_first else 1)
    dims = (((lc,), (rc,)), ((0,), (0,)) if nb else ((), ()))
    out = lax.dot_general(lhs, rhs, dims, precision=lax.Precision.HIGHEST)
    return out.reshape(batch + lfree + rfree)


def _run_body(
    body: tuple[Instr, ...],
    env: dict[int, Any],
    ctx: _Ctx,
    blocks: Mapping[str, Any],
    dtype: Any,
    remat: bool,
    vary: Any = None,
) -> None:
    """Run ``body`` in order, storing each produced value in ``env``.

    ``vary`` (``None`` outside ``shard_map``) retypes a loop carry as varying across the
    mesh axis, so nested loops type-check inside :mod:`sq_jax.lower.shard`.
    """
    for ins in body:
        if isinstance(ins, Contract):
            ops = [_read(r, env, ctx, blocks, dtype) for r in ins.operands]
            for k, p, lp in ins.masks:
                _, size, valid_from = ctx[lp]
                if valid_from is not None:
                    ops[k] = _mask(ops[k], p, size, valid_from)
            env[ins.value_id] = _contract(ins, ops)
        elif isinstance(ins, Combine):
            terms = []
            ops = [_read(r, env, ctx, blocks, dtype) for r in ins.operands]
            for x, perm, c in zip(ops, ins.perms, ins.coefs, strict=True):
                x = jnp.transpose(x, perm) if perm != tuple(range(len(perm))) else x
                terms.append(x if c == 1.0 else c * x)
            env[ins.value_id] = terms[0] + terms[1]
        else:
            env.update(_run_loop(ins, env, ctx, blocks, dtype, remat, vary))


def _merge(stacked: Any, position: int) -> Any:
    """``(n, ..., b@position, ...)`` -> ``(..., n*b@position, ...)``: batches in order."""
    moved = jnp.moveaxis(stacked, 0, position)
    shape = moved.shape
    merged = (shape[position] * shape[position + 1],)
    return moved.reshape(shape[:position] + merged + shape[position + 2 :])


def _run_loop(
    loop: Loop,
    env: Mapping[int, Any],
    ctx: _Ctx,
    blocks: Mapping[str, Any],
    dtype: Any,
    remat: bool,
    vary: Any = None,
) -> dict[int, Any]:
    """One scope block: a loop over the batches of ``loop.loop``.

    Equivalent to::

        acc = {v: 0 for v in sums}; pieces = {v: [] for v in scatters}
        for start in range(0, extent, block):
            size = min(block, extent - start)
            local = run(body, batch=(start, size))      # operands cut on use
            for v in sums: acc[v] += local[v]
            for v, p in scatters: pieces[v].append(local[v])
        return acc | {v: concatenate(pieces[v], axis=p) for v, p in scatters}

    Batches run in one ``lax.fori_loop`` (``lax.scan`` when there are scatters). When
    ``block`` does not divide ``extent``, either the smaller last batch is a second trace
    of the body (``loop.peel``: a loop with no nested loop), or the last batch keeps the
    full size and starts at ``extent - block``, overlapping the previous one: summed
    overlap is masked to zero, scattered overlap dropped. Values in ``carries`` are
    invariant to the loop: the last batch's copy is kept.
    """
    sums = [v for v, _ in loop.sums]
    scatters = [(v, p) for v, p, _ in loop.scatters]
    carries = [v for v, _ in loop.carries]
    block, extent = loop.block, loop.extent

    def batch(start: Any, valid_from: Any, size: int) -> tuple[tuple[Any, ...], ...]:
        local = dict(env)
        inner = {**ctx, loop.loop: (start, size, valid_from)}
        _run_body(loop.body, local, inner, blocks, dtype, remat, vary)
        outs = (
            tuple(local[v] for v in sums),
            tuple(local[v] for v in carries),
            tuple(local[v] for v, _ in scatters),
        )
        return outs if vary is None else jax.tree.map(vary, outs)

    run = jax.checkpoint(batch, static_argnums=(2,)) if remat else batch
    overlap = loop.remainder > 0 and not loop.peel
    n = loop.num_batches if overlap else loop.full_batches

    def at(k: Any) -> tuple[tuple[Any, ...], ...]:
        if not overlap:
            return run(k * block, None, block)
        start = jnp.minimum(k * block, extent - block)
        return run(start, k * block - start, block)

    full_ctx = {**ctx, loop.loop: (0, block, None)}
    init = (
        tuple(jnp.zeros(_shape(d, full_ctx), dtype) for _, d in loop.sums),
        tuple(jnp.zeros(_shape(d, full_ctx), dtype) for _, d in loop.carries),
    )
    if vary is not None:
        init = jax.tree.map(vary, init)
    if not scatters:

        def fori_body(k: Any, carry: Any) -> Any:
            part, cross, _ = at(k)
            return (tuple(a + b for a, b in zip(carry[0], part, strict=True)), cross)

        acc, cross = lax.fori_loop(0, n, fori_body, init)
        stacked: tuple[Any, ...] = ()
    else:

        def scan_body(carry: Any, k: Any) -> Any:
            part, cross, pieces = at(k)
            return (tuple(a + b for a, b in zip(carry[0], part, strict=True)), cross), pieces

        (acc, cross), stacked = lax.scan(scan_body, init, jnp.arange(n))
    if overlap:
        drop = block - loop.remainder
        full = [
            jnp.concatenate(
                [_merge(y[:-1], p), lax.slice_in_dim(y[-1], drop, block, axis=p)], axis=p
            )
            for y, (_, p) in zip(stacked, scatters, strict=True)
        ]
    else:
        full = [_merge(y, p) for y, (_, p) in zip(stacked, scatters, strict=True)]
    if loop.peel:
        part, cross, pieces = run(n * block, None, loop.remainder)
        acc = tuple(a + b for a, b in zip(acc, part, strict=True))
        full = [
            jnp.concatenate([f, x], axis=p)
            for f, x, (_, p) in zip(full, pieces, scatters, strict=True)
        ]
    out = dict(zip(sums, acc, strict=True))
    out.update(zip(carries, cross, strict=True))
    out.update((v, f) for (v, _), f in zip(scatters, full, strict=True))
    return out


def run_lowered(
    lowered: LoweredProgram,
    blocks: Mapping[str, Any],
    *,
    remat: bool = False,
    shard: ShardPlan | None = None,
) -> dict[str, Any]:
    """Evaluate an instruction tree on input blocks (traceable; jit it around this).

    Args:
        lowered: the instruction tree (:func:`~sq_jax.lower.instructions.lower_schedule`).
        blocks: one array per input block key (and scalar variable), as returned by
            :func:`sq_jax.forest.inputs.bind_inputs`.
        remat: wrap every loop body in ``jax.checkpoint``.
        shard: distribute the batches of every root loop over this plan's device mesh
            (:mod:`sq_jax.lower.shard`); ``None`` runs everything on one device.

    Returns:
        One array per equation, modes in the order of its left-hand side.

    Example:
        >>> import numpy as np, sq_jax as sq
        >>> from sq_jax.plan import BatchPlan
        >>> from sq_jax.schedule import schedule_forest
        >>> from sq_jax.lower.instructions import lower_schedule
        >>> forest = sq.build_forest(sq.parse("R{a1;i1} = 2 f{a1;i1}"), sq.Spaces(i=1, a=2))
        >>> low = lower_schedule(schedule_forest(forest, BatchPlan()))
        >>> run_lowered(low, {"f{a;i}": np.ones((2, 1))})["R"].tolist()
        [[2.0], [2.0]]
    """
    arrays = [jnp.asarray(x) for x in blocks.values()]
    dtype = jnp.result_type(*arrays, float) if arrays else jnp.result_type(float)
    cast = {k: jnp.asarray(x, dtype) for k, x in blocks.items()}
    env: dict[int, Any] = {}
    if shard is None:
        _run_body(lowered.body, env, {}, cast, dtype, remat)
    else:
        from .shard import run_sharded_body  # shard builds on this module's helpers

        run_sharded_body(shard, lowered.body, env, cast, dtype, remat)
    out: dict[str, Any] = {}
    for res in lowered.results:
        x = _read(res.read, env, {}, cast, dtype)
        if res.perm != tuple(range(len(res.perm))):
            x = jnp.transpose(x, res.perm)
        out[res.name] = x if res.coef == 1.0 else res.coef * x
    return out
