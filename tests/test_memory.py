"""Memory is really bounded: XLA's own figures for batched vs unbatched programs.

Run ``pytest tests/test_memory.py -s`` to print the measured figures.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import sq_jax as sq
from sq_jax._pipeline import compile

# A DF "ladder": the intermediate V{a1,a3,a2,a4} = B·B (v⁴ = 24⁴ doubles, 2.65 MB) dwarfs
# the inputs and the result; external loops over a1 and a2 (4 batches each) cut it.
SPACES = sq.Spaces(i=4, a=24, Κ=30)
TEXT = "R{a1,a2;i1,i2} = B{a1,a3;;K1} B{a2,a4;;K1} t{a3,a4;i1,i2}"
PLAN = {"a": {"batches": 4, "roles": "external"}}
V_BYTES = 24**4 * 8


def _inputs():
    rng = np.random.default_rng(0)
    return {
        "t{a,a;i,i}": jnp.asarray(rng.standard_normal((24, 24, 4, 4))),
        "B{a,a;;Κ}": jnp.asarray(rng.standard_normal((24, 24, 30))),
    }


def test_batched_temporaries_are_bounded():
    x = _inputs()
    plain, batched = compile(TEXT, SPACES), compile(TEXT, SPACES, batch=PLAN)
    np.testing.assert_allclose(batched(x)["R"], plain(x)["R"], rtol=1e-12, atol=1e-10)
    m_plain, m_batched = plain.memory_analysis(x), batched.memory_analysis(x)
    print(
        f"\nforward temp bytes: unbatched {m_plain.temp_size_in_bytes}, "
        f"batched {m_batched.temp_size_in_bytes} (V = {V_BYTES}); "
        f"static peak {plain.peak_bytes} -> {batched.peak_bytes}"
    )
    assert m_plain.temp_size_in_bytes >= V_BYTES
    assert m_batched.temp_size_in_bytes <= 0.4 * m_plain.temp_size_in_bytes
    assert batched.peak_bytes <= 0.4 * plain.peak_bytes


def test_remat_bounds_reverse_mode_temporaries():
    x = _inputs()

    def grad_temp(prog):
        def loss(b):
            return jnp.sum(prog({**x, "B{a,a;;Κ}": b})["R"] ** 2)

        lowered = jax.jit(jax.grad(loss)).lower(x["B{a,a;;Κ}"])
        return lowered.compile().memory_analysis().temp_size_in_bytes

    plain = grad_temp(compile(TEXT, SPACES))
    stored = grad_temp(compile(TEXT, SPACES, batch=PLAN))
    remat = grad_temp(compile(TEXT, SPACES, batch=PLAN, remat=True))
    print(f"\nreverse-mode temp bytes: unbatched {plain}, batched {stored}, batched+remat {remat}")
    assert remat < stored


def test_remat_gradient_of_nested_loops_keeps_one_cotangent_per_array():
    # spin-orbital CCSD with `a` in 2 batches (W4's plan at toy sizes: loops nested up
    # to four deep), the Lagrangian's gradient with respect to the amplitudes. JAX's own
    # transpose of the nest (each level carrying cotangents of everything it reads, one
    # per root loop) held 4.85x the forward program's temporaries here; the written-out
    # reverse pass (one accumulator per array, values of nested loops pulled back at
    # once) holds 2.39x.
    from sq_jax.cc.equations import load_equations
    from sq_jax.forest.inputs import input_specs

    spaces = sq.Spaces(i=4, a=8)
    prog = compile(load_equations("ccsd_so"), spaces, batch={"a": 2}, remat=True)
    rng = np.random.default_rng(0)
    specs = input_specs(prog.schedule.annotated.forest)
    x = {s.block_key: jnp.asarray(rng.standard_normal(s.shape)) for s in specs}
    t = {k: v for k, v in x.items() if k.startswith("t{")}
    fixed = {k: v for k, v in x.items() if k not in t}
    lam = {k: jnp.asarray(rng.standard_normal(np.shape(v))) for k, v in prog(x).items()}

    def lagrangian(t, fixed):
        out = prog({**fixed, **t})
        return sum(jnp.sum(out[k] * lam[k]) for k in out)

    compiled = jax.jit(jax.grad(lagrangian)).lower(t, fixed).compile()
    grad_temp = compiled.memory_analysis().temp_size_in_bytes
    forward_temp = prog.memory_analysis(x).temp_size_in_bytes
    print(f"\nremat gradient temp {grad_temp} B, forward {forward_temp} B")
    assert grad_temp <= 3.0 * forward_temp
