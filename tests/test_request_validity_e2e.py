"""Over-long requests end to end: ``runner check`` refuses the plan; a run queued past the
check (straight into the Store, as a plan from before the check would be) has the
emulator refuse those requests as SGLang does, and the point counts them as failed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from db import Store
from domain.plan.plan_io import dump_plan
from domain.plan.run_plan import RunPlan
from domain.results.frames import points_frame
from domain.results.validity import validity_badges
from tests.conftest import ROOT
from tests.support.actors import operator
from tests.support.runner_harness import MARK, assert_nothing_left, run_burst, runner_env, small_plan

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

CONTEXT = 256
# With seed 42 and range ratio 0.5, bench_serving draws ISL 96…192 + OSL 64…128: 8 of the
# 16 requests exceed 256 tokens, and request 0 (the warmup's) fits with 240.
SCENARIO = {"name": "tight", "input_len": 192, "output_len": 128}


def _over_long_plan() -> RunPlan:
    return small_plan(server_args={"max-running-requests": 16, "mem-fraction-static": 0.85,
                                   "context-length": CONTEXT},
                      benchmark={"scenarios": [SCENARIO], "concurrency": [4], "num_prompts": "4x", "warmup": "1x",
                                 "random_range_ratio": 0.5})


def test_runner_check_refuses_a_scenario_longer_than_the_context(env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(dump_plan(_over_long_plan()), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "runner", "check", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert f"does not fit the context length {CONTEXT} (--context-length)" in done.stdout + done.stderr


def test_refused_requests_count_as_failed_and_badge_the_point(store: Store, env: dict[str, str]) -> None:
    run_id, _ = store.submit_run(_over_long_plan(), submitted_by=operator("test"))
    renv = runner_env(env)
    assert run_burst(renv) == 0
    assert store.get_run(run_id).status == "succeeded"
    [point] = store.points_of(run_id)
    assert (point.completed, point.requested) == (8, 16)  # the 8 refusals are not successes
    conditions = json.loads(point.conditions)
    assert conditions["request_checks"]["empty_completions"] == 8  # the warmup's request fits
    assert conditions["request_checks"]["prompt_starts_moved"] == 0 and conditions["request_checks"]["prompts"] == 16
    tokenizer = conditions["tokenizer"]
    assert tokenizer["source"] == "toy" and tokenizer["vocab_size"] > 20_000 and len(tokenizer["sha256"]) == 12
    assert json.loads(point.raw_record)["completed"] == 8  # the client's own record says so too
    frame = points_frame(p.as_dict() for p in store.points_for_comparison([run_id]))
    badges = validity_badges(frame)
    assert ("incomplete", "8/16") in set(zip(badges["badge"], badges["detail"], strict=True))
    assert_nothing_left(renv[MARK])
