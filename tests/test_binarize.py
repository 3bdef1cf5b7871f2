"""Binarization: the chosen contraction tree is optimal for the forest's own cost model."""

from __future__ import annotations

from fractions import Fraction
from functools import cache

import opt_einsum
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sq_jax as sq
from sq_jax.expr.nodes import Equation, Index, Product, Tensor, Variable
from sq_jax.forest.binarize import binarize, resolve_optimizer
from sq_jax.forest.canon import leaf_node
from sq_jax.forest.cost import contraction_flops
from sq_jax.forest.nodes import NodeKind

SPACE_KEYS = ("i", "a", "Κ")


def tree_flops(forest: sq.Forest, node) -> int:
    """Sum of node_flops over every PRODUCT occurrence of one tree."""
    total, stack = 0, [node]
    while stack:
        n = stack.pop()
        if n.kind is NodeKind.PRODUCT:
            total += forest.node_flops(n)
            stack += [n.left, n.right]
    return total


def brute_force_min(operands: list[tuple[Index, ...]], result: set[Index], spaces) -> int:
    """The cheapest of ALL binary trees over ``operands`` (outer products included)."""
    n = len(operands)
    full = (1 << n) - 1

    def labels(mask: int) -> set[Index]:
        return {ix for k in range(n) if mask >> k & 1 for ix in operands[k]}

    def out(mask: int) -> set[Index]:
        if mask & (mask - 1) == 0:  # one operand, as given (a trace is done by its consumer)
            return labels(mask)
        if mask == full:
            return set(result)
        return labels(mask) & (labels(full & ~mask) | result)

    @cache
    def best(mask: int) -> int:
        if mask & (mask - 1) == 0:
            return 0
        low = mask & -mask
        costs = []
        sub = (mask - 1) & mask
        while sub:
            if sub & low:  # each split once: the part holding the lowest operand
                rest = mask & ~sub
                step = contraction_flops((out(sub), out(rest)), out(mask), spaces)
                costs.append(best(sub) + best(rest) + step)
            sub = (sub - 1) & mask
        return min(costs)

    return best(full)


@st.composite
def products(draw):
    """A random product of 2-5 tensors (and maybe a scalar) on random extents.

    Labels occur once (free), twice (summed, or kept: a Hadamard product) or in a trace.
    """
    spaces = sq.Spaces(
        {"Κ": draw(st.integers(1, 9))}, i=draw(st.integers(1, 9)), a=draw(st.integers(1, 9))
    )
    n = draw(st.integers(2, 5))
    nlabels = draw(st.integers(1, 6))
    labels = [Index(draw(st.sampled_from(SPACE_KEYS)), k + 1) for k in range(nlabels)]
    slots: list[Index] = []
    result: list[Index] = []
    for ix in labels:
        times = draw(st.integers(1, 2))
        slots += [ix] * times
        if times == 1 or draw(st.integers(0, 3)) == 0:
            result.append(ix)
    while len(slots) < n:
        extra = Index("i", 100 + len(slots))
        slots += [extra, extra]
    order = draw(st.permutations(slots))
    cuts = sorted(draw(st.sets(st.integers(1, len(order) - 1), min_size=n - 1, max_size=n - 1)))
    pieces = [tuple(order[a:b]) for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True)]
    factors: list = [Tensor(f"T{k}", piece) for k, piece in enumerate(pieces)]
    if draw(st.booleans()):
        factors.insert(draw(st.integers(0, len(factors))), Variable("ω"))
    lhs = Tensor("R", tuple(result)) if result else Variable("E")
    return Equation(lhs, Product(Fraction(1), tuple(factors))), spaces


@settings(
    derandomize=True,
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(case=products())
def test_optimal_tree_matches_brute_force(case):
    eq, spaces = case
    forest = sq.build_forest([eq], spaces)
    root = forest.roots[0]
    operands = [f.indices if isinstance(f, Tensor) else () for f in eq.rhs.factors]
    want = brute_force_min(operands, set(root.indices), spaces)
    assert tree_flops(forest, root.node) == want
    assert set(root.node.indices) == set(root.indices)
    if all(len(set(op)) == len(op) for op in operands):
        # without traces opt_einsum's own "optimal" agrees on the cost
        symbols = {
            ix: opt_einsum.get_symbol(k) for k, ix in enumerate({*root.indices, *sum(operands, ())})
        }
        subs = ",".join("".join(symbols[ix] for ix in op) for op in operands)
        out = "".join(symbols[ix] for ix in root.indices)
        shapes = [tuple(spaces.extent(ix.space) for ix in op) for op in operands]
        _, info = opt_einsum.contract_path(
            f"{subs}->{out}", *shapes, shapes=True, optimize="optimal", memory_limit=None
        )
        assert int(info.opt_cost) == want


def test_chain_picks_the_cheap_side():
    # (x y) t costs 2*50*50*50 + 2*50*50*2, x (y t) costs 2 * (2*50*50*2): y t first
    eqs = sq.parse("R{a1;i1} = x{a1;a2} y{a2;a3} t{a3;i1}")
    forest = sq.build_forest(eqs, sq.Spaces(i=2, a=50))
    top = forest.roots[0].node
    inner = next(c for c in top.children if c.kind is NodeKind.PRODUCT)
    assert {c.tensor.label for c in inner.children} == {"y", "t"}
    assert forest.flops == 2 * (2 * 50 * 50 * 2)


def test_factor_order_does_not_change_the_tree():
    texts = [
        "R{a1;i1} = x{a1;a2} y{a2;a3} t{a3;i1}",
        "R{a1;i1} = t{a3;i1} x{a1;a2} y{a2;a3}",
        "R{a1;i1} = y{a2;a3} t{a3;i1} x{a1;a2}",
    ]
    spaces = sq.Spaces(i=4, a=4)  # every tree costs the same: ties broken the same way
    keys = {sq.build_forest(sq.parse(t), spaces).roots[0].node.key for t in texts}
    assert len(keys) == 1


def test_scalar_factor_is_an_operand():
    eqs = sq.parse("R{a1;i1} = 1/2 ω f{a1;a2} t{a2;i1}")
    forest = sq.build_forest(eqs, sq.Spaces(i=2, a=3))
    assert forest.roots[0].coef == Fraction(1, 2)
    assert [s.scalar.name for s in forest.scalars()] == ["ω"]
    assert forest.roots[0].node.kind is NodeKind.PRODUCT


def test_many_operands_use_dp_and_other_optimizers_pass_through():
    text = "E = " + " ".join(f"x{{i{k};i{k + 1}}}" for k in range(1, 9)) + " y{i9;i1}"
    spaces = sq.Spaces(i=3)
    assert resolve_optimizer("auto", 9) == "dp"
    auto = sq.build_forest(sq.parse(text), spaces)
    greedy = sq.build_forest(sq.parse(text), spaces, optimize="greedy")
    custom = sq.build_forest(sq.parse(text), spaces, optimize=opt_einsum.paths.DynamicProgramming())
    for forest in (auto, greedy, custom):
        assert len([n for n in forest.occurrences() if n.kind is NodeKind.PRODUCT]) == 8
    assert auto.flops == custom.flops


def test_bad_optimizer_is_rejected():
    with pytest.raises(ValueError, match="optimize='fastest' is not a contraction-order"):
        sq.build_forest(sq.parse("E = f{i1;i1}"), sq.Spaces(i=2), optimize="fastest")


def test_single_operand_cases():
    i1, a1 = Index("i", 1), Index("a", 1)
    spaces = sq.Spaces(i=2, a=3)
    f = leaf_node(Tensor("f", (a1,), (i1,)))
    assert binarize([f], (a1, i1), spaces) is f  # nothing to compute
    trace = binarize([leaf_node(Tensor("f", (i1,), (i1,)))], (), spaces)
    assert trace.kind is NodeKind.PRODUCT and trace.indices == ()
    diag = binarize([leaf_node(Tensor("f", (i1,), (i1,)))], (i1,), spaces)
    assert diag.kind is NodeKind.PRODUCT and diag.indices == (i1,)
    one = binarize([], (), spaces)
    assert one.kind is NodeKind.SCALAR and one.scalar.value == 1


def test_equal_key_factors_are_ordered_by_connectivity():
    big = "R{a1,a2;i1,i2} = 1/2 g{i3,i4;a3,a4} t{a1,a3;i1,i3} t{a2,a4;i2,i4}"
    renamed = "R{a5,a6;i5,i6} = 1/2 t{a6,a8;i6,i8} g{i7,i8;a7,a8} t{a5,a7;i5,i7}"
    spaces = sq.Spaces(i=3, a=4)
    keys = {sq.build_forest(sq.parse(t), spaces).roots[0].node.key for t in (big, renamed)}
    assert len(keys) == 1
