"""How imported points form runs.

Rule: points are taken in file order (problem lines are skipped and do not split a run);
a point joins the current run when its *run key* equals the run's, and starts a new run
otherwise.  The run key is everything that must be the same across one sweep: the record
format (which client), the server launch (``server_info`` fingerprint, when present), the
model the file names, and every condition except the per-point ones (``concurrency``,
``num_prompts``, ``warmup``).  So a file with c=1,2,4 at 128/128 and then c=1,2,4 at
4000/200 is two runs of three points.  A concurrency seen again inside one run is a
repeat (``repeat_idx`` 1, 2, ...), not a new run; the same key reappearing after a
different one starts a new run (runs are consecutive lines, never stitched together).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

from domain.importer.types import CONDITION_KEYS, DERIVED_KEYS, ImportedPoint, RunGroup

PER_POINT_KEYS = ("concurrency", "num_prompts", "warmup")
RUN_KEY_CONDITIONS = tuple(k for k in CONDITION_KEYS if k not in PER_POINT_KEYS and k not in DERIVED_KEYS)
UNKNOWN_SCENARIO = "imported"


def run_key(point: ImportedPoint) -> dict[str, Any]:
    experiment = point.file_facts.get("experiment_id")
    if experiment is not None:  # reports that name their run (benchdeck's llm-d export): one run each
        return {"record_format": point.record_format.family, "experiment_id": experiment}
    return {
        "record_format": point.record_format.family,
        "server": point.server.fingerprint if point.server is not None else None,
        "model": point.file_facts.get("model"),
        **{key: point.conditions.get(key) for key in RUN_KEY_CONDITIONS},
        "unknown": tuple(sorted(set(point.unknown) & set(RUN_KEY_CONDITIONS))),
    }


def scenario_label(conditions: dict[str, Any] | Any) -> str:
    """A name for the ISL/OSL pair (only a label: the lengths themselves are conditions)."""
    isl, osl = conditions.get("input_len"), conditions.get("output_len")
    return f"in{isl}-out{osl}" if isl is not None and osl is not None else UNKNOWN_SCENARIO


def _numbered(point: ImportedPoint, repeat_idx: int) -> ImportedPoint:
    """Numbered and labelled, unless the file names the point's scenario and repeat itself."""
    stated = point.conditions
    conditions = {**stated, "repeat_idx": repeat_idx if stated.get("repeat_idx") is None else stated["repeat_idx"],
                  "scenario": stated.get("scenario") or scenario_label(stated)}
    return dataclasses.replace(point, conditions=conditions)


def group_runs(points: Sequence[ImportedPoint], *, first_index: int = 0) -> tuple[RunGroup, ...]:
    """Runs of consecutive points with equal run keys; fills ``repeat_idx`` and ``scenario``."""
    runs: list[RunGroup] = []
    members: list[ImportedPoint] = []
    seen: Counter[Any] = Counter()
    key: dict[str, Any] | None = None
    for point in points:
        this_key = run_key(point)
        if this_key != key and members:
            runs.append(RunGroup(first_index + len(runs), tuple(members), key or {}))
            members, seen = [], Counter()
        key = this_key
        concurrency = point.conditions.get("concurrency")
        members.append(_numbered(point, seen[concurrency]))
        seen[concurrency] += 1
    if members:
        runs.append(RunGroup(first_index + len(runs), tuple(members), key or {}))
    return tuple(runs)
