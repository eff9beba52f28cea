"""The llm-d benchmark report v0.2.x: import (GuideLLM- and AIPerf-made reports), export of a run
and a comparison as v0.2.1 (valid against domain/importer/llmd_schema.py, read back identically),
and metric definitions as conditions (a GuideLLM report against a bench_serving run names TPOT's)."""

from __future__ import annotations

import csv
import io
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pptx import Presentation

from db import Store
from db.imported_runs import import_file
from domain.compare.comparison import build_comparison
from domain.importer import preview_import
from domain.importer.conditions import ImportConditions
from domain.importer.llmd import documents
from domain.importer.llmd_schema import problems
from domain.render import llmd_report
from domain.results import definitions
from domain.results.bench_record import METRIC_COLUMNS
from domain.results.frames import CONDITION_COLUMNS, points_frame
from tests.conftest import ROOT
from tests.support.actors import operator
from tests.support.llmd_runs import bench_serving_run as _bench_serving_run

FIXTURES = ROOT / "tests" / "fixtures" / "llmd"
TPOT_EN = "TPOT: bench_serving excludes the first token; GuideLLM includes the first token (and the wait for it)"
TPOT_JA = "TPOT: bench_serving は最初のトークンを除く; GuideLLM は最初のトークン(とその待ち時間)を含む"


def _frame(store: Store, run_ids: list[int]) -> pd.DataFrame:
    return points_frame(p.as_dict() for p in store.points_for_comparison(run_ids))


# -- import -----------------------------------------------------------------------------------


def test_a_guidellm_made_report_imports_with_its_conditions(store: Store) -> None:
    preview = preview_import(FIXTURES / "guidellm_c8.yaml")
    assert preview.source_kind == "llmd_report" and not preview.problems
    point = preview.points[0]
    assert {k: point.conditions[k] for k in ("bench_tool", "bench_version", "concurrency", "input_len", "output_len",
                                              "random_range_ratio", "request_rate", "num_prompts", "dataset")} == {
        "bench_tool": "guidellm", "bench_version": "0.4.0", "concurrency": 8, "input_len": 1000, "output_len": 100,
        "random_range_ratio": 1.0, "request_rate": "inf", "num_prompts": 320, "dataset": "guidellm-random"}
    assert {"seed", "warmup", "ignore_eos", "thinking_mode"} <= set(point.unknown)  # the report does not say
    assert point.metrics["tpot_mean_ms"] == 19.41  # GuideLLM's TPOT, as its definition stands
    assert point.metrics["itl_mean_ms"] == 15.44
    assert point.metrics["e2e_mean_ms"] == pytest.approx(1941.0)  # request_latency is in s
    assert point.metrics["duration_s"] == 60.02
    result = import_file(store, FIXTURES / "guidellm_c8.yaml", ImportConditions(), actor=operator("t"))
    row = _frame(store, result.run_ids).iloc[0]
    assert (row["model"], row["gpu_type"], row["gpu_count"], row["engine"], row["engine_version"]) == (
        "Qwen/Qwen3-235B-A22B-FP8", "H200", 8, "sglang", "0.5.23")
    assert row["bench_tool"] == "guidellm" and row["source"] == "imported"


def test_an_aiperf_made_report_imports_with_its_conditions() -> None:
    point = preview_import(FIXTURES / "aiperf_c8.json").points[0]
    assert (point.conditions["bench_tool"], point.conditions["bench_version"]) == ("aiperf", None)
    assert (point.conditions["concurrency"], point.conditions["input_len"], point.conditions["output_len"]) == (8, 1000,
                                                                                                                100)
    # llm-d's AIPerf converter writes AIPerf's per-request (latency - TTFT)/(tokens - 1) as inter_token_latency:
    # benchdeck's TPOT quantity, in s/token.
    assert point.metrics["tpot_mean_ms"] == pytest.approx(15.512)
    assert point.metrics["itl_mean_ms"] is None and point.metrics["ttft_p99_ms"] == pytest.approx(592.04)
    assert point.metrics["duration_s"] is None  # not in the report: unknown, not zero
    assert point.file_facts["model"] == "Qwen/Qwen3-235B-A22B-FP8"  # AIPerf's config, kept as the native config


def test_runner_import_reads_an_llmd_report(store: Store, env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-m", "runner", "import", str(FIXTURES / "aiperf_c8.json"),
                           "--model", "Qwen/Qwen3-235B-A22B-FP8", "--gpu", "H200x8"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    row = _frame(store, [int(done.stdout.split()[0])]).iloc[0]
    assert (row["bench_tool"], row["concurrency"], row["model"], row["gpu_count"]) == (
        "aiperf", 8, "Qwen/Qwen3-235B-A22B-FP8", 8)
    assert row["tpot_mean_ms"] == pytest.approx(15.512)


def test_the_written_down_schema_refuses_what_the_definition_refuses() -> None:
    report = documents((FIXTURES / "guidellm_c8.yaml").read_bytes())[0]
    assert problems(report) == []
    bad = {**report, "extra": 1, "run": {}}
    bad["results"] = {"request_performance": {"aggregate": {"latency": {
        "time_to_first_token": {"units": "tokens/s", "mean": 1.0}, "request_latency": {"units": "s"}}}}}
    found = problems(bad)
    assert "extra: not a field of the schema" in found
    assert "run.uid: required" in found
    assert any("time_to_first_token.units: 'tokens/s' must be one of ms, s" in p for p in found)
    assert any("request_latency.mean: required" in p for p in found)
    refused = preview_import(io.BytesIO(b'{"run": {}, "results": {}}'), file_name="r.json")
    assert not refused.runs and refused.problems[0].code == "bad_value"
    assert "run.uid: required" in refused.problems[0].text("en")


# -- export and read back -----------------------------------------------------------------------

SAME_COLUMNS = ("scenario", "concurrency", "repeat_idx", "model", "gpu_type", "gpu_count", "engine",
                "engine_version", "server_args", *CONDITION_COLUMNS, *METRIC_COLUMNS)


def test_an_exported_run_is_valid_and_reads_back_identically(store: Store, tmp_path: Path) -> None:
    run_id = _bench_serving_run(store, scenarios=[{"name": "short", "input_len": 128, "output_len": 128},
                                                  {"name": "long", "input_len": 4000, "output_len": 200}],
                                concurrency=[1, 4], engine="emulator", seed=1.7, range_ratio=0.5)
    frame = _frame(store, [run_id])
    reports = llmd_report.run_reports(frame, run_id, [], "en")
    assert len(reports) == 4 and all(problems(r) == [] for r in reports)
    path = tmp_path / "run.llmd.yaml"
    path.write_bytes(llmd_report.reports_yaml(reports))
    result = import_file(store, path, ImportConditions(), actor=operator("t"))
    assert len(result.run_ids) == 1 and result.points == 4  # one run, as it was exported
    back = _frame(store, result.run_ids)
    key = ["scenario", "concurrency", "repeat_idx"]
    original = frame.sort_values(key).reset_index(drop=True)
    imported = back.sort_values(key).reset_index(drop=True)
    for column in SAME_COLUMNS:
        assert [_cell(v) for v in imported[column]] == [_cell(v) for v in original[column]], column
    assert set(imported["source"]) == {"emulated"}  # emulator output stays emulated when imported


def test_one_run_exports_on_its_own(store: Store, env: dict[str, str], tmp_path: Path) -> None:
    run_id = _bench_serving_run(store, scenarios=[{"name": "s", "input_len": 1000, "output_len": 100}],
                                concurrency=[1, 8])
    done = subprocess.run([sys.executable, "-m", "runner", "export", "--baseline", str(run_id), "--runs", str(run_id),
                           "--format", "llmd-report", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    reports = documents((tmp_path / f"compare-{run_id}-{run_id}-run{run_id}.llmd.yaml").read_bytes())
    assert len(reports) == 2 and all(problems(r) == [] for r in reports)
    definitions_of = reports[0]["scenario"]["load"]["native"]["config"]["benchdeck"]["metric_definitions"]
    assert definitions_of["tpot"]["definition"] == "excl_first"


def _cell(value: object) -> object:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value.item() if hasattr(value, "item") else value


# -- metric definitions -----------------------------------------------------------------------


def test_guidellm_against_bench_serving_names_the_tpot_definitions(store: Store, env: dict[str, str],
                                                                    tmp_path: Path) -> None:
    base = _bench_serving_run(store, scenarios=[{"name": "s", "input_len": 1000, "output_len": 100}],
                              concurrency=[8])
    other = import_file(store, FIXTURES / "guidellm_c8.yaml", ImportConditions(), actor=operator("t")).run_ids[0]
    frame = _frame(store, [base, other])
    for lang, text in (("en", TPOT_EN), ("ja", TPOT_JA)):
        comparison = build_comparison(frame, base, [other], lang)
        assert any(text in line for line in comparison.verdict_lines), comparison.verdict_lines
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "runner", "export", "--baseline", str(base), "--runs", str(other), "--out", str(out),
         *(a for fmt in ("csv", "md", "pptx", "llmd-report") for a in ("--format", fmt))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    stem = f"compare-{base}-{other}"
    assert TPOT_EN in (out / f"{stem}.csv").read_text(encoding="utf-8-sig")
    assert TPOT_EN.replace("_", "\\_") in (out / f"{stem}.md").read_text(encoding="utf-8")  # Markdown-escaped
    slides = Presentation(str(out / f"{stem}.pptx")).slides
    assert any(TPOT_EN in shape.text_frame.text for slide in slides for shape in slide.shapes
               if shape.has_text_frame)
    for run_id in (base, other):
        reports = documents((out / f"{stem}-run{run_id}.llmd.yaml").read_bytes())
        assert reports and all(problems(r) == [] for r in reports)
        assert all(TPOT_EN in r["run"]["description"] for r in reports)
    csv_rows = list(csv.reader(io.StringIO((out / f"{stem}.csv").read_text(encoding="utf-8-sig"))))
    assert csv_rows  # a readable CSV, not only a string inside a file


def test_tpot_is_converted_exactly_from_per_request_data() -> None:
    requests = pd.DataFrame({"request_idx": [0, 1, 2], "success": [True, True, False], "input_len": [10, 10, 10],
                             "output_len": [4, 2, 0], "ttft_ms": [100.0, 50.0, np.nan],
                             "tpot_ms": [10.0, 30.0, np.nan], "e2e_ms": [130.0, 80.0, np.nan],
                             "itl_ms": [[10.0, 10.0, 10.0], [30.0], []], "start_s": [0.0, 0.1, 0.2]})
    converted = definitions.converted_tpot(requests, "guidellm")
    assert converted is not None and converted.n == 2
    # (TTFT + Σ gaps) / output tokens per request: (100 + 30) / 4 and (50 + 30) / 2
    assert converted.mean_ms == pytest.approx((32.5 + 40.0) / 2)
    assert definitions.converted_tpot(requests, "aiperf") is None  # same definition: nothing to convert


def test_the_verdict_says_what_was_converted(store: Store) -> None:
    base = _bench_serving_run(store, scenarios=[{"name": "s", "input_len": 1000, "output_len": 100}],
                              concurrency=[8])
    other = import_file(store, FIXTURES / "guidellm_c8.yaml", ImportConditions(), actor=operator("t")).run_ids[0]
    frame = _frame(store, [base, other])
    point_id = int(frame.loc[frame["run_id"] == base, "point_id"].iloc[0])
    requests = pd.DataFrame({"request_idx": [0, 1], "success": [True, True], "input_len": [1000, 1000],
                             "output_len": [100, 100], "ttft_ms": [400.0, 420.0], "tpot_ms": [15.0, 15.2],
                             "e2e_ms": [1885.0, 1924.8], "itl_ms": [[15.0] * 99, [15.2] * 99],
                             "start_s": [0.0, 0.1]})
    comparison = build_comparison(frame, base, [other], "en", requests={point_id: requests})
    # (400 + 99 × 15) / 100 and (420 + 99 × 15.2) / 100: GuideLLM's TPOT of these two requests
    expected = ((400 + 99 * 15.0) / 100 + (420 + 99 * 15.2) / 100) / 2
    assert any(f"#{base}'s TPOT converted exactly to GuideLLM's definition from its per-request data: "
               f"mean {expected:.2f} ms" in line for line in comparison.verdict_lines), comparison.verdict_lines
