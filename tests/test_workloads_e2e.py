"""Workloads end to end (issue 43): the runner, the emulator and the real bench_serving
client of the pinned SGLang release, sized down to what shows each behaviour; the
full-size figures come from ``python -m bench workloads`` (bench/workloads.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from db import Store
from tests.support.actors import operator
from tests.support.runner_harness import MARK, assert_nothing_left, run_burst, runner_env, small_plan

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def _run(store: Store, env: dict[str, str], name: str, benchmark: dict[str, Any],
         server_args: dict[str, Any] | None = None) -> list[Any]:
    args = {"max-running-requests": 16, "mem-fraction-static": 0.85, **(server_args or {})}
    run_id, _ = store.submit_run(small_plan(name=name, benchmark=benchmark, server_args=args),
                                 submitted_by=operator("test"))
    renv = runner_env(env)
    assert run_burst(renv) == 0
    assert store.get_run(run_id).status == "succeeded", store.attempts_of(run_id)[-1].message
    assert_nothing_left(renv[MARK])
    return store.points_of(run_id)


def test_shared_prefixes_hit_the_radix_cache_and_lower_ttft(store: Store, env: dict[str, str]) -> None:
    """Two groups of eight prompts sharing a 1,024-token system prompt: with the radix cache
    the server reports most prompt tokens cached and TTFT drops; with
    --disable-radix-cache it reports none."""
    bench = {"concurrency": [4], "warmup": 1,
             "workload": {"kind": "shared-prefix", "groups": 2, "prompts_per_group": 8,
                          "system_prompt_len": 1024, "question_len": 64, "output_len": 8}}
    [on] = _run(store, env, "gsp-on", bench)
    [off] = _run(store, env, "gsp-off", bench, {"disable-radix-cache": True})
    on_report, off_report = (json.loads(p.raw_record)["cache_report"] for p in (on, off))
    assert on_report["cache_hit_rate_pct"] > 70 and off_report["total_cached_tokens"] == 0
    assert on.ttft_mean_ms * 2 < off.ttft_mean_ms
    conditions = json.loads(on.conditions)
    assert conditions["dataset"] == "generated-shared-prefix" and on.completed == 16
    assert conditions["workload"].startswith("shared-prefix groups=2 ")


def write_conversations(path: Path, conversations: int, turns: int, words: int) -> Path:
    """A multi-turn file in the client's agentic-trace format: each turn one user message."""
    vocabulary = "model server token request batch cache memory prefill decode throughput latency".split()
    chats = [[{"messages": [{"role": "user", "content": " ".join(
        vocabulary[(c * 7 + t * 3 + w) % len(vocabulary)] for w in range(words))}]} for t in range(turns)]
        for c in range(conversations)]
    path.write_text(json.dumps({"conversations": chats}), encoding="utf-8")
    return path


def write_trace(path: Path, lines: int, gap_ms: float) -> Path:
    rows = [{"timestamp": round(i * gap_ms + (i % 3) * gap_ms / 4, 3), "input_len": 64, "output_len": 8,
             "group": i % 2} for i in range(lines)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _per_turn(point: Any) -> dict[int, float]:
    checks = json.loads(point.conditions)["request_checks"]
    return {turn["turn"]: turn["mean_ttft_ms"] for turn in checks["per_turn"]}


def test_multi_turn_later_turns_reuse_the_cached_history(store: Store, env: dict[str, str], tmp_path: Path) -> None:
    """Eight conversations × three turns through the chat backend: with the radix cache the
    later turns find their history cached (lower TTFT than with --disable-radix-cache)."""
    chats = write_conversations(tmp_path / "chats.json", conversations=8, turns=3, words=300)
    bench = {"concurrency": [4], "warmup": 1, "num_prompts": 8,
             "workload": {"kind": "multi-turn", "path": str(chats), "output_len": 16}}
    [on] = _run(store, env, "chat-on", bench)
    [off] = _run(store, env, "chat-off", bench, {"disable-radix-cache": True})
    assert on.completed == off.completed == 24
    on_turns, off_turns = _per_turn(on), _per_turn(off)
    assert sorted(on_turns) == [1, 2, 3]
    assert on_turns[3] * 1.5 < off_turns[3] and on_turns[2] < off_turns[2]
    assert json.loads(on.raw_record)["cache_report"]["total_cached_tokens"] > 0


def test_a_trace_replays_at_its_own_timing(store: Store, env: dict[str, str], tmp_path: Path) -> None:
    """Thirty requests over three seconds: the client starts each within 5 % of the trace's
    span of its timestamp (its own clock)."""
    trace = write_trace(tmp_path / "trace.jsonl", lines=30, gap_ms=100)
    bench = {"concurrency": [32], "warmup": 1, "num_prompts": 30,
             "workload": {"kind": "trace", "path": str(trace)}}
    [point] = _run(store, env, "trace", bench)
    replay = json.loads(point.conditions)["request_checks"]["trace_replay"]
    assert point.completed == 30 and replay["compared"] is True
    assert replay["span_s"] == pytest.approx(2.9 + 0.025 * 2, abs=0.06)
    assert replay["max_lag_pct_of_span"] < 5, replay
