"""Synthetic runs for benchmarks at scale (``make bench``), generated inside DuckDB.

Labelled as such in the data: ``source = 'emulated'``, submitted by ``synthetic``.  Never
used by the app itself."""

from __future__ import annotations

from db.connection import transaction
from db.store import Store

_CONFIGS = """
INSERT INTO configurations (id, engine, engine_version, model, gpu_type, gpu_count, topology, server_args,
                            environment, parent_id, created_at, created_by, emulated)
SELECT 'synthetic-' || i, 'sglang', '0.5.23', 'Qwen/Qwen3-30B-A3B', 'H200', 1 + (i % 8), '{"kind": "aggregated"}',
       '{"max-running-requests": ' || (16 * (1 + i % 8)) || '}', '{}', NULL, now()::TIMESTAMP, 'synthetic', true
FROM range(?) t(i)
"""

_RUNS = """
INSERT INTO runs (id, configuration_id, name, plan, status, priority, source, submitted_by, submitted_at,
                  idempotency_key, total_points, tags)
SELECT nextval('run_ids'), 'synthetic-' || i, 'synthetic-' || i, '{}', 'succeeded', 0, 'emulated', 'synthetic',
       now()::TIMESTAMP - to_seconds(i), NULL, ?, '[]'
FROM range(?) t(i)
"""

_ATTEMPTS = """
INSERT INTO attempts (id, run_id, attempt_no, runner_id, status, claimed_at, heartbeat_at, lease_expires_at,
                      finished_at, startup_facts, host_info)
SELECT nextval('attempt_ids'), id, 1, 'synthetic', 'succeeded', submitted_at, submitted_at, submitted_at, submitted_at,
       '{"max_total_num_tokens": 674458}', '{"hostname": "synthetic"}'
FROM runs WHERE submitted_by = 'synthetic'
"""

_POINTS = """
INSERT INTO sweep_points
SELECT nextval('point_ids'), a.run_id, a.id, 's' || (p % 2), 1 << (p // 2), 0,
       '{"input_len": 128, "output_len": 128, "random_range_ratio": 1.0, "num_prompts": 10, "warmup": 2,
         "dataset": "random-ids", "seed": 42, "request_rate": "inf", "engine_version": "0.5.23"}',
       a.claimed_at, a.claimed_at, 10, 10, 30.0, 5.0, 500.0, 1000.0 + random() * 100, 1500.0, 0.95 * (1 << (p // 2)),
       30, 28, 40, 45, 60, 5, 5, 6, 6, 7, 5, 5, 6, 6, 8, 700, 690, 800, 850, 900,
       '{"completed": 10, "total_input_tokens": 1280, "total_output_tokens": 1280}', '{}'
FROM attempts a, range(?) t(p)
WHERE a.runner_id = 'synthetic'
"""

_TELEMETRY = """
INSERT INTO telemetry_summaries
SELECT p.id, p.attempt_id, m.source, NULL, m.metric, 30, random(), random(), random() + 1, NULL
FROM sweep_points p, (VALUES ('server', 'token_usage'), ('server', 'running_reqs'), ('gpu', 'util_pct'),
                              ('gpu', 'mem_used_gb'), ('gpu', 'clock_event_reasons')) m(source, metric)
WHERE p.attempt_id IN (SELECT id FROM attempts WHERE runner_id = 'synthetic')
"""


def fill(store: Store, *, runs: int, points_per_run: int) -> None:
    store.migrate()
    with transaction(store.db_path, lock_timeout_s=store.lock_timeout_s) as con:
        con.execute(_CONFIGS, [runs])
        con.execute(_RUNS, [points_per_run, runs])
        con.execute(_ATTEMPTS)
        con.execute(_POINTS, [points_per_run])
        con.execute(_TELEMETRY)
