"""Hand-written spin-orbital CCSD, the test-only oracle for the text equations and solvers.

Written from the spin-orbital CCSD equations in the intermediate form of J. F. Stanton,
J. Gauss, J. D. Watts and R. J. Bartlett, J. Chem. Phys. 94, 4334 (1991), as presented by
T. D. Crawford and H. F. Schaefer III, Rev. Comput. Chem. 14, 33 (2000), with one change:
the Fock intermediates keep the *full* Fock matrix (diagonal included), so that the
functions return the residual R = <Φ_ij^ab| H̄ |0> itself rather than D·t_new.

Conventions (the same as SeQuant's and as ``sq_jax.cc``):

* ``f`` is the full spin-orbital Fock matrix F[p, q]; ``g`` is the full antisymmetrized
  <pq||rs> (physicist); occupied spin-orbitals come first (``nocc`` of them).
* ``t1`` is T1[a, i] and ``t2`` is T2[a, b, i, j] (virtual slots first, as in
  ``t{a_1,a_2;i_1,i_2}``); the residuals have the same layouts.
* Jacobi update: t ← t + R / D with D1[a, i] = f_ii − f_aa and
  D2[a, b, i, j] = f_ii + f_jj − f_aa − f_bb (negative for a normal reference;
  the residual's diagonal Fock part is −D·t).

Every function takes ``xp`` (``numpy`` or ``jax.numpy``) so that the same code serves as
a numpy oracle and as a JAX-traceable residual for the solver tests.
"""

from __future__ import annotations

import numpy as np

from tests.helpers.cc_oracle_diis import (  # the tests read the first two from here
    denominators,  # noqa: F401
    mp2_guess,  # noqa: F401
    solve_ccsd_with,
)


def _blocks(f, g, nocc):
    o, v = slice(0, nocc), slice(nocc, f.shape[0])
    return {
        "f_oo": f[o, o],
        "f_ov": f[o, v],
        "f_vo": f[v, o],
        "f_vv": f[v, v],
        "oooo": g[o, o, o, o],
        "ooov": g[o, o, o, v],
        "oovo": g[o, o, v, o],
        "oovv": g[o, o, v, v],
        "ovoo": g[o, v, o, o],
        "ovov": g[o, v, o, v],
        "ovvo": g[o, v, v, o],
        "ovvv": g[o, v, v, v],
        "vovv": g[v, o, v, v],
        "vvoo": g[v, v, o, o],
        "vvvo": g[v, v, v, o],
        "vvvv": g[v, v, v, v],
    }


def ccsd_energy(f, g, t1, t2, nocc, xp=np):
    """E_corr = f_ia t_i^a + 1/4 <ij||ab> t_ij^ab + 1/2 <ij||ab> t_i^a t_j^b."""
    b = _blocks(f, g, nocc)
    e = xp.einsum("ia,ai->", b["f_ov"], t1)
    e = e + 0.25 * xp.einsum("ijab,abij->", b["oovv"], t2)
    e = e + 0.5 * xp.einsum("ijab,ai,bj->", b["oovv"], t1, t1)
    return e


def ccsd_residuals(f, g, t1, t2, nocc, xp=np):
    """Return (R1[a, i], R2[a, b, i, j]) of spin-orbital CCSD, diagonal Fock terms included."""
    b = _blocks(f, g, nocc)
    es = xp.einsum
    s1 = t1.T  # [i, a]
    s2 = xp.transpose(t2, (2, 3, 0, 1))  # [i, j, a, b]
    s1s1 = es("ia,jb->ijab", s1, s1)
    tau_tilde = s2 + 0.5 * (s1s1 - xp.transpose(s1s1, (0, 1, 3, 2)))
    tau = s2 + s1s1 - xp.transpose(s1s1, (0, 1, 3, 2))

    fae = (
        b["f_vv"]
        - 0.5 * es("me,ma->ae", b["f_ov"], s1)
        + es("mf,mafe->ae", s1, b["ovvv"])
        - 0.5 * es("mnaf,mnef->ae", tau_tilde, b["oovv"])
    )
    fmi = (
        b["f_oo"]
        + 0.5 * es("ie,me->mi", s1, b["f_ov"])
        + es("ne,mnie->mi", s1, b["ooov"])
        + 0.5 * es("inef,mnef->mi", tau_tilde, b["oovv"])
    )
    fme = b["f_ov"] + es("nf,mnef->me", s1, b["oovv"])

    x = es("je,mnie->mnij", s1, b["ooov"])
    wmnij = b["oooo"] + x - xp.transpose(x, (0, 1, 3, 2))
    wmnij = wmnij + 0.25 * es("ijef,mnef->mnij", tau, b["oovv"])
    x = es("mb,amef->abef", s1, b["vovv"])
    wabef = b["vvvv"] - x + xp.transpose(x, (1, 0, 2, 3))
    wabef = wabef + 0.25 * es("mnab,mnef->abef", tau, b["oovv"])
    wmbej = (
        b["ovvo"]
        + es("jf,mbef->mbej", s1, b["ovvv"])
        - es("nb,mnej->mbej", s1, b["oovo"])
        - es("jnfb,mnef->mbej", 0.5 * s2 + es("jf,nb->jnfb", s1, s1), b["oovv"])
    )

    r1 = (
        b["f_vo"].T
        + es("ie,ae->ia", s1, fae)
        - es("ma,mi->ia", s1, fmi)
        + es("imae,me->ia", s2, fme)
        - es("nf,naif->ia", s1, b["ovov"])
        - 0.5 * es("imef,maef->ia", s2, b["ovvv"])
        - 0.5 * es("mnae,nmei->ia", s2, b["oovo"])
    )

    def p_ab(y):
        return y - xp.transpose(y, (0, 1, 3, 2))

    def p_ij(y):
        return y - xp.transpose(y, (1, 0, 2, 3))

    r2 = xp.transpose(b["vvoo"], (2, 3, 0, 1))
    r2 = r2 + p_ab(es("ijae,be->ijab", s2, fae - 0.5 * es("mb,me->be", s1, fme)))
    r2 = r2 - p_ij(es("imab,mj->ijab", s2, fmi + 0.5 * es("je,me->mj", s1, fme)))
    r2 = r2 + 0.5 * es("mnab,mnij->ijab", tau, wmnij)
    r2 = r2 + 0.5 * es("ijef,abef->ijab", tau, wabef)
    ring = es("imae,mbej->ijab", s2, wmbej) - es("ie,ma,mbej->ijab", s1, s1, b["ovvo"])
    r2 = r2 + p_ij(p_ab(ring))
    r2 = r2 + p_ij(es("ie,abej->ijab", s1, b["vvvo"]))
    r2 = r2 - p_ab(es("ma,mbij->ijab", s1, b["ovoo"]))
    return r1.T, xp.transpose(r2, (2, 3, 0, 1))


def ccd_residual(f, g, t2, nocc, xp=np):
    """R2 of spin-orbital CCD (CCSD with T1 = 0)."""
    t1 = xp.zeros((f.shape[0] - nocc, nocc), dtype=t2.dtype)
    return ccsd_residuals(f, g, t1, t2, nocc, xp=xp)[1]


def solve_ccsd(f, g, nocc, *, e_tol=1e-10, t_tol=1e-8, max_iter=200, space=6):
    """Plain numpy Jacobi + DIIS CCSD; returns (E_corr, t1, t2, iterations, converged)."""
    return solve_ccsd_with(
        ccsd_residuals,
        ccsd_energy,
        f,
        g,
        nocc,
        e_tol=e_tol,
        t_tol=t_tol,
        max_iter=max_iter,
        space=space,
    )
