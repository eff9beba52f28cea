"""A watched configuration end to end on the emulator (issue 19's "done when"): measured
under SGLang 0.5.20, then the runner host switches to 0.5.23 with a slowdown injected; the
re-run is queued by the runner's watch pass without a click, the first slower result is
"suspicious", the confirming one "regression", and the report names both versions and the
difference in the resolved args.

The runner is the real daemon (``python -m runner work --burst``, a subprocess) with the
emulator and the pinned bench_serving client.  The slowdown is the emulator's own time
scale (``BENCHDECK_EMULATE_TIME_SCALE``, emulator/flags.py), which the runner's children
inherit from its environment; the version a demo-mode host reports is
``BENCHDECK_EMULATED_SGLANG_VERSION``.  The daemon's claim loop runs the watch pass
(``runner.watch.watch_tick``) after each pass: the test only waits.  Three runs through the
real client are the least that says it (a baseline, a suspicious one, its confirmation);
each costs a server start and a warm client start."""

from __future__ import annotations

import json
import signal
import time

import pandas as pd
import pytest

from db import Store
from db.watch_store import WatchStore
from domain.plan.run_plan import RunPlan
from domain.render.regression_report import build_report, report_markdown, report_pptx
from tests.support.actors import operator
from tests.support.runner_harness import assert_nothing_left, run_burst, runner_env, small_plan, start_runner

# Three emulated runs through the real client: about 165 s on a busy 2-core host, more when busier.
pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(600)]

# Slow motion for both phases keeps a loaded CI host's scheduling jitter small against the
# emulated step times.  The "new version" runs 1.5x slower still (throughput -33 %): the test
# is about the chain of verdicts, not the smallest slowdown a watch can see, and between two
# runs minutes apart a loaded CI host moved throughput by more than the 5 points a -15 %
# slowdown leaves above the 10 % threshold (the confirming run then read "ok").
BASE_SCALE = 2.0
SLOWER = 1.5


def _wait_for_verdict(store: Store, watch_id: int, verdict: str, timeout: float = 420) -> int:
    """The run whose measurements first carry ``verdict``, once the runner's passes got there."""
    watches = WatchStore(store)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        history = watches.history(watch_id)
        runs = [h.run_id for h in history if h.verdict == verdict]
        if runs:
            return runs[0]
        # An "ok" re-run owes no confirmation: nothing more will be queued, so say it now
        # rather than after the timeout.
        judged_ok = [h.as_dict() for h in history if h.verdict == "ok" and h.metric == "output_throughput"]
        assert not judged_ok, f"waiting for {verdict}, a re-run was judged ok: {judged_ok}"
        failed = [r.run_id for r in watches.runs_of(watch_id) if r.status in ("failed", "cancelled")]
        assert not failed, f"watched re-runs failed: {failed}"
        time.sleep(1)
    raise AssertionError(f"no {verdict} within {timeout:.0f} s: {watches.runs_of(watch_id)}")


def _side(store: Store, run_id: int) -> dict[str, object]:
    run = store.get_run(run_id)
    [attempt] = store.attempts_of(run_id)
    return {"version": run.engine_version, "server_args": json.loads(run.server_args),
            "facts": json.loads(attempt.startup_facts)}


def test_a_version_upgrade_with_a_slowdown_is_suspicious_then_a_regression(store: Store, env: dict[str, str]) -> None:
    plan = small_plan(name="watched e2e", sglang_version="0.5.20",
                      server_args={"max-running-requests": 16, "cuda-graph-max-bs-decode": 8},
                      benchmark={"scenarios": [{"name": "short", "input_len": 64, "output_len": 32}],
                                 "concurrency": [4], "num_prompts": "3x", "warmup": "1x", "repeats": 3})
    origin, _ = store.submit_run(plan, submitted_by=operator("alice"))
    renv = runner_env(env, BENCHDECK_EMULATE_TIME_SCALE=str(BASE_SCALE), BENCHDECK_EMULATED_SGLANG_VERSION="0.5.20")
    assert run_burst(renv) == 0 and store.get_run(origin).status == "succeeded"
    watches = WatchStore(store)
    watch_id = watches.watch_run(origin, actor=operator("alice"), points=[("short", 4)])

    # The same host comes back with 0.5.23, slower.  Nobody clicks anything from here: the
    # runner's own passes translate the plan, queue the re-run, judge it, queue and judge
    # the confirmation.
    slower = dict(renv, BENCHDECK_EMULATE_TIME_SCALE=str(BASE_SCALE * SLOWER),
                  BENCHDECK_EMULATED_SGLANG_VERSION="0.5.23")
    runner = start_runner(slower)
    try:
        suspicious = _wait_for_verdict(store, watch_id, "suspicious")
        regression = _wait_for_verdict(store, watch_id, "regression")
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(timeout=60)
    runs = {r.run_id: r for r in watches.runs_of(watch_id)}
    assert [(r.reason, r.sglang_version) for r in runs.values()] == [
        ("origin", "0.5.20"), ("version_change", "0.5.23"), ("confirm", "0.5.23")]
    assert list(runs) == [origin, suspicious, regression]
    queued = store.get_run(suspicious)
    assert queued.priority < 0 and queued.engine_version == "0.5.23" and queued.submitted_by == "alice"
    assert json.loads(queued.server_args) == {"max-running-requests": 16, "cuda-graph-max-bs-decode": 8}
    assert RunPlan.model_validate_json(queued.plan).tags == ["watch"]

    history = pd.DataFrame([h.as_dict() for h in watches.history(watch_id)])
    throughput = history[history["metric"] == "output_throughput"].set_index("run_id")
    assert throughput["verdict"].to_dict() == {origin: "baseline", suspicious: "suspicious", regression: "regression"}
    # p99 latency moves by the same factor but is noisier: on a loaded host its band may hold
    # the change ("ok"); it never reads as an improvement.
    verdicts = history.groupby("run_id")["verdict"].agg(set).to_dict()
    assert verdicts[suspicious] <= {"suspicious", "ok"} and verdicts[regression] <= {"regression", "suspicious", "ok"}
    assert throughput.loc[regression, "change"] < -0.20  # measured, not assumed: about 1 - 1/1.5
    assert {r.run_id for r in watches.open_regressions()} == {regression}

    report = build_report(watch_name="watched e2e", history=history, before=_side(store, origin),
                          after=_side(store, regression))
    text = report_markdown(report, "en")
    assert "SGLang 0.5.20 → 0.5.23" in text and report.after_runs == (suspicious, regression)
    # The flags set are the same in both; what moved is 0.5.23's own defaults (shipped schemas).
    diff = report.args_diff.set_index("name")
    assert "cuda-graph-max-bs-decode" not in diff.index
    assert diff.loc["attn-dp-size", "before"] == "—" and diff.loc["attn-dp-size", "after"] == "1"
    assert "| attn-dp-size | — | 1 | version default |" in text
    assert report_pptx(report, "ja")[:2] == b"PK"
    assert_nothing_left(renv["BENCHDECK_TEST_MARK"])
