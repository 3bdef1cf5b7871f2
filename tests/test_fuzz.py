"""Fuzz the library's front door (issue 14): every outcome is a right answer or a SqJaxError.

Hypothesis drives four families of cases against SMALL programs (extents at most 4):

* equation text: valid CC-like equations mutated character- and token-wise, then parsed,
  built and evaluated (the reference evaluator on random inputs; a few are compiled and
  compared with it);
* input dicts: a valid dict mutated (missing, extra and non-string keys, wrong shapes,
  ranks and dtypes, non-arrays, a block given with its full tensor);
* plans: batch dicts with odd keys and values, ``mode_order``, memory budgets and
  ``outputs`` — compiled and compared with the reference;
* the same plans through :func:`sq_jax.plan.BatchPlan.of` directly.

Any exception that is not a :class:`sq_jax.SqJaxError` fails the test. Runs are
derandomized (the same cases every run) and compiled programs are cached, so the file
takes well under a minute on one core.
"""

from __future__ import annotations

import functools
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

import sq_jax as sq
from sq_jax.forest.inputs import input_specs
from sq_jax.plan import BatchPlan, annotate

pytestmark = pytest.mark.filterwarnings("ignore")

SPACES = sq.Spaces(i=2, a=3, K=2)
FUZZ = settings(
    deadline=None,
    derandomize=True,
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SEEDS = (
    "E = f{i1;a1} t{a1;i1} + 1/4 g{i1,i2;a1,a2} t{a1,a2;i1,i2}",
    "R{a1;i1} = f{a1;i1} + f{a1;a2} t{a2;i1} - f{i2;i1} t{a1;i2}",
    "R{a1,a2;i1,i2} = 1/2 g{a1,a2;a3,a4} t{a3,a4;i1,i2} + 1/2 g{i3,i4;i1,i2} t{a1,a2;i3,i4}",
    "R{a1,a2;i1,i2} = Â{a1,a2;i1,i2} f{a2;a3} t{a1,a3;i1,i2}",
    "X{a1;i1} = 2 f{a1;i1}\nR{a1;i1} = X{a1;i1} + f{a1;a2} X{a2;i1}",
    "X{a1,a2;i1,i2} = g{a1,a2;a3,a4} t{a3,a4;i1,i2}\nR{a1,a2;i1,i2} = X{a2,a1;i1,i2}",
    "E = 1.5e-1 ω f{i1;i1} + (g{i1;a1} + f{i1;a1}) t{a1;i1}",
    "R{a1;i1} = B{a1,a2;;K1} B{a2,i1;;K1}\nE = R{a1;i1} f{i1;a1}",
    "R{i1;a1}:A-C-S -> 1/2 f{i1;a1} + f{i1;p1} f{p1;a1}",
)
ALPHABET = "{}();,<>^*+-/=_:.#e0123456789iapqxKΚ↑' \nÂŜtfgRE1/2"
TOKENS = ("{", "}", ";", ",", "=", "+", "-", "*", "(", ")", "^", "_", "i1", "a2", "p3", "2e", "1/0")


# -- helpers --------------------------------------------------------------------------------


def _random_inputs(forest: sq.Forest, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for spec in input_specs(forest):
        out[spec.block_key] = rng.standard_normal(spec.shape) if spec.shape else rng.random()
    return out


def _agree(got: dict[str, Any], want: dict[str, Any], rtol: float = 1e-9) -> None:
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        np.testing.assert_allclose(np.asarray(got[name]), value, rtol=rtol, atol=rtol)


def _outcome(call) -> tuple[str, Any]:
    """('ok', value) or ('error', the SqJaxError); any other exception escapes the test."""
    try:
        value = call()
    except sq.SqJaxError as err:
        assert str(err).strip(), "an error must say what went wrong"
        event(f"{type(err).__name__}")
        return "error", err
    event("result")
    return "ok", value


@functools.cache
def _compiled(text: str, plan_key: str) -> tuple[str, Any]:
    kwargs = eval(plan_key)
    return _outcome(lambda: sq.compile(text, SPACES, **kwargs))


def _mutate(data: st.DataObject, text: str) -> str:
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        n = len(text)
        pos = data.draw(st.integers(0, n), label="position")
        kind = data.draw(st.sampled_from(("insert", "delete", "replace", "token", "cut", "dup")))
        if kind == "insert":
            text = text[:pos] + data.draw(st.sampled_from(ALPHABET)) + text[pos:]
        elif kind == "delete" and n:
            text = text[:pos] + text[pos + 1 :]
        elif kind == "replace" and pos < n:
            text = text[:pos] + data.draw(st.sampled_from(ALPHABET)) + text[pos + 1 :]
        elif kind == "token":
            text = text[:pos] + data.draw(st.sampled_from(TOKENS)) + text[pos:]
        elif kind == "cut":
            text = text[:pos]
        elif kind == "dup":
            end = data.draw(st.integers(pos, n))
            text = text[:end] + text[pos:end] + text[end:]
    return text


# -- equation text ----------------------------------------------------------------------------


@settings(FUZZ, max_examples=1500)
@given(data=st.data())
def test_mutated_equation_text(data):
    text = _mutate(data, data.draw(st.sampled_from(SEEDS), label="seed"))
    status, eqs = _outcome(lambda: sq.parse(text, spaces=SPACES))
    if status != "ok":
        return
    status, forest = _outcome(lambda: sq.build_forest(eqs, SPACES))
    if status != "ok":
        return
    inputs = _random_inputs(forest, seed=len(text))
    status, want = _outcome(lambda: sq.evaluate_reference(forest, None, inputs))
    if status != "ok" or not data.draw(st.integers(0, 3), label="compile?") == 0:
        return
    status, prog = _compiled(text, repr({"batch": {"a": 2}}))
    if status == "ok":
        _agree(prog(inputs), want)
        event("compiled and compared with the reference")


# -- input dicts ------------------------------------------------------------------------------

PROGRAM = (
    "X{a1;i1} = f{a1;a2} t{a2;i1}\n"
    "R{a1,a2;i1,i2} = 1/2 g{a1,a2;a3,a4} t{a3,a4;i1,i2} + X{a1;i1} t{a2;i2}\n"
    "E = ω g{i1,i2;a1,a2} R{a1,a2;i1,i2}"
)
BAD_VALUES = (
    None,
    "oops",
    [[1.0, 2.0]],
    1.5,
    np.zeros((2,)),
    np.zeros((5, 5, 5)),
    np.zeros((3, 2), dtype=object),
    np.full((3, 2), "x"),
    np.zeros((3, 2), dtype=ml_dtypes.bfloat16),
    np.zeros((3, 2), dtype=np.int32),
    np.zeros((3, 2), dtype=bool),
    np.zeros((3, 2), dtype=np.float32),
    np.zeros((3, 2), dtype=np.complex128),
    np.zeros((0, 2)),
)
BAD_KEYS = (1, None, b"f", ("f",), "", "f{a;i}", "t{i;a}", "g{p,p;p,p}", "X", "X{a;i}", "zz")


def _valid_inputs(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "f": rng.standard_normal((5, 5)),
        "g": rng.standard_normal((5, 5, 5, 5)),
        "t{a;i}": rng.standard_normal((3, 2)),
        "t{a,a;i,i}": rng.standard_normal((3, 3, 2, 2)),
        "ω": 0.5,
    }


@settings(FUZZ, max_examples=200)
@given(data=st.data())
def test_mutated_input_dicts(data):
    inputs: dict[Any, Any] = _valid_inputs(seed=data.draw(st.integers(0, 3), label="seed"))
    for _ in range(data.draw(st.sampled_from((0, 0, 1, 1, 2, 3)), label="mutations")):
        if not inputs:
            break
        kind = data.draw(st.sampled_from(("drop", "add", "value", "shape", "retype", "retype")))
        key = data.draw(st.sampled_from(sorted(inputs, key=repr)), label="key")
        if kind == "drop":
            del inputs[key]
        elif kind == "add":
            inputs[data.draw(st.sampled_from(BAD_KEYS))] = np.ones((3, 2))
        elif kind == "value":
            inputs[key] = data.draw(st.sampled_from(BAD_VALUES))
        elif kind == "retype":  # accepted dtypes: the result must still be right
            dtype = data.draw(st.sampled_from((np.float32, np.int64, np.complex128, bool)))
            inputs[key] = np.asarray(inputs[key]).astype(dtype)
        elif isinstance(inputs[key], np.ndarray) and inputs[key].ndim:
            shape = list(inputs[key].shape)
            shape[data.draw(st.integers(0, len(shape) - 1))] += data.draw(st.sampled_from((-1, 1)))
            inputs[key] = np.ones([max(n, 0) for n in shape])
    status, prog = _compiled(PROGRAM, repr({"batch": {"a": 2}}))
    assert status == "ok"
    got_status, got = _outcome(lambda: prog(inputs))
    want_status, want = _outcome(lambda: sq.evaluate_reference(PROGRAM, SPACES, inputs))
    if got_status == want_status == "ok":
        low = any(getattr(v, "dtype", None) == np.float32 for v in inputs.values())
        event("compared with the reference")
        _agree(got, want, rtol=1e-4 if low else 1e-9)


# -- plans ------------------------------------------------------------------------------------

PLAN_KEYS = ("i", "a", "p", "K", "Κ", "x", "e", "q", "", 1, None)
PLAN_VALUES = (
    0,
    1,
    2,
    3,
    4,
    1000,
    -1,
    2.0,
    "2",
    True,
    None,
    [2],
    {"batches": 2},
    {"block": 2},
    {"block": 100},
    {"batches": 2, "roles": "external"},
    {"block": 1, "roles": "contracted"},
    {"roles": "both"},
    {"block": 0},
    {"bogus": 1},
    {"batches": 2, "roles": "sideways"},
)
PLAN_PROGRAM = (
    "X{a1;i1} = f{a1;a2} t{a2;i1}\n"
    "R{a1,a2;i1,i2} = 1/2 g{a1,a2;a3,a4} t{a3,a4;i1,i2} + X{a1;i1} t{a2;i2}\n"
    "E = g{i1,i2;a1,a2} R{a1,a2;i1,i2} + B{i1,a1;;K1} B{a1,i1;;K1}"
)


@functools.lru_cache(maxsize=1)
def _plan_reference() -> tuple[dict[str, Any], dict[str, Any]]:
    forest = sq.build_forest(sq.parse(PLAN_PROGRAM, spaces=SPACES), SPACES)
    inputs = _random_inputs(forest, seed=3)
    return inputs, sq.evaluate_reference(forest, None, inputs)


good_plans = st.dictionaries(
    st.sampled_from(("i", "a", "K")),
    st.one_of(st.integers(1, 3), st.builds(dict, block=st.integers(1, 4))),
    max_size=2,
)
odd_plans = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(PLAN_KEYS), st.sampled_from(PLAN_VALUES), max_size=3),
    st.sampled_from(("a=2", ["a"], 2)),
)
plans = st.one_of(good_plans, odd_plans)
orders = st.one_of(
    st.just(()),
    st.permutations(("i", "a", "K")).map(tuple),
    st.lists(st.sampled_from(("i", "a", "K", "p", "z", "", 3)), max_size=3).map(tuple),
    st.sampled_from(("ai", None)),
)
budgets = st.one_of(
    st.none(),
    st.none(),
    st.sampled_from((0, 1, -5, 10**9, 2.5, "64 KiB", "1 GiB", "lots", "", "3 parsecs", [1])),
)
outputs = st.one_of(
    st.none(),
    st.just(("R",)),
    st.sampled_from((("R",), ("E", "X"), ("W",), (), "R", ("R", "R"), (1,))),
)


@settings(FUZZ, max_examples=150)
@given(batch=plans, mode_order=orders, budget=budgets, outs=outputs)
def test_random_plans(batch, mode_order, budget, outs):
    kwargs: dict[str, Any] = {"batch": batch, "mode_order": mode_order, "outputs": outs}
    if budget is not None:
        kwargs["memory_budget"] = budget
    status, prog = _compiled(PLAN_PROGRAM, repr(kwargs))
    if status != "ok":
        return
    inputs, want = _plan_reference()
    got = prog(inputs)
    names = want if outs is None else dict.fromkeys(outs)
    _agree(got, {name: want[name] for name in names})


@settings(FUZZ, max_examples=300)
@given(batch=plans)
def test_random_batch_plan_objects(batch):
    status, plan = _outcome(lambda: BatchPlan.of(batch))
    if status == "ok":
        _outcome(lambda: plan.resolved(SPACES, used=("i", "a", "Κ")))
        _outcome(lambda: annotate(_small_forest(), plan))


@functools.lru_cache(maxsize=1)
def _small_forest() -> sq.Forest:
    return sq.build_forest(sq.parse("E = f{i1;a1} t{a1;i1}"), SPACES)
