"""Write cc/equations/<model>_so.txt from sq_jax.derive (e.g. the shipped ccsdt_so.txt).

The equations are derived, not typed: ``sq_jax.derive.cc_equations(model)`` projects
e^{-T} H_N e^{T} onto the excitation manifolds by Wick's theorem and writes them in the
conventions of ccsd_so.txt; this script adds the header and the file.

Usage (from the repository root):
    .venv/bin/python scripts/derive_cc_equations.py ccsdt
"""

import sys
import time
from pathlib import Path

from sq_jax.derive import cc_equations, model_ranks

FOLDER = Path(__file__).resolve().parents[1] / "src" / "sq_jax" / "cc" / "equations"
HEADER = """\
# {name}: spin-orbital {upper} residual equations in SeQuant's text syntax, one per line.
# Terms {counts}.
# Derived by sq_jax.derive (Wick's theorem on e^(-T) H_N e^(T), connected terms,
# canonicalised, like terms collected) with:
#     .venv/bin/python scripts/derive_cc_equations.py {model}
# t{{a_1..a_n;i_1..i_n}} = Tn[a..,i..]; f{{p;q}} = F[p,q]; g{{p,q;r,s}}:A = <pq||rs>.
# Â{{i..;a..}} = unnormalized signed sum over permutations of the i's and, independently, of
# the a's. R = <Φ|H̄|0> with the diagonal Fock terms included (general, non-canonical Fock);
# Jacobi update t += R / D, D = sum f_ii - sum f_aa.
"""


def main(model: str) -> Path:
    """Derive ``model`` and write ``<model>_so.txt``; print the term counts and the time."""
    model = model.lower()
    model_ranks(model)  # check the name before anything else
    start = time.perf_counter()
    text = cc_equations(model)
    seconds = time.perf_counter() - start
    lines = text.splitlines()
    counts = ", ".join(
        f"{ln.split(' = ')[0].split('{')[0]} {ln.count(' + ') + ln.count(' - ') + 1}"
        for ln in lines
    )
    name = f"{model}_so"
    header = HEADER.format(name=name, upper=model.upper(), counts=counts, model=model)
    path = FOLDER / f"{name}.txt"
    path.write_text(header + text, encoding="utf-8")
    print(f"{path.name}: {counts}; derived in {seconds:.2f} s")
    return path


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["ccsdt"]:
        main(arg)
