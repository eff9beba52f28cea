"""Model, GPU and configuration presets; the seed's lever notes."""

from __future__ import annotations

import pytest

from domain.flags import known_versions, validate_server_args
from domain.flags.levers import lever_note, lever_notes, parallelism_glossary
from domain.plan.memory_fit import memory_fit_for_args
from domain.plan.presets import CONFIG_PRESETS, GPUS, MODELS, config_preset, custom_gpu, gpu_preset, model_preset_for

SEED_LEVERS = {
    "max-running-requests",
    "chunked-prefill-size",
    "max-prefill-tokens",
    "schedule-policy",
    "mem-fraction-static",
    "num-continuous-decode-steps",
}


def test_model_presets_carry_the_published_config_numbers() -> None:
    big, small = MODELS["qwen3-235b-a22b-fp8"], MODELS["qwen3-30b-a3b-bf16"]
    assert (big.num_layers, big.hidden_size, big.num_attention_heads, big.num_kv_heads, big.head_dim) == (
        94,
        4096,
        64,
        4,
        128,
    )
    assert (big.num_experts, big.experts_per_token, big.moe_intermediate_size, big.vocab_size) == (128, 8, 1536, 151936)
    assert (big.total_params_b, big.active_params_b, big.weight_dtype) == (235.1, 22.2, "fp8")
    assert (small.num_layers, small.hidden_size, small.num_attention_heads, small.num_kv_heads) == (48, 2048, 32, 4)
    assert (small.moe_intermediate_size, small.total_params_b, small.active_params_b) == (768, 30.5, 3.35)


def test_gpu_presets_use_the_memory_nvidia_smi_reports() -> None:
    assert GPUS["H200"].memory_gib == pytest.approx(140.4, abs=0.05)
    assert GPUS["H100"].memory_mib == 81559
    assert 175 < GPUS["B200"].memory_gib < 185
    assert gpu_preset("NVIDIA H200") is GPUS["H200"] and gpu_preset("h100") is GPUS["H100"]
    assert gpu_preset("MI300X") is None
    assert custom_gpu(96).memory_mib == 96 * 1024
    with pytest.raises(ValueError):
        custom_gpu(float("nan"))


@pytest.mark.parametrize(
    ("ref", "key"),
    [
        ("Qwen/Qwen3-235B-A22B-FP8", "qwen3-235b-a22b-fp8"),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "qwen3-235b-a22b-fp8"),
        ("Qwen/Qwen3-235B-A22B-Thinking-2507", "qwen3-235b-a22b-bf16"),
        ("/srv/models/Qwen3-30B-A3B/", "qwen3-30b-a3b-bf16"),
        ("Qwen/Qwen3-30B-A3B-FP8", "qwen3-30b-a3b-fp8"),
    ],
)
def test_plan_model_references_map_to_presets(ref: str, key: str) -> None:
    preset = model_preset_for(ref)
    assert preset is not None and preset.key == key


def test_other_models_have_no_preset() -> None:
    assert model_preset_for("Qwen/Qwen3-32B") is None


def test_the_three_presets_the_issue_names() -> None:
    keys = {p.key for p in CONFIG_PRESETS}
    assert keys == {"qwen3-235b-fp8-8xh200-tp8-ep2", "qwen3-235b-bf16-8xh200-tp8-ep2", "qwen3-30b-bf16-1xh200"}
    fp8 = config_preset("qwen3-235b-fp8-8xh200-tp8-ep2")
    assert (fp8.gpu.key, fp8.gpu_count, fp8.server_args["tp-size"], fp8.server_args["ep-size"]) == ("H200", 8, 8, 2)


@pytest.mark.parametrize("preset", CONFIG_PRESETS, ids=lambda p: p.key)
@pytest.mark.parametrize("version", known_versions())
def test_every_preset_validates_on_every_shipped_version(preset, version: str) -> None:
    args = preset.server_args_for(version)
    report = validate_server_args(args, version, model_dirs=[], model=preset.model.hf_id)
    assert report.issues == (), [i.text("en") for i in report.issues]


@pytest.mark.parametrize(
    ("version", "flag"),
    [
        ("0.4.6.post5", "cuda-graph-max-bs"),
        ("0.5.9", "cuda-graph-max-bs"),
        ("0.5.15.post1", "cuda-graph-max-bs-decode"),
        ("0.5.23", "cuda-graph-max-bs-decode"),
    ],
)
def test_the_cuda_graph_lever_is_named_for_the_version(version: str, flag: str) -> None:
    for preset in CONFIG_PRESETS:
        levers = {name for name, _, _ in preset.levers(version)}
        assert levers == SEED_LEVERS | {flag}, preset.key


@pytest.mark.parametrize("preset", CONFIG_PRESETS, ids=lambda p: p.key)
def test_every_preset_fits_its_gpus(preset) -> None:
    fit = memory_fit_for_args(preset.server_args, preset.model, preset.gpu, gpu_count=preset.gpu_count)
    assert fit.verdict == "fits" and fit.warnings == ()


def test_lever_notes_carry_the_seeds_why_and_caution_in_both_languages() -> None:
    assert {n.flag for n in lever_notes()} == SEED_LEVERS | {"cuda-graph-max-bs-decode"}
    note = lever_note("mem-fraction-static")
    assert note is not None and "activation" in note.caution["ja"] and note.why["en"]
    old = lever_note("cuda-graph-max-bs")
    assert old is not None and old.flag == "cuda-graph-max-bs-decode" and "バージョン" in old.caution["ja"]
    for n in lever_notes():
        assert all(text for text in (n.why["ja"], n.why["en"], n.caution["ja"], n.caution["en"]))


def test_the_parallelism_glossary_explains_each_kind() -> None:
    entries = {e.key: e for e in parallelism_glossary()}
    assert set(entries) == {"tp", "pp", "dp", "ep", "attention_dp"}
    for entry in entries.values():
        assert entry.splits["ja"] and entry.splits["en"] and entry.name["ja"] and entry.name["en"]
