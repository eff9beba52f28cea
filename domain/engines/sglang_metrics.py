"""SGLang's ``/metrics`` as the shared reader (``server_metrics.py``) reads it.

SGLang (``srt/observability/metrics_collector.py``) exports its scheduler's gauges and
counters once per scheduler that logs stats: one series per DP replica (``dp_rank``;
``tp_rank`` in versions without it), and, with priority scheduling, per-priority breakdowns
(``priority="<n>"``) next to the total (``priority=""``).  So: breakdowns dropped, one series
per replica (the lowest pp/tp rank, the others repeat it), counts summed over replicas and
ratios averaged.  The tokenizer manager's token counters are not per scheduler: each
finished request raises exactly one series (its ``is_streaming``, ``priority`` and custom
labels), so every series adds up.
"""

from __future__ import annotations

from domain.engines.server_metrics import Labels, MetricNames, ServerMetric

# The scheduler's gauges worth a time series.
SERVER_GAUGES = {
    "sglang:num_running_reqs": "running_reqs",
    "sglang:num_queue_reqs": "queued_reqs",
    "sglang:token_usage": "token_usage",
    "sglang:cache_hit_rate": "cache_hit_rate",
    "sglang:gen_throughput": "gen_throughput",
    "sglang:num_used_tokens": "used_tokens",
}
# Gauges that count things add up across DP replicas; a ratio of equal-sized pools does not,
# so its replicas are averaged.
RATIO_GAUGES = frozenset({"token_usage", "cache_hit_rate"})
# The tokenizer manager's token counters (TokenizerMetricsCollector), raised once per
# finished request by its prompt and generated tokens: the server's own count of the lengths
# it served.
SERVER_COUNTERS = {
    "sglang:prompt_tokens_total": "prompt_tokens_total",
    "sglang:generation_tokens_total": "generation_tokens_total",
}
# The scheduler's counters (SchedulerMetricsCollector): requests retracted because the KV
# pool could not hold the next token, and forward passes by CUDA graph mode (label ``mode``:
# decode_cuda_graph / decode_none / prefill_cuda_graph / prefill_none).  Exported per
# scheduler like its gauges, so totalled like them.  domain/results/scaling_gap.py reads
# their deltas.
RETRACTED = "sglang:num_retracted_requests_total"
GRAPH_PASSES = "sglang:cuda_graph_passes_total"
SCHEDULER_COUNTERS = {RETRACTED: "retracted_requests_total", GRAPH_PASSES: "cuda_graph_passes_total"}
# CUDA-graph passes are kept by decode mode (prefill modes are not kept).
PASS_MODES = {"decode_cuda_graph": "graph_decode_passes_total", "decode_none": "eager_decode_passes_total"}


def replica(labels: Labels) -> tuple[str, str]:
    """Which DP replica a series describes: its ``dp_rank``, or, where SGLang sets none, its
    ``tp_rank`` (only the first attention-TP rank of each DP group exports by default)."""
    return labels.get("engine_type", ""), labels.get("dp_rank", labels.get("tp_rank", ""))


def rank_order(labels: Labels) -> tuple[int, int]:
    """Of a replica's series, the lowest pp/tp rank is kept."""
    return int(labels.get("pp_rank", 0) or 0), int(labels.get("tp_rank", 0) or 0)


def _scheduler_counter(name: str, metric: str) -> ServerMetric:
    split = ("mode", PASS_MODES) if name == GRAPH_PASSES else None
    return ServerMetric(metric, counter=True, split=split)


SGLANG_METRICS = MetricNames(
    kept={
        **{name: ServerMetric(metric, ratio=metric in RATIO_GAUGES, breakdown="priority")
           for name, metric in SERVER_GAUGES.items()},
        **{name: ServerMetric(metric, counter=True, per_replica=False) for name, metric in SERVER_COUNTERS.items()},
        **{name: _scheduler_counter(name, metric) for name, metric in SCHEDULER_COUNTERS.items()},
    },
    replica=replica,
    rank=rank_order,
)
