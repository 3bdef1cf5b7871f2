"""Reverse mode of a batched program, one cotangent accumulator per array it reads.

Why: JAX transposes a ``scan``/``fori_loop`` by carrying the cotangent of every array
its body reads from outside, starting from zeros; in a nest every level does the same,
and every root loop returns cotangents of its own that JAX then adds. Values made in one
loop and read by the loop nested in it get cotangents of their whole size that live
through the inner loop. In W4 (spin-orbital CCSD on H2O/6-31G, ``a`` in 2 batches,
loops four deep) that made the remat gradient hold 1.84x the forward program's XLA
temporaries; with this pass it holds 1.29x, and it compiles and runs faster.

Here a rematerialized program (``remat=True``) is differentiated by a backward pass
written out over its instructions (:func:`_body_reverse`):

* one accumulator per array read from outside a loop is threaded through every level of
  every nest, from the last root loop to the first, and each batch adds to it;
* a batch's values are recomputed, and only those a derivative needs
  (:func:`_value_needs`);
* a value made in a loop body and read by a loop nested in it is pulled back at once,
  wherever its cotangent arises (a :class:`Sink`), so it gets no accumulator;
* runs of instructions between loops are differentiated by :func:`jax.vjp`.

:func:`run_reversible_body` ties this to JAX: the program is a :func:`jax.custom_jvp`
whose tangent is a linear map (:func:`~sq_jax.lower.linear.linear_map`): forward mode is
JAX's JVP of the forward program, reverse mode this pass. Derivatives of higher order
are JAX's own derivatives of either. The values the root loops leave are kept from the
forward pass; a JVP recomputes the forward program.

Example:
    >>> import jax, numpy as np, sq_jax as sq
    >>> text = "E = g{i1,i2;a1,a2} t{a1;i1} t{a2;i2}"
    >>> plan = {"i": {"block": 2, "roles": "contracted"}}
    >>> prog = sq.compile(text, sq.Spaces(i=3, a=2), batch=plan, remat=True)
    >>> plain = sq.compile(text, sq.Spaces(i=3, a=2))
    >>> rng = np.random.default_rng(0)
    >>> g, t = rng.standard_normal((3, 3, 2, 2)), rng.standard_normal((2, 3))
    >>> def grad(p):
    ...     return jax.grad(lambda t: p({"g{i,i;a,a}": g, "t{a;i}": t})["E"])(t)
    >>> bool(np.allclose(grad(prog), grad(plain), rtol=1e-12, atol=0))
    True
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_derivatives import SymbolicZero

from ..expr.nodes import Power, Variable
from ..forest.denominators import denominator_slots, energy_key
from .accumulate import produced
from .execute import Ctx, RunSettings, block_shape, outside_reads, run_body, run_loop
from .ir import Combine, Contract, Instr, Loop, Read, Term, walk
from .linear import linear_map

__all__ = ["run_reversible_body", "source_keys"]

Key = str
"""An array a loop reads from outside: ``"b:<input key>"`` or ``"v:<value id>"``."""


@dataclasses.dataclass(frozen=True)
class Sink:
    """A value whose cotangent is pulled back at once, wherever it arises."""

    pull: Callable[[Any], dict[Key, Any]]
    """The value's cotangent -> the cotangents of the arrays it was made from."""
    targets: tuple[Key, ...]
    """Those arrays."""


def _variables(expr: Any) -> list[str]:
    if isinstance(expr, Variable):
        return [expr.name]
    if isinstance(expr, Power):
        return _variables(expr.base)
    return []


def source_keys(read: Read) -> list[Key]:
    """The arrays behind one read: an input block, a value, energies or scalar variables.

    Example:
        >>> source_keys(Read(3)), source_keys(Read(0, "t{a;i}"))
        (['v:3'], ['b:t{a;i}'])
    """
    if read.scalar is not None:
        return [f"b:{name}" for name in _variables(read.scalar.scalar)]
    if read.generated:
        return [f"b:{energy_key(space)}" for space, _ in denominator_slots(read.input_key)]
    if read.input_key is not None:
        return [f"b:{read.input_key}"]
    return [f"v:{read.value_id}"]


def _sources(item: Instr | tuple[Instr, ...]) -> list[Key]:
    """What a loop or a run of instructions reads from before it, in order.

    Besides its operands: the inputs of transposed copies made before loops, and the
    prepared inputs of packed products (:mod:`sq_jax.lower.prepare`).
    """
    body = (item,) if isinstance(item, Loop) else item
    keys = [k for r in outside_reads(body) for k in source_keys(r)]
    for ins in walk(body):
        if isinstance(ins, Loop):
            keys += [f"b:{key}" for key, _ in ins.copies]
        elif isinstance(ins, Contract):
            keys += [f"b:{key}" for key in ins.ready if key is not None]
    return list(dict.fromkeys(keys))


def _get(key: Key, env: Mapping[int, Any], run: RunSettings) -> Any:
    kind, name = key.split(":", 1)
    return run.blocks[name] if kind == "b" else env[int(name)]


def _with(values: Mapping[Key, Any], env: dict[int, Any], run: RunSettings) -> RunSettings:
    """``values`` put in place: blocks into the returned settings, values into ``env``."""
    blocks = {}
    for key, x in values.items():
        kind, name = key.split(":", 1)
        if kind == "b":
            blocks[name] = x
        else:
            env[int(name)] = x
    return dataclasses.replace(run, blocks={**run.blocks, **blocks}) if blocks else run


def run_reversible_body(
    body: tuple[Instr, ...], run: RunSettings, keep: Sequence[int]
) -> dict[int, Any]:
    """The values ``keep`` of a program's body, differentiated by :func:`_body_reverse`.

    The whole body is one linear map in forward and reverse mode (:func:`linear_map`),
    so every array read anywhere in it has one cotangent accumulator in the reverse
    pass, from the last loop to the first. The values its root loops leave are kept
    from the forward pass for it (JAX would keep most of them as well); values inside
    loops are recomputed there.

    Example:
        >>> import jax, jax.numpy as jnp, sq_jax as sq
        >>> text = "E = f{i1;a1} t{a1;i1}"
        >>> prog = sq.compile(text, sq.Spaces(i=2, a=3), batch={"a": 2}, remat=True)
        >>> blocks = {"f{i;a}": jnp.ones((2, 3)), "t{a;i}": jnp.ones((3, 2))}
        >>> (energy,) = [r.read.value_id for r in prog.lowered.results]
        >>> out = run_reversible_body(prog.lowered.body, RunSettings(blocks, jnp.float64), [energy])
        >>> float(out[energy])
        6.0
    """
    keys = _sources(body)
    sources = {k: _get(k, {}, run) for k in keys}
    # every array the body reads is an argument (``values``), none is closed over
    base = dataclasses.replace(run, blocks={}, remat=False, copies={}, after=None)
    loops = [ins for ins in body if isinstance(ins, Loop)]

    @jax.jit
    def forward_traced(values: Mapping[Key, Any]) -> dict[int, Any]:
        # one jitted function: its trace, made for the primal program, is reused by the
        # tangent rule (JAX traces both under differentiation); XLA inlines it
        local: dict[int, Any] = {}
        run_body(body, local, {}, _with(values, local, base), keep, after_largest=True)
        return local

    @jax.custom_jvp
    def forward(values: Mapping[Key, Any]) -> dict[int, Any]:
        # the tangent rule below runs the forward program on values JAX knows; reverse
        # mode partially evaluates that rule, and would walk a jitted function's whole
        # jaxpr (every scan, to a fixed point) to find nothing unknown in it (0.5 s of
        # W4's 2 s of tracing). A custom JVP call with known inputs is bound as is.
        return forward_traced(values)

    forward.defjvp(lambda primals, tangents: jax.jvp(forward_traced, primals, tangents))

    def push(res: tuple[Any, Any], dx: dict[Key, Any]) -> dict[int, Any]:
        values, _ = res

        def moved(part: dict[Key, Any]) -> dict[int, Any]:
            local = forward({**values, **part})
            return {v: local[v] for v in keep}

        return jax.jvp(moved, ({k: values[k] for k in dx},), (dx,))[1]

    def pull(res: tuple[Any, Any], ct: dict[int, Any], live: Sequence[Key]) -> dict[Key, Any]:
        values, known = res
        local: dict[int, Any] = {}
        inner = _with(values, local, base)
        acc = {k: jnp.zeros_like(values[k]) for k in live}
        return _body_reverse(body, local, {}, inner, dict(ct), acc, {}, known)

    @jax.custom_jvp
    def program(values: dict[Key, Any]) -> dict[int, Any]:
        local = forward(values)
        return {v: local[v] for v in keep}

    def tangent(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
        (values,), (dvalues,) = primals, tangents
        local = forward(values)
        out = {v: local[v] for v in keep}
        live = [k for k in keys if not isinstance(dvalues[k], SymbolicZero)]
        if not live:
            return out, jax.tree.map(jnp.zeros_like, out)
        known = {v: local[v] for lp in loops for v in produced(lp)}
        dx = {k: dvalues[k] for k in live}
        pulled = functools.partial(pull, live=live)
        return out, linear_map(push, pulled, (values, known), dx, out_like=out)

    program.defjvp(tangent, symbolic_zeros=True)
    return program(sources)


def _loop_reverse(
    loop: Loop,
    env: Mapping[int, Any],
    ctx: Ctx,
    run: RunSettings,
    ct_out: Mapping[int, Any],
    acc: dict[Key, Any],
    sinks: Mapping[Key, Sink],
) -> dict[Key, Any]:
    """``acc`` plus the cotangents, through one loop, of the arrays named by its keys.

    Every batch is run again (its values recomputed) and its cotangents added to ``acc``,
    which is the loop's only carry. Batches as in :func:`~sq_jax.lower.execute.run_loop`:
    a smaller last one peeled, or overlapping the one before.
    """
    if loop.block_pair_nest is not None:
        return _segment_reverse((loop,), env, ctx, run, ct_out, acc, sinks)
    block, extent = loop.block, loop.extent
    overlap = loop.remainder > 0 and not loop.peel
    n = loop.num_batches if overlap else loop.full_batches
    last = None if loop.peel else n - 1

    def step(k: Any, acc: dict[Key, Any]) -> dict[Key, Any]:
        if not overlap:
            batch = (k * block, block, None)
        else:
            start = jnp.minimum(k * block, extent - block)
            batch = (start, block, k * block - start)
        return _batch_reverse(loop, env, ctx, run, ct_out, acc, sinks, batch, k == last)

    if run.vary is not None:
        acc = jax.tree.map(run.vary, acc)
    acc = lax.fori_loop(0, n, step, acc)
    if loop.peel:
        # outside the loop, the batch run again could be merged with the forward pass's
        # (XLA's CSE), whose values would then live until here: new names prevent it
        keys = _sources(loop)
        held, ct_held = lax.optimization_barrier(({k: _get(k, env, run) for k in keys}, ct_out))
        local = dict(env)
        inner = _with(held, local, run)
        batch = (n * block, loop.remainder, None)
        acc = _batch_reverse(loop, local, ctx, inner, ct_held, acc, sinks, batch, True)
    return acc


def _batch_reverse(
    loop: Loop,
    env: Mapping[int, Any],
    ctx: Ctx,
    run: RunSettings,
    ct_out: Mapping[int, Any],
    acc: dict[Key, Any],
    sinks: Mapping[Key, Sink],
    batch: tuple[Any, int, Any],
    is_last: Any,
) -> dict[Key, Any]:
    """One batch of :func:`_loop_reverse`: the cotangents of the batch's outputs.

    A summed output gives every batch its whole cotangent, a scattered one the batch's
    piece (elements an overlapping batch drops get zero), a loop-invariant one (carried,
    the last batch's copy kept) the last batch only.
    """
    start, size, valid_from = batch
    ct: dict[int, Any] = {v: ct_out[v] for v, _ in loop.sums}
    for v, _ in loop.carries:
        x = ct_out[v]
        ct[v] = x if is_last is True else jnp.where(is_last, x, jnp.zeros((), x.dtype))
    for v, p, _ in loop.scatters:
        piece = lax.dynamic_slice_in_dim(
            ct_out[v], start, size, axis=p, allow_negative_indices=False
        )
        if valid_from is not None:
            keep = lax.broadcasted_iota(jnp.int32, piece.shape, p) >= valid_from
            piece = jnp.where(keep, piece, jnp.zeros((), piece.dtype))
        ct[v] = piece
    inner = {**ctx, loop.loop: batch}
    return _body_reverse(loop.body, env, inner, run, ct, acc, sinks)


def _items(body: Sequence[Instr]) -> list[Instr | tuple[Instr, ...]]:
    """``body`` as loops and maximal runs of other instructions, in order."""
    items: list[Instr | tuple[Instr, ...]] = []
    run: list[Instr] = []
    for ins in body:
        if isinstance(ins, Loop) and ins.block_pair_nest is None:
            if run:
                items.append(tuple(run))
                run = []
            items.append(ins)
        else:
            run.append(ins)
    if run:
        items.append(tuple(run))
    return items


def _value_needs(body: Sequence[Instr], live: frozenset[Key], wanted: frozenset[Key]) -> set[Key]:
    """The arrays whose values the reverse pass of ``body`` reads (``wanted``: its own).

    A product needs each operand's value for the other's cotangent, and both when its
    value is needed; a sum needs its terms only when its value is; a loop what its
    body needs. ``live``: the arrays that get cotangents (those made from them too).
    Anything else is conservatively needed whole. The rest need not be recomputed:
    no derivative depends on it.
    """
    live = set(live)
    for ins in body:
        if live & set(_sources((ins,))):
            live |= {f"v:{v}" for v in produced(ins)}
    need = set(wanted)
    for ins in reversed(body):
        out = any(f"v:{v}" in need for v in produced(ins))
        if isinstance(ins, Contract) and ins.block_pairs is None:
            a, b = (set(source_keys(r)) for r in ins.operands)
            if out or live & b:
                need |= a
            if out or live & a:
                need |= b
        elif isinstance(ins, Combine):
            if out:
                need |= set(_sources((ins,)))
        elif isinstance(ins, Loop) and ins.block_pair_nest is None:
            escapes = frozenset(f"v:{v}" for v in produced(ins) if f"v:{v}" in need)
            inside = {
                f"v:{v}" for i in walk(ins.body) if not isinstance(i, Term) for v in produced(i)
            }
            need |= _value_needs(ins.body, frozenset(live), escapes) - inside
        elif out or live & set(_sources((ins,))):
            need |= set(_sources((ins,)))
    return need


def _escape_shapes(loop: Loop, ctx: Ctx) -> dict[int, tuple[int, ...]]:
    """The shape of each value ``loop`` leaves (a scattered one whole along its mode)."""
    inner = {**ctx, loop.loop: (0, loop.block, None)}
    shapes = {v: block_shape(d, inner) for v, d in (*loop.sums, *loop.carries)}
    for v, p, d in loop.scatters:
        shape = list(block_shape(d, inner))
        shape[p] = loop.extent
        shapes[v] = tuple(shape)
    return shapes


def _needed(segment: tuple[Instr, ...], value: int) -> tuple[Instr, ...]:
    """The instructions of ``segment`` that ``value`` is made from, in order."""
    want, kept = {value}, []
    for ins in reversed(segment):
        if want & set(produced(ins)):
            kept.append(ins)
            want |= {int(k[2:]) for k in _sources((ins,)) if k.startswith("v:")}
    return tuple(reversed(kept))


def _made(item: Instr | tuple[Instr, ...]) -> list[int]:
    body = (item,) if isinstance(item, Loop) else item
    return [v for ins in body for v in produced(ins)]


def _segment_values(
    segment: tuple[Instr, ...],
    env: Mapping[int, Any],
    ctx: Ctx,
    run: RunSettings,
    keep: Sequence[int],
) -> Callable[[Mapping[Key, Any]], dict[int, Any]]:
    """The values ``keep`` of a run of instructions, as a function of arrays it reads."""
    # JAX differentiates these itself: loops in them (block pairs, a sequenced sum's
    # terms) keep their checkpoints
    checked = dataclasses.replace(run, remat=True)

    def values(sources: Mapping[Key, Any]) -> dict[int, Any]:
        local = dict(env)
        inner = _with(sources, local, checked)
        run_body(segment, local, ctx, inner, keep)
        return {v: local[v] for v in keep}

    return values


def _segment_reverse(
    segment: tuple[Instr, ...],
    env: Mapping[int, Any],
    ctx: Ctx,
    run: RunSettings,
    ct_out: Mapping[int, Any],
    acc: dict[Key, Any],
    sinks: Mapping[Key, Sink],
) -> dict[Key, Any]:
    """``acc`` plus the cotangents through instructions JAX differentiates itself."""
    keep = [v for v in _made(segment) if v in ct_out]
    live = [k for k in _sources(segment) if k in acc or k in sinks]
    if not keep or not live:
        return acc
    fn = _segment_values(segment, env, ctx, run, keep)
    _, pullback = jax.vjp(fn, {k: _get(k, env, run) for k in live})
    (grads,) = pullback({v: ct_out[v] for v in keep})
    acc = dict(acc)
    for k, x in grads.items():
        _route(k, x, acc, sinks, None)
    return acc


def _route(
    key: Key, x: Any, acc: dict[Key, Any], sinks: Mapping[Key, Sink], ct: dict | None
) -> None:
    """Add cotangent ``x`` of ``key``: pulled back through a sink, into ``acc`` or ``ct``."""
    if key in sinks:
        for k, y in sinks[key].pull(x).items():
            _route(k, y, acc, sinks, ct)
    elif key in acc:
        acc[key] = acc[key] + x
    else:
        assert ct is not None, f"no accumulator for {key}"
        ct[key] = ct[key] + x if key in ct else x


def _body_reverse(
    body: Sequence[Instr],
    env: Mapping[int, Any],
    ctx: Ctx,
    run: RunSettings,
    ct_kept: dict[int, Any],
    acc: dict[Key, Any],
    sinks: Mapping[Key, Sink],
    known: Mapping[int, Any] | None = None,
) -> dict[Key, Any]:
    """``acc`` plus the cotangents through one batch of a loop body (or a program's).

    The body runs forward first, making the values later items read: runs of
    instructions plainly, loops only where a derivative needs their values (zeros of
    their shape stand in for the others; ``known``: values the forward pass kept).
    Then backward, item by item: a run of instructions gets :func:`jax.vjp`'s pullback
    where its values have cotangents, a loop threads ``acc`` (and the cotangents of this
    body's values it reads, or sinks for them) through :func:`_loop_reverse`. Only
    arrays that depend on ``acc``'s keys get cotangents. A cotangent of a key in
    ``sinks`` is pulled back at once, to the arrays that value was made from.
    ``ct_kept``: the cotangents of the body's outputs.
    """
    items = _items(body)
    read_later: list[set[Key]] = [set() for _ in items]
    for j in range(len(items) - 1, 0, -1):
        read_later[j - 1] = read_later[j] | set(_sources(items[j]))
    kept = {f"v:{v}" for v in ct_kept}
    local = dict(env)
    live = set(acc) | set(sinks)
    need = _value_needs(body, frozenset(live), frozenset())
    records: list[tuple[Any, ...]] = []
    made_by: dict[Key, int] = {}
    for j, item in enumerate(items):
        made = _made(item)
        reads = [k for k in _sources(item) if k in live]
        # values are made here only for the items after that read them: a value only
        # kept gets its cotangent from outside, and XLA would drop it anyway
        used = any(f"v:{v}" in read_later[j] for v in made)
        if isinstance(item, Loop):
            if known is not None and all(v in known for v in made):
                local.update((v, known[v]) for v in made)
            elif any(f"v:{v}" in need for v in made):
                local.update(run_loop(item, local, ctx, run))
            elif used:  # read, but no derivative depends on its values
                shapes = _escape_shapes(item, ctx)
                local.update((v, jnp.zeros(shapes[v], run.dtype)) for v in made)
            records.append((item, reads))
        else:
            keep = [v for v in made if f"v:{v}" in read_later[j] or f"v:{v}" in kept]
            fn = _segment_values(item, local, ctx, run, keep)
            pullback = None
            if used and reads and keep:
                # traced once for both: its values now, its pullback in the backward pass
                primal, pullback = jax.vjp(fn, {k: _get(k, local, run) for k in reads})
                local.update(primal)
            elif used:
                local.update(fn({}))
            # else differentiated in the backward pass, if its values get cotangents there
            records.append((item, reads, keep, fn, pullback))
        if reads:
            live |= {f"v:{v}" for v in made}
            made_by.update((f"v:{v}", j) for v in made)
    ct: dict[Key, Any] = {f"v:{v}": x for v, x in ct_kept.items()}
    acc = dict(acc)

    def add(key: Key, x: Any) -> None:
        _route(key, x, acc, sinks, ct)

    made_sinks: dict[Key, Sink] = {}

    def sink(key: Key) -> Sink | None:
        """A pullback of one value made by a run of instructions of this body.

        Made once, however many loops read the value.
        """
        if key in made_sinks:
            return made_sinks[key]
        j = made_by.get(key)
        if j is None or isinstance(items[j], Loop):
            return None
        segment, reads = items[j], records[j][1]
        v = int(key.split(":", 1)[1])
        needed = _needed(segment, v)
        reads = [k for k in _sources(needed) if k in reads]
        fn = _segment_values(needed, local, ctx, run, [v])
        _, pullback = jax.vjp(fn, {k: _get(k, local, run) for k in reads})
        made_sinks[key] = Sink(lambda x: pullback({v: x})[0], tuple(reads))
        return made_sinks[key]

    for record in reversed(records):
        item, reads = record[0], record[1]
        if not reads:
            continue
        if isinstance(item, Loop):
            outs = {v: ct.pop(f"v:{v}") for v in _made(item) if f"v:{v}" in ct}
            if not outs:
                continue
            for v, shape in _escape_shapes(item, ctx).items():
                outs.setdefault(v, jnp.zeros(shape, run.dtype))
            # what the loop's batches add to: accumulators, or sinks and what they feed
            inner_sinks: dict[Key, Sink] = {}
            keys: list[Key] = []
            todo = list(reads)
            while todo:
                k = todo.pop(0)
                if k in inner_sinks or k in keys:
                    continue
                found = sinks.get(k) or (sink(k) if k not in acc else None)
                if found is None:
                    keys.append(k)
                    continue
                inner_sinks[k] = found
                todo += found.targets
            sub = {k: acc[k] if k in acc else ct.pop(k, None) for k in keys}
            sub = {
                k: jnp.zeros_like(_get(k, local, run)) if x is None else x for k, x in sub.items()
            }
            sub = _loop_reverse(item, local, ctx, run, outs, sub, inner_sinks)
            for k, x in sub.items():
                if k in acc:
                    acc[k] = x
                else:
                    ct[k] = x
        else:
            _, _, keep, fn, pullback = record
            cts = {v: ct.pop(f"v:{v}", None) for v in keep}
            if all(x is None for x in cts.values()):
                continue
            if pullback is None:
                primal, pullback = jax.vjp(fn, {k: _get(k, local, run) for k in reads})
            else:
                primal = local
            cts = {v: jnp.zeros_like(primal[v]) if x is None else x for v, x in cts.items()}
            (grads,) = pullback(cts)
            for k, x in grads.items():
                add(k, x)
    return acc
