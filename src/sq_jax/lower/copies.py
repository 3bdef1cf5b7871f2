"""Transposed copies of whole inputs, made once before the loop whose products read them.

A matrix product whose operand's modes do not group into a matrix transposes it first
(:mod:`.gemm`). Inside a loop, an input read whole (not cut to any batch) is the same
array in every batch, but its transpose is made again in every batch: XLA's
loop-invariant code motion leaves a transpose in the loop unless a moved instruction
reads it. Spin-orbital CCSD on H2O/cc-pVDZ with ``a`` in 38 external batches: the
copies took 34 ms of a 104 ms call (XLA's profile), against 4.6 ms unbatched.

:func:`hoist_input_copies` records, on each outermost loop, the transposed copies of
whole inputs its products read (:attr:`~sq_jax.lower.ir.Loop.copies`); the loop makes
them once before its first batch (:func:`sq_jax.lower.execute.run_loop`), the products
inside read them as they are, and the memory model charges them for the whole loop
(:mod:`.memory`). That costs memory where a per-batch copy was not alive, so the
lowering does it only when the plan says so (``BatchPlan(copies="hoisted")``). The
same CCSD, ``a`` in 38 and 13 external batches, one loop per space, invariant operands
hoisted: 13-14% less time, 0.5-1.1 MiB more XLA memory (of 4.8-5.9 MiB;
``bench/bench_sums.py --vary copies``). The memory-budget planner does not choose it
yet.

A computed value is treated alike at its source: a sum (:class:`~sq_jax.lower.ir.Combine`)
made outside a loop and read only by one product inside it is stored in the layout that
product wants (:func:`store_for_loop_readers`), instead of transposed whole in every
batch (spin-orbital CCSD: ``g + P(g)``, an ``o²v²`` value read by the ring term).

Example:
    >>> import sq_jax as sq
    >>> text = "R{a1,a2;i1,i2} = g{a1,i3;i1,a3} t{a3,a2;i3,i2}"
    >>> batches = {"a": {"batches": 2, "roles": "external"}}
    >>> plan = sq.BatchPlan.of(batches, external_modes="first", copies="hoisted")
    >>> print(sq.compile(text, sq.Spaces(i=2, a=4), batch=plan).lowered)
    loop a#0 extent 4 block 2 External, copies t{a,a;i,i}.T(2,0,1,3)
      v2 = gemm(abcd,debf->acef) g{a,i;i,a}[0:a#0].T(0,2,1,3) t{a,a;i,i}.T(2,0,1,3)... scatters v2@0
    result R = v2
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from .ir import Accumulate, Combine, Contract, Instr, Loop, LoweredProgram, Read, walk

__all__ = ["copy_of", "hoist_input_copies", "store_for_loop_readers", "whole_input_copies"]

CopyKey = tuple[str, tuple[int, ...]]
"""``(input key, transpose)``: one transposed copy of a whole input block."""


def copy_of(ins: Contract, k: int) -> CopyKey | None:
    """The hoistable copy operand ``k`` of ``ins`` needs, or ``None``.

    A plain matrix product (no packed pair) that transposes operand ``k``, an input
    block read whole, unmasked.

    Example:
        >>> from sq_jax.lower.gemm import plan_gemm
        >>> from sq_jax.lower.ir import Read
        >>> from sq_jax.expr.nodes import Index
        >>> a, b, c, d = (Index("a", k) for k in (1, 2, 3, 4))
        >>> plan = plan_gemm((a, b, c), (b, d), (a, c, d), (512, 128))  # b is inside x
        >>> whole = Contract(0, "abc,bd->acd", (Read(0, "x"), Read(0, "y")), (), gemm=plan)
        >>> [copy_of(whole, k) for k in (0, 1)]
        [('x', (0, 2, 1)), None]
        >>> cut = Read(0, "x", slices=((0, ("a", 0)),))  # cut to a batch: not whole
        >>> copy_of(Contract(0, "abc,bd->acd", (cut, Read(0, "y")), (), gemm=plan), 0) is None
        True
    """
    if ins.gemm is None or ins.pairs is not None:
        return None
    read, perm = ins.operands[k], ins.gemm.perms[k]
    if perm is None or read.input_key is None or read.slices or read.generated:
        return None
    if ins.gemm.relabel[k] is not None:
        return None  # read relabeled: its tangent is transposed before ``perm``
    if read.scalar is not None or any(m[0] == k for m in ins.masks):
        return None
    return read.input_key, perm


def _products(body: tuple[Instr, ...]) -> Iterator[Contract]:
    return (ins for ins in walk(body) if isinstance(ins, Contract))


def whole_input_copies(loop: Loop) -> dict[CopyKey, Read]:
    """The hoistable copies (:func:`copy_of`) the products inside ``loop`` read.

    Each with one of its reads (for its shape), in first-read order.

    Example:
        >>> import sq_jax as sq
        >>> text = "R{a1,a2;i1,i2} = g{a1,i3;i1,a3} t{a3,a2;i3,i2}"
        >>> plan = sq.BatchPlan.of({"a": {"batches": 2, "roles": "external"}},
        ...                        external_modes="first")
        >>> loop = sq.compile(text, sq.Spaces(i=2, a=4), batch=plan).lowered.body[0]
        >>> list(whole_input_copies(loop))  # t is read whole, transposed
        [('t{a,a;i,i}', (2, 0, 1, 3))]
    """
    found: dict[CopyKey, Read] = {}
    for ins in _products(loop.body):
        for k in (0, 1):
            if (key := copy_of(ins, k)) is not None:
                found.setdefault(key, ins.operands[k])
    return found


def _hoist(body: tuple[Instr, ...]) -> tuple[Instr, ...]:
    out: list[Instr] = []
    for ins in body:
        if isinstance(ins, Loop):
            ins = replace(ins, copies=tuple(whole_input_copies(ins)))
        elif isinstance(ins, Accumulate):  # a loop in a sequenced sum's term is outermost
            terms = tuple(replace(t, body=_hoist(t.body)) for t in ins.terms)
            ins = replace(ins, terms=terms)
        out.append(ins)
    return tuple(out)


def hoist_input_copies(lowered: LoweredProgram) -> LoweredProgram:
    """``lowered`` with each outermost loop making its whole inputs' copies once.

    Nested loops read the copies of the loop around them. (:mod:`.prepare` drops the
    copies of the blocks it prepares from the loops.)

    Example:
        >>> import sq_jax as sq
        >>> text = "R{a1,a2;i1,i2} = g{a1,i3;i1,a3} t{a3,a2;i3,i2}"
        >>> plan = sq.BatchPlan.of({"a": {"batches": 2, "roles": "external"}},
        ...                        external_modes="first")
        >>> lowered = sq.compile(text, sq.Spaces(i=2, a=4), batch=plan).lowered
        >>> lowered.body[0].copies, hoist_input_copies(lowered).body[0].copies
        ((), (('t{a,a;i,i}', (2, 0, 1, 3)),))
    """
    return replace(lowered, body=_hoist(lowered.body))


_Site = tuple[Instr | None, int, int]
"""A read of a computed value: the reading instruction (``None``: a result or a
sequenced sum's term), the operand, and how many loops deep it runs."""


def _sites(body: tuple[Instr, ...], depth: int, sites: dict[int, list[_Site]], made: dict) -> None:
    for ins in body:
        if isinstance(ins, Loop):
            _sites(ins.body, depth + 1, sites, made)
            continue
        if isinstance(ins, Accumulate):
            for term in ins.terms:
                _sites(term.body, depth, sites, made)
                sites.setdefault(term.read.value_id, []).append((None, 0, depth))
            continue
        made[ins.value_id] = (ins, depth)
        for k, read in enumerate(ins.operands):
            if read.input_key is None and read.scalar is None:
                sites.setdefault(read.value_id, []).append((ins, k, depth))


def _relayout(ins: Instr, moved: dict[int, tuple[int, ...]]) -> Instr:
    """``ins`` with the sums in ``moved`` stored transposed, and their reader adjusted."""
    if isinstance(ins, Combine) and ins.value_id in moved:
        q = moved[ins.value_id]
        perms = tuple(tuple(p[j] for j in q) for p in ins.perms)
        dims = tuple(ins.dims[j] for j in q)
        return replace(ins, perms=perms, dims=dims, axes=tuple(ins.axes[j] for j in q))
    if not isinstance(ins, Contract) or ins.gemm is None:
        return ins
    reads, perms = list(ins.operands), list(ins.gemm.perms)
    letters = ins.spec.split("->")[0].split(",")
    for k, read in enumerate(reads):
        q = moved.get(read.value_id) if read.input_key is None else None
        if q is None or perms[k] != q:
            continue
        axes = None if read.axes is None else tuple(read.axes[j] for j in q)
        reads[k] = replace(read, dims=tuple(read.dims[j] for j in q), axes=axes)
        letters[k] = "".join(letters[k][j] for j in q)
        perms[k] = None
    spec = ",".join(letters) + "->" + ins.spec.split("->")[1]
    gemm = replace(ins.gemm, perms=tuple(perms))
    return replace(ins, operands=tuple(reads), spec=spec, gemm=gemm)


def _rebuild(body: tuple[Instr, ...], moved: dict[int, tuple[int, ...]]) -> tuple[Instr, ...]:
    out: list[Instr] = []
    for ins in body:
        if isinstance(ins, Loop):
            ins = replace(ins, body=_rebuild(ins.body, moved))
        elif isinstance(ins, Accumulate):
            terms = tuple(replace(t, body=_rebuild(t.body, moved)) for t in ins.terms)
            ins = replace(ins, terms=terms)
        else:
            ins = _relayout(ins, moved)
        out.append(ins)
    return tuple(out)


def store_for_loop_readers(lowered: LoweredProgram) -> LoweredProgram:
    """``lowered`` with each sum read by one product in a deeper loop stored as it reads it.

    The sum's only reader must be a plain matrix product (no packed pair) that reads it
    whole, unmasked, transposed: the sum is then made in that order (XLA's elementwise
    kernel writes any order) and the product reads it as it is.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.cc.equations import load_equations
        >>> plan = sq.BatchPlan.of({"a": {"batches": 3, "roles": "external"}},
        ...                        external_modes="first", hoist="invariant")
        >>> prog = sq.compile(load_equations("ccsd_so"), sq.Spaces(i=4, a=6),
        ...                   pair_symmetry=True, batch=plan)
        >>> print(next(i for i in prog.lowered.body if "g{i,i;a,a}.P" in str(i)))  # g + P(g)
        v126 = 1*g{i,i;a,a}.P(0, 2, 1, 3) + 1*g{i,i;a,a}.P(1, 3, 0, 2)
    """
    sites: dict[int, list[_Site]] = {}
    made: dict[int, tuple[Instr, int]] = {}
    _sites(lowered.body, 0, sites, made)
    for result in lowered.results:
        sites.setdefault(result.read.value_id, []).append((None, 0, 0))
    moved: dict[int, tuple[int, ...]] = {}
    for v, (ins, depth) in made.items():
        if not isinstance(ins, Combine) or len(sites.get(v, ())) != 1:
            continue
        reader, k, at = sites[v][0]
        if not isinstance(reader, Contract) or reader.gemm is None or reader.pairs is not None:
            continue
        read, perm = reader.operands[k], reader.gemm.perms[k]
        if at <= depth or perm is None or read.slices or any(m[0] == k for m in reader.masks):
            continue
        if reader.gemm.relabel[k] is not None:
            continue  # read relabeled: its tangent is transposed before ``perm``
        if reader.operands[1 - k].value_id == v and reader.operands[1 - k].input_key is None:
            continue  # read twice by one product
        moved[v] = perm
    if not moved:
        return lowered
    return replace(lowered, body=_rebuild(lowered.body, moved))
