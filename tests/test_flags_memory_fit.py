"""Memory-fit pre-check against hand computations (issue 3: ±5 %) and published facts.

Hand computations below follow the stated assumptions: usable memory = nvidia-smi total
- 1 GiB (CUDA context, NCCL), static budget = usable x mem-fraction-static, weights from
the TOTAL parameter count, KV per token = layers x 2 (K,V) x KV heads per rank x 128 x bytes.
"""

from __future__ import annotations

import pytest

from domain.plan.memory_fit import (
    FitAssumptions,
    Layout,
    check_moe_layout,
    default_mem_fraction_static,
    kv_bytes_per_token,
    layout_from_args,
    memory_fit,
    memory_fit_for_args,
    weight_bytes,
)
from domain.plan.presets import GIB, GPUS, MIB, MODELS

Q235_BF16 = MODELS["qwen3-235b-a22b-bf16"]
Q235_FP8 = MODELS["qwen3-235b-a22b-fp8"]
Q30_BF16 = MODELS["qwen3-30b-a3b-bf16"]
TP8_EP2 = Layout(tp=8, ep=2)

# -- hand computations -----------------------------------------------------------------------------
H100_BUDGET = (81559 - 1024) * MIB * 0.85  # 68,455 MiB
H200_BUDGET = (143771 - 1024) * MIB * 0.85  # 121,335 MiB
W235_BF16 = 235.1e9 * 2 / 8  # 58.8 GB per GPU
EMBED_235 = 151936 * 4096 * 2  # embeddings + LM head stay BF16 in the FP8 checkpoint
W235_FP8 = ((235.1e9 - EMBED_235) * 1 + EMBED_235 * 2) / 8  # 29.5 GB per GPU
W30_BF16 = 30.5e9 * 2  # 61.0 GB on one GPU
KV235_PER_TOKEN = 94 * 2 * 1 * 128 * 2  # TP8: 4 KV heads replicated, one per GPU -> 48,128 B
KV30_PER_TOKEN = 48 * 2 * 4 * 128 * 2  # TP1: 98,304 B

HAND = [
    # model, gpu, layout, weights per GPU (B), KV tokens, verdict
    (Q235_BF16, "H100", TP8_EP2, W235_BF16, (H100_BUDGET - W235_BF16) / KV235_PER_TOKEN, "too_small"),
    (Q235_FP8, "H100", TP8_EP2, W235_FP8, (H100_BUDGET - W235_FP8) / KV235_PER_TOKEN, "fits"),
    (Q235_BF16, "H200", TP8_EP2, W235_BF16, (H200_BUDGET - W235_BF16) / KV235_PER_TOKEN, "fits"),
    (Q235_FP8, "H200", TP8_EP2, W235_FP8, (H200_BUDGET - W235_FP8) / KV235_PER_TOKEN, "fits"),
    (Q30_BF16, "H200", Layout(), W30_BF16, (H200_BUDGET - W30_BF16) / KV30_PER_TOKEN, "fits"),
    (Q30_BF16, "H100", Layout(), W30_BF16, (H100_BUDGET - W30_BF16) / KV30_PER_TOKEN, "too_small"),
]


@pytest.mark.parametrize(("model", "gpu", "layout", "weights", "tokens", "verdict"), HAND)
def test_estimates_agree_with_hand_computations(model, gpu, layout, weights, tokens, verdict) -> None:
    fit = memory_fit(model, GPUS[gpu], layout, mem_fraction_static=0.85)
    assert fit.weights_bytes_per_gpu == pytest.approx(weights, rel=0.05)
    assert fit.kv_tokens == pytest.approx(tokens, rel=0.05)
    assert fit.kv_tokens_per_rank == fit.kv_tokens // (layout.attn_dp * layout.dp)
    assert fit.verdict == verdict


def test_weights_come_from_total_not_active_parameters() -> None:
    assert weight_bytes(Q235_BF16) == pytest.approx(470e9, rel=0.01)  # not 2 x 22.2B = 44 GB
    for model in MODELS.values():
        assert model.params_from_config == pytest.approx(model.total_params, rel=0.005), model.key


@pytest.mark.parametrize(
    ("model", "dtype", "tp", "attn_dp", "expected"),
    [
        (Q235_BF16, "auto", 1, 1, 192_512),
        (Q235_BF16, "fp8_e4m3", 1, 1, 96_256),
        (Q235_BF16, "auto", 4, 1, 48_128),
        (Q235_BF16, "auto", 8, 1, 48_128),  # KV heads replicated beyond TP 4
        (Q235_FP8, "auto", 8, 1, 48_128),  # an FP8 checkpoint still keeps a BF16 KV cache
        (Q235_BF16, "auto", 8, 8, 192_512),  # attention DP: each GPU holds all 4 heads of its own requests
        (Q30_BF16, "auto", 1, 1, 98_304),
    ],
)
def test_kv_bytes_per_token(model, dtype, tp, attn_dp, expected) -> None:
    assert kv_bytes_per_token(model, dtype, tp, attn_dp=attn_dp) == expected


# -- published facts ---------------------------------------------------------------------------------


def test_fp8_235b_fits_8xh200_at_tp8_ep2_with_sglangs_default_fraction() -> None:
    fit = memory_fit_for_args({"tp-size": 8, "ep-size": 2}, Q235_FP8, GPUS["H200"], gpu_count=8)
    assert fit.verdict == "fits" and fit.warnings == ()
    assert fit.fraction_is_default and fit.mem_fraction_static == pytest.approx(0.895, abs=0.002)


def test_bf16_235b_on_8xh100_is_flagged_too_small() -> None:
    fit = memory_fit_for_args({"tp-size": 8, "ep-size": 2}, Q235_BF16, GPUS["H100"], gpu_count=8)
    assert fit.verdict == "too_small"
    assert fit.kv_share < 0.25
    assert "too small" in fit.text("en") and "小さすぎ" in fit.text("ja")


def test_bf16_235b_on_4xh100_does_not_fit() -> None:
    fit = memory_fit(Q235_BF16, GPUS["H100"], Layout(tp=4))
    assert fit.verdict == "does_not_fit"
    assert "Does not fit" in fit.text("en") and "109.5 GiB" in fit.text("en")  # 470.2 GB / 4


@pytest.mark.parametrize(
    ("model", "tp", "ep", "per_rank", "ok"),
    [
        (Q235_BF16, 8, 1, 192, False),
        (Q235_BF16, 8, 2, 384, True),
        (Q235_BF16, 4, 1, 384, True),
        (Q30_BF16, 1, 1, 768, True),
        (Q30_BF16, 4, 1, 192, False),
        (Q30_BF16, 8, 1, 96, False),
        (Q30_BF16, 8, 4, 384, True),
    ],
)
def test_the_cookbook_moe_layout_rule(model, tp, ep, per_rank, ok) -> None:
    check = check_moe_layout(model, tp, ep)
    assert (check.per_rank, check.ok) == (per_rank, ok)


def test_235b_at_tp8_without_ep_is_reported() -> None:
    fit = memory_fit(Q235_FP8, GPUS["H200"], Layout(tp=8))
    assert "moe_layout" in fit.warnings
    assert "192" in fit.text("en")


def test_sglangs_default_mem_fraction_is_reproduced() -> None:
    # reserved = max(512 + 1.5*8192 + 1024*tp/8 + 2*max_bs + 256, 10240) MiB
    assert default_mem_fraction_static(GPUS["H100"], Layout(tp=8)) == round((81559 - 15104) / 81559, 3)
    assert default_mem_fraction_static(GPUS["H200"], Layout(tp=8)) == round((143771 - 15104) / 143771, 3)
    assert default_mem_fraction_static(GPUS["H200"], Layout(tp=1)) == round((143771 - 13696) / 143771, 3)


# -- the seed's caution and the other warnings -----------------------------------------------------


def test_a_fraction_that_leaves_no_headroom_is_warned_about_and_costs_kv() -> None:
    sane = memory_fit(Q235_FP8, GPUS["H200"], TP8_EP2, mem_fraction_static=0.95)
    greedy = memory_fit(Q235_FP8, GPUS["H200"], TP8_EP2, mem_fraction_static=0.99)
    assert "fraction_leaves_no_headroom" not in sane.warnings
    assert "fraction_leaves_no_headroom" in greedy.warnings
    # the budget stops at usable - headroom (4 GiB by default), not at 99 %
    assert greedy.static_budget_bytes == pytest.approx((143771 - 1024) * MIB - 4 * GIB, rel=1e-6)
    roomy = memory_fit(
        Q235_FP8, GPUS["H200"], TP8_EP2, mem_fraction_static=0.99, assumptions=FitAssumptions(headroom_gib=0.5)
    )
    assert "fraction_leaves_no_headroom" not in roomy.warnings


def test_concurrency_answer_and_shortfall() -> None:
    fit = memory_fit(
        Q235_FP8, GPUS["H200"], TP8_EP2, mem_fraction_static=0.85, input_len=4000, output_len=200, concurrency=32
    )
    assert fit.concurrent_requests == fit.kv_tokens // 4200 and fit.verdict == "fits"
    short = memory_fit(
        Q235_FP8, GPUS["H200"], TP8_EP2, mem_fraction_static=0.85, input_len=4000, output_len=200, concurrency=100_000
    )
    assert short.verdict == "too_small" and "concurrency" in short.warnings


def test_a_layout_needing_more_gpus_than_there_are_is_reported() -> None:
    fit = memory_fit(Q235_FP8, GPUS["H200"], TP8_EP2, gpu_count=4)
    assert "not_enough_gpus" in fit.warnings and "8" in fit.text("en")


def test_layouts_are_read_in_every_version_spelling() -> None:
    assert layout_from_args({"tp-size": 8, "enable-dp-attention": True, "dp-size": 8}) == Layout(tp=8, attn_dp=8)
    assert layout_from_args({"tp-size": 8, "attn-dp-size": 8}) == Layout(tp=8, attn_dp=8)
    assert layout_from_args({"tensor-parallel-size": 4, "ep": 2, "pp-size": 2}) == Layout(tp=4, ep=2, pp=2)
    assert layout_from_args({"tp-size": True}) == Layout()  # invalid values are validation's business


def test_attention_dp_replicates_attention_weights_and_multiplies_kv_pools() -> None:
    plain = memory_fit(Q235_BF16, GPUS["H200"], Layout(tp=8, ep=8), mem_fraction_static=0.85)
    dpa = memory_fit(Q235_BF16, GPUS["H200"], Layout(tp=8, ep=8, attn_dp=8), mem_fraction_static=0.85)
    attention_gb = Q235_BF16.attention_params * 2
    assert dpa.weights_bytes_per_gpu - plain.weights_bytes_per_gpu == pytest.approx(attention_gb * 7 / 8, rel=0.01)
    assert dpa.kv_tokens > plain.kv_tokens  # no replicated KV heads: more tokens overall


@pytest.mark.parametrize("lang", ["ja", "en"])
def test_every_answer_renders(lang: str) -> None:
    fits = memory_fit(
        Q235_FP8,
        GPUS["H200"],
        Layout(tp=8),
        input_len=1000,
        output_len=1000,
        concurrency=10**6,
        gpu_count=4,
        mem_fraction_static=0.99,
    )
    assert len(fits.warnings) == 4
    for fit in (fits, memory_fit(Q235_BF16, GPUS["H100"], Layout(tp=4))):
        assert "{" not in fit.text(lang)
