"""Two separately written KV sizings check each other: the memory-fit pre-check
(domain/plan/memory_fit.py) and the emulator's own (emulator/sizing.py) agree on
max_total_num_tokens for every preset configuration."""

from __future__ import annotations

import pytest

from domain.flags.argv import render_argv
from domain.flags.schema import SCHEMA_DIR
from domain.plan.memory_fit import memory_fit_for_args
from domain.plan.presets import CONFIG_PRESETS, PRESET_SGLANG_VERSION
from emulator import config_from_argv


@pytest.mark.parametrize("preset", CONFIG_PRESETS, ids=lambda p: p.key)
def test_memory_fit_agrees_with_the_emulator(preset) -> None:
    argv = ["--model-path", preset.model.hf_id, "--emulate-schema-dir", str(SCHEMA_DIR),
            *render_argv(preset.server_args, PRESET_SGLANG_VERSION),
            "--emulate-gpu", preset.gpu.key, "--emulate-gpu-count", str(preset.gpu_count)]
    emulator_tokens = config_from_argv(argv).max_total_num_tokens
    estimate = memory_fit_for_args(dict(preset.server_args), preset.model, preset.gpu, gpu_count=preset.gpu_count)
    assert estimate.verdict == "fits"
    assert estimate.kv_tokens == pytest.approx(emulator_tokens, rel=0.05)
