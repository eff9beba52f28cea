"""The quality probe's pure parts: the plan section, the eval set, the intervals and the verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from domain.core.settings import Settings
from domain.plan.checks import check_plan
from domain.plan.eval_set import EvalSetError, is_correct, load_eval_set
from domain.plan.quality import EvalSet, PinnedAcceptance, probe_seconds
from domain.plan.run_plan import RunPlan
from domain.results.quality import compare_quality
from domain.results.quality_stats import mcnemar_exact, newcombe, paired_difference, wilson


def _plan(**extra: Any) -> RunPlan:
    return RunPlan.model_validate({"name": "q", "engine": "emulator", "model": "Qwen/Qwen3-30B-A3B",
                                   "gpu": {"type": "H200", "count": 1}, **extra})


def test_a_plan_without_a_quality_section_dumps_as_before() -> None:
    dumped = _plan().model_dump()
    assert "quality" not in dumped and "pinned_acceptance" not in dumped
    plan = _plan(quality={"prompts": 8, "output_len": 16})
    assert plan.model_dump()["quality"]["prompts"] == 8
    assert RunPlan.model_validate_json(plan.model_dump_json()) == plan


def test_quality_fields_are_checked_by_name() -> None:
    with pytest.raises(ValidationError, match="prompts"):
        _plan(quality={"prompts": 0})
    with pytest.raises(ValidationError, match="scorer"):
        _plan(quality={"eval": {"path": "/x", "scorer": "fuzzy"}})
    with pytest.raises(ValidationError, match="colour"):
        _plan(quality={"colour": 1})


def test_pinned_acceptance_is_sglangs_environment_and_part_of_the_configuration() -> None:
    pinned = PinnedAcceptance(accept_length=3.0)
    assert pinned.environment() == {"SGLANG_SIMULATE_ACC_LEN": "3", "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
                                    "SGLANG_SIMULATE_ACC_TOKEN_MODE": "fixed"}
    plain, pinned_plan = _plan(), _plan(pinned_acceptance={"accept_length": 3.0})
    assert plain.configuration_snapshot() != pinned_plan.configuration_snapshot()


def test_check_reads_the_eval_set_and_warns_about_speculation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "answer": "1"}\nnot json\n', encoding="utf-8")
    report = check_plan(_plan(quality={"eval": {"path": str(bad)}}), Settings(), "en")
    assert any("line 2" in e and "not JSON" in e for e in report.errors)
    spec = _plan(server_args={"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "/m"},
                 pinned_acceptance={"accept_length": 2.5})
    warnings = check_plan(spec, Settings(), "ja").warnings
    assert any("random-ids" in w for w in warnings)
    unpinned = check_plan(_plan(pinned_acceptance={"accept_length": 2.5}), Settings(), "en").warnings
    assert any("no speculative-algorithm" in w for w in unpinned)


def test_probe_minutes_grow_with_the_probe() -> None:
    small = probe_seconds(_plan(quality={"prompts": 8}).quality)
    large = probe_seconds(_plan(quality={"prompts": 64, "eval": {"path": "/x"}}).quality)
    assert probe_seconds(None) == 0 and 0 < small < large


def test_eval_set_items_and_scorers(tmp_path: Path) -> None:
    path = tmp_path / "eval.jsonl"
    lines = [{"id": "a", "prompt": "What is 2 + 2?", "answer": "4", "scorer": "numeric"},
             {"id": "b", "prompt": "Colour?", "answer": "^ ?blue", "scorer": "regex"},
             {"prompt": "Say yes", "answer": "yes"},
             {"prompt": "Pi?", "answer": 3.14, "scorer": "numeric", "tolerance": 0.01}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n", encoding="utf-8")
    items = load_eval_set(EvalSet(path=str(path))).items
    assert [i.id for i in items] == ["a", "b", "3", "4"]
    assert is_correct(items[0], " The answer is 4.") and not is_correct(items[0], " 5")
    assert is_correct(items[1], " blue sky") and not is_correct(items[1], " red")
    assert is_correct(items[2], " yes ") and not is_correct(items[2], "yes!")
    assert is_correct(items[3], "3.141") and not is_correct(items[3], "3.2")


@pytest.mark.parametrize(("content", "reason"), [
    ('{"prompt": "x"}', "answer"), ('{"prompt": "x", "answer": "1", "scorer": "regex"}\n'
                                    '{"prompt": "y", "answer": "(", "scorer": "regex"}', "line 2"),
    ('{"id": 1, "prompt": "x", "answer": "1"}\n{"id": 1, "prompt": "y", "answer": "2"}', "twice"),
    ('{"prompt": "x", "answer": "many", "scorer": "numeric"}', "not a number"), ("", "no items"),
])
def test_eval_set_refusals_name_the_line(tmp_path: Path, content: str, reason: str) -> None:
    path = tmp_path / "eval.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(EvalSetError, match=reason):
        load_eval_set(EvalSet(path=str(path)))


def test_intervals_match_published_examples() -> None:
    # Newcombe (1998): Wilson for 81/263 and his method 10 for 56/70 − 48/80.
    w = wilson(81, 263)
    assert (round(w.low, 4), round(w.high, 4)) == (0.2553, 0.3662)
    d = newcombe(56, 70, 48, 80)
    assert (round(d.low, 4), round(d.high, 4)) == (0.0524, 0.3339)
    assert mcnemar_exact(1, 9) == pytest.approx(0.021484375)
    assert mcnemar_exact(0, 0) == 1.0


def test_paired_difference_on_the_same_items() -> None:
    base = [True] * 150 + [False] * 50
    better = [True] * 170 + [False] * 30  # right on 20 more items
    diff = paired_difference(better, base)
    assert diff.candidate_only == 20 and diff.baseline_only == 0 and diff.interval.excludes_zero()
    shuffled = [True] * 140 + [False] * 10 + [True] * 10 + [False] * 40  # 10 gained, 10 lost
    assert not paired_difference(shuffled, base).interval.excludes_zero()
    with pytest.raises(ValueError, match="same"):
        paired_difference([True], [True, False])


def _record(outputs: list[tuple[list[int], list[int]]], **extra: Any) -> dict[str, Any]:
    def side(ids: list[int]) -> dict[str, Any]:
        return {"ids": ids, "logprobs": [-0.1] * len(ids)}
    return {"prompt_set": {"prompts": len(outputs)}, "model": "m", "emulated": True,
            "outputs": [{"alone": side(a), "batched": side(b)} for a, b in outputs], **extra}


def test_verdicts_from_records() -> None:
    same = [([1, 2, 3, 4], [1, 2, 3, 4])] * 40
    base = _record(same)
    assert compare_quality(2, _record(same), 1, base).verdict == "same"
    changed = _record([([1, 2, 9, 9], [1, 2, 9, 9])] * 20 + same[:20])
    result = compare_quality(3, changed, 1, base)
    assert result.verdict == "changed" and result.exact_match == 0.5 and result.first_divergence_median == 2
    assert compare_quality(4, None, 1, base).verdict == "not_measured"
    assert compare_quality(4, {**base, "not_measured": "no tokenizer"}, 1, base).verdict == "not_measured"
    other_set = {**_record(same), "prompt_set": {"prompts": 99}}
    assert compare_quality(5, other_set, 1, base).verdict == "cannot_tell"
    pinned = _record(same, pinned_acceptance={"accept_length": 3.0, "token_mode": "fixed"})
    assert compare_quality(6, pinned, 1, base).verdict == "cannot_tell"
    few = _record(same[:3])
    assert compare_quality(7, few, 1, _record(same[:3])).verdict == "cannot_tell"
    # A floor as wide as the difference: the difference is within it.
    noisy = _record([([1, 2, 3, 4], [1, 2, 9, 9])] * 20 + same[:20])
    assert compare_quality(8, noisy, 1, noisy).verdict == "same"


def test_a_study_requiring_quality_needs_the_probe() -> None:
    from domain.tune.study import Study

    base = _plan().model_dump(mode="json")
    study = {"name": "s", "base_plan": base, "objective": "output_tok_s_per_gpu", "budget": {"trials": 2},
             "quality": "same"}
    with pytest.raises(ValidationError, match="quality: section"):
        Study.model_validate(study)
    probed = {**study, "base_plan": {**base, "quality": {"prompts": 8}}}
    assert Study.model_validate(probed).quality == "same"


def test_faster_and_changed_reads_as_a_trade_off_in_both_languages() -> None:
    from domain.results.quality import QualityResult
    from domain.results.quality_view import quality_row

    changed = QualityResult(3, 1, "changed", "beyond the floor", exact_match=0.6, mean_abs_dlogprob=0.01,
                            dlogprob_method="teacher-forced", floor={"exact_match": 0.95})
    row = quality_row(changed, (12.0, True), "en")
    assert row.trade_off and "a trade-off, not an improvement" in row.line and "+12.0%" in row.line
    assert "2025" in row.line and "prohibited" in row.line
    assert "トレードオフ" in quality_row(changed, (12.0, True), "ja").line
    assert not quality_row(changed, (12.0, False), "en").trade_off  # not faster beyond the noise
    same = QualityResult(2, 1, "same", "within", exact_match=1.0, floor={"exact_match": 0.95})
    assert not quality_row(same, (12.0, True), "en").trade_off
