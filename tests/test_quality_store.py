"""Quality probes in a real DuckDB file: recorded by an attempt, fenced, read back; the
reference a probe scores; the tuner's "quality: same" constraint and the watch's quality
record judged from stored probes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from db import Store
from db.quality_inputs import trial_quality
from db.quality_store import QualityStore, quality_reference
from db.watch_store import WatchRow
from domain.core.states import AttemptStatus
from domain.plan.run_plan import RunPlan
from domain.tune.quality import with_quality
from domain.tune.score import TrialScore
from runner.watch_quality import quality_records
from tests.support.attempts import benchmarking_attempt

PROMPT_SET = {"input_len": 64, "output_len": 4, "prompts": 40, "seed": 1234}


def _record(outputs: list[list[int]], reference: int | None = None) -> dict[str, Any]:
    sides = [{"alone": {"ids": ids, "logprobs": [-0.1] * len(ids)},
              "batched": {"ids": ids, "logprobs": [-0.1] * len(ids)}} for ids in outputs]
    forced = None if reference is None else {"reference_run_id": reference, "scores": [
        {"logprobs": [-0.1] * 4, "top_ids": [1, 2, 3, 4]} for _ in outputs]}
    return {"prompt_set": PROMPT_SET, "model": "Qwen/Qwen3-30B-A3B", "emulated": True, "outputs": sides,
            "teacher_forced": forced}


def _probed_run(store: Store, record: dict[str, Any], succeed: bool = True) -> int:
    claim = benchmarking_attempt(store)
    assert QualityStore(store).record_probe(claim.attempt_id, "r1", record)
    if succeed:
        store.finish_attempt(claim.attempt_id, "r1", AttemptStatus.BENCHMARKING, AttemptStatus.SUCCEEDED)
    return claim.run_id


def _plan(**quality: Any) -> RunPlan:
    return RunPlan.model_validate({"name": "q", "engine": "emulator", "model": "Qwen/Qwen3-30B-A3B",
                                   "gpu": {"type": "H200", "count": 1},
                                   "quality": {"prompts": 40, "output_len": 4, **quality}})


def test_probes_are_recorded_fenced_and_read_back(store: Store) -> None:
    same = [[1, 2, 3, 4]] * 40
    first = _probed_run(store, _record(same))
    claim = benchmarking_attempt(store)
    store.finish_attempt(claim.attempt_id, "r1", AttemptStatus.BENCHMARKING, AttemptStatus.SUCCEEDED)
    assert not QualityStore(store).record_probe(claim.attempt_id, "r1", _record(same))  # a late write
    assert QualityStore(store).probes_of([first, claim.run_id]) == {first: _record(same)}
    later = _probed_run(store, _record(same, reference=first))
    reference = quality_reference(QualityStore(store), later + 1, _plan())
    assert reference is not None and reference[0] == first  # the first run of that prompt set
    assert quality_reference(QualityStore(store), later + 1, _plan(seed=9)) is None  # another prompt set
    assert quality_reference(QualityStore(store), later + 1, _plan(reference_run=later))[0] == later


def test_tuner_constraint_and_watch_record_from_stored_probes(store: Store) -> None:
    same = [[1, 2, 3, 4]] * 40
    first = _probed_run(store, _record(same))
    twin = _probed_run(store, _record(same, reference=first))
    changed = _probed_run(store, _record([[1, 2, 9, 9]] * 20 + same[:20], reference=first))
    assert trial_quality(store, first) is None  # the reference itself
    score = TrialScore(value=100.0, feasible=True, violations=(), max_concurrency=None)
    assert with_quality(score, trial_quality(store, twin)) == score
    judged = with_quality(score, trial_quality(store, changed))
    assert not judged.feasible and judged.value == 100.0 and "quality changed" in judged.violations[0]
    watch = WatchRow(1, first, "w", "{}", "{}", None, "[]", "alice", datetime(2026, 1, 1), "active", None, None, None,
                     None, None, None, None)
    [ok] = quality_records(store, watch, twin)
    [regression] = quality_records(store, watch, changed)
    assert (ok.metric, ok.verdict, ok.value) == ("quality_exact_match", "ok", 1.0)
    assert regression.verdict == "regression" and regression.value == 0.5 and regression.baseline_runs == [first]
    assert quality_records(store, watch, first) == []
