"""Loop adds: a permuted sum of a loop's pieces, built batch by batch, never stacked whole.

An antisymmetrizer ``R = Σ_π ±π(Y)`` over a value ``Y`` that a loop makes in batches
(spin-orbital CCSD's ``P(ij)P(ab)``, closed-shell CCSD's ``Y + P(Y)``) is lowered as a
loop that stacks the batches of ``Y`` into one whole array, then a sum that reads it
under each permutation: ``Y`` and ``R`` are both alive, whole, and inside a sequenced
sum ``Y`` stays alive through every later term. :func:`fold_adds` makes such a loop add
each batch's piece into ``R`` directly, at every place the permutations send it
(:class:`~sq_jax.lower.ir.LoopAdd`: ``R[.., A, ..] += Y_A``, ``R[.., :, A] += P(Y_A)``):
only ``R`` is whole, ``Y`` is one batch. Closed-shell CCSD at benzene/cc-pVDZ sizes,
``a`` in 3 batches (one external loop per space, sequenced sums): the lowered program's
binding point held ``Y``, a second permuted value and ``R``, 29 MiB each.

It rewrites each sequenced sum (:class:`~sq_jax.lower.ir.Accumulate`) whose terms read

* the value a loop written just before it stacks (with nothing else reading it): the
  loop adds its pieces into the sum, starting from the sum's first term when that is a
  previous part of a chain (:func:`sq_jax.lower.accumulate.sequence_sums`);
* the value a loop alone in the term's own instructions stacks: that loop runs in the
  term's turn and adds its pieces into the running sum.

What the sum still reads runs after, starting from the running sum. A loop is folded
only where each of its pieces is one batch of a value its own body makes (not stacked
by a loop inside it) and the loop runs plainly (not over block pairs).

Example:
    >>> import sq_jax as sq
    >>> from sq_jax.cc.equations import load_equations
    >>> from sq_jax.plan import BatchPlan
    >>> plan = BatchPlan.of({"a": {"batches": 2, "roles": "external"}},
    ...                     external_modes="first", sums="sequenced")
    >>> prog = sq.compile(load_equations("ccd_so"), sq.Spaces(i=2, a=4), batch=plan)
    >>> for add in (add for lp in prog.lowered.loops() for add in lp.adds):
    ...     print(add)
    v38 = 0 + 1*v16 - 1*v16.P(1, 0, 2, 3) - 1*v16.P(0, 1, 3, 2) + 1*v16.P(1, 0, 3, 2)
    v37 = v38 + 1*v35 - 1*v35.P(1, 0, 2, 3)
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace

from .accumulate import _computed, _largest_id, produced, reads_of, starts_sum
from .ir import Accumulate, Instr, Loop, LoopAdd, LoweredProgram, Read, Term

__all__ = ["fold_adds"]


def _piece(lp: Loop, value: int) -> tuple[int, tuple] | None:
    """``(position, layout)`` of ``value`` when ``lp`` stacks it batch by batch from its body.

    ``None`` unless ``lp`` scatters ``value``, its own body makes it (or a loop inside
    sums it: still one batch of ``lp``), and ``lp`` runs plainly (not over block pairs).
    """
    if lp.block_pair_nest is not None:
        return None
    scattered = [(p, dims) for v, p, dims in lp.scatters if v == value]
    if len(scattered) != 1:
        return None
    position, dims = scattered[0]
    makers = [ins for ins in lp.body if value in produced(ins)]
    if len(makers) != 1:
        return None
    if isinstance(makers[0], Loop) and value not in (v for v, _ in makers[0].sums):
        return None  # stacked or carried by a loop inside: not one batch of this loop's
    if [at for _, at in dims].count(lp.loop) != 1 or dims[position][1] != lp.loop:
        return None
    return position, dims


def _fits(acc: Accumulate, position: int, layout: tuple, perm: tuple[int, ...]) -> bool:
    """Whether ``perm(piece)`` lands on the sum's layout, the loop's mode on a whole one."""
    if len(perm) != len(acc.dims):
        return False
    for m, (extent, at) in enumerate(acc.dims):
        p_extent, p_at = layout[perm[m]]
        if extent != p_extent or (perm[m] != position and at != p_at):
            return False
        if perm[m] == position and at is not None:
            return False
    return True


def _with_add(lp: Loop, add: LoopAdd) -> Loop:
    """``lp`` adding ``add.piece`` into ``add.value_id`` instead of stacking it."""
    scatters = tuple(s for s in lp.scatters if s[0] != add.piece)
    return replace(lp, scatters=scatters, adds=(*lp.adds, add))


class _Run(list):
    """Instructions that take one position's place."""


def _fold_sum(
    body: Sequence[Instr | _Run | None],
    k: int,
    keep: Collection[int],
    fresh: Iterator[int],
    preludes: bool,
) -> dict[int, Instr | _Run | None]:
    """Replacements for positions of ``body``: the sum at ``k`` and the loop it folds in.

    Empty when nothing folds; at ``k``, the instructions that now make the sum's value
    (``None``: the folded loop does). In ``body``, ``None`` marks a sum already gone
    and a :class:`_Run` the instructions that replaced one.
    """
    acc = body[k]
    assert isinstance(acc, Accumulate)
    readers: dict[int, int] = {}
    at: dict[int, int] = {}
    for j, here in enumerate(body):
        for ins in here if isinstance(here, _Run) else () if here is None else (here,):
            at.update((v, j) for v in produced(ins))
            for v in reads_of(ins) if j != k else ():
                readers[v] = readers.get(v, 0) + 1
    out: dict[int, Instr | _Run | None] = {}
    running: int | None = None  # the value of the sum so far (None: zero)
    waiting = list(acc.terms)  # the terms not added yet
    computed = [_value_of(t) for t in waiting if not t.body]
    for v in dict.fromkeys(v for v in computed if v >= 0):
        j = at.get(v, -1)
        lp = body[j] if j >= 0 else None
        found = _piece(lp, v) if isinstance(lp, Loop) else None
        if found is None or v in keep or readers.get(v, 0):
            continue  # not stacked by a loop, or read elsewhere too
        mine = [t for t in waiting if not t.body and _value_of(t) == v]
        others = [t for t in waiting if t not in mine]
        if any(v in reads_of(Accumulate(-1, (t,), ())) for t in others):
            continue
        if any(t.read.slices or not _fits(acc, *found, t.perm) for t in mine):
            continue
        # the sum's first other term may be a previous part of a chain, read as is: the
        # loop's sum starts from it, if it is made before the loop
        start = others[0].read.value_id if others and starts_sum(others[0]) else None
        if start is not None and at.get(start, -1) >= j:
            continue
        running = next(fresh)
        parts = tuple((t.perm, t.coef) for t in mine)
        assert isinstance(lp, Loop)
        out[j] = _with_add(lp, LoopAdd(running, acc.dims, v, found[0], parts, start))
        waiting = others[1:] if start is not None else others
        break
    # a term whose own instructions are the loop that stacks its value (with
    # ``preludes``: end in it): the loop runs in the term's turn, after the term's other
    # instructions, outside the sequenced sum (whose accumulator XLA copies into and out
    # of the branches of the sum's loop), adding its pieces into the running sum
    made = _Run()
    segment: list[Term] = []  # terms that run as a sequenced sum before the next loop
    for t in waiting:
        lp = t.body[-1] if t.body and (len(t.body) == 1 or preludes) else None
        v = _value_of(t)
        found = None
        if isinstance(lp, Loop) and v >= 0 and not t.read.slices and produced(lp) == (v,):
            found = _piece(lp, v)
        if found is None or not _fits(acc, *found, t.perm):
            segment.append(t)
            continue
        if segment and running is None and len(segment) == 1 and starts_sum(segment[0]):
            running = segment[0].read.value_id  # a previous part read as is: the sum so far
        elif segment:
            running = _segment(acc, running, segment, next(fresh), made)
        segment = []
        assert isinstance(lp, Loop)
        add = LoopAdd(next(fresh), acc.dims, v, found[0], ((t.perm, t.coef),), running)
        made.extend(t.body[:-1])
        made.append(_with_add(lp, add))
        running = add.value_id
    if not out and not made:
        return {}
    if segment or running is None:
        _segment(acc, running, segment, acc.value_id, made)
    elif made:  # the last loop leaves the sum's value
        made[-1] = _renamed(made[-1], acc.value_id)
    else:
        j = next(iter(out))
        out[j] = _renamed(out[j], acc.value_id)
    out[k] = made or None
    return out


def _renamed(lp: Instr | _Run | None, value: int) -> Loop:
    """``lp`` with its last sum named ``value``."""
    assert isinstance(lp, Loop)
    return replace(lp, adds=(*lp.adds[:-1], replace(lp.adds[-1], value_id=value)))


def _segment(
    acc: Accumulate, running: int | None, terms: list[Term], vid: int, made: list[Instr]
) -> int:
    """Append the sequenced sum of ``terms`` added to ``running`` as ``vid``; returns it."""
    identity = tuple(range(len(acc.dims)))
    if running is not None:
        read = Read(running, dims=acc.dims, axes=acc.axes or None)
        terms = [Term((), read, identity, 1.0), *terms]
    made.append(replace(acc, value_id=vid, terms=tuple(terms)))
    return vid


def _value_of(term: Term) -> int:
    """The computed value a term reads, or -1 (an input, a scalar, or none)."""
    if not _computed(term.read):
        return -1
    return term.read.value_id


def _fold(
    body: Sequence[Instr], keep: Collection[int], fresh: Iterator[int], preludes: bool
) -> tuple[Instr, ...]:
    """``body`` with its sums over loop pieces folded into the loops (recursively)."""
    work: list[Instr | _Run | None] = []
    for ins in body:
        if isinstance(ins, Loop):
            ins = replace(ins, body=_fold(ins.body, {*produced(ins)}, fresh, preludes))
        elif isinstance(ins, Accumulate):
            terms = tuple(
                replace(t, body=_fold(t.body, {_value_of(t)}, fresh, preludes)) if t.body else t
                for t in ins.terms
            )
            ins = replace(ins, terms=terms)
        work.append(ins)
    for k in [j for j, ins in enumerate(work) if isinstance(ins, Accumulate)]:
        for j, made in _fold_sum(work, k, keep, fresh, preludes).items():
            work[j] = made  # None: the sum is gone (its loop leaves its value)
    return tuple(
        i for ins in work if ins is not None for i in (ins if isinstance(ins, _Run) else [ins])
    )


def fold_adds(lowered: LoweredProgram, preludes: bool = True) -> LoweredProgram:
    """``lowered`` with each sum over a loop's stacked pieces built inside that loop.

    See the module docstring. The results' values are kept. ``preludes``: a term whose
    instructions end in such a loop runs them all in its turn, outside the sum (else
    only a term whose one instruction is the loop). Closed-shell CCSD at benzene/cc-pVDZ
    sizes, ``a`` in 8 batches, sequenced sums: XLA's temporaries + outputs 103 -> 77 MiB;
    with fused sums (at o=10, v=40) 12.8 -> 14.4 MiB, so
    :func:`~sq_jax.lower.instructions.sequence_sums_of` lifts them only when every sum
    is sequenced.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.cc.equations import load_equations
        >>> from sq_jax.lower.instructions import lower_schedule
        >>> from sq_jax.plan import BatchPlan
        >>> plan = BatchPlan.of({"a": {"batches": 2, "roles": "external"}},
        ...                     external_modes="first", sums="sequenced")
        >>> prog = sq.compile(load_equations("ccd_so"), sq.Spaces(i=2, a=4), batch=plan)
        >>> stacked = lower_schedule(prog.schedule, adds=False)
        >>> [len(lp.adds) for lp in stacked.loops()], [len(lp.adds) for lp in prog.lowered.loops()]
        ([0, 0], [1, 1])
        >>> fold_adds(stacked) == prog.lowered
        True
    """
    keep = {r.read.value_id for r in lowered.results if _computed(r.read)}
    fresh = itertools.count(_largest_id(lowered.body) + 1)
    return replace(lowered, body=_fold(lowered.body, keep, fresh, preludes))
