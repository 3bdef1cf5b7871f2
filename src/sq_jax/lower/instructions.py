"""Lowering, static half: an ordered schedule becomes a tree of loop instructions.

:func:`lower_schedule` walks the block tree of a
:class:`~sq_jax.schedule.ScheduledForest` once, in execution order, and emits the immutable
instruction records of :mod:`sq_jax.lower.ir` (``Contract``, ``Combine``, ``Loop``) that
the JAX interpreter (:mod:`sq_jax.lower.interpret`) runs without any further decision.

Every operand is a :class:`~sq_jax.lower.ir.Read`: a computed value or an input, and the list of
``(position, loop)`` along which it is cut to the current batch on use
("slice-on-use"). To decide that, the walk tracks each value's *layout* — per mode, the
loop instance whose batch it currently holds, or ``None`` for the full mode — and checks
it against what the reading occurrence expects (``OccurrenceRec.read_slices``). A value
raised by a ``Scatter`` escape loses that loop from its layout; a ``Sum`` keeps it.

All of this is plain Python on the schedule: any mismatch (a value read where it does
not exist, read under another loop's batch, or crossing a loop it is sliced by) raises a
:class:`LoweringError` at compile time, naming the value and the loop.

Known limitations: a value the scheduler places inside a loop it is invariant to (a
"crossing", see :func:`sq_jax.schedule.wellformed.crossings`) is recomputed every batch
and carried out of the loop with its last value.

Example:
    >>> import sq_jax as sq
    >>> from sq_jax.plan import BatchPlan
    >>> from sq_jax.schedule import schedule_forest
    >>> forest = sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), sq.Spaces(i=2, a=4))
    >>> print(lower_schedule(schedule_forest(forest, BatchPlan.of({"a": 2}))))
    loop a#0 extent 4 block 2 Contracted
      v2 = gemm(ab,ba->) f{i;a}[1:a#0] t{a;i}[0:a#0]... sums v2
    result E = v2
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from .._errors import LoweringError, PlanError
from ..expr.nodes import Index
from ..forest.dump import expr_text
from ..forest.inputs import block_key
from ..forest.nodes import NodeKind
from ..forest.symmetry import ValueSymmetry, value_symmetries
from ..schedule import ScheduledForest
from ..schedule.ir import BuildStep, LoopId, OutputKind, ScopeBlock
from ..schedule.rich import OccurrenceRec
from ..schedule.wellformed import crossings
from .accumulate import sequence_program
from .adds import fold_adds
from .block_pairs import plan_block_pairs
from .copies import hoist_input_copies, store_for_loop_readers
from .gemm import GemmPlan, plan_gemm
from .ir import Combine, Contract, Instr, Loop, LoweredProgram, Read, Result
from .pairs import PairPlan, gather_rate, plan_pairs

__all__ = ["lower_schedule"]


BLOCK_PAIRS_MAX_FRACTION = 0.9
"""A nest runs over block pairs only where that leaves at most this share of its FLOPs
(:meth:`~sq_jax.lower.block_pairs.BlockPairs.fraction`): the iterations read twice the
operands, so a smaller saving is not worth it."""


def _whole(read: Read) -> bool:
    """Whether ``read`` is a value or input read whole, as stored (no cut, no scalar)."""
    if read.scalar is not None or read.generated or read.slices:
        return False
    return all(lp is None for _, lp in read.dims)


def _letters(*groups: Sequence[Index]) -> dict[Index, str]:
    table: dict[Index, str] = {}
    for group in groups:
        for ix in group:
            if ix not in table:
                if len(table) == len(string.ascii_letters):
                    raise LoweringError("a contraction uses more than 52 distinct indices.")
                table[ix] = string.ascii_letters[len(table)]
    return table


@dataclass(slots=True)
class _Walk:
    """Scratch state of :func:`lower_schedule` (one schedule)."""

    sf: ScheduledForest
    rec_at: dict[int, OccurrenceRec]
    owner: list[int]
    built: set[int]
    crossing: dict[int, set[int]]  # id(block) -> values crossing it
    axes: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """Per computed value, its stored axis order (positions in the node's mode order)."""
    symmetries: Mapping[str, frozenset[ValueSymmetry]] | None = None
    """Per node key, its symmetries when the forest trusts its inputs' declared ones
    (``Forest.pair_symmetry``): products over symmetric pairs are packed."""
    loop_blocks: Mapping[LoopId, int] = field(default_factory=dict)
    """Loops with a block of their own (:attr:`~sq_jax.plan.batch.BatchPlan.loop_blocks`)."""

    def name(self, v: int) -> str:
        cell = self.sf.rich.cells[v]
        return f"v{v} `{expr_text(cell.node, 80) if cell.node is not None else '?'}`"

    def extent(self, ix: Index) -> int:
        return self.sf.annotated.forest.spaces.extent(ix.space)

    def layout_of(self, v: int) -> tuple[tuple[int, LoopId | None], ...]:
        first = self.sf.rich.cells[v].occurrences[0]
        slots = first.loop_slot or (-1,) * len(first.carried)
        return tuple(
            (self.extent(ix), (ix.space, s) if s >= 0 else None)
            for ix, s in zip(first.carried, slots, strict=True)
        )

    def read(
        self,
        occ: OccurrenceRec,
        state: Mapping[int, tuple[tuple[int, LoopId | None], ...]],
        active: Sequence[LoopId],
        reader: str | Callable[[], str],
    ) -> Read:
        v = self.owner[occ.point]
        if callable(reader):
            reader_text = reader
        else:
            text = reader

            def reader_text() -> str:
                return text

        cell = self.sf.rich.cells[v]
        node = cell.node
        assert node is not None
        wanted = dict(occ.read_slices())
        if node.kind is NodeKind.SCALAR:
            return Read(v, scalar=node)
        axes: tuple[int, ...] | None = None
        if cell.is_leaf:
            assert node.tensor is not None
            dims = tuple((self.extent(ix), None) for ix in occ.carried)
            key: str | None = block_key(node.tensor)
        else:
            if v not in state:
                raise LoweringError(
                    f"{reader_text()} reads {self.name(v)} where it has not been produced; the "
                    "schedule orders a reader before its operand (or reads a value inside "
                    "a loop that only produces it after its steps)."
                )
            dims, key, axes = state[v], None, self.axes.get(v)
        order = axes if axes is not None else tuple(range(len(dims)))
        slices = []
        for k, (_, stored) in enumerate(dims):
            want = wanted.get(order[k])
            if stored == want:
                continue
            if stored is not None:
                raise LoweringError(
                    f"{reader_text()} reads {self.name(v)} whose mode {order[k]} holds the "
                    f"batch of loop {stored[0]}#{stored[1]}, but the reader expects "
                    + ("the full mode." if want is None else f"loop {want[0]}#{want[1]}.")
                )
            assert want is not None
            if want not in active:
                raise LoweringError(
                    f"{reader_text()} reads {self.name(v)} sliced by loop {want[0]}#{want[1]}, "
                    "which does not enclose the reader in the schedule."
                )
            slices.append((k, want))
        return Read(v, key, None, dims, tuple(slices), axes)

    @staticmethod
    def nbytes(read: Read) -> int:
        """Bytes of an operand at full extents.

        Batch counts must not change the layout choices: the memory-budget planner
        prices every count with one lowering.
        """
        return 8 * math.prod(extent for extent, _ in read.dims)

    def compute(
        self,
        v: int,
        state: Mapping[int, tuple[tuple[int, LoopId | None], ...]],
        active: Sequence[LoopId],
    ) -> Contract | Combine:
        first = self.sf.rich.cells[v].occurrences[0]
        node = first.node
        assert node is not None and len(first.operand_points) == 2
        left, right = (self.rec_at[p] for p in first.operand_points)

        def who() -> str:  # only formatted for an error message
            return f"the production of {self.name(v)}"

        ops = (self.read(left, state, active, who), self.read(right, state, active, who))
        labels = tuple(r.modes(occ.carried) for occ, r in zip((left, right), ops, strict=True))
        out = first.carried
        node_dims = self.layout_of(v)
        if node.kind is NodeKind.PRODUCT:
            pairs = self.pairs(v, (left, right), ops, labels, node_dims)
            if pairs is not None:
                table = _letters(labels[0], labels[1], pairs.output)
                spec = "{},{}->{}".format(
                    *("".join(table[ix] for ix in g) for g in (*labels, pairs.output))
                )
                axes = tuple(out.index(ix) for ix in pairs.output)
                self.axes[v] = axes
                dims = tuple(node_dims[a] for a in axes)
                masks = self.masks(first, labels, ops)
                return Contract(v, spec, ops, dims, masks, None, axes, pairs)
            sizes = (self.nbytes(ops[0]), self.nbytes(ops[1]))
            sliced = (bool(ops[0].slices), bool(ops[1].slices))
            gemm = plan_gemm(labels[0], labels[1], out, sizes, sliced)
            if gemm is not None and self.symmetries is not None:
                if gemm.copies:
                    gemm, labels = self.relabeled(gemm, (left, right), ops, labels, out)
                gemm = self.shared_copies(gemm, (left, right), ops, labels)
            stored = gemm.output if gemm is not None else tuple(out)
            axes = tuple(out.index(ix) for ix in stored)
            table = _letters(labels[0], labels[1], stored)
            spec = "{},{}->{}".format(
                *("".join(table[ix] for ix in g) for g in (labels[0], labels[1], stored))
            )
            dims = tuple(node_dims[a] for a in axes)
            self.axes[v] = axes
            masks = self.masks(first, labels, ops)
            return Contract(v, spec, ops, dims, masks, gemm, axes)
        stored = labels[0]  # a sum chain keeps its first term's order all the way up
        axes = tuple(out.index(ix) for ix in stored)
        perms = tuple(tuple(lab.index(ix) for ix in stored) for lab in labels)
        coefs = (float(node.left_coef), float(node.right_coef))
        self.axes[v] = axes
        dims = tuple(node_dims[a] for a in axes)
        return Combine(v, coefs, perms, ops, dims, axes)  # type: ignore[arg-type]

    def namings(
        self, occ: OccurrenceRec, stored: tuple[Index, ...]
    ) -> Iterator[tuple[tuple[Index, ...], int]]:
        """Per symmetry ``(p, s)`` of ``occ``'s value, its stored array's modes named so.

        The array read under those names is ``s`` times the value (its modes ``stored``).
        """
        node_labels = occ.carried
        for sym, sign in self.symmetries.get(occ.node.key, frozenset()):  # type: ignore[union-attr]
            image = {node_labels[j]: node_labels[sym[j]] for j in range(len(sym))}
            yield tuple(image[ix] for ix in stored), sign

    def relabeled(
        self,
        gemm: GemmPlan,
        occs: tuple[OccurrenceRec, OccurrenceRec],
        ops: tuple[Read, Read],
        labels: tuple[tuple[Index, ...], tuple[Index, ...]],
        out: Sequence[Index],
    ) -> tuple[GemmPlan, tuple[tuple[Index, ...], tuple[Index, ...]]]:
        """``gemm`` with its operands named under the labelings that copy the fewest bytes.

        A symmetry ``(p, s)`` of a value lets its stored array be read with its modes
        named in another order, as ``s`` times the value (``t_ij^ab = -t_ij^ba``: ``t``
        stored as ``(a, b, i, j)`` is ``-t`` read as ``(b, a, i, j)``). Where that order
        groups into a matrix and the stored one does not, the product needs no
        transposed copy of the operand, only the sign (:attr:`GemmPlan.sign`).
        Only whole operands (as :meth:`shared_copies`), and only antisymmetries: the
        symmetries of sign +1 share copies instead (:meth:`shared_copies`); relabeled
        too, they took 5 of closed-shell CCSD's 35 copies at benzene/cc-pVDZ sizes, and
        the program ran no faster (3.20 and 3.33 s a call against 3.24 and 3.38) with
        2% more memory in XLA's figures (775 against 759 MB).

        Returns:
            The plan and the two operands' labels it reads them under.
        """
        options = []
        for k, (occ, r, stored) in enumerate(zip(occs, ops, labels, strict=True)):
            named: dict[tuple[Index, ...], tuple[tuple[int, ...], int] | None] = {stored: None}
            if gemm.perms[k] is not None and _whole(r) and occ.node is not None:
                for relabeled, sign in self.namings(occ, stored):
                    if sign == -1:
                        q = tuple(stored.index(ix) for ix in relabeled)  # the tangent's layout
                        named.setdefault(relabeled, (q, sign))
            options.append(sorted(named.items(), key=lambda item: item[0] != stored))
        sizes = (self.nbytes(ops[0]), self.nbytes(ops[1]))
        sliced = (bool(ops[0].slices), bool(ops[1].slices))

        def copied(plan: GemmPlan) -> tuple[int, int]:
            nbytes = sum(
                n for n, p, cut in zip(sizes, plan.perms, sliced, strict=True) if p and not cut
            )
            return nbytes, plan.copies

        best = (copied(gemm), gemm, labels)
        for (left, how_left), (right, how_right) in itertools.product(*options):
            plan = plan_gemm(left, right, out, sizes, sliced)
            if plan is not None and copied(plan) < best[0]:
                best = (copied(plan), replace(plan, relabel=(how_left, how_right)), (left, right))
        return best[1], best[2]

    def shared_copies(
        self,
        gemm: GemmPlan,
        occs: tuple[OccurrenceRec, OccurrenceRec],
        ops: tuple[Read, Read],
        labels: tuple[tuple[Index, ...], tuple[Index, ...]],
    ) -> GemmPlan:
        """``gemm`` with each operand's transpose the least its symmetries make equal.

        Products reading a value in equal layouts then share one copy:
        ``t_ij^ab = t_ji^ba``: ``t`` read as ``(a, i, b, j)`` by one product and as
        ``(b, j, a, i)`` by another is one array, which XLA transposes once when both
        products ask for it by the same permutation. Only whole operands, and only
        symmetries of sign +1.
        """
        equal = list(gemm.equal)
        for k, (occ, r, stored) in enumerate(zip(occs, ops, labels, strict=True)):
            perm = gemm.perms[k]
            if perm is None or r.scalar is not None or r.generated or r.slices:
                continue
            if any(lp is not None for _, lp in r.dims) or occ.node is None:
                continue
            target = tuple(stored[a] for a in perm)
            least = perm
            for relabeled, sign in self.namings(occ, stored):
                if sign == 1:
                    least = min(least, tuple(relabeled.index(ix) for ix in target))
            equal[k] = None if least == perm else least
        return replace(gemm, equal=(equal[0], equal[1]))

    def pairs(
        self,
        v: int,
        occs: tuple[OccurrenceRec, OccurrenceRec],
        ops: tuple[Read, Read],
        labels: tuple[tuple[Index, ...], tuple[Index, ...]],
        node_dims: tuple[tuple[int, LoopId | None], ...],
    ) -> PairPlan | None:
        """A packed plan for a product over symmetric pairs whose modes are not batched."""
        if self.symmetries is None:
            return None
        first = self.sf.rich.cells[v].occurrences[0]
        fixed = {mode for mode, _ in first.reduced_slot}  # summed in batches
        fixed |= {first.carried[a] for a, (_, lp) in enumerate(node_dims) if lp is not None}
        for r, lab in zip(ops, labels, strict=True):
            if r.scalar is not None or r.generated:
                return None
            fixed |= {lab[p] for p, _ in r.slices}
            fixed |= {lab[p] for p, (_, lp) in enumerate(r.dims) if lp is not None}
        keys = []
        for occ in occs:
            assert occ.node is not None
            keys.append(self.symmetries.get(occ.node.key, frozenset()))
        extent = {ix: self.extent(ix) for lab in labels for ix in lab}
        made_once = self.sf.annotated.forest.fixed_inputs
        rates = tuple(
            gather_rate(
                r.input_key is not None,
                r.input_key is not None and not r.slices and r.input_key.split("{")[0] in made_once,
            )
            for r in ops
        )
        return plan_pairs(
            labels,
            (occs[0].carried, occs[1].carried),
            (keys[0], keys[1]),
            first.carried,
            (self.nbytes(ops[0]), self.nbytes(ops[1])),
            extent,
            frozenset(fixed),
            (rates[0], rates[1]),
        )

    def masks(
        self,
        first: OccurrenceRec,
        labels: tuple[tuple[Index, ...], tuple[Index, ...]],
        ops: tuple[Read, Read],
    ) -> tuple[tuple[int, int, LoopId], ...]:
        out = []
        for mode, slot in first.reduced_slot:
            loop = (mode.space, slot)
            best: tuple[int, int, int] | None = None
            for k, (modes, read) in enumerate(zip(labels, ops, strict=True)):
                cut = {p for p, lp in read.slices if lp == loop}
                cut |= {p for p, (_, lp) in enumerate(read.dims) if lp == loop}
                for p, ix in enumerate(modes):
                    if ix == mode and p in cut:
                        size = 1
                        for e, _ in read.dims:
                            size *= e
                        if best is None or size < best[0]:
                            best = (size, k, p)
                        break
            if best is None:
                raise LoweringError(
                    f"{self.name(self.owner[first.point])} sums `{mode}` over loop "
                    f"{loop[0]}#{slot}, but no operand is cut by that loop."
                )
            out.append((best[1], best[2], loop))
        return tuple(out)

    def body(
        self,
        blk: ScopeBlock,
        state: dict[int, tuple[tuple[int, LoopId | None], ...]],
        active: list[LoopId],
    ) -> list[Instr]:
        out: list[Instr] = []
        for step in blk.steps:
            if isinstance(step, BuildStep):
                ins = self.compute(step.value_id, state, active)
                state[step.value_id] = ins.dims
                out.append(ins)
            else:
                out.append(self.loop(step, state, active))
        return out

    def mark_block_pairs(self, body: Sequence[Instr]) -> tuple[Instr, ...]:
        """``body`` with every nest that can run over block pairs marked (:mod:`.block_pairs`)."""
        out: list[Instr] = []
        for ins in body:
            if isinstance(ins, Loop):
                marked = self.block_pair_nest(ins)
                ins = (
                    marked
                    if marked is not None
                    else replace(ins, body=self.mark_block_pairs(ins.body))
                )
            out.append(ins)
        return tuple(out)

    def block_pair_nest(self, outer: Loop) -> Loop | None:
        """``outer`` with its product marked for block pairs, or ``None``.

        When ``outer`` holds one loop over the same blocks whose body ends in one
        product (:attr:`~sq_jax.lower.ir.Loop.product_nest`: the instructions before it
        make its operands for the batch, and run for both batches of an iteration), the
        two loops cut a summed pair that both operands swap together with a free pair
        of their own, the saving passes :data:`BLOCK_PAIRS_MAX_FRACTION`, and it pays
        for the parts it writes (:meth:`~sq_jax.lower.block_pairs.BlockPairs.gain`).
        """
        nest = outer.product_nest
        if nest is None:
            return None
        inner, ins = nest
        shape = (outer.loop[0], outer.extent, outer.block)
        same = shape == (inner.loop[0], inner.extent, inner.block)
        escapes = (outer.scatters, outer.carries, outer.copies, inner.scatters, inner.carries)
        if not same or any(escapes) or inner.copies or ins.pairs is not None:
            return None
        sums = ([v for v, _ in outer.sums], [v for v, _ in inner.sums])
        if sums != ([ins.value_id], [ins.value_id]) or outer.num_batches < 2:
            return None
        if any(r.scalar is not None or r.generated for r in ins.operands):
            return None
        if ins.gemm is not None and ins.gemm.relabel != (None, None):
            return None  # (relabeled operands are whole; these are cut by both loops)
        first = self.sf.rich.cells[ins.value_id].occurrences[0]
        occs = [self.rec_at[p] for p in first.operand_points]
        labels = tuple(r.modes(o.carried) for r, o in zip(ins.operands, occs, strict=True))
        cut: list[dict[LoopId, Index]] = []
        fixed: set[Index] = {
            first.carried[a]
            for a, (_, lp) in enumerate(self.layout_of(ins.value_id))
            if lp is not None
        }
        for r, lab in zip(ins.operands, labels, strict=True):
            # an operand made before the product in the inner loop holds its batches
            mine = {lp: lab[p] for p, (_, lp) in enumerate(r.dims) if lp is not None}
            mine.update((lp, lab[p]) for p, lp in r.slices)
            cut.append(mine)
            fixed |= {ix for lp, ix in mine.items() if lp not in (outer.loop, inner.loop)}
        summed = tuple(cut[0].get(lp) for lp in (outer.loop, inner.loop))
        if None in summed or tuple(cut[1].get(lp) for lp in (outer.loop, inner.loop)) != summed:
            return None
        fixed |= {m for m, _ in first.reduced_slot if m not in summed}
        keys = [self.symmetries.get(o.node.key, frozenset()) for o in occs]  # type: ignore[union-attr]
        extent = {ix: self.extent(ix) for lab in labels for ix in lab}
        plan = plan_block_pairs(
            inner.loop,
            summed,  # type: ignore[arg-type]
            labels,  # type: ignore[arg-type]
            (occs[0].carried, occs[1].carried),
            (keys[0], keys[1]),
            first.carried,
            extent,
            frozenset(fixed),
        )
        if plan is None or plan.fraction(outer.extent, outer.block) > BLOCK_PAIRS_MAX_FRACTION:
            return None
        if plan.gain(outer.extent, outer.block, extent) <= 0:
            return None  # its parts cost more than the FLOPs it saves
        marked = replace(ins, block_pairs=plan)
        return replace(outer, body=(replace(inner, body=(*inner.body[:-1], marked)),))

    def loop(
        self,
        blk: ScopeBlock,
        outer: dict[int, tuple[tuple[int, LoopId | None], ...]],
        active: list[LoopId],
    ) -> Loop:
        assert blk.axis is not None and blk.kind is not None
        me = blk.loop
        if me in active:
            raise LoweringError(f"loop {me[0]}#{me[1]} is nested inside itself.")
        state = dict(outer)
        inner = [*active, me]
        body = self.body(blk, state, inner)
        sums, scatters = [], []
        for v, kind in blk.outputs:
            if v not in state:
                if v in self.built:
                    raise LoweringError(
                        f"{self.name(v)} is an output of loop {me} before it is built."
                    )
                ins = self.compute(v, state, inner)  # raw production at the deepest site
                state[v] = ins.dims
                body.append(ins)
            dims = state[v]
            loops = [lp for _, lp in dims]
            if kind is OutputKind.ACCUMULATE_SUM:
                if me in loops:
                    raise LoweringError(
                        f"{self.name(v)} is summed over loop {me[0]}#{me[1]} but keeps its batch."
                    )
                sums.append((v, dims))
                outer[v] = dims
            else:
                if loops.count(me) != 1:
                    raise LoweringError(
                        f"{self.name(v)} is scattered out of loop {me[0]}#{me[1]}, but "
                        f"{loops.count(me)} of its modes hold that loop's batch (need one)."
                    )
                p = loops.index(me)
                scatters.append((v, p, dims))
                outer[v] = tuple((e, None if lp == me else lp) for e, lp in dims)
        carries = []
        for v in sorted(self.crossing.get(id(blk), ())):
            if v in {w for w, _ in blk.outputs}:
                continue
            dims = state[v]
            if me in [lp for _, lp in dims]:
                raise LoweringError(
                    f"{self.name(v)} is read after loop {me[0]}#{me[1]} but holds only one of "
                    "its batches and has no escape (output) from it."
                )
            carries.append((v, dims))
            outer[v] = dims
        extent, block = self.extent(blk.axis), self.sf.annotated.block_of(blk.axis)
        own = min(self.loop_blocks.get(me, block), extent)
        return Loop(
            me,
            blk.axis,
            blk.kind,
            extent,
            own,
            tuple(body),
            tuple(sums),
            tuple(scatters),
            tuple(carries),
            own_block=own != block,
        )


def _block_at(root: ScopeBlock, path: tuple[int, ...]) -> ScopeBlock:
    """The block at ``path`` (positions in ``steps``) below ``root``."""
    for k in path:
        root = root.steps[k]  # type: ignore[assignment]
    return root


def lower_schedule(
    sf: ScheduledForest, *, sequence: bool = True, adds: bool = True
) -> LoweredProgram:
    """Lower a scheduled forest to its instruction tree (module docstring).

    Args:
        sf: every stage of the scheduler (:func:`sq_jax.schedule.schedule_forest`).
        sequence: run the sums as the plan says (:func:`sequence_sums_of`); ``False``
            leaves every sum a chain of adds (the budget search sequences one lowering
            for both of a configuration's sum variants).
        adds: with ``sequence``, build a permuted sum of a loop's pieces inside that
            loop (:mod:`sq_jax.lower.adds`); ``False`` stacks the pieces whole first
            (what remat's backward pass and sharded loops run).

    Returns:
        The instruction tree; :func:`sq_jax.lower.interpret.run_lowered` runs it.

    Raises:
        LoweringError: the schedule reads a value where it does not exist, under another
            loop's batch, or carries a sliced value out of a loop without an escape.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.plan import BatchPlan
        >>> from sq_jax.schedule import schedule_forest
        >>> forest = sq.build_forest(sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1}"), sq.Spaces(i=2, a=3))
        >>> print(lower_schedule(schedule_forest(forest, BatchPlan())))
        v2 = gemm(ab,bc->ac) f{a;a} t{a;i}
        result R = v2
    """
    rich = sf.rich
    owner = rich.point_owner()
    rec_at = {o.point: o for c in rich.cells for o in c.occurrences}
    built = {s.value_id for b, _ in sf.ordered.walk() for s in b.steps if isinstance(s, BuildStep)}
    crossing = {
        id(_block_at(sf.ordered.root, path)): set(vs)
        for path, vs in crossings(sf.ordered, rich.root_values).items()
    }
    forest = sf.annotated.forest
    syms = value_symmetries(forest) if forest.pair_symmetry else None
    own = dict(sf.annotated.plan.loop_blocks)
    walk = _Walk(sf, rec_at, owner, built, crossing, symmetries=syms, loop_blocks=own)
    state: dict[int, tuple[tuple[int, LoopId | None], ...]] = {}
    body = walk.body(sf.ordered.root, state, [])
    have = {blk.loop for blk, _ in sf.ordered.walk() if not blk.is_root} if own else set()
    unknown = sorted(set(own) - have)
    if unknown:
        raise PlanError(
            "loop_blocks names loop(s) "
            + ", ".join(f"{space}#{slot}" for space, slot in unknown)
            + " that the schedule does not have (its loops: "
            + (", ".join(f"{space}#{slot}" for space, slot in sorted(have)) or "none")
            + "); name loops as `str(program.lowered)` shows them, or leave loop_blocks out."
        )
    results = []
    for root, v in zip(sf.annotated.forest.roots, rich.root_values, strict=True):
        occ = next(o for o in rich.cells[v].occurrences if o.is_root and o.node is root.node)
        read = walk.read(occ, state, [], f"result `{root.name}`")
        if any(lp is not None for _, lp in read.dims):
            raise LoweringError(f"result `{root.name}` ({walk.name(v)}) is left sliced.")
        stored = read.modes(occ.carried)
        perm = tuple(stored.index(ix) for ix in root.indices)
        results.append(Result(root.name, read, perm, float(root.coef)))
    keys = tuple(
        dict.fromkeys(
            block_key(c.node.tensor)
            for c in rich.cells
            if c.is_leaf and c.node is not None and c.node.kind is NodeKind.LEAF
        )
    )
    lowered = LoweredProgram(tuple(body), tuple(results), keys)
    lowered = store_for_loop_readers(lowered)  # (:mod:`.copies`)
    if sf.annotated.plan.copies == "hoisted":
        lowered = hoist_input_copies(lowered)
    if syms is not None:  # after the copies: the marked product's layouts are final
        lowered = replace(lowered, body=walk.mark_block_pairs(lowered.body))
    return sequence_sums_of(lowered, sf.annotated.plan.sums, adds=adds) if sequence else lowered


def sequence_sums_of(lowered: LoweredProgram, sums: str, *, adds: bool = True) -> LoweredProgram:
    """``lowered`` (its sums chains of adds) with its sums run as ``sums`` says.

    With ``adds``, a sequenced sum over a loop's stacked pieces is then built inside
    that loop (:func:`~sq_jax.lower.adds.fold_adds`).

    ``"sequenced"``: every long sum term by term (:func:`sequence_program`).
    ``"fused"``: only a sum that reads one value under several layouts
    (``Σ_π ±π(Y)``, an antisymmetrizer): fused, XLA would recompute ``Y``'s terms
    inside its kernel for every layout it reads, with all of them alive there.
    Spin-orbital CCSD, H2O/cc-pVDZ: 37.6 -> 33.1 ms per prepared call, XLA's memory
    26.7 -> 15.9 MiB. Below :data:`~sq_jax.lower.accumulate.MIN_PERMUTED_ELEMENTS`
    elements such a sum stays fused too.

    Example:
        >>> import sq_jax as sq
        >>> from sq_jax.cc.equations import load_equations
        >>> from sq_jax.lower.ir import Accumulate
        >>> from sq_jax.plan import BatchPlan
        >>> from sq_jax.schedule import schedule_forest
        >>> forest = sq.build_forest(sq.parse(load_equations("ccd_so")), sq.Spaces(i=6, a=12))
        >>> raw = lower_schedule(schedule_forest(forest, BatchPlan()), sequence=False)
        >>> def sequenced(sums):  # how many sums run term by term
        ...     return sum(isinstance(i, Accumulate) for i in sequence_sums_of(raw, sums).body)
        >>> # fused: R2's antisymmetrizer, as a chain of two sums (one per Y it reads);
        >>> # sequenced: every long sum
        >>> sequenced("fused"), sequenced("sequenced")
        (2, 3)
    """
    sequenced = sequence_program(lowered, permuted=sums != "sequenced")
    return fold_adds(sequenced, preludes=sums == "sequenced") if adds else sequenced
