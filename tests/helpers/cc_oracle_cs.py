"""Hand-written closed-shell (spin-adapted) CCSD, the test-only oracle for ``ccsd_cs``.

The residuals are the αβ projections R1[a, i] = <Φ_iα^aα| H̄ |0> and
R2[a, b, i, j] = <Φ_iα jβ^aα bβ| H̄ |0> of spin-orbital CCSD, written over spatial
orbitals. They were derived for this file by integrating out the spin of the intermediate
form of J. F. Stanton, J. Gauss, J. D. Watts and R. J. Bartlett, J. Chem. Phys. 94, 4334
(1991) (the same equations as the closed-shell CCSD of G. E. Scuseria, C. L. Janssen and
H. F. Schaefer III, J. Chem. Phys. 89, 7382 (1988)). As in ``cc_oracle``, the Fock
intermediates keep the *full* Fock matrix (diagonal included), so the functions return
the residual itself rather than D·t_new, and a general (non-canonical) Fock matrix is
allowed.

Conventions (those of ``sq_jax.cc`` and SeQuant's closed-shell equations):

* ``f`` is the spatial Fock matrix F[p, q]; ``v`` is the physicist <pq|rs> = (pr|qs), not
  antisymmetrized; occupied orbitals come first (``nocc`` of them).
* ``t1`` is T1[a, i]; ``t2`` is T2[a, b, i, j] = t_ij^ab of the αβ pair (PySCF's
  ``t2[i, j, a, b]`` transposed), symmetric under (a, i) <-> (b, j).
* Jacobi update: t ← t + R / D with D1[a, i] = f_ii − f_aa and
  D2[a, b, i, j] = f_ii + f_jj − f_aa − f_bb.

Every function takes ``xp`` (``numpy`` or ``jax.numpy``).
"""

from __future__ import annotations

import numpy as np

from tests.helpers.cc_oracle_diis import (  # the tests read the first two from here
    denominators,  # noqa: F401
    mp2_guess,  # noqa: F401
    solve_ccsd_with,
)


def _blocks(v, nocc):
    o, u = slice(0, nocc), slice(nocc, v.shape[0])
    names = {"o": o, "v": u}
    want = (
        "oooo ooov oovo oovv ovoo ovov ovvo ovvv voov vovo vovv vvoo vvov vvvo vvvv vooo"
    ).split()
    return {k: v[names[k[0]], names[k[1]], names[k[2]], names[k[3]]] for k in want}


def ccsd_energy(f, v, t1, t2, nocc, xp=np):
    """E_corr = 2 f_ia t_i^a + Σ (2<ij|ab> − <ij|ba>) (t_ij^ab + t_i^a t_j^b)."""
    g = v[:nocc, :nocc, nocc:, nocc:]
    s1 = t1.T
    tau = xp.transpose(t2, (2, 3, 0, 1)) + xp.einsum("ia,jb->ijab", s1, s1)
    lmat = 2.0 * g - xp.transpose(g, (0, 1, 3, 2))
    return 2.0 * xp.einsum("ia,ia->", f[:nocc, nocc:], s1) + xp.einsum("ijab,ijab->", lmat, tau)


def ccsd_residuals(f, v, t1, t2, nocc, xp=np):
    """Return (R1[a, i], R2[a, b, i, j]) of closed-shell CCSD, diagonal Fock terms included."""
    es = xp.einsum
    b = _blocks(v, nocc)
    o, u = slice(0, nocc), slice(nocc, f.shape[0])
    f_oo, f_ov, f_vo, f_vv = f[o, o], f[o, u], f[u, o], f[u, u]
    s1 = t1.T  # [i, a]
    s2 = xp.transpose(t2, (2, 3, 0, 1))  # [i, j, a, b], αβ
    s1s1 = es("ia,jb->ijab", s1, s1)
    tau = s2 + s1s1
    tau_t = s2 + 0.5 * s1s1
    l_oovv = 2.0 * b["oovv"] - xp.transpose(b["oovv"], (0, 1, 3, 2))
    u2 = 2.0 * s2 - xp.transpose(s2, (0, 1, 3, 2))  # 2 t_ijab − t_ijba

    # Fock-like intermediates (spin-summed Stanton–Gauss F).
    fme = f_ov + es("nf,mnef->me", s1, l_oovv)
    fae = (
        f_vv
        - 0.5 * es("me,ma->ae", f_ov, s1)
        + es("mf,mafe->ae", s1, 2.0 * b["ovvv"] - xp.transpose(b["ovvv"], (0, 1, 3, 2)))
        - es("mnaf,mnef->ae", tau_t, l_oovv)
    )
    fmi = (
        f_oo
        + 0.5 * es("ie,me->mi", s1, f_ov)
        + es("ne,mnie->mi", s1, 2.0 * b["ooov"] - xp.transpose(b["oovo"], (0, 1, 3, 2)))
        + es("inef,mnef->mi", tau_t, l_oovv)
    )

    r1 = (
        f_vo.T
        + es("ie,ae->ia", s1, fae)
        - es("ma,mi->ia", s1, fmi)
        + es("imae,me->ia", u2, fme)
        + es("nf,nafi->ia", s1, 2.0 * b["ovvo"] - xp.transpose(b["ovov"], (0, 1, 3, 2)))
        + es("imef,amef->ia", u2, b["vovv"])
        - es("mnae,nmei->ia", u2, b["oovo"])
    )

    # Two-electron intermediates of the αβ block.
    wmnij = (
        b["oooo"]
        + es("je,mnie->mnij", s1, b["ooov"])
        + es("ie,mnej->mnij", s1, b["oovo"])
        + 0.5 * es("ijef,mnef->mnij", tau, b["oovv"])
    )
    wabef = (
        b["vvvv"]
        - es("mb,amef->abef", s1, b["vovv"])
        - es("ma,mbef->abef", s1, b["ovvv"])
        + 0.5 * es("mnab,mnef->abef", tau, b["oovv"])
    )
    # Ring intermediates: opposite-spin direct (wa, M σ B τ E σ J τ) and spin-flip
    # exchange (wx, M σ B τ E τ J σ); the same-spin one is wa + wx.
    wa = (
        b["ovvo"]
        + es("jf,mbef->mbej", s1, b["ovvv"])
        - es("nb,mnej->mbej", s1, b["oovo"])
        - 0.5 * es("jnfb,mnef->mbej", s2, b["oovv"])
        + es("njfb,mnef->mbej", s2, b["oovv"])
        - 0.5 * es("njfb,mnfe->mbej", s2, b["oovv"])
        - es("jf,nb,mnef->mbej", s1, s1, b["oovv"])
    )
    wx = (
        -xp.transpose(b["ovov"], (0, 1, 3, 2))
        - es("jf,mbfe->mbej", s1, b["ovvv"])
        + es("nb,mnje->mbej", s1, b["ooov"])
        + 0.5 * es("jnfb,mnfe->mbej", s2, b["oovv"])
        + es("jf,nb,mnfe->mbej", s1, s1, b["oovv"])
    )

    xbe = fae - 0.5 * es("mb,me->be", s1, fme)
    ymj = fmi + 0.5 * es("je,me->mj", s1, fme)
    half = (
        es("ijae,be->ijab", s2, xbe)
        - es("imab,mj->ijab", s2, ymj)
        + es("imae,mbej->ijab", u2, wa)
        + es("imae,mbej->ijab", s2, wx)
        + es("mjae,mbei->ijab", s2, wx)
        - es("ie,ma,mbej->ijab", s1, s1, b["ovvo"])
        - es("je,ma,mbie->ijab", s1, s1, b["ovov"])
        + es("ie,abej->ijab", s1, b["vvvo"])
        - es("ma,mbij->ijab", s1, b["ovoo"])
    )
    r2 = (
        xp.transpose(b["vvoo"], (2, 3, 0, 1))
        + es("mnab,mnij->ijab", tau, wmnij)
        + es("ijef,abef->ijab", tau, wabef)
        + half
        + xp.transpose(half, (1, 0, 3, 2))
    )
    return r1.T, xp.transpose(r2, (2, 3, 0, 1))


def ccd_residual(f, v, t2, nocc, xp=np):
    """R2 of closed-shell CCD (CCSD with T1 = 0)."""
    t1 = xp.zeros((f.shape[0] - nocc, nocc), dtype=t2.dtype)
    return ccsd_residuals(f, v, t1, t2, nocc, xp=xp)[1]


def solve_ccsd(f, v, nocc, *, e_tol=1e-12, t_tol=1e-10, max_iter=200, space=8):
    """Plain numpy Jacobi + DIIS closed-shell CCSD; returns (E_corr, t1, t2, its, converged)."""
    return solve_ccsd_with(
        ccsd_residuals,
        ccsd_energy,
        f,
        v,
        nocc,
        e_tol=e_tol,
        t_tol=t_tol,
        max_iter=max_iter,
        space=space,
    )
