"""Spin-trace sq_jax's spin-orbital CCSD text onto the closed-shell (αβ) projection.

Reads ccsd_so (Â expanded), sets the external spins (a_1, i_1 α; a_2, i_2 β), expands every
antisymmetrized factor into its two spatial pieces with spin deltas, sums the internal
spins, canonicalizes (dummy renaming, ⟨pq|rs⟩ 8-fold real symmetry, T2[a,b,i,j] =
T2[b,a,j,i]) and combines like terms. R2 terms are folded into Ŝ{i_1,i_2;a_1,a_2}-led
terms. Writes the equation lines to stdout.
"""

from __future__ import annotations

import itertools
import sys
from collections import defaultdict
from fractions import Fraction

import sq_jax as sq
from sq_jax.cc.equations import load_equations

DROP_T1 = "--ccd" in sys.argv


def idx(i):
    return f"{i.space}_{i.ordinal}"


def expand_factor(t):
    """-> list of (coef, (label, indices), delta pairs)."""
    ix = [idx(i) for i in t.indices]
    if t.label == "f" or (t.label == "t" and len(ix) == 2):
        return [(1, (t.label, tuple(ix)), [(ix[0], ix[1])])]
    p, q, r, s = ix
    lab = t.label
    return [
        (1, (lab, (p, q, r, s)), [(p, r), (q, s)]),
        (-1, (lab, (p, q, s, r)), [(p, s), (q, r)]),
    ]


def spin_trace(term, fixed):
    if isinstance(term, sq.Product):
        factors, scalar = list(term.factors), term.scalar
    else:
        factors, scalar = [term], 1
    out = []
    for choice in itertools.product(*(expand_factor(f) for f in factors)):
        coef = Fraction(scalar)
        parent = {}

        def find(x):
            while parent.setdefault(x, x) != x:
                x = parent[x]
            return x

        spat = []
        for c, tens, deltas in choice:
            coef *= c
            spat.append(tens)
            for x, y in deltas:
                parent[find(x)] = find(y)
        comps = defaultdict(set)
        for x in list(parent):
            comps[find(x)].add(x)
        ok = True
        nfree = 0
        for members in comps.values():
            spins = {fixed[m] for m in members if m in fixed}
            if len(spins) > 1:
                ok = False
                break
            if not spins:
                nfree += 1
        if ok:
            out.append((coef * 2**nfree, tuple(spat)))
    return out


G_FORMS = [
    (0, 1, 2, 3),
    (1, 0, 3, 2),
    (2, 3, 0, 1),
    (3, 2, 1, 0),
    (2, 1, 0, 3),
    (0, 3, 2, 1),
    (1, 2, 3, 0),
    (3, 0, 1, 2),
]


def forms(label, ix):
    if label == "g":
        return [tuple(ix[k] for k in f) for f in G_FORMS]
    if label == "t" and len(ix) == 4:
        return [ix, (ix[1], ix[0], ix[3], ix[2])]
    return [ix]


def canon(spat, external):
    dummies = sorted({x for _, ix in spat for x in ix if x not in external})
    occ = [d for d in dummies if d.startswith("i")]
    vir = [d for d in dummies if d.startswith("a")]
    best = None
    for po in itertools.permutations(range(len(occ))):
        for pv in itertools.permutations(range(len(vir))):
            ren = {occ[k]: f"i_{100 + po[k]}" for k in range(len(occ))}
            ren.update({vir[k]: f"a_{100 + pv[k]}" for k in range(len(vir))})
            facs = []
            for lab, ix in spat:
                r = tuple(ren.get(x, x) for x in ix)
                facs.append((lab, min(forms(lab, r))))
            key = tuple(sorted(facs))
            if best is None or key < best:
                best = key
    return best


def permute_ext(spat, perm):
    return tuple((lab, tuple(perm.get(x, x) for x in ix)) for lab, ix in spat)


def collect(eq, fixed, external):
    acc = defaultdict(Fraction)
    terms = eq.rhs.terms if isinstance(eq.rhs, sq.Sum) else (eq.rhs,)
    for term in terms:
        fs = term.factors if isinstance(term, sq.Product) else (term,)
        if DROP_T1 and any(
            isinstance(f, sq.Tensor) and f.label == "t" and len(f.indices) == 2 for f in fs
        ):
            continue
        for coef, spat in spin_trace(term, fixed):
            acc[canon(spat, external)] += coef
    return {k: v for k, v in acc.items() if v != 0}


def nice(spat, external):
    """Rename dummies in order of appearance: i_3.., a_3.. (after externals)."""
    nx = {
        "i": 1 + sum(x.startswith("i") for x in external),
        "a": 1 + sum(x.startswith("a") for x in external),
    }
    ren = {}
    for _, ix in spat:
        for x in ix:
            if x not in external and x not in ren:
                sp = x[0]
                ren[x] = f"{sp}_{nx[sp]}"
                nx[sp] += 1
    return tuple((lab, tuple(ren.get(x, x) for x in ix)) for lab, ix in spat)


ORDER = {"f": 0, "g": 1, "t": 2}


def order_factors(spat):
    # f/g first, then t2 before t1? keep: integrals first, then t2, then t1
    def k(f):
        lab, ix = f
        return (ORDER[lab], -len(ix))

    return tuple(sorted(spat, key=k))


def tensor_text(lab, ix):
    n = len(ix) // 2
    return f"{lab}{{{','.join(ix[:n])};{','.join(ix[n:])}}}"


def fmt_coef(c):
    if c.denominator == 1:
        return str(c.numerator)
    return f"{c.numerator}/{c.denominator}"


def write_terms(items, prefix=""):
    parts = []
    for coef, spat in items:
        body = " * ".join(tensor_text(*f) for f in spat)
        if prefix:
            body = prefix + " * " + body
        mag = abs(coef)
        text = body if mag == 1 else f"{fmt_coef(mag)} {body}"
        parts.append((coef < 0, text))
    out = ""
    for k, (neg, text) in enumerate(parts):
        if k == 0:
            out = ("- " if neg else "") + text
        else:
            out += (" - " if neg else " + ") + text
    return out


def sort_key(item):
    _coef, spat = item
    nt1 = sum(1 for lab, ix in spat if lab == "t" and len(ix) == 2)
    nt2 = sum(1 for lab, ix in spat if lab == "t" and len(ix) == 4)
    has_f = any(lab == "f" for lab, _ in spat)
    return (nt1 + nt2, nt2 == 0, not has_f, nt2, str(spat))


def main():
    eqs = sq.parse(load_equations("ccsd_so"))
    lines = []
    counts = {}
    for eq in eqs:
        name = getattr(eq.lhs, "label", None) or str(eq.lhs)
        if name == "E":
            fixed, external = {}, ()
        elif name == "R1":
            if DROP_T1:
                continue
            fixed = {"a_1": 0, "i_1": 0}
            external = ("a_1", "i_1")
        else:
            fixed = {"a_1": 0, "i_1": 0, "a_2": 1, "i_2": 1}
            external = ("a_1", "a_2", "i_1", "i_2")
        acc = collect(eq, fixed, external)
        if name == "R2":
            perm = {"a_1": "a_2", "a_2": "a_1", "i_1": "i_2", "i_2": "i_1"}
            done = set()
            items = []
            for key in sorted(acc, key=lambda k: sort_key((acc[k], k))):
                if key in done:
                    continue
                pkey = canon(permute_ext(key, perm), external)
                if pkey == key:
                    items.append((acc[key] / 2, key))
                    done.add(key)
                else:
                    assert acc[pkey] == acc[key], (key, acc[key], acc.get(pkey))
                    # keep the representative with a_1 and i_1 paired nicely
                    items.append((acc[key], key))
                    done.update({key, pkey})
            items = [(c, order_factors(nice(k, external))) for c, k in items]
            items.sort(key=sort_key)
            rhs = write_terms(items, prefix="Ŝ{i_1,i_2;a_1,a_2}")
            lhs = "R2{a_1,a_2;i_1,i_2}"
        else:
            items = [(acc[k], order_factors(nice(k, external))) for k in acc]
            items.sort(key=sort_key)
            rhs = write_terms(items)
            lhs = "E" if name == "E" else "R1{a_1;i_1}"
        counts[name] = len(items)
        lines.append(f"{lhs} = {rhs}")
    print(counts, file=sys.stderr)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
