"""The XLA options of sq_jax's ahead-of-time compilation (``sq_jax.lower.aot``).

XLA refuses to compile when it is given an option it does not know, and options come
and go between releases: sq_jax passes only the ones the installed XLA accepts.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import sq_jax as sq
from sq_jax.lower import aot

UNKNOWN = "xla_cpu_option_no_xla_release_has"


@pytest.fixture
def wanted(monkeypatch):
    """Set :data:`aot.CPU_OPTIONS` for one test; the probe runs again before and after."""

    def use(options: dict) -> None:
        monkeypatch.setattr(aot, "CPU_OPTIONS", options)
        aot._accepted_cpu_options.cache_clear()

    yield use
    aot._accepted_cpu_options.cache_clear()  # the real options are probed on next use
    monkeypatch.undo()


def test_an_option_xla_does_not_know_is_left_out_and_programs_still_compile(wanted):
    # XLA itself refuses the option: without the probe, every program would fail
    with pytest.raises(jax.errors.JaxRuntimeError, match="No such compile option"):
        jax.jit(lambda x: x + 1).lower(1.0).compile({UNKNOWN: True})
    wanted({**aot.CPU_OPTIONS, UNKNOWN: True})
    options = aot.compiler_options()
    assert UNKNOWN not in options
    assert options.items() <= aot.CPU_OPTIONS.items()
    rng = np.random.default_rng(0)
    x = {"f": rng.standard_normal((5, 5)), "t{a;i}": rng.standard_normal((3, 2))}
    prog = sq.compile("E = f{i1;a1} t{a1;i1}", sq.Spaces(i=2, a=3), batch={"a": 2})
    want = np.einsum("ia,ai->", x["f"][:2, 2:], x["t{a;i}"])
    assert abs(float(prog(x)["E"]) - want) <= 1e-12 * max(1.0, abs(want))


def test_a_bad_value_of_a_known_option_is_not_hidden(wanted):
    wanted({"xla_cpu_scheduler_type": "NOT_A_SCHEDULER"})
    with pytest.raises(jax.errors.JaxRuntimeError) as err:
        aot.compiler_options()
    assert "No such compile option" not in str(err.value)
