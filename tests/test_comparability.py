"""The comparability key and the checklist matrix: match / differ / unknown / intended,
point-level conditions over the common points, the fatal conditions (a one-sided unknown
GPU included), the high-risk flag conditions, summary lines with both values, scenarios
lined up by their lengths, risk columns, flag diff."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from domain.compare.comparability import (
    CONDITION_NAMES,
    CONDITIONS,
    FAMILIES,
    comparability_key,
    comparability_matrix,
    comparability_summary,
    condition_label,
    intended_choices,
    is_condition_name,
    key_summary,
    state_text,
    summary_line,
)
from domain.compare.comparison import align_scenarios, build_comparison
from domain.compare.config_diff import config_diff, risk_columns
from domain.core.i18n import catalogue
from domain.results import definitions
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
    assert key["source"] == {"source": "measured"} and key["flags"] == {}
    assert comparability_key(point(1, 8, server_args={"kv-cache-dtype": "fp8_e4m3", "tp-size": 2}))["flags"] == {
        "kv-cache-dtype": "fp8_e4m3"}


def test_runs_differing_only_in_a_server_flag_are_comparable() -> None:
    matrix, summary = check(*sweep(1), *sweep(2, server_args={"max-running-requests": 128}))
    assert states(matrix, 2) == {}
    # every condition, then one row per metric definition (both runs' harness: bench_serving)
    definition_rows = {definitions.condition(aspect) for aspect in definitions.ASPECTS}
    assert len(matrix) == len(CONDITIONS) + len(definition_rows)
    assert set(matrix["condition"]) == set(CONDITION_NAMES) | definition_rows
    assert summary.loc[2, "verdict"] == "comparable"
    assert summary_line(summary.loc[2], "en") == "comparable"


def test_a_different_osl_is_the_one_mismatch_and_is_fatal() -> None:
    matrix, summary = check(*sweep(1), *sweep(2, server_args={"x": 1}), *sweep(3, output_len=256))
    assert states(matrix, 2) == {} and states(matrix, 3) == {"output_len": "differ"}
    row = matrix[(matrix["run_id"] == 3) & (matrix["condition"] == "output_len")].iloc[0]
    assert (row["baseline_value"], row["value"], row["family"], bool(row["fatal"])) == ("128", "256", "workload", True)
    assert summary.loc[3, "verdict"] == "not_comparable" and summary.loc[3, "fatal"] == ["output_len"]
    assert summary_line(summary.loc[3], "en") == "not comparable — output length (OSL): 128 → 256"
    assert state_text(row, "en") == "✗ 128 → 256" and state_text(matrix.iloc[0], "ja") == "✓"
    assert "出力長 (OSL)" in summary_line(summary.loc[3], "ja")


def test_a_different_model_is_not_comparable_and_other_differences_are_listed_too() -> None:
    _, summary = check(*sweep(1), *sweep(2, model="meta-llama/Llama-3.1-8B", seed=7))
    assert summary.loc[2, "fatal"] == ["model"] and summary.loc[2, "differing"] == ["model", "seed"]
    assert summary_line(summary.loc[2], "en") == ("not comparable — model: Qwen/Qwen3-30B-A3B → "
                                                  "meta-llama/Llama-3.1-8B; also differs: seed: 42 → 7")


def test_a_non_fatal_difference_leaves_the_run_comparable_except() -> None:
    matrix, summary = check(*sweep(1), *sweep(2, seed=7, gpu_count=2))
    assert states(matrix, 2) == {"seed": "differ", "gpu_count": "differ"}
    assert summary.loc[2, "verdict"] == "comparable_except"
    assert summary_line(summary.loc[2], "en") == "comparable except — GPU count: 1 → 2; seed: 42 → 7"


def test_unknown_is_its_own_state_never_a_match() -> None:
    imported = sweep(2, source="measured", model=None, bench_version=None)
    matrix, summary = check(*sweep(1), *imported)
    assert states(matrix, 2) == {"model": "unknown", "bench_version": "unknown"}
    row = matrix[(matrix["run_id"] == 2) & (matrix["condition"] == "model")].iloc[0]
    assert row["value"] == "?"
    assert summary.loc[2, "verdict"] == "comparable_except" and summary.loc[2, "fatal"] == []
    assert summary_line(summary.loc[2], "en") == ("comparable except — unknown: model (Qwen/Qwen3-30B-A3B / ?); "
                                                  "bench version (0.5.23 / ?)")


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
    # Both runs were measured, so their flag sets are complete: an absent flag is at its default.
    assert list(diff["baseline_value"]) == ["unset", "64"] and list(diff["value"]) == ["4096", "128"]
    assert diff["risk"].notna().all()
    assert len(config_diff(data, 1, [2], show_all=True)) == 3


def test_every_condition_and_family_has_strings() -> None:
    keys = [f"compare.cond.{c}" for c in CONDITION_NAMES] + [f"compare.family.{f}" for f in FAMILIES]
    missing = [k for k in keys if k not in catalogue()]
    assert not missing


# -- what changes what is measured -----------------------------------------------------------------


@pytest.mark.parametrize(("change", "named"), [
    ({"random_range_ratio": 0.0}, "range ratio: 1 → 0"),
    ({"dataset": "sharegpt"}, "dataset: random-ids → sharegpt"),
    ({"source": "emulated"}, "source (measured / emulated / imported): measured → emulated"),
    ({"engine": "vllm"}, "engine: sglang → vllm"),
])
def test_these_differences_change_what_is_measured(change: dict[str, Any], named: str) -> None:
    _, summary = check(*sweep(1), *sweep(2, **change))
    assert summary.loc[2, "verdict"] == "not_comparable" and summary.loc[2, "fatal"] == list(change)
    assert summary_line(summary.loc[2], "en") == f"not comparable — {named}"


def test_a_gpu_unknown_on_one_side_is_fatal_and_on_both_only_listed() -> None:
    matrix, summary = check(*sweep(1, gpu_type=None), *sweep(2, gpu_type=None), *sweep(3))
    assert states(matrix, 2) == {"gpu_type": "unknown"} and states(matrix, 3) == {"gpu_type": "unknown"}
    assert summary.loc[2, "verdict"] == "comparable_except" and summary.loc[2, "fatal"] == []
    assert summary_line(summary.loc[2], "en") == "comparable except — unknown on both sides: GPU type"
    assert summary.loc[3, "verdict"] == "not_comparable" and summary.loc[3, "fatal"] == ["gpu_type"]
    assert summary.loc[3, "unknown"] == ["gpu_type"]
    assert summary_line(summary.loc[3], "en") == "not comparable — GPU type: ? → H200"
    # The user may still say the GPU is the thing under test.
    _, summary = check(*sweep(1, gpu_type=None), *sweep(3), intended=frozenset({"gpu_type"}))
    assert summary.loc[3, "verdict"] == "comparable" and summary.loc[3, "intended"] == ["gpu_type"]


KV = {"max-running-requests": 64, "kv-cache-dtype": "fp8_e4m3"}
SPEC = {"max-running-requests": 64, "speculative-algorithm": "EAGLE"}


def test_a_high_risk_flag_is_a_fatal_condition_shown_against_its_default() -> None:
    matrix, summary = check(*sweep(1), *sweep(2, server_args=KV), *sweep(3, server_args=SPEC))
    assert states(matrix, 2) == {"flag:kv-cache-dtype": "differ"}
    assert states(matrix, 3) == {"flag:speculative-algorithm": "differ"}
    row = matrix[(matrix["run_id"] == 2) & (matrix["condition"] == "flag:kv-cache-dtype")].iloc[0]
    assert (row["family"], row["baseline_value"], row["value"], bool(row["fatal"])) == ("flags", "auto", "fp8_e4m3",
                                                                                        True)
    assert state_text(row, "en") == "✗ auto → fp8_e4m3"
    assert summary_line(summary.loc[2], "en") == "not comparable — --kv-cache-dtype (Quantization): auto → fp8_e4m3"
    assert summary_line(summary.loc[3], "en") == ("not comparable — --speculative-algorithm (Speculative decoding): "
                                                  "unset → EAGLE")
    assert condition_label("flag:kv-cache-dtype", "ja") == "--kv-cache-dtype(量子化)"


def test_a_high_risk_flag_can_be_the_thing_under_test() -> None:
    rows = [*sweep(1), *sweep(2, server_args=KV)]
    _, summary = check(*rows, intended=frozenset({"flag:kv-cache-dtype"}))
    assert summary.loc[2, "verdict"] == "comparable" and summary.loc[2, "intended"] == ["flag:kv-cache-dtype"]
    assert summary_line(summary.loc[2], "en") == ("comparable — under test: --kv-cache-dtype (Quantization): "
                                                  "auto → fp8_e4m3")
    choices = intended_choices(frame(*rows, *sweep(3, server_args=SPEC)), 1, [2, 3])
    assert choices == [*CONDITION_NAMES, "flag:kv-cache-dtype", "flag:speculative-algorithm"]
    assert is_condition_name("flag:kv-cache-dtype") and is_condition_name("seed") and not is_condition_name("flag:")


def test_a_flag_spelled_two_ways_is_one_flag() -> None:
    matrix, _ = check(*sweep(1, server_args={"speculative-draft-model": "d", "no-enable-tf32-matmul": True}),
                      *sweep(2, server_args={"speculative-draft-model-path": "d", "enable-tf32-matmul": False}))
    assert states(matrix, 2) == {}
    assert {"flag:speculative-draft-model-path", "flag:enable-tf32-matmul"} <= set(matrix["condition"])


def test_a_flag_is_unknown_where_the_run_does_not_know_its_flags() -> None:
    """An import without the server's args: an absent flag may be anything, so '?', never a match."""
    silent = {"source": "imported", "load_format": None, "model_revision": None}
    matrix, summary = check(*sweep(1, **silent, server_args={}), *sweep(2, **silent, server_args=KV))
    assert states(matrix, 2)["flag:kv-cache-dtype"] == "unknown"
    assert "flag:kv-cache-dtype" not in summary.loc[2, "fatal"]
    assert "--kv-cache-dtype (Quantization) (? / fp8_e4m3)" in summary_line(summary.loc[2], "en")
    diff = config_diff(frame(*sweep(1, **silent, server_args={}), *sweep(2, **silent, server_args=KV)), 1, [2])
    assert dict(zip(diff["flag"], diff["baseline_value"], strict=True)) == {"kv-cache-dtype": "?",
                                                                            "max-running-requests": "?"}


# -- scenarios by their lengths ------------------------------------------------------------------------


def scenario_names(data: pd.DataFrame, run_id: int) -> dict[str, str]:
    rows = data[data["run_id"] == run_id]
    return dict(zip(rows["scenario_original"], rows["scenario"], strict=True))


def test_scenarios_line_up_by_their_lengths_not_their_names() -> None:
    long = {"input_len": 4000, "output_len": 200}
    data = frame(*sweep(1), *sweep(1, scenario="long", **long),
                 *sweep(2, scenario="in128-out128"), *sweep(2, scenario="in4000-out200", **long),
                 *sweep(2, scenario="odd", input_len=99, output_len=9))
    aligned = align_scenarios(data, 1)
    assert scenario_names(aligned, 2) == {"in128-out128": "short", "in4000-out200": "long", "odd": "odd"}
    assert scenario_names(aligned, 1) == {"short": "short", "long": "long"}
    assert len(aligned) == len(data) and list(data["scenario"]).count("short") == 3  # the input is untouched


def test_two_baseline_scenarios_of_one_length_are_told_apart_by_range_ratio_else_left() -> None:
    data = frame(*sweep(1, scenario="fixed"), *sweep(1, scenario="spread", random_range_ratio=0.0),
                 *sweep(2, scenario="a", random_range_ratio=0.0), *sweep(3, scenario="b", random_range_ratio=0.5))
    aligned = align_scenarios(data, 1)
    assert scenario_names(aligned, 2) == {"a": "spread"} and scenario_names(aligned, 3) == {"b": "b"}


def test_a_rename_that_would_merge_two_scenarios_of_a_run_is_left_out() -> None:
    data = frame(*sweep(1), *sweep(2, scenario="short", input_len=99, output_len=9), *sweep(2, scenario="x"))
    assert scenario_names(align_scenarios(data, 1), 2) == {"short": "short", "x": "x"}


def test_the_comparison_sees_the_aligned_scenarios_and_names_a_spread_change() -> None:
    """An imported in128-out128 at range ratio 0 against the plan's 'short': one scenario in
    the table, and the verdict names the range ratio rather than "no common point"."""
    data = frame(*sweep(1), *sweep(2, scenario="in128-out128", random_range_ratio=0.0))
    c = build_comparison(data, 1, [2], "en")
    assert set(c.compare["scenario"]) == {"short"} and set(c.summary["scenario"]) == {"short"}
    assert c.verdict_lines == ["run #2 vs baseline #1: not comparable — range ratio: 1 → 0"]
    assert c.verdict_lines[0] in c.caveat
    assert c.changed_lines == ["#2: same server flags as baseline #1"]
