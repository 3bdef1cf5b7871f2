"""Build the eval forest: binarize every product and fold common subexpressions.

:func:`build_forest` is the one entry point. For each equation it

1. checks the right-hand side (no normal operators, no unexpanded ``Â``/``Ŝ``/``P̂``,
   no proto-indices, every index space has an extent);
2. splits it into terms (a top-level sum's terms, nested sums flattened), and each term
   into a coefficient and operands: nested products are flattened into their parent
   (scalars multiplied), a :class:`~sq_jax.expr.nodes.Constant` is folded into the
   coefficient, a tensor is a LEAF, a variable or power a SCALAR, and a nested sum of
   several terms is one operand, built the same way as its own SUM chain;
3. binarizes each term's product (:func:`sq_jax.forest.binarize.binarize`);
4. groups the permuted copies of terms (an ``Â``/``Ŝ`` expansion) so that each
   permutation is applied once, to the sum of the families it permutes
   (:mod:`sq_jax.forest._permsum`);
5. chains the summands into a left-deep chain of binary SUM nodes carrying each
   summand's coefficient; a single term's coefficient goes to :attr:`Root.coef` instead.

Equations are a program: a tensor (or variable) whose label an *earlier* equation defines
reads that equation's tree — relabeled onto the read's indices (summed labels get fresh
ordinals), its coefficient folded into the term's — instead of an input; CSE then makes
it one value with the defining equation's. ``outputs=`` keeps only some results as roots:
the others live on inside the trees that read them (never materialised as outputs).

A term's result labels are the left-hand side's indices (none for a variable). A label
on two operands and not in the result is summed, one in the result stays (a Hadamard
product when it is on two operands); a label on only one operand must be in the result.
A nested sum keeps the labels that its enclosing product still needs (the enclosing
result's and its sibling factors'); the others are summed inside each of its terms.

Common subexpressions need no separate pass: every node gets a label-blind key when it is
made (:mod:`sq_jax.forest.canon`), and :class:`~sq_jax.forest.nodes.Forest` treats all
nodes of one key as one value.

Known limitations: nested sums are built recursively (depth = parenthesis depth); a sum
chain's order is the order of the terms (a group of permuted copies takes the place of
its first term).

Example:
    >>> from sq_jax.expr.nodes import Equation, Index, Product, Tensor, Variable
    >>> from sq_jax.expr.spaces import Spaces
    >>> i1, i2, a1, a2 = Index("i", 1), Index("i", 2), Index("a", 1), Index("a", 2)
    >>> g = Tensor("g", bra=(i1, i2), ket=(a1, a2))
    >>> t = Tensor("t", bra=(a1, a2), ket=(i1, i2))
    >>> eq = Equation(Variable("E"), Product(Fraction(1, 4), (g, t)))
    >>> forest = build_forest([eq], Spaces(i=4, a=6))
    >>> root = forest.roots[0]
    >>> root.name, root.coef, root.node.kind.name, forest.flops
    ('E', Fraction(1, 4), 'PRODUCT', 1152)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from .._errors import ExpressionError, PlanError, SpaceError
from ..expr.nodes import (
    Constant,
    Equation,
    Expr,
    Index,
    NormalOperator,
    Power,
    Product,
    Sum,
    Tensor,
    Variable,
    result_name,
)
from ..expr.spaces import Spaces
from ..expr.validate import result_read_problems
from ._permsum import group_permuted
from .binarize import binarize, count_labels, resolve_optimizer
from .canon import leaf_node, scalar_node, sum_node
from .factor import factor_terms, priced_once, sharing_groups, unfactored, with_blocks
from .inputs import input_names
from .nodes import EvalNode, Forest, NodeKind, Root

__all__ = ["build_forest", "select_outputs"]

_RESERVED = {"Â": "antisymmetrizer", "Ŝ": "symmetrizer", "P̂": "transposition operator"}
_MAX_TEXT = 160


def build_forest(
    equations: Iterable[Equation] | Equation,
    spaces: Spaces,
    *,
    optimize: Any = "auto",
    outputs: Sequence[str] | None = None,
    dress: bool = False,
) -> Forest:
    """Binarize and CSE-fold ``equations`` into an eval forest, one root per equation.

    Equations are a program: a tensor (or variable) whose label is the result of an
    *earlier* equation reads that equation's value — its tree, relabeled onto the read's
    indices, becomes an operand, scheduled and batched like any other node — instead of
    an input. ``outputs`` selects which results are roots of the forest (returned by the
    compiled program); the others stay internal to the trees that read them.

    Args:
        equations: the equations, e.g. from :func:`sq_jax.parse` (or one equation).
        spaces: the index spaces, with an extent for every space the equations use (the
            contraction order is chosen on these extents).
        optimize: contraction-order optimizer: ``"auto"`` (an exhaustive search over all
            binary trees up to 6 operands, opt_einsum's ``"dp"`` beyond; see
            :mod:`sq_jax.forest.binarize`), an opt_einsum optimizer name such as
            ``"optimal"`` or ``"greedy"``, or an ``opt_einsum.paths.PathOptimizer``.
        outputs: the result labels to keep as roots, e.g. ``("R",)``; ``None`` (the
            default) keeps every equation's result.
        dress: let a sum fold a shared inner sum into a dressed factor,
            ``F1·S + F2·S -> (F1 + F2)·S`` (closed-shell CCSD's T1-dressed ladder): fewer
            FLOPs (ccsd_cs at o=21, v=93: 1.91e11 -> 1.82e11) for a larger intermediate
            (there a v⁴ one; unbatched static peak 10.8 -> 38.6 MB at o=10, v=38).

    Returns:
        The forest; ``str(forest)`` lists its distinct values.

    Raises:
        ExpressionError: for a normal operator, an unexpanded ``Â``/``Ŝ``/``P̂``, a
            proto-index, an index that is on one factor only but not on the left-hand
            side, a left-hand-side index missing from a term, an empty sum, or a result
            read by its own or an earlier equation (or with other slot spaces).
        SpaceError: for an index whose space is unknown or has no extent.
        PlanError: for ``outputs`` naming no result or an unknown one.
        ValueError: for an unknown ``optimize``.

    Example:
        >>> from sq_jax.expr.nodes import Equation, Index, Product, Sum, Tensor
        >>> from sq_jax.expr.spaces import Spaces
        >>> a1, a2, i1 = Index("a", 1), Index("a", 2), Index("i", 1)
        >>> f_ai = Tensor("f", (a1,), (i1,))
        >>> ft = Product(Fraction(1), (Tensor("f", (a1,), (a2,)), Tensor("t", (a2,), (i1,))))
        >>> eq = Equation(Tensor("R", (a1,), (i1,)), Sum((f_ai, ft)))
        >>> forest = build_forest(eq, Spaces(i=2, a=3))
        >>> forest.roots[0].node.kind.name, len(forest.values())
        ('SUM', 2)
    """
    eqs = (equations,) if isinstance(equations, Equation) else tuple(equations)
    resolve_optimizer(optimize, 0)  # fail early on a bad optimizer name
    read_problems = result_read_problems(eqs)
    if read_problems:
        raise ExpressionError("cannot build the eval forest:\n- " + "\n- ".join(read_problems))
    keep = select_outputs(outputs, [eq.name for eq in eqs])
    for eq in eqs:
        _check_equation(eq, spaces)  # must run first: the builder assumes checked input
    with priced_once(), with_blocks(dress):  # the builds below price the same products
        results = _cheapest_roots(eqs, spaces, optimize)
    kept = tuple(root for name, root in results.items() if name in keep)
    forest = Forest(kept, spaces)
    if len(kept) == len(results):
        return forest
    everything = Forest(tuple(results.values()), spaces)
    return Forest(kept, spaces, input_names(everything) - input_names(forest))


def _cheapest_roots(eqs: Sequence[Equation], spaces: Spaces, optimize: Any) -> dict[str, Root]:
    """The roots of the cheapest of up to four builds (FLOPs never above the flat forest's).

    1. sums record the group values they choose (:class:`~sq_jax.forest.factor.GroupSharing`);
    2. again, each sum pricing a value that another sum chose as paid;
    3. when a bilinear block was taken, once without blocks: a block frees intermediates
       that its sum alone no longer needs, but another equation may read them;
    4. when anything was factored, once unfactored (cheap): the pass prices each sum on
       its own, and on tiny extents the whole forest can come out a few FLOPs dearer.
    """

    def flops(roots: dict[str, Root]) -> int:
        return Forest(tuple(roots.values()), spaces).flops

    with sharing_groups() as record:
        best = _build_roots(eqs, spaces, optimize)
    blocks = record.blocks_taken
    if len(record.chosen) > 1:
        with sharing_groups(record) as again:
            other = _build_roots(eqs, spaces, optimize)
        blocks += again.blocks_taken
        best = min(best, other, key=flops)
    if blocks:
        with sharing_groups(blocks=False):
            best = min(best, _build_roots(eqs, spaces, optimize), key=flops)
    if record.chosen:  # the pass prices one sum at a time; the whole forest may disagree
        with unfactored():
            best = min(best, _build_roots(eqs, spaces, optimize), key=flops)
    return best


def _build_roots(eqs: Sequence[Equation], spaces: Spaces, optimize: Any) -> dict[str, Root]:
    """Each (checked) equation's root, by result label, in order."""
    results: dict[str, Root] = {}
    for eq in eqs:
        builder = _Builder(eq, spaces, optimize, results)
        node, coef = builder.build_sum(_split_terms(eq.rhs), _lhs_labels(eq))
        lhs_is_tensor = isinstance(eq.lhs, Tensor)
        indices = eq.lhs.indices if isinstance(eq.lhs, Tensor) else ()
        results[eq.name] = Root(eq.name, indices, node, coef, lhs_is_tensor)
    return results


def select_outputs(outputs: Sequence[str] | None, names: Sequence[str]) -> frozenset[str]:
    """The result labels to return: ``outputs`` checked against the equations' ``names``.

    Raises:
        PlanError: ``outputs`` is a bare string, empty, or names a label no equation
            computes (the message lists the known results).

    Example:
        >>> sorted(select_outputs(None, ["X", "R"])), sorted(select_outputs(["R"], ["X", "R"]))
        (['R', 'X'], ['R'])
    """
    if outputs is None:
        return frozenset(names)
    known = ", ".join(f"`{n}`" for n in names) or "none"
    if isinstance(outputs, str) or not isinstance(outputs, Iterable):
        raise PlanError(
            f"outputs must be a sequence of result labels such as ('R',), got {outputs!r}; "
            f"known results: {known}."
        )
    wanted = list(outputs)
    unknown = [o for o in wanted if not isinstance(o, str) or o not in names]
    if unknown:
        raise PlanError(
            f"outputs names {', '.join(repr(o) for o in unknown)}, which no equation "
            f"computes; known results: {known}. Pass some of them, e.g. outputs=({names[-1]!r},)."
            if names
            else f"outputs={outputs!r} but there are no equations."
        )
    if not wanted:
        raise PlanError(
            f"outputs=() returns nothing; name at least one result (known: {known}), or pass "
            "outputs=None for all of them."
        )
    return frozenset(wanted)


# -- checks ------------------------------------------------------------------------------


def _text(expr: Expr | Equation) -> str:
    text = str(expr)
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"


def _walk(expr: Expr) -> Iterable[Expr]:
    """Every node of ``expr``, pre-order, iteratively."""
    stack: list[Expr] = [expr]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, Product):
            stack.extend(reversed(node.factors))
        elif isinstance(node, Sum):
            stack.extend(reversed(node.terms))
        elif isinstance(node, Power):
            stack.append(node.base)


def _where(eq: Equation, part: Expr | None) -> str:
    if part is None:
        return f"in equation `{eq.name}`, left-hand side `{_text(eq.lhs)}`"
    return f"in equation `{eq.name}`, term `{_text(part)}`"


def _check_equation(eq: Equation, spaces: Spaces) -> None:
    """Collect every violation of ``eq`` and raise one error listing them all."""
    problems: list[str] = []
    space_problems: list[str] = []
    seen_space: set[Index] = set()

    def check_index(ix: Index, part: Expr | None) -> None:
        if ix.protos:
            problems.append(
                f"{_where(eq, part)}: index `{ix}` has proto-indices; the forest needs plain "
                "indices. Parse with `drop_proto_indices=True` (or replace each index by its "
                "plain form) first."
            )
            ix = ix.plain()
        if ix in seen_space:
            return
        seen_space.add(ix)
        try:
            spaces.extent(ix.space)
        except SpaceError as err:
            space_problems.append(f"{_where(eq, part)}: index `{ix}`: {err}")

    if isinstance(eq.lhs, Tensor):
        for ix in eq.lhs.indices:
            check_index(ix, None)
        if len(set(eq.lhs.indices)) != len(eq.lhs.indices):
            problems.append(
                f"{_where(eq, None)}: an index is repeated; a result's indices must be distinct."
            )
    terms = _split_terms(eq.rhs, check_empty=False)
    if not terms:
        problems.append(
            f"in equation `{eq.name}`: the right-hand side is a sum with no terms; "
            "write 0 as a constant term or remove the equation."
        )
    for term in terms:
        for node in _walk(term):
            if isinstance(node, NormalOperator):
                problems.append(
                    f"{_where(eq, term)}: normal operator `{_text(node)}` cannot be evaluated "
                    "numerically; take its vacuum expectation value (or drop the term) "
                    "before building the forest."
                )
            elif isinstance(node, Tensor):
                if node.label in _RESERVED:
                    problems.append(
                        f"{_where(eq, term)}: `{node.label}` ({_RESERVED[node.label]}) is not "
                        "expanded; expand it into its index permutations (SeQuant's "
                        "`expand_A_op`/`expand_S_op`) before building the forest."
                    )
                for ix in node.indices:
                    check_index(ix, term)
            elif isinstance(node, Sum) and not node.terms:
                problems.append(f"{_where(eq, term)}: a sum has no terms; remove it or write 0.")
    if problems:
        raise ExpressionError("cannot build the eval forest:\n- " + "\n- ".join(problems))
    if space_problems:
        raise SpaceError("cannot build the eval forest:\n- " + "\n- ".join(space_problems))


# -- terms -------------------------------------------------------------------------------


def _split_terms(expr: Expr, *, check_empty: bool = True) -> list[Expr]:
    """The terms of ``expr``: nested sums of sums are flattened, in order."""
    terms: list[Expr] = []
    stack: list[Expr] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Sum):
            stack.extend(reversed(node.terms))
        else:
            terms.append(node)
    if check_empty and not terms:
        raise ExpressionError(f"the sum `{_text(expr)}` has no terms; write 0 or remove it.")
    return terms


def _flatten_product(term: Expr) -> tuple[Fraction, list[Expr]]:
    """(coefficient, factors): nested products flattened, constants folded, in order."""
    coef = Fraction(1)
    factors: list[Expr] = []
    stack: list[Expr] = [term]
    while stack:
        node = stack.pop()
        if isinstance(node, Product):
            coef *= node.scalar
            stack.extend(reversed(node.factors))
        elif isinstance(node, Constant):
            coef *= node.value
        elif isinstance(node, Sum) and len(node.terms) == 1:
            stack.append(node.terms[0])
        else:
            factors.append(node)
    return coef, factors


def _ordered_labels(expr: Expr) -> list[Index]:
    """The tensor labels of ``expr`` in order of first appearance."""
    seen = {ix: None for node in _walk(expr) if isinstance(node, Tensor) for ix in node.indices}
    return list(seen)


def _lhs_labels(eq: Equation) -> tuple[Index, ...]:
    return eq.lhs.indices if isinstance(eq.lhs, Tensor) else ()


class _Builder:
    """Builds one equation's tree; reads of earlier results become their relabeled trees."""

    def __init__(
        self, eq: Equation, spaces: Spaces, optimize: Any, results: Mapping[str, Root]
    ) -> None:
        self.eq, self.spaces, self.optimize, self.results = eq, spaces, optimize, results
        # fresh ordinals for the summed labels of a read result: above any the equation uses
        used = [
            ix.ordinal for node in _walk(eq.rhs) if isinstance(node, Tensor) for ix in node.indices
        ]
        used += [ix.ordinal for ix in _lhs_labels(eq)]
        self.next_ordinal = max(used, default=0) + 1

    def operands(
        self, factors: Sequence[Expr], result: Sequence[Index]
    ) -> tuple[list[EvalNode], Fraction]:
        """One term's operand nodes (a nested sum is its own SUM chain) and extra scalar."""
        operands: list[EvalNode] = []
        scalar = Fraction(1)
        for n, factor in enumerate(factors):
            read = self.results.get(result_name(factor))
            if read is not None:
                operands.append(self.read(factor, read))
                scalar *= read.coef
            elif isinstance(factor, Tensor):
                operands.append(leaf_node(factor))
            elif isinstance(factor, (Variable, Power)):
                operands.append(scalar_node(factor))
            elif isinstance(factor, Sum):
                # keep what the rest of the product needs: the result's labels, then the
                # sibling factors' labels, in order of appearance (this order only breaks ties)
                needed = dict.fromkeys(result)
                for k, other in enumerate(factors):
                    if k != n:
                        needed.update(dict.fromkeys(_ordered_labels(other)))
                mine = set(_ordered_labels(factor))
                inner = tuple(ix for ix in needed if ix in mine)
                node, coef = self.build_sum(_split_terms(factor), inner)
                operands.append(node)
                scalar *= coef
            else:  # pragma: no cover - _check_equation rejects everything else
                raise ExpressionError(f"cannot evaluate factor `{_text(factor)}`.")
        return operands, scalar

    def read(self, factor: Expr, root: Root) -> EvalNode:
        """``root``'s tree with its result labels renamed to the read's, others fresh.

        The tree keeps its keys (they are label-blind), so the value is shared with the
        defining equation's; only the labels of this occurrence change. Summed labels get
        ordinals no other index of this equation uses, so they never meet the reader's.
        """
        slots = factor.indices if isinstance(factor, Tensor) else ()
        names: dict[Index, Index] = dict(zip(root.indices, slots, strict=True))

        def rename(ix: Index) -> Index:
            if ix not in names:
                names[ix] = Index(ix.space, self.next_ordinal)
                self.next_ordinal += 1
            return names[ix]

        done: dict[int, EvalNode] = {}
        stack: list[tuple[EvalNode, bool]] = [(root.node, False)]
        while stack:  # iterative post-order: sum chains can be thousands deep
            node, expanded = stack.pop()
            if id(node) in done:
                continue
            if node.kind is NodeKind.SCALAR:
                done[id(node)] = node
            elif node.kind is NodeKind.LEAF:
                t = node.tensor
                assert t is not None
                bra, ket, aux = (tuple(map(rename, g)) for g in (t.bra, t.ket, t.aux))
                tensor = dataclasses.replace(t, bra=bra, ket=ket, aux=aux)
                done[id(node)] = dataclasses.replace(node, indices=tensor.indices, tensor=tensor)
            elif not expanded:
                stack += [(node, True), (node.right, False), (node.left, False)]  # type: ignore[list-item]
            else:
                left, right = done[id(node.left)], done[id(node.right)]
                indices = tuple(map(rename, node.indices))
                done[id(node)] = dataclasses.replace(node, indices=indices, left=left, right=right)
        return done[id(root.node)]

    def build_sum(
        self, terms: Sequence[Expr], result: Sequence[Index]
    ) -> tuple[EvalNode, Fraction]:
        """The left-deep SUM chain of ``terms`` (coefficient 1), or one term's node and scalar.

        Permuted copies are grouped first (:func:`~sq_jax.forest._permsum.group_permuted`).
        The chain keeps the first summand's canonical mode order all the way up, so its keys
        do not depend on how the left-hand side orders its indices.
        """
        # distributive law across terms: F·X + F·Y -> F·(X + Y) where it saves FLOPs
        terms = factor_terms(terms, result, self.spaces, self.optimize)
        built: list[tuple[EvalNode, Fraction]] = []
        for term in terms:
            coef, factors = _flatten_product(term)
            operands, inner_coef = self.operands(factors, result)
            _check_term_labels(operands, result, term, self.eq)
            built.append(
                (binarize(operands, result, self.spaces, self.optimize), coef * inner_coef)
            )
        first: tuple[EvalNode, Fraction] | None = None
        chain: EvalNode | None = None
        for node, coef in group_permuted(built, result):
            if first is None:
                first = (node, coef)
            elif chain is None:
                chain = sum_node(first[0], first[1], node, coef, first[0].indices)
            else:
                chain = sum_node(chain, Fraction(1), node, coef, chain.indices)
        assert first is not None  # _split_terms never returns no terms
        return first if chain is None else (chain, Fraction(1))


def _check_term_labels(
    operands: Sequence[EvalNode], result: Sequence[Index], term: Expr, eq: Equation
) -> None:
    counts = count_labels(operands)
    result_set = set(result)
    loose = [ix for ix, c in counts.items() if c == 1 and ix not in result_set]
    missing = [ix for ix in result if ix not in counts]
    problems = []
    if loose:
        problems.append(
            f"index {', '.join(f'`{ix}`' for ix in loose)} is on one factor only and not "
            f"on the result ({', '.join(map(str, result)) or 'a scalar'}); a summed index "
            "must appear on two factors. Fix the term or add the index to the left-hand side."
        )
    if missing:
        problems.append(
            f"result index {', '.join(f'`{ix}`' for ix in missing)} does not appear in the "
            "term; every term of a sum must carry all of the result's indices."
        )
    if problems:
        raise ExpressionError(
            f"in equation `{eq.name}`, term `{_text(term)}`: " + " ".join(problems)
        )
