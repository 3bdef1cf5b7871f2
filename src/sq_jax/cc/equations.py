"""The coupled-cluster equation library: SeQuant-syntax text shipped as package data.

Each file ``cc/equations/<name>.txt`` holds one equation per line (``E = …``,
``R1{a_1;i_1} = …``, ``R2{a_1,a_2;i_1,i_2} = …``) after a header of ``#`` comment lines
that :func:`load_equations` drops. Conventions are SeQuant's:

* ``t{a_1;i_1}`` is T1[a, i] and ``t{a_1,a_2;i_1,i_2}`` is T2[a, b, i, j];
* ``f{p;q}`` is F[p, q]; ``g{p,q;r,s}:A`` is ⟨pq‖rs⟩ (spin-orbital files);
  ``g{p,q;r,s}`` is ⟨pq|rs⟩ over spatial orbitals and T2 is the αβ amplitude t_ij^ab
  (closed-shell ``_cs`` files, whose residuals are the αβ projections); in ``_df`` files
  each ``g{p,q;r,s}`` is ``B{p,r;;Κ_1} * B{q,s;;Κ_1}`` with (pq|rs) ≈ Σ_K B[p,q,K] B[r,s,K]
  (``ccsd_so_df``: each ⟨pq‖rs⟩ is ``B{p,r;;Κ_1} * B{q,s;;Κ_1} - B{p,s;;Κ_1} * B{q,r;;Κ_1}``
  over spin-orbitals, B[P,Q,K] = B[p,q,K] δ_σPσQ);
* closed-shell residual terms start with ``Ŝ{i_1,i_2;a_1,a_2}``, the unnormalized sum over
  the simultaneous permutations of the (i_k, a_k) columns, all with sign +;
* spin-orbital residual terms start with ``Â{i_1,i_2;a_1,a_2}``, the *unnormalized*
  signed sum over the permutations of the occupied indices and, independently, of the
  virtual ones;
* a residual is the projection ⟨Φ|H̄|0⟩ with the diagonal Fock terms included (a general,
  non-canonical Fock matrix is allowed), so the Jacobi update is ``t ← t + R / D`` with
  D1[a, i] = f_ii − f_aa and D2[a, b, i, j] = f_ii + f_jj − f_aa − f_bb.

==============  =========================================  ===================
name            equations                                  terms (E, R1, R2)
==============  =========================================  ===================
``ccsd_so``     spin-orbital CCSD                          3, 14, 31
``ccd_so``      spin-orbital CCD                           1, —, 10
``ccsdt_so``    spin-orbital CCSDT (derived)               3, 15, 37; R3 47
``ccsd_cs``     closed-shell CCSD                          5, 26, 55
``ccd_cs``      closed-shell CCD                           2, —, 20
``ccsd_cs_df``  closed-shell CCSD, density-fitted ``g``    5, 26, 55
``ccsd_so_df``  spin-orbital CCSD, density-fitted ``g``    5, 23, 58
``ccsd_uhf``    unrestricted CCSD in α/β spin blocks       8, 26+26, 43+86+43
``ccd_uhf``     unrestricted CCD in α/β spin blocks        3, —, 15+27+15
``ccsd_t_so``   spin-orbital (T) energy                    see below
``ccsd_t_cs``   closed-shell (T) energy                    see below
==============  =========================================  ===================

The (T) files (``ccsd_t_so``, ``ccsd_t_cs``) hold internal equations ``W``, ``V``, ``Z``
(the connected and disconnected triples numerators, and their combination divided by
the denominator) and the energy ``E`` = E(T); compile them with ``outputs=("E",)`` so
that no o³v³ intermediate is an output. They divide by the generated denominator
``Δ{a_1,a_2,a_3;i_1,i_2,i_3}``, built inside the program from the orbital energies
``ε`` (:mod:`sq_jax.forest.denominators`); :meth:`sq_jax.cc.drivers.CCRun.ccsd_t`
runs them, under a memory budget as loops over orbits of occupied block triples
(:mod:`sq_jax.cc.triples_orbits`, which rewrites them per orbit with
:func:`~sq_jax.cc.triples_orbits.orbit_equations`).

The term counts of ``ccsd_so`` are those of SeQuant's ``mbpt::CC{2}.t()``. The ``_cs``
files were obtained by integrating out the spin of ``ccsd_so`` (αβ projection) and
combining equal terms (``scripts/spin_trace_cs.py``); their R1/R2 term counts happen to
equal those of SeQuant's biorthogonal closed-shell CCSD, but the coefficients differ (a
different projection). ``ccsd_so_df`` is ``ccsd_so`` with each g-term split in two
(``scripts/write_so_df_equations.py``). The ``_uhf`` files are the spin blocks of
``ccsd_so``/``ccd_so`` (``scripts/spin_block_uhf.py``): indices carry their spin (``i↑``,
``a↓``), each tensor is the spin-orbital one restricted to the block its indices name
(same-spin ⟨pq‖rs⟩ and T2 antisymmetric, mixed ones written α first in bra and ket, where
⟨pα qβ‖rα sβ⟩ = ⟨pq|rs⟩), residuals ``R1a``, ``R1b``, ``R2aa``, ``R2ab``, ``R2bb``.
``ccsdt_so`` is derived, not typed: ``scripts/derive_cc_equations.py ccsdt`` writes it
from :func:`sq_jax.derive.cc_equations` (its R1/R2 have more terms than ``ccsd_so``'s:
those holding T3); the drivers apply its ``Â`` to the program's output
(:mod:`sq_jax.cc.antisymmetrizer`).

Example:
    >>> from sq_jax.cc.equations import available, load_equations
    >>> available()[:4]
    ('ccd_cs', 'ccd_so', 'ccd_uhf', 'ccsd_cs')
    >>> "ccsdt_so" in available()
    True
    >>> load_equations("ccd_so").splitlines()[0]
    'E = 1/4 g{i_1,i_2;a_1,a_2}:A * t{a_1,a_2;i_1,i_2}:A'
"""

from __future__ import annotations

from importlib import resources

from .._errors import InputError

__all__ = ["available", "choose_equations", "load_equations"]

_PACKAGE = "sq_jax.cc"
_FOLDER = "equations"


def _folder():
    return resources.files(_PACKAGE) / _FOLDER


def available() -> tuple[str, ...]:
    """Names of the shipped equation sets, sorted.

    Returns:
        The names accepted by :func:`load_equations`.

    Example:
        >>> "ccsd_so" in available()
        True
    """
    return tuple(
        sorted(p.name[: -len(".txt")] for p in _folder().iterdir() if p.name.endswith(".txt"))
    )


def load_equations(name: str) -> str:
    """The text of a shipped equation set, one equation per line, comments removed.

    Args:
        name: one of :func:`available`, e.g. ``"ccsd_so"``.

    Returns:
        The equations in SeQuant text syntax, ready for ``sq_jax.parse``.

    Raises:
        InputError: if ``name`` is not a shipped equation set.

    Example:
        >>> text = load_equations("ccsd_so")
        >>> [line.split(" = ")[0] for line in text.splitlines()]
        ['E', 'R1{a_1;i_1}', 'R2{a_1,a_2;i_1,i_2}']
    """
    names = available()
    if name not in names:
        raise InputError(
            f"Unknown equation set {name!r}; the shipped ones are {', '.join(names)}. "
            "Pass one of those names, or read your own file and call `sq_jax.parse`."
        )
    text = (_folder() / f"{name}.txt").read_text(encoding="utf-8")
    lines = [ln.strip() for ln in text.splitlines()]
    return "\n".join(ln for ln in lines if ln and not ln.startswith("#")) + "\n"


def choose_equations(
    method: str, *, closed_shell: bool, df: bool, open_shell: bool, name: str | None = None
) -> str:
    """The shipped equation set a run solves: ``name`` checked, or the route's default.

    Args:
        method: ``"ccsd"`` or ``"ccd"``.
        closed_shell: the spin-adapted route was asked for.
        df: density fitting was asked for.
        open_shell: the reference is UHF or ROHF.
        name: an equation set asked for by name, or ``None``.

    Returns:
        ``name`` when it is shipped and fits the other arguments; otherwise the default:
        ``{method}_uhf`` (spin-blocked unrestricted) for an open-shell reference without
        ``df``, else ``{method}_cs`` / ``{method}_so``, with ``_df`` when density fitted.

    Raises:
        InputError: no such set, or one that contradicts ``method``, ``closed_shell`` or
            ``df``.

    Example:
        >>> choose_equations("ccsd", closed_shell=False, df=False, open_shell=True)
        'ccsd_uhf'
        >>> choose_equations("ccd", closed_shell=False, df=False, open_shell=True, name="ccd_so")
        'ccd_so'
    """
    names = available()
    if name is None:
        if open_shell and not closed_shell and not df:
            return f"{method}_uhf"
        default = f"{method}_{'cs' if closed_shell else 'so'}{'_df' if df else ''}"
        if default not in names:
            raise InputError(
                f"no shipped equations for {method} with closed_shell={closed_shell}, df={df} "
                f"(available: {', '.join(names)})."
            )
        return default
    problems = []
    if name not in names:
        problems.append(f"equations={name!r} is not shipped")
    elif not name.startswith(f"{method}_"):
        problems.append(f"equations={name!r} are not {method} equations")
    if closed_shell and "_cs" not in name:
        problems.append("closed_shell=True asks for `_cs` equations")
    if df and not name.endswith("_df"):
        problems.append("df=True asks for `_df` equations")
    if problems:
        raise InputError(
            "cannot solve with the requested equations: "
            + "; ".join(problems)
            + f". Pass one of {', '.join(n for n in names if n.startswith(method))} "
            "(or leave equations=None for the reference's default)."
        )
    return name
