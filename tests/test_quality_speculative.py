"""Speculative decoding's caveats (issue 42): the acceptance conditions a point records, the
"acceptance not representative" badge, a random-ids run kept apart from a text-dataset run,
and a pinned acceptance named in the quality row and every export's first lines."""

from __future__ import annotations

from typing import Any

from domain.compare.comparability import comparability_matrix, comparability_summary
from domain.compare.comparison import build_comparison
from domain.plan.run_plan import RunPlan
from domain.render import tables
from domain.render.one_slide import quality_cells
from domain.results.quality import compare_quality
from domain.results.quality_view import quality_rows
from domain.results.speculative import speculative_conditions
from domain.results.validity import validity_badges
from tests.test_analysis import frame, point

SPEC = {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "/models/draft"}


def _plan(dataset: str = "random-ids", **extra: Any) -> RunPlan:
    bench: dict[str, Any] = {"dataset": dataset}
    if dataset != "random-ids":
        bench["dataset_path"] = "/data/sharegpt.json"
    return RunPlan.model_validate({"name": "s", "engine": "emulator", "model": "Qwen/Qwen3-30B-A3B",
                                   "gpu": {"type": "H200", "count": 1}, "server_args": SPEC,
                                   "benchmark": bench, **extra})


def test_points_record_the_acceptance_and_what_it_stands_for() -> None:
    record = {"accept_length": 2.7}
    assert speculative_conditions(_plan(), record) == {"accept_length": 2.7, "pinned_acceptance": None,
                                                       "acceptance_representative": False}
    assert speculative_conditions(_plan("sharegpt"), record)["acceptance_representative"] is True
    pinned = speculative_conditions(_plan("sharegpt", pinned_acceptance={"accept_length": 3}), record)
    assert pinned["pinned_acceptance"].startswith("SGLANG_SIMULATE_ACC_LEN=3")
    assert pinned["acceptance_representative"] is False
    plain = RunPlan.model_validate({"name": "p", "engine": "emulator", "model": "m", "gpu": {"type": "H200",
                                                                                           "count": 1}})
    assert speculative_conditions(plain, record) == {}


def test_random_ids_speculation_is_badged_and_not_comparable_with_text() -> None:
    random_ids = point(1, 1, server_args=SPEC, accept_length=1.3)
    text = point(2, 1, server_args=SPEC, dataset="sharegpt", accept_length=2.9)
    data = frame(random_ids, text)
    badges = validity_badges(data)
    flagged = badges[badges["badge"] == "acceptance_not_representative"]
    assert list(flagged["run_id"]) == [1] and list(flagged["detail"]) == ["random-ids"]
    summary = comparability_summary(comparability_matrix(data, 1, [2], frozenset())).set_index("run_id")
    assert summary.loc[2, "verdict"] == "not_comparable"
    pinned = point(3, 1, server_args=SPEC, dataset="sharegpt", pinned_acceptance="SGLANG_SIMULATE_ACC_LEN=3")
    assert "acceptance_not_representative" in set(validity_badges(frame(pinned))["badge"])


def test_a_pinned_run_is_named_in_the_quality_row_and_every_export() -> None:
    data = frame(point(1, 1), point(2, 1, server_args=SPEC))
    c = build_comparison(data, 1, [2], "en")
    label = "SGLANG_SIMULATE_ACC_LEN=3 (match-expected, fixed)"
    c.quality_rows = quality_rows(c.compare, [compare_quality(2, None, 1, None)], "en", {2: label})
    [row] = c.quality_rows
    assert row.verdict == "not_measured" and label in row.line
    assert any(label in line for line in tables.export_head(c))
    assert label in tables.comparison_csv(c).decode("utf-8-sig")
    assert label in tables.comparison_markdown(c).replace("\\", "")
    [slide_row] = quality_cells(c, [1, 2])
    assert any("pinned" in line for line in slide_row[2].lines)
