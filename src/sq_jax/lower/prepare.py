"""What depends only on fixed inputs, computed once: a program split into prologue and rest.

An amplitude solve calls the residual program once per iteration with the same
integrals. Every call used to redo the work that reads only them: sums of integral
blocks (``2 g - g.T``), the transposed copies of integral blocks its matrix products
want, and the packed copies of products over symmetric pairs (:mod:`..pairs`). On
spin-orbital H2O/cc-pVDZ those copies are 28 MiB a call, on benzene/cc-pVDZ 752 MiB.

:func:`split_prologue` splits a lowered program, given the input blocks that stay
fixed, into

* a :class:`Prologue`: the root-level values computed from fixed inputs only, and the
  operand copies of fixed blocks and such values that products read whole (a transpose
  for a matrix product; gathered, weighted and transposed for a packed one), each
  stored under its own key (:func:`copy_key`);
* the rest: the same program reading those as input blocks (``"%v12"`` for value 12).

:func:`run_prologue` computes the prologue's arrays. Operands cut to a loop's batch are
left alone: a whole copy of them would cost memory the budget did not plan for.

Example:
    >>> import sq_jax as sq
    >>> text = "R{a1;i1} = g{a2,i1;a1,i2} t{a2;i2} + (f{a1;a2} + f{a2;a1}) t{a2;i1}"
    >>> prog = sq.compile(text, sq.Spaces(i=2, a=3))
    >>> prologue, rest = split_prologue(prog.lowered, {"f{a;a}", "g{a,i;a,i}"})
    >>> print(prologue)  # f + f.T, and g transposed for its product
    v4 = 1*f{a;a} + 1*f{a;a}.P(1, 0)  -> %v4
    g{a,i;a,i}.T(0,3,1,2) = transpose(g{a,i;a,i}, (0, 3, 1, 2))
    >>> print(rest.body[0])
    v2 = gemm(ab,acdb->cd) t{a;i} g{a,i;a,i}.T(0,3,1,2)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

import jax.numpy as jnp

from .copies import whole_input_copies
from .execute import RunSettings, run_body
from .ir import Accumulate, Combine, Contract, Instr, Loop, LoweredProgram, Read
from .pairs import PairPlan, ready_operand

__all__ = ["Copy", "Prologue", "copy_key", "run_prologue", "split_prologue"]

VALUE_PREFIX = "%v"
"""Key prefix of a prepared value: ``"%v12"`` holds value 12."""


@dataclass(frozen=True, slots=True)
class Copy:
    """One prepared operand copy: ``source`` transposed (or packed for ``pairs``)."""

    key: str
    """The key the rest of the program reads it under (:func:`copy_key`)."""
    source: str
    """The fixed block (or prepared value) it is made from."""
    perm: tuple[int, ...] | None = None
    """A matrix product's transpose (``pairs`` is ``None``)."""
    pairs: PairPlan | None = None
    """A packed product's plan: the copy is its operand ``operand`` made ready."""
    operand: int = 0

    def __str__(self) -> str:
        if self.pairs is None:
            return f"{self.key} = transpose({self.source}, {self.perm})"
        return f"{self.key} = ready({self.source}; {self.pairs}; operand {self.operand})"


@dataclass(frozen=True, slots=True)
class Prologue:
    """What :func:`run_prologue` computes once: root values, then operand copies."""

    values: tuple[Instr, ...]
    """Root instructions whose operands are fixed (as in the original program)."""
    copies: tuple[Copy, ...]

    def __str__(self) -> str:
        lines = [f"{ins}  -> {VALUE_PREFIX}{ins.value_id}" for ins in self.values]
        return "\n".join(lines + [str(c) for c in self.copies])

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys of the arrays :func:`run_prologue` returns."""
        values = (f"{VALUE_PREFIX}{ins.value_id}" for ins in self.values)
        return (*values, *(c.key for c in self.copies))


def copy_key(source: str, perm: tuple[int, ...]) -> str:
    """The key of a prepared transposed copy (a packed one is numbered: ``.ready[n]``).

    Example:
        >>> copy_key("g{a,a;a,a}", (0, 2, 1, 3))
        'g{a,a;a,a}.T(0,2,1,3)'
    """
    return f"{source}.T{perm}".replace(" ", "")


def _fixed_read(read: Read, fixed: Collection[str]) -> bool:
    return read.scalar is None and not read.generated and read.input_key in fixed


def split_prologue(
    lowered: LoweredProgram, fixed: Collection[str]
) -> tuple[Prologue, LoweredProgram]:
    """Split ``lowered`` into what reads only the blocks ``fixed``, and the rest.

    Args:
        lowered: the program.
        fixed: block keys (and scalar variable names) that stay the same between calls.

    Returns:
        The prologue and the rest; the rest reads the prologue's arrays
        (:attr:`Prologue.keys`) as input blocks besides the original inputs.

    Example:
        >>> import sq_jax as sq
        >>> prog = sq.compile("R{a1;i1} = g{a2,i1;a1,i2} t{a2;i2}", sq.Spaces(i=2, a=3))
        >>> prologue, rest = split_prologue(prog.lowered, {"g{a,i;a,i}"})
        >>> prologue.keys, rest.input_keys
        (('g{a,i;a,i}.T(0,3,1,2)',), ('t{a;i}', 'g{a,i;a,i}', 'g{a,i;a,i}.T(0,3,1,2)'))
    """
    fixed = set(fixed)
    values: list[Instr] = []
    renamed: dict[int, str] = {}

    def rename(read: Read) -> Read:
        key = renamed.get(read.value_id) if read.input_key is None else None
        return read if key is None or read.scalar is not None else replace(read, input_key=key)

    root: list[Instr] = []
    for ins in lowered.body:
        if isinstance(ins, Combine | Contract) and all(
            _fixed_read(rename(r), fixed) for r in ins.operands
        ):
            values.append(ins)
            renamed[ins.value_id] = key = f"{VALUE_PREFIX}{ins.value_id}"
            fixed.add(key)
        else:
            root.append(ins)
    copies: dict[str, Copy] = {}
    numbered: dict[tuple[str, PairPlan, int], str] = {}

    def rewrite(ins: Instr) -> Instr:
        if isinstance(ins, Loop):
            loop = replace(ins, body=tuple(rewrite(i) for i in ins.body))
            needed = whole_input_copies(loop)  # those of fixed blocks are prepared now
            return replace(loop, copies=tuple(c for c in loop.copies if c in needed))
        if isinstance(ins, Accumulate):
            terms = (
                replace(t, body=tuple(rewrite(i) for i in t.body), read=rename(t.read))
                for t in ins.terms
            )
            return replace(ins, terms=tuple(terms))
        ops = tuple(rename(r) for r in ins.operands)
        if isinstance(ins, Combine):
            return replace(ins, operands=ops)
        masked = {k for k, _, _ in ins.masks}
        ready = list(ins.ready)
        gemm = ins.gemm
        new_ops = list(ops)
        for k, read in enumerate(ops):
            if not _fixed_read(read, fixed) or read.slices or k in masked:
                continue
            if ins.pairs is not None:
                plan = ins.pairs
                weighted = plan.summed is not None and plan.weighted == k
                if plan.packs[k] or plan.gemm.perms[k] is not None or weighted:
                    # one copy per (block, plan, operand): plans that print alike may
                    # still differ in layout, weights or transposes
                    made = (read.input_key, plan, k)
                    if made not in numbered:
                        numbered[made] = f"{read.input_key}.ready[{len(numbered)}]"
                    key = numbered[made]
                    copies.setdefault(key, Copy(key, read.input_key, None, plan, k))
                    ready[k] = key
            elif gemm is not None and gemm.perms[k] is not None:
                perm = gemm.perms[k]
                key = copy_key(read.input_key, perm)
                copies.setdefault(key, Copy(key, read.input_key, perm))
                axes = read.axes if read.axes is not None else tuple(range(len(read.dims)))
                new_ops[k] = replace(
                    read,
                    input_key=key,
                    dims=tuple(read.dims[p] for p in perm),
                    axes=tuple(axes[p] for p in perm),
                )
                perms = list(gemm.perms)
                perms[k] = None
                gemm = replace(gemm, perms=tuple(perms))
        return replace(ins, operands=tuple(new_ops), gemm=gemm, ready=tuple(ready))

    body = tuple(rewrite(i) for i in root)
    results = tuple(replace(r, read=rename(r.read)) for r in lowered.results)
    prologue = Prologue(tuple(values), tuple(copies.values()))
    rest = LoweredProgram(body, results, (*lowered.input_keys, *prologue.keys))
    return prologue, rest


def run_prologue(prologue: Prologue, blocks: Mapping[str, Any]) -> dict[str, Any]:
    """The prologue's arrays from the fixed blocks (traceable; jit it around this).

    Args:
        prologue: from :func:`split_prologue`.
        blocks: the fixed input blocks, by block key.

    Returns:
        One array per key of :attr:`Prologue.keys`.

    Example:
        >>> import numpy as np, sq_jax as sq
        >>> prog = sq.compile("R{a1;i1} = g{a2,i1;a1,i2} t{a2;i2}", sq.Spaces(i=2, a=3))
        >>> prologue, _ = split_prologue(prog.lowered, {"g{a,i;a,i}"})
        >>> g = np.arange(36.0).reshape(3, 2, 3, 2)
        >>> made = run_prologue(prologue, {"g{a,i;a,i}": g})
        >>> bool((made["g{a,i;a,i}.T(0,3,1,2)"] == g.transpose(0, 3, 1, 2)).all())
        True
    """
    arrays = [jnp.asarray(x) for x in blocks.values()]
    dtype = jnp.result_type(*arrays, float) if arrays else jnp.result_type(float)
    cast = {k: jnp.asarray(x, dtype) for k, x in blocks.items()}
    env: dict[int, Any] = {}
    keep = {ins.value_id for ins in prologue.values}
    run_body(prologue.values, env, {}, RunSettings(cast, dtype), keep)
    out = {f"{VALUE_PREFIX}{v}": env[v] for v in keep}
    have = {**cast, **out}
    for c in prologue.copies:
        x = have[c.source]
        if c.pairs is None:
            out[c.key] = jnp.transpose(x, c.perm)
        else:
            out[c.key] = ready_operand(c.pairs, c.operand, x)
    return out
