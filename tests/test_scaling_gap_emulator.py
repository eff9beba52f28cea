""""Why not N×?" on the emulator: four bottlenecks induced one at a time, each run end to end
(the runner daemon, the emulator, the real bench_serving client, a real DuckDB file), and
each must come out as the top cause of its concurrency step from what the run recorded:
the bench figures, the /metrics gauges and the start-up facts, as for a real server.

The emulator runs in slow motion (``BENCHDECK_EMULATE_TIME_SCALE=4``): every emulated
duration ×4, so the step loop keeps up on a busy CI host and bench_serving's ITL is the
step time, not the client's read bursts.  Throughput ratios are unchanged by the scale."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest

from db import Store
from domain.results.frames import points_frame
from domain.results.scaling_gap import explain_run, gap_sentences, top_cause
from tests.support.actors import operator
from tests.support.runner_harness import MARK, assert_nothing_left, run_burst, runner_env, small_plan

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def explained(store: Store, env: dict[str, str], server_args: dict[str, Any], input_len: int, output_len: int,
              concurrency: list[int]) -> pd.DataFrame:
    """Run one small sweep on the emulator and explain its steps from what the DB holds."""
    plan = small_plan(server_args=server_args, benchmark={
        "scenarios": [{"name": "s", "input_len": input_len, "output_len": output_len}],
        "concurrency": concurrency, "num_prompts": "3x", "warmup": "1x",
    })
    run_id, _ = store.submit_run(plan, submitted_by=operator("test"))
    renv = runner_env(env, BENCHDECK_EMULATE_TIME_SCALE="4")
    assert run_burst(renv, timeout=600) == 0
    assert store.get_run(run_id).status == "succeeded"
    assert_nothing_left(renv[MARK])
    points = points_frame(p.as_dict() for p in store.points_for_comparison([run_id]))
    facts = {run_id: json.loads(store.attempts_of(run_id)[-1].startup_facts or "{}")}
    return explain_run(points, store.telemetry_of(run_id), facts)


def step(frame: pd.DataFrame, c_from: int, c_to: int) -> dict[str, float]:
    rows = frame[(frame.c_from == c_from) & (frame.c_to == c_to)]
    assert rows.tok_s.sum() == pytest.approx(rows.gap.iloc[0])
    return dict(zip(rows.cause, rows.tok_s, strict=True))


def test_max_running_requests_4_at_c8_puts_the_running_cap_on_top(store: Store, env: dict[str, str]) -> None:
    frame = explained(store, env, {"max-running-requests": 4, "mem-fraction-static": 0.85}, 64, 64, [4, 8])
    assert top_cause(frame, 4, 8) == "running_cap_or_kv_pool", step(frame, 4, 8)
    keys = frame[frame.cause == "running_cap_or_kv_pool"].sentence_key
    assert list(keys) == ["scaling_gap.cause.running_cap_flag"]
    assert "ran at most 4 requests: --max-running-requests 4 caps the batch" in gap_sentences(frame, "en")[1]


def test_a_small_kv_pool_with_long_prompts_puts_the_kv_pool_on_top(store: Store, env: dict[str, str]) -> None:
    # 0.42 of the H200 leaves ~19k KV tokens after Qwen3-30B-A3B's weights: four 4,064-token
    # reservations (prompt + output) fit, eight do not.
    frame = explained(store, env, {"mem-fraction-static": 0.42}, 4000, 64, [4, 8])
    assert top_cause(frame, 4, 8) == "running_cap_or_kv_pool", step(frame, 4, 8)
    keys = frame[frame.cause == "running_cap_or_kv_pool"].sentence_key
    assert list(keys) == ["scaling_gap.cause.kv_pool"]


def test_cuda_graph_max_bs_decode_2_puts_eager_batches_on_top(store: Store, env: dict[str, str]) -> None:
    # 0.5.23's flag (0.5.9 spelled it --cuda-graph-max-bs): 1→2 stays in the graphs and gives the trend.
    frame = explained(store, env, {"cuda-graph-max-bs-decode": 2, "mem-fraction-static": 0.85}, 64, 128, [1, 2, 4])
    assert top_cause(frame, 2, 4) == "eager_batches", step(frame, 2, 4)
    assert step(frame, 1, 2)["eager_batches"] == 0


def test_a_tiny_chunked_prefill_with_4000_token_prompts_puts_interference_on_top(
        store: Store, env: dict[str, str]) -> None:
    frame = explained(store, env, {"chunked-prefill-size": 128, "mem-fraction-static": 0.85}, 4000, 128, [2, 4])
    assert top_cause(frame, 2, 4) == "prefill_interference", step(frame, 2, 4)
    keys = frame[frame.cause == "prefill_interference"].sentence_key
    assert list(keys) == ["scaling_gap.cause.prefill_chunked"]
