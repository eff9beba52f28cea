"""Model shapes, GPU specs and GPU-memory sizing for the estimator and the emulator
(independent of ``domain/plan/memory_fit.py``).

This file is deliberately separate code from the flags package's memory-fit estimator, so
that the two can check each other (tests/test_memory_fit_vs_emulator.py).  It lived in
``emulator/sizing.py``, which now re-exports it.  It follows SGLang 0.5.23's own arithmetic
(``mem_cache/kv_cache_configurator.py``, ``arg_groups/memory_hook.py``):

* KV cell per token per GPU = 2 (K and V) × layers × KV heads per rank × head_dim × dtype
  bytes, where KV heads per rank = max(1, kv_heads / attention-TP): at TP ≥ kv_heads the
  heads are replicated, so a rank always holds at least one.
* weights per GPU = parameters × weight bytes / tp_size (experts are split by EP inside the
  TP group, which leaves the per-GPU total unchanged).
* ``rest = avail_before_load × mem_fraction_static − weights``; ``rest ≤ 0`` is SGLang's
  "Loaded weights leave no GPU memory for the KV cache" and ``max_total_num_tokens =
  rest / cell`` (capped by ``--max-total-tokens``); zero tokens is "Not enough memory".
* the default ``mem_fraction_static`` is SGLang's heuristic ``(gpu_mem − reserved) /
  gpu_mem`` with ``reserved = 512 MB + 1.5 MB × max(chunked_prefill, 2048) + tp/8 GB +
  2 MB × cuda_graph_max_bs``, floored at 10 GB on GPUs over 60 GB.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_mib: int  # what NVML reports as total
    hbm_tb_s: float  # peak HBM bandwidth, TB/s
    bf16_tflops: float  # dense peak
    fp8_tflops: float


GPUS: dict[str, GpuSpec] = {
    spec.name: spec
    for spec in (
        GpuSpec("H200", 143_771, 4.8, 989.0, 1979.0),
        GpuSpec("H100", 81_559, 3.35, 989.0, 1979.0),
        GpuSpec("H20", 97_871, 4.0, 148.0, 296.0),
        GpuSpec("B200", 183_359, 8.0, 2250.0, 4500.0),
        GpuSpec("A100", 81_920, 2.04, 312.0, 312.0),
    )
}
# CUDA context and allocator slack a process pays before loading anything.
CONTEXT_OVERHEAD_GIB = 0.85


@dataclass(frozen=True)
class ModelSpec:
    """The parts of an HF ``config.json`` that sizing and timing need."""

    name: str
    num_layers: int
    hidden_size: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    num_experts: int = 0  # 0: dense model
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    intermediate_size: int = 0  # dense FFN (unused by all-MoE models)
    tie_word_embeddings: bool = False
    fp8_weights: bool = False  # an FP8 checkpoint (detected from its name or quantization_config)
    architectures: tuple[str, ...] = field(default=("Qwen3MoeForCausalLM",))
    model_type: str = "qwen3_moe"

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def attention_params(self) -> int:
        q = self.num_q_heads * self.head_dim
        kv = self.num_kv_heads * self.head_dim
        per_layer = self.hidden_size * (q + 2 * kv) + q * self.hidden_size
        return per_layer * self.num_layers

    @property
    def embedding_params(self) -> int:
        tables = 1 if self.tie_word_embeddings else 2
        return tables * self.vocab_size * self.hidden_size

    @property
    def expert_params(self) -> int:
        """All routed-expert weights (gate, up, down), every layer."""
        if not self.is_moe:
            return 0
        return self.num_layers * self.num_experts * 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def dense_params(self) -> int:
        """Everything read on every step whatever the batch: attention, dense FFN, embeddings."""
        ffn = 0 if self.is_moe else self.num_layers * 3 * self.hidden_size * self.intermediate_size
        router = self.num_layers * self.hidden_size * self.num_experts
        return self.attention_params + ffn + router + self.embedding_params

    @property
    def total_params(self) -> int:
        return self.dense_params + self.expert_params

    @property
    def active_params(self) -> int:
        """Parameters one token multiplies through (the FLOPs side)."""
        if not self.is_moe:
            return self.total_params
        return self.dense_params + self.expert_params * self.experts_per_token // self.num_experts


QWEN3_30B_A3B = ModelSpec(
    name="Qwen3-30B-A3B", num_layers=48, hidden_size=2048, num_q_heads=32, num_kv_heads=4,
    head_dim=128, vocab_size=151_936, max_position_embeddings=40_960, num_experts=128,
    experts_per_token=8, moe_intermediate_size=768, intermediate_size=6144,
)
QWEN3_235B_A22B = ModelSpec(
    name="Qwen3-235B-A22B", num_layers=94, hidden_size=4096, num_q_heads=64, num_kv_heads=4,
    head_dim=128, vocab_size=151_936, max_position_embeddings=40_960, num_experts=128,
    experts_per_token=8, moe_intermediate_size=1536, intermediate_size=12288,
)
# Matched against the lower-cased model path with separators removed.
KNOWN_MODELS: dict[str, ModelSpec] = {"qwen3235ba22b": QWEN3_235B_A22B, "qwen330ba3b": QWEN3_30B_A3B}


class UnknownModel(ValueError):
    pass


def _normalise(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _from_config_json(path: Path, name: str) -> ModelSpec:
    cfg = json.loads(path.read_text(encoding="utf-8"))
    heads = cfg["num_attention_heads"]
    quant = (cfg.get("quantization_config") or {}).get("quant_method", "")
    return ModelSpec(
        name=name,
        num_layers=cfg["num_hidden_layers"],
        hidden_size=cfg["hidden_size"],
        num_q_heads=heads,
        num_kv_heads=cfg.get("num_key_value_heads", heads),
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
        vocab_size=cfg["vocab_size"],
        max_position_embeddings=cfg.get("max_position_embeddings", 32_768),
        num_experts=cfg.get("num_experts", 0),
        experts_per_token=cfg.get("num_experts_per_tok", 0),
        moe_intermediate_size=cfg.get("moe_intermediate_size", 0),
        intermediate_size=cfg.get("intermediate_size", 0),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        fp8_weights="fp8" in str(quant).lower() or "fp8" in name.lower(),
        architectures=tuple(cfg.get("architectures") or ()),
        model_type=cfg.get("model_type", "unknown"),
    )


def resolve_model(model_path: str) -> ModelSpec:
    """A local directory with ``config.json`` wins; otherwise a known name in the path."""
    config = Path(model_path) / "config.json"
    name = Path(model_path.rstrip("/")).name or model_path
    if config.is_file():
        return _from_config_json(config, name)
    key = _normalise(model_path)
    for pattern, spec in KNOWN_MODELS.items():
        if pattern in key:
            return replace(spec, name=name, fp8_weights="fp8" in key)
    known = ", ".join(spec.name for spec in KNOWN_MODELS.values())
    raise UnknownModel(
        f"{model_path} is not a local folder with a config.json and not a model the emulator knows "
        f"(known: {known}, with an optional -FP8 suffix)"
    )


KV_DTYPE_BYTES = {
    "auto": None, "bf16": 2.0, "bfloat16": 2.0, "fp8_e5m2": 1.0, "fp8_e4m3": 1.0, "mxfp8": 1.0,
    "nvfp4": 0.5625, "fp4_mx_block16": 0.5625,  # 4-bit values plus one scale byte per 16
}


def kv_cell_bytes(model: ModelSpec, kv_cache_dtype: str, tp_size: int, attn_dp_size: int = 1) -> int:
    """KV-cache bytes one token occupies on one GPU."""
    # "auto" is the model's activation dtype, BF16 even for FP8 checkpoints.
    dtype_bytes = KV_DTYPE_BYTES.get(kv_cache_dtype) or 2.0
    attn_tp = max(1, tp_size // max(1, attn_dp_size))
    heads_per_rank = max(1, math.ceil(model.num_kv_heads / attn_tp))
    return int(2 * model.num_layers * heads_per_rank * model.head_dim * dtype_bytes)


def weight_bytes_per_gpu(model: ModelSpec, quantization: str | None, tp_size: int) -> int:
    fp8 = model.fp8_weights or (quantization or "").startswith(("fp8", "w8a8_fp8", "modelopt_fp8"))
    per_param = 1.0 if fp8 else 2.0
    return int(model.total_params * per_param / tp_size)


def default_chunked_prefill(gpu_mib: int) -> int:
    """SGLang 0.5.23 ``handle_gpu_memory_settings``: larger GPUs get larger chunks."""
    if gpu_mib < 20 * 1024:
        return 2048
    if gpu_mib < 60 * 1024:
        return 4096
    if gpu_mib < 160 * 1024:
        return 8192
    return 16384


def default_cuda_graph_max_bs(gpu_mib: int, tp_size: int) -> int:
    if gpu_mib < 20 * 1024:
        return 8
    if gpu_mib < 35 * 1024:
        return 48 if tp_size < 4 else 160
    if gpu_mib < 60 * 1024:
        return 32 if tp_size < 4 else 160
    if gpu_mib < 160 * 1024:
        return 256 if tp_size < 4 else 512
    return 512


def default_mem_fraction_static(gpu_mib: int, chunked_prefill: int, max_prefill_tokens: int,
                                tp_size: int, pp_size: int, graph_max_bs: int | None) -> float:
    activation_tokens = max(chunked_prefill if chunked_prefill > 0 else max_prefill_tokens, 2048)
    reserved = 512 + activation_tokens * 1.5 + tp_size * pp_size / 8 * 1024 + 2 * (graph_max_bs or 0)
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


@dataclass(frozen=True)
class MemoryPlan:
    """What the emulated start-up finds on one GPU (GB figures are GiB, as SGLang prints)."""

    gpu_total_gb: float
    avail_before_load_gb: float
    weight_gb: float
    mem_fraction_static: float
    rest_gb: float  # KV-pool budget; ≤ 0 means the weights alone exceed the static budget
    kv_cell_bytes: int
    max_total_num_tokens: int
    graph_reserve_gb: float

    @property
    def kv_gb(self) -> float:
        return self.max_total_num_tokens * self.kv_cell_bytes / GIB

    @property
    def avail_after_weights_gb(self) -> float:
        return self.avail_before_load_gb - self.weight_gb

    @property
    def avail_after_pool_gb(self) -> float:
        return self.avail_after_weights_gb - self.kv_gb

    @property
    def min_mem_fraction_static(self) -> float:
        """SGLang's suggested floor: 1 − available/pre."""
        return 1 - self.avail_after_weights_gb / self.avail_before_load_gb


def plan_memory(gpu: GpuSpec, model: ModelSpec, *, tp_size: int, attn_dp_size: int, quantization: str | None,
                kv_cache_dtype: str, mem_fraction_static: float, max_total_tokens: int | None,
                graph_max_bs: int | None) -> MemoryPlan:
    avail = gpu.memory_mib / 1024 - CONTEXT_OVERHEAD_GIB
    weights = weight_bytes_per_gpu(model, quantization, tp_size) / GIB
    rest = avail * mem_fraction_static - weights
    cell = kv_cell_bytes(model, kv_cache_dtype, tp_size, attn_dp_size)
    tokens = max(0, int(rest * GIB // cell)) if rest > 0 else 0
    if max_total_tokens is not None:
        tokens = min(tokens, max_total_tokens)
    return MemoryPlan(
        gpu_total_gb=gpu.memory_mib / 1024, avail_before_load_gb=avail, weight_gb=weights,
        mem_fraction_static=mem_fraction_static, rest_gb=rest, kv_cell_bytes=cell,
        max_total_num_tokens=tokens, graph_reserve_gb=2 * (graph_max_bs or 0) / 1024,
    )


def default_max_running_requests(max_total_num_tokens: int, context_len: int, requested: int | None,
                                 attn_dp_size: int = 1) -> int:
    """SGLang 0.5.23 ``resolve_max_num_reqs``."""
    if requested is not None:
        return max(1, min(max(1, requested // max(1, attn_dp_size)), max_total_num_tokens // 2))
    estimated = max(min(int(max_total_num_tokens / context_len * 512), 4096), 2048)
    return max(1, min(estimated, max_total_num_tokens // 2))
