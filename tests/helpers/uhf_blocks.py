"""Random unrestricted systems over spin-orbitals and their spin blocks, for the UHF tests.

Spin-orbitals are ordered occupied α, occupied β, virtual α, virtual β (as
:mod:`sq_jax.cc.open_shell`). The integrals come from random real AO integrals with the
8-fold symmetry and two random orbital sets, so that ⟨pq‖rs⟩ has the spin structure of a
real UHF calculation; the Fock matrix is random, symmetric and spin-diagonal
(non-canonical).
"""

from __future__ import annotations

import itertools
import re

import numpy as np

_CHEM = ((0, 1, 2, 3), (1, 0, 2, 3), (0, 1, 3, 2), (1, 0, 3, 2))


def spin_orbital_positions(oa, ob, va, vb):
    """Space key (``i↑``, ``i↓``, ``a↑``, ``a↓``, ``p↑``, ``p↓``) → spin-orbital positions."""
    o = oa + ob
    out = {
        "i↑": np.arange(oa),
        "i↓": oa + np.arange(ob),
        "a↑": o + np.arange(va),
        "a↓": o + va + np.arange(vb),
    }
    for s in "↑↓":  # all orbitals of one spin: occupied, then virtual
        out["p" + s] = np.concatenate([out["i" + s], out["a" + s]])
    return out


def random_unrestricted(seed, oa, ob, va, vb):
    """(f, g, t1, t2) over spin-orbitals: f spin-diagonal, g = ⟨pq‖rs⟩, random T."""
    rng = np.random.default_rng(seed)
    n = oa + va  # spatial orbitals per spin (oa + va == ob + vb)
    assert ob + vb == n
    x = rng.normal(size=(n, n, n, n))
    eri = sum(x.transpose(p) for p in _CHEM)
    eri = 0.05 * (eri + eri.transpose(2, 3, 0, 1))
    coeff = [np.linalg.qr(rng.normal(size=(n, n)))[0] for _ in range(2)]
    pos = spin_orbital_positions(oa, ob, va, vb)
    spin_of = {0: np.concatenate([pos["i↑"], pos["a↑"]]), 1: np.concatenate([pos["i↓"], pos["a↓"]])}
    nso = 2 * n
    chem = np.zeros((nso,) * 4)
    fock = np.zeros((nso, nso))
    for s, t in itertools.product((0, 1), repeat=2):
        cs, ct = coeff[s], coeff[t]
        block = np.einsum("pqrs,pP,qQ,rR,sS->PQRS", eri, cs, cs, ct, ct)
        chem[np.ix_(spin_of[s], spin_of[s], spin_of[t], spin_of[t])] = block
    for s in (0, 1):
        h = rng.normal(scale=0.1, size=(n, n))
        h = h + h.T + np.diag(np.r_[np.full(n - (va, vb)[s], -1.0), np.full((va, vb)[s], 1.0)])
        fock[np.ix_(spin_of[s], spin_of[s])] = h
    g = chem.transpose(0, 2, 1, 3) - chem.transpose(0, 2, 3, 1)
    o, v = oa + ob, va + vb
    is_beta = np.zeros(nso, dtype=bool)
    is_beta[spin_of[1]] = True
    occ_b, vir_b = is_beta[:o], is_beta[o:]
    t1 = rng.normal(scale=0.05, size=(v, o)) * (vir_b[:, None] == occ_b[None, :])
    t2 = rng.normal(scale=0.05, size=(v, v, o, o))
    t2 = t2 - t2.transpose(1, 0, 2, 3)
    t2 = t2 - t2.transpose(0, 1, 3, 2)
    same = (vir_b[:, None, None, None] + vir_b[None, :, None, None]) == (
        occ_b[None, None, :, None] + occ_b[None, None, None, :]
    )
    t2 = t2 * same  # non-zero only with as many β among a, b as among i, j
    return fock, g, t1, t2


def block_of(full, key, positions, nocc):
    """The block of a spin-orbital tensor named by a key such as ``g{i↑,a↓;i↑,a↓}``.

    Occupied and virtual keys index ``full`` over all spin-orbitals (``f``, ``g``) unless
    ``nocc`` is given for an amplitude or residual (virtual slots counted from 0).
    """
    spaces = [s for s in re.split(r"[;,]", key[key.index("{") + 1 : -1]) if s]
    idx = []
    for s in spaces:
        where = positions[s]
        idx.append(where - nocc if (nocc and s[0] == "a") else where)
    return full[np.ix_(*idx)]
