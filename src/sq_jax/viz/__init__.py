"""Pictures of a schedule: the static memory profile and the loop nest.

matplotlib is optional: it is imported only when a plot is drawn, and a missing
matplotlib raises an :class:`ImportError` that says how to install it. The plots never
touch ``pyplot`` (no global figure state, no interactive backend); they build a
:class:`matplotlib.figure.Figure` directly, which Jupyter shows inline and
``Figure.savefig`` writes with the Agg renderer.

* :func:`plot_peak_profile` — live intermediate bytes along the static points, the
  binding (peak) point and the values live there;
* :func:`plot_loop_nest` — the ordered schedule's blocks as nested boxes.

Example:
    >>> import sq_jax as sq
    >>> from sq_jax.plan import BatchPlan
    >>> from sq_jax.schedule import schedule_forest
    >>> forest = sq.build_forest(sq.parse("R{a1;i1} = f{a1;a2} t{a2;i1}"), sq.Spaces(i=4, a=6))
    >>> sf = schedule_forest(forest, BatchPlan.of({"i": 2}))
    >>> len(plot_peak_profile(sf).axes), len(plot_loop_nest(sf).axes)
    (1, 1)
"""

from .loop_nest import plot_loop_nest as plot_loop_nest
from .peak import plot_peak_profile as plot_peak_profile

__all__ = ["plot_loop_nest", "plot_peak_profile"]
