"""Model, GPU and configuration presets for the Qwen3 MoE team.

Model numbers are the models' ``config.json`` values (model cards of
``Qwen/Qwen3-235B-A22B[-FP8]`` and ``Qwen/Qwen3-30B-A3B[-FP8]``).
GPU memory is what ``nvidia-smi`` reports as total, in MiB, because that is what SGLang
sizes its pools from, not the marketing figure.

The configuration presets are starting points to sweep from (the seed: "固定値を丸写し
しないで、sweepする必要があります"), written for the newest SGLang and re-targeted to
older versions through the drift table.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from domain.flags.drift import retarget
from domain.flags.levers import LeverNote, lever_note
from domain.plan.run_plan import GpuSpec, RunPlan, quick_benchmark

WeightDtype = Literal["bf16", "fp8"]
MIB = 1 << 20
GIB = 1 << 30
_NORMS_PER_LAYER = 2  # input and post-attention RMSNorm


@dataclass(frozen=True)
class ModelPreset:
    """A model's shape, as far as memory sizing needs it."""

    key: str
    hf_id: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    num_experts: int
    experts_per_token: int
    moe_intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    total_params_b: float  # published total, in billions: what the weights take
    active_params_b: float  # per token; NOT what the weights take (the seed's warning)
    weight_dtype: WeightDtype
    quant_block: int | None = None  # FP8 block-wise quantization block (128x128)

    @property
    def total_params(self) -> int:
        return round(self.total_params_b * 1e9)

    @property
    def embedding_params(self) -> int:
        """Input embedding plus LM head (untied in Qwen3 MoE); these stay BF16 in FP8 checkpoints."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    @property
    def attention_params(self) -> int:
        """Q/K/V/O projections and their norms, all layers."""
        q_width = self.num_attention_heads * self.head_dim
        kv_width = self.num_kv_heads * self.head_dim
        per_layer = 2 * self.hidden_size * q_width + 2 * self.hidden_size * kv_width + 2 * self.head_dim
        return self.num_layers * (per_layer + _NORMS_PER_LAYER * self.hidden_size)

    @property
    def moe_params(self) -> int:
        """All experts' gate/up/down projections and the routers, all layers."""
        experts = self.num_experts * 3 * self.hidden_size * self.moe_intermediate_size
        router = self.hidden_size * self.num_experts
        return self.num_layers * (experts + router)

    @property
    def params_from_config(self) -> int:
        """Total parameters computed from the config numbers: a cross-check of total_params."""
        return self.attention_params + self.moe_params + self.embedding_params + self.hidden_size

    @property
    def bytes_per_weight(self) -> int:
        return 1 if self.weight_dtype == "fp8" else 2


@dataclass(frozen=True)
class GpuPreset:
    key: str
    name: str
    memory_mib: int  # total, as nvidia-smi reports it

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024


def _qwen3_235b(weight_dtype: WeightDtype) -> ModelPreset:
    suffix = "-FP8" if weight_dtype == "fp8" else ""
    return ModelPreset(
        key=f"qwen3-235b-a22b-{weight_dtype}",
        hf_id=f"Qwen/Qwen3-235B-A22B{suffix}",
        num_layers=94,
        hidden_size=4096,
        num_attention_heads=64,
        num_kv_heads=4,
        head_dim=128,
        num_experts=128,
        experts_per_token=8,
        moe_intermediate_size=1536,
        vocab_size=151936,
        max_position_embeddings=40960,
        tie_word_embeddings=False,
        total_params_b=235.1,
        active_params_b=22.2,
        weight_dtype=weight_dtype,
        quant_block=128 if weight_dtype == "fp8" else None,
    )


def _qwen3_30b(weight_dtype: WeightDtype) -> ModelPreset:
    suffix = "-FP8" if weight_dtype == "fp8" else ""
    return ModelPreset(
        key=f"qwen3-30b-a3b-{weight_dtype}",
        hf_id=f"Qwen/Qwen3-30B-A3B{suffix}",
        num_layers=48,
        hidden_size=2048,
        num_attention_heads=32,
        num_kv_heads=4,
        head_dim=128,
        num_experts=128,
        experts_per_token=8,
        moe_intermediate_size=768,
        vocab_size=151936,
        max_position_embeddings=40960,
        tie_word_embeddings=False,
        total_params_b=30.5,
        active_params_b=3.35,
        weight_dtype=weight_dtype,
        quant_block=128 if weight_dtype == "fp8" else None,
    )


MODELS: dict[str, ModelPreset] = {
    m.key: m for m in (_qwen3_235b("bf16"), _qwen3_235b("fp8"), _qwen3_30b("bf16"), _qwen3_30b("fp8"))
}

GPUS: dict[str, GpuPreset] = {
    "H100": GpuPreset("H100", "NVIDIA H100 80GB HBM3", 81559),
    "H200": GpuPreset("H200", "NVIDIA H200 141GB HBM3e", 143771),
    # 183359 MiB as nvidia-smi shows a DGX B200 (TensorRT-LLM issue #10278); marketed "180 GB".
    "B200": GpuPreset("B200", "NVIDIA B200 180GB HBM3e", 183359),
}


def custom_gpu(memory_gib: float, name: str = "custom") -> GpuPreset:
    """A GPU not in the list, from the total memory nvidia-smi reports (GiB)."""
    if not math.isfinite(memory_gib) or memory_gib <= 0:
        raise ValueError("GPU memory must be a positive number of GiB")
    return GpuPreset("custom", name, round(memory_gib * 1024))


def gpu_preset(gpu_type: str) -> GpuPreset | None:
    """``H200`` / ``h200`` / ``NVIDIA H200`` -> the preset, or None."""
    wanted = gpu_type.upper().replace("NVIDIA", "").strip().split()[0] if gpu_type.strip() else ""
    return GPUS.get(wanted)


_QWEN3_ID = re.compile(r"qwen3-(235b-a22b|30b-a3b)(?:-(?:instruct|thinking)(?:-\d+)?)?(-fp8)?$", re.IGNORECASE)


def model_preset_for(model_ref: str) -> ModelPreset | None:
    """The preset for a plan's model reference (HF id or a path ending in the model's name),
    tolerating the -Instruct-2507 / -Thinking-2507 variants, which share the shape."""
    name = model_ref.rstrip("/").rsplit("/", 1)[-1]
    match = _QWEN3_ID.match(name)
    if match is None:
        return None
    size, fp8 = match.groups()
    return MODELS[f"qwen3-{size.lower()}-{'fp8' if fp8 else 'bf16'}"]


# -- configuration presets ---------------------------------------------------------------------

PRESET_SGLANG_VERSION = "0.5.23"  # the version the presets' server_args are written for


@dataclass(frozen=True)
class ConfigPreset:
    key: str
    name: Mapping[str, str]
    description: Mapping[str, str]
    model: ModelPreset
    gpu: GpuPreset
    gpu_count: int
    server_args: Mapping[str, object] = field(default_factory=dict)  # for PRESET_SGLANG_VERSION

    def server_args_for(self, version: str) -> dict[str, object]:
        """The preset's flags spelled for ``version`` (e.g. ``cuda-graph-max-bs`` on 0.5.9)."""
        if version == PRESET_SGLANG_VERSION:
            return dict(self.server_args)
        return retarget(self.server_args, PRESET_SGLANG_VERSION, version).args

    def levers(self, version: str = PRESET_SGLANG_VERSION) -> list[tuple[str, object, LeverNote]]:
        """The seed's lever flags in this preset, as ``version`` spells them, with their notes."""
        rows = []
        for flag, value in self.server_args_for(version).items():
            note = lever_note(flag)
            if note is not None:
                rows.append((flag, value, note))
        return rows


def _levers(*, max_running: int, cuda_graph_bs: int, fraction: float) -> dict[str, object]:
    """The seed's levers at SGLang's own defaults where it has one (sweep from here)."""
    return {
        "max-running-requests": max_running,
        "chunked-prefill-size": 8192,
        "max-prefill-tokens": 16384,
        "schedule-policy": "fcfs",
        "cuda-graph-max-bs-decode": cuda_graph_bs,
        "mem-fraction-static": fraction,
        "num-continuous-decode-steps": 1,
    }


CONFIG_PRESETS: tuple[ConfigPreset, ...] = (
    ConfigPreset(
        key="qwen3-235b-fp8-8xh200-tp8-ep2",
        name={"ja": "Qwen3-235B-A22B FP8 / 8×H200 (TP8 EP2)", "en": "Qwen3-235B-A22B FP8 / 8×H200 (TP8 EP2)"},
        description={
            "ja": "SGLang cookbook の構成: FP8 + TP8 では EP2 を足す(MoE の分割を 128 の倍数にするため)。",
            "en": "The SGLang cookbook's layout: FP8 with TP8 adds EP2 (keeps the MoE split a multiple of 128).",
        },
        model=MODELS["qwen3-235b-a22b-fp8"],
        gpu=GPUS["H200"],
        gpu_count=8,
        server_args={"tp-size": 8, "ep-size": 2, **_levers(max_running=256, cuda_graph_bs=256, fraction=0.88)},
    ),
    ConfigPreset(
        key="qwen3-235b-bf16-8xh200-tp8-ep2",
        name={"ja": "Qwen3-235B-A22B BF16 / 8×H200 (TP8 EP2)", "en": "Qwen3-235B-A22B BF16 / 8×H200 (TP8 EP2)"},
        description={
            "ja": "BF16 の重みは 1 GPU あたり約 55 GiB。KV cache の余裕は FP8 より小さい。",
            "en": "BF16 weights take about 55 GiB per GPU, leaving less KV-cache room than FP8.",
        },
        model=MODELS["qwen3-235b-a22b-bf16"],
        gpu=GPUS["H200"],
        gpu_count=8,
        server_args={"tp-size": 8, "ep-size": 2, **_levers(max_running=128, cuda_graph_bs=128, fraction=0.88)},
    ),
    ConfigPreset(
        key="qwen3-30b-bf16-1xh200",
        name={"ja": "Qwen3-30B-A3B BF16 / 1×H200", "en": "Qwen3-30B-A3B BF16 / 1×H200"},
        description={
            "ja": "チームの初期測定と同じ 1 GPU 構成(concurrency 1/2/4/8 を比較した構成)。",
            "en": "The one-GPU layout of the team's first measurements (concurrency 1/2/4/8 compared).",
        },
        model=MODELS["qwen3-30b-a3b-bf16"],
        gpu=GPUS["H200"],
        gpu_count=1,
        server_args={"tp-size": 1, **_levers(max_running=128, cuda_graph_bs=128, fraction=0.88)},
    ),
)


def config_preset(key: str) -> ConfigPreset:
    return next(p for p in CONFIG_PRESETS if p.key == key)


def preset_plan(key: str, *, engine: Literal["emulator", "sglang"] = "emulator") -> RunPlan:
    """A run plan from a preset configuration, with the plan's default benchmark."""
    preset = config_preset(key)
    return RunPlan(name=key, engine=engine, sglang_version=PRESET_SGLANG_VERSION, model=preset.model.hf_id,
                   gpu=GpuSpec(type=preset.gpu.key, count=preset.gpu_count),
                   server_args=dict(preset.server_args))  # type: ignore[arg-type]


QUICK_PRESET_KEY = "qwen3-30b-bf16-1xh200"  # the preset the quick demo starts from


def quick_demo_plan(gpu_type: str = "H200") -> RunPlan:
    """The README demo and the pages' one-click quick preset: Qwen3-30B-A3B on one GPU,
    128/128 at concurrency 1, 2, 4, 8, on the emulator."""
    plan = preset_plan(QUICK_PRESET_KEY)
    return plan.model_copy(update={"name": "quick-demo", "gpu": GpuSpec(type=gpu_type, count=1),
                                   "benchmark": quick_benchmark()})
