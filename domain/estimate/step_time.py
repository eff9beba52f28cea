"""How long one forward step takes: the roofline step-time model of the estimator.

The emulator sleeps through these durations (it imports this module through
``emulator/timing.py``) and the estimator (:mod:`domain.estimate.estimator`) adds them up
into TTFT, TPOT and throughput: one model, two users.  All times are *device seconds*.

Notation (per GPU of the TP group; ``TP`` = tp_size)::

    L, H, q, d     layers, hidden size, query heads, head_dim
    E, k           routed experts, experts per token (dense model: E = 0)
    P_fix          parameters read on every step whatever the batch:
                   attention + dense FFN + router + LM head
    P_exp          all routed-expert parameters
    P_act          parameters one token multiplies through: attention + dense FFN
                   + k/E · P_exp
    w              bytes per weight (2 for BF16, 1 for an FP8 checkpoint)
    cell           KV bytes per token per GPU (domain.estimate.sizing.kv_cell_bytes)
    BW, F          the GPU's *ceilings*: achieved HBM copy bandwidth and dense GEMM FLOP/s
                   (FP8 when w = 1), measured where we could (domain/estimate/calibration.yaml)
    η_w, η_kv      achieved fraction of BW when streaming weights / gathering KV pages
    μ, μ_a         achieved fraction of F in the GEMMs / in prefill attention
    c_d, c_p       fixed cost per layer of a decode / prefill step (launches, scheduling,
                   sampling, MoE routing kernels that do not scale with bytes or FLOPs)
    f(n)           1 − (1 − k/E)^n: expected fraction of experts a batch of n tokens
                   touches (uniform routing), 1 for a dense model

A **decode step** over a batch of ``B`` requests holding ``K`` KV tokens in total::

    weights   = (P_fix + f(B)·P_exp)·w / TP / (BW·η_w)
    gemm      = 2·B·P_act / TP / (F·μ)
    kv        = K·cell / (BW·η_kv)
    attention = 4·L·q·d·K / TP / (F·μ_a)
    t_decode  = max(L·c_d, weights, gemm) + max(kv, attention) + t_comm(B) + [B > G]·L·c_eager

A **prefill step** over chunks ``n_i`` new tokens on top of ``p_i`` tokens already in the
KV cache (``n = Σ n_i``)::

    weights   = (P_fix + f(n)·P_exp)·w / TP / (BW·η_w)
    gemm      = 2·n·P_act / TP / (F·μ)
    kv        = Σ(p_i + n_i)·cell / (BW·η_kv)
    attention = 4·L·q·d·Σ n_i·(p_i + n_i/2) / TP / (F·μ_a)
    t_prefill = max(L·c_p, weights, gemm) + max(kv, attention) + t_comm(n)

The layers (dense and expert) take the longest of their launch-bound floor, their weight
stream and their GEMMs: at small batches the fixed per-layer cost hides the weight reads,
which is what the measured decode steps show (flat in batch 2–9 on TP2 and TP4, see
calibration.yaml).  Attention is a kernel of its own: KV gather or attention FLOPs.

``t_comm(n) = [TP > 1] · 2·L·(α + 2·(TP−1)/TP · n·H·2 / B_link)``: two all-reduces per
layer.  ``G`` is the largest decode batch captured in a CUDA graph; above it, or with
decode graphs disabled, every step pays the eager kernel-launch cost ``L·c_eager``.

The constants the physics leaves open (c_d, c_p, η_w, η_kv, μ, μ_a) are fitted per GPU
and engine family by :mod:`domain.estimate.calibrate` and kept, with their sources, in
``domain/estimate/calibration.yaml``; :mod:`domain.estimate.constants` reads them.

:class:`StepParts` keeps each term apart, so a caller can say what bounds a step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from domain.estimate.sizing import GpuSpec, ModelSpec

Bound = str  # one of BOUNDS
BOUNDS = ("weights_bandwidth", "kv_bandwidth", "compute", "step_overhead", "communication",
          "running_cap", "kv_pool")


@dataclass(frozen=True)
class Ceilings:
    """What one GPU can do at best, as measured (or, failing that, its datasheet)."""

    hbm_bytes_per_s: float
    bf16_flops: float
    fp8_flops: float
    source: str = ""


@dataclass(frozen=True)
class TimingConstants:
    """The fitted constants of the module docstring (defaults: SGLang on H200, see calibration.yaml)."""

    decode_overhead_per_layer_s: float = 1.3e-4  # c_d
    prefill_overhead_per_layer_s: float = 4.4e-4  # c_p
    eager_per_layer_s: float = 5.0e-5  # c_eager: not fitted (the measurements all ran with CUDA graphs)
    weights_bw_fraction: float = 0.67  # η_w
    kv_bw_fraction: float = 0.061  # η_kv
    gemm_fraction: float = 0.29  # μ
    attention_fraction: float = 0.055  # μ_a
    allreduce_latency_s: float = 1.0e-5  # α: not fitted (see calibration.yaml)
    link_bytes_per_s: float = 450e9  # B_link: NVLink 4, one way (not fitted)


@dataclass(frozen=True)
class StepParts:
    """One step's time, term by term (seconds)."""

    overhead_s: float
    weights_s: float
    kv_s: float
    gemm_s: float
    attention_s: float
    comm_s: float
    eager_s: float = 0.0  # kernel launches of a batch run without a CUDA graph: never hidden under a stream

    @property
    def layers_s(self) -> float:
        """The dense and expert layers: launch-bound floor, weight stream or GEMMs, whichever is longest."""
        return max(self.overhead_s, self.weights_s, self.gemm_s)

    @property
    def attention_part_s(self) -> float:
        return max(self.kv_s, self.attention_s)

    @property
    def total_s(self) -> float:
        return self.layers_s + self.attention_part_s + self.comm_s + self.eager_s

    def attributed(self) -> dict[Bound, float]:
        """The step's time split among the bounds: each max goes wholly to its winner."""
        layers = {"step_overhead": self.overhead_s, "weights_bandwidth": self.weights_s, "compute": self.gemm_s}
        winner = max(layers, key=lambda k: layers[k])
        out: dict[Bound, float] = dict.fromkeys((*layers, "kv_bandwidth", "communication"), 0.0)
        out[winner] = layers[winner]
        if self.kv_s >= self.attention_s:
            out["kv_bandwidth"] += self.kv_s
        else:
            out["compute"] += self.attention_s
        out["communication"] = self.comm_s
        out["step_overhead"] += self.eager_s
        return out

    def scaled(self, factor: float) -> StepParts:
        return StepParts(self.overhead_s * factor, self.weights_s * factor, self.kv_s * factor,
                         self.gemm_s * factor, self.attention_s * factor, self.comm_s * factor, self.eager_s * factor)


@dataclass(frozen=True)
class TimingModel:
    """Step durations for one resolved configuration (see the module docstring)."""

    model: ModelSpec
    gpu: GpuSpec
    tp_size: int
    cell_bytes: int
    weight_bytes: float  # per parameter
    cuda_graph_max_bs: int | None  # None: decode CUDA graphs disabled
    ceilings: Ceilings
    constants: TimingConstants = TimingConstants()

    # -- parameter groups -------------------------------------------------------------------
    @property
    def fixed_params(self) -> int:
        m = self.model
        lm_head = m.vocab_size * m.hidden_size
        return m.dense_params - m.embedding_params + lm_head

    @property
    def flop_params(self) -> int:
        """P_act without the embedding tables (the LM head runs once per sequence, ignored)."""
        m = self.model
        return m.active_params - m.embedding_params

    def expert_fraction(self, tokens: int) -> float:
        m = self.model
        if not m.is_moe or tokens <= 0:
            return 1.0 if not m.is_moe else 0.0
        return 1.0 - (1.0 - m.experts_per_token / m.num_experts) ** tokens

    # -- physical terms ---------------------------------------------------------------------
    def _bandwidth(self, fraction: float) -> float:
        return self.ceilings.hbm_bytes_per_s * fraction

    def _flops(self, fraction: float) -> float:
        peak = self.ceilings.fp8_flops if self.weight_bytes < 2 else self.ceilings.bf16_flops
        return peak * fraction

    def _weight_read_s(self, tokens: int) -> float:
        params = self.fixed_params + self.expert_fraction(tokens) * self.model.expert_params
        return params * self.weight_bytes / self.tp_size / self._bandwidth(self.constants.weights_bw_fraction)

    def _kv_read_s(self, kv_tokens: float) -> float:
        return kv_tokens * self.cell_bytes / self._bandwidth(self.constants.kv_bw_fraction)

    def _attention_flops(self, token_context_pairs: float) -> float:
        m = self.model
        return 4.0 * m.num_layers * m.num_q_heads * m.head_dim * token_context_pairs

    def comm_s(self, tokens: int) -> float:
        if self.tp_size <= 1:
            return 0.0
        c = self.constants
        ring = 2.0 * (self.tp_size - 1) / self.tp_size * tokens * self.model.hidden_size * 2
        return 2 * self.model.num_layers * (c.allreduce_latency_s + ring / c.link_bytes_per_s)

    def eager(self, batch: int) -> bool:
        return self.cuda_graph_max_bs is None or batch > self.cuda_graph_max_bs

    # -- step durations ---------------------------------------------------------------------
    def decode_parts(self, batch: int, kv_tokens: float) -> StepParts:
        c, layers = self.constants, self.model.num_layers
        gemm = 2.0 * batch * self.flop_params / self.tp_size / self._flops(c.gemm_fraction)
        attention = self._attention_flops(kv_tokens) / self.tp_size / self._flops(c.attention_fraction)
        return StepParts(
            overhead_s=layers * c.decode_overhead_per_layer_s, weights_s=self._weight_read_s(batch),
            kv_s=self._kv_read_s(kv_tokens), gemm_s=gemm, attention_s=attention, comm_s=self.comm_s(batch),
            eager_s=layers * c.eager_per_layer_s if self.eager(batch) else 0.0,
        )

    def prefill_parts(self, chunks: Sequence[tuple[int, int]]) -> StepParts:
        """``chunks``: (new tokens, tokens already cached for that request) per request."""
        c = self.constants
        new = sum(n for n, _ in chunks)
        kv_touched = sum(n + p for n, p in chunks)
        pairs = sum(n * (p + n / 2.0) for n, p in chunks)
        gemm = 2.0 * new * self.flop_params / self.tp_size / self._flops(c.gemm_fraction)
        attention = self._attention_flops(pairs) / self.tp_size / self._flops(c.attention_fraction)
        return StepParts(
            overhead_s=self.model.num_layers * c.prefill_overhead_per_layer_s, weights_s=self._weight_read_s(new),
            kv_s=self._kv_read_s(kv_touched), gemm_s=gemm, attention_s=attention, comm_s=self.comm_s(new),
        )

    def mixed_parts(self, decoders: float, context: float, prefill_tokens: float, prefix: float) -> StepParts:
        """One step that decodes ``decoders`` requests (``context`` tokens each) and prefills
        ``prefill_tokens`` on top of ``prefix`` cached ones, as an engine that mixes prefill
        chunks into decode steps runs it: one weight stream, one set of launches (c_d)."""
        c, layers = self.constants, self.model.num_layers
        tokens = decoders + prefill_tokens
        pairs = decoders * context + prefill_tokens * (prefix + prefill_tokens / 2.0)
        return StepParts(
            overhead_s=layers * c.decode_overhead_per_layer_s, weights_s=self._weight_read_s(round(tokens)),
            kv_s=self._kv_read_s(decoders * context + prefix + prefill_tokens),
            gemm_s=2.0 * tokens * self.flop_params / self.tp_size / self._flops(c.gemm_fraction),
            attention_s=self._attention_flops(pairs) / self.tp_size / self._flops(c.attention_fraction),
            comm_s=self.comm_s(round(tokens)),
        )

    def decode_step_s(self, batch: int, kv_tokens: int) -> float:
        return self.decode_parts(batch, kv_tokens).total_s

    def prefill_step_s(self, chunks: Sequence[tuple[int, int]]) -> float:
        return self.prefill_parts(chunks).total_s
