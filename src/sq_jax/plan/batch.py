"""Batch plans: which index spaces are cut into batches, how finely, and in which roles.

A :class:`BatchPlan` is the user-facing description of memory blocking. For each batched
index space it gives the number of batches (or the block size) and the roles in which
the space may be batched:

* **external** — a mode present on a term's result: the loop opens at the term's root,
  and each batch writes a disjoint slice of the result (SeQuant's ``External``);
* **contracted** — a mode summed at a node: the loop opens at that node, its operand
  subtrees are sliced, and the per-batch partial results are added (``Contracted``).

Where exactly the loops open is decided by :func:`sq_jax.plan.annotate`.

Example:
    >>> from sq_jax.plan import BatchPlan
    >>> plan = BatchPlan.of({"i": 2, "Κ": {"block": 16, "roles": "contracted"}})
    >>> str(plan)
    'BatchPlan(i: 2 batches [external, contracted]; Κ: block 16 [contracted])'
    >>> plan.batch_for("i").num_batches(9), plan.batch_for("i").block_size(9)
    (2, 5)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._enums import ValueEnum
from .._errors import PlanError, SqJaxError
from ..expr.spaces import Spaces

__all__ = ["BatchPlan", "LoopKind", "SpaceBatch", "check_mode_order"]


class LoopKind(ValueEnum):
    """How a batch loop combines its batches (SeQuant's ``BatchModeType``)."""

    CONTRACTED = "Contracted"
    """The loop's mode is summed at the opening node: per-batch partials are added."""
    EXTERNAL = "External"
    """The loop's mode is on the opening node's result: per-batch pieces are scattered."""


@dataclass(frozen=True, slots=True)
class SpaceBatch:
    """How one index space is batched.

    Exactly one of ``batches`` and ``block`` is set. Raises :class:`PlanError` otherwise.

    Example:
        >>> SpaceBatch("a", batches=3).block_size(10)
        4
        >>> SpaceBatch("a", block=4).num_batches(10)
        3
    """

    space: str
    """The index space key (``"i"``, ``"a"``, ``"Κ"`` …)."""
    batches: int | None = None
    """Number of batches the extent is cut into (the last one may be smaller)."""
    block: int | None = None
    """Elements per batch (the last batch may be smaller)."""
    external: bool = True
    """Whether the space may be batched where it is on a term's result."""
    contracted: bool = True
    """Whether the space may be batched where it is summed."""

    def __post_init__(self) -> None:
        if (self.batches is None) == (self.block is None):
            raise PlanError(
                f"space `{self.space}`: give exactly one of batches= and block= "
                f"(got batches={self.batches!r}, block={self.block!r})."
            )
        for name, value in (("batches", self.batches), ("block", self.block)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise PlanError(
                    f"space `{self.space}`: {name} must be a positive int, got {value!r}."
                )
        if not (self.external or self.contracted):
            raise PlanError(
                f"space `{self.space}`: enable at least one role (external or contracted), "
                "or leave the space out of the plan."
            )

    def block_size(self, extent: int) -> int:
        """Elements per batch for a mode of ``extent`` elements (at least 1)."""
        if self.block is not None:
            return max(1, min(self.block, extent))
        assert self.batches is not None
        return max(1, -(-extent // self.batches))

    def num_batches(self, extent: int) -> int:
        """Number of batches for a mode of ``extent`` elements: ``ceil(extent / block)``."""
        return max(1, -(-extent // self.block_size(extent)))

    @property
    def roles(self) -> str:
        """The enabled roles, as text."""
        return ", ".join(
            name
            for name, on in (("external", self.external), ("contracted", self.contracted))
            if on
        )

    def __str__(self) -> str:
        size = f"{self.batches} batches" if self.batches is not None else f"block {self.block}"
        return f"{self.space}: {size} [{self.roles}]"


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """Which spaces are batched, how finely, and where external loops open.

    Example:
        >>> plan = BatchPlan((SpaceBatch("a", batches=2, contracted=False),))
        >>> plan.is_batched("a", LoopKind.EXTERNAL), plan.is_batched("a", LoopKind.CONTRACTED)
        (True, False)
    """

    spaces: tuple[SpaceBatch, ...] = ()
    """One entry per batched space, in the order given."""
    external_site: str = "root"
    """Where external loops open: ``"root"`` (each equation's top node, or, for a sum
    of permuted reads ``Σ_π r_π π(Y)``, the reads of ``Y``; the default), ``"top"``
    (each equation's top node, always) or ``"term"`` (each summand of the equation's
    top-level sum chain). See :mod:`sq_jax.plan.annotate`."""
    external_modes: str = "all"
    """Which result modes of an external site open a loop: ``"all"`` (each mode of a
    batched space, the default: a doubles residual batched over ``a`` cuts both of its
    virtual modes) or ``"first"`` (only the first mode of each batched space, in the
    site's index order: larger batches, but no nest of two loops of one space in which a
    value carrying only one of the two modes is rebuilt for every batch of the other).
    See :mod:`sq_jax.plan.annotate`."""
    hoist: str = "none"
    """Which operands inside loops are built once, whole, before the loops (and read
    sliced by their reader) instead of once per batch: ``"none"`` (the default),
    ``"invariant"`` (an operand whose subtree does not carry the index of an enclosing
    loop: no recomputation per batch of that loop), ``"pairs"`` (also a product over a
    symmetric summed pair, such as the closed-shell ladder, with its computed operands:
    its own loops then run over block pairs at about a quarter of its FLOPs, with
    ``pair_symmetry``) or ``"all"`` (also a value its tree reads under two labelings,
    ``Y`` and ``Y`` with two labels swapped, which each batch would otherwise build
    twice, once per slicing). Fewer FLOPs, more memory. See
    :mod:`sq_jax.schedule.loop_identity`."""
    sums: str = "fused"
    """How a long sum of computed terms runs: ``"fused"`` (every term made, then one
    fused add: fastest, but all terms are alive together, the default) or
    ``"sequenced"`` (term by term into one accumulator, each term's own intermediates
    made in its turn: one term alive at a time). See :mod:`sq_jax.lower.accumulate`."""
    copies: str = "per batch"
    """Where a product inside a loop transposes a whole input: ``"per batch"`` (in every
    batch, the default: the copy is alive only at its product) or ``"hoisted"`` (once,
    before the outermost loop, alive for all of it: faster, more memory; under a mesh,
    the loop split across devices still makes them per batch). See
    :mod:`sq_jax.lower.copies`."""
    whole: frozenset[int] = frozenset()
    """Products that open no contracted loop, by node hash
    (:attr:`~sq_jax.forest.nodes.EvalNode.hash`): they run over the whole summed range.
    The budget planner leaves out the contracted loops its plan does not need to fit
    (each loop's partial sums cost memory traffic per batch beyond their FLOPs); empty
    by default (every product over a batched summed space opens its loops)."""
    loop_blocks: frozenset[tuple[tuple[str, int], int]] = frozenset()
    """Loops that run in larger batches than their space's: ``((space, slot), block)``
    per loop instance (:data:`~sq_jax.schedule.ir.LoopId`, as the schedule numbers
    them). The budget planner widens the loops whose nests leave room under the budget
    (:mod:`sq_jax.budget.widen`): fewer, larger batches, the same peak. Empty by default
    (every loop of a space runs its space's batches)."""

    def __post_init__(self) -> None:
        keys = [s.space for s in self.spaces]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise PlanError(f"space(s) {', '.join(f'`{k}`' for k in dup)} given twice.")
        if self.external_site not in ("root", "top", "term"):
            raise PlanError(
                f"external_site must be 'root', 'top' or 'term', got {self.external_site!r}."
            )
        if self.hoist not in ("none", "invariant", "pairs", "all"):
            raise PlanError(
                f"hoist must be 'none', 'invariant', 'pairs' or 'all', got {self.hoist!r}."
            )
        if self.sums not in ("fused", "sequenced"):
            raise PlanError(f"sums must be 'fused' or 'sequenced', got {self.sums!r}.")
        if self.copies not in ("per batch", "hoisted"):
            raise PlanError(
                f"copies must be 'per batch' or 'hoisted', got {self.copies!r}; pass "
                "copies='hoisted' to transpose whole inputs once before the loops."
            )
        if self.external_modes not in ("all", "first"):
            raise PlanError(
                f"external_modes must be 'all' or 'first', got {self.external_modes!r}."
            )
        if not isinstance(self.whole, frozenset) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in self.whole
        ):
            raise PlanError(
                f"whole must be a frozenset of node hashes (ints), got {self.whole!r}; pass "
                "frozenset(node.hash for node in products), or leave it out."
            )
        if not isinstance(self.loop_blocks, frozenset) or not all(
            isinstance(item, tuple)
            and len(item) == 2
            and isinstance(item[0], tuple)
            and len(item[0]) == 2
            and isinstance(item[0][0], str)
            and isinstance(item[0][1], int)
            and not isinstance(item[0][1], bool)
            and isinstance(item[1], int)
            and not isinstance(item[1], bool)
            and item[1] >= 1
            for item in self.loop_blocks
        ):
            raise PlanError(
                f"loop_blocks must be a frozenset of ((space, slot), block) with block >= 1, "
                f"got {self.loop_blocks!r}; pass frozenset({{(('a', 0), 8)}}), or leave it out."
            )

    @classmethod
    def of(
        cls,
        batches: Mapping[str, Any],
        *,
        external_site: str = "root",
        external_modes: str = "all",
        hoist: str = "none",
        sums: str = "fused",
        copies: str = "per batch",
    ) -> BatchPlan:
        """Build a plan from a mapping ``{space: n_batches | {batches|block, roles}}``.

        ``roles`` is ``"external"``, ``"contracted"`` or ``"both"`` (the default).

        Raises:
            PlanError: for something other than a mapping (e.g. the text ``"a=2"``), a
                key that is not a space name, an unknown role or field, or a bad count.

        Example:
            >>> str(BatchPlan.of({"a": {"batches": 2, "roles": "external"}}))
            'BatchPlan(a: 2 batches [external])'
        """
        if not isinstance(batches, Mapping):
            hint = ""
            if isinstance(batches, str) and "=" in batches:
                key, _, value = batches.partition("=")
                hint = f" (for {batches!r} write {{{key.strip()!r}: {value.strip()}}})"
            raise PlanError(
                f"batch must be a mapping such as {{'a': 4}} or a BatchPlan, got "
                f"{type(batches).__name__} {batches!r}{hint}."
            )
        out = []
        for space, spec in batches.items():
            if not isinstance(space, str):
                raise PlanError(
                    f"batch plan key {space!r} ({type(space).__name__}) is not a space name; "
                    "key the plan by index space, e.g. {'a': 4}."
                )
            if isinstance(spec, Mapping):
                extra = sorted(map(str, set(spec) - {"batches", "block", "roles"}))
                if extra:
                    raise PlanError(
                        f"space `{space}`: unknown field(s) {', '.join(map(repr, extra))}; "
                        "expected 'batches' or 'block', and optionally 'roles'."
                    )
                roles = spec.get("roles", "both")
                if not isinstance(roles, str) or roles not in ("external", "contracted", "both"):
                    raise PlanError(
                        f"space `{space}`: roles must be 'external', 'contracted' or "
                        f"'both', got {roles!r}."
                    )
                out.append(
                    SpaceBatch(
                        space,
                        batches=spec.get("batches"),
                        block=spec.get("block"),
                        external=roles in ("external", "both"),
                        contracted=roles in ("contracted", "both"),
                    )
                )
            else:
                out.append(SpaceBatch(space, batches=spec))
        return cls(tuple(out), external_site, external_modes, hoist, sums, copies)

    def resolved(self, spaces: Spaces, used: Iterable[str] | None = None) -> BatchPlan:
        """This plan with every space key replaced by its canonical key in ``spaces``.

        Args:
            spaces: the registry (with extents).
            used: the canonical space keys the equations' indices use. When given (as
                :func:`sq_jax.compile` does for the user's plan), the plan is checked
                strictly: a union space no index is in (``p`` when the equations use
                ``i`` and ``a``: loops batch an index's own space, never its parts), or
                more batches than a space's extent, is an error rather than ignored or
                clamped; so is a base space no index is in while a union holding it is
                used (``a`` when the equations use ``e`` = ``a`` then ``g``). A base space
                the equations do not touch at all is allowed, so that one plan serves
                several equation sets (``{"Κ": 4}`` for DF and non-DF equations).
                Without ``used`` (internal callers, generated plans) only the keys are
                resolved.

        Raises:
            PlanError: one bulleted error for every space ``spaces`` does not know, and
                with ``used``, every union space no index is in (the message names its
                members to batch instead) and every count of batches above the extent.

        Example:
            >>> from sq_jax.expr.spaces import Spaces
            >>> str(BatchPlan.of({"K": 4}).resolved(Spaces(K=8)))
            'BatchPlan(Κ: 4 batches [external, contracted])'
            >>> try:
            ...     BatchPlan.of({"a": 9}).resolved(Spaces(i=2, a=3), used=("i", "a"))
            ... except PlanError as err:
            ...     print(str(err)[:61])
            batch plan: space `a` has extent 3, but the plan cuts it into
        """
        out, problems = [], []
        used_set = None if used is None else set(used)
        for s in self.spaces:
            try:
                key = spaces.resolve(s.space)
            except SqJaxError as err:
                problems.append(f"unknown space: {err}")
                continue
            out.append(replace(s, space=key))
            extent = spaces.extent(key) if spaces.has_extent(key) else None
            holders = sorted(
                u for u in used_set or () if key in spaces.base_members(u) and u != key
            )
            if used_set is not None and key not in used_set and spaces.space(key).is_union:
                problems.append(_unused_space(spaces, key, used_set))
            elif used_set is not None and key not in used_set and holders:
                problems.append(
                    f"no index of the equations is in space `{key}`, but indices in "
                    f"{', '.join(f'`{u}`' for u in holders)} (which hold `{key}`) are; a "
                    f"loop batches an index's own space: batch "
                    f"{' or '.join(f'`{u}`' for u in holders)} instead."
                )
            elif (
                used_set is not None
                and extent is not None
                and s.batches is not None
                and s.batches > extent
            ):
                problems.append(
                    f"space `{key}` has extent {extent}, but the plan cuts it into "
                    f"{s.batches} batches; ask for at most {extent} batches (or a block "
                    f"size such as {{{key!r}: {{'block': 1}}}})."
                )
        if len(problems) == 1:
            raise PlanError(f"batch plan: {problems[0]}")
        if problems:
            raise PlanError("batch plan:\n- " + "\n- ".join(problems))
        return replace(self, spaces=tuple(out))

    def batch_for(self, space: str) -> SpaceBatch | None:
        """The entry for ``space``, or ``None`` if it is not batched."""
        for s in self.spaces:
            if s.space == space:
                return s
        return None

    def is_batched(self, space: str, kind: LoopKind) -> bool:
        """Whether ``space`` may be batched in role ``kind``."""
        s = self.batch_for(space)
        if s is None:
            return False
        return s.external if kind is LoopKind.EXTERNAL else s.contracted

    def __str__(self) -> str:
        parts = [str(s) for s in self.spaces]
        if self.external_site != "root":
            parts.append(f"external loops at {self.external_site}")
        if self.external_modes != "all":
            parts.append("one external loop per space")
        if self.hoist != "none":
            parts.append(f"hoist {self.hoist}")
        if self.sums != "fused":
            parts.append(f"{self.sums} sums")
        if self.copies != "per batch":
            parts.append(f"{self.copies} copies")
        if self.whole:
            n = len(self.whole)
            parts.append(f"{n} product{'s' if n != 1 else ''} whole")
        if self.loop_blocks:
            n = len(self.loop_blocks)
            parts.append(f"{n} loop{'s' if n != 1 else ''} in larger batches")
        return "BatchPlan(" + "; ".join(parts) + ")"


def _unused_space(spaces: Spaces, key: str, used: set[str]) -> str:
    listed = ", ".join(f"`{u}`" for u in sorted(used)) or "none"
    members = spaces.shown_members(key)
    inner = [m for m in members if m in used]
    example = ", ".join(f"{m!r}: 2" for m in inner or members)
    return (
        f"no index of the equations is in space `{key}` (spaces used: {listed}); `{key}` "
        f"is the union of {', '.join(members)}, and a loop batches an index's own space: "
        f"batch its members instead, e.g. {{{example}}}."
    )


def check_mode_order(mode_order: Sequence[str], spaces: Spaces) -> tuple[str, ...]:
    """``mode_order`` (spaces, outermost loop first) with canonical keys, checked.

    Raises:
        PlanError: ``mode_order`` is a bare string or not a sequence, names a space twice,
            or names a space ``spaces`` does not know.

    Example:
        >>> from sq_jax.expr.spaces import Spaces
        >>> check_mode_order(["K", "i"], Spaces(i=2, K=4))
        ('Κ', 'i')
    """
    if isinstance(mode_order, str) or not isinstance(mode_order, Iterable):
        raise PlanError(
            f"mode_order must be a sequence of space names such as ('a', 'i'), got {mode_order!r}."
        )
    out: list[str] = []
    problems = []
    for key in mode_order:
        try:
            canon = spaces.resolve(key) if isinstance(key, str) else None
        except SqJaxError:
            canon = None
        if canon is None:
            known = ", ".join(f"`{k}`" for k in spaces.keys())
            problems.append(f"{key!r} is not a known index space (known: {known})")
        elif canon in out:
            problems.append(f"space `{canon}` is given twice")
        else:
            out.append(canon)
    if problems:
        raise PlanError(
            f"mode_order={tuple(mode_order)!r}: " + "; ".join(problems) + "; list each space "
            "at most once, outermost loop first."
        )
    return tuple(out)
