"""Hand-built rich and legality schedules shared by the legality and ordered-schedule tests.

The acceptance cases (``AC-…``) are described in ``docs/schedule.md``, "Acceptance cases".
"""

from __future__ import annotations

from sq_jax.expr.nodes import Index
from sq_jax.schedule.legality import AxisClass, CellLegality, LegalitySchedule, LoopRole
from sq_jax.schedule.rich import OccurrenceRec, RichSchedule, ValueCell

_I1 = Index("i", 1)
_LL, _LC = LoopRole.LOOP_LOCAL, LoopRole.LOOP_CARRIED


def hand_ac12() -> tuple[RichSchedule, LegalitySchedule]:
    """AC-12's hand-built graph: Pu=4 reads {1, 3}; Wc=5 reads {0, 1, 2}."""
    occs = {
        0: [(0, 50)],
        1: [(10, 40), (11, 50)],
        2: [(20, 50)],
        3: [(30, 40)],
        4: [(40, 40)],
        5: [(50, 50)],
    }
    cells = []
    for v, pts in occs.items():
        recs = tuple(OccurrenceRec(p, c, carried=(_I1,), loop_slot=(0,)) for p, c in pts)
        first, last = min(p for p, _ in pts), max(c for _, c in pts)
        cells.append(
            ValueCell(v, 1000 + v, 1000 + v, False, (_I1,), (), (), (), first, last, -1, recs)
        )
    rich = RichSchedule(tuple(cells), 51)
    legs = []
    for v in range(6):
        role = _LC if v in (0, 5) else _LL
        legs.append(
            CellLegality(
                1000 + v,
                (_I1,),
                (AxisClass(_I1, role),),
                () if role is _LC else (_I1,),
                (_I1,) if role is _LC else (),
            )
        )
    return rich, LegalitySchedule(tuple(legs))
