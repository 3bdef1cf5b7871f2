"""Products over symmetric pairs at half the FLOPs (``pair_symmetry=True``).

The symmetries the inference finds (:mod:`sq_jax.forest.symmetry`) are checked
numerically on every value of the CC forests, evaluated by the independent NumPy
evaluator of ``tests/helpers/dense_eval.py`` on inputs symmetrized as declared; the
packed programs (:mod:`sq_jax.lower.pairs`) are checked against the plain ones and the
reference evaluator.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sq_jax as sq
from sq_jax.cc.equations import load_equations
from sq_jax.expr.nodes import Index
from sq_jax.forest.inputs import block_key
from sq_jax.forest.symmetry import value_symmetries
from sq_jax.lower import pairs as pairs_module
from tests.helpers.dense_eval import evaluate_occurrences
from tests.helpers.symmetric import apply_symmetry as _apply
from tests.helpers.symmetric import symmetric_inputs


def _bank(forest: sq.Forest, blocks: dict[str, np.ndarray]) -> dict:
    """The dense evaluator's input bank holding ``blocks``."""
    bank = {}
    for leaf in forest.leaves():
        t = leaf.tensor
        bank[(t.label, t.signature, tuple(ix.space for ix in t.indices))] = blocks[block_key(t)]
    return bank


def _pairs(prog) -> list:
    return [ins for ins in prog.lowered.body if getattr(ins, "pairs", None) is not None]


CC_SETS = ("ccsd_cs", "ccd_cs", "ccsd_so", "ccd_so")


@pytest.fixture(autouse=True)
def pack_every_pair(request, monkeypatch):
    """Gathers priced at nothing: every pair found is packed, even at these tiny sizes
    (where the cost model would pack none); the gate has its own test."""
    if "priced" not in request.node.name:
        monkeypatch.setattr(pairs_module, "GATHER_RATE", float("inf"))
        monkeypatch.setattr(pairs_module, "INPUT_GATHER_RATE", float("inf"))


# -- the inference ------------------------------------------------------------------------


def test_leaves_get_the_symmetries_they_declare_between_slots_of_one_space():
    text = (
        "R{a1,a2;i1,i2} = x{a1,a2;a3,a4}:A-C-S y{a3,a4;i1,i2}:N-C-N"
        " + z{a1,i1;a3,i3}:N-C-S w{a3,a2;i3,i2}:S-C-N"
    )
    forest = sq.build_forest(sq.parse(text), sq.Spaces(i=2, a=3))
    syms = value_symmetries(forest)
    got = {leaf.tensor.label: sorted(syms[leaf.key]) for leaf in forest.leaves()}
    ident = ((0, 1, 2, 3), 1)
    # A-C-S: antisymmetric bra and ket, column-symmetric: a group of 4
    assert got["x"] == sorted([ident, ((1, 0, 2, 3), -1), ((0, 1, 3, 2), -1), ((1, 0, 3, 2), 1)])
    assert got["y"] == [ident]  # N-C-N declares nothing
    assert got["z"] == [ident]  # its columns (a, i) and (a, i): bra a<->i crosses spaces
    # S-C-N: symmetric within the bra (a, a) and within the ket (i, i)
    assert got["w"] == sorted([ident, ((1, 0, 2, 3), 1), ((0, 1, 3, 2), 1), ((1, 0, 3, 2), 1)])


def test_a_trace_declares_nothing():
    forest = sq.build_forest(sq.parse("R{a1;i1} = x{a1,a2;i1,a2} y{a3;a3}"), sq.Spaces(i=2, a=3))
    syms = value_symmetries(forest)
    assert all(len(syms[leaf.key]) == 1 for leaf in forest.leaves())


@pytest.mark.parametrize("name", CC_SETS)
def test_every_inferred_symmetry_holds_on_every_value(name):
    spaces = sq.Spaces(i=3, a=4)
    forest = sq.build_forest(sq.parse(load_equations(name), spaces=spaces), spaces)
    syms = value_symmetries(forest)
    blocks = symmetric_inputs(forest)
    arrays = evaluate_occurrences([r.node for r in forest.roots], spaces, _bank(forest, blocks), {})
    checked = 0
    for node in forest.occurrences():
        x = arrays[id(node)]
        for perm, sign in syms[node.key]:
            tol = 1e-12 * (1 + abs(x).max())
            np.testing.assert_allclose(x, sign * _apply(x, perm), rtol=0, atol=tol)
            checked += perm != tuple(range(len(perm)))
    assert checked > 50  # the CC forests are full of them


def _swap_of(node, pairs) -> tuple[int, ...]:
    """The position permutation swapping each label pair of ``pairs`` in ``node``."""
    pos = {ix: k for k, ix in enumerate(node.indices)}
    perm = list(range(len(node.indices)))
    for x, y in pairs:
        perm[pos[x]], perm[pos[y]] = pos[y], pos[x]
    return tuple(perm)


def test_operand_swaps_and_symmetrized_sums_are_found():
    spaces = sq.Spaces(i=2, a=3)
    text = (
        "P{a1,a2;i1,i2} = t{a1;i1} t{a2;i2}\n"
        "S{a1,a2;i1,i2} = u{a1,a2;i1,i2}:N-C-N + u{a2,a1;i2,i1}:N-C-N\n"
        "A{a1,a2;i1,i2} = u{a1,a2;i1,i2}:N-C-N - u{a2,a1;i2,i1}:N-C-N\n"
        "N{a1,a2;i1,i2} = u{a1,a2;i1,i2}:N-C-N - 2 u{a2,a1;i2,i1}:N-C-N"
    )
    forest = sq.build_forest(sq.parse(text), spaces)
    syms = value_symmetries(forest)
    a1, a2, i1, i2 = (Index(s, n) for s, n in (("a", 1), ("a", 2), ("i", 1), ("i", 2)))
    got = {}
    for root in forest.roots:
        swap = _swap_of(root.node, ((a1, a2), (i1, i2)))
        got[root.name] = {sign for perm, sign in syms[root.node.key] if perm == swap}
    # t1 ⊗ t1 and u + u^T are symmetric, u - u^T antisymmetric, u - 2 u^T neither
    assert got == {"P": {1}, "S": {1}, "A": {-1}, "N": set()}


# -- the packed programs ------------------------------------------------------------------


@pytest.mark.parametrize("name", CC_SETS)
def test_packed_programs_equal_the_plain_ones_on_symmetric_inputs(name):
    spaces = sq.Spaces(i=3, a=5)
    text = load_equations(name)
    plain = sq.compile(text, spaces)
    packed = sq.compile(text, spaces, pair_symmetry=True)
    instrs = _pairs(packed)
    assert instrs, "the ladder is a product over a symmetric pair"
    blocks = symmetric_inputs(packed.schedule.annotated.forest, seed=1)
    want = sq.evaluate_reference(sq.parse(text, spaces=spaces), spaces, blocks)
    got, base = packed(blocks), plain(blocks)
    for k in want:
        scale = 1 + np.abs(want[k]).max()
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-12 * scale)
        np.testing.assert_allclose(base[k], want[k], rtol=0, atol=1e-12 * scale)
    # each packed product does its pairs' share of the plain one's FLOPs
    saved = 0
    for ins in instrs:
        share = 1.0
        for pack in {p for side in ins.pairs.packs for p in side}:
            n = pack.extent
            share *= (n - 1 if pack.strict else n + 1) / (2 * n)
        if ins.pairs.split is not None:  # two products: the (anti)symmetric parts
            share *= 2
        dims = {
            c: e
            for r, s in zip(ins.operands, ins.spec.split("->")[0].split(","), strict=True)
            for c, (e, _) in zip(s, r.dims, strict=True)
        }
        saved += 2 * np.prod(list(dims.values())) * (1 - share)
    assert plain.flops - packed.flops == round(saved) > 0


def test_the_closed_shell_ladder_splits_into_symmetric_and_antisymmetric_parts():
    # g_ab^cd = g_ba^dc and tau_cd^ij = tau_dc^ji, but no pair is symmetric alone: both
    # split into parts (anti)symmetric in (c, d), each packed to c <= d, a <= b, i <= j
    spaces = sq.Spaces(i=3, a=6)
    prog = sq.compile(load_equations("ccsd_cs"), spaces, pair_symmetry=True)
    ladder = [ins for ins in _pairs(prog) if any(r.input_key == "g{a,a;a,a}" for r in ins.operands)]
    assert len(ladder) == 1
    (ins,) = ladder
    g = next(k for k, r in enumerate(ins.operands) if r.input_key == "g{a,a;a,a}")
    plan = ins.pairs
    assert plan.split is not None and plan.fill is None
    assert plan.summed is not None and not plan.summed.strict
    assert {ix.space for ix in plan.summed.labels} == {"a"}
    assert {ix.space for ix in plan.split.packs[g].labels} == {"a"}  # g's free (a, b)
    assert {ix.space for ix in plan.split.packs[1 - g].labels} == {"i"}  # tau's (i, j)
    assert plan.packs[g] == (plan.summed, plan.split.packs[g])
    n, m = 6, 3
    assert plan.fraction == pytest.approx(2 * ((n + 1) / (2 * n)) ** 2 * (m + 1) / (2 * m))


def test_nothing_is_packed_without_the_option_or_without_declared_symmetry():
    spaces = sq.Spaces(i=3, a=5)
    text = "R{a1,a2;i1,i2} = g{a1,a2;a3,a4} t{a3,a4;i1,i2}"
    assert not _pairs(sq.compile(text, spaces))
    undeclared = "R{a1,a2;i1,i2} = g{a1,a2;a3,a4}:N-C-N t{a3,a4;i1,i2}:N-C-N"
    assert not _pairs(sq.compile(undeclared, spaces, pair_symmetry=True))
    assert _pairs(sq.compile(text, spaces, pair_symmetry=True))


@pytest.mark.parametrize(
    ("name", "plan"),
    [
        ("ccsd_cs", {"a": 2}),
        ("ccsd_so", {"a": 2}),
        ("ccsd_so", {"i": 2}),
        ("ccsd_so", {"a": {"batches": 3, "roles": "external"}}),
    ],
    ids=["cs-a2", "so-a2", "so-i2", "so-a3-external"],
)
def test_packed_products_inside_batched_programs(name, plan):
    # a pair whose modes no loop cuts is packed inside the loop, batch by batch
    spaces = sq.Spaces(i=4, a=7)
    text = load_equations(name)
    plain = sq.compile(text, spaces)
    batched = sq.compile(text, spaces, batch=plan, pair_symmetry=True)
    blocks = symmetric_inputs(plain.schedule.annotated.forest, seed=2)
    want, got = plain(blocks), batched(blocks)
    for k in want:
        tol = 1e-12 * (1 + np.abs(want[k]).max())
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=tol)
    inside = [i for lp in batched.lowered.loops() for i in lp.body if getattr(i, "pairs", None)]
    unpacked = sq.compile(text, spaces, batch=plan)
    if name == "ccsd_so":  # every antisymmetric summed pair survives a cut of another mode
        assert inside and batched.flops < unpacked.flops


@pytest.mark.parametrize("perm", ["A", "S"])
def test_a_pair_symmetric_alone_is_filled_inside_a_loop_that_cuts_the_other_modes(perm):
    # t_ij^cd = ±t_ji^cd alone makes X_ab^ij = Σ g_ab^cd t_cd^ij (anti)symmetric in
    # (i, j) whatever g is: computed for i < j (i <= j), the rest by sign, also where a
    # loop cuts a_1 (the joint fill X_ab^ij = X_ba^ji would need the other a_1 batches)
    spaces = sq.Spaces(i=4, a=7)
    text = f"R{{a1,a2;i1,i2}} = g{{a1,a2;a3,a4}}:N-C-N t{{a3,a4;i1,i2}}:{perm}"
    plan = {"a": {"batches": 3, "roles": "external"}}
    batched = sq.compile(text, spaces, batch=plan, pair_symmetry=True)
    (ins,) = [i for lp in batched.lowered.loops() for i in lp.body if getattr(i, "pairs", None)]
    fill = ins.pairs.fill
    assert fill is not None and fill.partners == () and ins.pairs.summed is None
    assert {ix.space for ix in fill.pack.labels} == {"i"} and fill.pack.strict == (perm == "A")
    assert fill.sign == (-1 if perm == "A" else 1)
    blocks = symmetric_inputs(batched.schedule.annotated.forest, seed=5)
    want = np.einsum("abcd,cdij->abij", blocks["g{a,a;a,a}"], blocks["t{a,a;i,i}"])
    got = batched(blocks)["R"]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * (1 + np.abs(want).max()))
    assert batched.flops < sq.compile(text, spaces, batch=plan).flops


def test_both_operands_pack_a_pair_they_are_antisymmetric_in_alone():
    # g_ab^cd = -g_ba^cd and t_cd^ij = -t_cd^ji: the ladder is made for a < b and i < j
    # only, over c < d: about an eighth of the plain FLOPs, each pair unpacked by sign
    spaces = sq.Spaces(i=4, a=7)
    text = "R{a1,a2;i1,i2} = g{a1,a2;a3,a4}:A t{a3,a4;i1,i2}:A"
    prog = sq.compile(text, spaces, pair_symmetry=True)
    (ins,) = _pairs(prog)
    plan = ins.pairs
    assert plan.fill is not None and plan.also is not None and plan.summed is not None
    assert {frozenset(ix.space for ix in f.pack.labels) for f in plan.fills} == {
        frozenset("a"),
        frozenset("i"),
    }
    assert plan.fraction == pytest.approx((6 * 7 / 2 / 49) ** 2 * (4 * 3 / 2 / 16))
    blocks = symmetric_inputs(prog.schedule.annotated.forest, seed=6)
    want = np.einsum("abcd,cdij->abij", blocks["g{a,a;a,a}"], blocks["t{a,a;i,i}"])
    got = prog(blocks)["R"]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * (1 + np.abs(want).max()))


@pytest.mark.parametrize("name", ["ccsd_cs", "ccsd_so"])
def test_derivatives_are_the_plain_programs_in_every_direction(name):
    """Only the primal is packed: jvp and vjp, along directions that break the declared
    symmetries too, equal the plain program's (what lambda and EOM solvers rely on)."""
    spaces = sq.Spaces(i=3, a=4)
    text = load_equations(name)
    plain = sq.compile(text, spaces)
    packed = sq.compile(text, spaces, pair_symmetry=True)
    blocks = symmetric_inputs(plain.schedule.annotated.forest, seed=3)
    rng = np.random.default_rng(4)
    amps = sorted(k for k in blocks if k.startswith("t{"))
    t0 = {k: jnp.asarray(blocks[k]) for k in amps}
    dt = {k: jnp.asarray(rng.standard_normal(blocks[k].shape)) for k in amps}  # not symmetric
    g0 = jnp.asarray(blocks["g{a,a;a,a}"])

    def residual(prog):
        def f(t, g):
            return prog({**blocks, **t, "g{a,a;a,a}": g})["R2"]

        return f

    want_out, want = jax.jvp(residual(plain), (t0, g0), (dt, jnp.ones_like(g0)))
    got_out, got = jax.jvp(residual(packed), (t0, g0), (dt, jnp.ones_like(g0)))
    tol = 1e-12 * (1 + np.abs(want).max())
    np.testing.assert_allclose(got_out, want_out, rtol=0, atol=tol)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    cotangent = jnp.asarray(rng.standard_normal(want_out.shape))
    (grad_t, grad_g) = jax.vjp(residual(packed), t0, g0)[1](cotangent)
    (want_t, want_g) = jax.vjp(residual(plain), t0, g0)[1](cotangent)
    for k in amps:
        np.testing.assert_allclose(
            grad_t[k], want_t[k], rtol=0, atol=1e-12 * (1 + abs(want_t[k]).max())
        )
    np.testing.assert_allclose(grad_g, want_g, rtol=0, atol=1e-12 * (1 + abs(want_g).max()))


def test_pairs_are_packed_where_the_saved_flops_are_priced_above_the_gathers():
    def packed(o, v):
        prog = sq.compile(load_equations("ccsd_so"), sq.Spaces(i=o, a=v), pair_symmetry=True)
        return {
            (ins.spec.endswith("->"), *map(str, ins.operands)): str(ins.pairs)
            for ins in _pairs(prog)
        }

    tiny, w1, water_dimer = packed(3, 6), packed(10, 38), packed(20, 76)
    ladder = (False, "g{a,a;a,a}", "t{a,a;i,i}")
    energy = (True, "g{i,i;a,a}", "t{a,a;i,i}")  # the energy's full contraction
    # o = 3, v = 6: no gather is worth what it saves. H2O/cc-pVDZ: half of the 17 MB
    # g{a,a;a,a}, gathered on every call, costs more than its sum saves; t's (i, j) is
    # still packed. (H2O)2: g is packed in (c, d) and (a, b), t in (c, d) and (i, j). The
    # energy's full
    # contraction is never worth a gather.
    assert tiny == {}
    assert w1[ladder] == "i_1<i_2, rest alone, -1"  # t_ij = -t_ji: 45 of 100 pairs
    assert water_dimer[ladder] == "sums a_3<a_4; a_1<a_2, rest alone, -1; i_1<i_2, rest alone, -1"
    assert set(w1) <= set(water_dimer) and energy not in water_dimer


# -- memory -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "R{a1,a2;i1,i2} = g{a1,a2;a3,a4} t{a3,a4;i1,i2}",
        "R{a1,a2;i1,i2} = g{a1,a2;a3,a4} t{a3,a4;i1,i2} + g{a1,a2;i1,i2}",
        "R{a1,a2;i1,i2} = g{a1,a2;a3,a4}:A t{a3,a4;i1,i2}:A",
    ],
    ids=["ladder", "ladder-in-a-sum", "antisymmetric-ladder"],
)
def test_the_memory_model_prices_packed_products_as_xla_allocates(text):
    # the packed operands and the packed product, then the packed product and the result
    # (or the sum that the unpacking fuses into): XLA's peak is the larger group (the
    # first two exactly; with both operands packed, 0.92x: XLA holds the result early)
    prog = sq.compile(text, sq.Spaces(i=10, a=40), pair_symmetry=True)
    assert _pairs(prog)
    forest = prog.schedule.annotated.forest
    ma = prog.memory_analysis(symmetric_inputs(forest))
    measured = ma.temp_size_in_bytes + ma.output_size_in_bytes
    assert 0.85 <= prog.memory_bytes / measured <= 1.15, (prog.memory_bytes, measured)


# -- the CC drivers -----------------------------------------------------------------------


@pytest.mark.parametrize("closed_shell", [True, False], ids=["cs", "so"])
def test_cc_runs_with_every_pair_packed_equal_the_plain_runs(closed_shell, monkeypatch):
    # cc.ccsd compiles with pair_symmetry=True; at H2O/STO-3G the cost model packs
    # nothing, so here everything is packed (fixture) and compared with nothing packed:
    # the amplitudes, the energy, and Lambda (which differentiates the residual program)
    from sq_jax import cc
    from sq_jax.cc import drivers

    # prepared as a large solve is (integral copies and packs made once), at any size
    monkeypatch.setattr(drivers, "PREPARE_MIN_FLOPS", 0)
    packed = cc.ccsd(closed_shell=closed_shell)
    assert any(getattr(i, "pairs", None) for i in packed.residual_program.lowered.body)
    assert packed.prepared_bytes > 0
    lam_packed = cc.solve_lambda(packed)
    monkeypatch.setattr(pairs_module, "GATHER_RATE", 1e-30)  # gathers priced out: none packs
    monkeypatch.setattr(pairs_module, "INPUT_GATHER_RATE", 1e-30)
    plain = cc.ccsd(closed_shell=closed_shell)
    assert not any(getattr(i, "pairs", None) for i in plain.residual_program.lowered.body)
    lam_plain = cc.solve_lambda(plain)
    assert abs(packed.e_corr - plain.e_corr) < 1e-12
    for key, t in plain.result.amplitudes.items():
        np.testing.assert_allclose(packed.result.amplitudes[key], t, rtol=0, atol=1e-10)
    for key, lam in lam_plain.items():
        np.testing.assert_allclose(lam_packed[key], lam, rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    ("shape", "axis", "index_shape"),
    [((5, 7, 4), 1, (9,)), ((6, 3), 0, (4, 4)), ((3, 4, 5), 2, (2, 3))],
)
def test_fixed_gathers_read_what_take_reads_without_wrapping_or_masking(shape, axis, index_shape):
    # the packed products' gathers: one gather of in-bounds indices, where jnp.take traces
    # the wrapping of negative indices and masks out-of-bounds reads around it (kernels
    # of their own inside every loop)
    rng = np.random.default_rng(3)
    x = rng.normal(size=shape)
    index = rng.integers(0, shape[axis], size=index_shape)
    got = pairs_module.take_fixed(x, index, axis)
    np.testing.assert_array_equal(np.asarray(got), np.take(x, index, axis=axis))
    ours = jax.jit(lambda y: pairs_module.take_fixed(y, index, axis)).lower(x).as_text()
    theirs = jax.jit(lambda y: jnp.take(y, jnp.asarray(index), axis=axis)).lower(x).as_text()
    assert "stablehlo.select" in theirs and "stablehlo.compare" in theirs
    assert "stablehlo.select" not in ours and "stablehlo.compare" not in ours
    # derivatives: the gather's transpose adds each read back where it came from
    cotangent = rng.normal(size=got.shape)
    _, pull = jax.vjp(lambda y: pairs_module.take_fixed(y, index, axis), x)
    expected = np.zeros_like(x)
    moved = np.moveaxis(expected, axis, 0)
    np.add.at(
        moved,
        index,
        np.moveaxis(cotangent, list(range(axis, axis + index.ndim)), list(range(index.ndim))),
    )
    np.testing.assert_allclose(np.asarray(pull(cotangent)[0]), expected, atol=1e-14)


def test_fixed_gathers_refuse_an_index_out_of_bounds():
    with pytest.raises(
        sq.LoweringError, match=r"indices 0\.\.3 for axis 1 of extent 3; expected 0\.\.2"
    ):
        pairs_module.take_fixed(np.zeros((2, 3)), np.array([0, 3]), 1)
