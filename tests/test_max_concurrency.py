"""The highest concurrency one configuration holds under an SLA (issue 17): the bisection
(domain/tune/bisect.py) against a dense scan of the shared estimator, and ``python -m
runner max-concurrency`` through the real queue, runner and bench client."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from db import Store
from domain.estimate.estimator import estimate_point, setup_for
from domain.plan.plan_io import dump_plan
from domain.tune.bisect import bisect_max_concurrency
from runner.max_concurrency import TAG
from tests.conftest import ROOT
from tests.support.runner_harness import runner_env, small_plan, start_runner

ISL, OSL, HIGH = 1000, 1000, 256


def _tpot_margin(limit_ms: float) -> tuple[object, dict[int, float]]:
    """The estimator's TPOT margin at every concurrency 1..HIGH for Qwen3-30B-A3B on 1×H200."""
    setup = setup_for("Qwen/Qwen3-30B-A3B", "H200", {"max-running-requests": 256})
    dense = {c: (limit_ms - estimate_point(setup, ISL, OSL, c).tpot_ms) / limit_ms for c in range(1, HIGH + 1)}
    return setup, dense


def test_bisection_finds_the_boundary_of_a_dense_scan_in_log2_probes() -> None:
    _, probe_all = _tpot_margin(1.0)
    # A limit between the estimate at c=1 and at c=HIGH, so the boundary lies inside the range.
    tpots = {c: 1.0 - m for c, m in probe_all.items()}  # tpot / 1 ms
    limit = (tpots[1] + tpots[HIGH]) / 2
    _, dense = _tpot_margin(limit)
    boundary = max(c for c, m in dense.items() if m > 0 and all(dense[k] > 0 for k in range(1, c + 1)))
    probes: list[int] = []

    def probe(c: int) -> float:
        probes.append(c)
        return dense[c]

    result = bisect_max_concurrency(probe, 1, HIGH)
    assert max(result.passed) == boundary and min(c for c in result.failed if c > boundary) == boundary + 1
    assert result.max_concurrency is not None and boundary <= result.max_concurrency <= boundary + 1
    assert len(probes) <= math.ceil(math.log2(HIGH)) + 2, probes
    assert not result.at_least


def test_a_coarser_resolution_spends_fewer_probes() -> None:
    _, dense = _tpot_margin(1.0)
    limit = sorted(1.0 - m for m in dense.values())[HIGH // 2]
    _, dense = _tpot_margin(limit)
    fine = bisect_max_concurrency(dense.__getitem__, 1, HIGH)
    coarse = bisect_max_concurrency(dense.__getitem__, 1, HIGH, resolution=16)
    assert len(coarse.margins) < len(fine.margins)
    assert coarse.max_concurrency is not None and fine.max_concurrency is not None
    assert max(coarse.passed) <= fine.max_concurrency <= min(c for c in coarse.failed if c > max(coarse.passed))


@pytest.mark.parametrize(("margins", "expected", "at_least"), [
    ({1: -0.2}, None, False),                      # the lowest fails: no answer
    ({1: 0.5, 8: 0.1}, 8.0, True),                 # everything passes: at least the range's end
    ({1: 0.5, 8: math.nan, 4: 0.25, 6: 0.05, 7: math.nan}, 6.0, False),  # nothing measured counts as a miss
])
def test_edges(margins: dict[int, float], expected: float | None, at_least: bool) -> None:
    result = bisect_max_concurrency(lambda c: margins[c], 1, 8)
    assert result.max_concurrency == (None if expected is None else pytest.approx(expected))
    assert result.at_least is at_least


def test_a_range_that_cannot_be_bisected_is_refused() -> None:
    with pytest.raises(ValueError, match="low <= high"):
        bisect_max_concurrency(lambda c: 1.0, 8, 4)


def _max_concurrency(env: dict[str, str], plan_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", "max-concurrency", str(plan_file), "--json",
                           "--poll", "0.3", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=420)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_command_queues_one_run_per_probe_and_reuses_them(store: Store, env: dict[str, str],
                                                              tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(dump_plan(small_plan(name="probe me")), encoding="utf-8")
    renv = runner_env(env)
    runner = start_runner(renv)  # a daemon: the probes are queued one after another
    try:
        first = _max_concurrency(renv, plan_file, "--tpot-p99-ms", "10000", "--low", "1", "--high", "2")
    finally:
        runner.terminate()
        runner.wait(timeout=60)
    assert first.returncode == 0, first.stderr
    outcome = json.loads(first.stdout)
    assert outcome["at_least"] is True and outcome["max_concurrency"] == 2.0
    probes = {p["concurrency"]: p for p in outcome["probes"]}
    assert set(probes) == {1, 2} and all(p["passed"] and p["margin"] > 0 for p in probes.values())
    runs = [r for r in store.list_runs() if TAG in json.loads(r.tags)]
    assert sorted(r.id for r in runs) == sorted(p["run_id"] for p in probes.values())
    assert all(r.status == "succeeded" and r.total_points == 1 for r in runs)

    # The same command again: the answer is read from the same runs; nothing is queued.
    again = _max_concurrency(renv, plan_file, "--tpot-p99-ms", "10000", "--low", "1", "--high", "2")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == outcome
    assert len(store.list_runs()) == len(runs)


def test_an_sla_without_a_limit_is_refused_in_the_users_language(env: dict[str, str], tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(dump_plan(small_plan()), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "runner", "--lang", "ja", "max-concurrency", str(plan_file)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "--tpot-p99-ms" in done.stderr and "指定してください" in done.stderr
