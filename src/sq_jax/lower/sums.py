"""Long sums in bounded pieces: where a chain of ``Combine`` adds is cut, and how.

XLA fuses a chain of elementwise adds into one loop fusion, however long. On CPU the
LLVM compile of that one fusion grows faster than linearly with its size (measured: a
chain of 2,000 adds of small tensors 36 s, of 1,000 adds 7 s; a 5,000-term sum
compiled for minutes), and ``lax.optimization_barrier`` does not stop it (the CPU
pipeline drops barriers before fusion). A ``dot_general`` is never fused with the adds
around it, so a chain is cut every :data:`SUM_PIECE` terms: the pending terms are
stacked and contracted with their coefficients in one matrix-vector product, whose
result is one term of the rest of the chain. Sums of fewer terms are left exactly as
they were (no cut), so the CC programs do not change.

:func:`sum_cuts` finds the cuts of one body statically: both the interpreter
(:mod:`sq_jax.lower.execute`) and the memory model (:mod:`sq_jax.lower.memory`, which
charges the stacked terms) use it.

Example:
    >>> from sq_jax.lower.ir import Read
    >>> dims = ((3, None),)
    >>> body = [Combine(2, (1.0, 1.0), ((0,), (0,)), (Read(0), Read(1)), dims)]
    >>> for k in range(3, 3 + SUM_PIECE):  # v_k = v_{k-1} + x_k: a chain of 65 terms
    ...     body.append(Combine(k, (1.0, -1.0), ((0,), (0,)), (Read(k - 1), Read(100 + k)), dims))
    >>> cuts = sum_cuts(body)
    >>> [(body[k].value_id, len(terms)) for k, terms in cuts.items()]
    [(64, 64)]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .ir import Combine, Instr, Loop, Read

__all__ = ["SUM_PIECE", "SumTerm", "sum_cuts"]

SUM_PIECE = 64
"""Terms a chain of adds collects before it is cut (larger than any CC sum's chain)."""


@dataclass(frozen=True, slots=True)
class SumTerm:
    """One term of a cut sum: ``coef * transpose(read, perm)`` in the sum's mode order."""

    read: Read
    perm: tuple[int, ...]
    coef: float


def _compose(inner: tuple[int, ...], outer: tuple[int, ...]) -> tuple[int, ...]:
    """The one transpose equal to ``inner`` then ``outer``."""
    return tuple(inner[p] for p in outer)


def _reads(ins: Instr) -> list[int]:
    """Computed values an instruction reads, once per read (a loop: its whole body)."""
    if isinstance(ins, Loop):
        return [v for sub in ins.body for v in _reads(sub)]
    return [r.value_id for r in ins.operands if r.input_key is None and r.scalar is None]


def sum_cuts(body: Sequence[Instr], piece: int | None = None) -> dict[int, tuple[SumTerm, ...]]:
    """Positions of the ``Combine`` instructions that close a piece of a long sum.

    Each ``Combine`` collects the terms of the ``Combine`` values it reads (of this body,
    unsliced, read nowhere else) and its other operands as terms; when it holds
    ``piece`` terms or more, it is a cut: its value is the stacked terms contracted with
    their coefficients, and it counts as one term for the ``Combine`` instructions that
    read it.

    Args:
        body: one body of an instruction tree (loops are not entered).
        piece: terms per piece (default :data:`SUM_PIECE`).

    Returns:
        Position of each cut -> its terms, in the order the sum adds them.
    """
    piece = SUM_PIECE if piece is None else piece
    reads: Counter = Counter()
    for ins in body:
        reads.update(_reads(ins))
    terms: dict[int, tuple[SumTerm, ...]] = {}  # value id -> its pending terms
    cuts: dict[int, tuple[SumTerm, ...]] = {}
    for k, ins in enumerate(body):
        if not isinstance(ins, Combine):
            continue
        mine: list[SumTerm] = []
        for read, perm, coef in zip(ins.operands, ins.perms, ins.coefs, strict=True):
            inner = terms.get(read.value_id) if read.input_key is None else None
            if inner is None or read.slices or read.scalar is not None or reads[read.value_id] > 1:
                mine.append(SumTerm(read, perm, coef))
            else:
                mine.extend(SumTerm(t.read, _compose(t.perm, perm), t.coef * coef) for t in inner)
        if len(mine) >= piece:
            cuts[k] = tuple(mine)
            whole = Read(ins.value_id, dims=ins.dims)
            terms[ins.value_id] = (SumTerm(whole, tuple(range(len(ins.dims))), 1.0),)
        else:
            terms[ins.value_id] = tuple(mine)
    return cuts
