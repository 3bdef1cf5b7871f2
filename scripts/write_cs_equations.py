"""Write ccsd_cs.txt, ccd_cs.txt and ccsd_cs_df.txt from spin_trace_cs.py output.

Usage (from the repository root):
    .venv/bin/python scripts/spin_trace_cs.py > ccsd_cs.lines
    .venv/bin/python scripts/spin_trace_cs.py --ccd > ccd_cs.lines
    .venv/bin/python scripts/write_cs_equations.py ccsd_cs.lines ccd_cs.lines
"""

import re
import sys
from pathlib import Path

D = str(Path(__file__).resolve().parents[1] / "src" / "sq_jax" / "cc" / "equations") + "/"
COMMON = """# t{a_1;i_1} = T1[a,i]; t{a_1,a_2;i_1,i_2} = T2[a,b,i,j] = t_ij^ab of the αβ pair (PySCF's t2[i,j,a,b]
# transposed), symmetric under (a_1,i_1) <-> (a_2,i_2); f{p;q} = F[p,q] (spatial);
{gline}
# Ŝ{i_1,i_2;a_1,a_2} = unnormalized sum over the simultaneous column permutations, all signs +
# (identity + the (a_1 i_1)(a_2 i_2) swap). R1 = <Φ_iα^aα|H̄|0> and R2 = <Φ_iα jβ^aα bβ|H̄|0> (the
# αβ projection, not the biorthogonal one), diagonal Fock terms included (general, non-canonical
# Fock); Jacobi update t += R / D, D1 = f_ii - f_aa, D2 = f_ii + f_jj - f_aa - f_bb.
# Derived for sq_jax by integrating out the spin of the spin-orbital equations in ccsd_so.txt
# (Crawford & Schaefer, Rev. Comput. Chem. 14, 33 (2000)); the result is the closed-shell CCSD of
# Scuseria, Janssen & Schaefer, J. Chem. Phys. 89, 7382 (1988). Terms were combined using the real
# 8-fold symmetry of <pq|rs> and T2[a,b,i,j] = T2[b,a,j,i].
"""
G = "# g{p,q;r,s} = <pq|rs> = (pr|qs), physicist notation, not antisymmetrized."
GDF = (
    "# <pq|rs> is density-fitted: every g{p,q;r,s} of ccsd_cs is B{p,r;;Κ_1} * B{q,s;;Κ_1}, with\n"
    "# B[p,q,K] the MO three-index factor, (pq|rs) ~ sum_K B[p,q,K] B[r,s,K] (one g per term)."
)


def df(line):
    return re.sub(r"g\{(\w+),(\w+);(\w+),(\w+)\}", r"B{\1,\3;;Κ_1} * B{\2,\4;;Κ_1}", line)


cs = open(sys.argv[1]).read().strip().splitlines()
ccd = open(sys.argv[2]).read().strip().splitlines()


def count(lines):
    return [
        l.count(" + ") + l.count(" - ") + 1 - (1 if l.split(" = ", 1)[1].startswith("- ") else 0)
        for l in lines
    ]


print(count(cs), count(ccd))
c = count(cs)
open(D + "ccsd_cs.txt", "w").write(
    f"# ccsd_cs: closed-shell (spin-adapted) CCSD residual equations in SeQuant's text syntax, one per line.\n"
    f"# Terms E {c[0]}, R1 {c[1]}, R2 {c[2]} (R2 terms Ŝ-led).\n"
    + COMMON.replace("{gline}", G)
    + "\n".join(cs)
    + "\n"
)
c2 = count(ccd)
open(D + "ccd_cs.txt", "w").write(
    f"# ccd_cs: closed-shell (spin-adapted) CCD residual equations in SeQuant's text syntax, one per line.\n"
    f"# Terms E {c2[0]}, R2 {c2[1]} (R2 terms Ŝ-led): ccsd_cs with T1 = 0.\n"
    + COMMON.replace("{gline}", G)
    + "\n".join(ccd)
    + "\n"
)
open(D + "ccsd_cs_df.txt", "w").write(
    f"# ccsd_cs_df: density-fitted closed-shell CCSD residual equations in SeQuant's text syntax.\n"
    f"# Terms E {c[0]}, R1 {c[1]}, R2 {c[2]} (R2 terms Ŝ-led); term by term the equations of ccsd_cs.\n"
    + COMMON.replace("{gline}", GDF)
    + "\n".join(df(l) for l in cs)
    + "\n"
)
