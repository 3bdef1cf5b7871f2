"""sq_jax.derive: derived CC equations against the shipped ones, a raw-term oracle and FCI.

* CCD and CCSD derived here equal the shipped ``ccd_so``/``ccsd_so`` (typed from the
  literature): same term counts, residuals and energy equal to 1e-12 on random
  antisymmetric amplitudes and integrals, both compiled.
* Canonicalisation and collection keep the value: the collected CCSDT equations equal the
  sum of the raw per-pattern terms (before any canonicalisation), evaluated by the
  einsum reference.
* CCSDT is exact for three electrons and CCSDTQ (derived on demand) for four: they equal
  full CI (``pyscf.fci``) for H3/6-31G, Li/6-31G and H4/STO-3G on UHF orbitals to 1e-9 Eh.
* The drivers' deferred antisymmetrizer (``Â`` applied to the program's output) gives
  the residuals of the expanded text.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
from pyscf import fci, gto, scf

import sq_jax as sq
from sq_jax import cc
from sq_jax.cc.antisymmetrizer import apply_antisymmetrizer, strip_antisymmetrizers
from sq_jax.cc.equations import load_equations
from sq_jax.derive import cc_equations, derive_terms, model_ranks
from sq_jax.derive.wick import contract, hamiltonian_blocks
from sq_jax.forest.inputs import input_specs

NOCC, NVIRT = 3, 4


def _antisymmetrize(x: np.ndarray, k: int) -> np.ndarray:
    """Signed sum over permutations of the first k and, independently, the last k axes."""
    out = np.zeros_like(x)
    for p in itertools.permutations(range(k)):
        for q in itertools.permutations(range(k)):
            sign = np.linalg.det(np.eye(k)[list(p)]) * np.linalg.det(np.eye(k)[list(q)])
            out = out + sign * x.transpose(*p, *(k + j for j in q))
    return out


@pytest.fixture(scope="module")
def random_inputs() -> dict[str, np.ndarray]:
    """Real symmetric f, ⟨pq‖rs⟩ with the symmetries of real integrals, antisymmetric t's."""
    rng = np.random.default_rng(7)
    n = NOCC + NVIRT
    f = rng.normal(size=(n, n))
    g = rng.normal(size=(n,) * 4)
    g = g - g.transpose(1, 0, 2, 3)
    g = g - g.transpose(0, 1, 3, 2)
    inputs = {"f": f + f.T, "g": g + g.transpose(2, 3, 0, 1)}
    for k in (1, 2, 3):
        t = rng.normal(size=(NVIRT,) * k + (NOCC,) * k)
        inputs[cc.drivers.amplitude_key(k)] = 0.1 * _antisymmetrize(t, k)
    return inputs


def _read(forest: sq.Forest, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = set()
    for spec in input_specs(forest):
        names.update((spec.label, spec.block_key))
    return {k: v for k, v in inputs.items() if k in names}


def _compiled(text: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    spaces = sq.Spaces(i=NOCC, a=NVIRT)
    program = sq.compile(sq.parse(text, spaces=spaces), spaces)
    out = program(_read(program.schedule.annotated.forest, inputs))
    return {k: np.asarray(v) for k, v in out.items()}


def _term_counts(text: str) -> dict[str, int]:
    lines = (line.split(" = ", 1) for line in text.splitlines())
    return {lhs.split("{")[0]: rhs.count(" + ") + rhs.count(" - ") + 1 for lhs, rhs in lines}


@pytest.mark.parametrize("model", ["ccd", "ccsd"])
def test_derived_equals_shipped(model, random_inputs):
    derived, shipped = cc_equations(model), load_equations(f"{model}_so")
    assert _term_counts(derived) == _term_counts(shipped)
    ours, theirs = _compiled(derived, random_inputs), _compiled(shipped, random_inputs)
    assert sorted(ours) == sorted(theirs)
    for name in theirs:
        scale = max(1.0, float(np.abs(theirs[name]).max()))
        assert np.abs(ours[name] - theirs[name]).max() < 1e-12 * scale, name


def _einsum_value(terms, rank: int, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Σ c · Â Π factors with numpy: one einsum per term, ``Â`` applied once at the end."""
    o, v = slice(0, NOCC), slice(NOCC, NOCC + NVIRT)
    out = "".join(f"A{k}" for k in range(1, rank + 1)) + "".join(
        f"I{k}" for k in range(1, rank + 1)
    )
    total = np.zeros((NVIRT,) * rank + (NOCC,) * rank)
    for term in terms:
        letters: dict = {}
        operands, subscripts = [], []
        for f in term.factors:
            idx = f.bra + f.ket
            if f.label == "t":
                operands.append(inputs[cc.drivers.amplitude_key(f.rank)])
            else:
                operands.append(inputs[f.label][tuple(o if x.space == "i" else v for x in idx)])
            subscripts.append([letters.setdefault(x, len(letters)) for x in idx])
        ext = {x: n for x, n in letters.items() if x.external}
        order = sorted(ext, key=lambda x: (x.space == "i", x.number))
        args = [a for pair in zip(operands, subscripts, strict=True) for a in pair]
        value = np.einsum(*args, [ext[x] for x in order])
        assert "".join(f"{x.space.upper()}{x.number}" for x in order) == out
        total = total + float(term.coefficient) * value
    return _antisymmetrize(total, rank) if rank else total


def test_collecting_keeps_the_value(random_inputs):
    """Canonical, collected terms equal the raw per-pattern terms (numpy einsum oracle)."""
    t_ranks = (1, 2, 3)
    for rank in (0, 1, 2, 3):
        raw = [
            term
            for k in range(5)
            for product in itertools.combinations_with_replacement(t_ranks, k)
            for _, bra, ket in hamiltonian_blocks()
            for term in contract(rank, bra, ket, product)
        ]
        collected = derive_terms(t_ranks, rank)
        assert len(collected) < len(raw) or rank == 0  # like terms were merged
        want = _einsum_value(raw, rank, random_inputs)
        got = _einsum_value(collected, rank, random_inputs)
        assert np.abs(got - want).max() < 1e-12 * max(1.0, float(np.abs(want).max())), rank


def test_shipped_ccsdt_is_the_derivation():
    assert load_equations("ccsdt_so") == cc_equations("ccsdt")


def test_ccsdt_derivation_is_fast():
    start = time.perf_counter()
    text = cc_equations("ccsdt")
    assert time.perf_counter() - start < 10.0  # measured 0.1 s; CCSDTQ 0.3 s
    assert _term_counts(text) == {"E": 3, "R1": 15, "R2": 37, "R3": 47}


def test_selection_drops_term_families():
    full = derive_terms((1, 2, 3), 3)
    linear = derive_terms((1, 2, 3), 3, keep=lambda n, h, ts: len(ts) <= 1)
    assert 0 < len(linear) < len(full)
    assert all(len(t.factors) <= 2 for t in linear)
    assert {t.factors for t in linear} <= {t.factors for t in full}


@pytest.mark.parametrize("bad", ["cisd", "ccds", "cc", "ccx", 3])
def test_unknown_models_are_refused(bad):
    with pytest.raises(sq.InputError, match="unknown CC model"):
        model_ranks(bad)


def test_bad_ranks_are_refused():
    with pytest.raises(sq.InputError, match="ranks must be positive"):
        cc_equations("ccsd", ranks=(0,))


@pytest.mark.parametrize(
    "atom",
    ["H 0 0 0; H 0 0 0.9; H 0 0.8 0.45", "Li 0 0 0"],
    ids=["H3", "Li"],
)
def test_ccsdt_equals_fci_for_three_electrons(atom):
    """Doublets in 6-31G on UHF orbitals; ``fci.FCI`` of a UHF object diagonalises the same
    unrestricted Hamiltonian (``direct_uhf``) with the reference's (2, 1) electrons.
    """
    mol = gto.M(atom=atom, basis="6-31g", spin=1, verbose=0)
    mf = scf.UHF(mol).run(conv_tol=1e-12)
    e_fci = fci.FCI(mf).kernel()[0]
    run = cc.ccsdt(mf, e_tol=1e-12, t_tol=1e-10, max_iter=100)
    assert run.converged
    assert abs(run.e_tot - e_fci) < 1e-9
    assert math.isfinite(run.e_corr) and run.e_corr < 0


def test_ccsdtq_equals_fci_for_four_electrons():
    mol = gto.M(atom="H 0 0 0; H 0 0 0.9; H 0 0.8 0.45; H 0.7 0.1 1.5", basis="sto-3g", verbose=0)
    mf = scf.UHF(mol).run(conv_tol=1e-12)
    e_fci = fci.FCI(mf).kernel()[0]
    run = cc.solve_cc(mf, method="ccsdtq", e_tol=1e-12, t_tol=1e-10, max_iter=100)
    assert run.converged and run.antisymmetrized_after == {"R1": 1, "R2": 2, "R3": 3, "R4": 4}
    assert abs(run.e_tot - e_fci) < 1e-9
    with pytest.raises(sq.InputError, match="takes CCD and CCSD runs"):
        cc.eom_ee(run, nroots=1)
    with pytest.raises(sq.InputError, match="takes CCD and CCSD runs"):
        cc.solve_lambda(run)


def test_deferred_antisymmetrizer_equals_expanded(random_inputs):
    spaces = sq.Spaces(i=NOCC, a=NVIRT)
    text = cc_equations("ccsd")
    expanded = sq.build_forest(sq.parse(text, spaces=spaces), spaces)
    want = sq.evaluate_reference(expanded, None, _read(expanded, random_inputs))
    eqs = sq.parse(text, spaces=spaces, expand_symmetrizers=False, validate=False)
    stripped, ranks = strip_antisymmetrizers(eqs)
    assert ranks == {"R1": 1, "R2": 2}
    forest = sq.build_forest(stripped, spaces)
    got = sq.evaluate_reference(forest, None, _read(forest, random_inputs))
    for name, value in want.items():
        if name in ranks:
            value = np.asarray(value)
            got_r = np.asarray(apply_antisymmetrizer(got[name], ranks[name]))
            assert np.abs(got_r - value).max() < 1e-12 * max(1.0, np.abs(value).max())
        else:
            assert abs(float(got[name]) - float(value)) < 1e-12


def test_mixed_antisymmetrizers_are_refused():
    eqs = sq.parse(
        "R2{a1,a2;i1,i2} = Â{i1,i2;a1,a2} g{a1,a2;i1,i2} + g{a1,a2;i1,i2}",
        expand_symmetrizers=False,
        validate=False,
    )
    with pytest.raises(sq.ExpressionError, match="every term must start with"):
        strip_antisymmetrizers(eqs)
