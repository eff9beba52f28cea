"""Watched configurations, the runner's side (issue 19): one pass per claim-loop pass.

``watch_tick`` does, in order:

1. **follow the host's SGLang version.**  When the version seen on this runner host differs
   from the one seen last time, every active watch on this host's GPU type is translated to
   the new version through the drift table (domain/flags/drift.py ``retarget``) and owes a
   re-run; a flag the new version has no counterpart for stops that watch instead, with the
   drift table's note (never a guess);
2. **the schedule** an administrator set (``schedule_hours``) makes a re-run owed;
3. **judge** every watched re-run that ended: its watched points against the series'
   baseline (domain/results/watch.py); a suspicious one owes a confirming re-run at once,
   so a regression is confirmed without anybody's click;
4. **queue** each owed re-run (on demand, version change, schedule, confirmation) at the
   watch's low priority, once the watch has nothing queued or running.  The idempotency key
   is the due mark, so a pass that dies between queueing and recording queues nothing twice.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from db import Store
from db.store import LostRace, utcnow
from db.watch_store import MeasurementRecord, SeriesRow, UnevaluatedRow, WatchRow, WatchStore
from domain.core.access import Actor, Role
from domain.core.settings import Settings
from domain.flags.drift import NoCounterpart, retarget
from domain.flags.issues import Translation
from domain.flags.schema import SchemaError
from domain.plan.quotas import QuotaExceeded
from domain.plan.run_plan import RunPlan
from domain.results.frames import points_frame
from domain.results.watch import (
    WATCH_METRICS,
    Measurement,
    WatchThresholds,
    judge,
    overall,
    series_break,
    summarise_repeats,
)
from runner.watch_quality import quality_records

log = logging.getLogger("benchdeck.runner.watch")
WATCH_TAG = "watch"
# Below every person's default (0): a watch's re-run waits for the work people queued.
DEFAULT_WATCH_PRIORITY = -50
# Topology.groups() role → the Topology field that holds the group.
_ROLE_FIELDS = {"replica": "replicas", "prefill": "prefill", "decode": "decode"}


@dataclass
class TickReport:
    """What one pass did (logged by the daemon, read by tests)."""

    version_change: tuple[str, str] | None = None
    retargeted: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)
    queued: list[tuple[int, int]] = field(default_factory=list)  # (watch id, run id)
    judged: list[tuple[int, int, str]] = field(default_factory=list)  # (watch id, run id, verdict)


def watch_tick(
    store: Store, settings: Settings, *, runner_id: str, gpu_type: str, host_version: str | None,
    now: datetime | None = None,
) -> TickReport:
    """One pass; the daemon calls it after each claim-loop pass.  ``host_version`` is the
    SGLang version this host serves (the installed one; in demo mode the one its emulator
    emulates, or None)."""
    watches = WatchStore(store)
    report = TickReport()
    _follow_version(watches, report, runner_id=runner_id, gpu_type=gpu_type, host_version=host_version)
    _mark_scheduled(watches, now or utcnow())
    thresholds = WatchThresholds.from_settings(settings)
    for row in watches.unevaluated():
        verdict = _judge_run(store, watches, row, thresholds)
        if verdict is not None:
            report.judged.append((row.watch_id, row.run_id, verdict))
    priority = int(getattr(settings, "watch_priority", DEFAULT_WATCH_PRIORITY))
    for watch in watches.active():
        if watch.due_reason is None or watches.pending_runs(watch.id):
            continue
        run_id = _queue(store, watches, watch, priority)
        if run_id is not None:
            report.queued.append((watch.id, run_id))
    return report


# --- 1. the host's version --------------------------------------------------------------


def _follow_version(watches: WatchStore, report: TickReport, *, runner_id: str, gpu_type: str,
                    host_version: str | None) -> None:
    previous = watches.note_host_version(runner_id, host_version)
    if previous is None or host_version is None:
        return
    report.version_change = (previous, host_version)
    log.info("SGLang on %s changed %s -> %s: re-measuring watched configurations", runner_id, previous,
             host_version)
    for watch in watches.active():
        plan = watch.plan()
        if plan.gpu.type != gpu_type or watch.current_version == host_version:
            continue
        outcome = translate(plan, watch.current_version, host_version)
        if isinstance(outcome, RunPlan):
            if watches.retarget(watch.id, plan=outcome, version=host_version, seen_version=watch.current_version):
                report.retargeted.append(watch.id)
        elif watches.stop_by_system(watch.id, by=runner_id, reason=json.dumps(outcome, ensure_ascii=False)):
            log.warning("watch %s stopped: %s", watch.id, outcome)
            report.stopped.append(watch.id)


def translate(plan: RunPlan, from_version: str | None, to_version: str) -> RunPlan | dict[str, Any]:
    """``plan`` with its flags (plan-wide and each topology role's) rewritten for
    ``to_version``, or why it cannot be: ``{"kind": "no_counterpart", "from", "to", "flags":
    [{"flag", "value", "note": {ja, en} | None}]}`` (the drift table's notes), or
    ``{"kind": "unknown_version", ...}`` when either version has no shipped flag schema."""
    source = from_version or to_version
    try:
        result = retarget(plan.server_args, source, to_version)
        roles = {role: retarget(group.server_args, source, to_version) for role, group in plan.topology.groups()}
    except SchemaError as exc:
        return {"kind": "unknown_version", "from": from_version, "to": to_version, "detail": str(exc)}
    missing = [*result.no_counterpart, *(m for r in roles.values() for m in r.no_counterpart)]
    if missing:
        return {"kind": "no_counterpart", "from": from_version, "to": to_version,
                "flags": [_missing(m) for m in missing]}
    data = plan.model_dump(mode="json")
    data["sglang_version"] = to_version
    data["server_args"] = result.args
    for role, translated in roles.items():
        data["topology"][_ROLE_FIELDS[role]]["server_args"] = translated.args
    return RunPlan.model_validate(data)


def _missing(m: NoCounterpart) -> dict[str, Any]:
    return {"flag": m.flag, "value": m.value, "note": dict(m.note) if m.note else None}


def translations_between(pinned: RunPlan, current: RunPlan) -> list[dict[str, Any]]:
    """The drift-table rewrites that turn the pinned flags into the current ones (recorded
    with each re-run, shown on the History page and in the report)."""
    if not pinned.sglang_version or not current.sglang_version or pinned.sglang_version == current.sglang_version:
        return []
    try:
        changes = retarget(pinned.server_args, pinned.sglang_version, current.sglang_version).changes
    except SchemaError:
        return []
    return [_change(c) for c in changes]


def _change(c: Translation) -> dict[str, Any]:
    return {"rule": c.rule, "remove": list(c.remove), "add": dict(c.add), "removed_values": dict(c.removed_values),
            "note": dict(c.note) if c.note else None}


# --- 2. the schedule ----------------------------------------------------------------------


def _mark_scheduled(watches: WatchStore, now: datetime) -> None:
    for watch in watches.active():
        if watch.schedule_hours is None or watch.due_reason is not None:
            continue
        last = watch.last_queued_at or watch.created_at
        if now - last >= timedelta(hours=watch.schedule_hours):
            watches.mark_due(watch.id, "schedule")


# --- 3. judging a re-run --------------------------------------------------------------------


def _judge_run(store: Store, watches: WatchStore, row: UnevaluatedRow, thresholds: WatchThresholds) -> str | None:
    """Judge one ended re-run; its overall verdict, or None when it measured nothing."""
    watch = watches.get(row.watch_id)
    if watch is None:
        return None
    if row.status != "succeeded":
        watches.record_evaluation(row.watch_id, row.run_id, outcome=row.status, series_no=None, series_reason=None,
                                  sglang_version=row.sglang_version, measurements=[], confirm=False)
        return None
    last = watches.last_measured(row.watch_id)
    run_ids = [row.run_id] + ([last[0]] if last else [])
    frame = points_frame(p.as_dict() for p in store.points_for_comparison(run_ids))
    series_no, reason = _series(frame, row.run_id, last)
    history = watches.series(row.watch_id, series_no) if reason is None else []
    version = _launched_version(frame, row.run_id) or row.sglang_version
    records = [_measure(frame, row.run_id, point, metric, history, thresholds)
               for point in watch.watched_points() for metric in WATCH_METRICS]
    records += quality_records(store, watch, row.run_id)
    confirm = any(r.verdict == "suspicious" for r in records)
    if not watches.record_evaluation(row.watch_id, row.run_id, outcome="measured", series_no=series_no,
                                     series_reason=reason, sglang_version=version, measurements=records,
                                     confirm=confirm):
        return None
    verdict = overall([r.verdict for r in records])
    log.info("watch %s: run %s under %s is %s", row.watch_id, row.run_id, version, verdict)
    return verdict


def _series(frame: pd.DataFrame, run_id: int, last: tuple[int, int] | None) -> tuple[int, dict[str, Any] | None]:
    """The series the run belongs to, and why a new one starts (None: it continues)."""
    if last is None:
        return 1, None
    previous_run, series_no = last
    if frame.empty or previous_run not in set(frame["run_id"]) or run_id not in set(frame["run_id"]):
        return series_no + 1, {"after_run": previous_run, "conditions": {"points": ["?", "?"]}}
    breaking = series_break(frame, previous_run, run_id)
    if breaking is None:
        return series_no, None
    return series_no + 1, {"after_run": previous_run, "conditions": {k: list(v) for k, v in breaking.items()}}


def _launched_version(frame: pd.DataFrame, run_id: int) -> str | None:
    if frame.empty:
        return None
    versions = frame.loc[frame["run_id"] == run_id, "engine_version"].dropna()
    return str(versions.iloc[0]) if not versions.empty else None


def _measure(frame: pd.DataFrame, run_id: int, point: tuple[str, int], metric: str, history: list[SeriesRow],
             thresholds: WatchThresholds) -> MeasurementRecord:
    scenario, concurrency = point
    if frame.empty:
        values: list[Any] = []
    else:
        rows = frame[(frame["run_id"] == run_id) & (frame["scenario"] == scenario)
                     & (frame["concurrency"] == concurrency)]
        values = list(rows[metric])
    repeats = summarise_repeats(values)
    past = [Measurement(h.run_id, h.value, h.spread, h.verdict, h.change)  # type: ignore[arg-type]
            for h in history if (h.scenario, h.concurrency, h.metric) == (scenario, concurrency, metric)]
    judged = judge(past, repeats, metric, thresholds)
    return MeasurementRecord(scenario, concurrency, metric, repeats.value, repeats.repeats, repeats.spread,
                             judged.baseline, judged.band_low, judged.band_high, judged.baseline_runs, judged.change,
                             judged.verdict)


# --- 4. queueing ----------------------------------------------------------------------------


def _queue(store: Store, watches: WatchStore, watch: WatchRow, priority: int) -> int | None:
    """Queue the owed re-run as the watch's creator would (the audit row says it was the watch)."""
    current = watch.plan()
    pinned = RunPlan.model_validate_json(watch.pinned_plan)
    data = current.model_dump(mode="json")
    data["priority"] = priority
    data["tags"] = list(dict.fromkeys([*current.tags, WATCH_TAG]))[:20]
    plan = RunPlan.model_validate(data)
    actor = Actor(watch.created_by, Role.OPERATOR, via="watch")
    key = f"watch:{watch.id}:{watch.due_reason}:{watch.due_since.isoformat() if watch.due_since else ''}"
    try:
        run_id, _created = store.submit_run(plan, submitted_by=actor, idempotency_key=key)
    except QuotaExceeded as exc:
        log.warning("watch %s: re-run not queued yet: %s", watch.id, exc)
        return None
    try:
        watches.record_queued(watch, run_id, translations=translations_between(pinned, current))
    except LostRace:
        return None
    log.info("watch %s: queued run %s (%s, SGLang %s)", watch.id, run_id, watch.due_reason, current.sglang_version)
    return run_id
