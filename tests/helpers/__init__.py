"""Shared test helpers: corpora of equations and schedules, independent evaluators.

* ``corpus``: equations with hand-written NumPy oracles.
* ``schedule_corpus``: forests, batch plans, random cases, invariants and a NumPy
  interpreter of ordered schedules.
* ``dense_eval``: a per-occurrence NumPy evaluator of forests and equations.
* ``hand_schedules``: hand-built rich/legality schedules of the acceptance cases
  (``docs/schedule.md``, "Acceptance cases").
"""
