"""The compiled program: a callable ``equinox.Module`` around one ``jax.jit``.

A :class:`Program` holds the scheduled forest (``.schedule``; ``str()`` is the dump),
its instruction tree, and one jit-compiled function that binds the inputs (by block key
or full tensor, see :mod:`sq_jax.forest.inputs`) and runs the instruction tree. Calling
it again with new arrays of the same shapes and dtypes reuses the compiled executable.

Example:
    >>> import numpy as np, sq_jax as sq
    >>> from sq_jax._pipeline import compile
    >>> prog = compile("E = f{i1;a1} t{a1;i1}", sq.Spaces(i=2, a=5), batch={"a": 2})
    >>> float(prog({"f": np.ones((7, 7)), "t{a;i}": np.ones((5, 2))})["E"])
    10.0
    >>> prog.flops, prog.peak_bytes
    (20, 8)
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax

from .._errors import InputError
from ..forest.inputs import bind_inputs, check_input_mapping
from ..forest.nodes import Forest
from ..schedule import ScheduledForest
from ..schedule.cost import schedule_flops
from .aot import AotJit
from .interpret import run_lowered
from .ir import LoweredProgram
from .memory import memory_model
from .pairs import pair_shares

if TYPE_CHECKING:
    from .shard import ShardPlan

__all__ = ["PreparedProgram", "Program", "make_program"]


def _evaluate(
    lowered: LoweredProgram,
    forest: Forest,
    remat: bool,
    inputs: Mapping[str, Any],
    padded: Mapping[str, Any] | None = None,
    shard: ShardPlan | None = None,
) -> dict[str, Any]:
    import jax.numpy as jnp
    from jax import lax

    # split blocks arrive zero-padded (see Program._place): bind the unpadded view
    whole = dict(inputs)
    for s in () if shard is None else shard.inputs:
        if padded and s.key in padded:
            whole[s.key] = lax.slice_in_dim(padded[s.key], 0, s.extent, axis=s.position)
    blocks = bind_inputs(forest, whole, xp=jnp)
    return run_lowered(lowered, blocks, remat=remat, shard=shard, padded=padded)


def _evaluate_prepared(
    rest: LoweredProgram,
    forest: Forest,
    remat: bool,
    fixed: Mapping[str, Any],
    prepared: Mapping[str, Any],
    inputs: Mapping[str, Any],
) -> dict[str, Any]:
    import jax.numpy as jnp

    blocks = bind_inputs(forest, {**fixed, **inputs}, xp=jnp)
    return run_lowered(rest, {**blocks, **prepared}, remat=remat)


class Program(eqx.Module):
    """A compiled set of equations: ``program(inputs) -> {name: jax.Array}``.

    Build it with :func:`sq_jax.compile`. Differentiable with ``jax.grad``/``jvp``/``vjp``
    and usable inside other jitted functions.
    """

    schedule: ScheduledForest = eqx.field(static=True)
    """Every stage of the scheduler; ``str(program.schedule)`` is the schedule dump."""
    lowered: LoweredProgram = eqx.field(static=True)
    """The instruction tree the jitted function runs."""
    remat: bool = eqx.field(static=True)
    """Whether reverse mode recomputes batches (:mod:`sq_jax.lower.reverse`)."""
    flops: int = eqx.field(static=True)
    """Static FLOP count, recomputation across batches included (accumulator adds not):
    :func:`sq_jax.schedule.cost.schedule_flops`, products over symmetric pairs at their
    packed share (:func:`sq_jax.lower.pairs.pair_shares`)."""
    peak_bytes: int = eqx.field(static=True)
    """Static peak of the intermediates (inputs excluded), from the schedule's peak
    profile (SeQuant's model: one footprint per value)."""
    aot: Any = eqx.field(static=True)
    """The compiled function of the inputs dict (:class:`sq_jax.lower.aot.AotJit`): at
    top level compiled ahead of time with sq_jax's XLA options; ``aot.jitted`` is the
    plain ``jax.jit``."""
    memory_bytes: int = eqx.field(static=True, default=0)
    """Predicted XLA temporaries + outputs of the compiled program: the peak of
    :func:`sq_jax.lower.memory.memory_model` (operand copies, loop buffers, fused sums
    included; inputs excluded). Compare with :meth:`memory_analysis`."""
    mesh: Any = eqx.field(static=True, default=None)
    """The 1-D ``jax.sharding.Mesh`` the outermost loops are split over, or ``None``."""
    split_inputs: tuple[Any, ...] = eqx.field(static=True, default=())
    """With a mesh, the input blocks held split over it
    (:class:`sq_jax.lower.shard.ShardedInput`); the rest are replicated."""
    peak_bytes_per_device: int = eqx.field(static=True, default=0)
    """Static peak per device (``peak_bytes`` without a mesh; see
    :func:`sq_jax.lower.shard.peak_bytes_per_device`)."""

    def __call__(self, inputs: Mapping[str, Any]) -> dict[str, jax.Array]:
        """Evaluate the equations.

        Args:
            inputs: arrays by block key (``"g{i,i;a,a}"``), by label for a full tensor
                (``"g"``), or by variable name.

        Returns:
            One array per equation name, modes in left-hand-side order.

        Raises:
            InputError: a missing, unknown, mis-shaped or non-numeric input.
        """
        return self.aot(*self._place(_check_inputs(inputs)))

    @property
    def jitted(self) -> Any:
        """The plain ``jax.jit`` of the program (for nesting, ``.lower()`` ...).

        It takes the inputs dict; with a mesh, the pair ``(whole, split)`` that
        :meth:`_place` builds (split blocks zero-padded).
        """
        return self.aot.jitted

    def without_pair_symmetry(self) -> Program:
        """This program with every product computed plainly (no packed pairs).

        For inputs that may lack the symmetries they declare: a program compiled with
        ``pair_symmetry=True`` is exact only on inputs that have them
        (:mod:`sq_jax.lower.pairs`). Returns ``self`` when nothing is packed.

        Example:
            >>> import sq_jax as sq
            >>> text = "R{a1,a2;i1,i2} = g{a1,a2;a3,a4} t{a3,a4;i1,i2}"
            >>> prog = sq.compile(text, sq.Spaces(i=10, a=40), pair_symmetry=True)
            >>> prog.flops, prog.without_pair_symmetry().flops
            (281600000, 512000000)
        """
        from dataclasses import replace

        from .instructions import lower_schedule
        from .shard import make_shard_plan

        forest = self.schedule.annotated.forest
        if not forest.pair_symmetry:
            return self
        plain = replace(forest, pair_symmetry=False)
        sf = replace(self.schedule, annotated=replace(self.schedule.annotated, forest=plain))
        shard = None if self.mesh is None else make_shard_plan(self.mesh, None)
        return make_program(sf, lower_schedule(sf), remat=self.remat, shard=shard)

    def prepare(self, fixed: Mapping[str, Any]) -> PreparedProgram:
        """This program with the inputs ``fixed`` bound and what reads only them done once.

        For a loop that calls the program many times with the same integrals (an
        amplitude solve): the values computed from ``fixed`` alone and the copies of
        fixed blocks the products want (transposed, or packed for products over
        symmetric pairs) are computed here, once (:mod:`sq_jax.lower.prepare`); each
        call of the returned program does the rest. They are held as long as it lives
        (:attr:`PreparedProgram.prepared_bytes`). Operands cut to a loop's batch are not
        copied whole, so a memory-budgeted plan keeps its bound. A program split over a
        device mesh is returned with ``fixed`` bound and nothing computed ahead.

        Args:
            fixed: inputs as :meth:`__call__` takes them (block keys, full tensors,
                variables) that stay the same between calls.

        Returns:
            A :class:`PreparedProgram`: called with the other inputs, it returns what
            this program returns; differentiable in those inputs.

        Raises:
            InputError: a fixed input the program does not read, or a malformed one.

        Example:
            >>> import numpy as np, sq_jax as sq
            >>> prog = sq.compile("R{a1;i1} = g{a2,i1;a1,i2} t{a2;i2}", sq.Spaces(i=2, a=3))
            >>> g, t = np.random.default_rng(0).random((3, 2, 3, 2)), np.ones((3, 2))
            >>> step = prog.prepare({"g{a,i;a,i}": g})
            >>> step.prepared_keys  # g in the layout its product reads, made once
            ('g{a,i;a,i}.T(0,3,1,2)',)
            >>> bool(np.allclose(step({"t{a;i}": t})["R"], np.einsum("cidj,cj->di", g, t)))
            True
        """
        import jax.numpy as jnp

        from .prepare import run_prologue, split_prologue

        forest = self.schedule.annotated.forest
        checked = _check_inputs(fixed)
        if self.mesh is not None:  # one call runs the program whole, placed on its mesh
            whole = AotJit(partial(_evaluate_whole, self))
            return PreparedProgram(self, None, checked, {}, whole, self.memory_bytes)
        blocks = bind_inputs(forest, checked, xp=jnp, partial=True)
        prologue, rest = split_prologue(self.lowered, set(blocks))
        prepared = AotJit(partial(run_prologue, prologue))(blocks) if prologue.keys else {}
        fn = AotJit(partial(_evaluate_prepared, rest, forest, self.remat))
        return PreparedProgram(self, rest, blocks, prepared, fn, memory_model(rest).peak())

    def compiled(self, inputs: Mapping[str, Any]) -> Any:
        """The executable for these inputs' shapes (what a top-level call runs).

        Compiled with sq_jax's XLA options; ``.memory_analysis()`` gives XLA's figures.

        Example:
            >>> import numpy as np, sq_jax as sq
            >>> prog = sq.compile("R{a1;i1} = f{a1;a2} t{a2;i1}", sq.Spaces(i=50, a=400))
            >>> x = {"f{a;a}": np.ones((400, 400)), "t{a;i}": np.ones((400, 50))}
            >>> ma = prog.compiled(x).memory_analysis()
            >>> ma.temp_size_in_bytes + ma.output_size_in_bytes, prog.memory_bytes
            (160000, 160064)
        """
        return self.aot.compiled(*self._place(_check_inputs(inputs)))

    def _place(self, inputs: dict[str, Any]) -> tuple[Any, ...]:
        """The jitted function's arguments: ``(inputs,)``, or with a mesh ``(whole, split)``.

        With a mesh, each block of ``shard.inputs`` given under its block key with its
        expected shape is zero-padded along its split mode and placed split over the
        mesh (each device holds its share); every other input is placed replicated.
        """
        if self.mesh is None:
            return (inputs,)
        import jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec

        whole, split = dict(inputs), {}
        for s in self.split_inputs:
            x = inputs.get(s.key)
            if x is None or not hasattr(x, "shape") or jnp.ndim(x) <= s.position:
                continue
            if x.shape[s.position] != s.extent:
                continue  # a wrong shape: bind_inputs reports it
            x = s.pad(jnp.asarray(x))
            spec = s.spec(x.ndim, self.mesh.axis_names[0])
            split[s.key] = jax.device_put(x, NamedSharding(self.mesh, spec))
            del whole[s.key]
        return jax.device_put(whole, NamedSharding(self.mesh, PartitionSpec())), split

    def memory_analysis(self, inputs: Mapping[str, Any]) -> Any:
        """XLA's memory figures of the compiled program for these inputs' shapes.

        Returns the object of ``jax.jit(f).lower(inputs).compile().memory_analysis()``
        (``temp_size_in_bytes``, ``argument_size_in_bytes``, ``output_size_in_bytes`` …).
        With a mesh, the figures are per device.
        """
        return self.compiled(inputs).memory_analysis()

    def plot_peak_profile(self, path: Any = None, **options: Any) -> Any:
        """Plot the static peak profile (see :func:`sq_jax.viz.plot_peak_profile`).

        Example:
            >>> import sq_jax as sq
            >>> prog = sq.compile("E = f{i1;a1} t{a1;i1}", sq.Spaces(i=2, a=3))
            >>> type(prog.plot_peak_profile()).__name__
            'Figure'
        """
        from ..viz import plot_peak_profile

        return plot_peak_profile(self.schedule, path, **options)

    def plot_loop_nest(self, path: Any = None, **options: Any) -> Any:
        """Draw the loop-nest structure of the schedule (see :func:`sq_jax.viz.plot_loop_nest`).

        Example:
            >>> import sq_jax as sq
            >>> prog = sq.compile("E = f{i1;a1} t{a1;i1}", sq.Spaces(i=2, a=4), batch={"a": 2})
            >>> type(prog.plot_loop_nest()).__name__
            'Figure'
        """
        from ..viz import plot_loop_nest

        return plot_loop_nest(self.schedule, path, **options)

    def make_jaxpr(self, inputs: Mapping[str, Any]) -> Any:
        """The closed jaxpr of the program for these inputs (for inspection and tests)."""
        return jax.make_jaxpr(self.jitted)(*self._place(_check_inputs(inputs)))


class PreparedProgram(eqx.Module):
    """A :class:`Program` with some inputs bound and what reads only them computed once.

    Made by :meth:`Program.prepare`; ``prepared(inputs)`` takes the other inputs.
    Differentiable in them (``jax.jvp``/``vjp``/``grad``), not in the bound ones.
    """

    program: Program = eqx.field(static=True)
    """The program it runs."""
    rest: LoweredProgram | None = eqx.field(static=True)
    """The instruction tree each call runs (:func:`sq_jax.lower.prepare.split_prologue`);
    ``None`` for a program split over a mesh (it runs ``program`` whole)."""
    fixed: dict[str, Any]
    """The bound inputs, by block key (as given, for a program over a mesh)."""
    prepared: dict[str, Any]
    """The arrays computed once, by key (:attr:`sq_jax.lower.prepare.Prologue.keys`)."""
    aot: Any = eqx.field(static=True)
    """The compiled function of ``(fixed, prepared, inputs)``."""
    memory_bytes: int = eqx.field(static=True)
    """Predicted XLA temporaries + outputs of one call (bound and prepared arrays are
    inputs, not counted; compare :attr:`Program.memory_bytes`)."""

    @property
    def prepared_keys(self) -> tuple[str, ...]:
        """The keys of the arrays computed once."""
        return tuple(self.prepared)

    @property
    def prepared_bytes(self) -> int:
        """Bytes held by the arrays computed once."""
        return sum(int(x.size) * x.dtype.itemsize for x in self.prepared.values())

    @property
    def jitted(self) -> Any:
        """The plain ``jax.jit`` of one call: takes ``(fixed, prepared, inputs)``."""
        return self.aot.jitted

    def __call__(self, inputs: Mapping[str, Any]) -> dict[str, jax.Array]:
        """Evaluate with the bound inputs and ``inputs`` (the others).

        Raises:
            InputError: an input that was bound by :meth:`Program.prepare`, or any error
                :meth:`Program.__call__` reports.
        """
        checked = _check_inputs(inputs)
        bound = sorted(k for k in checked if k in self.fixed)
        if bound:
            raise InputError(
                f"input(s) {', '.join(map(repr, bound))} were bound by Program.prepare(); "
                "pass only the other inputs, or prepare again with new fixed inputs."
            )
        if self.rest is None:
            return self.program({**self.fixed, **checked})
        return self.aot(self.fixed, self.prepared, checked)

    def compiled(self, inputs: Mapping[str, Any]) -> Any:
        """The executable of one call for these inputs' shapes (``.memory_analysis()``)."""
        if self.rest is None:
            return self.program.compiled({**self.fixed, **inputs})
        return self.aot.compiled(self.fixed, self.prepared, _check_inputs(inputs))


def _evaluate_whole(
    program: Program, fixed: dict[str, Any], _prepared: dict[str, Any], inputs: dict[str, Any]
) -> dict[str, Any]:
    """One call of a program over a mesh with its bound inputs (nothing prepared)."""
    return program({**fixed, **inputs})


def _check_inputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    check_input_mapping(inputs)  # before jit: keys and dtypes jax cannot trace
    out = {}
    for name, value in inputs.items():
        if not (hasattr(value, "shape") and hasattr(value, "dtype")) and not isinstance(
            value, (int, float, complex)
        ):
            raise InputError(
                f"input {name!r} is a {type(value).__name__}, not an array; pass a NumPy or "
                "JAX array (or a Python number for a scalar variable)."
            )
        out[name] = value
    return out


def make_program(
    sf: ScheduledForest,
    lowered: LoweredProgram,
    *,
    remat: bool = False,
    shard: ShardPlan | None = None,
) -> Program:
    """Wrap a lowered schedule into a :class:`Program` (one ``jax.jit``).

    With ``shard`` (:func:`sq_jax.lower.shard.make_shard_plan`), the root loops are
    split over its mesh; input blocks read only in batches of those loops are held split
    along the mesh axis (:func:`sq_jax.lower.shard.sharded_inputs`), the rest replicated.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.plan import BatchPlan
        >>> from sq_jax.schedule import schedule_forest
        >>> from sq_jax.lower.instructions import lower_schedule
        >>> f = sq.build_forest(sq.parse("E = f{i1;i1}"), sq.Spaces(i=3))
        >>> sf = schedule_forest(f, BatchPlan())
        >>> prog = make_program(sf, lower_schedule(sf))
        >>> import numpy as np
        >>> float(prog({"f{i;i}": np.eye(3)})["E"])
        3.0
    """
    if (remat or shard is not None) and any(lp.adds for lp in lowered.loops()):
        from .instructions import lower_schedule  # (it imports this module)

        # remat's backward pass and the loops split over devices stack pieces whole
        lowered = lower_schedule(sf, adds=False)
    run = partial(_evaluate, lowered, sf.annotated.forest, remat)
    if shard is None:
        fn, per_device = AotJit(run), sf.peak.peak_bytes
    else:
        from dataclasses import replace

        from .shard import peak_bytes_per_device, root_nests_plain, sharded_inputs

        lowered = root_nests_plain(lowered)  # each device runs a share of a root loop
        run = partial(_evaluate, lowered, sf.annotated.forest, remat)
        shard = replace(shard, inputs=sharded_inputs(lowered, shard.size))
        fn = AotJit(partial(run, shard=shard))
        per_device = peak_bytes_per_device(sf, lowered, shard.size)
    return Program(
        schedule=sf,
        lowered=lowered,
        remat=remat,
        flops=schedule_flops(sf, pair_shares(lowered)),
        peak_bytes=sf.peak.peak_bytes,
        memory_bytes=memory_model(lowered).peak(),
        aot=fn,
        mesh=None if shard is None else shard.mesh,
        split_inputs=() if shard is None else shard.inputs,
        peak_bytes_per_device=per_device,
    )
