"""Write cc/equations/ccsd_so_df.txt: ccsd_so with every ⟨pq‖rs⟩ written through B.

Each term ``c * g{p,q;r,s}:A * rest`` of ccsd_so.txt becomes the two terms
``c * B{p,r;;Κ_1} * B{q,s;;Κ_1} * rest - c * B{p,s;;Κ_1} * B{q,r;;Κ_1} * rest``, since
⟨pq‖rs⟩ = ⟨pq|rs⟩ − ⟨pq|sr⟩ = (pr|qs) − (ps|qr) and (pq|rs) ≈ Σ_K B[p,q,K] B[r,s,K] over
spin-orbitals. Every term has at most one g, so one auxiliary index Κ_1 per term suffices.

Usage (from the repository root):
    python scripts/write_so_df_equations.py
"""

import re
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[1] / "src" / "sq_jax" / "cc" / "equations"
G = re.compile(r"g\{(\w+),(\w+);(\w+),(\w+)\}:A")
HEADER = """\
# ccsd_so_df: density-fitted spin-orbital CCSD residual equations in SeQuant's text syntax.
# Terms E {e}, R1 {r1}, R2 {r2}: ccsd_so with each term holding g{{p,q;r,s}}:A = <pq||rs> split in
# two, <pq||rs> = B{{p,r;;Κ_1}} * B{{q,s;;Κ_1}} - B{{p,s;;Κ_1}} * B{{q,r;;Κ_1}}, with B[P,Q,K] the
# spin-orbital three-index factor (B of the spatial orbitals times δ of the spins), so that
# (PQ|RS) ~ sum_K B[P,Q,K] B[R,S,K]. Written by scripts/write_so_df_equations.py from ccsd_so.txt.
# t{{a_1;i_1}} = T1[a,i]; t{{a_1,a_2;i_1,i_2}} = T2[a,b,i,j]; f{{p;q}} = F[p,q]. Â{{i..;a..}} =
# unnormalized signed sum over permutations of the i's and, independently, of the a's. R = <Φ|H̄|0>
# with the diagonal Fock terms included; Jacobi update t += R / D, D = f_ii + f_jj - f_aa - f_bb.
"""


def split_terms(rhs: str) -> list[tuple[str, str]]:
    """(sign, body) for each top-level term of a flat right-hand side."""
    rhs = rhs.strip()
    sign = "+"
    if rhs.startswith("- "):
        sign, rhs = "-", rhs[2:]
    parts = re.split(r" ([+-]) ", rhs)
    terms = [(sign, parts[0])]
    terms += [(parts[k], parts[k + 1]) for k in range(1, len(parts), 2)]
    return terms


def fitted(sign: str, body: str) -> list[tuple[str, str]]:
    """The term, or its two density-fitted terms when it holds one g."""
    found = G.findall(body)
    if not found:
        return [(sign, body)]
    assert len(found) == 1, body
    p, q, r, s = found[0]
    direct = G.sub(f"B{{{p},{r};;Κ_1}} * B{{{q},{s};;Κ_1}}", body)
    exchange = G.sub(f"B{{{p},{s};;Κ_1}} * B{{{q},{r};;Κ_1}}", body)
    return [(sign, direct), ("-" if sign == "+" else "+", exchange)]


def join(terms: list[tuple[str, str]]) -> str:
    first_sign, first = terms[0]
    text = ("- " if first_sign == "-" else "") + first
    return text + "".join(f" {s} {b}" for s, b in terms[1:])


def main() -> None:
    source = (FOLDER / "ccsd_so.txt").read_text(encoding="utf-8").splitlines()
    lines, counts = [], []
    for line in source:
        if not line.strip() or line.startswith("#"):
            continue
        lhs, rhs = line.split(" = ", 1)
        terms = [t for sign, body in split_terms(rhs) for t in fitted(sign, body)]
        counts.append(len(terms))
        lines.append(f"{lhs} = {join(terms)}")
    e, r1, r2 = counts
    text = HEADER.format(e=e, r1=r1, r2=r2) + "\n".join(lines) + "\n"
    (FOLDER / "ccsd_so_df.txt").write_text(text, encoding="utf-8")
    print(f"wrote ccsd_so_df.txt: terms E {e}, R1 {r1}, R2 {r2}")


if __name__ == "__main__":
    main()
