"""Scheduler benchmark: a 48-term CCSD-like system and a long synthetic sum.

Run: ``.venv/bin/python bench/bench_schedule.py [n_synthetic_terms]``. Prints the
times of parse+forest build (not the scheduler's) and of scheduling, against targets
(48 terms with two batched spaces: < 2 s; 1,000-term sum: < 10 s).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test helpers: tests/helpers

from tests.helpers import schedule_corpus as corpus

import sq_jax as sq
from sq_jax.plan import BatchPlan
from sq_jax.schedule import schedule_forest


def _bench(name: str, text: str, plan: BatchPlan, target: float) -> None:
    t0 = time.perf_counter()
    forest = sq.build_forest(sq.parse(text), corpus.SPACES)
    t1 = time.perf_counter()
    sf = schedule_forest(forest, plan)
    t2 = time.perf_counter()
    blocks = sf.dump().count("\n  ") and sf.dump().split("\n", 1)[0]
    status = "ok" if t2 - t1 < target else "SLOW"
    print(
        f"{name}: build {t1 - t0:.2f} s, schedule {t2 - t1:.2f} s (target < {target:.0f} s) "
        f"[{status}] — {len(sf.rich.cells)} values; {blocks}; peak {sf.peak.peak_bytes} B"
    )


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    text = corpus.ccsd_like_text()
    n_terms = text.count("+") + text.count("\n") + 1
    _bench(f"ccsd-like ({n_terms} terms, i ext + a con)", text, corpus.CCSD_PLAN, 2.0)
    plan = BatchPlan.of(
        {"i": {"batches": 2, "roles": "external"}, "a": {"batches": 2, "roles": "contracted"}}
    )
    _bench(f"synthetic sum ({n} terms)", corpus.synthetic_sum_text(n), plan, 10.0)


if __name__ == "__main__":
    main()
