"""Workloads end to end (issue 43): the runner, the emulator and the real bench_serving
client of the pinned SGLang release, sized down to what shows each behaviour; the
full-size figures come from ``python -m bench workloads`` (bench/workloads.py)."""

from __future__ import annotations

import json
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
