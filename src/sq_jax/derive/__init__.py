"""Derive coupled-cluster equations of any excitation rank as SeQuant text.

Spin-orbital, single-reference second-quantised algebra: the normal-ordered Hamiltonian
``H_N = f_N + V_N``, cluster operators T1..Tn, the BCH expansion of ``e^{-T} H e^{T}``
(finite: ``(H e^T)_C`` with at most four T's), projection onto ⟨Φ_{i..}^{a..}| by
Wick's theorem (fully contracted, connected terms), canonicalisation and collection of
like terms, written in the conventions of ``sq_jax.cc``'s ``ccsd_so`` equations.

Example:
    >>> import sq_jax as sq
    >>> eqs = sq.parse(sq.derive.cc_equations("ccsd"))
    >>> [eq.name for eq in eqs]
    ['E', 'R1', 'R2']
"""

from .equations import Keep as Keep
from .equations import cc_equations as cc_equations
from .equations import derive_terms as derive_terms
from .equations import model_ranks as model_ranks
