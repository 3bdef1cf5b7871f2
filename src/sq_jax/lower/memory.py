"""What the compiled program allocates: a static model of XLA's temporaries + outputs.

The schedule's peak profile (:mod:`sq_jax.schedule.peak`) is SeQuant's model: one
footprint per value, live from its first to its last use. XLA allocates more than that:

* a **sliced operand** (``lax.dynamic_slice`` on use) is a copy of the slice;
* an operand whose modes do not group into a matrix (:mod:`sq_jax.lower.gemm`) is
  transposed into a copy before the product;
* a **loop** holds its accumulators (sum escapes), its carried values and the stacked
  per-batch pieces of its scatter escapes for its whole duration (a value carried out
  of nested loops is one buffer, made in place by the innermost, which also stacks its
  batches there, along any axis); moving stacked pieces
  into place (a scatter along any axis but the first, or an uneven last batch) is
  another full-size copy (for a result, the output buffer: XLA allocates outputs apart
  from its temporaries and counts them whole, so it is charged for the whole loop,
  beside the stacked pieces); operand copies that do not change inside the loop (inputs
  cut to an outer loop's batch, packed inputs) are made once before it, while a whole
  input's transpose is made inside the loop, where its product reads it;
* a loop's **adds** (:mod:`sq_jax.lower.adds`) hold the sum they add into, whole, for
  the loop's duration (in the buffer of the value it starts from, which dies there),
  and one batch's piece in the body (two, with a peeled last batch: XLA makes that one
  whenever it likes); a sequenced sum that starts from its first term's value takes
  over that buffer too;
* the **smaller last batch** of a loop without nested loops runs after it
  (``Loop.peel``): its partial sums live as long as the loop's sums;
* loops that **start from zeros** of one shape share one array of zeros, alive from
  the first of them until the last one starts;
* each **result** that is permuted or scaled is a new output buffer;
* a **generated denominator** ``Δ`` (:mod:`sq_jax.forest.denominators`) is a new buffer
  of its read (sliced) shape at every instruction that reads it.

:func:`memory_model` walks the instruction tree in execution order and charges exactly
these buffers, every one live from its producing instruction to its last reader (a
value read inside a loop is live for the whole loop). The order is the written one
except where XLA's fusion and scheduler observably move a value (:func:`_placement`:
values made from inputs alone are made just before their first reader, elementwise
ones are recomputed inside their elementwise readers). XLA's scheduler may also move
whole loops, not seeing what they hold inside; the lowering holds the loops written
after the one that makes the largest value to run after it
(:func:`sq_jax.lower.execute.loop_done`). It is *symbolic*: a buffer's size
is a monomial in the block sizes of the batched spaces, and buffers that exist only
when a space's block size does not divide its extent carry that condition — so one
model prices every batch count of a plan's role choice (the memory-budget planner,
:mod:`sq_jax.budget`, relies on this). A loop with a block of its own
(``Loop.own_block``) is a variable of its own, named ``space#slot``; with
``per_loop=True`` every loop is (:mod:`sq_jax.budget.widen` prices each loop's block
apart). Inputs are not counted: they are the
caller's arguments.

XLA may do better (it fuses elementwise chains and can reuse an operand's buffer for
a result) or worse: it packs its buffers into one heap and leaves gaps (measured: up to
20% over the live bytes with many nested loops), which the model does not predict.
``tests/test_memory_model.py`` checks the model against ``memory_analysis()``; on
closed-shell CCSD at benzene/cc-pVDZ sizes (o=21, v=93) the prediction was 0.93-1.02x
XLA's temporaries + outputs on plans with hoisted operands, and is 1.00-1.04x on the
plans ``memory_budget`` chooses at 1/4 and 1/8 of the unbatched program's memory (with
``i`` in external batches around contracted ``a`` loops it was 0.68-0.92x until the
output a result is moved into was charged through its loop: that was no heap gap).

Example:
    >>> import sq_jax as sq
    >>> spaces = sq.Spaces(i=50, a=400)
    >>> model = memory_model(sq.compile("R{a1;i1} = f{a1;a2} t{a2;i1}", spaces).lowered)
    >>> model.peak({})  # the product (8 * 400 * 50 bytes) and its alignment
    160064
    >>> prog = sq.compile("R{a1;i1} = f{a1;a2} t{a2;i1}", spaces, batch={"a": 2})
    >>> model = memory_model(prog.lowered)
    >>> model.peak({"a": 200}), model.peak({"a": 100})  # priced at any block size
    (720832, 360832)
    >>> for name, size in model.items_at(model.binding({"a": 200}), {"a": 200})[:3]:
    ...     print(size, name)
    320064 copy of f{a;a}[0:a#0,1:a#1]
    160064 v2 (stacked batches of loop a#0)
    80064 copy of t{a;i}[0:a#1]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from ..schedule.ir import LoopId
from .accumulate import reads_of, starts_sum
from .copies import whole_input_copies
from .ir import Accumulate, Combine, Contract, Instr, Loop, LoopAdd, LoweredProgram, Read
from .pairs import packed_share
from .sums import ProductGroup, SumCut, plan_sums

__all__ = ["MemoryModel", "Monomial", "memory_model", "monomial_value"]

ITEMSIZE = 8
"""Bytes per element: the model counts float64 buffers."""

ALIGNMENT = 64
"""Bytes charged on top of every buffer: XLA starts each one on a 64-byte boundary."""

LOOP_STATE = 256
"""Bytes charged for each running loop: its counter, bounds and tuple of state."""

Monomial = tuple[tuple[tuple[str, int], ...], str | None]
"""``((space, power), ...)`` sorted, and the space whose uneven last batch the buffer
needs (``None``: always there). Its size is ``coef * prod(block[space] ** power)``."""


_Blocks = Mapping[str, int] | None
"""Block size per batched space or loop variable (``None``: the lowered program's own)."""

_LOOP_NAMES: ContextVar[Mapping[LoopId, str] | None] = ContextVar("_LOOP_NAMES", default=None)
"""While :func:`memory_model` walks a program: the loops that are variables of their own
(``space#slot``); any other loop's variable is its space."""


def _var(loop: LoopId) -> str:
    """The model's variable for the block of ``loop``."""
    names = _LOOP_NAMES.get()
    return loop[0] if names is None else names.get(loop, loop[0])


@dataclass(frozen=True, slots=True)
class MemoryModel:
    """Live buffers at every point of the program, symbolic in the block sizes."""

    points: tuple[tuple[tuple[str, Counter], ...], ...]
    """Per point, the live buffers: what each is, and its size as ``{monomial: coef}``."""
    labels: tuple[str, ...]
    """Per point, the instruction running there (for messages and plots)."""
    extents: tuple[tuple[str, int], ...]
    """Extent of every batched space (to tell an uneven last batch)."""
    blocks: tuple[tuple[str, int], ...] = ()
    """The lowered program's own block sizes: the default of every ``blocks`` argument."""
    fixed: tuple[tuple[str, int], ...] = ()
    """Blocks of the loops with blocks of their own (``Loop.own_block``): kept when a
    ``blocks`` argument prices their spaces at other sizes."""

    def _full(self, blocks: _Blocks) -> tuple[dict[str, int], dict[str, int]]:
        extents = dict(self.extents)
        return {
            **extents,
            **dict(self.fixed),
            **dict(self.blocks if blocks is None else blocks),
        }, extents

    def items_at(self, point: int, blocks: _Blocks = None) -> list[tuple[str, int]]:
        """The live buffers at ``point`` in bytes, largest first."""
        full, extents = self._full(blocks)
        items = [
            (name, sum(c * monomial_value(m, full, extents) for m, c in size.items()))
            for name, size in self.points[point]
        ]
        return sorted((it for it in items if it[1]), key=lambda it: (-it[1], it[0]))

    def bytes_at(self, point: int, blocks: _Blocks = None) -> int:
        """Live bytes at ``point`` with these block sizes (absent spaces: full extent)."""
        return sum(n for _, n in self.items_at(point, blocks))

    def profile(self, blocks: _Blocks = None) -> tuple[int, ...]:
        """Live bytes at every point."""
        return tuple(self.bytes_at(p, blocks) for p in range(len(self.points)))

    def peak(self, blocks: _Blocks = None) -> int:
        """The largest live total (0 for an empty program)."""
        return max(self.profile(blocks), default=0)

    def binding(self, blocks: _Blocks = None) -> int:
        """The first point where the peak is reached."""
        prof = self.profile(blocks)
        return prof.index(max(prof)) if prof else 0

    def totals(self) -> tuple[tuple[Monomial, ...], tuple[tuple[int, ...], ...]]:
        """Monomials and, per monomial, its coefficient at every point (for fast sweeps).

        Example:
            >>> MemoryModel(((("x", Counter({((("a", 1),), None): 8})),),), ("p",), ()).totals()
            ((((('a', 1),), None),), ((8,),))
        """
        sums: list[dict[Monomial, int]] = []
        for items in self.points:
            total: dict[Monomial, int] = {}
            get = total.get
            for _, size in items:  # Counter.update, without its per-call type checks
                for mono, coef in size.items():
                    total[mono] = get(mono, 0) + coef
            sums.append(total)
        monos = tuple(sorted({m for t in sums for m in t}, key=repr))
        return monos, tuple(tuple(t.get(m, 0) for t in sums) for m in monos)


def monomial_value(mono: Monomial, blocks: Mapping[str, int], extents: Mapping[str, int]) -> int:
    """A monomial's value at these blocks (0 when its uneven-batch condition is not met).

    Example:
        >>> monomial_value(((("a", 2),), None), {"a": 4}, {"a": 12})
        16
        >>> monomial_value(((("a", 1),), "a"), {"a": 4}, {"a": 12})  # 4 divides 12
        0
    """
    powers, cond = mono
    if cond is not None and extents[cond] % blocks[cond] == 0:
        return 0
    size = 1
    for space, k in powers:
        size *= blocks[space] ** k
    return size


def _size(dims: Iterable[tuple[int, LoopId | None]], cut: Mapping[int, LoopId] = {}) -> Counter:
    """One buffer's size.

    ``dims`` with sliced modes (stored, or ``cut`` now) at block size, plus
    :data:`ALIGNMENT` for the padding XLA puts after it.
    """
    coef, powers = ITEMSIZE, {}
    for p, (extent, lp) in enumerate(dims):
        loop = lp if lp is not None else cut.get(p)
        if loop is None:
            coef *= extent
        else:
            name = _var(loop)
            powers[name] = powers.get(name, 0) + 1
    if not powers:
        return Counter({((), None): coef + ALIGNMENT})
    return Counter({(tuple(sorted(powers.items())), None): coef, ((), None): ALIGNMENT})


def _read_size(read: Read) -> Counter:
    return _size(read.dims, dict(read.slices))


def _reads(ins: Instr) -> set[int]:
    """Computed values an instruction reads (a loop: anything inside it reads)."""
    if isinstance(ins, Loop):
        known = ins.derived.get("reads")
        if known is None:
            out = {add.start for add in ins.adds if add.start is not None}
            for sub in ins.body:
                out |= _reads(sub)
            known = ins.derived["reads"] = frozenset(out)
        return known  # type: ignore[return-value]
    if isinstance(ins, Accumulate):
        return reads_of(ins)
    return {r.value_id for r in ins.operands if r.input_key is None and r.scalar is None}


def _fused_sums(
    body: Sequence[Instr], keep: set[int], cuts: Mapping[int, object]
) -> dict[int, int]:
    """Sums XLA fuses into later sums: position -> position of the chain's last sum.

    XLA merges a chain of elementwise sums into one loop fusion (observed on CPU: the 124
    adds of CCSD's R2 ran as one fusion of 39 operands), so the chain's intermediate sums
    are never stored, and every product the chain adds is alive until its last add. A
    sum read only by sums of one chain is fused into it too, even when read several
    times (``Y`` read as ``Y - Y^(ab) - Y^(ij) + Y^(ab)(ij)``: XLA recomputes ``Y``'s
    elements in each read rather than storing it). A chain is cut into pieces
    (:mod:`sq_jax.lower.sums`): each cut is stored, the sums before it fuse into it.
    """
    at = {ins.value_id: k for k, ins in enumerate(body) if not isinstance(ins, Loop)}
    readers: dict[int, list[int]] = {}
    for k, ins in enumerate(body):
        for v in _reads(ins):
            if v in at:
                readers.setdefault(at[v], []).append(k)
    out: dict[int, int] = {}
    for j in range(len(body) - 1, -1, -1):  # readers come later: resolve them first
        ins = body[j]
        if not isinstance(ins, Combine) or ins.value_id in keep or j not in readers or j in cuts:
            continue
        if not all(isinstance(body[k], Combine) for k in readers[j]):
            continue
        roots = {out.get(k, k) for k in readers[j]}
        if len(roots) == 1:
            out[j] = roots.pop()
    return out


_CopyKey = tuple
"""What an operand copy holds: (source, transpose, slices) — equal keys are one copy."""


def _copies(ins: Contract | Combine) -> list[tuple[_CopyKey, Read, Counter]]:
    """Copies an instruction makes of its operands before it runs."""
    built = [
        ((read.input_key, None, read.slices, ins.value_id), read, _read_size(read))
        for read in ins.operands
        if read.generated  # built for this reader, from the energies of its batch
    ]
    if isinstance(ins, Combine):
        return built  # XLA fuses slicing and transposes into the elementwise sum
    if ins.pairs is not None:
        return built + _pair_buffers(ins)
    if ins.block_pairs is not None:
        return built + _block_pair_buffers(ins)
    perms = ins.gemm.perms if ins.gemm is not None else (None, None)
    masked = {k for k, _, _ in ins.masks}
    out = built
    for k, (read, perm) in enumerate(zip(ins.operands, perms, strict=True)):
        if read.scalar is not None or read.generated:
            continue
        if ins.gemm is None or read.slices or perm is not None or k in masked:
            source = read.input_key if read.input_key is not None else read.value_id
            if ins.gemm is not None:
                perm = ins.gemm.made(k)  # equal transposes are one copy, as XLA makes them
            key = (source, perm, read.slices, ins.value_id if k in masked else None)
            out.append((key, read, _read_size(read)))
    return out


def _scaled(size: Counter, share: float) -> Counter:
    """A buffer's symbolic size with its elements scaled by ``share`` (alignment kept)."""
    out = Counter({m: round(c * share) for m, c in size.items() if m != ((), None)})
    out[((), None)] += round((size[((), None)] - ALIGNMENT) * share) + ALIGNMENT
    return out


def _pair_buffers(ins: Contract) -> list[tuple[_CopyKey, Read, Counter]]:
    """A packed product's buffers (:mod:`sq_jax.lower.pairs`).

    Each operand's packed copy (or its transposed copy), and with a filled free pair the
    packed product, last; the unpacking fuses into the result's buffer.
    """
    plan = ins.pairs
    assert plan is not None
    out = []
    for k, read in enumerate(ins.operands):
        source = read.input_key if read.input_key is not None else read.value_id
        if ins.ready[k] is not None:
            continue  # made ready once, read as an input (:mod:`.prepare`)
        if plan.packs[k]:
            # a split operand's two parts are stacked for one batched product
            share = packed_share(plan.packs[k]) * (2 if plan.split is not None else 1)
            stored = plan.stored[k]
            how = tuple(
                (stored.index(p.labels[0]), stored.index(p.labels[1])) for p in plan.packs[k]
            )
            # an input's packed copy is one copy per layout, hoisted out of the loops that
            # do not cut it (like a transposed copy); a computed value's is made here
            owner = None if read.input_key is not None else ins.value_id
            key = (source, ("packed", how, k == plan.weighted), read.slices, owner)
            out.append((key, read, _scaled(_read_size(read), share)))
        elif plan.gemm.perms[k] is not None or read.slices or k in {m[0] for m in ins.masks}:
            key = (source, plan.gemm.perms[k], read.slices, ins.value_id)
            out.append((key, read, _read_size(read)))
    if plan.unpacks:  # the packed product(s), unpacked into the result
        key = (ins.value_id, "packed product", (), ins.value_id)
        if plan.split is not None:  # its two parts
            share = 2 * packed_share(plan.split.packs)
        else:
            share = packed_share([f.pack for f in plan.fills])
        out.append((key, Read(ins.value_id), _scaled(_size(ins.dims), share)))
        if len(plan.fills) == 2:  # unpacked one pair at a time: the product half unpacked
            key = (ins.value_id, "half unpacked", (), ins.value_id)
            half = packed_share([plan.fills[1].pack])
            out.append((key, Read(ins.value_id), _scaled(_size(ins.dims), half)))
    return out


def _block_pair_buffers(ins: Contract) -> list[tuple[_CopyKey, Read, Counter]]:
    """A product run over block pairs: its buffers in one iteration (:mod:`.block_pairs`).

    Per operand its two parts (packed when its free pair is; XLA fuses the slices of the
    batches ``(P, Q)`` and ``(Q, P)`` into them), and the two packed products, last.
    """
    plan = ins.block_pairs
    assert plan is not None
    out = []
    for k, read in enumerate(ins.operands):
        source = read.input_key if read.input_key is not None else read.value_id
        size = _read_size(read)
        n = plan.extents[k]
        share = 2 * ((n + 1) / (2 * n) if plan.free[k] is not None else 1.0)
        out.append(((source, "parts", read.slices, ins.value_id), read, _scaled(size, share)))
    key = (ins.value_id, "packed products", (), ins.value_id)
    out.append((key, Read(ins.value_id), _scaled(_size(ins.dims), 2 * plan.share)))
    return out


def _hoisted(lp: Loop, done: frozenset) -> dict[str, tuple[_CopyKey, Counter]]:
    """Operand copies inside ``lp`` that do not depend on its batch.

    XLA moves them in front of the loop (while-loop invariant code motion): made once,
    they stay alive for the whole loop. Observed: copies of inputs cut to the batch of a
    loop around ``lp`` (closed-shell CCSD, ``i`` in external batches around contracted
    ``a`` loops: each ``t{a,a;i,i}`` cut to the ``i`` batch is made once per ``i`` batch
    and lives through all its ``a`` loops). A transpose of a whole input is not moved:
    XLA's code motion leaves a transpose (like a slice or a broadcast) in the loop
    unless a moved instruction reads it, so it is made per batch and dies at its
    product (spin-orbital CCSD, ``a`` external with operands hoisted: charged for the
    whole loop, the model was 1.15-1.24x XLA's figure; now 0.94-1.02x).
    """
    inside = {lp.loop}
    stack: list[Instr] = list(lp.body)
    while stack:
        ins = stack.pop()
        if isinstance(ins, Loop):
            inside.add(ins.loop)
            stack.extend(ins.body)
    out: dict[str, tuple[_CopyKey, Counter]] = {}
    seen: set[_CopyKey] = set()
    stack = list(lp.body)
    while stack:
        ins = stack.pop()
        if isinstance(ins, Loop):
            stack.extend(ins.body)
            continue
        if isinstance(ins, Accumulate):
            continue  # XLA does not move code out of a conditional's branches
        for key, read, size in _copies(ins):
            if key in done or key in seen or key[3] is not None:
                continue
            if read.input_key is None or any(at in inside for _, at in read.slices):
                continue  # a computed value, or a cut that changes inside the loop
            if not read.slices and isinstance(key[1], tuple) and key[1][:1] != ("packed",):
                continue  # a whole input's transpose: XLA does not hoist it alone
            seen.add(key)
            out[_copy_name(read, key[1]) + f" (made before loop {lp.loop[0]}#{lp.loop[1]})"] = (
                key,
                size,
            )
    return out


_Item = tuple[str, Counter]
"""One live buffer: what it is (for messages) and its symbolic size."""


def _copy_name(read: Read, perm: tuple | str | None) -> str:
    if read.generated:
        return f"{read} (generated from the energies)"
    if isinstance(perm, tuple) and perm and perm[0] == "packed":  # see _pair_buffers
        return f"packed copy of {read}"
    if perm == "packed product":
        return f"packed product for {read}"
    what = "transposed copy" if perm is not None else "copy"
    return f"{what} of {read}"


class _Walker:
    def __init__(self, results: frozenset[int] = frozenset()) -> None:
        self.points: list[tuple[_Item, ...]] = []
        self.labels: list[str] = []
        self.results = results
        """Values that are the program's results (outputs: allocated apart by XLA)."""

    def emit(self, items: Sequence[_Item], label: str) -> None:
        self.points.append(tuple(item for item in items if item[1]))
        self.labels.append(label)

    @staticmethod
    def copies(ins: Contract | Combine, done: frozenset) -> list[_Item]:
        return [
            (_copy_name(read, key[1]), size) for key, read, size in _copies(ins) if key not in done
        ]

    def body(
        self,
        body: Sequence[Instr],
        base: list[_Item],
        keep: set[int],
        done: frozenset = frozenset(),
        held: frozenset[int] = frozenset(),
    ) -> None:
        """Points of one body run on top of ``base``.

        ``keep`` lives to the body's end; the operand copies in ``done`` were made before
        (hoisted out of a loop); the values in ``held`` are carried out of an enclosing
        loop, whose carried buffer (charged in ``base``) they are made in.
        """
        plan = plan_sums(body, keep)
        cuts = plan.cuts
        ran_at = {}  # position -> where it runs: a grouped product runs at its cut
        for k, cut in cuts.items():
            for group in cut.groups:
                ran_at.update((id(p), k) for p in group.products)
        last: dict[int, int] = {}
        for k, ins in enumerate(body):
            for v in _reads(ins):
                last[v] = max(last.get(v, -1), ran_at.get(id(ins), k))
        fused = _fused_sums(body, keep, cuts)
        for k, root in fused.items():  # operands of a fused sum live to its chain's root
            for v in _reads(body[k]):
                last[v] = max(last[v], root)
        at = {ins.value_id: k for k, ins in enumerate(body) if not isinstance(ins, Loop)}
        feeders: dict[int, list[int]] = {}  # chain root -> products the chain adds
        reusable: dict[int, set[int]] = {}  # chain root -> operands it may overwrite
        for k, ins in enumerate(body):
            if isinstance(ins, Combine):
                root = fused.get(k, k)
                for r, perm in zip(ins.operands, ins.perms, strict=True):
                    j = at.get(r.value_id) if r.input_key is None and r.scalar is None else None
                    if j is None:
                        continue
                    if isinstance(body[j], Contract) and id(body[j]) not in ran_at:
                        feeders.setdefault(root, []).append(j)
                    if perm == tuple(range(len(perm))) and not r.slices and j not in fused:
                        reusable.setdefault(root, set()).add(r.value_id)
        unpacked_in_sums = {
            k
            for k, ins in enumerate(body)
            if isinstance(ins, Contract)
            and ins.pairs is not None
            and ins.pairs.unpacks
            and ins.value_id not in keep
            and all(
                isinstance(r, Combine)
                for r in body
                if not isinstance(r, Loop) and ins.value_id in _reads(r)
            )
            and not any(isinstance(r, Loop) and ins.value_id in _reads(r) for r in body)
        }
        live: dict[int, _Item] = {}
        zeros = _shared_zeros(body)
        placed = _placement(body, set(fused) | set(cuts) | set(plan.skip), keep)
        last.update(placed.last)
        when = placed.moved
        for k in sorted(range(len(body)), key=lambda k: (when.get(k, k), k not in when)):
            ins, now = body[k], when.get(k, k)
            here = [
                *base,
                *live.values(),
                *(item for first, last, item in zeros if first <= now < last),
            ]
            if isinstance(ins, Loop):
                # a sum the loop adds into takes over its start value's buffer
                taken = {add.start for add in ins.adds} & {
                    v for v in live if last.get(v, -1) <= k and v not in keep
                }
                here = [item for item in here if all(item is not live[v] for v in taken)]
                for v in taken:
                    del live[v]
                live.update(self.loop(ins, here, done, held))
            elif isinstance(ins, Accumulate):
                start = ins.terms[0].read if starts_sum(ins.terms[0]) else None
                v = -1 if start is None else start.value_id
                rest = Accumulate(ins.value_id, ins.terms[1:], ins.dims)
                if v in live and last.get(v, -1) <= k and v not in keep | reads_of(rest):
                    # the sum starts as its first term's value, in its buffer
                    here = [item for item in here if item is not live[v]]
                    del live[v]
                live[ins.value_id] = self.accumulate(ins, here, done, held)
            elif k in fused or k in plan.skip or k in placed.unmade:
                live[ins.value_id] = (f"v{ins.value_id}", Counter())  # never materialised
            elif k in cuts:
                out = (f"v{ins.value_id}", _unless_held(ins.value_id, held, _size(ins.dims)))
                # each group's sum lives until the cut stacks them; groups are charged in
                # sum order (XLA's scheduler may find a cheaper one: up to 7% measured)
                sums = []
                for group in cuts[k].groups:
                    label = f"{len(group.products)} products like {group.products[0]} (for {ins})"
                    self.emit([*here, *sums, *_group_buffers(group)], label)
                    sums.append(_group_buffers(group)[-1])
                self.emit([*here, *sums, _stacked(cuts[k], ins), out], str(ins))
                live[ins.value_id] = out
            else:
                # a value carried out of an enclosing loop is made in the loop's buffer
                out = (f"v{ins.value_id}", _unless_held(ins.value_id, held, _size(ins.dims)))
                # an elementwise sum writes over an operand of its shape that dies here
                dying = [
                    v
                    for v in reusable.get(k, ())
                    if v in live and last.get(v) == k and v not in keep and live[v][1] == out[1]
                ]
                new = [] if dying else [out]
                if isinstance(ins, Contract) and ins.pairs is not None and ins.pairs.unpacks:
                    # the packed operand dies with the product; the unpacking then reads
                    # the packed product into the result (observed: XLA's peak is the
                    # larger of the two), or into the sums that read it, fused with them
                    *made, packed = self.copies(ins, done)
                    self.emit([*here, *made, packed], f"{ins} (packed)")
                    if k in unpacked_in_sums:
                        live[ins.value_id] = packed
                        continue
                    self.emit([*here, packed, *new], str(ins))
                else:
                    self.emit([*here, *self.copies(ins, done), *new], str(ins))
                live[ins.value_id] = out
                # XLA may run the chain's products in any order: the last one's operand
                # copies can coincide with all the others' products (packed products
                # too: spin-orbital CCSD, `a` in 4 external batches, XLA ran the
                # ladder's packed product, with its 1.3 MiB slice of g, after all the
                # others; the model then rose from 0.88 to 0.94 of XLA's figure)
                for j in feeders.get(k, ()):
                    copies = self.copies(body[j], done)
                    if j in unpacked_in_sums:  # its packed product is live here already
                        copies = copies[:-1]
                    if copies:
                        self.emit([*here, *copies, *new], f"{body[j]} (late, for {ins})")
            for v in [v for v in live if last.get(v, -1) <= k and v not in keep]:
                del live[v]

    def accumulate(
        self, ins: Accumulate, here: list[_Item], done: frozenset, held: frozenset[int]
    ) -> _Item:
        """Points of a sequenced sum: each term's body in turn, beside the accumulator."""
        acc = (f"v{ins.value_id} (sequenced sum)", _size(ins.dims))
        state = ("state of the sequenced sum", Counter({((), None): LOOP_STATE}))
        for term in ins.terms:
            computed = term.read.input_key is None and term.read.scalar is None
            keep = {term.read.value_id} if computed else set()
            if term.body:
                self.body(term.body, [*here, acc, state], keep, done, held)
            else:
                self.emit([*here, acc, state], f"{ins.value_id} += {term.read}")
        return acc

    def block_pair_operands(
        self, inner: Loop, product: Contract, here: list[_Item], done: frozenset
    ) -> list[_Item]:
        """Points of the instructions before a block-pair product, for both batches in turn.

        Returns the operands they leave for the product's parts.

        An operand made by an elementwise sum is not left: XLA fuses it into the parts
        (``τ = t2 + t1 t1`` of the closed-shell ladder; charged for both batches, the
        model was 1.15x XLA's figure on that ladder with ``a`` in 4 batches).
        """
        before = inner.body[:-1]
        made = {ins.value_id: ins for ins in before if isinstance(ins, Contract)}
        wanted = {r.value_id for r in product.operands if r.input_key is None} & made.keys()
        out: list[_Item] = []
        for batch in ("(P, Q)", "(Q, P)"):
            self.body(before, [*here, *out], set(wanted), done)
            out += [(f"v{v} (batch {batch})", _size(made[v].dims)) for v in sorted(wanted)]
        return out

    def loop(
        self, lp: Loop, here: list[_Item], done: frozenset, held: frozenset[int]
    ) -> dict[int, _Item]:
        """Points of a loop; returns the values it leaves behind with their sizes.

        A value in ``held`` is carried out of an enclosing loop too: XLA gives the carries
        of nested loops, and the value made inside, one buffer. Charged once per loop (a
        value carried out of four nested loops, four buffers), the model was 2.2x XLA's
        figure on spin-orbital CCSD with ``{"a": 2, "i": 2}`` (i=10, a=16); charged once,
        1.3x.
        """
        space, name = _var(lp.loop), f"loop {lp.loop[0]}#{lp.loop[1]}"
        hoisted = _hoisted(lp, done)
        reads = whole_input_copies(lp) if lp.copies else {}
        for key, perm in lp.copies:  # made by the program before the loop (:mod:`.copies`)
            copy = (key, perm, (), None)
            if copy not in done and (key, perm) in reads:
                label = f"transposed copy of {key} (made before {name})"
                hoisted[label] = (copy, _read_size(reads[key, perm]))
        outputs: dict[int, _Item] = {}
        for v, dims in lp.sums:
            outputs[v] = (f"v{v} (summed over {name})", _size(dims))
        for v, dims in lp.carries:
            outputs[v] = (f"v{v} (carried out of {name})", _unless_held(v, held, _size(dims)))
        for add in lp.adds:
            v = add.value_id
            outputs[v] = (f"v{v} (added into by {name})", _unless_held(v, held, _size(add.dims)))
        inner = [*here, *((n, c) for n, (_, c) in hoisted.items())]
        inner.append((f"state of {name}", Counter({((), None): LOOP_STATE})))
        after: list[_Item] = []
        for add in lp.adds if not lp.holds_loops else ():
            # the smaller last batch's piece, run after the loop (peeled): XLA makes it
            # whenever it likes, alive beside the sum
            piece = _when_uneven(_size(_piece_dims(add, lp.loop)), space)
            inner.append((f"v{add.piece} (last batch of {name})", piece))
        for v, p, dims in lp.scatters:
            whole = _size((e, None if at == lp.loop else at) for e, at in dims)
            outputs[v] = (f"v{v} (stacked batches of {name})", _unless_held(v, held, whole))
            extra = _when_uneven(_size(dims), space)  # one piece too many if uneven
            # batches of a value that an enclosing loop carries are stacked in that
            # loop's buffer, along any axis (charged apart when not along the first,
            # the model was 1.31-1.40x XLA's figure on spin-orbital CCSD with `a` and
            # `i` cut, one external loop per space)
            stacked = Counter() if v in held else whole
            inner.append((f"v{v} (stacked batches of {name})", stacked + extra))
            moved = Counter(whole) if p != 0 and v not in held else Counter()
            moved.update(_when_uneven(whole, space))  # an uneven last batch is cut off
            if v in self.results and v not in held:
                # moved into XLA's output buffer, which XLA allocates apart from its
                # temporaries and counts whole: beside the stacked pieces (charged after
                # the loop, the model was 0.68x XLA's figure on closed-shell CCSD,
                # o=21, v=93, `i` in 7 external batches around contracted `a` loops)
                inner.append((f"v{v} (output buffer, filled after {name})", moved))
            else:
                after.append((f"v{v} (moved into place after {name})", moved))
        keep = {v for v, _ in (*lp.sums, *lp.carries)} | {v for v, _, _ in lp.scatters}
        keep |= {add.piece for add in lp.adds}
        inner.extend(item for v, item in outputs.items() if v not in {w for w, _, _ in lp.scatters})
        made = done | frozenset(key for key, _ in hoisted.values())
        nest = lp.block_pair_nest
        if nest is not None:  # one loop over block pairs, no inner sums (:mod:`.block_pairs`)
            product = nest[1]
            operands = self.block_pair_operands(nest[0], product, inner, made)
            *parts, packed = self.copies(product, made)
            # the parts die with the products; the unpacking then reads the products
            # into the iteration's result (XLA fuses their sum and difference into it)
            self.emit([*inner, *operands, *parts, packed], f"{product} (parts)")
            result = (f"v{product.value_id}", _size(product.dims))
            self.emit([*inner, packed, result], str(product))
            return outputs
        # inside the loop a scattered value is one batch's piece and a summed one a
        # partial sum, made apart from the enclosing loops' buffers
        apart = {v for v, _, _ in lp.scatters} | {v for v, _ in lp.sums}
        apart |= {add.piece for add in lp.adds}
        inside = (held - apart) | {v for v, _ in lp.carries}
        results, self.results = self.results, frozenset()  # inside, pieces of a batch
        self.body(lp.body, inner, keep, made, inside)
        self.results = results
        if any(+c for _, c in after):
            self.emit([*inner, *after], f"after {name}")
        if not lp.holds_loops:  # peeled when uneven: see Loop.peel
            # the smaller last batch runs after the loop; XLA fuses the add of its
            # partial sum into the sum's reader, so the partial lives as long as the sum
            for v, dims in lp.sums:
                what, size = outputs[v]
                outputs[v] = (what, size + _when_uneven(_size(dims), space))
        return outputs


def _piece_dims(add: LoopAdd, loop: LoopId) -> tuple[tuple[int, LoopId | None], ...]:
    """The layout of one batch's piece that ``add`` adds (cut by ``loop``).

    Example:
        >>> add = LoopAdd(9, ((4, None), (3, None)), 5, 1, (((1, 0), 1.0),))
        >>> _piece_dims(add, ("a", 0))
        ((3, None), (4, ('a', 0)))
    """
    perm = add.parts[0][0]
    dims: list[tuple[int, LoopId | None]] = [(0, None)] * len(perm)
    for m, (extent, at) in enumerate(add.dims):
        dims[perm[m]] = (extent, loop if perm[m] == add.position else at)
    return tuple(dims)


def _unless_held(value: int, held: frozenset[int], size: Counter) -> Counter:
    """``size``, or nothing for a value made in an enclosing loop's carried buffer.

    Example:
        >>> _unless_held(3, frozenset({3}), Counter({((), None): 8})), _unless_held(
        ...     4, frozenset({3}), Counter({((), None): 8}))
        (Counter(), Counter({((), None): 8}))
    """
    return Counter() if value in held else size


def _elementwise(ins: Instr) -> bool:
    """Whether XLA computes ``ins`` element by element.

    A sum, or a product that sums over no mode (an outer or elementwise product is a
    multiply, not a matrix product).

    Example:
        >>> dims = ((3, None), (4, None))
        >>> _elementwise(Contract(0, "a,b->ab", (Read(0, "x"), Read(0, "y")), dims))
        True
    """
    if isinstance(ins, Combine):
        return True
    if isinstance(ins, Contract):
        operands, out = ins.spec.split("->")
        return set(operands.replace(",", "")) <= set(out)
    return False


@dataclass(frozen=True, slots=True)
class _Placement:
    """Where XLA makes the values of one body, where it differs from the written order."""

    moved: dict[int, int]
    """Position -> the position it runs just before."""
    unmade: frozenset[int]
    """Positions whose value XLA never stores: it fuses them into their readers."""
    last: dict[int, int]
    """Value -> its last reader, where that differs from the written one."""


def _placement(body: Sequence[Instr], skip: set[int], keep: set[int]) -> _Placement:
    """How XLA's fusion and scheduling move the values of ``body`` (observed on CPU).

    * A value made element by element (:func:`_elementwise`) from inputs only, directly
      or through other such values, is recomputed inside each elementwise reader that
      XLA fuses it into: it is stored only for its other readers (products, loops),
      just before the first of them, and lives to the last (closed-shell CCSD's
      ``t{a,a;i,i} + t{a;i} t{a;i}``, written at the top and read in the last loop, is
      made just before that loop). Read only by elementwise values, it is never stored.
    * A sum whose only readers copy it before a product (a transpose or a slice) is
      computed inside that copy: never stored; its operands live to the copy.
    * Any other value made from inputs only runs just before its first reader: it frees
      nothing, so the scheduler has no reason to run it earlier.

    ``skip``: positions left alone (fused or cut sums); ``keep``: values that must be
    stored (results, loop outputs).

    Example:
        >>> dims = ((3, None),)
        >>> def add(v, a, b):
        ...     return Combine(v, (1.0, 1.0), ((0,), (0,)), (a, b), dims)
        >>> x, y, z = Read(0, "x"), Read(0, "y"), Read(0, "z")
        >>> body = [Contract(0, "ab,b->a", (x, y), dims), add(1, x, z), add(2, y, z),
        ...         add(3, Read(1), Read(2)), add(4, Read(0), Read(3))]
        >>> placed = _placement(body, set(), {4})
        >>> placed.moved, sorted(placed.unmade)  # v0 waits for v4; v1, v2 fuse into v3
        ({0: 4}, [1, 2])
    """
    at = {ins.value_id: k for k, ins in enumerate(body) if not isinstance(ins, Loop)}
    readers: dict[int, list[int]] = {}
    for k, ins in enumerate(body):
        for v in _reads(ins):
            if not readers.get(v) or readers[v][-1] != k:
                readers.setdefault(v, []).append(k)
    free: set[int] = set()  # made from inputs only, directly or through such values
    cheap: set[int] = set()  # ... and element by element throughout
    for k, ins in enumerate(body):
        if isinstance(ins, Loop) or k in skip or ins.value_id in keep:
            continue
        reads = [at.get(v) for v in _reads(ins)]
        if all(j in cheap for j in reads) and _elementwise(ins):
            cheap.add(k)
        if all(j in cheap for j in reads):
            free.add(k)
    moved: dict[int, int] = {}
    unmade: set[int] = set()
    last: dict[int, int] = {}
    for k in sorted(free, reverse=True):  # readers first: where they moved to counts
        v = body[k].value_id
        hard = readers.get(v, [])
        if k in cheap:
            hard = [r for r in hard if r not in cheap]  # the others recompute it
            if not hard:
                unmade.add(k)
                continue
            last[v] = max(hard)
        if hard:
            target = moved.get(hard[0], hard[0])
            if target > k + 1:
                moved[k] = target
    for k, ins in enumerate(body):  # sums computed inside the copy before a product
        if not isinstance(ins, Combine) or k in skip or k in unmade or ins.value_id in keep:
            continue
        mine = readers.get(ins.value_id, [])
        if mine and all(_copied(body[r], ins.value_id) for r in mine):
            unmade.add(k)
            for v in _reads(ins):
                last[v] = max(last.get(v, 0), mine[-1])
    return _Placement(moved, frozenset(unmade), last)


def _copied(ins: Instr, value: int) -> bool:
    """Whether ``ins`` is a product that copies (transposes or slices) ``value`` first."""
    if not isinstance(ins, Contract):
        return False
    reads = [r for r in ins.operands if r.input_key is None and r.scalar is None]
    copied = {read.value_id for _, read, _ in _copies(ins) if read.input_key is None}
    return any(r.value_id == value for r in reads) and all(
        r.value_id in copied for r in reads if r.value_id == value
    )


def _shared_zeros(body: Sequence[Instr]) -> list[tuple[int, int, _Item]]:
    """The zero arrays that start the loops of ``body``: ``(first, last, buffer)``.

    Every loop starts its accumulators and carried values from zeros. XLA makes one
    array of zeros per shape (common subexpressions) and copies it into each loop that
    starts from that shape (a loop updates its state in place): the shared array lives
    from the first such loop until the last one starts (observed on CPU, closed-shell
    CCSD with operands hoisted out of the loops). A shape one loop alone starts from
    becomes that loop's state directly: no extra buffer.
    """
    loops: dict[tuple, list[int]] = {}
    sizes: dict[tuple, Counter] = {}
    for k, ins in enumerate(body):
        if not isinstance(ins, Loop):
            continue
        for _, dims in (*ins.sums, *ins.carries):
            shape = tuple(extent if lp is None else _var(lp) for extent, lp in dims)
            if k not in loops.setdefault(shape, []):
                loops[shape].append(k)
            sizes[shape] = _size(dims)
    return [
        (
            at[0],
            at[-1],
            (f"zeros {'x'.join(map(str, shape))} (start of {len(at)} loops)", sizes[shape]),
        )
        for shape, at in loops.items()
        if len(at) > 1
    ]


def _stacked(cut: SumCut, ins: Combine) -> _Item:
    """The terms of a cut sum (:mod:`sq_jax.lower.sums`) stacked in one array.

    A term that is transposed first is copied, but its product dies into the copy
    (the cut is its only reader): one buffer per term either way, already counted.
    """
    return (f"stacked terms of v{ins.value_id}", _times(_size(ins.dims), cut.stacked))


def _times(one: Counter, n: int) -> Counter:
    """``n`` buffers of size ``one`` stacked in one array (aligned once)."""
    stack = Counter({m: c * n for m, c in one.items()})
    stack[((), None)] -= (n - 1) * ALIGNMENT
    return stack


def _group_buffers(group: ProductGroup) -> list[_Item]:
    """A product group's stacked operands and its sum (:func:`..execute.contract_group`).

    Slices and transposes fuse into the concatenation: one buffer a side. Scaling by the
    coefficients is a separate kernel: a copy of the smaller side (observed: XLA does not
    always run it in place, and may stack the next group's operands meanwhile).
    """
    first, n = group.products[0], len(group.products)
    name = f"v{first.value_id}.."
    sides = [
        (f"stacked operand {k} of {name}", _times(_read_size(r), n))
        for k, r in enumerate(first.operands)
    ]
    scaled = (f"scaled operand {group.scaled} of {name}", sides[group.scaled][1])
    return [*sides, scaled, (f"sum of {name}", _size(first.dims))]


def _when_uneven(size: Counter, space: str) -> Counter:
    """``size`` charged only when the block of ``space`` (a model variable) is uneven.

    Uneven: the block size does not divide the extent (:func:`_var` names the variable).
    """
    return Counter({(powers, space): coef for (powers, _), coef in size.items()})


def memory_model(lowered: LoweredProgram, *, per_loop: bool = False) -> MemoryModel:
    """The symbolic memory model of an instruction tree (module docstring).

    Args:
        lowered: the instruction tree (:func:`sq_jax.lower.instructions.lower_schedule`).
        per_loop: make every loop's block a variable of its own, named ``space#slot``
            (by default only a loop with ``own_block`` is; the others share their
            space's).

    Returns:
        The model; ``model.peak()`` is the predicted XLA temporaries + outputs of this
        program, ``model.peak({space: block})`` the same for other block sizes.

    Example:
        >>> import sq_jax as sq
        >>> prog = sq.compile("E = f{i1;a1} t{a1;i1}", sq.Spaces(i=100, a=400))
        >>> model = memory_model(prog.lowered)
        >>> model.peak(), [name for name, _ in model.items_at(model.binding())]
        (320136, ['transposed copy of t{a;i}', 'v2'])
    """
    results = {
        r.read.value_id
        for r in lowered.results
        if r.read.input_key is None and r.read.scalar is None
    }
    loops = lowered.loops()
    names = {lp.loop: f"{lp.loop[0]}#{lp.loop[1]}" for lp in loops if per_loop or lp.own_block}
    token = _LOOP_NAMES.set(names)
    try:
        walker = _Walker(frozenset(results))
        walker.body(lowered.body, [], results)
    finally:
        _LOOP_NAMES.reset(token)
    final: list[_Item] = []
    seen: set[int] = set()
    for r in lowered.results:
        own = r.read.input_key is None and r.read.scalar is None
        if own and r.read.value_id not in seen:  # the value is the output buffer ...
            final.append((f"v{r.read.value_id} (result {r.name})", _read_size(r.read)))
            seen.add(r.read.value_id)
        if not own or r.coef != 1.0 or r.perm != tuple(range(len(r.perm))):
            final.append((f"result {r.name}", _read_size(r.read)))  # ... unless copied
    walker.emit(final, "results")
    extents = {names.get(lp.loop, lp.loop[0]): lp.extent for lp in loops}
    blocks = {lp.loop[0]: lp.block for lp in loops if lp.loop not in names}
    own = {names[lp.loop]: lp.block for lp in loops if lp.loop in names}
    if per_loop:
        blocks, own = own, {}
    return MemoryModel(
        tuple(walker.points),
        tuple(walker.labels),
        tuple(sorted(extents.items())),
        tuple(sorted(blocks.items())),
        tuple(sorted(own.items())),
    )
