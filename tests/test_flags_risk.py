"""Rule-risk layers (the seed's table) and contest rule profiles."""

from __future__ import annotations

import pytest

from domain.flags import assess_risk, available_profiles, classify_flag, load_schema, newest_version, unclassified_flags
from domain.flags.levers import lever_flags
from domain.flags.risk import RISK_LEVELS, load_profile, risk_layers
from domain.flags.schema import all_schemas

NEWEST = load_schema(newest_version())


def test_every_flag_of_the_newest_schema_has_a_layer_or_is_listed_unclassified() -> None:
    unclassified = set(unclassified_flags(NEWEST))
    for name in NEWEST.names:
        assert (classify_flag(name) is None) == (name in unclassified), name
    assert len(unclassified) <= 0.10 * len(NEWEST.names)


def test_older_schemas_are_covered_too() -> None:
    for schema in all_schemas():
        assert len(unclassified_flags(schema)) <= 0.10 * len(schema.names), schema.version


def layer_of(flag: str) -> str:
    layer = classify_flag(flag)
    assert layer is not None, f"{flag} is unclassified"
    return layer.id


def test_all_speculative_flags_are_speculative() -> None:
    flags = sorted(n for n in NEWEST.names if n.startswith("speculative-") and n != "speculative-draft-kv-cache-dtype")
    assert len(flags) >= 35
    assert {layer_of(f) for f in flags} == {"speculative"}


@pytest.mark.parametrize(
    ("flag", "layer"),
    [
        ("quantization", "quantization"),
        ("kv-cache-dtype", "quantization"),
        ("modelopt-quant", "quantization"),
        ("enable-torch-compile", "experimental"),
        ("enable-torch-compile-debug-mode", "experimental"),
        ("torch-compile-max-bs", "experimental"),
        ("disaggregation-mode", "disaggregation"),
        ("disaggregation-transfer-backend", "disaggregation"),
        ("tp-size", "parallelism"),
        ("tensor-parallel-size", "parallelism"),
        ("pp-size", "parallelism"),
        ("dp-size", "parallelism"),
        ("ep-size", "parallelism"),
        ("ep", "parallelism"),
        ("attn-dp-size", "parallelism"),
        ("enable-dp-attention", "parallelism"),
        ("moe-a2a-backend", "parallelism"),
        ("disable-radix-cache", "cache"),
        ("enable-hierarchical-cache", "cache"),
        ("hicache-ratio", "cache"),
        ("context-length", "bench_conditions"),
    ],
)
def test_the_layers_the_issue_requires(flag: str, layer: str) -> None:
    assert layer_of(flag) == layer


def test_every_disaggregation_flag_is_classified_as_disaggregation() -> None:
    flags = [n for n in NEWEST.names if n.startswith("disaggregation-")]
    assert flags and {layer_of(f) for f in flags} == {"disaggregation"}


def test_the_seeds_levers_are_serving_settings_in_every_spelling() -> None:
    for flag in lever_flags():
        assert layer_of(flag) == "serving", flag


def test_layers_follow_the_seed_table_and_carry_both_languages() -> None:
    table = risk_layers()
    seed = {layer.id: layer.risk for layer in table.layers if layer.origin == "seed"}
    assert seed == {
        "bench_conditions": "low",
        "serving": "low_medium",
        "parallelism": "medium",
        "cache": "medium",
        "disaggregation": "medium_high",
        "speculative": "high",
        "quantization": "high",
        "experimental": "high",
    }
    assert table.layer("speculative").name["ja"] == "推測系"
    for layer in table.layers:
        assert layer.risk in RISK_LEVELS
        assert layer.name["ja"] and layer.name["en"] and layer.note["ja"] and layer.note["en"]


def test_every_explicitly_listed_flag_exists_in_some_shipped_schema() -> None:
    """A typo in the table would leave the real flag to a pattern, or unclassified."""
    known = set().union(*(s.names for s in all_schemas()))
    listed = {flag for layer in risk_layers().layers for flag in layer.flags}
    # Flags that lived only in releases between the shipped ones (0.4.10, 0.5.3); the drift table names them.
    between = {
        "enable-flashinfer-cutedsl-moe",
        "enable-flashinfer-cutlass-moe",
        "enable-flashinfer-mxfp4-moe",
        "enable-flashinfer-trtllm-moe",
        "enable-triton-kernel-moe",
        "nsa-prefill",
        "nsa-decode",
    }
    assert sorted(listed - known - between) == []


# -- assessment -------------------------------------------------------------------------------------


def test_a_plain_serving_configuration_is_low_medium_and_breaks_nothing() -> None:
    report = assess_risk({"max-running-requests": 64, "mem-fraction-static": 0.85}, "0.5.23")
    assert report.highest == "low_medium" and report.ok and report.unclassified == ()


def test_2025_bans_quality_lowering_quantization_and_experimental_features() -> None:
    report = assess_risk(
        {"kv-cache-dtype": "fp8_e4m3", "enable-torch-compile": True, "quantization": "w8a8_int8", "tp-size": 8},
        "0.5.23",
        "2025",
    )
    assert report.highest == "high"
    assert {(b.rule, b.flag) for b in report.broken} == {
        ("no_quality_lowering_quantization", "kv-cache-dtype"),
        ("no_quality_lowering_quantization", "quantization"),
        ("no_experimental_features", "enable-torch-compile"),
    }
    assert all(b.text("ja") and b.text("en") for b in report.broken)


def test_a_bf16_kv_cache_and_switched_off_features_break_nothing() -> None:
    args = {"kv-cache-dtype": "bf16", "enable-torch-compile": False, "no-enable-tf32-matmul": True}
    report = assess_risk(args, "0.5.23", "2025")
    assert report.ok and [f.flag for f in report.flags] == ["kv-cache-dtype"]


def test_an_unknown_flag_is_unclassified_not_silently_low() -> None:
    report = assess_risk({"some-future-flag": True}, "0.5.23")
    assert report.unclassified == ("some-future-flag",)
    assert report.highest is None
    assert "unclassified" in report.flags[0].text("en")


def test_dummy_weights_are_always_flagged_and_more_strongly_with_speculative_decoding() -> None:
    plain = assess_risk({"load-format": "dummy"}, "0.5.23")
    assert [n.code for n in plain.notes] == ["dummy_weights"]
    spec = assess_risk({"load-format": "dummy", "speculative-algorithm": "EAGLE3"}, "0.5.23")
    assert [n.code for n in spec.notes] == ["dummy_weights_speculative"]
    assert "speculative" in spec.notes[0].text("en")
    assert assess_risk({"load-format": "safetensors"}, "0.5.23").notes == ()


def test_both_profiles_exist_and_the_2026_one_is_a_draft() -> None:
    assert {"2025", "2026-draft"} <= set(available_profiles())
    draft = load_profile("2026-draft")
    assert draft.status == "draft" and load_profile("2025").status == "final"
    assert [r.id for r in draft.rules] == [r.id for r in load_profile("2025").rules]
