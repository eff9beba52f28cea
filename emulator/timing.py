"""How long one forward step of the emulated engine takes.

All times here are *device seconds* on the emulated GPU.  The live engine multiplies them
by the time scale ``S`` (``--emulate-time-scale``, default 1: real-GPU speed; 2 means slow
motion at half speed) before sleeping, so everything bench_serving measures is in
``S × device`` seconds: throughputs come out divided by ``S`` and latencies multiplied
by ``S``.  ``S`` is reported in ``/server_info`` (``emulator.time_scale``) and
:func:`emulator.predict.rescale_record` converts a bench record back.

Notation (per GPU of the TP group; ``TP`` = tp_size)::

    L, H, q, d     layers, hidden size, query heads, head_dim
    E, k           routed experts, experts per token (dense model: E = 0)
    P_fix          parameters read on every step whatever the batch:
                   attention + dense FFN + router + LM head
    P_exp          all routed-expert parameters
    P_act          parameters one token multiplies through: attention + dense FFN
                   + k/E · P_exp
    w              bytes per weight (2 for BF16, 1 for an FP8 checkpoint)
    cell           KV bytes per token per GPU (emulator.sizing.kv_cell_bytes)
    BW, F          HBM bandwidth and dense peak FLOP/s of the GPU (FP8 peak when w = 1)
    η, μ           achieved fraction of BW and of F
    f(n)           1 − (1 − k/E)^n: expected fraction of experts a batch of n tokens
                   touches (uniform routing), 1 for a dense model

A **decode step** over a batch of ``B`` requests holding ``K`` KV tokens in total::

    t_mem     = [(P_fix + f(B)·P_exp)·w / TP + K·cell] / (BW·η)
    t_flop    = [2·B·P_act + 4·L·q·d·K] / TP / (F·μ)
    t_decode  = c_step + max(t_mem, t_flop) + t_comm(B) + [B > G] · L·c_eager

A **prefill step** over chunks ``n_i`` new tokens on top of ``p_i`` tokens already in the
KV cache (``n = Σ n_i``)::

    t_mem     = [(P_fix + f(n)·P_exp)·w / TP + Σ(p_i + n_i)·cell] / (BW·η)
    t_flop    = [2·n·P_act + 4·L·q·d·Σ n_i·(p_i + n_i/2)] / TP / (F·μ)
    t_prefill = c_step + max(t_mem, t_flop) + t_comm(n)

``t_comm(n) = [TP > 1] · 2·L·(α + 2·(TP−1)/TP · n·H·2 / B_link)``: two all-reduces per
layer.  ``G`` is the largest decode batch captured in a CUDA graph
(``--cuda-graph-max-bs-decode``, ``--cuda-graph-max-bs`` before 0.5.20, or the
``cuda_graph_config`` JSON); above it, or with decode graphs disabled, every step pays
the eager kernel-launch cost ``L·c_eager``.

Default constants (:class:`TimingConstants`)::

    c_step  = 3.0 ms   scheduler, sampling and launch overhead of one step
    c_eager = 0.05 ms  per layer, for a step run without a CUDA graph
    η       = 0.6      μ = 0.4      α = 8 µs      B_link = 450 GB/s (NVLink, one way)

For Qwen3-30B-A3B (BF16, TP1) on one H200 this gives ≈ 5.2 ms per decode step at B = 1
(190 tok/s per request), ≈ 12 ms at B = 8 and ≈ 24 ms at B = 64, and a 128-token prefill
of ≈ 24 ms: MoE decode is memory-bound and the touched-expert fraction f(B) makes the step
time grow steeply at small batches, then flatten.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from emulator.sizing import GpuSpec, ModelSpec


@dataclass(frozen=True)
class TimingConstants:
    step_overhead_s: float = 3.0e-3
    eager_per_layer_s: float = 5.0e-5
    bw_efficiency: float = 0.6
    flops_efficiency: float = 0.4
    allreduce_latency_s: float = 8.0e-6
    link_bytes_per_s: float = 450e9


@dataclass(frozen=True)
class TimingModel:
    """Step durations for one resolved configuration (see the module docstring)."""

    model: ModelSpec
    gpu: GpuSpec
    tp_size: int
    cell_bytes: int
    weight_bytes: float  # per parameter
    cuda_graph_max_bs: int | None  # None: decode CUDA graphs disabled
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
    def _bandwidth(self) -> float:
        return self.gpu.hbm_tb_s * 1e12 * self.constants.bw_efficiency

    def _flops(self) -> float:
        peak = self.gpu.fp8_tflops if self.weight_bytes < 2 else self.gpu.bf16_tflops
        return peak * 1e12 * self.constants.flops_efficiency

    def _weight_read_s(self, tokens: int) -> float:
        params = self.fixed_params + self.expert_fraction(tokens) * self.model.expert_params
        return params * self.weight_bytes / self.tp_size / self._bandwidth()

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
    def decode_step_s(self, batch: int, kv_tokens: int) -> float:
        t_mem = self._weight_read_s(batch) + kv_tokens * self.cell_bytes / self._bandwidth()
        flops = 2.0 * batch * self.flop_params + self._attention_flops(kv_tokens)
        t_flop = flops / self.tp_size / self._flops()
        penalty = self.model.num_layers * self.constants.eager_per_layer_s if self.eager(batch) else 0.0
        return self.constants.step_overhead_s + max(t_mem, t_flop) + self.comm_s(batch) + penalty

    def prefill_step_s(self, chunks: Sequence[tuple[int, int]]) -> float:
        """``chunks``: (new tokens, tokens already cached for that request) per request."""
        new = sum(n for n, _ in chunks)
        kv_touched = sum(n + p for n, p in chunks)
        pairs = sum(n * (p + n / 2.0) for n, p in chunks)
        t_mem = self._weight_read_s(new) + kv_touched * self.cell_bytes / self._bandwidth()
        t_flop = (2.0 * new * self.flop_params + self._attention_flops(pairs)) / self.tp_size / self._flops()
        return self.constants.step_overhead_s + max(t_mem, t_flop) + self.comm_s(new)
