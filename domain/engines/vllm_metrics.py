"""vLLM's ``/metrics`` as the shared reader (``server_metrics.py``) reads it.

vLLM's families (``v1/metrics/loggers.py`` of both shipped wheels, 0.33.0 and 0.11.2) carry
the labels ``model_name`` and ``engine`` (the engine's index, one per data-parallel engine);
a counter named ``vllm:x`` is exposed by prometheus_client as ``vllm:x_total`` next to a
``vllm:x_created`` series, which is never read.  Per metric, one series per engine (a repeat of
an engine's series is dropped), then counts and counters summed over engines and the KV
cache's usage, a ratio of equal-sized pools, averaged.

What each benchdeck name means here:

* ``running_reqs`` / ``queued_reqs``: ``vllm:num_requests_running`` / ``_waiting``, the
  scheduler's running and waiting requests;
* ``token_usage``: ``vllm:kv_cache_usage_perc``, the KV cache's used fraction, 0..1 like
  SGLang's ``token_usage``;
* ``prompt_tokens_total`` / ``generation_tokens_total``: ``vllm:prompt_tokens_total`` /
  ``vllm:generation_tokens_total``, the server's own count of the tokens it served.  vLLM
  raises the prompt counter by a request's whole prompt (cached tokens included) when its
  prefill ends and the generation counter as tokens come out (``IterationStats``), where
  SGLang raises both when a request finishes; over a point's window, which ends with a
  reading after the last request finished, both count the measured requests;
* ``retracted_requests_total``: ``vllm:num_preemptions_total``, requests the scheduler
  pushed back because the KV cache could not hold their next tokens, what SGLang calls a
  retraction;
* ``prefix_cache_queries_total`` / ``prefix_cache_hits_total`` (vLLM's alone):
  ``vllm:prefix_cache_queries_total`` / ``_hits_total``, prompt tokens looked up in the
  prefix cache and those found.  Not SGLang's ``cache_hit_rate`` gauge: these are cumulative.
"""

from __future__ import annotations

from domain.engines.server_metrics import Labels, MetricNames, ServerMetric

VLLM_GAUGES = {
    "vllm:num_requests_running": "running_reqs",
    "vllm:num_requests_waiting": "queued_reqs",
    "vllm:kv_cache_usage_perc": "token_usage",
}
VLLM_COUNTERS = {
    "vllm:prompt_tokens_total": "prompt_tokens_total",
    "vllm:generation_tokens_total": "generation_tokens_total",
    "vllm:num_preemptions_total": "retracted_requests_total",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits_total",
}
# Averaged over engines: a fraction of each engine's own pool.
RATIOS = frozenset({"token_usage"})


def engine(labels: Labels) -> tuple[str]:
    """Which data-parallel engine a series describes."""
    return (labels.get("engine", ""),)


VLLM_METRICS = MetricNames(
    kept={
        **{name: ServerMetric(metric, ratio=metric in RATIOS) for name, metric in VLLM_GAUGES.items()},
        **{name: ServerMetric(metric, counter=True) for name, metric in VLLM_COUNTERS.items()},
    },
    replica=engine,
)
