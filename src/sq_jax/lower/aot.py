"""Ahead-of-time compilation with sq_jax's XLA options, for top-level calls.

On CPU, XLA's default instruction scheduler favours concurrency: it prepares operands
(slices, transposes) long before their products and keeps them alive, which measured
up to 1.6x the memory of the schedule's order on batched CCSD, at no gain in speed. The
memory-minimising scheduler keeps XLA close to :mod:`sq_jax.lower.memory`'s model.
XLA's newer CPU fusion emitters are turned off: sq_jax programs are many small fusions
(slices, transposes, adds around the products), which the older emitters compile faster
(W3's CCSD programs, ``bench/bench_xla_options.py``: unbatched 1.4-1.7x, at a quarter
of the memory 1.2-1.5x, at an eighth 0.8-1.1x) at the same run time within the
machine's noise and with the same buffers (52 of the 53 programs whose memory the tests
read; the other held 9% less).
XLA options can only be given to a top-level compilation (not to a ``jax.jit`` nested
in another), so :class:`AotJit` compiles ``jax.jit(fn)`` ahead of time with them when
called with concrete arrays, once per argument signature, and calls the plain
``jax.jit(fn)`` when traced (inside another ``jit``, ``grad``, ``vmap`` ...). A compile
that only reads XLA's memory figures (the memory budget's check) uses
:func:`measure_options`: the same buffers, a faster compile, code not fit to run.

Example:
    >>> import jax.numpy as jnp
    >>> double = AotJit(lambda x: 2 * x)
    >>> float(double(jnp.ones(()))), float(jax.jit(double)(jnp.ones(())))
    (2.0, 2.0)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

__all__ = ["CPU_OPTIONS", "MEASURE_OPTIONS", "AotJit", "compiler_options", "measure_options"]


CPU_OPTIONS: dict[str, str | bool] = {
    "xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED",
    "xla_cpu_use_fusion_emitters": False,
}
"""The XLA options sq_jax asks for on CPU (those the installed XLA knows are used)."""


MEASURE_OPTIONS: dict[str, str | bool | int] = {"xla_backend_optimization_level": 0}
"""Added to :data:`CPU_OPTIONS` where a program is compiled only to read its memory
(:func:`measure_options`): XLA assigns its buffers before LLVM generates the code, so its
temporaries and outputs are the same at LLVM's lowest optimization level, and the
compile is 2-4x faster (W3's batched CCSD programs: H2O/cc-pVDZ 3.4-6.8 s to 1.4-3.2 s,
benzene/cc-pVDZ 4.5-4.9 s to 1.1-1.6 s, the same bytes), but the code runs 4x slower
(not for running)."""


def measure_options() -> dict[str, str | bool | int] | None:
    """XLA options for a compile that only reads XLA's memory figures (``None``: none).

    :func:`compiler_options` with :data:`MEASURE_OPTIONS` where XLA accepts them;
    ``None`` (measure with the running options, and keep that executable) on other
    backends, and where ``XLA_FLAGS`` already compile everything at the lowest level
    (the test run does): a measuring compile would then cost a running one.

    Example:
        >>> import os
        >>> options = measure_options()  # on CPU
        >>> "--xla_backend_optimization_level=0" in os.environ.get("XLA_FLAGS", "") or (
        ...     options["xla_backend_optimization_level"] == 0
        ... )
        True
    """
    options = compiler_options()
    if options is None or "--xla_backend_optimization_level=0" in os.environ.get("XLA_FLAGS", ""):
        return None
    return {**options, **_accepted_measure_options()}


@functools.cache
def _accepted_measure_options() -> dict[str, str | bool | int]:
    return _accepted(MEASURE_OPTIONS)


def compiler_options() -> dict[str, str | bool] | None:
    """XLA options for sq_jax programs on the default backend (``None``: none).

    On CPU, the options of :data:`CPU_OPTIONS` that the installed XLA accepts: XLA
    refuses a compilation that names an option it does not know, and options come and
    go between releases (XLA plans to retire the emitters the second one selects).

    Example:
        >>> for name, value in compiler_options().items():  # on CPU
        ...     print(name, value)
        xla_cpu_scheduler_type CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED
        xla_cpu_use_fusion_emitters False
    """
    if jax.default_backend() != "cpu":
        return None
    return _accepted_cpu_options()


@functools.cache
def _accepted_cpu_options() -> dict[str, str | bool]:
    """:data:`CPU_OPTIONS` less those XLA refuses, tried once each on a tiny program."""
    return _accepted(CPU_OPTIONS)  # type: ignore[return-value]


def _accepted(options: dict[str, str | bool | int]) -> dict[str, str | bool | int]:
    """``options`` less those XLA refuses, tried once each on a tiny program."""
    probe = jax.jit(lambda x: x + 1).lower(1.0)
    accepted = {}
    for name, value in options.items():
        try:
            probe.compile({name: value})
        except jax.errors.JaxRuntimeError as err:
            if "No such compile option" not in str(err):
                raise
            continue  # this XLA does not know the option: compile without it
        accepted[name] = value
    return accepted


def _signature(leaf: Any) -> tuple:
    if isinstance(leaf, (bool, int, float, complex)):
        return (type(leaf),)
    dtype = getattr(leaf, "dtype", None)
    dtype = np.asarray(leaf).dtype if dtype is None else dtype
    return (np.shape(leaf), dtype, getattr(leaf, "weak_type", False))


def _key(args: tuple) -> tuple:
    leaves, tree = jax.tree.flatten(args)
    return (tree, *map(_signature, leaves))


class AotJit:
    """``jax.jit(fn, **jit_kwargs)``, compiled with :func:`compiler_options` at top level."""

    def __init__(self, fn: Callable[..., Any], **jit_kwargs: Any) -> None:
        self.jitted = jax.jit(fn, **jit_kwargs)
        self._executables: dict[tuple, Any] = {}
        self._lowered: dict[tuple, Any] = {}

    def lowered(self, *args: Any) -> Any:
        """``jax.jit(fn).lower(*args)``, traced once per argument signature.

        A program compiled first only to read its memory
        (:func:`~sq_jax.budget.xla_bytes`) is not traced again for running.
        """
        key = _key(args)
        low = self._lowered.get(key)
        if low is None:
            low = self._lowered[key] = self.jitted.lower(*args)
        return low

    def compiled(self, *args: Any) -> Any:
        """The executable for these arguments' shapes and dtypes (compiled once)."""
        key = _key(args)
        exe = self._executables.get(key)
        if exe is None:
            exe = self._executables[key] = self.lowered(*args).compile(compiler_options())
            self._lowered.pop(key, None)  # compiled: its trace is not needed again
        return exe

    def __call__(self, *args: Any) -> Any:
        """Call the ahead-of-time executable, or the plain ``jax.jit`` when traced."""
        leaves = jax.tree.leaves(args)
        if compiler_options() is None or any(isinstance(x, jax.core.Tracer) for x in leaves):
            return self.jitted(*args)
        return self.compiled(*args)(*args)
