"""Test oracle: the FLOPs of a lowered program, counted on its instruction tree.

An independent count of what :func:`sq_jax.schedule.cost.schedule_flops` computes on
the block tree: here every ``Contract``/``Combine`` instruction is charged its
opt_einsum FLOPs, times the batch count of every enclosing ``Loop`` that cuts none of
its operands; a sequenced sum of ``n`` terms (``Accumulate``) is ``n - 1`` adds of its
size, its terms' instructions charged as the others. The two walks share nothing but the
per-contraction FLOP formula.
"""

from __future__ import annotations

from sq_jax.forest.cost import contraction_flops
from sq_jax.lower.ir import Accumulate, Combine, Contract, Instr, Loop, LoweredProgram
from sq_jax.schedule import ScheduledForest


def static_flops(sf: ScheduledForest, lowered: LoweredProgram) -> int:
    """FLOPs of every contraction and sum as the program runs them (opt_einsum convention).

    Summed over the batches of a loop, a mode the loop slices adds up to its extent, so
    a production costs its unbatched FLOPs times the batch count of every enclosing loop
    that slices none of its modes (recomputation).

    """
    cells = sf.rich.cells
    rec_at = {o.point: o for c in cells for o in c.occurrences}
    spaces = sf.annotated.forest.spaces
    total = 0
    stack: list[tuple[Instr, tuple[Loop, ...]]] = [(i, ()) for i in lowered.body]
    while stack:
        ins, loops = stack.pop()
        if isinstance(ins, Loop):
            stack.extend((i, (*loops, ins)) for i in ins.body)
            continue
        if isinstance(ins, Accumulate):
            stack.extend((i, loops) for t in ins.terms for i in t.body)
            adds = len(ins.terms) - 1
            for extent, _ in ins.dims:
                adds *= extent
            cut = {lp for _, lp in ins.dims if lp is not None}
            for lp in loops:
                if lp.loop not in cut:
                    adds *= lp.full_batches + (1 if lp.remainder else 0)
            total += adds
            continue
        assert isinstance(ins, (Contract, Combine))
        first = cells[ins.value_id].occurrences[0]
        node = first.node
        assert node is not None
        ops = [rec_at[p].carried for p in first.operand_points]
        if isinstance(ins, Contract):
            flops = contraction_flops(ops, node.indices, spaces)
        else:
            flops = 1
            for ix in node.indices:
                flops *= spaces.extent(ix.space)
        touched = {lp for r in ins.operands for _, lp in r.dims if lp is not None}
        touched |= {lp for r in ins.operands for _, lp in r.slices}
        for lp in loops:
            if lp.loop not in touched:
                total_batches = lp.full_batches + (1 if lp.remainder else 0)
                flops *= total_batches
        total += flops
    return total
