"""The regression watch judges quality too (issue 42): a watched plan with a ``quality:``
section probes every re-run, and the re-run's outputs are judged against the watch's
origin run (domain/results/quality.py).  One record a re-run, beside the speed ones:
metric ``quality_exact_match``, its value the exact-match share, its band the floor's;
"changed" is a ``regression`` (the outputs moved since the watched run), "same" ``ok``,
"cannot tell" ``suspicious``; a re-run without a probe adds nothing."""

from __future__ import annotations

from db.quality_store import QualityStore
from db.store import Store
from db.watch_store import MeasurementRecord, WatchRow
from domain.results.quality import compare_quality

QUALITY_POINT = ("quality", 0)
QUALITY_METRIC = "quality_exact_match"
WATCH_VERDICT = {"changed": "regression", "same": "ok", "cannot_tell": "suspicious"}


def quality_records(store: Store, watch: WatchRow, run_id: int) -> list[MeasurementRecord]:
    probes = QualityStore(store).probes_of([watch.origin_run_id, run_id])
    if run_id == watch.origin_run_id or run_id not in probes:
        return []
    result = compare_quality(run_id, probes[run_id], watch.origin_run_id, probes.get(watch.origin_run_id))
    if result.verdict not in WATCH_VERDICT:
        return []
    floor = (result.floor or {}).get("exact_match")
    change = None if result.exact_match is None or floor is None else result.exact_match - floor
    return [MeasurementRecord(QUALITY_POINT[0], QUALITY_POINT[1], QUALITY_METRIC, result.exact_match, 1, None,
                              floor, floor, 1.0, [watch.origin_run_id], change, WATCH_VERDICT[result.verdict])]
