"""A rough run-duration ETA for a plan, shown before it is queued and in the queue.

It is deliberately simple and labelled "rough" wherever it is shown: each point sends
``num_prompts + warmup`` requests, ``concurrency`` at a time, and each request takes a
prefill of ISL tokens plus OSL decode steps.  The default rates are an H200 running
Qwen3-30B-A3B at moderate batch (the emulator's own model gives about 5 ms per decode
step at batch 1 and 12 ms at batch 8); a real 235B server is slower, so real runs update
the ETA from their measured points instead (``eta_from_progress``).
"""

from __future__ import annotations

import math

from domain.plan.quality import probe_seconds
from domain.plan.run_plan import Point, RunPlan

DECODE_STEP_S = 0.010  # per output token at moderate batch
PREFILL_TOKEN_S = 0.00005  # per input token
POINT_OVERHEAD_S = 2.0  # flush, hand-over to the client
# Server start + client imports.  vLLM's start (weights, profiling, CUDA graphs) is taken
# as SGLang's: nothing here measured it.
STARTUP_S = {"emulator": 15.0, "sglang": 600.0, "vllm-emulator": 15.0, "vllm": 600.0,
             "external": 0.0}  # external: already up, nothing is launched


def point_seconds(point: Point) -> float:
    waves = math.ceil((point.num_prompts + point.warmup) / point.concurrency)
    per_request = point.scenario.input_len * PREFILL_TOKEN_S + point.scenario.output_len * DECODE_STEP_S
    return waves * per_request + POINT_OVERHEAD_S


def plan_seconds(plan: RunPlan) -> float:
    """Start-up, every point, and the quality probe when the plan asks for one."""
    return STARTUP_S[plan.engine_label] + sum(point_seconds(p) for p in plan.points()) + probe_seconds(plan.quality)


def eta_from_progress(plan: RunPlan, points_done: int, mean_point_s: float | None) -> float:
    """Seconds left for a running sweep: measured mean per point once there is one."""
    remaining = plan.points()[points_done:]
    if mean_point_s is not None and points_done > 0:
        return mean_point_s * len(remaining)
    return sum(point_seconds(p) for p in remaining)
