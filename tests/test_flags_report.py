"""The readable check report that ``python -m runner check`` prints, in both languages."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from domain.plan.flag_report import check_configuration, format_check_report
from domain.plan.presets import config_preset

MESSY = {
    "tp-size": 8,
    "enable-dp-attention": True,
    "dp-size": 8,
    "cuda-graph-max-bs": 160,
    "kv-cache-dtype": "fp8_e4m3",
    "load-format": "dummy",
    "speculative-algorithm": "EAGLE3",
    "trust-remote-code": True,
}


def messy_check():
    return check_configuration(
        MESSY, "0.5.23", model_dirs=[Path("/srv/models")], model="Qwen/Qwen3-235B-A22B-FP8",
        gpu_type="H200", gpu_count=8, input_len=4000, output_len=200, concurrency=32,
    )  # fmt: skip


def test_the_english_report_has_every_section() -> None:
    text = format_check_report(messy_check(), "en")
    for part in (
        "Flag check (SGLang 0.5.23)",
        "Errors:",
        "Warnings:",
        "--trust-remote-code",
        "--cuda-graph-max-bs 160 → --cuda-graph-max-bs-decode 160",
        "Rule risk (profile: 2025 rules)",
        "Highest risk: high",
        "breaks rule no_quality_lowering_quantization",
        "random weights",
        "Memory fit (Qwen/Qwen3-235B-A22B-FP8, H200 × 8)",
        "concurrent requests",
    ):
        assert part in text, part


def test_the_japanese_report_is_japanese() -> None:
    text = format_check_report(messy_check(), "ja")
    for part in (
        "フラグの確認",
        "エラー:",
        "警告:",
        "置き換え",
        "最も高いリスク: 高",
        "ルール違反",
        "メモリの見積もり",
    ):
        assert part in text, part


def test_the_report_offers_the_whole_translated_configuration_as_yaml() -> None:
    text = format_check_report(messy_check(), "en")
    block = text.split("server_args with every translation applied:\n", 1)[1].split("\nRule risk", 1)[0]
    translated = yaml.safe_load("\n".join(line[2:] for line in block.splitlines()))
    assert translated["attn-dp-size"] == 8 and translated["cuda-graph-max-bs-decode"] == 160
    assert "enable-dp-attention" not in translated and "cuda-graph-max-bs" not in translated


def test_a_clean_preset_reports_no_problems() -> None:
    preset = config_preset("qwen3-30b-bf16-1xh200")
    check = check_configuration(
        preset.server_args, "0.5.23", model_dirs=[], model=preset.model.hf_id, gpu_type="H200", gpu_count=1
    )
    assert check.ok
    text = check.text("en")
    assert "No flag problems." in text and "No rule is broken." in text and "Fits:" in text


def test_an_unknown_model_skips_the_memory_fit_and_says_so() -> None:
    check = check_configuration({}, "0.5.23", model_dirs=[], model="meta-llama/Llama-3.1-8B", gpu_type="H200")
    assert check.memory is None
    assert "No preset for the model" in check.text("en")
    assert "No flags set" in check.text("en")


@pytest.mark.parametrize("lang", ["ja", "en"])
def test_no_unformatted_placeholders_leak(lang: str) -> None:
    assert "{" not in format_check_report(messy_check(), lang)
