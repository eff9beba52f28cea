"""The estimate beside each measured point (domain/results/estimate_overlay.py) and where it
shows: the charts' dashed lines, the notes' measured ÷ estimated columns, the exports' footer.

The frames are built as the app builds them: DB-shaped rows through
:func:`domain.results.frames.points_frame` (stored JSON for conditions, flags, topology and
environment), or, for the emulated run, a real sweep of the emulator stored in a real
DuckDB file.  The measured-looking run carries the public silicon TTFT and TPOT of
Qwen3-235B-A22B-FP8 at TP4 on H200 (the calibration's own rows,
domain/estimate/data/measured_qwen3_235b_a22b_fp8_h200.csv), its output throughput from
bench_serving's closed-loop identity c · OSL / (TTFT + (OSL − 1) · TPOT)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from PIL import Image, ImageChops

from db import Store
from domain.compare.comparison import Comparison, build_comparison
from domain.core.i18n import t
from domain.estimate.constants import calibration_for
from domain.estimate.sizing import GPUS
from domain.estimate.step_time import BOUNDS
from domain.render import charts
from domain.render.deck import standard_charts
from domain.render.pictures import chart_png, comparison_chart_png
from domain.render.tables import comparison_csv, comparison_estimates, comparison_markdown, notes_table, point_notes
from domain.results import estimate_overlay
from domain.results.frames import points_frame
from tests.support.actors import operator
from tests.support.app_server import ARTIFACTS
from tests.support.runner_harness import MARK, assert_nothing_left, run_burst, runner_env, small_plan

MEASURED_ROWS = Path(__file__).resolve().parents[1] / "domain/estimate/data/measured_qwen3_235b_a22b_fp8_h200.csv"
BIG_MODEL = "Qwen/Qwen3-235B-A22B-FP8"


def published_rows(tp: int) -> list[dict[str, str]]:
    text = "\n".join(line for line in MEASURED_ROWS.read_text(encoding="utf-8").splitlines()
                     if not line.startswith("#"))
    return [r for r in csv.DictReader(io.StringIO(text)) if r["engine"] == "sglang" and r["tp_size"] == str(tp)]


def db_row(run_id: int, scenario: str, concurrency: int, *, isl: int, osl: int, ttft_ms: float, tpot_ms: float,
           source: str = "measured", engine: str = "sglang", model: str = BIG_MODEL, gpu_type: str = "H200",
           gpu_count: int = 4, server_args: dict[str, Any] | None = None, topology: dict[str, Any] | None = None,
           environment: dict[str, Any] | None = None, request_rate: object = "inf") -> dict[str, Any]:
    """One row as Store.points_for_comparison gives it (JSON columns as stored)."""
    e2e = ttft_ms + (osl - 1) * tpot_ms
    conditions = {"input_len": isl, "output_len": osl, "random_range_ratio": 1.0, "num_prompts": 10 * concurrency,
                  "warmup": concurrency, "dataset": "random", "seed": 1, "request_rate": request_rate,
                  "engine_version": "0.5.6.post2"}
    row: dict[str, Any] = {
        "id": run_id * 1000 + concurrency, "run_id": run_id, "run_name": f"run{run_id}", "source": source,
        "engine": engine, "model": model, "gpu_type": gpu_type, "gpu_count": gpu_count,
        "topology": json.dumps(topology or {"kind": "aggregated"}),
        "server_args": None if server_args is None else json.dumps(server_args),
        "conditions": json.dumps(conditions), "startup_facts": "{}",
        "environment": json.dumps(environment or {}), "host_info": None,
        "scenario": scenario, "concurrency": concurrency, "repeat_idx": 0,
        "completed": 10 * concurrency, "requested": 10 * concurrency,
        # bench_serving's closed loop: c requests in flight, each lasting TTFT + (OSL − 1) · TPOT.
        "output_throughput": concurrency * osl / (e2e / 1e3), "request_throughput": concurrency / (e2e / 1e3),
    }
    for stat in ("mean", "median", "p90", "p99"):
        row[f"ttft_{stat}_ms"], row[f"tpot_{stat}_ms"] = ttft_ms, tpot_ms
        row[f"itl_{stat}_ms"], row[f"e2e_{stat}_ms"] = tpot_ms, e2e
    return row


def measured_big_run(run_id: int = 1, tp: int = 4, **overrides: Any) -> list[dict[str, Any]]:
    """The published rows of one TP size as one measured run, a scenario per (ISL, OSL)."""
    return [db_row(run_id, f"in{r['isl']}-out{r['osl']}", int(r["concurrency"]), isl=int(r["isl"]),
                   osl=int(r["osl"]), ttft_ms=float(r["ttft_ms"]), tpot_ms=float(r["tpot_ms"]),
                   **{"server_args": {"tp-size": tp}, "gpu_count": tp, **overrides})
            for r in published_rows(tp)]


def imported_without_args(run_id: int = 3) -> list[dict[str, Any]]:
    """An imported bench_serving file without server_info: the flags are unknown."""
    return measured_big_run(run_id, source="imported", server_args=None,
                            environment={"imported": True, "provenance": {"server_args": "unknown"}})


def compared(rows: list[dict[str, Any]], baseline: int, others: list[int], lang: str) -> Comparison:
    return build_comparison(points_frame(rows), baseline, others, lang)


@pytest.fixture(scope="module")
def big() -> Comparison:
    return compared([*measured_big_run(1, tp=4), *measured_big_run(2, tp=2), *imported_without_args(3)], 1, [2, 3],
                    "en")


@pytest.fixture(scope="module")
def big_estimates(big: Comparison) -> pd.DataFrame:
    return estimate_overlay.estimates_for(big.frame, big.summary)


# -- the estimates ----------------------------------------------------------------------------


def test_measured_tp4_and_tp2_runs_get_estimates_within_the_calibrations_own_error(
        big_estimates: pd.DataFrame) -> None:
    runs = big_estimates[big_estimates["run_id"].isin([1, 2])]
    assert len(runs) == len(published_rows(4)) + len(published_rows(2)) and runs["reason"].isna().all()
    for column in ("est_ttft_ms", "est_tpot_ms", "est_output_tok_s", *(f"ratio_{m}" for m in
                                                                        estimate_overlay.RATIO_METRICS)):
        assert (pd.to_numeric(runs[column]) > 0).all(), column
    # These are the 24 rows the constants were fitted on: on them the estimate must do at
    # least as well as the leave-one-ISL-group-out error says it does on rows it never saw
    # (error as calibrate.py takes it: estimated ÷ measured − 1).
    calibration = calibration_for(GPUS["H200"], "sglang")
    assert calibration.cv_ttft_mae_pct is not None and calibration.cv_tpot_mae_pct is not None
    assert len(runs) == calibration.cv_rows
    ttft_error = (1 / runs["ratio_ttft_p50"] - 1).abs().mean() * 100
    tpot_error = (1 / runs["ratio_tpot_p50"] - 1).abs().mean() * 100
    assert ttft_error <= calibration.cv_ttft_mae_pct and tpot_error <= calibration.cv_tpot_mae_pct
    run = runs[runs["run_id"] == 1]
    assert set(run["fitted_on"]) == {"H200/sglang"} and not run["borrowed"].any()
    assert (runs["extrapolated"] == "").all()  # TP2/TP4, ISL 1000–4000, c 2–9: inside the fitted range
    assert set(run["bound"]) <= set(BOUNDS)


def test_an_imported_run_without_server_args_gets_nan_and_a_reason(big_estimates: pd.DataFrame) -> None:
    run = big_estimates[big_estimates["run_id"] == 3]
    assert len(run) == len(published_rows(4))
    assert set(run["reason"]) == {"server_args_unknown"}
    assert run[["est_ttft_ms", "est_tpot_ms", "est_output_tok_s", "ratio_output_tok_s"]].isna().all().all()
    lines = estimate_overlay.calibration_lines(big_estimates, "ja")
    assert any("run3 (#3)（インポート）" in line and "サーバーフラグが分かりません" in line for line in lines)


def test_an_imported_run_whose_file_carried_the_server_args_is_estimated() -> None:
    rows = measured_big_run(3, source="imported", environment={"provenance": {"server_args": "file"}})
    c = compared(rows, 3, [], "en")
    estimates = estimate_overlay.estimates_for(c.frame, c.summary)
    assert estimates["reason"].isna().all() and estimates["est_output_tok_s"].notna().all()


@pytest.mark.parametrize(("overrides", "reason", "detail"), [
    ({"gpu_type": "L40S"}, "no_figures", "L40S"),
    ({"model": "acme/unheard-of-7b"}, "no_figures", "acme/unheard-of-7b"),
    ({"topology": {"kind": "router", "label": "router 2×2GPU (cache_aware)"}}, "topology", "router 2×2GPU"),
    ({"request_rate": 4.0}, "request_rate", "4.0"),
    ({"server_args": {"tp-size": 1}}, "kv_pool", "0"),  # 235 GB of FP8 weights on one H200: no KV cache left
])
def test_a_run_the_estimator_cannot_describe_gets_nan_and_says_why(overrides: dict[str, Any], reason: str,
                                                                   detail: str) -> None:
    c = compared(measured_big_run(4, **overrides), 4, [], "en")
    estimates = estimate_overlay.estimates_for(c.frame, c.summary)
    assert set(estimates["reason"]) == {reason}
    assert all(detail in str(d) for d in estimates["reason_detail"])
    assert estimates["est_output_tok_s"].isna().all() and estimates["ratio_tpot_p50"].isna().all()
    assert estimate_overlay.reason_text(reason, estimates["reason_detail"].iloc[0], "ja")


def test_a_point_far_below_its_estimate_gets_one_sentence_in_each_language() -> None:
    rows = measured_big_run(5)
    slow = next(r for r in rows if r["scenario"] == "in1000-out500")
    slow["output_throughput"] *= 0.5  # a server that reached half of what its own latencies allow
    c = compared(rows, 5, [], "en")
    estimates = estimate_overlay.estimates_for(c.frame, c.summary)
    far = estimate_overlay.far_below(estimates)
    assert list(far["scenario"]) == ["in1000-out500"]
    point = far.iloc[0]
    pct = round(100 * point["ratio_output_tok_s"])
    en = estimate_overlay.far_below_sentences(estimates, "en")
    ja = estimate_overlay.far_below_sentences(estimates, "ja")
    assert en == [t("estimate_overlay.far_below", "en", run="run5 (#5)", scenario="in1000-out500",
                    c=point["concurrency"], pct=100 * point["ratio_output_tok_s"],
                    measured=slow["output_throughput"], estimated=point["est_output_tok_s"],
                    bound=t(f"estimate.bound.{point['bound']}", "en"))]
    assert f"at c={point['concurrency']} the measured throughput is {pct} % of the estimate" in en[0]
    assert "a question worth asking" in en[0]
    assert len(ja) == 1 and f"c={point['concurrency']} の実測スループットは推定値の {pct} % です" in ja[0]


# -- where it shows ---------------------------------------------------------------------------


def _layers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return list(spec["spec"]["layer"])


def _estimate_layers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [layer for layer in _layers(spec)
            if any(f.get("filter") == "(datum.kind === 'estimate')" for f in layer.get("transform", []))]


def test_the_metric_chart_draws_the_estimate_dashed_in_the_runs_colour(big: Comparison,
                                                                       big_estimates: pd.DataFrame) -> None:
    chart = charts.metric_chart(big.summary, ["output_tok_s", "tpot_p50", "e2e_p99"], "en", estimates=big_estimates)
    spec = chart.to_dict()
    (layer,) = _estimate_layers(spec)
    dash = layer["encoding"]["strokeDash"]["scale"]
    legend = t("estimate_overlay.legend", "en")
    assert dict(zip(dash["domain"], dash["range"], strict=True))[legend] == charts.ESTIMATE_DASH
    assert layer["encoding"]["color"]["field"] == "run"  # the run's colour, as its measured line
    measured_layer = next(x for x in _layers(spec)
                          if any(f.get("filter") == "(datum.kind === 'measured')" for f in x.get("transform", [])))
    assert measured_layer["encoding"]["strokeDash"]["scale"] == dash  # one stroke legend for both
    data = pd.DataFrame(spec["datasets"][spec["data"]["name"]])
    drawn = data[data["kind"] == "estimate"]
    assert set(drawn["metric"]) == {"output_tok_s", "tpot_p50"}  # e2e p99 has no estimate: medians only
    run1 = big_estimates[big_estimates["run_id"] == 1]
    throughput = drawn[(drawn["metric"] == "output_tok_s") & (drawn["run_id"] == 1)].sort_values(
        ["scenario", "concurrency"])
    assert throughput["value"].tolist() == pytest.approx(
        run1.sort_values(["scenario", "concurrency"])["est_output_tok_s"].tolist())
    calibration = calibration_for(GPUS["H200"], "sglang")
    assert f"cross-validated MAE TTFT {calibration.cv_ttft_mae_pct:g} %" in spec["title"]["subtitle"]
    assert spec["title"]["subtitle"].count("dashed line and +: estimate") == 1
    assert not _estimate_layers(charts.metric_chart(big.summary, ["output_tok_s"], "en").to_dict())


def test_the_latency_chart_draws_estimated_medians_only(big: Comparison, big_estimates: pd.DataFrame) -> None:
    medians = charts.latency_vs_throughput_chart(big.summary, "en", metrics=("ttft_p50", "e2e_p50"),
                                                 estimates=big_estimates).to_dict()
    assert len(_estimate_layers(medians)) == 1 and "dashed line and +: estimate" in medians["title"]["subtitle"]
    tails = charts.latency_vs_throughput_chart(big.summary, "en", estimates=big_estimates).to_dict()
    assert not _estimate_layers(tails)  # p99: the estimator predicts medians


def test_the_deck_charts_carry_the_estimate(big: Comparison) -> None:
    by_title = dict(standard_charts(big))
    metrics = by_title[t("compare.chart.metrics_title", "en")].to_dict()
    assert _estimate_layers(metrics)


def test_the_page_table_lists_the_estimated_points_only(big_estimates: pd.DataFrame) -> None:
    table = estimate_overlay.estimate_table(big_estimates, "ja")
    runs = table[t("slides.col.run", "ja")]
    assert len(table) == len(published_rows(4)) + len(published_rows(2))
    assert not runs.str.contains("#3").any()  # the imported run without flags: named in refusal_lines instead
    ratio = table[t("estimate_overlay.col.ratio_tpot_p50", "ja")]
    estimated = big_estimates[big_estimates["run_id"].isin([1, 2])]["ratio_tpot_p50"]
    assert ratio.tolist() == pytest.approx(estimated.tolist())
    assert set(table[t("estimate_overlay.col.bound", "ja")]) <= {t(f"estimate.bound.{b}", "ja") for b in BOUNDS}


def test_the_notes_and_exports_carry_measured_over_estimated(big: Comparison, big_estimates: pd.DataFrame) -> None:
    notes = point_notes(big)
    ratios = big_estimates.set_index(["run_id", "scenario", "concurrency"])
    for column in ("ratio_output_tok_s", "ratio_ttft_p50", "ratio_tpot_p50"):
        got = notes.set_index(["run_id", "scenario", "concurrency"])[column]
        assert got.loc[1].tolist() == pytest.approx(ratios[column].loc[1].reindex(got.loc[1].index).tolist())
        assert got.loc[3].isna().all()  # the imported run without flags
    table = notes_table(big)
    for key in ("ratio_output_tok_s", "ratio_ttft_p50", "ratio_tpot_p50", "bound"):
        assert t(f"estimate_overlay.col.{key}", "en") in table.columns
    markdown = comparison_markdown(big)
    assert "measured÷estimated TPOT p50" in markdown
    assert "leave-one-ISL-group-out cross-validated mean absolute error" in markdown
    text = comparison_csv(big).decode("utf-8-sig")
    assert "run1 (#1) · measured÷estimated out tok/s" in text
    assert "run3 (#3) (imported) · measured÷estimated" not in text  # no estimate: no column, a reason below
    assert "Runs without an estimate: run3 (#3) (imported)" in text


def render_with_and_without(c: Comparison, metrics: list[str], name: str) -> None:
    """The metric chart with the estimates to test-artifacts/{name}.png (for a person to
    look at), and a check that the estimate changed the panels' pixels."""
    ARTIFACTS.mkdir(exist_ok=True)
    estimates = estimate_overlay.estimates_for(c.frame, c.summary)
    chart = charts.metric_chart(c.summary, metrics, c.lang, saturation=c.saturation, columns=len(metrics),
                                estimates=estimates)
    png = comparison_chart_png(c, chart, scale=1)
    (ARTIFACTS / f"{name}.png").write_bytes(png)
    with_estimate = Image.open(io.BytesIO(png)).convert("RGB")
    plain = charts.metric_chart(c.summary, metrics, c.lang, saturation=c.saturation, columns=len(metrics))
    without = Image.open(io.BytesIO(chart_png(plain, c.caveat, scale=1))).convert("RGB")
    assert with_estimate.width > 600
    crop = (0, 60, min(with_estimate.width, without.width), 300)  # the first panels, below the subtitle
    assert ImageChops.difference(with_estimate.crop(crop), without.crop(crop)).getbbox() is not None


def test_the_exports_use_the_estimates_a_comparison_carries(big_estimates: pd.DataFrame) -> None:
    """When build_comparison attaches ``estimates``, the exports read them rather than recompute."""
    c = compared(measured_big_run(1, tp=4), 1, [], "en")
    carried = big_estimates[big_estimates["run_id"] == 1].assign(ratio_tpot_p50=0.5)
    setattr(c, "estimates", carried)  # noqa: B010 — the field build_comparison is to carry
    assert comparison_estimates(c) is carried
    assert (point_notes(c)["ratio_tpot_p50"] == 0.5).all()


def test_png_with_the_estimates_beside_single_points() -> None:
    """Scenarios measured at one concurrency each: the estimate shows as a cross beside each point."""
    for lang in ("ja", "en"):
        rows = [r for r in [*measured_big_run(1, tp=4), *measured_big_run(2, tp=2), *imported_without_args()]
                if r["scenario"].startswith("in1000-")]
        render_with_and_without(compared(rows, 1, [2, 3], lang), ["output_tok_s", "tpot_p50"],
                                f"estimate-overlay-published-{lang}")


# -- an emulated run, end to end --------------------------------------------------------------


@pytest.mark.sglang
@pytest.mark.slow
def test_an_emulated_qwen3_30b_sweep_on_h200_gets_estimates(store: Store, env: dict[str, str]) -> None:
    """The emulator runs on the estimator's step times, so measured ÷ estimated sits near 1
    (the fidelity test holds it within 15 % on an idle host); here a busy host may slow the
    emulator, so only a slower-than-estimated TPOT beyond 2× or a faster one beyond 0.5× fails."""
    plan = small_plan(benchmark={"scenarios": [{"name": "s", "input_len": 256, "output_len": 64}],
                                 "concurrency": [1, 2, 4, 8], "num_prompts": "3x", "warmup": "1x"})
    assert plan.model == "Qwen/Qwen3-30B-A3B" and plan.gpu.type == "H200"
    run_id, _ = store.submit_run(plan, submitted_by=operator("test"))
    renv = runner_env(env)
    assert run_burst(renv, timeout=600) == 0
    assert_nothing_left(renv[MARK])
    frame = points_frame(p.as_dict() for p in store.points_for_comparison([run_id]))
    c = build_comparison(frame, run_id, [], "en")
    estimates = estimate_overlay.estimates_for(c.frame, c.summary)
    assert len(estimates) == 4 and estimates["reason"].isna().all()
    assert set(estimates["fitted_on"]) == {"H200/sglang"}
    assert all(not math.isnan(v) and 0.5 < v < 2.0 for v in estimates["ratio_tpot_p50"]), estimates
    assert (estimates["ratio_output_tok_s"] > 0).all()
    assert "tp_size" in estimates["extrapolated"].iloc[0]  # TP1: the constants were fitted on TP2 and TP4
    for lang in ("ja", "en"):
        render_with_and_without(build_comparison(frame, run_id, [], lang),
                                ["output_tok_s", "ttft_p50", "tpot_p50"], f"estimate-overlay-emulated-{lang}")
