"""Lowering, traced half: run an instruction tree inside one JAX trace.

:func:`run_lowered` is a tiny interpreter over a
:class:`~sq_jax.lower.ir.LoweredProgram`. Called under ``jax.jit`` it traces
the whole schedule once: every :class:`~sq_jax.lower.ir.Loop` becomes one
``lax.fori_loop`` (only ``Sum`` escapes: partial sums in the carry) or one ``lax.scan``
(``Scatter`` escapes: per-batch pieces as stacked outputs, moved into the full mode
afterwards), followed, when the block size does not divide the extent, by one more
trace of the body for the smaller last batch — exact, and nothing is padded.

Operands are cut to the current batch on use with ``lax.dynamic_slice``; values
produced outside a loop are captured by its body, never recomputed. With ``remat=True``
a program with loops is differentiated by the backward pass of
:mod:`sq_jax.lower.reverse`: a batch's values are recomputed instead of stored for every
batch, and every array has one cotangent accumulator.

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

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

from .execute import RunSettings, read_operand, run_body
from .ir import Loop, LoweredProgram
from .reverse import run_reversible_body
from .shard import ShardPlan, run_sharded_body

__all__ = ["run_lowered"]


def run_lowered(
    lowered: LoweredProgram,
    blocks: Mapping[str, Any],
    *,
    remat: bool = False,
    shard: ShardPlan | None = None,
    padded: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Evaluate an instruction tree on input blocks (traceable; jit it around this).

    Args:
        lowered: the instruction tree (:func:`~sq_jax.lower.instructions.lower_schedule`).
        blocks: one array per input block key (and scalar variable), as returned by
            :func:`sq_jax.forest.inputs.bind_inputs`.
        remat: differentiate through :mod:`sq_jax.lower.reverse` (recompute batches;
            bounded reverse-mode memory). With ``shard``: wrap each batch in
            ``jax.checkpoint``.
        shard: distribute the batches of every root loop over this plan's device mesh
            (:mod:`sq_jax.lower.shard`); ``None`` runs everything on one device.
        padded: with ``shard``, blocks of ``shard.inputs`` already zero-padded along
            their split mode (the others are padded from ``blocks``).

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
        results = {r.read.value_id for r in lowered.results if r.read.input_key is None}
        run = RunSettings(cast, dtype, remat)
        if remat and any(isinstance(ins, Loop) for ins in lowered.body):
            env.update(run_reversible_body(lowered.body, run, sorted(results)))
        else:
            run_body(lowered.body, env, {}, run, results, after_largest=True)
    else:
        run_sharded_body(shard, lowered.body, env, cast, dtype, remat, padded)
    out: dict[str, Any] = {}
    for res in lowered.results:
        x = read_operand(res.read, env, {}, cast, dtype)
        if res.perm != tuple(range(len(res.perm))):
            x = jnp.transpose(x, res.perm)
        out[res.name] = x if res.coef == 1.0 else res.coef * x
    return out
