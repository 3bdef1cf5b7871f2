"""Naming and binding of input tensors.

Every leaf of the forest reads one **block** of an input tensor. A block is named by its
*block key*: the tensor's label followed by the index spaces of its slots, grouped like
the tensor's own brace groups::

    g{i_1,i_2;a_1,a_2}   reads block  "g{i,i;a,a}"
    t{a_1;i_1}           reads block  "t{a;i}"
    t{a_1,a_2;i_1,i_2}   reads block  "t{a,a;i,i}"
    B{p_1,p_3;;Κ_1}      reads block  "B{p,p;;Κ}"

An input can be given in two ways:

* **as the block itself**, under its block key, with exactly the block's shape; or
* **as the full tensor**, under the bare label (``"g"``): each axis spans a space that
  contains the slot's space (the slot's own space or a union such as ``p`` = ``i`` then
  ``a``), recognised by its length, and the block is cut out of it.

The reserved label ``Δ`` is not an input: a leaf ``Δ{…}`` is an energy denominator
generated inside the program from the 1-D orbital energies ``ε`` (blocks ``"ε{i}"``,
``"ε{a}"``, or the whole vector under ``"ε"``); see :mod:`sq_jax.forest.denominators`.

A block and the full tensor of the same label cannot both be given (which one to read
would be ambiguous): an :class:`~sq_jax.InputError` says to pass one. Scalars (variables
such as ``ω``) are given under their name. Tensors with one label and two signatures (``t{a;i}`` and
``t{a,a;i,i}``) are distinct inputs; give them as blocks or as full tensors of the right
rank.

Example:
    >>> import numpy as np, sq_jax as sq
    >>> from sq_jax.forest.inputs import bind_inputs, input_specs
    >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=3))
    >>> [s.block_key for s in input_specs(forest)]
    ['f{i;a}', 't{a;i}']
    >>> blocks = bind_inputs(forest, {"f": np.eye(5), "t{a;i}": np.ones((3, 2))})
    >>> blocks["f{i;a}"].shape
    (2, 3)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import InputError
from ..expr.nodes import Tensor, Variable
from ..expr.spaces import Spaces
from .denominators import DENOMINATOR, ENERGY, denominator_slots, energy_key, is_denominator
from .nodes import EvalNode, Forest, NodeKind

__all__ = [
    "InputSpec",
    "bind_inputs",
    "block_key",
    "check_input_mapping",
    "input_names",
    "input_specs",
]


def block_key(tensor: Tensor) -> str:
    """The block key of a leaf tensor: its label and the spaces of its slots.

    Example:
        >>> import sq_jax as sq
        >>> block_key(sq.parse_expr("B{p1,p3;;K1}"))
        'B{p,p;;Κ}'
    """
    groups = [",".join(ix.space for ix in tensor.bra)]
    if tensor.ket or tensor.aux:
        groups.append(",".join(ix.space for ix in tensor.ket))
    if tensor.aux:
        groups.append(",".join(ix.space for ix in tensor.aux))
    return f"{tensor.label}{{{';'.join(groups)}}}"


@dataclass(frozen=True, slots=True)
class InputSpec:
    """One input block a forest reads (or one scalar variable).

    Attributes:
        label: the tensor label or variable name.
        block_key: the key of the block (the variable name for a scalar).
        slot_spaces: the index space of each slot, in array order.
        shape: the block's shape.
        example: a leaf that reads it, as text (for messages).
    """

    label: str
    block_key: str
    slot_spaces: tuple[str, ...]
    shape: tuple[int, ...]
    example: str

    @property
    def is_scalar_variable(self) -> bool:
        """Whether this is a scalar variable rather than a tensor block."""
        return self.block_key == self.label and not self.slot_spaces


def _walk_leaves(forest: Forest):
    """Yield every leaf/scalar node once per key (iterative; chains can be deep)."""
    seen: set[str] = set()
    stack: list[EvalNode] = [r.node for r in reversed(forest.roots)]
    visited: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        if node.is_leaf:
            if node.key not in seen:
                seen.add(node.key)
                yield node
            continue
        stack.append(node.right)  # type: ignore[arg-type]
        stack.append(node.left)  # type: ignore[arg-type]


def _variables_of(node: EvalNode) -> list[Variable]:
    sc = node.scalar
    if isinstance(sc, Variable):
        return [sc]
    base = getattr(sc, "base", None)
    return [base] if isinstance(base, Variable) else []


def input_specs(forest: Forest) -> tuple[InputSpec, ...]:
    """Every input block (and scalar variable) the forest reads, in first-use order.

    Example:
        >>> import sq_jax as sq
        >>> f = sq.build_forest(sq.parse("R{a1;i1} = ω f{a1;i1}"), sq.Spaces(i=2, a=3))
        >>> [(s.block_key, s.shape) for s in input_specs(f)]
        [('f{a;i}', (3, 2)), ('ω', ())]
    """
    specs: dict[str, InputSpec] = {}
    for node in _walk_leaves(forest):
        if node.kind is NodeKind.LEAF:
            tensor = node.tensor
            assert tensor is not None
            key = block_key(tensor)
            if is_denominator(tensor):  # generated: reads the energies of its spaces
                for space, _ in denominator_slots(key):
                    ekey = energy_key(space)
                    if ekey not in specs:
                        shape = (forest.spaces.extent(space),)
                        specs[ekey] = InputSpec(ENERGY, ekey, (space,), shape, str(tensor))
                continue
            if key not in specs:
                spaces = tuple(ix.space for ix in tensor.indices)
                shape = tuple(forest.spaces.extent(s) for s in spaces)
                specs[key] = InputSpec(tensor.label, key, spaces, shape, str(tensor))
        else:
            for var in _variables_of(node):
                if var.name not in specs:
                    specs[var.name] = InputSpec(var.name, var.name, (), (), var.name)
    return tuple(specs.values())


def input_names(forest: Forest) -> frozenset[str]:
    """Every name an input of ``forest`` may be given under: labels and block keys.

    Example:
        >>> import sq_jax as sq
        >>> f = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=3))
        >>> sorted(input_names(f))
        ['f', 'f{i;a}', 't', 't{a;i}']
    """
    return frozenset(n for s in input_specs(forest) for n in (s.label, s.block_key))


def _full_tensor_block(spec: InputSpec, array: Any, spaces: Spaces, xp: Any) -> Any:
    """Cut ``spec``'s block out of a full tensor given under the bare label."""
    shape = tuple(array.shape)
    if len(shape) != len(spec.slot_spaces):
        raise InputError(
            f"input {spec.label!r} has rank {len(shape)} (shape {shape}), but leaf "
            f"`{spec.example}` needs rank {len(spec.slot_spaces)}. Pass the block as "
            f"inputs[{spec.block_key!r}] with shape {spec.shape}, or a full tensor of "
            f"rank {len(spec.slot_spaces)}."
        )
    index: list[slice] = []
    for axis, (space, length) in enumerate(zip(spec.slot_spaces, shape, strict=True)):
        candidates = [c for c in spaces.containers(space) if spaces.has_extent(c)]
        fits = [c for c in candidates if spaces.extent(c) == length]
        match = fits[0] if fits else None
        if len({spaces.offset_in(space, c) for c in fits}) > 1:
            where = ", ".join(f"{c} (at {spaces.offset_in(space, c)})" for c in fits)
            why = (
                f"which fits several spaces that hold slot {axis}'s space {space!r} at "
                f"different places: {where}."
            )
            raise _axis_error(spec, axis, length, why)
        if match is None:
            options = ", ".join(f"{c} ({spaces.extent(c)})" for c in candidates)
            why = (
                f"but slot {axis} of leaf `{spec.example}` is in space {space!r}; expected the "
                f"length of a space containing it: {options}."
            )
            raise _axis_error(spec, axis, length, why)
        start = spaces.offset_in(space, match)
        index.append(slice(start, start + spaces.extent(space)))
    return array[tuple(index)]


def _axis_error(spec: InputSpec, axis: int, length: int, why: str) -> InputError:
    """A full tensor's ``axis`` of ``length`` does not say where ``spec``'s block lies."""
    return InputError(
        f"input {spec.label!r} axis {axis} has length {length}, {why} Pass the block as "
        f"inputs[{spec.block_key!r}] with shape {spec.shape} instead."
    )


def _dtype_name(dtype: Any) -> str:
    """A dtype as users write it: ``bfloat16`` rather than numpy's ``V2``/``<V2``."""
    name = getattr(dtype, "name", None) or str(dtype)
    if name.startswith(("void", "V", "<V", "|V")) and "bfloat16" in repr(dtype):
        return "bfloat16"
    return name


def _as_array(name: str, value: Any, xp: Any) -> Any:
    arr = value
    if xp is np or not (hasattr(value, "dtype") and hasattr(value, "shape")):
        try:
            arr = np.asarray(value)
        except Exception as err:
            raise InputError(
                f"input {name!r} ({type(value).__name__}) could not be read as an array "
                f"({err}); pass a NumPy or JAX array of float64."
            ) from None
    if _is_float(_check_dtype(name, arr.dtype)):
        return arr if xp is np or not isinstance(arr, np.ndarray) else xp.asarray(arr)
    return arr.astype(np.float64) if xp is np else xp.asarray(arr, dtype=np.float64)


def _is_float(dtype: np.dtype) -> bool:
    return bool(np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating))


def _check_dtype(name: str, raw: Any) -> np.dtype:
    """The numpy dtype of an input, or an InputError for a non-numeric one."""
    try:
        dtype = np.dtype(raw)
    except TypeError:
        dtype = np.dtype(object)
    if _is_float(dtype) or np.issubdtype(dtype, np.integer) or dtype == np.bool_:
        return dtype
    raise InputError(
        f"input {name!r} has dtype {_dtype_name(dtype)}; expected a floating-point array "
        "(float64; float32 and complex are accepted, integers and booleans are converted to "
        "float64). Convert it with np.asarray(x, dtype=np.float64)."
    )


def _dtype_name(dtype: np.dtype) -> str:
    """A dtype as users write it: ``bfloat16`` (ml_dtypes' name), never a void type."""
    if dtype.kind == "V" and "bfloat16" in repr(dtype.type):
        return "bfloat16"
    return str(dtype)


def check_input_mapping(inputs: Any) -> None:
    """Check what can be checked without a forest: a mapping, string keys, numeric dtypes.

    Raises:
        InputError: ``inputs`` is not a mapping, a key is not a string, or a value's
            dtype is not numeric (object, string, bfloat16 …).

    Example:
        >>> import numpy as np
        >>> check_input_mapping({"f": np.eye(2)})
        >>> try:
        ...     check_input_mapping({"f": np.array(["x"])})
        ... except InputError as err:
        ...     print(str(err)[:38])
        input 'f' has dtype <U1; expected a fl
    """
    if not isinstance(inputs, Mapping):
        raise InputError(
            f"inputs must be a mapping (a dict) of arrays keyed by block key or label, got "
            f"{type(inputs).__name__}; e.g. {{'t{{a;i}}': t1, 'g': g}}."
        )
    bad_keys = [k for k in inputs if not isinstance(k, str)]
    if bad_keys:
        raise InputError(
            f"input key(s) {', '.join(f'{k!r} ({type(k).__name__})' for k in bad_keys)} are "
            "not strings; key every input by its block key (e.g. 'g{i,i;a,a}'), its label "
            "('g') or its variable name."
        )
    for name, value in inputs.items():
        if hasattr(value, "dtype"):
            _check_dtype(name, value.dtype)


def bind_inputs(
    forest: Forest, inputs: Mapping[str, Any], *, xp: Any = np, partial: bool = False
) -> dict[str, Any]:
    """Resolve the user's inputs to one array per block key (and per scalar variable).

    Args:
        forest: the forest whose leaves need values.
        inputs: arrays keyed by block key (``"g{i,i;a,a}"``), by bare label for a full
            tensor (``"g"``), or by variable name.
        xp: the array namespace to slice with (``numpy`` or ``jax.numpy``).
        partial: bind what is given and skip the blocks nothing given provides.

    Returns:
        A dict from block key (or variable name) to an array of the block's shape.

    Raises:
        InputError: for inputs that are not a mapping, a key that is not a string, a
            block given together with the full tensor of its label, a missing input, a
            wrong shape, rank or dtype (object, string, bfloat16 …), or an input key that
            no leaf reads.

    Example:
        >>> import numpy as np, sq_jax as sq
        >>> forest = sq.build_forest(sq.parse("E = f{i1;i1}"), sq.Spaces(i=2, a=1))
        >>> bind_inputs(forest, {"f": np.diag([1.0, 2.0, 3.0])})["f{i;i}"].tolist()
        [[1.0, 0.0], [0.0, 2.0]]
    """
    check_input_mapping(inputs)
    specs = input_specs(forest)
    labels = {s.label for s in specs}
    keys = {s.block_key for s in specs}
    both = sorted(
        f"{s.block_key!r} and {s.label!r}"
        for s in specs
        if s.block_key != s.label and s.block_key in inputs and s.label in inputs
    )
    if both:
        raise InputError(
            f"input(s) {'; '.join(both)} give the same tensor twice, as a block and as the "
            "full tensor; pass one of them (the block key, or the full tensor under the "
            "bare label)."
        )
    unknown = [k for k in inputs if k not in keys | labels | forest.unread_inputs]
    generated = [k for k in unknown if k.split("{")[0] == DENOMINATOR]
    if generated:
        raise InputError(
            f"input(s) {', '.join(repr(k) for k in generated)}: `{DENOMINATOR}` is a "
            f"generated denominator, built inside the program from the orbital energies; "
            f"pass them as {ENERGY!r} (the whole vector) or per space as "
            f"{sorted(k for k in keys if k.startswith(ENERGY))} instead."
        )
    if unknown:
        raise InputError(
            f"input(s) {', '.join(repr(k) for k in unknown)} are not read by any leaf; "
            f"expected block keys {sorted(keys)} or full tensors under the labels "
            f"{sorted(labels)}. Check the spelling (block keys list each slot's space)."
        )
    out: dict[str, Any] = {}
    for spec in specs:
        if spec.block_key in inputs:
            arr = _as_array(spec.block_key, inputs[spec.block_key], xp)
            if tuple(arr.shape) != spec.shape:
                raise InputError(
                    f"input {spec.block_key!r} has shape {tuple(arr.shape)}, expected "
                    f"{spec.shape} (leaf `{spec.example}` with spaces "
                    f"{', '.join(spec.slot_spaces) or 'none'})."
                )
            out[spec.block_key] = arr
        elif spec.label in inputs and not spec.is_scalar_variable:
            arr = _as_array(spec.label, inputs[spec.label], xp)
            out[spec.block_key] = _full_tensor_block(spec, arr, forest.spaces, xp)
        elif spec.is_scalar_variable and spec.label in inputs:
            arr = _as_array(spec.label, inputs[spec.label], xp)
            if tuple(arr.shape) != ():
                raise InputError(
                    f"variable {spec.label!r} must be a scalar, got shape {tuple(arr.shape)}."
                )
            out[spec.block_key] = arr
        elif not partial:
            if spec.is_scalar_variable:
                hint = f"pass inputs[{spec.label!r}] as a scalar"
            else:
                hint = (
                    f"pass the block inputs[{spec.block_key!r}] with shape {spec.shape}, or "
                    f"the full tensor inputs[{spec.label!r}]"
                )
            raise InputError(f"missing input for `{spec.example}`: {hint}.")
    return out
