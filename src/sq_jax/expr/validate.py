"""Check that parsed equations are valid tensor equations.

:func:`validate` runs a list of small named checks, collects every violation, and raises
one :class:`~sq_jax.ExpressionError` with a bullet per violation, each naming the
equation and quoting the offending term:

* ``_check_index_spaces``: every index's space is in the registry;
* ``_check_index_structure``: no index occurs more than twice in one product (each tensor
  slot counts; a nested sum or product factor counts its free indices once); the terms
  of a sum have the same free indices, and they match the result's; the result has no
  repeated index. An index of a product is *free* if it occurs once, or twice and also
  in the result (a Hadamard product);
* ``_check_label_kinds``: no label is both a tensor and a variable;
* ``_check_unique_definitions``: no label is defined by two equations;
* ``_check_result_signatures``: a result used by a later equation has the (bra, ket,
  aux) signature it was defined with;
* :func:`result_read_problems`: equations are a program — a result is read only by
  *later* equations (never by itself or an earlier one), with the slot spaces it was
  defined with, distinct indices, and (for a scalar result) not under a power or ``^*``;
* ``_check_rank_overloading`` (only with ``allow_rank_overloading=False``): one
  signature per label.

Normal operators and unexpanded ``Â``/``Ŝ`` factors are structurally checked but not
rejected: evaluation (the forest) rejects them. Walks are iterative over terms, so sums
of thousands of terms are fine.

Example:
    >>> import sq_jax as sq
    >>> from sq_jax.expr.validate import validate
    >>> eqs = sq.parse("R{a1;i1} = f{a1;i2} t{a2;i1}", validate=False)
    >>> try:
    ...     validate(eqs)
    ... except sq.ExpressionError as err:
    ...     print(str(err).splitlines()[1][:54])
      - equation `R` (#1): the right-hand side `f{a_1;i_2}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .._errors import ExpressionError
from . import nodes as ex
from .nodes import result_name, walk
from .serialize import serialize
from .spaces import DEFAULT_SPACES, Spaces

__all__ = ["result_read_problems", "validate"]

_MAX_BULLETS = 25
_MAX_QUOTE = 160
_OPERATOR_TENSORS = frozenset({"\u00c2", "A\u0302", "\u015c", "S\u0302", "P\u0302"})
"""Symmetrizer/permutation labels (precomposed and combining spellings): any rank."""


@dataclass(frozen=True, slots=True)
class _Item:
    where: str
    """How messages name it: "equation `R` (#2)" or "the expression"."""
    lhs: ex.Tensor | ex.Variable | None
    rhs: ex.Expr


def validate(
    equations: ex.Equation | Iterable[ex.Equation] | ex.Expr,
    spaces: Spaces = DEFAULT_SPACES,
    *,
    allow_rank_overloading: bool = True,
) -> None:
    """Check equations (or one bare expression) and raise on every violation at once.

    Args:
        equations: the equations, in order (later ones may read earlier results), or a
            single equation, or a bare expression (checked without a result tensor).
        spaces: the registry every index space must be in.
        allow_rank_overloading: allow a label to be used with several (bra, ket, aux)
            signatures, as distinct inputs (``t{a1;i1}`` and ``t{a1,a2;i1,i2}``).

    Raises:
        ExpressionError: with one bullet per violation, each naming the equation and
            quoting the offending term.

    Example:
        >>> import sq_jax as sq
        >>> validate(sq.parse("E = 1/4 g{i1,i2;a1,a2} t{a1,a2;i1,i2}"))
        >>> try:
        ...     validate(sq.parse("E = x", validate=False) + sq.parse("E = x{i1;i1}"))
        ... except sq.ExpressionError as err:
        ...     print(str(err).splitlines()[0])
        2 problems in the equations:
    """
    items = _items(equations)
    problems: list[str] = []
    problems += _check_index_spaces(items, spaces)
    problems += _check_index_structure(items)
    problems += _check_label_kinds(items)
    problems += _check_unique_definitions(items)
    problems += _check_result_signatures(items)
    problems += _read_problems(items)
    if not allow_rank_overloading:
        problems += _check_rank_overloading(items)
    if not problems:
        return
    shown = problems[:_MAX_BULLETS]
    lines = [f"{len(problems)} problem{'s' if len(problems) > 1 else ''} in the equations:"]
    lines += [f"  - {p}" for p in shown]
    if len(problems) > len(shown):
        lines.append(f"  … and {len(problems) - len(shown)} more.")
    raise ExpressionError("\n".join(lines))


# -- helpers -------------------------------------------------------------------------------


def _items(equations: ex.Equation | Iterable[ex.Equation] | ex.Expr) -> list[_Item]:
    if isinstance(equations, ex.Equation):
        equations = (equations,)
    elif isinstance(equations, ex.Expr):  # one expression node of any kind
        return [_Item("the expression", None, equations)]
    items = []
    for k, eq in enumerate(equations, start=1):
        if not isinstance(eq, ex.Equation):
            raise TypeError(
                f"validate() takes equations or one expression; item {k} is a "
                f"{type(eq).__name__}. Parse text with sq_jax.parse first."
            )
        items.append(_Item(f"equation `{eq.name}` (#{k})", eq.lhs, eq.rhs))
    return items


def _quote(expr: ex.Expr | ex.Equation | ex.Index) -> str:
    text = serialize(expr, annot_symm=False)
    if len(text) > _MAX_QUOTE:
        text = text[: _MAX_QUOTE - 1] + "…"
    return f"`{text}`"


def _set(indices: Iterable[ex.Index]) -> str:
    items = sorted(str(i) for i in indices)
    return "{" + ", ".join(items) + "}" if items else "{} (none)"


def _slots(node: ex.Tensor | ex.NormalOperator) -> tuple[ex.Index, ...]:
    if isinstance(node, ex.Tensor):
        return node.indices
    return node.annihilators + node.creators


def _nodes(item: _Item) -> Iterator[ex.Expr]:
    if item.lhs is not None:
        yield item.lhs
    yield from walk(item.rhs)


# -- checks --------------------------------------------------------------------------------


def _check_index_spaces(items: list[_Item], spaces: Spaces) -> list[str]:
    problems = []
    for item in items:
        reported: set[str] = set()
        for node in _nodes(item):
            if not isinstance(node, ex.Tensor | ex.NormalOperator):
                continue
            stack = list(_slots(node))
            while stack:
                index = stack.pop()
                stack.extend(index.protos)
                if index.space in reported or spaces.is_known(index.space):
                    continue
                reported.add(index.space)
                known = ", ".join(f"`{k}`" for k in spaces.keys())
                problems.append(
                    f"{item.where}: index `{index}` in {_quote(node)} is in space "
                    f"`{index.space}`, which the registry does not know (known: {known}); "
                    f"register it with `spaces.with_space({index.space!r}, extent=...)`."
                )
    return problems


class _Structure:
    """Free-index analysis of one equation, collecting problems."""

    def __init__(self, item: _Item, problems: list[str]) -> None:
        self.where = item.where
        self.external = (
            frozenset(item.lhs.indices) if isinstance(item.lhs, ex.Tensor) else frozenset()
        )
        self.problems = problems

    def free(self, expr: ex.Expr) -> frozenset[ex.Index]:
        if isinstance(expr, ex.Tensor | ex.NormalOperator):
            return self.summarize(Counter(_slots(expr)), expr)
        if isinstance(expr, ex.Product):
            counts: Counter[ex.Index] = Counter()
            for f in expr.factors:
                if isinstance(f, ex.Tensor | ex.NormalOperator):
                    counts.update(_slots(f))
                elif isinstance(f, ex.Product | ex.Sum):
                    counts.update(self.free(f))
            return self.summarize(counts, expr)
        if isinstance(expr, ex.Sum):
            return self.sum_free(expr, None)
        return frozenset()

    def summarize(self, counts: Counter[ex.Index], expr: ex.Expr) -> frozenset[ex.Index]:
        for index, n in counts.items():
            if n > 2:
                self.problems.append(
                    f"{self.where}: index `{index}` occurs {n} times in the term "
                    f"{_quote(expr)}; an index may occur at most twice in a product (once "
                    "if it is free, twice if it is summed or a Hadamard index of the "
                    "result). Rename the extra occurrences."
                )
        return frozenset(i for i, n in counts.items() if n == 1 or i in self.external)

    def sum_free(self, expr: ex.Sum, expected: frozenset[ex.Index] | None) -> frozenset[ex.Index]:
        frees = [self.free(t) for t in expr.terms]
        if expected is None:
            reference, first = frees[0], expr.terms[0]
            for term, got in zip(expr.terms[1:], frees[1:], strict=True):
                if got != reference:
                    self.problems.append(
                        f"{self.where}: the term {_quote(term)} has free indices {_set(got)}, "
                        f"but the first term {_quote(first)} of the same sum has "
                        f"{_set(reference)}; every term of a sum needs the same free indices."
                    )
            return reference
        for term, got in zip(expr.terms, frees, strict=True):
            if got != expected:
                self.problems.append(
                    f"{self.where}: the term {_quote(term)} has free indices {_set(got)}, but "
                    f"the result has {_set(expected)}; make the term's uncontracted indices "
                    "match the result's."
                )
        return expected

    def check(self, lhs: ex.Tensor | ex.Variable | None, rhs: ex.Expr) -> None:
        if isinstance(lhs, ex.Tensor):
            repeated = sorted(str(i) for i, n in Counter(lhs.indices).items() if n > 1)
            if repeated:
                self.problems.append(
                    f"{self.where}: the result {_quote(lhs)} repeats index "
                    f"{', '.join(f'`{r}`' for r in repeated)}; a result's indices must be "
                    "distinct."
                )
        expected = None
        if lhs is not None:
            expected = frozenset(lhs.indices) if isinstance(lhs, ex.Tensor) else frozenset()
        if isinstance(rhs, ex.Sum):
            self.sum_free(rhs, expected)
            return
        got = self.free(rhs)
        if expected is not None and got != expected:
            self.problems.append(
                f"{self.where}: the right-hand side {_quote(rhs)} has free indices "
                f"{_set(got)}, but the result {_quote(lhs)} has {_set(expected)}; make "
                "the uncontracted indices match the result's."
            )


def _check_index_structure(items: list[_Item]) -> list[str]:
    problems: list[str] = []
    for item in items:
        _Structure(item, problems).check(item.lhs, item.rhs)
    return problems


def _check_label_kinds(items: list[_Item]) -> list[str]:
    tensors: dict[str, tuple[str, str]] = {}
    variables: dict[str, tuple[str, str]] = {}
    for item in items:
        for node in _nodes(item):
            if isinstance(node, ex.Tensor):
                tensors.setdefault(node.label, (item.where, _quote(node)))
            elif isinstance(node, ex.Variable):
                variables.setdefault(node.name, (item.where, _quote(node)))
    problems = []
    for label in tensors.keys() & variables.keys():
        (t_where, t_text), (v_where, _) = tensors[label], variables[label]
        problems.append(
            f"label `{label}` is used as a tensor ({t_text} in {t_where}) and as a variable "
            f"(in {v_where}); rename one of them."
        )
    return sorted(problems)


def _check_unique_definitions(items: list[_Item]) -> list[str]:
    defined: dict[str, list[str]] = {}
    for item in items:
        if item.lhs is not None:
            name = item.lhs.label if isinstance(item.lhs, ex.Tensor) else item.lhs.name
            defined.setdefault(name, []).append(item.where)
    return [
        f"label `{name}` is defined by {len(wheres)} equations ({', '.join(wheres)}); each "
        "result needs exactly one equation (add the right-hand sides into one sum)."
        for name, wheres in defined.items()
        if len(wheres) > 1
    ]


def _check_result_signatures(items: list[_Item]) -> list[str]:
    defined: dict[str, tuple[ex.Tensor, str]] = {}
    problems = []
    for item in items:
        for node in walk(item.rhs):
            if isinstance(node, ex.Tensor) and node.label in defined:
                result, where = defined[node.label]
                if node.signature != result.signature:
                    problems.append(
                        f"{item.where}: reads {_quote(node)} with (bra, ket, aux) = "
                        f"{node.signature}, but {where} defines `{node.label}` as "
                        f"{_quote(result)} with {result.signature}; use the defined shape "
                        "or rename the input."
                    )
        if isinstance(item.lhs, ex.Tensor):
            defined.setdefault(item.lhs.label, (item.lhs, item.where))
    return problems


def _check_rank_overloading(items: list[_Item]) -> list[str]:
    seen: dict[str, dict[tuple[int, int, int], tuple[str, str]]] = {}
    for item in items:
        for node in _nodes(item):
            if isinstance(node, ex.Tensor) and node.label not in _OPERATOR_TENSORS:
                seen.setdefault(node.label, {}).setdefault(
                    node.signature, (_quote(node), item.where)
                )
    problems = []
    for label, sigs in seen.items():
        if len(sigs) > 1:
            uses = "; ".join(f"{text} in {where}" for text, where in sigs.values())
            problems.append(
                f"label `{label}` is used with {len(sigs)} (bra, ket, aux) signatures "
                f"({uses}) but allow_rank_overloading=False; rename all but one, or allow "
                "rank overloading."
            )
    return problems


def result_read_problems(equations: Iterable[ex.Equation]) -> list[str]:
    """Where equations read results they may not read (one message per violation).

    Equations are a program: a result (the left-hand side's label) read by a *later*
    equation is the value the defining equation computes, not an input. Reading a result
    in its own equation or in an earlier one, with other slot spaces than it was defined
    with, with a repeated index (a trace), or — for a scalar result — under a power or a
    conjugation is reported here.

    Example:
        >>> import sq_jax as sq
        >>> eqs = sq.parse("R{a1;i1} = X{a1;i1}", validate=False)
        >>> eqs += sq.parse("X{a1;i1} = f{a1;i1}", validate=False)
        >>> print(result_read_problems(eqs)[0][:72])
        equation `R` (#1) reads `X{a_1;i_1}`, but `X` is computed later, by equa
    """
    return _read_problems(_items(tuple(equations)))


def _read_problems(items: list[_Item]) -> list[str]:
    defined: dict[str, tuple[int, _Item]] = {}
    for k, item in enumerate(items):
        if item.lhs is not None:
            defined.setdefault(
                item.lhs.label if isinstance(item.lhs, ex.Tensor) else item.lhs.name, (k, item)
            )
    problems: list[str] = []
    for k, item in enumerate(items):
        for node in walk(item.rhs):
            if isinstance(node, ex.Power) and result_name(node.base) in defined:
                problems.append(
                    f"{item.where}: {_quote(node)} raises the computed result "
                    f"`{result_name(node.base)}` to a power; only products of results are "
                    "supported. Write the product out (`E E` for `E^(2)`)."
                )
                continue
            name = result_name(node)
            if name is None or name not in defined:
                continue
            j, source = defined[name]
            if j == k:
                problems.append(
                    f"{item.where} reads {_quote(node)}, its own result; an equation cannot "
                    "read the value it defines. Rename the input or the result."
                )
            elif j > k:
                problems.append(
                    f"{item.where} reads {_quote(node)}, but `{name}` is computed later, by "
                    f"{source.where}; move that equation before this one, or rename the "
                    "input if it is not that result."
                )
            elif isinstance(node, ex.Variable) and node.conjugated:
                problems.append(
                    f"{item.where}: {_quote(node)} conjugates the computed result `{name}`; "
                    f"results are real, write `{name}` without '^*'."
                )
            elif isinstance(node, ex.Tensor) and isinstance(source.lhs, ex.Tensor):
                problems += _tensor_read_problems(item, node, source)
    return problems


def _tensor_read_problems(item: _Item, read: ex.Tensor, source: _Item) -> list[str]:
    result = source.lhs
    assert isinstance(result, ex.Tensor)
    if read.signature != result.signature:
        return []  # _check_result_signatures reports it
    problems = []
    got = tuple(ix.space for ix in read.indices)
    want = tuple(ix.space for ix in result.indices)
    if got != want:
        problems.append(
            f"{item.where} reads {_quote(read)} with slot spaces ({', '.join(got)}), but "
            f"{source.where} computes {_quote(result)} with ({', '.join(want)}); read it "
            "with the spaces it is defined with."
        )
    repeated = sorted(str(i) for i, n in Counter(read.indices).items() if n > 1)
    if repeated:
        problems.append(
            f"{item.where} reads the computed result {_quote(read)} with repeated index "
            f"{', '.join(f'`{r}`' for r in repeated)}; a trace of a computed result is not "
            "supported: read it with distinct indices, or take the trace in the equation that "
            "defines it."
        )
    return problems
