"""Common-subexpression folding: label-blind keys are shared, and they are sound.

The oracle is ``tests/helpers/dense_eval.py``, a tiny NumPy evaluator deliberately
independent of sq_jax's reference evaluator: it evaluates every *occurrence* separately
(memo by object identity, never by key), so it can check that equal keys really mean
equal arrays.
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sq_jax as sq
from sq_jax.expr.nodes import Equation, Index, Product, Sum, Tensor, Variable
from sq_jax.forest.factor import unfactored
from sq_jax.forest.nodes import NodeKind
from tests.helpers.dense_eval import (
    evaluate_direct,
    evaluate_occurrences,
    evaluate_roots,
    occurrences_by_key,
)

# -- the 20-term, 4-intermediate case ------------------------------------------------------

PAIRS = (("f", "g"), ("h", "k"), ("u", "v"), ("w", "x"))
YS = ("y", "z", "m", "n", "o")


def twenty_terms() -> Equation:
    """R{i1;a1} = sum_t c_t X_k(t){i1;i_e} y_t{i_e;a1}, X_k = A_k{i1;a_d} B_k{a_d;i_e}.

    Each term renames its dummies (a_d, i_e) freshly and writes its three factors in a
    different order; 20 terms = 4 intermediates X_k times 5 distinct y tensors.
    """
    i1, a1 = Index("i", 1), Index("a", 1)
    orders = list(itertools.permutations(range(3)))
    terms = []
    for t in range(20):
        k, m = t % 4, t // 4
        ad, ie = Index("a", 100 + t), Index("i", 200 + t)
        factors = (
            Tensor(PAIRS[k][0], (i1,), (ad,)),
            Tensor(PAIRS[k][1], (ad,), (ie,)),
            Tensor(YS[m], (ie,), (a1,)),
        )
        shuffled = tuple(factors[p] for p in orders[t % len(orders)])
        terms.append(Product(Fraction((-1) ** t * (t + 1), 2), shuffled))
    return Equation(Tensor("R", (i1,), (a1,)), Sum(tuple(terms)))


def test_twenty_terms_share_exactly_four_intermediates():
    spaces = sq.Spaces(i=2, a=10)
    eq = twenty_terms()
    with unfactored():  # CSE alone; factoring would pull each shared y out of 4 terms
        forest = sq.build_forest([eq], spaces)
    values = forest.values()
    counts = forest.num_occurrences
    products = [v for v in values if v.kind is NodeKind.PRODUCT]
    shared = [v for v in values if counts[v.key] > 1]
    assert len(shared) == 4
    assert all(v.kind is NodeKind.PRODUCT for v in shared)
    assert {v.left.tensor.label + v.right.tensor.label for v in shared} == {
        "".join(p) for p in PAIRS
    }
    assert all(counts[v.key] == 5 for v in shared)
    assert len(products) == 4 + 20
    assert sum(v.kind is NodeKind.SUM for v in values) == 19
    # and the folded forest still computes the equation
    bank: dict = {}
    got = evaluate_roots(forest, bank, {})["R"]
    np.testing.assert_allclose(got, evaluate_direct(eq, spaces, bank, {}), rtol=1e-12)


def test_equivalent_terms_fold_to_one_value():
    # the last two terms are the same after renaming i2<->i3, a2<->a3
    eqs = sq.parse(
        "R{a1;i1} = - 1/2 g{i2,i3;a2,a3} t{a2,a3;i1,i3} t{a1;i2}"
        " - 1/2 g{i3,i2;a3,a2} t{a3,a2;i1,i2} t{a1;i3}"
    )
    forest = sq.build_forest(eqs, sq.Spaces(i=3, a=5))
    sum_node = forest.roots[0].node
    assert sum_node.kind is NodeKind.SUM
    assert sum_node.left.key == sum_node.right.key
    assert len([v for v in forest.values() if v.kind is NodeKind.PRODUCT]) == 2


def test_values_are_shared_across_equations():
    eqs = sq.parse("R{a1;i1} = g{i2,a1;a2,i1} t{a2;i2}\nS{a2;i2} = 2 g{i3,a2;a3,i2} t{a3;i3}")
    forest = sq.build_forest(eqs, sq.Spaces(i=3, a=5))
    assert forest.roots[0].node.key == forest.roots[1].node.key
    assert len(forest.values()) == 1
    assert forest.roots[1].coef == 2
    assert [str(ix) for ix in forest.roots[1].indices] == ["a_2", "i_2"]


# -- soundness: equal keys mean equal arrays, position by position -------------------------

SPACE_KEYS = ("i", "a")
LABELS = ("f", "g", "t")
COEFS = (Fraction(1), Fraction(-1), Fraction(2), Fraction(1, 2), Fraction(-1, 4))


@st.composite
def networks(draw, free: tuple[Index, ...]):
    """One term: 2-4 tensors over the free labels plus dummies used exactly twice."""
    n = draw(st.integers(2, 4))
    ndummy = draw(st.integers(0, 3))
    dummies = [Index(draw(st.sampled_from(SPACE_KEYS)), 50 + d) for d in range(ndummy)]
    slots = list(free) + dummies + dummies
    extra = 90
    while len(slots) < n:
        slots += [Index("i", extra), Index("i", extra)]
        extra += 1
    order = draw(st.permutations(slots))
    cuts = sorted(draw(st.sets(st.integers(1, len(order) - 1), min_size=n - 1, max_size=n - 1)))
    pieces = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True)]
    factors = []
    for piece in pieces:
        nbra = draw(st.integers(0, len(piece)))
        factors.append(
            Tensor(draw(st.sampled_from(LABELS)), tuple(piece[:nbra]), tuple(piece[nbra:]))
        )
    if draw(st.booleans()):
        factors.append(Variable("ω"))
    return Product(draw(st.sampled_from(COEFS)), tuple(factors))


def relabel(term: Product, seed: int) -> Product:
    """The same term with every dummy renamed and the factors shuffled."""
    rng = random.Random(seed)
    shift = rng.randrange(1, 40)

    def ren(ix: Index) -> Index:
        return Index(ix.space, ix.ordinal + shift) if ix.ordinal >= 50 else ix

    factors = [
        Tensor(f.label, tuple(map(ren, f.bra)), tuple(map(ren, f.ket)))
        if isinstance(f, Tensor)
        else f
        for f in term.factors
    ]
    rng.shuffle(factors)
    return Product(term.scalar, tuple(factors))


@st.composite
def equations(draw):
    free = draw(st.sampled_from([(), (Index("i", 1),), (Index("a", 1), Index("i", 1))]))
    terms = draw(st.lists(networks(free), min_size=1, max_size=4))
    copies = [relabel(t, s) for s, t in enumerate(draw(st.lists(st.sampled_from(terms))))]
    rhs = terms + copies
    lhs = Tensor("R", free[:1], free[1:]) if free else Variable("E")
    return Equation(lhs, Sum(tuple(rhs)) if len(rhs) > 1 else rhs[0])


@settings(
    derandomize=True,
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(eqs=st.lists(equations(), min_size=1, max_size=3))
def test_equal_keys_mean_equal_arrays(eqs):
    spaces = sq.Spaces(i=2, a=3)
    eqs = [
        Equation(Tensor(f"R{k}", e.lhs.bra, e.lhs.ket), e.rhs)
        if isinstance(e.lhs, Tensor)
        else Equation(Variable(f"E{k}"), e.rhs)
        for k, e in enumerate(eqs)
    ]
    forest = sq.build_forest(eqs, spaces)
    bank: dict = {}
    variables = {"ω": 1.5}
    arrays = evaluate_occurrences([r.node for r in forest.roots], spaces, bank, variables)
    for key, nodes in occurrences_by_key(forest).items():
        first = arrays[id(nodes[0])]
        for other in nodes[1:]:
            assert [ix.space for ix in other.indices] == [ix.space for ix in nodes[0].indices]
            np.testing.assert_array_equal(arrays[id(other)], first, err_msg=key)
    # and the forest computes what the expressions say
    got = evaluate_roots(forest, bank, variables)
    for eq in eqs:
        want = evaluate_direct(eq, spaces, bank, variables)
        np.testing.assert_allclose(got[eq.name], want, rtol=1e-12, atol=1e-12)


def test_soundness_generator_does_exercise_sharing():
    """The relabeled copies in the generator really do produce shared keys."""
    i1 = Index("i", 1)
    d1, d2 = Index("a", 50), Index("i", 51)
    term = Product(
        Fraction(1), (Tensor("f", (i1,), (d1,)), Tensor("g", (d1, d2), ()), Tensor("t", (d2,)))
    )
    eq = Equation(Tensor("R", (i1,)), Sum((term, relabel(term, 3), relabel(term, 4))))
    forest = sq.build_forest([eq], sq.Spaces(i=2, a=3))
    assert max(forest.num_occurrences[v.key] for v in forest.values()) == 3
