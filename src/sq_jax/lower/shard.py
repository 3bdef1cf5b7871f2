"""Scale-out: the outermost batch loop of each nest runs across a 1-D device mesh.

:func:`make_shard_plan` turns ``compile(..., mesh=)`` (or ``devices=``) into a
:class:`ShardPlan`; :func:`run_sharded_body` is what :func:`~sq_jax.lower.interpret.
run_lowered` runs at the root of the instruction tree when a plan is given. Every root
:class:`~sq_jax.lower.ir.Loop` (the outermost loop of a nest) becomes one
``jax.shard_map`` inside the program's one ``jax.jit``; everything else is replicated.
Per loop of ``n`` batches on ``D`` devices, device ``d`` runs batches ``d*m .. d*m+m-1``
with ``m = ceil(n / D)``; it is equivalent to::

    acc = {v: 0 for v in sums}; pieces = {v: [] for v in scatters}
    for d in devices:                          # in parallel, one lax.scan each
        for k in range(d * m, d * m + m):
            if k < n:                          # else: a masked no-op batch (lax.cond)
                local = run(body, elements=[k*block, k*block+block))  # zero past extent
                acc_d[v] += local[v]; pieces_d[v].append(local[v])
    acc = psum(acc_d)                          # Sum escapes: reduced across devices
    pieces = concatenate(pieces_d)[:extent]    # Scatter escapes: stay split

Why masked no-op batches and not unequal trip counts: a trip count that depends on the
device index turns the loop into a ``while_loop``, which reverse mode cannot
differentiate. The batch *index range* is padded to ``D*m``; the padded indices on the
last devices take the no-op branch of a ``lax.cond`` and compute nothing.

Memory is divided by splitting the inputs (:func:`sharded_inputs`): an input block
whose every read cuts one mode to the batch of a distributed root loop, or cuts it by a
loop nested in that one, is zero-padded along that mode to ``D*m*block`` elements and
held split over the mesh, so device ``d`` holds exactly the elements of its own batches
(``1/D`` of the padded block). A read cut by the root loop is local; a nested loop's
window is summed from the devices that hold it (:func:`_fetch_window`, one ``psum``),
so all devices run such a loop's batch slots in step (padded ones too, on zeros). A
block read whole anywhere (or at the root) is replicated: a loop must see it whole.
Batch ``k`` always covers ``[k*block, k*block+block)``; an operand that is not split is
cut where it fits and shifted so that elements past the extent read as zero. The
equations are polynomial in the inputs, so every value computed in a batch is exactly
zero past the extent: sums are exact and scattered pieces are cut to the extent.
Values built in the loop stay per device; Scatter escapes leave ``shard_map`` split
along the mesh axis and stay so (XLA moves them only where a later step needs them
whole); Sum escapes are all-reduced. A root ``Combine`` of split values is one
matrix-vector product (:func:`_combine_materialised`), so XLA does not fuse the whole
chain of such sums, holding every permuted piece until its end.

What stays replicated: input blocks read whole somewhere, every value computed outside
the distributed loops (computed redundantly), Sum escapes and loop carries.

References: JAX's ``shard_map`` (jax:jax/_src/shard_map.py) and its notes on varying
manual axes. Known limitations: only the root loops are distributed, so a schedule
whose root has no loop runs replicated on every device; inputs given as full tensors
(``"g"``) are replicated (pass blocks to have them split).

Example:
    >>> import jax, numpy as np, sq_jax as sq
    >>> prog = sq.compile(
    ...     "E = f{i1;a1} t{a1;i1}", sq.Spaces(i=2, a=5), batch={"a": 2}, devices=jax.devices()[:1]
    ... )
    >>> float(prog({"f{i;a}": np.ones((2, 5)), "t{a;i}": np.ones((5, 2))})["E"])
    10.0
    >>> prog.mesh.shape["batch"], prog.peak_bytes_per_device
    (1, 8)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._errors import PlanError
from ..schedule import ScheduledForest
from ..schedule.peak import PeakCell, PeakSchedule, dag_path, peak_profile_sweep
from .execute import RunSettings, block_shape, merge_batches, read_operand, run_body
from .ir import Accumulate, Combine, Instr, Loop, LoweredProgram, Read, Term, walk

__all__ = [
    "ShardPlan",
    "ShardedInput",
    "make_shard_plan",
    "peak_bytes_per_device",
    "run_sharded_body",
    "sharded_inputs",
    "xla_bytes_per_device",
]

AXIS = "batch"
"""Name of the mesh axis built from ``devices=``."""


@dataclass(frozen=True, slots=True)
class ShardedInput:
    """An input block held split along one mode: each device holds ``padded / D`` of it.

    Chosen by :func:`sharded_inputs`: every read of the block cuts this mode to the batch
    of a distributed root loop. The mode is zero-padded from ``extent`` to ``padded``
    (``D * m * block``, ``m = ceil(batches / D)``) so that device ``d`` holds exactly the
    elements of its batches ``d*m .. d*m+m-1``.
    """

    key: str
    """The block key."""
    position: int
    """The mode (axis of the block) it is split along."""
    extent: int
    """Elements of that mode."""
    padded: int
    """Elements after zero-padding (a multiple of the device count)."""

    def spec(self, ndim: int, axis: str) -> PartitionSpec:
        """The ``PartitionSpec`` of the padded block on the mesh."""
        return PartitionSpec(*(axis if p == self.position else None for p in range(ndim)))

    def pad(self, x: Any) -> Any:
        """The block zero-padded along its split mode (``jnp.pad``, differentiable)."""
        widths = [(0, 0)] * x.ndim
        widths[self.position] = (0, self.padded - self.extent)
        return jnp.pad(x, widths)


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """Where the outermost loops run: a 1-D mesh and its axis name."""

    mesh: Mesh
    """The mesh (one axis)."""
    axis: str
    """Its axis name; batches are split along it."""
    inputs: tuple[ShardedInput, ...] = ()
    """The input blocks held split along the mesh axis (:func:`sharded_inputs`); set by
    :func:`~sq_jax.lower.program.make_program` once the program is lowered."""

    @property
    def size(self) -> int:
        """Number of devices."""
        return int(self.mesh.shape[self.axis])

    def replicated(self) -> NamedSharding:
        """The sharding of a value held whole on every device."""
        return NamedSharding(self.mesh, PartitionSpec())

    def split(self, num_batches: int) -> int:
        """Batches each device runs (``ceil(num_batches / size)``, padded indices masked).

        Example:
            >>> ShardPlan(Mesh(np.array(jax.devices()[:1]), ("b",)), "b").split(5)
            5
        """
        return -(-num_batches // self.size)


def make_shard_plan(
    mesh: Mesh | None = None, devices: Sequence[Any] | None = None
) -> ShardPlan | None:
    """Validate ``mesh=``/``devices=`` of :func:`sq_jax.compile` into a plan (or ``None``).

    Args:
        mesh: a ``jax.sharding.Mesh`` with exactly one axis.
        devices: a non-empty sequence of distinct devices; a 1-D mesh with axis
            ``"batch"`` is built over them.

    Returns:
        The plan, or ``None`` when neither is given (single-device program).

    Raises:
        PlanError: both given, a mesh with other than one axis, or bad devices.

    Example:
        >>> plan = make_shard_plan(devices=jax.devices()[:1])
        >>> plan.axis, plan.size
        ('batch', 1)
        >>> make_shard_plan() is None
        True
    """
    if mesh is not None and devices is not None:
        raise PlanError(
            "got both mesh= and devices=; pass one: devices=[...] builds a 1-D mesh, "
            "mesh= uses yours."
        )
    if devices is not None:
        devs = list(devices)
        if not devs or len(set(devs)) != len(devs):
            raise PlanError(
                f"devices= must be a non-empty list of distinct devices, got {devs!r}; "
                "pass e.g. devices=jax.devices()."
            )
        mesh = Mesh(np.array(devs, dtype=object), (AXIS,))
    if mesh is None:
        return None
    if not isinstance(mesh, Mesh):
        raise PlanError(
            f"mesh= must be a jax.sharding.Mesh, got {type(mesh).__name__}; build one with "
            "jax.make_mesh((n,), ('batch',)) or pass devices=[...]."
        )
    if len(mesh.axis_names) != 1:
        raise PlanError(
            f"mesh= must have exactly one axis, got axes {tuple(mesh.axis_names)!r} "
            f"(shape {dict(mesh.shape)}); the outermost batch loop is split along one axis."
        )
    return ShardPlan(mesh, str(mesh.axis_names[0]))


def root_nests_plain(lowered: LoweredProgram) -> LoweredProgram:
    """``lowered`` with its root loops' block-pair marks removed (:mod:`.block_pairs`).

    A root loop's batches are split over the mesh, each device running its share of
    the body, so a root nest runs plainly there; its FLOPs are then the plain ones.

    Example:
        >>> import sq_jax as sq
        >>> text = "R{a1,a2;i1,i2} = g{a1,a2;a3,a4} t{a3,a4;i1,i2}"
        >>> plan = {"a": {"batches": 3, "roles": "contracted"}}
        >>> prog = sq.compile(text, sq.Spaces(i=10, a=20), pair_symmetry=True, batch=plan)
        >>> prog.lowered.body[0].block_pair_nest is None
        False
        >>> root_nests_plain(prog.lowered).body[0].block_pair_nest is None
        True
    """
    body = []
    for ins in lowered.body:
        nest = ins.block_pair_nest if isinstance(ins, Loop) else None
        if nest is not None:
            inner, product = nest
            plain = replace(product, block_pairs=None)
            ins = replace(ins, body=(replace(inner, body=(plain,)),))
        body.append(ins)
    return replace(lowered, body=tuple(body))


# -- tracing -------------------------------------------------------------------------------


def _varying(x: Any, axis: str) -> Any:
    """``x`` typed as varying across ``axis`` (no data movement)."""
    aval = jax.typeof(x)
    vma = getattr(aval, "vma", None)
    if vma is None:
        vma = aval.mat.varying
    return x if axis in vma else lax.pcast(x, axis, to="varying")


def sharded_inputs(lowered: LoweredProgram, num_devices: int) -> tuple[ShardedInput, ...]:
    """The input blocks that can be held split along one mode (the rest are replicated).

    A block is split along mode ``p`` when every read of it lies under a distributed
    root loop (all such loops having one extent and block size) and either cuts ``p``
    to the root loop's batch (read locally) or, not cut by the root loop, cuts ``p`` by
    a loop nested in it that walks a mode of the same extent (the window is fetched
    from the devices holding it, :func:`_fetch_window`). A block read whole anywhere,
    or at the root, must be seen whole: replicated.

    Example:
        >>> import sq_jax as sq
        >>> prog = sq.compile("R{a1;i1} = f{a1;a2} t{a2;i1}", sq.Spaces(i=2, a=5),
        ...                   batch={"a": {"batches": 2, "roles": "external"}})
        >>> [(s.key, s.position, s.extent, s.padded) for s in sharded_inputs(prog.lowered, 2)]
        [('f{a;a}', 0, 5, 6)]
    """
    where: dict[str, list[Any]] = {}

    def visit(body: Sequence[Instr], root: Loop | None, nested: Mapping[Any, Loop]) -> None:
        for ins in body:
            if isinstance(ins, Loop):
                if root is None:
                    visit(ins.body, ins, {})
                else:
                    visit(ins.body, root, {**nested, ins.loop: ins})
                continue
            if isinstance(ins, Accumulate):
                for t in ins.terms:
                    visit(t.body, root, nested)
                reads: Sequence[Read] = [t.read for t in ins.terms]
            else:
                reads = ins.operands
            for r in reads:
                if r.input_key is None or r.generated:  # Δ is built, never held split
                    continue
                where.setdefault(r.input_key, []).append(_split_options(r, root, nested))

    visit(lowered.body, None, {})
    for res in lowered.results:
        if res.read.input_key is not None:
            where.setdefault(res.read.input_key, []).append(None)
    out = []
    for key, found in where.items():
        if None in found or len({loop for _, loop in found}) != 1:
            continue
        positions = frozenset.intersection(*(options for options, _ in found))
        if positions:
            extent, block, n = found[0][1]
            padded = num_devices * -(-n // num_devices) * block
            out.append(ShardedInput(key, min(positions), extent, padded))
    return tuple(sorted(out, key=lambda s: s.key))


def _split_options(
    read: Read, root: Loop | None, nested: Mapping[Any, Loop]
) -> tuple[frozenset[int], tuple[int, int, int]] | None:
    """The modes one read of an input block allows it to be split along.

    Returned with the root loop's ``(extent, block, batches)``; ``None`` where the read
    needs the block whole (at the root, or not cut along one mode by the loops).
    """
    if root is None:
        return None
    cut = [p for p, lp in read.slices if lp == root.loop]
    if len(cut) == 1:
        options = frozenset(cut)  # read locally
    elif not cut:
        options = frozenset(
            p for p, lp in read.slices if lp in nested and nested[lp].extent == root.extent
        )  # fetched window by window
    else:
        options = frozenset()
    return (options, (root.extent, root.block, root.num_batches)) if options else None


def _fetch_window(
    read: Read, split: ShardedInput, ctx: Any, shard: Any, owned: int, axis: str, dtype: Any
) -> Any:
    """The window a nested loop cuts from a split block, summed from the devices.

    Every device takes the part of the window its shard holds (zeros elsewhere) and
    one ``psum`` assembles it, so each device holds one window, never the whole block.
    All devices must call this in step: a root loop that fetches runs every batch slot,
    padded ones included (:func:`_run_distributed`).
    """
    others = tuple((p, lp) for p, lp in read.slices if p != split.position)
    (inner,) = (lp for p, lp in read.slices if p == split.position)
    x = read_operand(replace(read, slices=others), {}, ctx, {read.input_key: shard}, dtype)
    start, size, _ = ctx[inner]
    first = start - lax.axis_index(axis).astype(jnp.asarray(start).dtype) * owned
    idx = first + jnp.arange(size)
    held = (idx >= 0) & (idx < owned)  # (jnp.take would wrap negative indices)
    part = jnp.take(x, jnp.clip(idx, 0, owned - 1), axis=split.position)
    shape = [1] * x.ndim
    shape[split.position] = size
    part = jnp.where(held.reshape(shape), part, jnp.zeros((), part.dtype))
    return lax.psum(part, axis)


def _reads(body: Sequence[Instr]) -> Iterator[Read]:
    """Every operand read in ``body``, nested loops included."""
    for ins in walk(body):
        if isinstance(ins, Term):
            yield ins.read
        elif not isinstance(ins, Loop | Accumulate):
            yield from ins.operands


def _shift_left(x: Any, shift: Any, position: int) -> Any:
    """``y[j] = x[j + shift]`` along ``position``, zeros past the end (``0 <= shift``)."""
    size = x.shape[position]
    # a gather, not a slice of x padded with zeros: no buffer twice the batch's size
    idx = jnp.arange(size) + shift
    y = jnp.take(x, jnp.minimum(idx, size - 1), axis=position)
    shape = [1] * x.ndim
    shape[position] = size
    return jnp.where((idx < size).reshape(shape), y, jnp.zeros((), y.dtype))


def _run_distributed(
    plan: ShardPlan,
    loop: Loop,
    env: Mapping[int, Any],
    blocks: Mapping[str, Any],
    split: Mapping[str, tuple[ShardedInput, Any]],
    dtype: Any,
    remat: bool,
) -> dict[int, Any]:
    """One root loop under ``shard_map`` (module docstring for its Python meaning)."""
    axis = plan.axis
    block, extent = loop.block, loop.extent
    n = loop.num_batches
    m = plan.split(n)
    sums = [v for v, _ in loop.sums]
    carries = [v for v, _ in loop.carries]
    scatters = [(v, p) for v, p, _ in loop.scatters]
    full_ctx = {loop.loop: (0, block, None)}
    local_keys = set(split)
    fetches = any(
        r.input_key in local_keys and not r.generated and all(lp != loop.loop for _, lp in r.slices)
        for r in _reads(loop.body)
    )

    def per_device(env_in: dict[int, Any], blocks_in: dict[str, Any], shards: Any) -> Any:
        # Mark every input varying once, here: its transpose (a psum of the cotangents)
        # then runs on all devices, never inside one device's branch of the cond below.
        env_v = {k: _varying(x, axis) for k, x in env_in.items()}
        blocks_v = {k: _varying(x, axis) for k, x in {**blocks_in, **shards}.items()}
        ks = jnp.arange(m)  # this device's batch slots (int64 under x64, like the loops)
        device = lax.axis_index(axis).astype(ks.dtype)
        vary = partial(_varying, axis=axis)

        def batch(k: Any, j: Any) -> tuple[tuple[Any, ...], ...]:
            # Batch k covers [k*block, k*block+block) of the zero-padded mode: a split
            # input is read from this device's shard (local offset j*block); a whole
            # operand is cut where it still fits and shifted, zeros past the extent.
            # Zeros make every value vanish past the extent, so sums stay exact.
            start = jnp.minimum(k * block, extent - block)
            shift = k * block - start

            def read(r: Any, env_r: Any, ctx: Any, blocks_r: Any, dt: Any) -> Any:
                cut = [p for p, lp in r.slices if lp == loop.loop]
                if not cut and r.input_key in local_keys and not r.generated:
                    shard = blocks_r[r.input_key]
                    return _fetch_window(r, split[r.input_key][0], ctx, shard, m * block, axis, dt)
                if not cut:
                    return read_operand(r, env_r, ctx, blocks_r, dt)
                if r.input_key in local_keys:
                    return read_operand(
                        r, env_r, {**ctx, loop.loop: (j * block, block, None)}, blocks_r, dt
                    )
                x = read_operand(r, env_r, {**ctx, loop.loop: (start, block, None)}, blocks_r, dt)
                if loop.remainder:
                    for p in cut:
                        x = _shift_left(x, shift, p)
                return x

            local = dict(env_v)
            ctx = {loop.loop: (k * block, block, None)}
            keep = {*sums, *carries, *(v for v, _ in scatters)}
            run_body(loop.body, local, ctx, RunSettings(blocks_v, dtype, remat, vary, read), keep)
            outs = (
                tuple(local[v] for v in sums),
                tuple(local[v] for v in carries),
                tuple(local[v] for v, _ in scatters),
            )
            return jax.tree.map(lambda x: _varying(x, axis), outs)

        run = jax.checkpoint(batch) if remat else batch
        shapes = jax.eval_shape(
            run, jax.ShapeDtypeStruct((), ks.dtype), jax.ShapeDtypeStruct((), ks.dtype)
        )

        def step(carry: Any, j: Any) -> Any:
            acc, cross = carry
            k = device * m + j

            def noop() -> Any:
                zeros = jax.tree.map(lambda s: _varying(jnp.zeros(s.shape, s.dtype), axis), shapes)
                return zeros[0], cross, zeros[2]

            if m * plan.size == n or fetches:
                # fetched windows are collectives: every device runs every slot in step;
                # a padded slot reads zeros past the extent, so it adds nothing
                part, cross, pieces = run(k, j)
            else:
                part, cross, pieces = lax.cond(k < n, lambda: run(k, j), noop)
            return (tuple(a + b for a, b in zip(acc, part, strict=True)), cross), pieces

        init = jax.tree.map(
            lambda x: _varying(x, axis),
            (
                tuple(jnp.zeros(block_shape(d, full_ctx), dtype) for _, d in loop.sums),
                tuple(jnp.zeros(block_shape(d, full_ctx), dtype) for _, d in loop.carries),
            ),
        )
        (acc, cross), stacked = lax.scan(step, init, ks)
        # Sum escapes: one all-reduce. Carries are loop-invariant: device 0 (which always
        # runs batch 0) supplies them. Scatter pieces leave sharded along the batch axis.
        return lax.psum(acc, axis), tuple(c[None] for c in cross), stacked

    spec = PartitionSpec(axis)
    shard_specs = {k: s.spec(x.ndim, axis) for k, (s, x) in split.items()}
    acc, cross, stacked = jax.shard_map(
        per_device,
        mesh=plan.mesh,
        in_specs=(PartitionSpec(), PartitionSpec(), shard_specs),
        out_specs=(PartitionSpec(), spec, spec),
    )(
        dict(env),
        {k: x for k, x in blocks.items() if k not in split},
        {k: x for k, (_, x) in split.items()},
    )
    out: dict[int, Any] = dict(zip(sums, acc, strict=True))
    for v, c in zip(carries, cross, strict=True):
        out[v] = lax.with_sharding_constraint(c[0], plan.replicated())  # device 0's copy
    for (v, p), y in zip(scatters, stacked, strict=True):
        # the pieces stay split along the mesh axis; the padded tail is dropped
        full = merge_batches(y, p)
        out[v] = lax.slice_in_dim(full, 0, extent, axis=p)
    return out


def run_sharded_body(
    plan: ShardPlan,
    body: Sequence[Instr],
    env: dict[int, Any],
    blocks: Mapping[str, Any],
    dtype: Any,
    remat: bool,
    padded: Mapping[str, Any] | None = None,
) -> None:
    """Run the root body: loops distributed over ``plan``'s mesh, the rest replicated.

    Traceable only (call it under ``jax.jit``); stores each produced value in ``env``
    like :func:`~sq_jax.lower.interpret.run_lowered`'s root body. Each block of
    ``plan.inputs`` is taken from ``padded`` (already padded and split, as
    :meth:`~sq_jax.lower.program.Program.__call__` passes them) or padded here from
    ``blocks``, and held split along the mesh axis.

    Example:
        >>> import sq_jax as sq
        >>> prog = sq.compile("R{a1;i1} = f{a1;i1}", sq.Spaces(i=1, a=3), batch={"a": 2},
        ...                   devices=jax.devices()[:1])
        >>> prog({"f{a;i}": np.ones((3, 1))})["R"].ravel().tolist()
        [1.0, 1.0, 1.0]
    """
    padded = padded or {}
    split = {}
    for s in plan.inputs:
        x = padded[s.key] if s.key in padded else s.pad(blocks[s.key])
        sharding = NamedSharding(plan.mesh, s.spec(x.ndim, plan.axis))
        split[s.key] = (s, lax.with_sharding_constraint(jnp.asarray(x, dtype), sharding))
    scattered: set[int] = set()  # values held split along the mesh axis
    for ins in body:
        if isinstance(ins, Loop):
            env.update(_run_distributed(plan, ins, env, blocks, split, dtype, remat))
            scattered.update(v for v, _, _ in ins.scatters)
        elif isinstance(ins, Combine) and any(r.value_id in scattered for r in ins.operands):
            env[ins.value_id] = _combine_materialised(ins, env, blocks, dtype)
            scattered.add(ins.value_id)
        else:
            run_body((ins,), env, {}, RunSettings(blocks, dtype, remat))


def _combine_materialised(
    ins: Combine, env: Mapping[int, Any], blocks: Mapping[str, Any], dtype: Any
) -> Any:
    """A root ``Combine`` of split values, computed as one matrix-vector product.

    Why: XLA fuses a chain of adds into one fusion (:mod:`..sums`), so every operand of
    the chain, each permuted piece of a split residual included (an all-to-all's
    output, the device's share), stays live until the chain's last term exists, across
    the distributed loops scheduled in between. A ``dot_general`` is never fused with
    the adds around it: each link of the chain is then computed as soon as its operands
    exist and the pieces die there. The stacked pair is a transient of two shares.
    """
    ops = []
    for r, perm in zip(ins.operands, ins.perms, strict=True):
        x = read_operand(r, env, {}, blocks, dtype)
        ops.append(x if perm == tuple(range(len(perm))) else jnp.transpose(x, perm))
    coefs = jnp.asarray(ins.coefs, dtype)
    return lax.dot_general(
        coefs, jnp.stack(ops), (((0,), (0,)), ((), ())), precision=lax.Precision.HIGHEST
    )


# -- static and XLA memory -----------------------------------------------------------------


def peak_bytes_per_device(sf: ScheduledForest, lowered: LoweredProgram, num_devices: int) -> int:
    """Static per-device peak of the intermediates under the distributed root loops.

    The schedule's peak model (:mod:`sq_jax.schedule.peak`) already charges one batch
    per loop, which is what each device holds. What changes per device is each Scatter
    escape of a distributed loop: it stays split, so a device holds its share of it
    (``m * block`` of ``extent`` elements, ``m = ceil(n / D)``). Sum escapes keep one
    accumulator (the all-reduce may reuse it); inputs are excluded as in ``peak_bytes``
    (add the replicated ones whole and ``1/D`` of each padded split one per device).

    Example:
        >>> import sq_jax as sq
        >>> prog = sq.compile("R{a1;i1} = f{a1;a2} t{a2;i1}", sq.Spaces(i=2, a=4),
        ...                   batch={"a": {"batches": 4, "roles": "external"}})
        >>> prog.peak_bytes, peak_bytes_per_device(prog.schedule, prog.lowered, 2)
        (64, 32)
    """
    share: dict[int, tuple[int, int]] = {}
    for ins in lowered.body:
        if isinstance(ins, Loop):
            m = -(-ins.num_batches // num_devices)
            for v, _, _ in ins.scatters:
                share[v] = (m * ins.block, ins.extent)
    path = dag_path(sf.rich, sf.annotated)
    cells = tuple(
        PeakCell(
            c.value_id,
            c.home_depth,
            -(-c.footprint * share[c.value_id][0] // share[c.value_id][1]),
            c.first_use,
            c.last_use,
        )
        if c.value_id in share
        else c
        for c in path.cells
    )
    return peak_profile_sweep(PeakSchedule(cells, path.num_points)).peak_bytes


def xla_bytes_per_device(memory: Any) -> int:
    """Bytes XLA reports per device: arguments + outputs + temporaries - aliased.

    Args:
        memory: ``program.memory_analysis(inputs)`` (a ``CompiledMemoryStats``); for a
            program compiled with ``mesh=``/``devices=`` its figures are per device.

    Example:
        >>> import sq_jax as sq
        >>> prog = sq.compile("E = f{i1;i1}", sq.Spaces(i=3), devices=jax.devices()[:1])
        >>> xla_bytes_per_device(prog.memory_analysis({"f{i;i}": np.eye(3)})) >= 72
        True
    """
    return int(
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )
