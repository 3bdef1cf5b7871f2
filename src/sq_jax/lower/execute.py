"""Running instructions inside a JAX trace: the pieces the interpreter and shard share.

:func:`run_body` runs a body of instructions in order; a :class:`~sq_jax.lower.ir.Loop`
becomes one ``lax.fori_loop`` or ``lax.scan`` (:func:`run_loop`). Operands are cut to
the current batch on use (:func:`read_operand`); stacked per-batch pieces are moved into
their full mode by :func:`merge_batches`. :mod:`sq_jax.lower.interpret` runs a whole
program on one device with these, :mod:`sq_jax.lower.shard` runs root loops over a
device mesh. Each instruction runs in ``jax.named_scope(f"v{value_id}")`` and each loop
in ``jax.named_scope(f"loop_{space}{slot}")``: XLA's operations carry the value they make
and the loops around it in their ``op_name`` (``.../loop_a0/while/body/v73/dot_general``),
so a ``jax.profiler`` trace or an XLA dump says which value of ``prog.lowered`` each one
belongs to (and a loop's own work, its adds and stacked pieces, to the loop).

Example:
    >>> import jax.numpy as jnp
    >>> merge_batches(jnp.ones((3, 2, 4)), 0).shape  # 3 batches of 2 along mode 0
    (6, 4)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_derivatives import SymbolicZero

from ..forest.denominators import build_denominator, denominator_slots, energy_key
from ..forest.reference import scalar_value
from ..schedule.ir import LoopId
from .accumulate import produced, starts_sum
from .block_pairs import block_pair_product
from .copies import copy_of
from .gemm import GemmPlan
from .ir import Accumulate, Combine, Contract, Instr, Loop, LoopAdd, Read, Term, walk
from .pairs import contract_pairs
from .sums import ProductGroup, SumCut, plan_sums

__all__ = [
    "Ctx",
    "RunSettings",
    "block_shape",
    "contract",
    "contract_group",
    "dependent_zeros",
    "largest_loop",
    "loop_done",
    "merge_batches",
    "outside_reads",
    "read_operand",
    "run_body",
    "run_loop",
]

Ctx = Mapping[LoopId, tuple[Any, int, Any]]
"""Active loops: loop instance -> (start of the current batch, its static size, first
valid element or ``None``). In an overlapping last batch, elements before the first
valid one were covered by the previous batch."""


def block_shape(dims: tuple[tuple[int, LoopId | None], ...], ctx: Ctx) -> tuple[int, ...]:
    """The shape of a stored value in the current batches: a sliced mode has its block size."""
    return tuple(extent if lp is None else ctx[lp][1] for extent, lp in dims)


def read_operand(
    read: Read, env: Mapping[int, Any], ctx: Ctx, blocks: Mapping[str, Any], dtype: Any
) -> Any:
    """The operand, cut on use: ``x[..., start:start+size, ...]`` along each sliced mode.

    A generated denominator (``Δ``, :mod:`sq_jax.forest.denominators`) is built here, for
    the current batch only, from slices of the orbital-energy vectors.
    """
    if read.scalar is not None:
        return jnp.asarray(scalar_value(jnp, read.scalar.scalar, blocks), dtype=dtype)
    if read.generated:
        cuts = {p: ctx[lp][:2] for p, lp in read.slices}
        return build_denominator(jnp, read.input_key, blocks, cuts, dtype)
    x = blocks[read.input_key] if read.input_key is not None else env[read.value_id]
    if not read.slices:
        return x
    starts: list[Any] = [0] * x.ndim
    sizes = list(x.shape)
    for p, lp in read.slices:
        starts[p], sizes[p], _ = ctx[lp]
    # one dynamic_slice for all cut modes; starts are never negative
    return lax.dynamic_slice(x, starts, sizes, allow_negative_indices=False)


@dataclass(frozen=True, slots=True)
class RunSettings:
    """What stays the same while one program's instructions run, loop after loop.

    Example:
        >>> import jax.numpy as jnp
        >>> RunSettings({}, jnp.float64).read is read_operand
        True
    """

    blocks: Mapping[str, Any]
    """The input blocks by key, already cast to ``dtype``."""
    dtype: Any
    """The dtype of every computed value."""
    remat: bool = False
    """Checkpoint each loop's batch (recompute it on the backward pass)."""
    vary: Callable[[Any], Any] | None = None
    """Outside ``shard_map``: ``None``. Inside: retypes a loop carry as varying across
    the mesh axis, so nested loops type-check in :mod:`sq_jax.lower.shard`."""
    read: Callable[..., Any] = read_operand
    """How operands are cut (:func:`read_operand`); :mod:`sq_jax.lower.shard` replaces it
    to read a device's local shard of a sharded input."""
    copies: Mapping[tuple[str, tuple[int, ...]], Any] = dataclasses.field(default_factory=dict)
    """Transposed copies of whole inputs made before the loop running now
    (:attr:`~sq_jax.lower.ir.Loop.copies`), by ``(input key, transpose)``."""
    after: Any = None
    """An integer zero made from a loop that ran before (:func:`loop_done`): the loops
    run from now on start from it, so XLA runs them after that one; ``None``: none."""


def plus(x: Any, y: Any) -> Any:
    """``x + y`` as one ``lax.add`` where the arrays match (else NumPy's rules).

    Why not ``+``: ``jnp``'s operators are small jitted functions, and ``jax.vjp``
    linearizes each one as a call of its own. The reverse pass of a rematerialized
    program (:mod:`..reverse`) differentiates every run of instructions that way; in W4
    the operators' linearizations took more trace time than the rest of those runs.

    Example:
        >>> import numpy as np
        >>> plus(np.ones(2), np.ones(2)).tolist()
        [2.0, 2.0]
    """
    if jnp.shape(x) == jnp.shape(y) and jnp.result_type(x) == jnp.result_type(y):
        return lax.add(x, y)
    return x + y


def scaled(c: float, x: Any) -> Any:
    """``c * x`` for a Python number ``c``, as one ``lax.mul`` (see :func:`plus`).

    The number takes ``x``'s dtype (a complex or single-precision ``x`` keeps its own).

    Example:
        >>> import numpy as np
        >>> scaled(0.5, np.ones(2)).tolist(), scaled(1.0, np.ones(2)).tolist()
        ([0.5, 0.5], [1.0, 1.0])
        >>> scaled(-1.0, np.ones(1, np.complex64)).dtype
        dtype('complex64')
    """
    if c == 1.0:
        return x
    dtype = jnp.result_type(x)
    if not jnp.issubdtype(dtype, jnp.inexact):
        return c * x
    return lax.mul(x, lax.convert_element_type(c, dtype))


def _mask(x: Any, position: int, size: int, valid_from: Any) -> Any:
    """Zero the elements ``x[..., j, ...]`` with ``j < valid_from`` along ``position``."""
    keep = lax.broadcasted_iota(jnp.int32, x.shape, position) >= valid_from
    return lax.select(keep, x, lax.full_like(x, 0))


def _matrices(plan: GemmPlan, ops: list[Any]) -> tuple[Any, Any, tuple[int, ...]]:
    """The left and right matrices (2-D, or 3-D with the batch) of a planned product.

    Returns them and the shape the product comes out in (batch, left free, right free).
    """
    ops = [plan.transpose(k, x) for k, x in enumerate(ops)]
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
    return lhs, rhs, batch + lfree + rfree


def _matmul(plan: GemmPlan, lhs: Any, rhs: Any) -> Any:
    """``dot_general`` of the matrices of :func:`_matrices` over their contracted axis."""
    lead = 1 if plan.groups[0] else 0
    lc = lead + (0 if plan.lhs_k_first else 1)
    rc = lead + (0 if plan.rhs_k_first else 1)
    dims = (((lc,), (rc,)), ((0,), (0,)) if lead else ((), ()))
    return lax.dot_general(lhs, rhs, dims, precision=lax.Precision.HIGHEST)


def contract(ins: Contract, ops: list[Any], ready: tuple[Any, Any] = (None, None)) -> Any:
    """One contraction: ``dot_general`` on grouped 2-D/3-D views (:mod:`..gemm`).

    Without a gemm plan (a mode twice on one operand) it runs as ``einsum``. A packed
    product takes, in ``ready``, operands already made ready once
    (:attr:`~sq_jax.lower.ir.Contract.ready`, :mod:`..prepare`).

    Example:
        >>> import numpy as np
        >>> from sq_jax.lower.ir import Read
        >>> ins = Contract(0, "ab,bc->ac", (Read(1), Read(2)), ())
        >>> contract(ins, [np.eye(2), np.ones((2, 3))]).tolist()
        [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """
    if ins.pairs is not None:

        def plain(x: Any, y: Any) -> Any:
            return jnp.einsum(ins.spec, x, y, precision=lax.Precision.HIGHEST)

        return contract_pairs(ins.pairs, ops, _product, plain, ready)
    plan = ins.gemm
    if plan is None:
        return jnp.einsum(ins.spec, *ops, precision=lax.Precision.HIGHEST)
    return _product(plan, *ops)


def _product(plan: GemmPlan, x: Any, y: Any) -> Any:
    """The product of two operands as ``plan`` says, in its output order."""
    lhs, rhs, shape = _matrices(plan, [x, y])
    out = _matmul(plan, lhs, rhs).reshape(shape)
    return out if plan.sign > 0 else -out


def contract_group(plan: GemmPlan, coefs: Any, operands: list[list[Any]], scaled: int = 0) -> Any:
    """``sum_g coefs[g] * product_g`` of products that share ``plan`` and their shapes.

    One ``dot_general``: each side's operands are concatenated along their first
    contracted mode, so the products' sum is one product over ``G * K`` contracted
    elements (the coefficients scale operand ``scaled``'s matrix along it: a copy, so
    the smaller one). One concatenation per side, whatever ``G``: tracing and XLA's
    kernels stay few.

    Example:
        >>> import numpy as np
        >>> from sq_jax.lower.gemm import plan_gemm
        >>> from sq_jax.expr.nodes import Index
        >>> a, b, c = Index("a", 1), Index("a", 2), Index("a", 3)
        >>> plan = plan_gemm((a, b), (b, c), (a, c), (8, 8))
        >>> x, y = np.arange(4.0).reshape(2, 2), np.ones((2, 2))
        >>> contract_group(plan, np.array([1.0, -2.0]), [[x, y], [y, x]]).tolist()  # xy - 2 yx
        [[-3.0, -7.0], [1.0, -3.0]]
    """
    nb, nfl, nk, nfr = plan.groups
    assert nk > 0, "products without a contracted mode are not grouped"
    stacked: list[Any] = [None, None]
    for caller in (0, 1):
        is_lhs = caller == (1 if plan.swap else 0)
        k_first = plan.lhs_k_first if is_lhs else plan.rhs_k_first
        first_k = nb + (0 if k_first else (nfl if is_lhs else nfr))
        xs = [plan.transpose(caller, ops[caller]) for ops in operands]
        stacked[caller] = jnp.concatenate(xs, axis=first_k)
    sides = list(_matrices(dataclasses.replace(plan, perms=(None, None)), stacked))
    side, k_first = (0, plan.lhs_k_first) if scaled == plan.swap else (1, plan.rhs_k_first)
    x = sides[side]
    scale = jnp.repeat(jnp.asarray(coefs, x.dtype), x.shape[-2 if k_first else -1] // len(operands))
    sides[side] = x * (scale[:, None] if k_first else scale)
    return _matmul(plan, sides[0], sides[1]).reshape(sides[2])


def _operands(ins: Contract, env: Mapping[int, Any], ctx: Ctx, run: RunSettings) -> list[Any]:
    """A product's operands cut to the current batches, masked where batches overlap."""
    ops = [run.read(r, env, ctx, run.blocks, run.dtype) for r in ins.operands]
    for k, p, lp in ins.masks:
        _, size, valid_from = ctx[lp]
        if valid_from is not None:
            ops[k] = _mask(ops[k], p, size, valid_from)
    return ops


def _with_copies(ins: Contract, ops: list[Any], run: RunSettings) -> tuple[Contract, list[Any]]:
    """``ins`` reading the copies made before its loop in place of transposing again."""
    if not run.copies:
        return ins, ops
    perms = list(ins.gemm.perms) if ins.gemm is not None else []
    for k in range(len(perms)):
        key = copy_of(ins, k)
        if key is not None and key in run.copies:
            ops[k], perms[k] = run.copies[key], None
    if ins.gemm is None or tuple(perms) == ins.gemm.perms:
        return ins, ops
    return dataclasses.replace(ins, gemm=dataclasses.replace(ins.gemm, perms=tuple(perms))), ops


def outside_reads(body: Sequence[Instr]) -> tuple[Read, ...]:
    """What ``body`` (nested bodies included) reads of values and inputs made before it.

    One read per value, input block or scalar, slices dropped, in order of first read.

    Example:
        >>> from sq_jax.lower.ir import Contract
        >>> body = (Contract(2, "a,a->a", (Read(0), Read(1, "x")), ((2, None),)),
        ...         Contract(3, "a,a->a", (Read(2), Read(1, "x")), ((2, None),)))
        >>> [str(r) for r in outside_reads(body)]
        ['v0', 'x']
    """
    made = {v for ins in walk(body) if not isinstance(ins, Term) for v in produced(ins)}
    out: dict[object, Read] = {}
    for ins in walk(body):
        if isinstance(ins, Term):
            reads: tuple[Read, ...] = (ins.read,)
        elif isinstance(ins, (Contract, Combine)):
            reads = ins.operands
        elif isinstance(ins, Loop):
            reads = tuple(Read(add.start) for add in ins.adds if add.start is not None)
        else:
            continue
        for r in reads:
            if r.input_key is None and r.scalar is None and r.value_id in made:
                continue
            key = r.input_key or r.scalar or r.value_id
            out.setdefault(key, dataclasses.replace(r, slices=()))
    return tuple(out.values())


def _nest_reads(body: Sequence[Instr], memo: dict[str, object] | None = None) -> tuple[Read, ...]:
    """:func:`outside_reads` of a body that holds loops; none for one that does not.

    A loop with no loop inside costs one more trace of its body when its fixpoint takes
    a second pass, which is cheaper than the reads :func:`dependent_zeros` adds.
    """
    known = None if memo is None else memo.get("nest_reads")
    if known is None:
        nested = any(isinstance(ins, Loop) for ins in walk(body))
        known = outside_reads(body) if nested else ()
        if memo is not None:
            memo["nest_reads"] = known
    return known  # type: ignore[return-value]


def dependent_zeros(
    shapes: Sequence[tuple[int, ...]],
    reads: Sequence[Read],
    env: Mapping[int, Any],
    ctx: Ctx,
    run: RunSettings,
) -> list[Any]:
    """Zero arrays that JAX's autodiff sees as depending on what ``reads`` read.

    Why: JAX differentiates a loop by finding, with a fixpoint, which of its carries
    depend on the inputs being differentiated. An accumulator that starts as a constant
    zero is found dependent only after one pass, so the loop body is traced again; in a
    nest every level doubles what the levels inside cost (a batched CCSD gradient with
    loops ten deep took 90 s to trace). Zeros that already depend on everything the
    loop body reads make every such fixpoint stop after one pass.

    In a rematerialized program (``run.remat``) they also depend on the batches of the
    loops around (``ctx``), which does the same for the partial evaluation that moves
    loop-invariant work out of an enclosing loop (the 90 s became 6.5 s, with 4% more
    XLA temp). Without remat that would keep such work, and its residuals, in the loop
    (that gradient's temp grew 15-fold).

    Their value is exactly zero: ``select`` with a false predicate, which XLA folds
    away, so the program runs as with plain zeros. With no ``reads``, or inside
    ``shard_map`` (``run.vary``), plain zeros are returned.

    Example:
        >>> import jax.numpy as jnp
        >>> run = RunSettings({"x": jnp.ones((2, 3))}, jnp.float64)
        >>> [z.tolist() for z in dependent_zeros([(2,)], [Read(0, "x")], {}, {}, run)]
        [[0.0, 0.0]]
    """
    parts = []
    if run.vary is None and reads:
        for start, _, valid_from in ctx.values() if run.remat else ():
            parts += [i.astype(run.dtype) for i in (start, valid_from) if isinstance(i, jax.Array)]
        for r in reads:
            if r.scalar is not None:
                parts.append(run.read(r, env, {}, run.blocks, run.dtype))
                continue
            if r.generated:
                slots = denominator_slots(r.input_key)
                arrays = [run.blocks[energy_key(space)] for space, _ in slots]
            else:
                arrays = [run.blocks[r.input_key] if r.input_key is not None else env[r.value_id]]
            for x in arrays:
                if x.size:
                    first = lax.slice(x, (0,) * x.ndim, (1,) * x.ndim).reshape(())
                    parts.append(first.astype(run.dtype))
    if not parts:
        return [jnp.zeros(shape, run.dtype) for shape in shapes]
    depends = functools.reduce(operator.add, parts)
    zero = lax.select(jnp.zeros((), bool), depends, jnp.zeros((), run.dtype))
    return [jnp.broadcast_to(zero, shape) for shape in shapes]


def run_body(
    body: tuple[Instr, ...],
    env: dict[int, Any],
    ctx: Ctx,
    run: RunSettings,
    keep: Collection[int] = (),
    after_largest: bool = False,
) -> None:
    """Run ``body`` in order, storing each produced value in ``env``.

    ``keep``: values read after the body (loop escapes, results); the cuts of long sums
    (:mod:`..sums`) never replace them. ``after_largest``: the loops written after the
    loop that makes the largest value (:func:`largest_loop`) start after it
    (:func:`loop_done`), as the memory model (:mod:`sq_jax.lower.memory`) walks them.
    """
    plan = plan_sums(body, keep)
    largest = largest_loop(body) if after_largest else None
    # a nest over block pairs that makes the largest value (a hoisted ladder, built whole)
    # also starts after the loops written before it, as the memory model walks them:
    # left free, XLA ran the loop of R1 after R2's, holding an o²v² value through it
    # (closed-shell CCSD, hoist="pairs": 1.27x the prediction). The rule for every
    # largest loop held more on spin-orbital CCSD's W3 plan (4.9 against 4.1 MB).
    nest = body[largest] if largest is not None else None
    paired = isinstance(nest, Loop) and nest.block_pair_nest is not None
    before = None  # loop_done of the loops written before it
    for k, ins in enumerate(body):
        if k in plan.skip:
            continue
        if k in plan.cuts:
            env[ins.value_id] = _sum_cut(plan.cuts[k], env, ctx, run)
        elif isinstance(ins, Contract):
            with jax.named_scope(f"v{ins.value_id}"):
                ready = tuple(None if key is None else run.blocks[key] for key in ins.ready)
                ops = _operands(ins, env, ctx, run)
                env[ins.value_id] = contract(*_with_copies(ins, ops, run), ready)
        elif isinstance(ins, Accumulate):
            with jax.named_scope(f"v{ins.value_id}"):
                env[ins.value_id] = _accumulate(ins, env, ctx, run)
        elif isinstance(ins, Combine):
            with jax.named_scope(f"v{ins.value_id}"):
                terms = []
                ops = [run.read(r, env, ctx, run.blocks, run.dtype) for r in ins.operands]
                for x, perm, c in zip(ops, ins.perms, ins.coefs, strict=True):
                    x = jnp.transpose(x, perm) if perm != tuple(range(len(perm))) else x
                    terms.append(scaled(c, x))
                env[ins.value_id] = plus(terms[0], terms[1])
        else:
            first = k == largest and before is not None
            with jax.named_scope(f"loop_{ins.loop[0]}{ins.loop[1]}"):
                out = run_loop(
                    ins, env, ctx, dataclasses.replace(run, after=before) if first else run
                )
            env.update(out)
            if out and paired and largest is not None and k < largest:
                done = loop_done(out)
                before = done if before is None else before + done
            if out and k == largest:
                run = dataclasses.replace(run, after=loop_done(out))


def largest_loop(body: Sequence[Instr]) -> int | None:
    """Position of the loop of ``body`` that makes the largest value (at block sizes).

    Example:
        >>> import sq_jax as sq
        >>> text = "R{a1;i1} = f{a1;a2} t{a2;i1} + g{a1,a2;i1,i2} t{a2;i2}"
        >>> plan = {"a": {"batches": 2, "roles": "contracted"}}
        >>> body = sq.compile(text, sq.Spaces(i=4, a=8), batch=plan).lowered.body
        >>> [type(ins).__name__ for ins in body], largest_loop(body)  # a tie: the first
        (['Loop', 'Loop', 'Combine'], 0)
    """
    best, at = 0, None
    for k, ins in enumerate(body):
        if not isinstance(ins, Loop):
            continue
        blocks = {ins.loop: ins.block}
        blocks.update((i.loop, i.block) for i in walk(ins.body) if isinstance(i, Loop))
        size = max(
            (
                math.prod(e if lp is None else blocks.get(lp, e) for e, lp in i.dims)
                for i in walk(ins.body)
                if isinstance(i, (Contract, Combine))
            ),
            default=0,
        )
        if size > best:
            best, at = size, k
    return at


def loop_done(outputs: Mapping[int, Any]) -> Any:
    """An integer zero that depends on a loop's outputs, which XLA cannot fold away.

    Why: XLA's scheduler moves a loop to wherever its inputs are ready; it does not see
    the memory a loop holds inside. On closed-shell DF-CCSD (benzene/cc-pVTZ sizes, ``a``
    in 4 contracted batches) it ran the loops written after the ladder's loop, which
    makes the largest values, before it, so every term of R2 waited through the ladder:
    XLA's temporaries + outputs were 6.37 GiB. Loops that start from this zero (their
    accumulators and their batch numbers) run after this one: 3.94 GiB. (Every loop
    after the one before it: 4.22 GiB, but spin-orbital CCSD's W3 plan at 1/4 of its
    memory went from 3.9 to 5.5 MiB, where XLA's own order was the better one.) An
    optimization barrier does not hold on CPU: XLA removed it, and the loop read its
    inputs directly.

    ``min(x != x, 0)`` of the first and the last element of the first output: zero for
    any value, NaN included, but only known once the loop has run. The last element too:
    a loop whose smaller last batch runs after it (``Loop.peel``, a second trace of its
    body) puts that batch's piece of a scattered result at its end, and the loops after
    it must wait for that batch as well (XLA ran such a batch of ``R1`` last, holding an
    ``o²v²`` operand through the whole program: closed-shell CCSD, benzene/cc-pVDZ sizes,
    212 MB against 170 MB).

    Example:
        >>> import jax.numpy as jnp
        >>> int(loop_done({3: jnp.array([jnp.nan, 1.0])}))
        0
    """
    x = next(iter(outputs.values()))
    first = lax.slice(x, (0,) * x.ndim, (1,) * x.ndim).reshape(())
    last = lax.slice(x, tuple(max(n - 1, 0) for n in x.shape), x.shape).reshape(())
    return jnp.minimum((first != first).astype(jnp.int32) + (last != last), 0)


def _accumulate(ins: Accumulate, env: Mapping[int, Any], ctx: Ctx, run: RunSettings) -> Any:
    """A sequenced sum (:mod:`..accumulate`), one term at a time.

    One ``lax.switch`` branch per term, run in turn by a ``lax.fori_loop``: XLA cannot
    fuse the adds across the loop, so it makes one term at a time.
    """
    if all(not t.body for t in ins.terms):
        return _read_only_sum(ins, env, ctx, run)
    first, terms = ins.terms[0], ins.terms
    start = None
    if starts_sum(first):  # a previous part of a chain: the accumulator starts as it
        start, terms = run.read(first.read, env, ctx, run.blocks, run.dtype), terms[1:]

    def branch(term: Term) -> Callable[[Any], Any]:
        def add(acc: Any) -> Any:
            local = dict(env)
            keep = (term.read.value_id,) if term.read.input_key is None else ()
            run_body(term.body, local, ctx, run, keep)
            x = run.read(term.read, local, ctx, run.blocks, run.dtype)
            return plus(acc, _term_value(term, x))

        return add

    branches = [branch(t) for t in terms]
    if start is not None:
        acc = start
    else:
        (acc,) = dependent_zeros([block_shape(ins.dims, ctx)], _nest_reads((ins,)), env, ctx, run)
    if run.vary is not None:
        acc = run.vary(acc)
    return lax.fori_loop(0, len(branches), lambda k, a: lax.switch(k, branches, a), acc)


def _term_value(term: Term, x: Any) -> Any:
    """``term.coef * T(x)``: a sequenced sum's term, read, in the sum's mode order."""
    x = x if term.perm == tuple(range(len(term.perm))) else jnp.transpose(x, term.perm)
    return scaled(term.coef, x)


def _read_only_sum(ins: Accumulate, env: Mapping[int, Any], ctx: Ctx, run: RunSettings) -> Any:
    """A sequenced sum whose terms only read values made before it (``Σ_π ±π(Y)``).

    The primal runs term by term, as :func:`_accumulate`; its derivative is the plain
    sum of the permuted tangents (a custom JVP): differentiated through the loop, the
    reverse pass would carry a cotangent of every value read through it (W4's
    gradient with remat held 3.18 MiB against 2.70 fused).
    """
    # one operand per distinct read: a value read under two cuts (hoisted, read sliced
    # by two labelings inside a loop) is two operands
    reads = list(dict.fromkeys(t.read for t in ins.terms))
    where = [reads.index(t.read) for t in ins.terms]
    values = [run.read(r, env, ctx, run.blocks, run.dtype) for r in reads]

    def term(k: int, x: Any) -> Any:
        return _term_value(ins.terms[k], x)

    @jax.custom_jvp
    def total(*xs: Any) -> Any:
        # the first term starts the sum: a chain's previous part (read as is) then
        # becomes the accumulator, with no zeros and no extra pass
        rest = [
            (lambda acc, k=k: plus(acc, term(k, xs[where[k]]))) for k in range(1, len(ins.terms))
        ]
        acc = term(0, xs[where[0]])
        if run.vary is not None:
            acc = run.vary(acc)
        if len(rest) <= 1:  # a chain's first part may read one value once
            return rest[0](acc) if rest else acc
        return lax.fori_loop(0, len(rest), lambda k, a: lax.switch(k, rest, a), acc)

    def tangent(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
        out = total(*primals)
        parts = [
            term(k, tangents[where[k]])
            for k in range(len(ins.terms))
            if not isinstance(tangents[where[k]], SymbolicZero)
        ]
        if not parts:
            return out, jnp.zeros_like(out)
        return out, functools.reduce(plus, parts)

    total.defjvp(tangent, symbolic_zeros=True)
    return total(*values)


def _group_sum(group: ProductGroup, env: Mapping[int, Any], ctx: Ctx, run: RunSettings) -> Any:
    """A group of products (:class:`..sums.ProductGroup`) summed, in the sum's mode order."""
    plan = group.products[0].gemm
    assert plan is not None
    coefs = jnp.asarray(group.coefs, run.dtype) * plan.sign  # the group shares its plan
    ops = [_operands(ins, env, ctx, run) for ins in group.products]
    x = contract_group(plan, coefs, ops, group.scaled)
    return x if group.perm == tuple(range(len(group.perm))) else jnp.transpose(x, group.perm)


def _sum_cut(cut: SumCut, env: Mapping[int, Any], ctx: Ctx, run: RunSettings) -> Any:
    """A cut of a long sum (:mod:`..sums`): its terms stacked, times their coefficients.

    Each group of products is first one contraction (:func:`contract_group`). The final
    matrix-vector product keeps XLA from fusing the whole chain of adds into one.
    """
    xs = []
    for t in cut.rest:
        x = run.read(t.read, env, ctx, run.blocks, run.dtype)
        xs.append(x if t.perm == tuple(range(len(t.perm))) else jnp.transpose(x, t.perm))
    xs += [_group_sum(g, env, ctx, run) for g in cut.groups]
    coefs = jnp.asarray([t.coef for t in cut.rest] + [1.0] * len(cut.groups), run.dtype)
    stacked = jnp.stack(xs)
    return lax.dot_general(
        coefs, stacked, (((0,), (0,)), ((), ())), precision=lax.Precision.HIGHEST
    )


def merge_batches(stacked: Any, position: int) -> Any:
    """``(n, ..., b@position, ...)`` -> ``(..., n*b@position, ...)``: batches in order."""
    moved = jnp.moveaxis(stacked, 0, position)
    shape = moved.shape
    merged = (shape[position] * shape[position + 1],)
    return moved.reshape(shape[:position] + merged + shape[position + 2 :])


def run_loop(loop: Loop, env: Mapping[int, Any], ctx: Ctx, run: RunSettings) -> dict[int, Any]:
    """One scope block: a loop over the batches of ``loop.loop``.

    Equivalent to::

        acc = {v: 0 for v in sums}; pieces = {v: [] for v in scatters}
        added = {add: env[add.start] if add.start else 0 for add in adds}
        for start in range(0, extent, block):
            size = min(block, extent - start)
            local = run(body, batch=(start, size))      # operands cut on use
            for v in sums: acc[v] += local[v]
            for v, p in scatters: pieces[v].append(local[v])
            for add in adds:                            # at each permuted place
                for perm, c in add.parts:
                    added[add][slab(perm, start, size)] += c * transpose(local[add.piece], perm)
        return acc | {v: concatenate(pieces[v], axis=p) for v, p in scatters} | added

    Batches run in one ``lax.fori_loop`` (``lax.scan`` when there are scatters). When
    ``block`` does not divide ``extent``, either the smaller last batch is a second trace
    of the body (``loop.peel``: a loop with no nested loop), or the last batch keeps the
    full size and starts at ``extent - block``, overlapping the previous one: summed
    overlap is masked to zero, scattered overlap dropped. Values in ``carries`` are
    invariant to the loop: the last batch's copy is kept.

    The outer loop of a nest marked for block pairs (:attr:`Loop.block_pair_nest`) runs
    :func:`_run_block_pairs` instead.
    """
    nest = loop.block_pair_nest
    if nest is not None:
        return _run_block_pairs(loop, *nest, env, ctx, run)
    made = {
        key: jnp.transpose(run.read(Read(0, key[0]), env, ctx, run.blocks, run.dtype), key[1])
        for key in loop.copies
        if key not in run.copies
    }
    if made:
        run = dataclasses.replace(run, copies={**run.copies, **made})
    sums = [v for v, _ in loop.sums]
    scatters = [(v, p) for v, p, _ in loop.scatters]
    carries = [v for v, _ in loop.carries]
    keep = {*sums, *carries, *(v for v, _ in scatters), *(add.piece for add in loop.adds)}
    block, extent = loop.block, loop.extent

    def batch(
        start: Any, valid_from: Any, size: int, added: tuple[Any, ...] = ()
    ) -> tuple[tuple[Any, ...], ...]:
        local = dict(env)
        inner = {**ctx, loop.loop: (start, size, valid_from)}
        run_body(loop.body, local, inner, run, keep)
        outs = (
            tuple(local[v] for v in sums),
            tuple(local[v] for v in carries),
            tuple(local[v] for v, _ in scatters),
            tuple(
                _add_piece(add, acc, local[add.piece], start, valid_from)
                for add, acc in zip(loop.adds, added, strict=True)
            ),
        )
        return outs if run.vary is None else jax.tree.map(run.vary, outs)

    checked = peeled = batch
    if run.remat:
        # Inside the loop the recomputation runs in the backward loop's body, where XLA
        # cannot merge it with the forward pass; prevent_cse's optimization barriers there
        # only cost (W4: -11% gradient compile, same temp and gradient). The peeled last
        # batch runs outside any loop and keeps them, or its recomputation could be CSE'd
        # away, keeping its intermediates alive from the forward pass instead.
        checked = jax.checkpoint(batch, static_argnums=(2,), prevent_cse=False)
        peeled = jax.checkpoint(batch, static_argnums=(2,))
    overlap = loop.remainder > 0 and not loop.peel
    n = loop.num_batches if overlap else loop.full_batches

    def at(k: Any, added: tuple[Any, ...]) -> tuple[tuple[Any, ...], ...]:
        if not overlap:
            return checked(k * block, None, block, added)
        start = jnp.minimum(k * block, extent - block)
        return checked(start, k * block - start, block, added)

    full_ctx = {**ctx, loop.loop: (0, block, None)}
    shapes = [block_shape(d, full_ctx) for _, d in (*loop.sums, *loop.carries)]
    fresh = [block_shape(add.dims, ctx) for add in loop.adds if add.start is None]
    zeros = dependent_zeros(shapes + fresh, _nest_reads(loop.body, loop.derived), env, ctx, run)
    after = run.after  # start after the loop before (:func:`loop_done`)
    if after is not None:
        zeros = [z + after.astype(z.dtype) for z in zeros]
        run = dataclasses.replace(run, after=None)  # the batches' own loops: free
    # a sum the loop adds into starts from its start value (its buffer) or from zeros
    new = iter(zeros[len(shapes) :])
    zeros = zeros[: len(shapes)] + [
        next(new) if add.start is None else env[add.start] for add in loop.adds
    ]
    init = (
        tuple(zeros[: len(loop.sums)]),
        tuple(zeros[len(loop.sums) : len(shapes)]),
        tuple(zeros[len(shapes) :]),
    )
    if run.vary is not None:
        init = jax.tree.map(run.vary, init)
    if not scatters:

        def fori_body(k: Any, carry: Any) -> Any:
            part, cross, _, added = at(k, carry[2])
            return (tuple(a + b for a, b in zip(carry[0], part, strict=True)), cross, added)

        acc, cross, added = lax.fori_loop(0, n, fori_body, init)
        stacked: tuple[Any, ...] = ()
    else:

        def scan_body(carry: Any, k: Any) -> Any:
            part, cross, pieces, added = at(k, carry[2])
            summed = tuple(a + b for a, b in zip(carry[0], part, strict=True))
            return (summed, cross, added), pieces

        ks = jnp.arange(n) if after is None else jnp.arange(n) + after
        (acc, cross, added), stacked = lax.scan(scan_body, init, ks)
    if overlap:
        drop = block - loop.remainder
        full = [
            jnp.concatenate(
                [merge_batches(y[:-1], p), lax.slice_in_dim(y[-1], drop, block, axis=p)], axis=p
            )
            for y, (_, p) in zip(stacked, scatters, strict=True)
        ]
    else:
        full = [merge_batches(y, p) for y, (_, p) in zip(stacked, scatters, strict=True)]
    if loop.peel:
        part, cross, pieces, added = peeled(n * block, None, loop.remainder, added)
        acc = tuple(a + b for a, b in zip(acc, part, strict=True))
        full = [
            jnp.concatenate([f, x], axis=p)
            for f, x, (_, p) in zip(full, pieces, scatters, strict=True)
        ]
    out = dict(zip(sums, acc, strict=True))
    out.update(zip(carries, cross, strict=True))
    out.update((v, f) for (v, _), f in zip(scatters, full, strict=True))
    out.update((add.value_id, x) for add, x in zip(loop.adds, added, strict=True))
    return out


def _add_piece(add: LoopAdd, acc: Any, piece: Any, start: Any, valid_from: Any) -> Any:
    """``acc`` with one batch's ``piece`` added at each of its places (:class:`LoopAdd`).

    In an overlapping last batch, the elements an earlier batch added are zeroed first.
    """
    if valid_from is not None:
        piece = _mask(piece, add.position, piece.shape[add.position], valid_from)
    for perm, coef in add.parts:
        x = piece if perm == tuple(range(len(perm))) else jnp.transpose(piece, perm)
        starts: list[Any] = [0] * x.ndim
        starts[perm.index(add.position)] = start
        here = lax.dynamic_slice(acc, starts, x.shape, allow_negative_indices=False)
        acc = lax.dynamic_update_slice(
            acc, plus(here, scaled(coef, x)), starts, allow_negative_indices=False
        )
    return acc


def _run_block_pairs(
    outer: Loop, inner: Loop, ins: Contract, env: Mapping[int, Any], ctx: Ctx, run: RunSettings
) -> dict[int, Any]:
    """The nest ``outer`` > ``inner`` > ``ins`` over block pairs ``P ≤ Q`` (:mod:`..block_pairs`).

    One ``lax.fori_loop`` over the ``nb`` blocks ``P`` (the batch ``(P, P)``, summed over
    ``k1 ≤ k2``), one over the ``nb(nb-1)/2`` pairs ``P < Q``: each iteration reads the
    batch ``(P, Q)`` and the batch ``(Q, P)`` of both operands, the instructions before
    the product in ``inner`` run for each. Every batch has the full block size: a last,
    smaller one starts at ``extent - block`` and its overlap is masked
    (:attr:`Contract.masks`), as in :func:`run_loop`.
    """
    plan = ins.block_pairs
    assert plan is not None
    block, extent = outer.block, outer.extent
    overlap = extent % block != 0
    rows, cols = (jnp.asarray(x) for x in np.triu_indices(outer.num_batches, 1))
    before = inner.body[:-1]  # the operands made for the batch
    read = {r.value_id for r in ins.operands}

    def batch_of(k: Any) -> tuple[Any, int, Any]:
        start = jnp.minimum(k * block, extent - block)
        return start, block, (k * block - start if overlap else None)

    def operands(p: Any, q: Any) -> list[Any]:  # of the batch (P, Q)
        local, at = dict(env), {**ctx, outer.loop: batch_of(p), inner.loop: batch_of(q)}
        run_body(before, local, at, run, read)
        return _operands(ins, local, at, run)

    def pair(p: Any, q: Any) -> Any:  # P < Q: the batches (P, Q) and (Q, P)
        x, y = operands(p, q), operands(q, p)
        with jax.named_scope(f"v{ins.value_id}"):
            x = block_pair_product(plan, ins.spec, x, y)
        return x if run.vary is None else run.vary(x)

    def diagonal(p: Any) -> Any:  # P = P: the batch alone, over k1 <= k2
        here = operands(p, p)
        with jax.named_scope(f"v{ins.value_id}"):
            x = block_pair_product(plan, ins.spec, here, here, diagonal=True)
        return x if run.vary is None else run.vary(x)

    if run.remat:
        pair = jax.checkpoint(pair, prevent_cse=False)
        diagonal = jax.checkpoint(diagonal, prevent_cse=False)
    full_ctx = {**ctx, outer.loop: (0, block, None), inner.loop: (0, block, None)}
    init = jnp.zeros(block_shape(ins.dims, full_ctx), run.dtype)
    if run.after is not None:  # start after the loops before (:func:`loop_done`)
        init = init + run.after.astype(init.dtype)
    if run.vary is not None:
        init = run.vary(init)
    acc = lax.fori_loop(0, outer.num_batches, lambda k, a: a + diagonal(k), init)
    acc = lax.fori_loop(0, rows.shape[0], lambda k, a: a + pair(rows[k], cols[k]), acc)
    return {ins.value_id: acc}
