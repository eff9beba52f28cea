"""Validity badges that can fire and that mean something (domain/results/validity.py):
each badge fires on a case built for it and stays silent on a clean point; the length
checks on the server's own token counts allow for the random spread of range ratio 0 and
still catch a real shift; throttle reasons are a bitwise OR with the power cap at full load
described as normal; host health comes from the host's record; the curve's cold first point
and super-linear efficiency are badged; every badge is explained in both languages."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest

from domain.core.i18n import LANGUAGES
from domain.results.frames import point_row
from domain.results.validity import (
    BADGE_COLUMNS,
    BADGES,
    badge_explanation,
    badge_label,
    badges_by_point,
    curve_badges,
    expected_length,
    host_health,
    length_spread,
    validity_badges,
)

ISL, OSL, CONCURRENCY = 128, 128, 8
PROMPTS = 10 * CONCURRENCY


def clean(**overrides: Any) -> dict[str, Any]:
    """A measured point with nothing wrong: the server served exactly what was asked."""
    row: dict[str, Any] = {
        "run_id": 1, "scenario": "short", "concurrency": CONCURRENCY, "repeat_idx": 0, "source": "measured",
        "input_len": ISL, "output_len": OSL, "random_range_ratio": 1.0, "dataset": "random-ids", "ignore_eos": True,
        "completed": PROMPTS, "requested": PROMPTS, "achieved_concurrency": 0.97 * CONCURRENCY,
        "server_prompt_tokens": ISL * PROMPTS, "server_generation_tokens": OSL * PROMPTS,
        "gpu_clock_event_reasons_any": 0x1, "gpu_util_mean": 95.0, "host_healthy": True, "host_health_detail": "",
    }
    row.update(overrides)
    return row


def badges_of(**overrides: Any) -> dict[str, str]:
    table = validity_badges(pd.DataFrame([clean(**overrides)]))
    return dict(zip(table["badge"], table["detail"], strict=True))


def test_a_clean_point_earns_no_badge() -> None:
    assert badges_of() == {}


@pytest.mark.parametrize(
    ("overrides", "badge"),
    [
        ({"achieved_concurrency": 6.0}, "low_concurrency"),
        ({"server_generation_tokens": 100 * PROMPTS}, "output_shortfall"),
        ({"server_prompt_tokens": 140 * PROMPTS}, "input_length_off"),
        ({"server_prompt_tokens": None, "server_generation_tokens": None}, "lengths_unchecked"),
        ({"gpu_clock_event_reasons_any": 0x1 | 0x40}, "throttled"),
        ({"gpu_clock_event_reasons_any": 0x4}, "power_capped"),
        ({"host_healthy": False, "host_health_detail": "GPU-a: 2 uncorrected ECC errors"}, "unhealthy_host"),
        ({"source": "emulated"}, "emulated"),
    ],
)
def test_each_badge_fires_alone(overrides: dict[str, Any], badge: str) -> None:
    assert list(badges_of(**overrides)) == [badge]


def test_badges_by_point_merges_repeats() -> None:
    rows = [clean(repeat_idx=0, host_healthy=False), clean(repeat_idx=1, source="emulated", host_healthy=False)]
    merged = badges_by_point(validity_badges(pd.DataFrame(rows)))
    assert len(merged) == 1 and merged.iloc[0]["badges"] == ["emulated", "unhealthy_host"]


def test_failed_requests_badge_the_point_and_leave_the_lengths_unchecked() -> None:
    fired = badges_of(completed=PROMPTS - 1)
    assert fired == {"incomplete": f"{PROMPTS - 1}/{PROMPTS}", "lengths_unchecked":
                     "failed requests are in the server's counts"}


def test_an_imported_point_says_its_lengths_went_unchecked() -> None:
    fired = badges_of(source="imported", server_prompt_tokens=None, server_generation_tokens=None)
    assert fired == {"lengths_unchecked": "no server token counts", "imported": ""}


def test_a_dataset_with_its_own_lengths_is_not_held_to_the_asked_ones() -> None:
    assert badges_of(dataset="sharegpt", server_prompt_tokens=1)["lengths_unchecked"].startswith("dataset sharegpt")


def test_length_details_name_the_numbers_and_the_cause() -> None:
    assert badges_of(server_prompt_tokens=140 * PROMPTS)["input_length_off"] == "140.0/128.0 (+9.4 %)"
    assert badges_of(server_generation_tokens=60 * PROMPTS, ignore_eos=False)["output_shortfall"] == \
        "60.0/128.0 (eos_not_ignored)"
    assert "server_cap" in badges_of(server_generation_tokens=60 * PROMPTS)["output_shortfall"]


# -- range ratio 0: the sampling spread of the server's own counts --------------------------------------------

# The plan's defaults (domain/plan/run_plan.py): the three preset scenarios, the concurrency
# grid, 10 prompts per concurrency slot.
DEFAULT_SCENARIOS = ((128, 128), (4000, 200), (1000, 4000))
DEFAULT_GRID = (1, 2, 4, 8, 12, 16, 24, 32)


def simulated_points(count: int, ratio: float, *, prompt_shift: int = 0, seed: int = 7) -> pd.DataFrame:
    """Points whose server counts are what bench_serving's ``compute_random_lens`` draws
    (integers uniform in [max(int(L*ratio), 1), L]) for every request, plus ``prompt_shift``
    tokens per prompt (a chat template, say)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        (isl, osl), c = DEFAULT_SCENARIOS[i % 3], DEFAULT_GRID[(i // 3) % len(DEFAULT_GRID)]
        n = 10 * c
        drawn = [rng.integers(max(int(length * ratio), 1), length + 1, size=n).sum() for length in (isl, osl)]
        rows.append(clean(run_id=i, concurrency=c, input_len=isl, output_len=osl, random_range_ratio=ratio,
                          completed=n, requested=n, achieved_concurrency=c,
                          server_prompt_tokens=drawn[0] + prompt_shift * n, server_generation_tokens=drawn[1]))
    return pd.DataFrame(rows)


def test_range_ratio_0_does_not_fire_falsely_over_200_points() -> None:
    badges = validity_badges(simulated_points(200, ratio=0.0))
    assert badges.empty, badges.head()


def test_the_old_fixed_5_percent_band_would_have_fired_on_the_same_points() -> None:
    """Why the band is derived from the spread: on the same honest points, a fixed ±5 % on
    the mean fires on most of the small ones (the issue measured 58–78 %)."""
    points = simulated_points(200, ratio=0.0)
    served = points["server_prompt_tokens"] / points["completed"]
    expected = points["input_len"].map(lambda length: expected_length(length, 0.0))
    assert ((served - expected).abs() > 0.05 * expected).mean() > 0.4


def test_a_real_shift_fires_where_the_requests_are_enough_to_see_it() -> None:
    """+30 tokens per prompt: plain at ratio 1, and at ratio 0 once the spread of the mean
    (sigma/sqrt(n)) is well under the shift."""
    assert (validity_badges(simulated_points(48, ratio=1.0, prompt_shift=30))["badge"] == "input_length_off").all()
    points = simulated_points(48, ratio=0.0, prompt_shift=30)
    fired = set(validity_badges(points).query("badge == 'input_length_off'")["run_id"])
    short = points[points["input_len"] == 128]
    visible = short[[30 > 4 * length_spread(128, 0.0, n) + 0.05 * 64.5 for n in short["completed"]]]
    assert len(visible) >= 6 and set(visible["run_id"]) <= fired


def test_expected_length_follows_bench_servings_draw() -> None:
    assert expected_length(128, 1.0) == 128 and expected_length(128, 0.0) == 64.5  # [1, 128]
    assert expected_length(128, 0.5) == 96 and length_spread(128, 1.0, 10) == 0.0
    assert length_spread(128, 0.0, 1) == pytest.approx(np.arange(1, 129).std())


# -- throttling ----------------------------------------------------------------------------------------------------

def test_throttle_names_every_reason_in_the_or() -> None:
    fired = badges_of(gpu_clock_event_reasons_any=0x8 | 0x40 | 0x80)
    assert fired == {"throttled": "hw_slowdown, hw_thermal, hw_power_brake"}
    assert badges_of(gpu_clock_event_reasons_any=0x1 | 0x2 | 0x10) == {}  # idle, app clocks, sync boost


def test_the_power_cap_at_full_load_is_normal_and_below_it_a_throttle() -> None:
    full = badges_of(gpu_clock_event_reasons_any=0x4)
    assert full == {"power_capped": "power cap at full load (GPU util 95 %): normal"}
    light = badges_of(gpu_clock_event_reasons_any=0x4, gpu_util_mean=30.0)
    assert light == {"throttled": "sw_power_cap below full load (GPU util 30 %)"}
    assert badges_of(gpu_clock_event_reasons_any=0x4 | 0x40) == {
        "throttled": "hw_thermal", "power_capped": "power cap at full load (GPU util 95 %): normal"}


# -- frames: what the comparison query gives becomes the frame's columns ---------------------------------------------

def _db_row(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": 4242, "run_id": 3, "scenario": "short", "concurrency": 8, "repeat_idx": 0, "source": "measured",
        "conditions": json.dumps({"input_len": ISL, "output_len": OSL}), "server_args": "{}", "topology": "{}",
        "host_info": json.dumps({"hostname": "h", "gpu": {"available": True, "source": "measured",
                                                         "declared": {"type": "H200"},
                                                         "gpus": [{"name": "NVIDIA H200"}]}}),
        "gpu_clock_event_reasons_max": 0x40, "gpu_clock_event_reasons_any": 0x44,
        "server_prompt_tokens": 10240.0, "server_generation_tokens": 10240.0,
    }
    row.update(overrides)
    return row


def test_the_frame_carries_the_point_id_the_or_and_the_servers_counts() -> None:
    out = point_row(_db_row())
    assert out["point_id"] == 4242
    assert (out["gpu_clock_event_reasons_any"], out["server_prompt_tokens"], out["server_generation_tokens"]) == (
        0x44, 10240.0, 10240.0)
    assert out["host_healthy"] is None  # a record without health readings cannot say


# -- host health ------------------------------------------------------------------------------------------------------

def _host(health: dict[str, Any] | None = None, name: str = "NVIDIA H200") -> dict[str, Any]:
    info: dict[str, Any] = {"gpu": {"source": "measured", "declared": {"type": "H200"}, "gpus": [{"name": name}]},
                            "run_gpus": {"gpus": [{"name": name}]}}
    if health is not None:
        info["health"] = health
    return info


def _gpu(**fields: Any) -> dict[str, Any]:
    return {"uuid": "GPU-a", "clock_event_reasons": 0x1, "ecc_uncorrected": 0, "remapped_rows_pending": False,
            "remapped_rows_failure": False, **fields}


def test_host_health_is_unknown_without_a_record_or_its_readings() -> None:
    assert host_health(None) == (None, "")
    assert host_health(_host()) == (None, "")
    assert host_health(_host({"checked": True, "gpus": [_gpu()], "foreign_processes": []})) == (True, "")


@pytest.mark.parametrize(
    ("health", "name", "detail"),
    [
        ({"checked": True, "gpus": [_gpu(ecc_uncorrected=2)]}, "NVIDIA H200", "GPU-a: 2 uncorrected ECC errors"),
        ({"checked": True, "gpus": [_gpu(clock_event_reasons=0x1 | 0x40)]}, "NVIDIA H200", "GPU-a: hw_thermal at idle"),
        ({"checked": True, "gpus": [_gpu(remapped_rows_pending=True)]}, "NVIDIA H200",
         "GPU-a: memory row remapping pending or failed (reset needed)"),
        ({"checked": True, "gpus": [], "foreign_processes": [[0, 4711, 20.0]]}, "NVIDIA H200",
         "foreign GPU process pid 4711 (20.0 GB)"),
        (None, "NVIDIA A100-SXM4-80GB", "declared H200, NVML names NVIDIA A100-SXM4-80GB"),
    ],
)
def test_each_host_problem_makes_the_host_unhealthy(health: dict[str, Any] | None, name: str, detail: str) -> None:
    assert host_health(_host(health, name)) == (False, detail)


def test_an_unhealthy_record_reaches_the_badge_through_the_frame() -> None:
    info = _host({"checked": True, "gpus": [_gpu(ecc_uncorrected=1)]})
    frame = pd.DataFrame([point_row(_db_row(host_info=json.dumps(info)))])
    badges = validity_badges(frame)
    fired = set(zip(badges["badge"], badges["detail"], strict=True))
    assert ("unhealthy_host", "GPU-a: 1 uncorrected ECC errors") in fired


# -- the curve's badges ------------------------------------------------------------------------------------------------

def _scaling(**columns: list[Any]) -> pd.DataFrame:
    """What curve.scaling_efficiency gives for the real 0.5.23 sweep of the issue (c=1 cold)."""
    base = {"run_id": [1] * 5, "scenario": ["short"] * 5, "concurrency": [1, 2, 4, 8, 16],
            "throughput": [35.0, 783.0, 1500.0, 2800.0, 4700.0], "efficiency": [1.0, 11.19, 10.7, 10.0, 8.39],
            "cold": [True, False, False, False, False], "super_linear": [False, True, True, True, True]}
    base.update(columns)
    return pd.DataFrame(base)


def test_a_cold_first_point_and_super_linear_efficiency_are_badged() -> None:
    badges = curve_badges(_scaling())
    assert list(badges.columns) == list(BADGE_COLUMNS) and badges["repeat_idx"].isna().all()
    cold = badges[badges["badge"] == "cold_first_point"]
    assert list(cold["concurrency"]) == [1] and cold.iloc[0]["detail"] == "35 tok/s at c=1, 783 at c=2"
    assert list(badges[badges["badge"] == "super_linear"]["detail"])[:1] == ["efficiency 1119 %"]


def test_the_curves_own_scaling_frame_gives_the_badges() -> None:
    """The issue's real 0.5.23 sweep through curve.scaling_efficiency: the cold c=1 point is
    badged and left out; kept by the user, the points above it turn super-linear."""
    from domain.results.curve import scaling_efficiency

    summary = pd.DataFrame({"run_id": 1, "scenario": "short", "concurrency": [1, 2, 4, 8, 16],
                            "output_tok_s": [35.0, 783.0, 1500.0, 2800.0, 4700.0]})
    left_out = curve_badges(scaling_efficiency(summary))
    assert list(zip(left_out["badge"], left_out["concurrency"], strict=True)) == [("cold_first_point", 1)]
    kept = curve_badges(scaling_efficiency(summary, keep=[(1, "short", 1)]))
    assert set(kept["badge"]) == {"cold_first_point", "super_linear"}
    assert set(kept[kept["badge"] == "super_linear"]["concurrency"]) == {2, 4, 8, 16}


def test_a_clean_curve_earns_no_curve_badge() -> None:
    quiet = _scaling(cold=[False] * 5, super_linear=[False] * 5, efficiency=[1.0, 0.98, 0.95, 0.9, 0.8])
    assert curve_badges(quiet).empty


# -- strings -----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("badge", BADGES)
def test_every_badge_has_a_label_and_a_one_sentence_explanation(badge: str) -> None:
    for lang in LANGUAGES:
        assert badge_label(badge, lang)
        sentence = badge_explanation(badge, lang)
        end = "。" if lang == "ja" else "."
        assert sentence.endswith(end) and sentence.count(end) == 1, sentence


# -- end to end: the runner's sampler, the comparison query and the frame ---------------------------------------------

@pytest.mark.sglang
@pytest.mark.slow
def test_a_measured_sweep_carries_the_servers_counts_of_its_measured_requests(store: Any, env: dict[str, str]) -> None:
    """Range ratio 0 against the emulator with the real bench_serving: per point, the
    server's own counts over the measured window equal what the client sent (random-ids:
    the drawn lengths) and got (the server's completion_tokens), the warmup left out; no
    length badge fires; each row carries its point id."""
    from tests.support.actors import operator
    from tests.support.runner_harness import MARK, assert_nothing_left, run_burst, runner_env, small_plan

    plan = small_plan(benchmark={"scenarios": [{"name": "short", "input_len": 96, "output_len": 48}],
                                 "concurrency": [1, 4], "num_prompts": "4x", "warmup": "1x", "random_range_ratio": 0.0})
    run_id, _ = store.submit_run(plan, submitted_by=operator("test"))
    renv = runner_env(env)
    assert run_burst(renv) == 0 and store.get_run(run_id).status == "succeeded"
    rows = store.points_for_comparison([run_id])
    frame = pd.DataFrame([point_row(r.as_dict()) for r in rows])
    assert list(frame["point_id"]) == [r.id for r in rows] and frame["point_id"].is_unique
    assert (frame["server_prompt_tokens"] == frame["total_input_tokens"]).all(), frame
    assert (frame["server_generation_tokens"] == frame["total_output_tokens"]).all(), frame
    assert (frame["server_prompt_tokens"] < frame["completed"] * 96).all()  # ratio 0 drew shorter prompts
    badges = validity_badges(frame)
    assert not set(badges["badge"]) & {"input_length_off", "output_shortfall", "lengths_unchecked"}, badges
    assert_nothing_left(renv[MARK])


@pytest.mark.sglang
@pytest.mark.slow
def test_under_pd_each_count_comes_from_the_role_that_does_the_work(store: Any, env: dict[str, str]) -> None:
    """1P1D behind the real router: both roles see every request, yet the frame's counts
    equal what the client sent and got once (prompts on prefill, generated tokens on decode)."""
    from tests.support.actors import operator
    from tests.support.runner_harness import MARK, assert_nothing_left, run_burst, runner_env, small_plan

    plan = small_plan(gpu={"type": "H200", "count": 2}, server_args={"max-running-requests": 8,
                                                                      "mem-fraction-static": 0.85},
                      topology={"kind": "pd", "prefill": {"count": 1}, "decode": {"count": 1}},
                      benchmark={"scenarios": [{"name": "short", "input_len": 64, "output_len": 32}],
                                 "concurrency": [2], "num_prompts": "4x", "warmup": "1x"})
    run_id, _ = store.submit_run(plan, submitted_by=operator("test"))
    renv = runner_env(env, BENCHDECK_STARTUP_TIMEOUT_S="120")
    assert run_burst(renv, timeout=480) == 0 and store.get_run(run_id).status == "succeeded"
    deltas = {(t.source, t.metric) for t in store.telemetry_of(run_id) if t.metric.endswith("_delta")}
    # Token counts on the role that does the work; the decode server's CUDA-graph passes
    # (sglang:cuda_graph_passes_total) on decode too, never on prefill.
    assert deltas == {("server:prefill-0", "prompt_tokens_delta"), ("server:decode-0", "generation_tokens_delta"),
                      ("server:decode-0", "graph_decode_passes_delta")}
    [point] = [point_row(r.as_dict()) for r in store.points_for_comparison([run_id])]
    assert point["server_prompt_tokens"] == point["total_input_tokens"] == 8 * 64
    assert point["server_generation_tokens"] == point["total_output_tokens"] == 8 * 32
    assert_nothing_left(renv[MARK])
