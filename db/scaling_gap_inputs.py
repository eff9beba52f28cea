"""The inputs of "why not N×?" (``domain/results/scaling_gap.py``) read from the Store, for
the pages and the command line alike: the compare page's deck and ``python -m runner
export`` call :func:`explained_gaps`, so both explain a run from the same rows.

A run is explained from its latest attempt, as the compare page shows it: the points of
``POINTS_FOR_COMPARISON`` (which keeps the latest attempt's points), the telemetry
summaries of the run (``TELEMETRY_OF_RUN``; :func:`~domain.results.scaling_gap.scaling_points`
reads only those of the points it is given) and the latest attempt's start-up facts.  An
imported run has no attempt and no telemetry: its steps are still split, and what no
recorded signal explains stays "remaining".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pandas as pd

from db.store import Store
from domain.results.frames import points_frame
from domain.results.scaling_gap import GAP_COLUMNS, explain_run


def explained_gaps(store: Store, run_ids: Sequence[int]) -> dict[int, pd.DataFrame]:
    """run_id → :func:`~domain.results.scaling_gap.explain_run`'s frame (``GAP_COLUMNS``),
    for every run asked for, in the order asked (repeats once); a run without two measured
    concurrencies in one scenario, or without points, gets an empty frame."""
    wanted = list(dict.fromkeys(int(r) for r in run_ids))
    points = points_frame(p.as_dict() for p in store.points_for_comparison(wanted))
    out = {}
    for run_id in wanted:
        of_run = points[points["run_id"] == run_id] if not points.empty else points
        if of_run.empty:
            out[run_id] = pd.DataFrame(columns=list(GAP_COLUMNS))
            continue
        out[run_id] = explained_points(store, run_id, of_run, latest_startup_facts(store, run_id))
    return out


def explained_run(store: Store, run_id: int, startup_facts: dict[str, Any]) -> pd.DataFrame:
    """One run's frame from its compared points and telemetry, with the start-up facts the
    caller holds (the run page passes its attempt's, which keys its cache)."""
    points = points_frame(p.as_dict() for p in store.points_for_comparison([run_id]))
    return explained_points(store, run_id, points, startup_facts)


def explained_points(store: Store, run_id: int, points: pd.DataFrame, startup_facts: dict[str, Any]) -> pd.DataFrame:
    return explain_run(points, store.telemetry_of(run_id), {run_id: startup_facts})


def latest_startup_facts(store: Store, run_id: int) -> dict[str, Any]:
    """The start-up facts of the run's latest attempt (the one whose points are compared);
    empty for a run without attempts (imported) or whose attempt recorded none."""
    attempts = store.attempts_of(run_id)
    if not attempts:
        return {}
    facts = json.loads(max(attempts, key=lambda a: a.id).startup_facts or "{}")
    return facts if isinstance(facts, dict) else {}
