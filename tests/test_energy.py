"""Energy per output token and per request (domain/results/energy.py): from the run's GPUs'
sampled power over the measured window, through a real DuckDB store into the points frame,
the comparison's table, the Pareto view and the CSV / Markdown exports; an import reads "no
power data" in both languages, an emulated run says why it has none."""

from __future__ import annotations

import io
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pptx import Presentation

from db import RunnerCapabilities, Store
from db.rows import ComparisonPointRow
from domain.compare.comparison import build_comparison
from domain.core.states import AttemptStatus
from domain.render.charts import pareto_chart
from domain.render.deck import comparison_deck
from domain.render.tables import comparison_csv, comparison_markdown
from domain.results import energy
from domain.results.curve import pareto_points
from domain.results.frames import points_frame
from runner.telemetry import Sample, summarise
from tests.plans import minimal_plan
from tests.support.actors import operator

CAPS = RunnerCapabilities("r1", "H200", 8, "0.5.23")


def _gpu_rows(power_w: float, *, n: int = 40, idle: float = 0.05, reasons: int = 0) -> list[dict[str, Any]]:
    """Telemetry summaries of two GPUs as runner/telemetry.py summarise writes them."""
    rows = []
    for device in (0, 1):
        for metric, mean, high in (("power_w", power_w, power_w + 50), ("util_pct", 90.0, 100.0),
                                   ("util_idle_share", idle, idle), ("clock_event_reasons", None, float(reasons))):
            rows.append({"source": "gpu", "device": device, "metric": metric, "n": n, "mean": mean,
                         "p50": mean, "max": high, "note": f"GPU-{device}"})
    return rows


def _measured_run(store: Store, telemetry: list[dict[str, Any]]) -> int:
    """One measured point: 10 s, 8,000 output tokens, 40 requests, with ``telemetry``."""
    store.submit_run(minimal_plan(engine="sglang"), submitted_by=operator("alice"))
    claim = store.claim_next(CAPS, lease_s=60)
    assert claim is not None
    store.move_attempt(claim.attempt_id, "r1", AttemptStatus.CLAIMED, AttemptStatus.STARTING)
    store.move_attempt(claim.attempt_id, "r1", AttemptStatus.STARTING, AttemptStatus.BENCHMARKING)
    now = datetime(2026, 12, 6)
    store.insert_point(
        claim.attempt_id, "r1", scenario="short", concurrency=8, repeat_idx=0, conditions={"seed": 1},
        started_at=now, finished_at=now,
        metrics={"completed": 40, "duration_s": 10.0, "output_throughput": 800.0, "tpot_median_ms": 20.0},
        raw_record={"total_output_tokens": 8000}, telemetry=telemetry)
    store.finish_attempt(claim.attempt_id, "r1", AttemptStatus.BENCHMARKING, AttemptStatus.SUCCEEDED)
    return claim.run_id


def test_the_sampler_keeps_each_gpus_idle_share_of_the_window() -> None:
    samples = [Sample(float(i), "gpu", 0, "util_pct", value) for i, value in enumerate((0, 0, 90, 95, 100, 0))]
    rows = {r["metric"]: r for r in summarise(samples, since=1.0)}  # the first sample is warmup
    assert rows["util_idle_share"]["mean"] == pytest.approx(2 / 5) and rows["util_idle_share"]["n"] == 5


def test_joules_come_from_the_runs_gpus_power_over_the_measured_window(store: Store) -> None:
    run_id = _measured_run(store, _gpu_rows(500.0))
    [row] = points_frame(map(ComparisonPointRow.as_dict, store.points_for_comparison([run_id]))).to_dict("records")
    # 2 GPUs × 500 W × 10 s = 10 kJ; over 8,000 output tokens and 40 requests.
    assert (row["energy_j"], row["j_per_output_token"], row["j_per_request"]) == (10_000.0, 1.25, 250.0)
    assert row["power_sample_hz"] == 4.0 and row["gpu_idle_share"] == pytest.approx(0.05)
    assert row["power_capped"] is False and row["energy_status"] == "measured"
    assert energy.energy_note(row, "en") == "power sampled at 4.0 Hz, idle 5 %"
    # The run page reads the same figures from the run's telemetry rows.
    [point] = store.points_of(run_id)
    power = energy.power_by_point(store.telemetry_of(run_id))
    assert energy.stored_point_energy(point, power[point.id], "measured", "sglang", "en") == (
        1.25, 250.0, "power sampled at 4.0 Hz, idle 5 %")


def test_validity_says_few_samples_idle_power_and_the_power_cap() -> None:
    row = {"source": "measured", "engine": "sglang", "duration_s": 10.0, "total_output_tokens": 1000, "completed": 10,
           "gpu_power_w_sum": 700.0, "gpu_power_samples": 4, "gpu_idle_share": 0.3, "gpu_clock_event_reasons_any": 0x5}
    row.update(energy.energy_columns(row))
    assert row["j_per_output_token"] == 7.0 and energy.energy_flags(row) == ["few_samples", "idle", "power_capped"]
    assert energy.energy_note(row, "en") == (
        "power sampled at 0.4 Hz, idle 30 %, few samples (a rough mean), includes GPU idle power, ran at the power cap")
    assert "電力上限" in energy.energy_note(row, "ja")
    # As a frame cell the mark may be NumPy's bool, or NaN where the reasons are unknown.
    assert "power_capped" in energy.energy_flags({**row, "power_capped": np.bool_(True)})
    assert "power_capped" not in energy.energy_flags({**row, "power_capped": float("nan")})


@pytest.mark.parametrize(("changes", "status"), [
    ({"source": "imported", "gpu_power_w_sum": None}, "no_power_data"),
    ({"source": "measured", "gpu_power_w_sum": None}, "no_power_data"),  # a host without NVML
    ({"source": "emulated"}, "emulated"),  # the emulator has no GPU: the host's power is not its tokens'
    ({"engine": "external: vllm (declared)"}, "external"),
])
def test_no_figure_without_the_power_of_the_tokens(changes: dict[str, Any], status: str) -> None:
    row = {"source": "measured", "engine": "sglang", "duration_s": 10.0, "total_output_tokens": 1000,
           "completed": 10, "gpu_power_w_sum": 700.0, "gpu_power_samples": 40, **changes}
    columns = energy.energy_columns(row)
    assert columns["energy_status"] == status and columns["j_per_output_token"] is None


def _comparison_rows(store: Store, lang: str) -> Any:
    """A measured run with power against an import of the same point without any."""
    measured = points_frame(map(ComparisonPointRow.as_dict, store.points_for_comparison(
        [_measured_run(store, _gpu_rows(500.0))])))
    imported = measured.assign(run_id=99, run_name="imp", source="imported", gpu_power_w_sum=None)
    imported = imported.assign(**energy.energy_columns(imported.iloc[0].to_dict()))
    return build_comparison(pd.concat([measured, imported], ignore_index=True), int(measured["run_id"][0]), [99], lang)


@pytest.mark.parametrize(("lang", "no_data"), [("en", "no power data"), ("ja", "電力データなし")])
def test_every_export_carries_joules_per_token_and_an_import_says_no_power_data(store: Store, lang: str,
                                                                               no_data: str) -> None:
    c = _comparison_rows(store, lang)
    markdown = comparison_markdown(c)
    assert ("J/output token" if lang == "en" else "J/出力トークン") in markdown
    assert "| 1.25 |" in markdown and no_data in markdown
    table = pd.read_csv(io.BytesIO(comparison_csv(c)), comment="#", encoding="utf-8-sig")
    energy_columns = [col for col in table.columns if col.endswith(("J/output token", "J/出力トークン"))]
    assert table[energy_columns[0]].tolist() == [1.25]  # the measured run's column: the exact figure
    assert table[energy_columns[1]].isna().all()
    assert any(no_data in str(v) for v in table.to_numpy().ravel())
    pareto = pareto_points(c.summary)
    assert pareto["j_per_token"].tolist()[0] == 1.25 and pd.isna(pareto["j_per_token"].tolist()[1])
    labels = pd.DataFrame(pareto_chart(pareto, lang).to_dict()["datasets"].popitem()[1])["label"]
    assert sorted(labels) == ["c=8", "c=8 · 1.25 J/tok" if lang == "en" else "c=8 · 1.25 J/トークン"]
    # The deck: the title slide names the run without J/token, a table slide holds the figure.
    deck = Presentation(io.BytesIO(comparison_deck(c, chart_set=[])))
    title = [shape.text_frame.text for shape in deck.slides[0].shapes if shape.has_text_frame]
    assert any(f"#99: {no_data}" in text for text in title)
    label = "J/output token" if lang == "en" else "J/出力トークン"
    cells = [cell.text for slide in deck.slides
             if any(shape.has_text_frame and label in shape.text_frame.text for shape in slide.shapes)
             for shape in slide.shapes if shape.has_table for row in shape.table.rows for cell in row.cells]
    assert "1.25" in cells
