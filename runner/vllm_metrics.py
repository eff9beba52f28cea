"""A vLLM server's ``/metrics`` read as benchdeck's server samples.

The vLLM counterpart of :func:`runner.telemetry.read_server_metrics`: the same metric names
(``running_reqs``, ``queued_reqs``, ``token_usage``, the token counters that
:func:`runner.telemetry.summarise` turns into ``*_delta`` rows), so the sampler, the summaries
and the compare page need not know which engine served.

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

Like telemetry's reader this is on the sampler's hot path, so only the kept families' blocks
are read (one ``bytes.find`` of each ``# TYPE`` line); the histograms, most of the text, are
never split into lines.
"""

from __future__ import annotations

from runner.telemetry import GaugeSeries, Sample, family_lines, fetch_metrics, parse_sample_line

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
_KEPT = {**VLLM_GAUGES, **VLLM_COUNTERS}
# Averaged over engines: a fraction of each engine's own pool.
_RATIOS = frozenset({"token_usage"})
def vllm_series(text: bytes | str) -> list[GaugeSeries]:
    """Every series of VLLM_GAUGES and VLLM_COUNTERS in a vLLM /metrics text, labels kept."""
    raw = text.encode() if isinstance(text, str) else text
    return [parse_sample_line(line.decode("utf-8", errors="replace"))
            for name in _KEPT for line in family_lines(raw, name.encode(), counter=name in VLLM_COUNTERS)]


def vllm_totals(series: list[GaugeSeries]) -> dict[str, float]:
    """Benchdeck's metrics for the whole server: one series per engine, summed (averaged
    for the KV cache's usage)."""
    per_engine: dict[tuple[str, str], float] = {}
    for s in series:
        per_engine.setdefault((_KEPT[s.name], s.labels.get("engine", "")), s.value)
    values: dict[str, list[float]] = {}
    for (metric, _), value in per_engine.items():
        values.setdefault(metric, []).append(value)
    return {metric: (sum(v) / len(v) if metric in _RATIOS else sum(v)) for metric, v in values.items()}


def vllm_samples(text: bytes | str, now: float) -> list[Sample]:
    """One reading of a vLLM server's /metrics text as ``server`` samples at ``now``
    (counters cumulative; :func:`runner.telemetry.summarise` turns them into deltas)."""
    return [Sample(now, "server", None, metric, value) for metric, value in vllm_totals(vllm_series(text)).items()]


def read_vllm_metrics(base_url: str, now: float, timeout_s: float = 1.0) -> list[Sample]:
    """GET ``base_url``/metrics (telemetry's kept-alive connection) and read it as samples."""
    return vllm_samples(fetch_metrics(base_url, timeout_s), now)
