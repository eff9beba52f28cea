"""The estimator (domain/estimate/): its command line, its cross-validated error against
public measurements, what it says bounds a point, and that the emulator runs the same model."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from domain.estimate.calibrate import Measured, cross_validate, load_measured
from domain.estimate.constants import calibration_for
from domain.estimate.estimator import estimate_point, setup_for
from domain.estimate.sizing import GPUS
from domain.estimate.step_time import BOUNDS
from domain.flags.schema import SCHEMA_DIR
from emulator import predict, steady_state
from runner import estimate_cmd

MODEL = "Qwen/Qwen3-235B-A22B-FP8"
# The targets for the 24 SGLang H200 rows, as fractions.
TTFT_TARGET, TPOT_TARGET = 0.25, 0.10
JSON_KEYS = {"scenario", "input_len", "output_len", "concurrency", "ttft_ms", "tpot_ms", "output_tok_s", "bound"}


def _plan_yaml(row: Measured, **server_args: object) -> str:
    plan = {
        "name": f"row {row.isl}/{row.osl} c{row.concurrency} tp{row.tp_size}", "engine": "sglang", "model": MODEL,
        "gpu": {"type": "H200", "count": row.tp_size}, "server_args": {"tp-size": row.tp_size, **server_args},
        "benchmark": {"scenarios": [{"name": "row", "input_len": row.isl, "output_len": row.osl}],
                      "concurrency": [row.concurrency], "repeats": 2},
    }
    return yaml.safe_dump(plan, sort_keys=False)


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m runner")
    parser.add_argument("--lang", choices=["ja", "en"], default="en")
    estimate_cmd.add_parser(parser.add_subparsers(dest="command", required=True))
    return estimate_cmd.run(parser.parse_args(argv))


# -- the command line --------------------------------------------------------------------------
def test_cli_json_for_a_plan_built_from_a_measured_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    row = next(r for r in load_measured("sglang") if (r.isl, r.osl, r.tp_size) == (2000, 1000, 4))
    plan = tmp_path / "plan.yaml"
    plan.write_text(_plan_yaml(row), encoding="utf-8")
    assert _cli(["estimate", str(plan), "--json"]) == 0
    points = json.loads(capsys.readouterr().out)
    assert len(points) == 1  # two repeats of one point are one estimate
    point = points[0]
    assert JSON_KEYS <= point.keys()
    assert (point["scenario"], point["input_len"], point["output_len"], point["concurrency"]) == \
        ("row", row.isl, row.osl, row.concurrency)
    assert point["bound"] in BOUNDS
    assert point["ttft_ms"] == pytest.approx(row.ttft_ms, rel=TTFT_TARGET)
    assert point["tpot_ms"] == pytest.approx(row.tpot_ms, rel=TPOT_TARGET)
    assert point["output_tok_s"] == pytest.approx(
        row.concurrency * row.osl / (point["ttft_ms"] + (row.osl - 1) * point["tpot_ms"]) * 1e3, rel=1e-6)
    assert "cross-validated" in point["estimated_by"]


def test_cli_table_says_it_is_an_estimate_in_both_languages(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    row = load_measured("sglang")[0]
    plan = tmp_path / "plan.yaml"
    plan.write_text(_plan_yaml(row), encoding="utf-8")
    assert _cli(["--lang", "ja", "estimate", str(plan)]) == 0
    ja = capsys.readouterr().out
    assert "推定値（実測ではありません）" in ja and "交差検証" in ja
    assert _cli(["--lang", "en", "estimate", str(plan)]) == 0
    en = capsys.readouterr().out.splitlines()
    assert en[0].startswith("Estimate (not a measurement)") and "cross-validated" in en[1]
    assert en[-1].split()[:4] == ["row", str(row.isl), str(row.osl), str(row.concurrency)]


def test_cli_refuses_what_it_cannot_estimate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(_plan_yaml(load_measured("sglang")[0]).replace(MODEL, "meta-llama/Llama-3.1-8B"),
                    encoding="utf-8")
    assert _cli(["estimate", str(plan)]) == 1
    assert "cannot estimate this plan" in capsys.readouterr().err
    plan.write_text("name: x\nengine: nope\n", encoding="utf-8")
    assert _cli(["estimate", str(plan)]) == 1


# -- accuracy --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sglang_cv():
    return cross_validate("sglang")


def test_cross_validated_tpot_error_meets_the_target(sglang_cv) -> None:
    assert sglang_cv.rows == 24 and len(sglang_cv.predictions) == 24  # every row predicted once, held out
    assert sglang_cv.tpot_mae <= TPOT_TARGET, sglang_cv.per_group


def test_cross_validated_ttft_error_meets_the_target(sglang_cv) -> None:
    assert sglang_cv.ttft_mae <= TTFT_TARGET, sglang_cv.per_group


def test_the_data_file_states_the_error_it_has(sglang_cv) -> None:
    cal = calibration_for(GPUS["H200"], "sglang")
    assert not cal.borrowed and cal.cv_rows == sglang_cv.rows
    assert cal.cv_ttft_mae_pct == pytest.approx(sglang_cv.ttft_mae * 100, abs=0.5)
    assert cal.cv_tpot_mae_pct == pytest.approx(sglang_cv.tpot_mae * 100, abs=0.5)
    assert cal.ceilings.source == "benchdeck device session 2026-11, torch on 1×H200"
    assert cal.ceilings.hbm_bytes_per_s == 4239e9 and cal.ceilings.fp8_flops == 1420e12


def test_fractions_stay_under_their_ceilings() -> None:
    c = calibration_for(GPUS["H200"], "sglang").constants
    for fraction in (c.weights_bw_fraction, c.kv_bw_fraction, c.gemm_fraction, c.attention_fraction):
        assert 0 < fraction <= 1


# -- what bounds a point ---------------------------------------------------------------------------
def _bound(server_args: dict[str, object], isl: int, osl: int, concurrency: int, model: str = MODEL) -> str:
    return estimate_point(setup_for(model, "H200", server_args), isl, osl, concurrency).bound


def test_a_tiny_running_cap_is_the_bound() -> None:
    assert _bound({"tp-size": 4}, 1000, 500, 8) not in ("running_cap", "kv_pool")
    assert _bound({"tp-size": 4, "max-running-requests": 4}, 1000, 500, 8) == "running_cap"
    capped = estimate_point(setup_for(MODEL, "H200", {"tp-size": 4, "max-running-requests": 4}), 1000, 500, 8)
    assert capped.batch == 4


def test_long_prompts_in_a_small_pool_are_bound_by_the_pool() -> None:
    args = {"tp-size": 4, "mem-fraction-static": 0.45}
    assert _bound({"tp-size": 4}, 30_000, 1000, 16) != "kv_pool"
    assert _bound(args, 30_000, 1000, 16) == "kv_pool"
    assert _bound(args, 1000, 1000, 16) != "kv_pool"


def test_large_batches_move_the_bound_to_compute_or_kv_reads() -> None:
    small = estimate_point(setup_for(MODEL, "H200", {"tp-size": 4}), 1000, 500, 2)
    large = estimate_point(setup_for(MODEL, "H200", {"tp-size": 4}), 4000, 1000, 256)
    assert small.bound in ("step_overhead", "communication")
    assert large.bound in ("compute", "kv_bandwidth")
    assert large.output_tok_s > 2 * small.output_tok_s
    assert sum(large.shares.values()) == pytest.approx(1.0)
    prefill_heavy = estimate_point(setup_for("Qwen/Qwen3-30B-A3B", "H200", {}), 8000, 2, 64)
    assert prefill_heavy.bound == "compute"


# -- one model, two users --------------------------------------------------------------------------
def _emulator_argv(row: Measured) -> list[str]:
    return ["--model-path", MODEL, "--tp-size", str(row.tp_size), "--emulate-schema-dir", str(SCHEMA_DIR)]


def test_the_emulator_runs_the_estimators_model() -> None:
    """The emulator's scheduler, on a virtual clock, lands within 15 % of the estimator for
    every measured configuration, those whose round prefills in several steps included (both
    stream a prompt's first token by the overlap scheduler's rule: when the next prefill step
    of the round ends, emulator/scheduler.py)."""
    rows = load_measured("sglang")
    assert sum(r.isl * r.concurrency > 8192 for r in rows) >= 8  # multi-step prefill rounds
    for row in rows:
        setup = setup_for(MODEL, "H200", {"tp-size": row.tp_size})
        est = estimate_point(setup, row.isl, row.osl, row.concurrency)
        sim = predict(row.isl, row.osl, row.concurrency, _emulator_argv(row), num_prompts=2 * row.concurrency)
        assert sim.median_ttft_ms == pytest.approx(est.ttft_ms, rel=0.15), row
        assert sim.median_tpot_ms == pytest.approx(est.tpot_ms, rel=0.15), row
        closed = steady_state(row.isl, row.osl, row.concurrency, _emulator_argv(row))
        assert closed["tpot_ms"] == pytest.approx(est.tpot_ms) and closed["bound"] == est.bound


def test_an_engine_that_mixes_prefill_into_decode_gets_the_mixed_model() -> None:
    """vLLM V1 rides prompt chunks in decode steps: a prompt waits for its own steps, not
    for the whole round's prefill, so its TTFT stays far below SGLang's at concurrency 16."""
    sglang = estimate_point(setup_for(MODEL, "H200", {"tp-size": 4}), 1000, 1000, 16)
    vllm_setup = setup_for(MODEL, "H200", {"tp-size": 4}, engine="vllm")
    vllm = estimate_point(vllm_setup, 1000, 1000, 16)
    assert vllm_setup.calibration.serving == "mixed" and vllm_setup.calibration.borrowed
    assert vllm.ttft_ms < sglang.ttft_ms / 4
    assert vllm.tpot_ms > vllm.itl_ms  # steps carrying a prompt chunk are slower than pure decodes
    assert sum(vllm.shares.values()) == pytest.approx(1.0)
