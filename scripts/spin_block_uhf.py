"""Spin-block sq_jax's spin-orbital CC text into unrestricted (α/β) equations.

Reads ``ccsd_so`` (or ``ccd_so`` with ``--ccd``; Â expanded by the parser), gives every
index a spin, keeps the spin cases in which each factor is non-zero, and rewrites each
factor as one spin block with spin-labelled indices (``i↑``, ``a↓``, …):

* ``f`` and T1 are spin-diagonal;
* a same-spin ⟨pq‖rs⟩ or T2 stays antisymmetrized (``g{i↑,i↑;a↑,a↑}``);
* a mixed-spin one is written with α first in the bra and in the ket, with the sign of
  the swaps that bring it there: ⟨pβ qα‖rβ sα⟩ = ⟨qα pβ‖sα rβ⟩, ⟨pα qβ‖rβ sα⟩ = −⟨pα qβ‖sα rβ⟩,
  and ⟨pα qβ‖rα sβ⟩ = ⟨pq|rs⟩ (the exchange part vanishes).

Equal terms are combined after renaming dummies and using each block's symmetries (signed
4-fold antisymmetry, real bra↔ket for same-spin g; p↔r, q↔s for mixed g). Same-spin R2
terms are folded back into Â-led form. Writes the equation file to stdout.

Usage (from the repository root):
    .venv/bin/python scripts/spin_block_uhf.py > src/sq_jax/cc/equations/ccsd_uhf.txt
    .venv/bin/python scripts/spin_block_uhf.py --ccd > src/sq_jax/cc/equations/ccd_uhf.txt
"""

from __future__ import annotations

import itertools
import sys
from collections import defaultdict
from fractions import Fraction

from spin_trace_cs import sort_key  # the closed-shell script's term order, shared

import sq_jax as sq
from sq_jax.cc.equations import load_equations

CCD = "--ccd" in sys.argv
UP, DOWN = "↑", "↓"
# Same-spin 4-index forms (permutation of slots, sign). g also has bra <-> ket.
_ANTI = [((0, 1, 2, 3), 1), ((1, 0, 2, 3), -1), ((0, 1, 3, 2), -1), ((1, 0, 3, 2), 1)]
_G_SAME = _ANTI + [((p[2], p[3], p[0], p[1]), s) for p, s in _ANTI]
_G_MIXED = [((0, 1, 2, 3), 1), ((2, 1, 0, 3), 1), ((0, 3, 2, 1), 1), ((2, 3, 0, 1), 1)]


def _name(index):
    return f"{index.space}_{index.ordinal}"


def _spin_factor(label, ix, spin):
    """(sign, (label, spin-labelled indices)) or None when the block is zero."""
    s = [spin[x] for x in ix]
    if len(ix) == 2:
        return None if s[0] != s[1] else (1, (label, tuple(_lab(x, spin) for x in ix)))
    if sorted(s[:2]) != sorted(s[2:]):
        return None
    ix, sign = list(ix), 1
    if s[0] != s[1]:  # mixed: α first in the bra and in the ket
        if s[0] == DOWN:
            ix[0], ix[1], sign = ix[1], ix[0], -sign
        if s[2] == DOWN:
            ix[2], ix[3], sign = ix[3], ix[2], -sign
    return sign, (label, tuple(_lab(x, spin) for x in ix))


def _lab(x, spin):
    space, ordinal = x.split("_")
    return f"{space}{spin[x]}_{ordinal}"


def _forms(label, ix):
    if len(ix) == 2:
        return [(ix, 1)]
    same = ix[0][1] == ix[1][1]
    if label == "g":
        table = _G_SAME if same else _G_MIXED
    else:
        table = _ANTI if same else [((0, 1, 2, 3), 1)]
    return [(tuple(ix[k] for k in perm), sign) for perm, sign in table]


def canon(factors, external):
    """(key, sign) of a product of spin blocks, or None when it vanishes by symmetry."""
    dummies = sorted({x for _, ix in factors for x in ix if x not in external})
    groups = defaultdict(list)
    for d in dummies:
        groups[d.split("_")[0]].append(d)
    names = list(groups)
    best, best_sign, zero = None, 0, False
    for perms in itertools.product(*(itertools.permutations(groups[g]) for g in names)):
        ren = {}
        for g, perm in zip(names, perms, strict=True):
            ren.update({d: f"{g}_{100 + k}" for k, d in enumerate(perm)})
        sign, facs = 1, []
        for label, ix in factors:
            renamed = tuple(ren.get(x, x) for x in ix)
            options = sorted((f, s) for f, s in _forms(label, renamed))
            form, s = options[0]
            if len(options) > 1 and options[1][0] == form and options[1][1] != s:
                return None
            sign *= s
            facs.append((label, form))
        key = tuple(sorted(facs))
        if best is None or key < best:
            best, best_sign, zero = key, sign, False
        elif key == best and sign != best_sign:
            zero = True
    return None if zero else (best, best_sign)


def spin_cases(term, external_spin):
    """The spin-block terms of one spin-orbital term: list of (coef, factors)."""
    factors = term.factors if isinstance(term, sq.Product) else (term,)
    scalar = Fraction(term.scalar) if isinstance(term, sq.Product) else Fraction(1)
    tensors = [(f.label, tuple(_name(i) for i in f.indices)) for f in factors]
    internal = sorted({x for _, ix in tensors for x in ix} - set(external_spin))
    out = []
    for spins in itertools.product((UP, DOWN), repeat=len(internal)):
        spin = {**external_spin, **dict(zip(internal, spins, strict=True))}
        coef, blocks = scalar, []
        for label, ix in tensors:
            got = _spin_factor(label, ix, spin)
            if got is None:
                break
            coef *= got[0]
            blocks.append(got[1])
        else:
            out.append((coef, tuple(blocks)))
    return out


def collect(eq, external_spin):
    external = {_lab(x, external_spin) for x in external_spin}
    acc = defaultdict(Fraction)
    terms = eq.rhs.terms if isinstance(eq.rhs, sq.Sum) else (eq.rhs,)
    for term in terms:
        for coef, blocks in spin_cases(term, external_spin):
            got = canon(blocks, external)
            if got is not None:
                acc[got[0]] += coef * got[1]
    return {k: v for k, v in acc.items() if v != 0}, external


def fold_antisymmetric(acc, external, ext):
    """Same-spin R2: one Â-led representative per orbit, coefficient c / |stabilizer|."""
    i1, i2, a1, a2 = ext
    perms = [({}, 1), ({i1: i2, i2: i1}, -1), ({a1: a2, a2: a1}, -1)]
    perms.append(({i1: i2, i2: i1, a1: a2, a2: a1}, 1))
    done, items = set(), []
    for key in sorted(acc, key=lambda k: sort_key((acc[k], k))):
        if key in done:
            continue
        stab = 0
        for ren, sgn in perms:
            moved = tuple((lab, tuple(ren.get(x, x) for x in ix)) for lab, ix in key)
            got = canon(moved, external)
            pkey, psign = got if got is not None else (None, 0)
            want = acc[key] * sgn * psign
            if pkey == key:
                assert want == acc[key], ("inconsistent stabilizer", key)
                stab += 1
            else:
                assert acc.get(pkey) == want, ("not antisymmetric", key, pkey)
                done.add(pkey)
        done.add(key)
        items.append((acc[key] / stab, key))
    return items


def nice(factors, external):
    """Rename dummies in order of appearance, after the externals of their space."""
    count = defaultdict(int)
    for x in external:
        space, ordinal = x.split("_")
        count[space] = max(count[space], int(ordinal))
    ren = {}
    for _, ix in factors:
        for x in ix:
            if x not in external and x not in ren:
                space = x.split("_")[0]
                count[space] += 1
                ren[x] = f"{space}_{count[space]}"
    return tuple((lab, tuple(ren.get(x, x) for x in ix)) for lab, ix in factors)


def order_factors(factors):
    rank = {"f": 0, "g": 1, "t": 2}
    return tuple(sorted(factors, key=lambda f: (rank[f[0]], -len(f[1]))))


def tensor_text(label, ix):
    n = len(ix) // 2
    anti = ":A" if len(ix) == 4 and ix[0].split("_")[0][1] == ix[1].split("_")[0][1] else ""
    return f"{label}{{{','.join(ix[:n])};{','.join(ix[n:])}}}{anti}"


def write_terms(items, prefix=""):
    out = ""
    for k, (coef, factors) in enumerate(items):
        body = " * ".join(tensor_text(*f) for f in factors)
        body = f"{prefix} * {body}" if prefix else body
        mag = abs(coef)
        text = body if mag == 1 else f"{mag.numerator}/{mag.denominator} {body}".replace("/1 ", " ")
        if k == 0:
            out = ("- " if coef < 0 else "") + text
        else:
            out += (" - " if coef < 0 else " + ") + text
    return out


# Residual name, external spins, and the left-hand side's indices.
CASES = {
    "R1": [
        ("R1a", {"a_1": UP, "i_1": UP}, "a↑_1;i↑_1"),
        ("R1b", {"a_1": DOWN, "i_1": DOWN}, "a↓_1;i↓_1"),
    ],
    "R2": [
        ("R2aa", {"a_1": UP, "a_2": UP, "i_1": UP, "i_2": UP}, "a↑_1,a↑_2;i↑_1,i↑_2"),
        ("R2ab", {"a_1": UP, "a_2": DOWN, "i_1": UP, "i_2": DOWN}, "a↑_1,a↓_2;i↑_1,i↓_2"),
        ("R2bb", {"a_1": DOWN, "a_2": DOWN, "i_1": DOWN, "i_2": DOWN}, "a↓_1,a↓_2;i↓_1,i↓_2"),
    ],
}


HEADER = """# {name}: unrestricted (spin-blocked) {method} residual equations in SeQuant's text syntax.
# Terms {counts} (same-spin R2 terms Â-led).
# Written by scripts/spin_block_uhf.py from {source}.txt: every spin-orbital index was given a spin
# (↑ α, ↓ β), the spin cases in which a factor vanishes were dropped, and equal terms combined.
# Indices carry their spin: i↑ occupied α, a↓ virtual β, ... Each tensor is the spin-orbital
# tensor of {source} restricted to the spin block its indices name, so one label serves all blocks:
# f{{p;q}} = F[p,q] within one spin; t{{a↑_1;i↑_1}} = T1α[a,i], t{{a↓_1;i↓_1}} = T1β[a,i];
# t{{a↑_1,a↑_2;i↑_1,i↑_2}}:A = T2αα[a,b,i,j] and t{{a↓_1,a↓_2;i↓_1,i↓_2}}:A = T2ββ (antisymmetric);
# t{{a↑_1,a↓_1;i↑_1,i↓_1}} = T2αβ[a,b,i,j] with a,i α and b,j β (PySCF's t2ab[i,j,a,b] transposed);
# g{{p↑,q↑;r↑,s↑}}:A = <pq||rs> = (pr|qs) - (ps|qr) over α orbitals (likewise β), antisymmetrized;
# g{{p↑,q↓;r↑,s↓}} = <pq|rs> = (pr|qs) with p, r α and q, s β: the plain integral, which is what
# <pq||rs> is for these spins. Mixed-spin tensors are always written α first in the bra and in
# the ket; the sign of the swaps that bring them there is in the coefficient.
# Â{{i↑_1,i↑_2;a↑_1,a↑_2}} = unnormalized signed sum over permutations of the i's and, independently,
# of the a's. Residuals R1a/R1b, R2aa/R2ab/R2bb are the spin blocks of the spin-orbital R =
# <Φ|H̄|0>, diagonal Fock terms included (general, non-canonical Fock, as ROHF needs); Jacobi update
# t += R / D per block, D1 = f_ii - f_aa, D2 = f_ii + f_jj - f_aa - f_bb with each orbital's own spin.
"""


def main():
    eqs = sq.parse(load_equations("ccd_so" if CCD else "ccsd_so"))
    lines, counts = [], {}
    for eq in eqs:
        for name, spins, lhs in CASES.get(eq.name, [("E", {}, "")]):
            acc, external = collect(eq, spins)
            if name in ("R2aa", "R2bb"):
                s = UP if name == "R2aa" else DOWN
                ext = (f"i{s}_1", f"i{s}_2", f"a{s}_1", f"a{s}_2")
                items = fold_antisymmetric(acc, external, ext)
                prefix = f"Â{{i{s}_1,i{s}_2;a{s}_1,a{s}_2}}"
            else:
                items, prefix = [(acc[k], k) for k in acc], ""
            items = [(c, order_factors(nice(k, sorted(external)))) for c, k in items]
            items.sort(key=sort_key)
            counts[name] = len(items)
            head = f"{name}{{{lhs}}}" if lhs else name
            lines.append(f"{head} = {write_terms(items, prefix)}")
    source = "ccd_so" if CCD else "ccsd_so"
    name, method = ("ccd_uhf", "CCD") if CCD else ("ccsd_uhf", "CCSD")
    summary = ", ".join(f"{k} {v}" for k, v in counts.items())
    print(HEADER.format(name=name, method=method, counts=summary, source=source), end="")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
