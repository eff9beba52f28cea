"""Every SQL statement benchdeck runs, named in one place.

State changes are guarded: ``... WHERE id = ? AND status = ? RETURNING``.  Zero rows back
means the row was not in the expected state (a lost race or an illegal move) and the
caller decides what that means.  The audit log only ever gets INSERTs.
"""

# --- configurations -----------------------------------------------------------------
INSERT_CONFIGURATION = """
INSERT OR IGNORE INTO configurations
    (id, engine, emulated, engine_version, model, gpu_type, gpu_count, topology, server_args, environment,
     parent_id, created_at, created_by)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""

# --- runs ---------------------------------------------------------------------------
FIND_RUN_BY_IDEMPOTENCY_KEY = "SELECT id FROM runs WHERE idempotency_key = ?"

COUNT_QUEUED_BY_USER = "SELECT count(*) FROM runs WHERE submitted_by = ? AND status = 'queued'"

INSERT_RUN = """
INSERT INTO runs (configuration_id, name, plan, status, priority, source, submitted_by, submitted_at,
                  idempotency_key, total_points, tags)
VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?)
RETURNING id
"""

MOVE_RUN = "UPDATE runs SET status = ? WHERE id = ? AND status = ? RETURNING id"

FINISH_RUN = "UPDATE runs SET status = ?, finished_at = ? WHERE id = ? AND status = ? RETURNING id"

REQUEST_CANCEL = """
UPDATE runs SET cancel_requested_by = ? WHERE id = ? AND status = 'running' RETURNING id
"""

SET_PRIORITY = "UPDATE runs SET priority = ? WHERE id = ? AND status = 'queued' RETURNING id"

# The runs this runner can serve, in claim order: highest priority first, then oldest.  Runs the
# runner cannot serve (wrong GPU type, too few GPUs, an SGLang or vLLM version it lacks) are
# skipped; emulated runs of either engine run anywhere.  An external run's GPUs are the
# endpoint's, not the runner's (declared, never launched here): any runner claims it and
# checks its own BENCHDECK_EXTERNAL_ENDPOINTS before a request (runner/external.py).
CLAIMABLE_RUNS = """
SELECT r.id, r.plan
FROM runs r JOIN configurations c ON c.id = r.configuration_id
WHERE r.status = 'queued'
  AND (c.engine = 'external' OR (c.gpu_type = ? AND c.gpu_count <= ?))
  AND (c.emulated OR c.engine = 'external'
       OR (c.engine = 'sglang' AND ? AND (c.engine_version IS NULL OR c.engine_version = ?))
       OR (c.engine = 'vllm' AND ? AND (c.engine_version IS NULL OR c.engine_version = ?)))
ORDER BY r.priority DESC, r.submitted_at, r.id
"""

# The first of them; the daemon walks them all only while a foreign process holds some of its GPUs.
NEXT_CLAIMABLE_RUN = CLAIMABLE_RUNS + "LIMIT 1\n"

RUN_PLAN = "SELECT plan FROM runs WHERE id = ?"

COUNT_ATTEMPTS = "SELECT count(*) FROM attempts WHERE run_id = ?"

# The attempts that count against BENCHDECK_MAX_ATTEMPTS: a runner's stop cancels one and requeues the run.
COUNT_SPENT_ATTEMPTS = "SELECT count(*) FROM attempts WHERE run_id = ? AND status <> 'cancelled'"

GET_RUN = """
SELECT r.id, r.name, r.status, r.priority, r.source, r.submitted_by, r.submitted_at, r.finished_at,
       r.total_points, r.cancel_requested_by, r.plan, r.configuration_id, c.engine, c.emulated, c.engine_version,
       c.model, c.gpu_type, c.gpu_count, c.server_args
FROM runs r JOIN configurations c ON c.id = r.configuration_id
WHERE r.id = ?
"""

# One row per run with its latest attempt: what the overview and the runs page show live.
# The newest runs first, then only their latest attempts and those attempts' point counts:
# counting every attempt's points before the LIMIT took 60 ms at 10,000 runs against 24 ms
# this way (bench.synthetic store, same rows; see the commit that made this change); the
# points joined to those attempts rather than filtered by ``IN (SELECT …)``: 20 → 15 ms.
LIST_RUNS = """
WITH top AS (SELECT * FROM runs ORDER BY id DESC LIMIT ?),
latest AS (
    SELECT a.* FROM attempts a JOIN top r ON a.run_id = r.id
    QUALIFY a.attempt_no = max(a.attempt_no) OVER (PARTITION BY a.run_id)
),
done AS (
    SELECT p.attempt_id, count(*) AS points_done, avg(epoch(p.finished_at) - epoch(p.started_at)) AS mean_point_s
    FROM latest l JOIN sweep_points p ON p.attempt_id = l.id GROUP BY p.attempt_id
)
SELECT r.id, r.name, r.status, r.priority, r.source, r.submitted_by, r.submitted_at, r.finished_at,
       r.total_points, r.cancel_requested_by, r.plan, r.tags,
       c.engine, c.emulated, c.engine_version, c.model, c.gpu_type, c.gpu_count,
       a.id AS attempt_id, a.attempt_no, a.status AS attempt_status, a.failure_kind, a.message,
       a.current_point, a.claimed_at AS started_at, a.runner_id,
       -- an import has no attempt: its points are all it has
       coalesce(d.points_done, CASE WHEN a.id IS NULL THEN (SELECT count(*) FROM sweep_points p WHERE p.run_id = r.id)
                END, 0) AS points_done, d.mean_point_s
FROM top r
JOIN configurations c ON c.id = r.configuration_id
LEFT JOIN latest a ON a.run_id = r.id
LEFT JOIN done d ON d.attempt_id = a.id
ORDER BY r.id DESC
"""

COUNT_RUNS_BY_STATUS = "SELECT status, count(*) FROM runs GROUP BY status"

# --- attempts -----------------------------------------------------------------------
INSERT_ATTEMPT = """
INSERT INTO attempts (run_id, attempt_no, runner_id, status, claimed_at, heartbeat_at, lease_expires_at)
VALUES (?, ?, ?, 'claimed', ?, ?, ?)
RETURNING id
"""

MOVE_ATTEMPT = """
UPDATE attempts SET status = ?, heartbeat_at = ?
WHERE id = ? AND runner_id = ? AND status = ?
RETURNING id
"""

FINISH_ATTEMPT = """
UPDATE attempts SET status = ?, failure_kind = ?, message = ?, finished_at = ?, log_tail = coalesce(?, log_tail)
WHERE id = ? AND runner_id = ? AND status = ?
RETURNING run_id
"""

# The heartbeat is the fence: a runner whose lease already expired (and whose attempt was
# failed as runner_lost) gets zero rows back and must stop writing.
HEARTBEAT = """
UPDATE attempts SET heartbeat_at = ?, lease_expires_at = ?
WHERE id = ? AND runner_id = ? AND status IN ('claimed', 'starting', 'benchmarking')
RETURNING id
"""

EXPIRED_ATTEMPTS = """
SELECT id, run_id, status, pgids, runner_id FROM attempts
WHERE status IN ('claimed', 'starting', 'benchmarking') AND lease_expires_at < ?
"""

ATTEMPTS_OF_RUN = """
SELECT id, attempt_no, runner_id, status, failure_kind, message, claimed_at, heartbeat_at, finished_at, pgids,
       server_argv, startup_facts, host_info, current_point, log_tail, raw_bench_output, bench_client, telemetry_dir
FROM attempts WHERE run_id = ? ORDER BY attempt_no
"""

# --- audit --------------------------------------------------------------------------
INSERT_AUDIT = """
INSERT INTO audit_log (logged_at, actor, action, run_id, details) VALUES (?, ?, ?, ?, ?)
"""

# Filters are optional: a NULL parameter matches every row (one query, no SQL built from input).
SEARCH_AUDIT = """
SELECT id, logged_at, actor, action, run_id, details FROM audit_log
WHERE (?::VARCHAR IS NULL OR action = ?)
  AND (?::VARCHAR IS NULL OR actor ILIKE '%' || ? || '%')
  AND (?::BIGINT IS NULL OR run_id = ?)
  AND (?::TIMESTAMP IS NULL OR logged_at >= ?)
ORDER BY id DESC LIMIT ?
"""

AUDIT_ACTIONS = "SELECT DISTINCT action FROM audit_log ORDER BY action"

RUN_OWNER = "SELECT submitted_by, source FROM runs WHERE id = ?"

TABLE_NAMES = "SELECT table_name FROM information_schema.tables ORDER BY table_name"

# --- the runner's writes during an attempt (all fenced by runner id and active status) -----
RECORD_CHILDREN = """
UPDATE attempts SET pgids = ?
WHERE id = ? AND runner_id = ? AND status IN ('claimed', 'starting', 'benchmarking')
RETURNING id
"""

ATTEMPT_PGIDS = "SELECT pgids FROM attempts WHERE id = ?"

# The process groups of a runner's attempts still under way: its own GPU users, not foreign ones.
LIVE_PGIDS_OF_RUNNER = """
SELECT pgids FROM attempts WHERE runner_id = ? AND status IN ('claimed', 'starting', 'benchmarking')
"""

RECORD_STARTUP = """
UPDATE attempts SET server_argv = ?, startup_facts = ?, host_info = ?, bench_client = ?, telemetry_dir = ?
WHERE id = ? AND runner_id = ? AND status IN ('claimed', 'starting', 'benchmarking')
RETURNING id
"""

SET_CURRENT_POINT = """
UPDATE attempts SET current_point = ?
WHERE id = ? AND runner_id = ? AND status = 'benchmarking'
RETURNING id
"""

RECORD_RAW_OUTPUT = """
UPDATE attempts SET raw_bench_output = ?
WHERE id = ? AND runner_id = ? AND status IN ('starting', 'benchmarking')
RETURNING id
"""

# The fence for results: a point is inserted only while its attempt is benchmarking under
# this runner, so a late writer whose attempt was failed as runner_lost inserts nothing.
ATTEMPT_IS_BENCHMARKING = """
SELECT run_id FROM attempts WHERE id = ? AND runner_id = ? AND status = 'benchmarking'
"""

INSERT_POINT = """
INSERT INTO sweep_points (run_id, attempt_id, scenario, concurrency, repeat_idx, conditions, started_at, finished_at,
    completed, requested, duration_s, request_throughput, input_throughput, output_throughput, total_throughput,
    achieved_concurrency,
    ttft_mean_ms, ttft_median_ms, ttft_p90_ms, ttft_p95_ms, ttft_p99_ms,
    tpot_mean_ms, tpot_median_ms, tpot_p90_ms, tpot_p95_ms, tpot_p99_ms,
    itl_mean_ms, itl_median_ms, itl_p90_ms, itl_p95_ms, itl_p99_ms,
    e2e_mean_ms, e2e_median_ms, e2e_p90_ms, e2e_p95_ms, e2e_p99_ms,
    raw_record, timing)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
        ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
RETURNING id
"""

INSERT_TELEMETRY_SUMMARY = """
INSERT INTO telemetry_summaries (point_id, attempt_id, source, device, metric, n, mean, p50, max, note)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""

INSERT_REQUEST_SAMPLES = "INSERT INTO request_samples (point_id, path, requests) VALUES (?, ?, ?)"

REQUEST_SAMPLE_PATHS = """
SELECT point_id, path FROM request_samples WHERE point_id IN (SELECT unnest(?::BIGINT[]))
"""

CANCEL_REQUESTED_BY = "SELECT cancel_requested_by FROM runs WHERE id = ?"

POINTS_OF_RUN = """
SELECT * FROM sweep_points WHERE run_id = ? ORDER BY scenario, concurrency, repeat_idx
"""

TELEMETRY_OF_RUN = """
SELECT t.* FROM telemetry_summaries t JOIN sweep_points p ON p.id = t.point_id WHERE p.run_id = ?
"""

# --- runners and schemas -------------------------------------------------------------
UPSERT_RUNNER = """
INSERT INTO runners (id, host, gpu_type, gpu_count, sglang_version, started_at, heartbeat_at, healthy,
                     unhealthy_reason, info)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET host = excluded.host, gpu_type = excluded.gpu_type, gpu_count = excluded.gpu_count,
    sglang_version = excluded.sglang_version, started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at,
    healthy = excluded.healthy, unhealthy_reason = excluded.unhealthy_reason, info = excluded.info
"""

RUNNER_HEARTBEAT = """
UPDATE runners SET heartbeat_at = ?, healthy = ?, unhealthy_reason = ? WHERE id = ? RETURNING id
"""

LIST_RUNNERS = "SELECT * FROM runners ORDER BY id"

RUNNER_INFO = "SELECT info FROM runners WHERE id = ?"

SET_RUNNER_INFO = "UPDATE runners SET info = ? WHERE id = ?"

UPSERT_SCHEMA = """
INSERT INTO sglang_schemas (version, host, extracted_at, schema) VALUES (?, ?, ?, ?)
ON CONFLICT (version, host) DO UPDATE SET extracted_at = excluded.extracted_at, schema = excluded.schema
"""

LIST_SCHEMA_VERSIONS = "SELECT version, host, extracted_at FROM sglang_schemas ORDER BY version"

# The newest dump of each version (one per version whichever host dumped it last).
HOST_SCHEMAS = """
SELECT version, schema FROM sglang_schemas
QUALIFY row_number() OVER (PARTITION BY version ORDER BY extracted_at DESC) = 1
"""

# --- comparisons -----------------------------------------------------------------------
# Points of the given runs, from each run's latest attempt only (a retried run's earlier,
# failed attempt keeps its rows but is not part of the result), with the telemetry
# summaries the compare page shows pivoted into columns.  Imported points have no attempt.
POINTS_FOR_COMPARISON = """
WITH sel AS (
    SELECT unnest(?::BIGINT[]) AS run_id
), latest AS (
    SELECT run_id, max(id) AS attempt_id FROM attempts WHERE run_id IN (SELECT run_id FROM sel) GROUP BY run_id
), pts AS (
    SELECT p.* FROM sweep_points p LEFT JOIN latest l ON l.run_id = p.run_id
    WHERE p.run_id IN (SELECT run_id FROM sel) AND (l.attempt_id IS NULL OR p.attempt_id = l.attempt_id)
), tele AS (
    SELECT point_id,
           avg(mean) FILTER (WHERE source = 'gpu' AND metric = 'util_pct') AS gpu_util_mean,
           max(max) FILTER (WHERE source = 'gpu' AND metric = 'mem_used_gb') AS gpu_mem_peak_gb,
           max(max) FILTER (WHERE source = 'server' AND metric = 'token_usage') AS kv_usage_peak,
           max(max) FILTER (WHERE source = 'gpu' AND metric = 'clock_event_reasons') AS gpu_clock_event_reasons_max,
           -- NVML's clock-event reasons are a bitmask: a point throttled when any bit was set on any
           -- GPU at any sample, so the per-device value (the OR over samples) is OR-ed across devices.
           bit_or(CAST(max AS UBIGINT)) FILTER (WHERE source = 'gpu' AND metric = 'clock_event_reasons')
               AS gpu_clock_event_reasons_any,
           -- The server's own token counts over the measured window (counter deltas of /metrics).
           sum(max) FILTER (WHERE source LIKE 'server%' AND metric = 'prompt_tokens_delta') AS server_prompt_tokens,
           sum(max) FILTER (WHERE source LIKE 'server%' AND metric = 'generation_tokens_delta')
               AS server_generation_tokens,
           -- The run's GPUs' board power (the sampler reads only them): the sum of their window
           -- means is the power of the point; the fewest samples of a GPU says the sample rate.
           sum(mean) FILTER (WHERE source = 'gpu' AND metric = 'power_w') AS gpu_power_w_sum,
           min(n) FILTER (WHERE source = 'gpu' AND metric = 'power_w') AS gpu_power_samples,
           avg(mean) FILTER (WHERE source = 'gpu' AND metric = 'util_idle_share') AS gpu_idle_share,
           -- A server's 'unavailable' row (an external endpoint without /metrics) is not the GPU's.
           bool_or(source = 'gpu' AND metric = 'unavailable') AS gpu_unavailable
    FROM telemetry_summaries WHERE point_id IN (SELECT id FROM pts) GROUP BY point_id
)
SELECT p.*, r.name AS run_name, r.source, r.tags, r.submitted_at, c.engine, c.engine_version, c.model,
       c.gpu_type, c.gpu_count, c.topology, c.server_args, c.environment,
       a.startup_facts, a.host_info,
       t.gpu_util_mean, t.gpu_mem_peak_gb, t.kv_usage_peak, t.gpu_clock_event_reasons_max,
       t.gpu_clock_event_reasons_any, t.server_prompt_tokens, t.server_generation_tokens, t.gpu_unavailable,
       t.gpu_power_w_sum, t.gpu_power_samples, t.gpu_idle_share
FROM pts p
JOIN runs r ON r.id = p.run_id
JOIN configurations c ON c.id = r.configuration_id
LEFT JOIN attempts a ON a.id = p.attempt_id
LEFT JOIN tele t ON t.point_id = p.id
ORDER BY p.run_id, p.scenario, p.concurrency, p.repeat_idx
"""

# The run picker of the compare page: finished runs, newest first, filterable.
_FINISHED_RUNS = """
SELECT r.id, r.name, r.status, r.source, r.submitted_at, r.tags, c.model, c.gpu_type, c.gpu_count, c.engine,
       c.engine_version
FROM runs r JOIN configurations c ON c.id = r.configuration_id
WHERE r.status IN ('succeeded', 'failed', 'cancelled')
"""
# The picker's filters, in SQL so that a page reads the few rows it lists, not every run
# (10,000 runs as Python rows: 0.2 s a fresh visit).  Named parameters (db/store.py
# ``PickerFilters``); an empty list or a NULL filters nothing.  A model or GPU is matched by
# the label the picker shows for it (``PICKER_CHOICES``); the GPU's ("<count>×<type>", "None"
# for an unknown part) is spelled out in both.
_PICKER_FILTERS = """
  AND (len($models::VARCHAR[]) = 0 OR list_contains($models::VARCHAR[], coalesce(c.model, $unknown)))
  AND (len($gpus::VARCHAR[]) = 0
       OR list_contains($gpus::VARCHAR[],
                        coalesce(c.gpu_count::VARCHAR, 'None') || '×' || coalesce(c.gpu_type, 'None')))
  AND (len($sources::VARCHAR[]) = 0 OR list_contains($sources::VARCHAR[], r.source))
  AND (len($statuses::VARCHAR[]) = 0 OR list_contains($statuses::VARCHAR[], r.status))
  AND contains(r.tags::VARCHAR, $tag)
  AND ($since::DATE IS NULL OR r.submitted_at::DATE >= $since::DATE)
"""
RUNS_FOR_PICKER = _FINISHED_RUNS + _PICKER_FILTERS + "ORDER BY r.id DESC\nLIMIT $limit\n"
_COUNT_FINISHED_RUNS = """
SELECT count(*) FROM runs r JOIN configurations c ON c.id = r.configuration_id
WHERE r.status IN ('succeeded', 'failed', 'cancelled')
"""
COUNT_PICKER_RUNS = _COUNT_FINISHED_RUNS + _PICKER_FILTERS
# What the picker's model and GPU filters offer: every label among the finished runs.
PICKER_CHOICES = """
SELECT DISTINCT coalesce(c.model, $unknown) AS model,
       coalesce(c.gpu_count::VARCHAR, 'None') || '×' || coalesce(c.gpu_type, 'None') AS gpu
FROM runs r JOIN configurations c ON c.id = r.configuration_id
WHERE r.status IN ('succeeded', 'failed', 'cancelled')
"""
# The same rows for runs named by id (a shared link's runs, older than the picker's newest).
RUNS_FOR_PICKER_BY_ID = _FINISHED_RUNS + "AND list_contains(?::BIGINT[], r.id)\nORDER BY r.id DESC\n"

# --- imports ---------------------------------------------------------------------------
FIND_IMPORT_BY_HASH = "SELECT id, run_ids FROM imports WHERE sha256 = ?"

INSERT_IMPORTED_RUN = """
INSERT INTO runs (configuration_id, name, plan, status, priority, source, submitted_by, submitted_at,
                  idempotency_key, total_points, finished_at, tags)
VALUES (?, ?, '{}', 'succeeded', 0, ?, ?, ?, ?, ?, ?, '[]')
RETURNING id
"""

INSERT_IMPORT = """
INSERT INTO imports (sha256, file_name, kind, imported_by, imported_at, run_ids, problems)
VALUES (?, ?, ?, ?, ?, ?, ?)
RETURNING id
"""

LIST_IMPORTS = "SELECT * FROM imports ORDER BY id DESC LIMIT ?"

GET_CONFIGURATION = "SELECT * FROM configurations WHERE id = ?"

# Configurations are immutable: filling in an imported run's unknowns makes a new version
# (parent_id = the old one) and moves the run to it, guarded by the version it had.
REPOINT_RUN = """
UPDATE runs SET configuration_id = ? WHERE id = ? AND configuration_id = ? AND source = 'imported' RETURNING id
"""
