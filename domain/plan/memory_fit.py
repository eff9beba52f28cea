"""Memory-fit pre-check: do the weights and a useful KV cache fit before anything is queued?

The arithmetic follows SGLang's own sizing (0.5.23):

* ``mem-fraction-static`` is (weights + KV pool) / GPU memory; the rest is for activations
  and CUDA graphs (``arg_groups/memory_hook.py``);
* the KV pool is what the static budget leaves after the weights
  (``kv_cache_configurator.py``: rest = free_after_weights - free_before_load * (1 - f)).

Weights are counted from the **total** parameter count (every expert sits in GPU memory),
never from the active one: the seed warns that MoE estimates from active parameters fail.

The headroom is a setting (:class:`FitAssumptions`): when ``mem-fraction-static`` leaves
less than it for activations and CUDA graphs, the KV budget shrinks to make room and a
warning says the fraction is too high (the seed's caution on that lever).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from domain.core.i18n import t
from domain.flags.drift import find_spelling
from domain.plan.presets import GIB, MIB, GpuPreset, ModelPreset

Verdict = Literal["fits", "too_small", "does_not_fit"]

# Bytes per KV element by --kv-cache-dtype.  "auto" follows the activation dtype, which is
# BF16 for Qwen3 checkpoints, FP8 ones included.  FP4/MXFP8 carry one scale per block.
KV_ELEMENT_BYTES: dict[str, float] = {
    "auto": 2.0,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "mxfp8": 1.0 + 1 / 32,
    "nvfp4": 0.5 + 1 / 16,
    "fp4_mx_block16": 0.5 + 1 / 16,
}
MOE_SHARD_MULTIPLE = 128  # the cookbook's EP rule; FP8 block-wise quantization uses 128x128 blocks
_FP8_SCALE_BYTES = 4  # one fp32 scale per quantization block


@dataclass(frozen=True)
class FitAssumptions:
    """The estimate's knobs, with defaults; each is a setting, not a fact."""

    headroom_gib: float = 4.0  # activations + CUDA graphs need at least this outside the static budget
    context_overhead_gib: float = 1.0  # CUDA context, NCCL and cuBLAS before weights load
    min_kv_share: float = 0.25  # a KV pool below this share of the static budget is "too small"


@dataclass(frozen=True)
class Layout:
    """How a configuration spreads the model over GPUs."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    attn_dp: int = 1  # attention data parallel groups inside the TP group
    dp: int = 1  # whole-model replicas

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def attn_tp(self) -> int:
        """GPUs that share one attention (and KV) shard."""
        return max(1, self.tp // self.attn_dp)


def layout_from_args(server_args: Mapping[str, object]) -> Layout:
    """Read TP/PP/EP/DP/attention-DP from ``server_args`` (any spelling, any version).

    Before 0.5.23, ``--enable-dp-attention --dp-size N`` meant N attention-DP groups, not
    N replicas, so the old form is read the way those versions read it."""

    def size(*flags: str) -> int:
        for flag in flags:
            key = find_spelling(server_args, flag)
            value = server_args.get(key) if key is not None else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return 1

    dp = size("dp-size")
    attn_dp = size("attn-dp-size")
    if server_args.get("enable-dp-attention") is True:
        attn_dp, dp = max(attn_dp, dp), 1
    return Layout(tp=size("tp-size"), pp=size("pp-size"), ep=size("ep-size"), attn_dp=attn_dp, dp=dp)


# -- the pieces ---------------------------------------------------------------------------------


def kv_element_bytes(kv_cache_dtype: str) -> float:
    try:
        return KV_ELEMENT_BYTES[kv_cache_dtype]
    except KeyError:
        raise ValueError(f"unknown --kv-cache-dtype {kv_cache_dtype!r}") from None


def kv_bytes_per_token(
    model: ModelPreset, kv_cache_dtype: str = "auto", tp: int = 1, *, pp: int = 1, attn_dp: int = 1
) -> int:
    """KV-cache bytes one token takes on one GPU.

    K and V, for the layers of one pipeline stage, for the KV heads one attention-TP rank
    holds.  When attention TP exceeds the KV heads (Qwen3: 4), heads are replicated, so
    a rank holds at least one: 235B is 48,128 B/token per GPU at TP 4 and at TP 8."""
    attn_tp = max(1, tp // attn_dp)
    heads = math.ceil(model.num_kv_heads / attn_tp)
    layers = math.ceil(model.num_layers / pp)
    return round(layers * 2 * heads * model.head_dim * kv_element_bytes(kv_cache_dtype))


def weight_bytes(model: ModelPreset) -> int:
    """All weights of the model, from its total parameter count.

    FP8 checkpoints keep the embeddings and LM head in BF16 and add one fp32 scale per
    128x128 block of the quantized matrices."""
    if model.weight_dtype == "bf16":
        return model.total_params * 2
    quantized = model.total_params - model.embedding_params
    blocks = quantized / ((model.quant_block or MOE_SHARD_MULTIPLE) ** 2)
    return round(quantized * 1 + model.embedding_params * 2 + blocks * _FP8_SCALE_BYTES)


def weight_bytes_per_gpu(model: ModelPreset, layout: Layout) -> int:
    """Weights one GPU holds: experts and embeddings split over TP (EP moves experts
    between the same TP ranks), attention split over attention-TP only (it is replicated
    across attention-DP groups), layers split over PP."""
    total = weight_bytes(model)
    attention = model.attention_params * model.bytes_per_weight
    rest = total - attention
    return round(rest / (layout.tp * layout.pp) + attention / (layout.attn_tp * layout.pp))


@dataclass(frozen=True)
class MoeLayoutCheck:
    """The cookbook's rule ``(moe_intermediate_size / (tp/ep)) % 128 == 0``."""

    tp: int
    ep: int
    per_rank: float  # moe_intermediate_size / (tp / ep)
    ok: bool


def check_moe_layout(model: ModelPreset, tp: int, ep: int = 1) -> MoeLayoutCheck:
    """235B: TP8 alone gives 192 (fails); TP8 EP2 gives 384; TP4 gives 384."""
    if tp < 1 or ep < 1 or tp % ep:
        return MoeLayoutCheck(tp, ep, float("nan"), False)
    per_rank = model.moe_intermediate_size / (tp / ep)
    ok = per_rank.is_integer() and int(per_rank) % MOE_SHARD_MULTIPLE == 0
    return MoeLayoutCheck(tp, ep, per_rank, ok)


def default_mem_fraction_static(
    gpu: GpuPreset, layout: Layout, *, chunked_prefill_size: int | None = None, cuda_graph_max_bs: int | None = None
) -> float:
    """What SGLang 0.5.23 picks when ``--mem-fraction-static`` is unset (memory_hook.py).

    reserved MiB = 512 + 1.5 * max(chunk, 2048) + 1024 * tp * pp / 8 + 2 * decode graph max bs
    + about 256 for prefill graphs, at least 10 GiB on GPUs over 60 GiB."""
    chunk = chunked_prefill_size if chunked_prefill_size and chunked_prefill_size > 0 else 8192
    graph_bs = cuda_graph_max_bs or (256 if layout.tp < 4 else 512)
    reserved = 512 + 1.5 * max(chunk, 2048) + 1024 * layout.tp * layout.pp / 8 + 2 * graph_bs + 256
    if gpu.memory_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu.memory_mib - reserved) / gpu.memory_mib, 3)


# -- the answer ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryFit:
    verdict: Verdict
    model: ModelPreset
    gpu: GpuPreset
    layout: Layout
    mem_fraction_static: float
    fraction_is_default: bool
    weights_bytes_per_gpu: int
    static_budget_bytes: int  # weights + KV pool on one GPU
    kv_bytes_per_gpu: int  # <= 0 when the weights do not fit
    kv_bytes_per_token: int  # per GPU
    kv_tokens: int  # whole deployment: per-rank pool x attention-DP groups x replicas
    moe_layout: MoeLayoutCheck
    warnings: tuple[str, ...]  # codes, rendered by text()
    tokens_per_request: int | None = None
    concurrent_requests: int | None = None
    requested_concurrency: int | None = None
    gpu_count: int | None = None

    @property
    def kv_tokens_per_rank(self) -> int:
        """One GPU's KV pool in tokens: what SGLang logs as ``max_total_num_tokens`` (emulator cross-check)."""
        return max(0, self.kv_bytes_per_gpu) // self.kv_bytes_per_token

    @property
    def kv_share(self) -> float:
        return max(0, self.kv_bytes_per_gpu) / self.static_budget_bytes if self.static_budget_bytes > 0 else 0.0

    def text(self, lang: str) -> str:
        """The answer in one paragraph: verdict, then each warning on its own line."""
        lines = [self._verdict_text(lang)]
        lines.extend(t(f"flags.fit.warning.{code}", lang, **self._params()) for code in self.warnings)
        return "\n".join(lines)

    def _verdict_text(self, lang: str) -> str:
        params = self._params()
        if self.verdict == "does_not_fit":
            return t("flags.fit.does_not_fit", lang, **params)
        key = "flags.fit.too_small" if self.verdict == "too_small" else "flags.fit.fits"
        text = t(key, lang, **params)
        if self.concurrent_requests is not None:
            text += "\n" + t("flags.fit.concurrency", lang, **params)
        return text

    def _params(self) -> dict[str, object]:
        return {
            "weights": f"{self.weights_bytes_per_gpu / GIB:.1f}",
            "budget": f"{self.static_budget_bytes / GIB:.1f}",
            "gpu_mem": f"{self.gpu.memory_gib:.1f}",
            "kv": f"{max(0, self.kv_bytes_per_gpu) / GIB:.1f}",
            "share": f"{self.kv_share * 100:.0f}",
            "tokens": f"{self.kv_tokens:,}",
            "requests": f"{self.concurrent_requests:,}" if self.concurrent_requests is not None else "-",
            "tokens_per_request": self.tokens_per_request or 0,
            "concurrency": self.requested_concurrency or 0,
            "fraction": f"{self.mem_fraction_static:.3f}",
            "gpus": self.layout.gpus,
            "gpu_count": self.gpu_count or 0,
            "per_rank": f"{self.moe_layout.per_rank:g}",
            "tp": self.layout.tp,
            "ep": self.layout.ep,
            "multiple": MOE_SHARD_MULTIPLE,
        }


def memory_fit(
    model: ModelPreset,
    gpu: GpuPreset,
    layout: Layout,
    *,
    mem_fraction_static: float | None = None,
    kv_cache_dtype: str = "auto",
    input_len: int | None = None,
    output_len: int | None = None,
    concurrency: int | None = None,
    gpu_count: int | None = None,
    assumptions: FitAssumptions | None = None,
    chunked_prefill_size: int | None = None,
    cuda_graph_max_bs: int | None = None,
) -> MemoryFit:
    """Whether ``model`` fits ``gpu`` x ``layout``, and how much KV cache is left."""
    knobs = assumptions or FitAssumptions()
    fraction = mem_fraction_static
    if fraction is None:
        fraction = default_mem_fraction_static(
            gpu, layout, chunked_prefill_size=chunked_prefill_size, cuda_graph_max_bs=cuda_graph_max_bs
        )
    budget, squeezed = _static_budget(gpu, fraction, knobs)
    weights = weight_bytes_per_gpu(model, layout)
    per_token = kv_bytes_per_token(model, kv_cache_dtype, layout.tp, pp=layout.pp, attn_dp=layout.attn_dp)
    kv_bytes = budget - weights
    tokens = max(0, kv_bytes) // per_token * layout.attn_dp * layout.dp
    per_request = input_len + output_len if input_len is not None and output_len is not None else None
    fit = MemoryFit(
        verdict="fits",
        model=model,
        gpu=gpu,
        layout=layout,
        mem_fraction_static=fraction,
        fraction_is_default=mem_fraction_static is None,
        weights_bytes_per_gpu=weights,
        static_budget_bytes=budget,
        kv_bytes_per_gpu=kv_bytes,
        kv_bytes_per_token=per_token,
        kv_tokens=tokens,
        moe_layout=check_moe_layout(model, layout.tp, layout.ep),
        warnings=(),
        tokens_per_request=per_request,
        concurrent_requests=tokens // per_request if per_request else None,
        requested_concurrency=concurrency,
        gpu_count=gpu_count,
    )
    return _judged(fit, knobs, squeezed)


def _static_budget(gpu: GpuPreset, fraction: float, knobs: FitAssumptions) -> tuple[int, bool]:
    """Bytes for weights + KV on one GPU, and whether the headroom had to squeeze it.

    SGLang takes ``fraction`` of the memory free before loading; what is left outside
    must still hold activations and CUDA graphs, so never less than the headroom."""
    usable = gpu.memory_bytes - knobs.context_overhead_gib * GIB
    by_fraction = usable * fraction
    by_headroom = usable - knobs.headroom_gib * GIB
    return round(min(by_fraction, by_headroom)), by_headroom < by_fraction


def _judged(fit: MemoryFit, knobs: FitAssumptions, squeezed: bool) -> MemoryFit:
    warnings = [code for code, on in _warning_flags(fit, squeezed) if on]
    if fit.kv_bytes_per_gpu <= 0 or fit.kv_tokens == 0:
        verdict: Verdict = "does_not_fit"
    elif fit.kv_share < knobs.min_kv_share or _short_of_concurrency(fit):
        verdict = "too_small"
    else:
        verdict = "fits"
    return replace(fit, verdict=verdict, warnings=tuple(warnings))


def _warning_flags(fit: MemoryFit, squeezed: bool) -> list[tuple[str, bool]]:
    return [
        ("fraction_leaves_no_headroom", squeezed),
        ("moe_layout", not fit.moe_layout.ok),
        ("not_enough_gpus", fit.gpu_count is not None and fit.layout.gpus > fit.gpu_count),
        ("concurrency", _short_of_concurrency(fit)),
    ]


def _short_of_concurrency(fit: MemoryFit) -> bool:
    wanted = fit.requested_concurrency
    return wanted is not None and fit.concurrent_requests is not None and fit.concurrent_requests < wanted


def memory_fit_for_args(
    server_args: Mapping[str, object],
    model: ModelPreset,
    gpu: GpuPreset,
    *,
    gpu_count: int | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    concurrency: int | None = None,
    assumptions: FitAssumptions | None = None,
) -> MemoryFit:
    """:func:`memory_fit` with the layout and memory flags read from a plan's server_args."""

    def number(*flags: str) -> float | None:
        for flag in flags:
            value = server_args.get(flag)
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                return value
        return None

    fraction = number("mem-fraction-static")
    chunk = number("chunked-prefill-size")
    graph_bs = number("cuda-graph-max-bs-decode", "cuda-graph-max-bs")
    kv_dtype = server_args.get("kv-cache-dtype", "auto")
    return memory_fit(
        model,
        gpu,
        layout_from_args(server_args),
        mem_fraction_static=fraction,
        kv_cache_dtype=kv_dtype if isinstance(kv_dtype, str) and kv_dtype in KV_ELEMENT_BYTES else "auto",
        input_len=input_len,
        output_len=output_len,
        concurrency=concurrency,
        gpu_count=gpu_count,
        assumptions=assumptions,
        chunked_prefill_size=int(chunk) if chunk is not None else None,
        cuda_graph_max_bs=int(graph_bs) if graph_bs is not None else None,
    )


__all__ = [
    "GIB",
    "MIB",
    "FitAssumptions",
    "Layout",
    "MemoryFit",
    "MoeLayoutCheck",
    "check_moe_layout",
    "default_mem_fraction_static",
    "kv_bytes_per_token",
    "layout_from_args",
    "memory_fit",
    "memory_fit_for_args",
    "weight_bytes",
    "weight_bytes_per_gpu",
]
