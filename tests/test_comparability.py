"""The comparability key and the checklist matrix: match / differ / unknown / intended,
point-level conditions over the common points, summary lines, risk columns, flag diff."""

from __future__ import annotations

from typing import Any

import pandas as pd

from domain.core.i18n import catalogue
from domain.results.comparability import (
    CONDITION_NAMES,
    CONDITIONS,
    FAMILIES,
    comparability_key,
    comparability_matrix,
    comparability_summary,
    config_diff,
    key_summary,
    risk_columns,
    state_text,
    summary_line,
)
from tests.test_analysis import frame, point


def sweep(run_id: int, concurrencies: tuple[int, ...] = (1, 2, 4), **overrides: Any) -> list[dict[str, Any]]:
    return [point(run_id, c, **overrides) for c in concurrencies]


def states(matrix: pd.DataFrame, run_id: int) -> dict[str, str]:
    rows = matrix[matrix["run_id"] == run_id]
    return {c: s for c, s in zip(rows["condition"], rows["state"], strict=True) if s != "match"}


def check(*rows: dict[str, Any], intended: frozenset[str] = frozenset()) -> tuple[pd.DataFrame, pd.DataFrame]:
    data = frame(*rows)
    run_ids = list(dict.fromkeys(data["run_id"]))
    matrix = comparability_matrix(data, 1, run_ids, intended)
    return matrix, comparability_summary(matrix).set_index("run_id")


def test_the_key_of_a_point_groups_every_condition_by_family() -> None:
    key = comparability_key(point(1, 8, dtype="fp8", request_rate="inf"))
    assert list(key) == list(FAMILIES)
    assert key["model"] == {"model": "Qwen/Qwen3-30B-A3B", "model_revision": "main", "dtype": "fp8",
                            "load_format": "auto"}
    assert key["hardware"] == {"gpu_type": "H200", "gpu_count": 1, "network": "none"}
    assert key["workload"]["concurrency"] == 8 and key["workload"]["request_rate"] == float("inf")
    assert key["source"] == {"source": "measured"}


def test_runs_differing_only_in_a_server_flag_are_comparable() -> None:
    matrix, summary = check(*sweep(1), *sweep(2, server_args={"max-running-requests": 128}))
    assert states(matrix, 2) == {}
    assert len(matrix) == len(CONDITIONS) and set(matrix["condition"]) == set(CONDITION_NAMES)
    assert summary.loc[2, "verdict"] == "comparable"
    assert summary_line(summary.loc[2], "en") == "comparable"


def test_a_different_osl_is_the_one_mismatch_and_is_fatal() -> None:
    matrix, summary = check(*sweep(1), *sweep(2, server_args={"x": 1}), *sweep(3, output_len=256))
    assert states(matrix, 2) == {} and states(matrix, 3) == {"output_len": "differ"}
    row = matrix[(matrix["run_id"] == 3) & (matrix["condition"] == "output_len")].iloc[0]
    assert (row["baseline_value"], row["value"], row["family"], bool(row["fatal"])) == ("128", "256", "workload", True)
    assert summary.loc[3, "verdict"] == "not_comparable" and summary.loc[3, "fatal"] == ["output_len"]
    assert summary_line(summary.loc[3], "en") == "not comparable: different output length (OSL)"
    assert state_text(row, "en") == "✗ 128 → 256" and state_text(matrix.iloc[0], "ja") == "✓"
    assert "出力長 (OSL)" in summary_line(summary.loc[3], "ja")


def test_a_different_model_is_not_comparable_and_other_differences_are_listed_too() -> None:
    _, summary = check(*sweep(1), *sweep(2, model="meta-llama/Llama-3.1-8B", seed=7))
    assert summary.loc[2, "fatal"] == ["model"] and summary.loc[2, "differing"] == ["model", "seed"]
    assert summary_line(summary.loc[2], "en") == "not comparable: different model; also differs: seed"


def test_a_non_fatal_difference_leaves_the_run_comparable_except() -> None:
    matrix, summary = check(*sweep(1), *sweep(2, seed=7, gpu_count=2))
    assert states(matrix, 2) == {"seed": "differ", "gpu_count": "differ"}
    assert summary.loc[2, "verdict"] == "comparable_except"
    assert summary_line(summary.loc[2], "en") == "comparable except: GPU count, seed"


def test_unknown_is_its_own_state_never_a_match() -> None:
    imported = sweep(2, source="measured", model=None, bench_version=None)
    matrix, summary = check(*sweep(1), *imported)
    assert states(matrix, 2) == {"model": "unknown", "bench_version": "unknown"}
    row = matrix[(matrix["run_id"] == 2) & (matrix["condition"] == "model")].iloc[0]
    assert row["value"] == "?"
    assert summary.loc[2, "verdict"] == "comparable_except" and summary.loc[2, "fatal"] == []
    assert summary_line(summary.loc[2], "en") == "comparable except: unknown: model, bench version"


def test_intended_differences_are_shown_as_such_and_are_not_failures() -> None:
    matrix, summary = check(*sweep(1), *sweep(2, dtype="fp8"), intended=frozenset({"dtype"}))
    assert states(matrix, 2) == {"dtype": "intended"}
    assert summary.loc[2, "verdict"] == "comparable" and summary.loc[2, "intended"] == ["dtype"]
    # Marking a condition that matches changes nothing.
    matrix, _ = check(*sweep(1), *sweep(2), intended=frozenset({"seed"}))
    assert states(matrix, 2) == {}


def test_equal_values_in_different_spellings_match() -> None:
    matrix, _ = check(*sweep(1, request_rate="inf", input_len=128),
                      *sweep(2, request_rate=float("inf"), input_len=128.0))
    assert states(matrix, 2) == {}


def test_point_conditions_compare_over_the_common_points_and_the_point_sets_too() -> None:
    base = sweep(1, (1, 2, 4))
    other = [point(2, 2), point(2, 4, num_prompts=999), point(2, 8)]  # differs at 4 only; 1 missing, 8 extra
    matrix, summary = check(*base, *other)
    assert states(matrix, 2) == {"points": "differ", "num_prompts": "differ"}
    points_row = matrix[(matrix["run_id"] == 2) & (matrix["condition"] == "points")].iloc[0]
    assert (points_row["baseline_value"], points_row["value"]) == ("short@1", "short@8")
    assert not points_row["fatal"] and summary.loc[2, "verdict"] == "comparable_except"


def test_no_common_point_at_all_is_not_comparable() -> None:
    matrix, summary = check(*sweep(1, (1, 2)), *sweep(2, (4, 8)))
    assert states(matrix, 2)["points"] == "differ" and states(matrix, 2)["input_len"] == "unknown"
    assert summary.loc[2, "verdict"] == "not_comparable" and summary.loc[2, "fatal"] == ["points"]


def test_key_summary_names_model_gpu_engine_and_lengths() -> None:
    text = key_summary(frame(*sweep(1), point(1, 8, scenario="long", input_len=4000, output_len=200)), 1, "en")
    assert text == ("model Qwen/Qwen3-30B-A3B (bf16, load format auto) · GPU H200×1 · engine sglang 0.5.23 · "
                    "ISL/OSL 128/128, 4000/200 · measured")


def test_risk_columns_take_the_highest_layer_and_broken_rules_per_run() -> None:
    rows = [*sweep(1), *sweep(2, server_args={"quantization": "w8a8_int8", "tp-size": 8}),
            *sweep(3, engine_version=None, server_args={"load-format": "dummy"})]
    risk = risk_columns(frame(*rows)).set_index("run_id")
    assert risk.loc[1, "highest_risk"] == "low_medium" and risk.loc[1, "broken_rules"] == []
    assert risk.loc[2, "highest_risk"] == "high"
    assert risk.loc[2, "broken_rules"] == ["no_quality_lowering_quantization: quantization=w8a8_int8"]
    assert risk.loc[3, "notes"] == ["dummy_weights"]  # unknown version: judged on the newest schema


def test_config_diff_lists_only_differing_flags_unless_asked() -> None:
    data = frame(*sweep(1, server_args={"max-running-requests": 64, "tp-size": 1}),
                 *sweep(2, server_args={"max-running-requests": 128, "tp-size": 1, "chunked-prefill-size": 4096}))
    diff = config_diff(data, 1, [1, 2])
    assert list(diff["flag"]) == ["chunked-prefill-size", "max-running-requests"]
    assert list(diff["baseline_value"]) == ["?", "64"] and list(diff["value"]) == ["4096", "128"]
    assert diff["risk"].notna().all()
    assert len(config_diff(data, 1, [2], show_all=True)) == 3


def test_every_condition_and_family_has_strings() -> None:
    keys = [f"compare.cond.{c}" for c in CONDITION_NAMES] + [f"compare.family.{f}" for f in FAMILIES]
    missing = [k for k in keys if k not in catalogue()]
    assert not missing
