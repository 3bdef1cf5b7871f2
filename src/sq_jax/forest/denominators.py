"""Generated energy denominators: the reserved tensor ``Δ``, built from orbital energies.

Perturbative corrections such as (T) divide by an energy denominator,
``1/(ε_i + ε_j + ε_k − ε_a − ε_b − ε_c)``. That is not a contraction, and a dense o³v³
input of it would defeat every memory bound. So the label ``Δ`` is reserved: a leaf
``Δ{bra;ket}`` is not an input but is **generated** inside the program, entry by entry::

    Δ{p_1..p_m; q_1..q_n}[p, q] = 1 / (Σ_k ε[q_k] − Σ_k ε[p_k])

from the 1-D orbital-energy input ``ε`` (ket slots count +, bra slots −: for the
coupled-cluster layout ``t{a…;i…}`` with virtual bra and occupied ket that is
``Σ ε_occ − Σ ε_vir``). Any number of bra and ket slots, over any spaces, is allowed;
auxiliary slots are not. The program reads ``ε`` like any tensor: one block per space,
``"ε{i}"``, ``"ε{a}"`` …, or the whole vector under ``"ε"`` (e.g. PySCF's
``mo_energy``, cut to each space as a full tensor is).

Where the leaf is read in batches, only the batch is built, from the slices of the
energy vectors of exactly the index ranges being read (:func:`build_denominator`): the
whole tensor exists only when a plan leaves it unbatched. The memory model charges
each build as a buffer of its (sliced) shape, and every build costs ``rank`` FLOPs per
element (``rank − 1`` adds and one division; :func:`generated_flops`).

Entries whose energies cancel are ``inf`` (as ``1/0``): the caller must keep such index
ranges apart (canonical Hartree–Fock orbitals with a gap, say).

Known limitations: the static peak profile (``program.peak_bytes``, SeQuant's model of
the values alone) leaves ``Δ`` out as it leaves inputs out; ``program.memory_bytes`` (what
the memory budget holds) counts it. Under a device mesh ``Δ`` is never held split: each
device builds its batches.

Example:
    >>> import numpy as np, sq_jax as sq
    >>> eps = np.array([-2.0, -1.0, 0.5, 1.5])             # 2 occupied, then 2 virtual
    >>> out = sq.evaluate_reference("R{a1;i1} = Δ{a1;i1}", sq.Spaces(i=2, a=2), {"ε": eps})
    >>> out["R"].tolist()                                   # 1/(ε_i − ε_a)
    [[-0.4, -0.6666666666666666], [-0.2857142857142857, -0.4]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import ExpressionError
from ..expr.nodes import Tensor

__all__ = [
    "DENOMINATOR",
    "ENERGY",
    "build_denominator",
    "denominator_slots",
    "energy_key",
    "generated_flops",
    "is_denominator",
]

DENOMINATOR = "Δ"
"""The reserved label of a generated energy denominator."""
ENERGY = "ε"
"""The label of the 1-D orbital-energy input the denominators are built from."""


def is_denominator(tensor: Tensor | None) -> bool:
    """Whether ``tensor`` is a generated denominator (label ``Δ``).

    Example:
        >>> import sq_jax as sq
        >>> is_denominator(sq.parse_expr("Δ{a1;i1}")), is_denominator(sq.parse_expr("t{a1;i1}"))
        (True, False)
    """
    return tensor is not None and tensor.label == DENOMINATOR


def energy_key(space: str) -> str:
    """The block key of the orbital energies of one space: ``ε{space}``.

    Example:
        >>> energy_key("a")
        'ε{a}'
    """
    return f"{ENERGY}{{{space}}}"


def denominator_slots(key: str) -> tuple[tuple[str, int], ...]:
    """``(space, sign)`` per slot of a denominator's block key: bra ``−1``, ket ``+1``.

    Raises:
        ExpressionError: the key is not a ``Δ`` block key, or has auxiliary slots.

    Example:
        >>> denominator_slots("Δ{a,a;i,i}")
        (('a', -1), ('a', -1), ('i', 1), ('i', 1))
    """
    if not (key.startswith(DENOMINATOR + "{") and key.endswith("}")):
        raise ExpressionError(f"{key!r} is not a block key of the denominator `{DENOMINATOR}`.")
    groups = key[len(DENOMINATOR) + 1 : -1].split(";")
    if len(groups) > 2 and groups[2]:
        raise ExpressionError(
            f"the denominator `{key}` has auxiliary slots ({groups[2]}); `{DENOMINATOR}` "
            "takes bra (subtracted) and ket (added) slots only. Remove the third group."
        )
    bra = [s for s in groups[0].split(",") if s]
    ket = [s for s in groups[1].split(",") if s] if len(groups) > 1 else []
    return tuple((s, -1) for s in bra) + tuple((s, 1) for s in ket)


def build_denominator(
    xp: Any,
    key: str,
    energies: Mapping[str, Any],
    cuts: Mapping[int, tuple[Any, int]] | None = None,
    dtype: Any = None,
) -> Any:
    """The entries of a denominator block, or of one batch of it.

    Args:
        xp: ``numpy`` or ``jax.numpy``.
        key: the block key (``"Δ{a,a,a;i,i,i}"``).
        energies: 1-D orbital energies by block key (``"ε{a}"``, ``"ε{i}"``).
        cuts: ``{slot: (start, size)}``: build only that range of those slots (a batch);
            ``start`` may be traced (``lax.dynamic_slice``), ``size`` is static.
        dtype: the result's dtype (default: the energies').

    Returns:
        ``1 / (Σ_ket ε − Σ_bra ε)`` over the slots, shape of the (cut) block.

    Example:
        >>> import numpy as np
        >>> eps = {"ε{i}": np.array([-1.0, -2.0]), "ε{a}": np.array([1.0, 3.0])}
        >>> build_denominator(np, "Δ{a;i}", eps).tolist()
        [[-0.5, -0.3333333333333333], [-0.25, -0.2]]
        >>> build_denominator(np, "Δ{a;i}", eps, {0: (1, 1)}).tolist()
        [[-0.25, -0.2]]
    """
    slots = denominator_slots(key)
    cuts = cuts or {}
    total: Any = None
    for p, (space, sign) in enumerate(slots):
        vec = energies[energy_key(space)]
        if dtype is not None:
            vec = xp.asarray(vec, dtype=dtype)
        if p in cuts:
            start, size = cuts[p]
            vec = _cut(xp, vec, start, size)
        shape = [1] * len(slots)
        shape[p] = vec.shape[0]
        term = xp.reshape(vec, shape)
        total = sign * term if total is None else total + sign * term
    if total is None:
        raise ExpressionError(f"the denominator `{key}` has no slots; give it at least one.")
    return 1.0 / total


def _cut(xp: Any, vec: Any, start: Any, size: int) -> Any:
    """``vec[start:start+size]``, with ``lax.dynamic_slice`` for a traced ``start``."""
    if isinstance(start, int):
        return vec[start : start + size]
    from jax import lax

    return lax.dynamic_slice(vec, (start,), (size,))


def generated_flops(sizes: Sequence[int]) -> int:
    """FLOPs to build one denominator block of this shape: ``rank`` per element.

    ``rank − 1`` additions of the broadcast energies and one division per element.

    Example:
        >>> generated_flops((3, 3, 3, 2, 2, 2))
        1296
    """
    elements = 1
    for n in sizes:
        elements *= n
    return elements * len(sizes)
