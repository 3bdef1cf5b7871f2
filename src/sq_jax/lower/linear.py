"""A linear map with a transpose of our own, differentiable again.

:func:`linear_map` calls ``push(residuals, x)``, linear in ``x``, and tells JAX that its
transpose is ``pull(residuals, y)``. :func:`jax.custom_derivatives.linear_call` does the
same but refuses derivatives with respect to the residuals, so derivatives of second
order (``jax.hessian``, ``check_grads(order=2)``) fail through it. Here they are JAX's
own derivatives of ``push`` (and of ``pull`` for the transposed map), so a map stays
differentiable to any order, under ``vmap`` as well.

:mod:`sq_jax.lower.reverse` gives a rematerialized program its tangent through this:
forward mode runs ``push`` (JAX's JVP of the forward program), reverse mode runs ``pull``
(the backward pass written out over the program's loops).

Example:
    >>> import jax, jax.numpy as jnp
    >>> def push(r, x):  # x -> r * x
    ...     return r * x
    >>> def pull(r, y):  # its transpose
    ...     return r * y
    >>> f = lambda r, x: linear_map(push, pull, r, x)
    >>> float(jax.grad(f, argnums=1)(3.0, 2.0)), float(jax.grad(f, argnums=0)(3.0, 2.0))
    (3.0, 2.0)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from .._errors import LoweringError

__all__ = ["linear_map"]

_linear_p = Primitive("sq_linear_map")
_linear_p.multiple_results = True


def _aval(x: Any) -> jax.core.ShapedArray:
    return jax.core.ShapedArray(jnp.shape(x), jnp.result_type(x))


def linear_map(
    push: Callable[[Any, Any], Any],
    pull: Callable[[Any, Any], Any],
    residuals: Any,
    x: Any,
    out_like: Any = None,
) -> Any:
    """``push(residuals, x)``, linear in ``x``, transposed by ``pull(residuals, ·)``.

    ``pull(residuals, y)`` must return the pytree structure of ``x`` for ``y`` of the
    structure of ``push``'s output, and be the transpose of ``push`` in ``x``.
    ``out_like``: arrays shaped as ``push``'s output, when the caller has them (else
    ``push`` is traced once to find out; under reverse mode it is never run).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> a = jnp.array([[1.0, 2.0], [3.0, 4.0]])
        >>> def f(x):  # x -> a @ x, its transpose y -> a.T @ y
        ...     return linear_map(lambda r, x: r @ x, lambda r, y: r.T @ y, a, x)
        >>> jax.grad(lambda x: f(x).sum())(jnp.ones(2)).tolist()  # a.T @ [1, 1]
        [4.0, 6.0]
    """
    res_flat, res_tree = jax.tree.flatten(residuals)
    x_flat, x_tree = jax.tree.flatten(x)
    out_shape = jax.eval_shape(push, residuals, x) if out_like is None else out_like
    out_avals = tuple(_aval(s) for s in jax.tree.leaves(out_shape))
    out_tree = jax.tree.structure(out_shape)
    n = len(res_flat)

    def push_flat(*args: Any) -> list[Any]:
        r = jax.tree.unflatten(res_tree, args[:n])
        return jax.tree.leaves(push(r, jax.tree.unflatten(x_tree, args[n:])))

    def pull_flat(*args: Any) -> list[Any]:
        r = jax.tree.unflatten(res_tree, args[:n])
        got = pull(r, jax.tree.unflatten(out_tree, args[n:]))
        if jax.tree.structure(got) != x_tree:
            raise LoweringError(
                f"linear_map: pull returned cotangents structured as "
                f"{jax.tree.structure(got)}, expected the structure of x, {x_tree}; "
                "make pull return one cotangent per leaf of x"
            )
        return jax.tree.leaves(got)

    outs = _linear_p.bind(
        *res_flat,
        *x_flat,
        push=push_flat,
        pull=pull_flat,
        n_res=n,
        out_avals=out_avals,
        in_avals=tuple(_aval(v) for v in x_flat),
    )
    return jax.tree.unflatten(out_tree, outs)


def _impl(*args: Any, push: Callable, **_: Any) -> list[Any]:
    return push(*args)


def _abstract(*_: Any, out_avals: tuple[Any, ...], **__: Any) -> tuple[Any, ...]:
    return out_avals


def _jvp(primals: list[Any], tangents: list[Any], **params: Any) -> tuple[Any, Any]:
    """Linear in ``x``: the map again on ``dx``; in the residuals: JAX's JVP of ``push``."""
    n = params["n_res"]
    res, x = primals[:n], primals[n:]
    dres, dx = tangents[:n], tangents[n:]
    out = _linear_p.bind(*primals, **params)
    parts = []
    if any(type(t) is not ad.Zero for t in dx):
        dx = [ad.instantiate_zeros(t) for t in dx]
        parts.append(_linear_p.bind(*res, *dx, **params))
    if any(type(t) is not ad.Zero for t in dres):
        dres = [ad.instantiate_zeros(t) for t in dres]
        push = params["push"]
        parts.append(jax.jvp(lambda *r: push(*r, *x), tuple(res), tuple(dres))[1])
    if not parts:
        return out, [ad.Zero(a.to_tangent_aval()) for a in params["out_avals"]]
    if len(parts) == 1:
        return out, list(parts[0])
    return out, [a + b for a, b in zip(*parts, strict=True)]


def _transpose(cts: list[Any], *args: Any, **params: Any) -> list[Any]:
    """The transposed map: ``pull`` runs, with ``push`` as its own transpose."""
    n = params["n_res"]
    res = args[:n]
    assert not any(ad.is_undefined_primal(r) for r in res), "residuals are never linear"
    cts = [
        jnp.zeros(a.shape, a.dtype) if type(ct) is ad.Zero else ct
        for ct, a in zip(cts, params["out_avals"], strict=True)
    ]
    back = _linear_p.bind(
        *res,
        *cts,
        push=params["pull"],
        pull=params["push"],
        n_res=n,
        out_avals=params["in_avals"],
        in_avals=params["out_avals"],
    )
    return [None] * n + list(back)


def _batch(args: list[Any], dims: list[Any], **params: Any) -> tuple[list[Any], list[int]]:
    """Under ``vmap``: every argument batched along its first mode, the maps vmapped."""
    size = next(x.shape[d] for x, d in zip(args, dims, strict=True) if d is not None)
    args = [
        jnp.broadcast_to(x, (size, *jnp.shape(x))) if d is None else jnp.moveaxis(x, d, 0)
        for x, d in zip(args, dims, strict=True)
    ]

    def batched(avals: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(jax.core.ShapedArray((size, *a.shape), a.dtype) for a in avals)

    outs = _linear_p.bind(
        *args,
        push=jax.vmap(params["push"]),
        pull=jax.vmap(params["pull"]),
        n_res=params["n_res"],
        out_avals=batched(params["out_avals"]),
        in_avals=batched(params["in_avals"]),
    )
    return list(outs), [0] * len(outs)


_linear_p.def_impl(_impl)
_linear_p.def_abstract_eval(_abstract)
ad.primitive_jvps[_linear_p] = _jvp
ad.primitive_transposes[_linear_p] = _transpose
batching.primitive_batchers[_linear_p] = _batch
mlir.register_lowering(_linear_p, mlir.lower_fun(_impl, multiple_results=True))
