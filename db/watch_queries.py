"""The SQL of watched configurations (issue 19), named as in ``db/queries.py``.

State changes are guarded the same way: ``UPDATE … WHERE id = ? AND state = 'active'
RETURNING id``; zero rows back means someone else stopped the watch first.
"""

INSERT_WATCH = """
INSERT INTO watches (origin_run_id, name, pinned_plan, current_plan, current_version, points, created_by,
                     created_at, state, schedule_hours)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'active', NULL)
RETURNING id
"""

ACTIVE_WATCH_OF_RUN = "SELECT id FROM watches WHERE origin_run_id = ? AND state = 'active'"

# Every column: WatchRow (db/watch_store.py) has exactly the table's columns.
GET_WATCH = "SELECT * FROM watches WHERE id = ?"

LIST_WATCHES = "SELECT * FROM watches ORDER BY state, id DESC"

WATCHES_OF_RUN = """
SELECT * FROM watches
WHERE origin_run_id = ? OR id IN (SELECT watch_id FROM watch_runs WHERE run_id = ?)
ORDER BY id DESC
"""

ACTIVE_WATCHES = "SELECT * FROM watches WHERE state = 'active' ORDER BY id"

STOP_WATCH = """
UPDATE watches SET state = 'stopped', stopped_reason = ?, stopped_by = ?, stopped_at = ?, due_reason = NULL
WHERE id = ? AND state = 'active'
RETURNING id
"""

# A re-run owed: the first reason stands until it is queued (a later one adds nothing).
MARK_DUE = """
UPDATE watches SET due_reason = ?, due_since = ?
WHERE id = ? AND state = 'active' AND due_reason IS NULL
RETURNING id
"""

# Follow a new SGLang version: the translated plan, and a re-run owed for it.
RETARGET_WATCH = """
UPDATE watches SET current_plan = ?, current_version = ?, due_reason = 'version_change', due_since = ?
WHERE id = ? AND state = 'active' AND current_version IS NOT DISTINCT FROM ?
RETURNING id
"""

SET_SCHEDULE = "UPDATE watches SET schedule_hours = ? WHERE id = ? AND state = 'active' RETURNING id"

# Queued: the owed re-run is no longer owed, guarded by the due mark that was seen.
CLEAR_DUE = """
UPDATE watches SET due_reason = NULL, due_since = NULL, last_queued_at = ?
WHERE id = ? AND state = 'active' AND due_since = ?
RETURNING id
"""

INSERT_WATCH_RUN = """
INSERT OR IGNORE INTO watch_runs (watch_id, run_id, reason, sglang_version, translations, queued_at)
VALUES (?, ?, ?, ?, ?, ?)
"""

# A watch's re-runs still queued or running: a new one waits until they are done.
PENDING_WATCH_RUNS = """
SELECT wr.run_id FROM watch_runs wr JOIN runs r ON r.id = wr.run_id
WHERE wr.watch_id = ? AND r.status IN ('queued', 'running')
"""

# Re-runs whose run ended and that nobody evaluated yet, oldest first.
UNEVALUATED_RUNS = """
SELECT wr.watch_id, wr.run_id, wr.reason, wr.sglang_version, r.status
FROM watch_runs wr JOIN runs r ON r.id = wr.run_id
WHERE wr.evaluated_at IS NULL AND r.status IN ('succeeded', 'failed', 'cancelled')
ORDER BY wr.watch_id, wr.queued_at, wr.run_id
"""

FINISH_EVALUATION = """
UPDATE watch_runs SET evaluated_at = ?, outcome = ?, series_no = ?, series_reason = ?
WHERE watch_id = ? AND run_id = ? AND evaluated_at IS NULL
RETURNING run_id
"""

INSERT_MEASUREMENT = """
INSERT INTO watch_measurements (watch_id, run_id, scenario, concurrency, metric, sglang_version, measured_at,
    series_no, value, repeats, spread, baseline, band_low, band_high, baseline_runs, change, verdict)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""

# The last measured re-run of a watch (its series, to continue or break).
LAST_MEASURED_RUN = """
SELECT run_id, series_no FROM watch_runs
WHERE watch_id = ? AND outcome = 'measured'
ORDER BY evaluated_at DESC, run_id DESC LIMIT 1
"""

SERIES_MEASUREMENTS = """
SELECT run_id, scenario, concurrency, metric, value, spread, verdict, change FROM watch_measurements
WHERE watch_id = ? AND series_no = ?
ORDER BY measured_at, run_id
"""

# Every measurement of a watch, for the History page: one row per run, point and metric.
WATCH_HISTORY = """
SELECT m.run_id, m.scenario, m.concurrency, m.metric, m.sglang_version, m.measured_at, m.series_no, m.value,
       m.repeats, m.spread, m.baseline, m.band_low, m.band_high, m.baseline_runs, m.change, m.verdict,
       wr.reason, wr.translations, wr.series_reason
FROM watch_measurements m JOIN watch_runs wr ON wr.watch_id = m.watch_id AND wr.run_id = m.run_id
WHERE m.watch_id = ?
ORDER BY m.measured_at, m.run_id, m.scenario, m.concurrency, m.metric
"""

WATCH_RUNS_OF = """
SELECT wr.run_id, wr.reason, wr.sglang_version, wr.translations, wr.queued_at, wr.evaluated_at, wr.outcome,
       wr.series_no, wr.series_reason, r.status
FROM watch_runs wr JOIN runs r ON r.id = wr.run_id
WHERE wr.watch_id = ?
ORDER BY wr.queued_at, wr.run_id
"""

# Open regressions: active watches whose latest measured re-run holds a regression.
OPEN_REGRESSIONS = """
WITH latest AS (
    SELECT watch_id, max(measured_at) AS measured_at FROM watch_measurements GROUP BY watch_id
)
SELECT w.id AS watch_id, w.name, m.run_id, m.scenario, m.concurrency, m.metric, m.sglang_version, m.measured_at,
       m.value, m.baseline, m.change
FROM watch_measurements m
JOIN latest l ON l.watch_id = m.watch_id AND l.measured_at = m.measured_at
JOIN watches w ON w.id = m.watch_id
WHERE m.verdict = 'regression' AND w.state = 'active'
ORDER BY m.measured_at DESC, w.id, m.scenario, m.concurrency, m.metric
"""

HOST_VERSION = "SELECT sglang_version FROM watch_hosts WHERE runner_id = ?"

UPSERT_HOST_VERSION = """
INSERT INTO watch_hosts (runner_id, sglang_version, seen_at) VALUES (?, ?, ?)
ON CONFLICT (runner_id) DO UPDATE SET sglang_version = excluded.sglang_version, seen_at = excluded.seen_at
"""
