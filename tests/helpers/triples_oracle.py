"""Dense NumPy oracle of the closed-shell (T) energy, written from the published formula.

Independent of sq_jax's equation files and compiler: plain ``einsum`` over the whole
o³v³ arrays, for small test systems only.
"""

from __future__ import annotations

import itertools

import numpy as np


def _pair_permutations(x: np.ndarray) -> np.ndarray:
    """Sum of ``x[ijk,abc]`` over the 6 simultaneous permutations of (ia), (jb), (kc)."""
    out = np.zeros_like(x)
    for p in itertools.permutations(range(3)):
        out += x.transpose(*p, *(q + 3 for q in p))
    return out


def closed_shell_triples(
    t1: np.ndarray, t2: np.ndarray, eri: np.ndarray, fock: np.ndarray
) -> float:
    """E(T) for RHF from t1[i,a], t2[i,j,a,b] (PySCF layout) and chemists' (pq|rs).

    W = P[(bd|ck) t_ij^ad − (ck|jl) t_il^ab], V = W + P[(bj|ck) t_i^a + f_kc t_ij^ab]/2,
    E = Σ (4 W_abc + W_bca + W_cab)(V_abc − V_cba) / (3 D), D = ε_i+ε_j+ε_k−ε_a−ε_b−ε_c.
    """
    o = t1.shape[0]
    occ, vir = slice(0, o), slice(o, eri.shape[0])
    e = np.diag(fock)
    x = np.einsum("bdck,ijad->ijkabc", eri[vir, vir, vir, occ], t2)
    x -= np.einsum("ckjl,ilab->ijkabc", eri[vir, occ, occ, occ], t2)
    w = _pair_permutations(x)
    y = np.einsum("bjck,ia->ijkabc", eri[vir, occ, vir, occ], t1)
    y += np.einsum("ijab,kc->ijkabc", t2, fock[occ, vir])
    v = w + _pair_permutations(y) / 2
    eo, ev = e[:o], e[o:]
    d = (
        eo[:, None, None, None, None, None]
        + eo[None, :, None, None, None, None]
        + eo[None, None, :, None, None, None]
        - ev[None, None, None, :, None, None]
        - ev[None, None, None, None, :, None]
        - ev[None, None, None, None, None, :]
    )
    cab = w.transpose(0, 1, 2, 4, 5, 3)  # W_ijk^cab at [i,j,k,a,b,c]
    bca = w.transpose(0, 1, 2, 5, 3, 4)
    cba = v.transpose(0, 1, 2, 5, 4, 3)
    return float(np.sum((4 * w + bca + cab) * (v - cba) / d) / 3)
