"""A finished bench_serving run written as the runner writes its points (shared by the llm-d tests)."""

from __future__ import annotations

from datetime import datetime

from db import RunnerCapabilities, Store
from domain.core.states import AttemptStatus
from domain.plan.run_plan import point_conditions
from domain.results.bench_record import METRIC_COLUMNS
from tests.plans import minimal_plan
from tests.support.actors import operator


def bench_serving_run(store: Store, *, scenarios: list[dict[str, object]], concurrency: list[int],
                       engine: str = "sglang", seed: float = 1.0, range_ratio: float = 1.0) -> int:
    """A finished run of the real plan model with distinct figures per point (like the runner writes)."""
    plan = minimal_plan(name=f"bs-{seed}", engine=engine, model="Qwen/Qwen3-235B-A22B-FP8",
                        gpu={"type": "H200", "count": 8}, server_args={"tp-size": 8, "mem-fraction-static": 0.85},
                        benchmark={"scenarios": scenarios, "concurrency": concurrency, "num_prompts": "40x",
                                   "warmup": "2x", "repeats": 1, "random_range_ratio": range_ratio})
    run_id, _ = store.submit_run(plan, submitted_by=operator("t"))
    claim = store.claim_next(RunnerCapabilities("r", "H200", 8, "0.5.23" if engine == "sglang" else None), lease_s=60)
    store.move_attempt(claim.attempt_id, "r", AttemptStatus.CLAIMED, AttemptStatus.STARTING)
    store.move_attempt(claim.attempt_id, "r", AttemptStatus.STARTING, AttemptStatus.BENCHMARKING)
    for index, point in enumerate(claim.plan.points()):
        metrics: dict[str, float | None] = {column: seed * (index + 1) * (1.0 + 0.013 * k)
                                            for k, column in enumerate(METRIC_COLUMNS)}
        metrics.update(completed=point.num_prompts - 1, requested=point.num_prompts, tpot_p95_ms=None)
        conditions = {**point_conditions(claim.plan, point), "bench_tool": "sglang.bench_serving",
                      "bench_version": "0.5.23", "engine_version": "0.5.23" if engine == "sglang" else None}
        store.insert_point(claim.attempt_id, "r", scenario=point.scenario.name, concurrency=point.concurrency,
                           repeat_idx=point.repeat_idx, conditions=conditions, started_at=datetime.now(),
                           finished_at=datetime.now(), metrics=metrics, raw_record={}, telemetry=[])
    store.finish_attempt(claim.attempt_id, "r", AttemptStatus.BENCHMARKING, AttemptStatus.SUCCEEDED)
    return run_id
