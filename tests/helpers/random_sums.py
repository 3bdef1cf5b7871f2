"""Long random sums for the compile-time checks (tests/test_lower_sums.py, bench/bench_compile.py).

Example:
    >>> random_sum(2, seed=0).startswith("R{a1,a2;i1,i2} = ")
    True
"""

from __future__ import annotations

import random

WIRINGS = (  # (first factor, second factor) of a term of R{a1,a2;i1,i2}
    ("{x}{{a1,a2;a9}}", "{y}{{a9;i1,i2}}"),
    ("{x}{{a2,a1;a9}}", "{y}{{a9;i2,i1}}"),
    ("{x}{{a1;i9}}", "{y}{{i9,a2;i1,i2}}"),
    ("{x}{{i9,a2;i1}}", "{y}{{a1;i2,i9}}"),
)


def random_sum(nterms: int, seed: int = 0) -> str:
    """R = a sum of ``nterms`` distinct two-factor products, random wiring and coefficients.

    Every term has its own tensors, so no pass can merge or factor terms: the lowered
    program adds ``nterms`` products in one chain.
    """
    rng = random.Random(seed)
    terms = []
    for k in range(nterms):
        first, second = rng.choice(WIRINGS)
        coef = rng.choice(["", "2 ", "-1/2 ", "1/4 ", "-3 "])
        terms.append(coef + first.format(x=f"x{k}") + " " + second.format(y=f"y{k}"))
    return "R{a1,a2;i1,i2} = " + " + ".join(terms).replace("+ -", "- ")
