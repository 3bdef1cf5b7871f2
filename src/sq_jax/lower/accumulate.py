"""Sequenced sums: a long sum run term by term, each term's intermediates in its turn.

The lowered program writes a sum of ``n`` computed terms as a chain of ``Combine`` adds.
XLA fuses the chain into one elementwise kernel that reads every term at once, and its
scheduler makes all the terms first: they are all alive together (CCSD's ``R2``: 11-21
buffers of ``o²v²`` at the binding point, 3/4 of the unbatched program's memory). Neither
``lax.optimization_barrier`` (the CPU pipeline drops it before fusion) nor data
dependencies between the adds change that: only a control-flow boundary does.

:func:`sequence_sums` rewrites each chain of at least :data:`MIN_TERMS` terms into one
:class:`~sq_jax.lower.ir.Accumulate`: a ``lax.fori_loop`` over the terms whose body is a
``lax.switch``, each branch making one term *and the intermediates only that term
reads* (moved out of the enclosing body into the branch) and adding it into the
accumulator. One term and its intermediates are then alive at a time beside the
accumulator; values several terms read are made before, as they were. A plan asks for
it with ``BatchPlan(sums="sequenced")``; the memory-budget planner
(:mod:`sq_jax.budget`) chooses it where it fits a budget the fused sums do not.

A read-only sum over several computed values (the antisymmetrizer of CCSD's ``R2`` over
its three ``Y`` parts) becomes a chain, one sum per value, each run right after its
value is made and adding into the previous one (:func:`_split_by_read`): the values no
longer wait for each other. With fused sums, only sums of at least
:data:`MIN_PERMUTED_ELEMENTS` elements that read a value under two layouts are sequenced.

The price: the adds are no longer one fused pass (one pass per term instead), and a
reverse-mode derivative carries the cotangents of everything the branches read through
the loop (measured: a 10-term chain's gradient held 28 buffers against 10 fused).

Example:
    >>> from sq_jax.lower.ir import Combine, Contract, Read
    >>> dims = ((3, None),)
    >>> def product(v, x):
    ...     return Contract(v, "ab,b->a", (Read(0, x), Read(0, "t")), dims)
    >>> def add(v, a, b):
    ...     return Combine(v, (1.0, 1.0), ((0,), (0,)), (Read(a), Read(b)), dims)
    >>> body = (product(1, "f"), product(2, "g"), add(3, 1, 2), product(4, "h"), add(5, 3, 4))
    >>> (acc,) = sequence_sums(body, {5})
    >>> [len(t.body) for t in acc.terms], acc.value_id
    ([1, 1, 1], 5)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace

from .ir import Accumulate, Combine, Instr, Loop, LoweredProgram, Read, Term

__all__ = [
    "MIN_PERMUTED_ELEMENTS",
    "MIN_TERMS",
    "produced",
    "reads_of",
    "sequence_program",
    "sequence_sums",
    "starts_sum",
]

MIN_TERMS = 3
"""Chains of fewer terms stay fused: two terms are alive together either way (and so
are chains with fewer than two computed terms: inputs are alive anyway)."""

MIN_PERMUTED_ELEMENTS = 4096
"""With fused sums, a sum reading one value under several layouts runs in sequence only
from this many elements (32 KiB in float64): below it XLA's one fused kernel costs
little, and the loop only lengthens the compile (+5-15% forward, +15-40% gradient,
measured on CCSD at o=4, v=6)."""


def produced(ins: Instr) -> tuple[int, ...]:
    """The values an instruction leaves in its body (a loop: its escapes).

    Example:
        >>> from sq_jax.lower.ir import Contract
        >>> produced(Contract(7, "a,a->a", (Read(0, "x"), Read(0, "y")), ((2, None),)))
        (7,)
    """
    if isinstance(ins, Loop):
        return (
            *(v for v, _ in ins.sums),
            *(v for v, _, _ in ins.scatters),
            *(v for v, _ in ins.carries),
            *(add.value_id for add in ins.adds),
        )
    return (ins.value_id,)


def _computed(read: Read) -> bool:
    return read.input_key is None and read.scalar is None


def reads_of(ins: Instr) -> set[int]:
    """Computed values ``ins`` reads from its surroundings.

    Nested bodies are included, less what they make themselves.

    Example:
        >>> from sq_jax.lower.ir import Contract
        >>> sorted(reads_of(Contract(2, "a,a->a", (Read(0), Read(1, "x")), ((2, None),))))
        [0]
    """
    if isinstance(ins, Loop):
        known = ins.derived.get("reads_of")
        if known is None:
            starts = {add.start for add in ins.adds if add.start is not None}
            known = ins.derived["reads_of"] = frozenset(_body_reads(ins.body) | starts)
        return known  # type: ignore[return-value]
    if isinstance(ins, Accumulate):
        out: set[int] = set()
        for t in ins.terms:
            inner = _body_reads(t.body)
            if _computed(t.read):
                inner.add(t.read.value_id)
            out |= inner - _made(t.body)
        return out
    return {r.value_id for r in ins.operands if _computed(r)}


def _made(body: Sequence[Instr]) -> set[int]:
    return {v for ins in body for v in produced(ins)}


def _body_reads(body: Sequence[Instr]) -> set[int]:
    out: set[int] = set()
    for ins in body:
        out |= reads_of(ins)
    return out - _made(body)


def _permuted(terms: Sequence[Term]) -> bool:
    """Whether the terms read one computed value under two layouts (``Y`` and ``P(Y)``)."""
    seen: dict[int, tuple[int, ...]] = {}
    for t in terms:
        if _computed(t.read) and seen.setdefault(t.read.value_id, t.perm) != t.perm:
            return True
    return False


def _chains(
    body: Sequence[Instr], keep: Collection[int], permuted: bool = False
) -> dict[int, tuple[list[Term], set[int]]]:
    """Chain root position -> its terms (bodies empty) and the positions of its adds.

    ``permuted``: only the chains that read a value under two layouts.
    """
    at = {v: k for k, ins in enumerate(body) for v in produced(ins)}
    uses: dict[int, int] = {}
    for ins in body:
        if isinstance(ins, Combine):  # a value read twice by one sum is used twice
            for r in ins.operands:
                if _computed(r):
                    uses[r.value_id] = uses.get(r.value_id, 0) + 1
        else:
            for v in reads_of(ins):
                uses[v] = uses.get(v, 0) + 1

    def link(r: Read) -> bool:  # an add folded into the sum that reads it
        k = at.get(r.value_id)
        return (
            _computed(r)
            and not r.slices
            and k is not None
            and isinstance(body[k], Combine)
            and uses.get(r.value_id) == 1
            and r.value_id not in keep
        )

    linked = {
        r.value_id for ins in body if isinstance(ins, Combine) for r in ins.operands if link(r)
    }

    def expand(k: int, perm: tuple[int, ...], coef: float, adds: set[int]) -> list[Term]:
        ins = body[k]
        assert isinstance(ins, Combine)
        adds.add(k)
        out: list[Term] = []
        for r, p, c in zip(ins.operands, ins.perms, ins.coefs, strict=True):
            # the sum's axis i is this value's axis perm[i], which is r's axis p[perm[i]]
            composed = tuple(p[q] for q in perm)
            if link(r):
                out += expand(at[r.value_id], composed, coef * c, adds)
            else:
                out.append(Term((), r, composed, coef * c))
        return out

    chains = {}
    for k, ins in enumerate(body):
        if isinstance(ins, Combine) and ins.value_id not in linked:
            adds: set[int] = set()
            terms = expand(k, tuple(range(len(ins.dims))), 1.0, adds)
            computed = sum(1 for t in terms if _computed(t.read))
            if len(terms) >= MIN_TERMS and computed >= 2:  # inputs are alive anyway
                if not permuted or (_permuted(terms) and _elements(ins) >= MIN_PERMUTED_ELEMENTS):
                    chains[k] = (terms, adds)
    return chains


def _elements(ins: Combine) -> int:
    return math.prod(extent for extent, _ in ins.dims)


def _term_reads(term: Term) -> set[int]:
    inner = _body_reads(term.body)
    if _computed(term.read):
        inner.add(term.read.value_id)
    return inner - _made(term.body)


def _owned(body: Sequence[Instr], k: int, keep: Collection[int]) -> list[list[int]]:
    """Per term of the Accumulate at ``k``: positions of the instructions only it reads.

    Each term counts as a reader of its own: a value two terms read stays outside.
    """
    acc = body[k]
    assert isinstance(acc, Accumulate)
    at = {v: j for j, ins in enumerate(body) for v in produced(ins)}
    readers: dict[int, set[object]] = {}
    for j, ins in enumerate(body):
        if j != k:
            for v in reads_of(ins):
                readers.setdefault(v, set()).add(j)
    for n, t in enumerate(acc.terms):
        for v in _term_reads(t):
            readers.setdefault(v, set()).add(("term", n))
    taken: set[int] = set()
    out = []
    for n, t in enumerate(acc.terms):
        start = at.get(t.read.value_id) if _computed(t.read) else None
        me: set[object] = {("term", n)}
        if start is None or start in taken:
            out.append([])
            continue
        outs = produced(body[start])
        if any(v in keep or not readers.get(v, set()) <= me for v in outs):
            out.append([])  # read elsewhere too (a loop's other escapes included)
            continue
        mine = {start}
        grew = True
        while grew:
            grew = False
            for j in sorted({at[v] for i in mine for v in reads_of(body[i]) if v in at}):
                if j in mine or j in taken or j == k:
                    continue
                outs = produced(body[j])
                if any(v in keep for v in outs):
                    continue
                if all(readers.get(v, set()) <= (mine | me) for v in outs):
                    mine.add(j)
                    grew = True
        taken |= mine
        out.append(sorted(mine))
    return out


def sequence_sums(
    body: Sequence[Instr],
    keep: Collection[int],
    permuted: bool = False,
    fresh: Iterator[int] | None = None,
) -> tuple[Instr, ...]:
    """``body`` with each long chain of adds run as an :class:`Accumulate` (recursively).

    ``keep``: values read after the body (results, loop escapes): never folded away.
    ``fresh``: ids for the partial sums of a sum split by what it reads
    (:func:`_split_by_read`); by default, ids above every id in ``body``.

    Example:
        >>> from sq_jax.lower.ir import Combine, Contract, Read
        >>> dims = ((3, None),)
        >>> shared = Contract(1, "ab,b->a", (Read(0, "f"), Read(0, "t")), dims)
        >>> def term(v):  # reads the shared value: it stays outside the sum
        ...     return Contract(v, "a,a->a", (Read(1), Read(0, "u")), dims)
        >>> def add(v, a, b):
        ...     return Combine(v, (1.0, 1.0), ((0,), (0,)), (Read(a), Read(b)), dims)
        >>> body = (shared, term(2), term(3), add(4, 2, 3), term(5), add(6, 4, 5))
        >>> first, acc = sequence_sums(body, {6})
        >>> first.value_id, [[i.value_id for i in t.body] for t in acc.terms]
        (1, [[2], [3], [5]])
    """
    if fresh is None:
        fresh = itertools.count(_largest_id(body) + 1)
    body = [
        replace(ins, body=sequence_sums(ins.body, {*produced(ins)}, permuted, fresh))
        if isinstance(ins, Loop)
        else ins
        for ins in body
    ]
    chains = _chains(body, keep, permuted)
    if not chains:
        return tuple(body)
    # first every chain becomes one Accumulate at its root, its adds gone; then, in body
    # order (inner sums first), each term takes the instructions only it reads: a sum
    # that only one term reads moves into that term whole
    adds = {k for _, links in chains.values() for k in links}
    work: list[Instr] = []
    for k, ins in enumerate(body):
        if k in chains:
            assert isinstance(ins, Combine)
            work.append(Accumulate(ins.value_id, tuple(chains[k][0]), ins.dims, ins.axes))
        elif k not in adds:
            work.append(ins)
    for value in [ins.value_id for ins in work if isinstance(ins, Accumulate)]:
        k = next(j for j, ins in enumerate(work) if value in produced(ins))
        acc = work[k]
        assert isinstance(acc, Accumulate)
        owned = _owned(work, k, keep)
        moved = {j for own in owned for j in own}
        terms = tuple(
            replace(t, body=tuple(work[j] for j in own))
            for t, own in zip(acc.terms, owned, strict=True)
        )
        work[k] = replace(acc, terms=terms)
        work = [ins for j, ins in enumerate(work) if j not in moved]
    for value in [ins.value_id for ins in work if isinstance(ins, Accumulate)]:
        work = _split_by_read(work, value, fresh)
    for value in [ins.value_id for ins in work if isinstance(ins, Accumulate)]:
        work = _made_first(work, value, fresh)
    return tuple(work)


def _made_first(work: list[Instr], value: int, fresh: Iterator[int]) -> list[Instr]:
    """The sum making ``value`` with its terms that read values made before it added first.

    A sequenced sum runs as one loop over its terms, and every value a term reads with
    no instructions of its own (made before the sum: e.g. two ring products that one
    loop makes together) is an operand of that loop, alive until the loop ends, beside
    every later term's intermediates. Those terms become a read-only sum of their own,
    run just before it; the rest starts from it, as from a previous part of a chain, and
    the values it read die there. Closed-shell CCSD at benzene/cc-pVDZ sizes, ``a`` in 5
    batches (one external loop per space): the ladder's nest held the two ring products,
    6 MiB each; XLA's temporaries + outputs 96.4 -> 84.0 MB (the model: 93.5 -> 84.3).
    Not chained part by part, each part right after its value (as :func:`_split_by_read`
    chains a read-only sum): XLA then schedules those adds where it likes, not where the
    memory model walks them (0.92 of the model at ``o=6, v=16``).
    """
    k = next(j for j, ins in enumerate(work) if value in produced(ins))
    acc = work[k]
    assert isinstance(acc, Accumulate)
    bare = [t for t in acc.terms if not t.body]
    if len(bare) == len(acc.terms) or not any(_computed(t.read) for t in bare):
        return work  # read-only already, or nothing made before it to free
    if len(bare) == 1 and bare[0] is acc.terms[0] and starts_sum(bare[0]):
        return work  # its one such value already is the accumulator
    lead = replace(acc, value_id=next(fresh), terms=tuple(bare))
    read = Read(lead.value_id, dims=acc.dims, axes=acc.axes or None)
    start = Term((), read, tuple(range(len(acc.dims))), 1.0)
    rest = replace(acc, terms=(start, *(t for t in acc.terms if t.body)))
    return [*work[:k], lead, rest, *work[k + 1 :]]


def _split_by_read(work: list[Instr], value: int, fresh: Iterator[int]) -> list[Instr]:
    """The read-only sum making ``value`` as a chain, one sum per computed value it reads.

    ``Σ_π ±π(Y_1) + … + Σ_π ±π(Y_m)`` (an antisymmetrizer over a sum of ``Y``s) needs
    every ``Y`` alive at once when run as one sum after all of them. As a chain, each
    part runs right after its ``Y`` is made and adds into the previous part: one ``Y``
    and two partial sums are alive at a time, and each ``Y`` dies at its part. Sums with
    term bodies, or reading fewer than two computed values, stay as they are.
    """
    k = next(j for j, ins in enumerate(work) if value in produced(ins))
    acc = work[k]
    assert isinstance(acc, Accumulate)
    if any(t.body for t in acc.terms):
        return work
    at = {v: j for j, ins in enumerate(work) for v in produced(ins)}
    groups: dict[int, list[Term]] = {}
    for t in acc.terms:
        where = at.get(t.read.value_id, -1) if _computed(t.read) else -1
        groups.setdefault(where, []).append(t)
    if sum(1 for where in groups if where >= 0) < 2:
        return work
    order = sorted(groups)
    if order[0] < 0:  # inputs join the first computed value's part
        groups[order[1]] = groups.pop(order[0]) + groups[order[1]]
        order = order[1:]
    identity = tuple(range(len(acc.dims)))
    parts: dict[int, Accumulate] = {}
    previous: int | None = None
    for n, where in enumerate(order):
        vid = acc.value_id if n == len(order) - 1 else next(fresh)
        terms = tuple(groups[where])
        if previous is not None:
            read = Read(previous, dims=acc.dims, axes=acc.axes or None)
            terms = (Term((), read, identity, 1.0), *terms)
        parts[where] = replace(acc, value_id=vid, terms=terms)
        previous = vid
    out: list[Instr] = []
    for j, ins in enumerate(work):
        if j != k:
            out.append(ins)
        if j in parts:
            out.append(parts[j])
    return out


def _largest_id(body: Sequence[Instr]) -> int:
    """The largest value id made or read in ``body`` (nested bodies included)."""
    top = -1
    for ins in body:
        top = max([top, *produced(ins), *reads_of(ins)])
        if isinstance(ins, Loop):
            top = max(top, _largest_id(ins.body))
        elif isinstance(ins, Accumulate):
            for t in ins.terms:
                top = max(top, _largest_id(t.body))
    return top


def sequence_program(lowered: LoweredProgram, permuted: bool = False) -> LoweredProgram:
    """:func:`sequence_sums` over a whole program (the results' values are kept).

    Example:
        >>> import sq_jax as sq
        >>> text = "R{a1;i1} = f{a1;a2} t{a2;i1} + g{i2;i1} t{a1;i2} + h{a1;i2} u{i2;i1}"
        >>> prog = sq.compile(text, sq.Spaces(i=2, a=3), batch=sq.BatchPlan(sums="sequenced"))
        >>> print(prog.lowered)
        v9 = sequenced sum of 3 terms
            v2 = gemm(ab,bc->ac) f{a;a} t{a;i}
          += 1*v2
            v4 = gemm(ab,ca->cb) g{i;i} t{a;i}
          += 1*v4
            v8 = gemm(ab,bc->ac) h{a;i} u{i;i}
          += 1*v8
        result R = v9
    """
    keep = {r.read.value_id for r in lowered.results if _computed(r.read)}
    return replace(lowered, body=sequence_sums(lowered.body, keep, permuted))


def starts_sum(term: Term) -> bool:
    """Whether a sequenced sum starts from this (first) term's value instead of zeros.

    A value read as is (a previous part of a chain, :mod:`..adds`): its buffer becomes
    the accumulator, so it is not alive beside it through the sum.

    Example:
        >>> starts_sum(Term((), Read(3), (0, 1), 1.0)), starts_sum(Term((), Read(3), (1, 0), 1.0))
        (True, False)
    """
    read = term.read
    return (
        not term.body
        and read.input_key is None
        and read.scalar is None
        and not read.slices
        and term.coef == 1.0
        and term.perm == tuple(range(len(term.perm)))
    )
