"""``/metrics``: Prometheus text with SGLang's ``sglang:`` metric names and labels.

Gauges are read from the step loop when scraped; counters and histograms are fed from each
finished step.  Two extra series, ``benchdeck_emulator_time_scale`` and
``benchdeck_emulator_lag_seconds_total``, say that the figures are emulated and whether
the host's CPU kept up with the model.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from emulator.config import EmulatorConfig
from emulator.scheduler import Step
from emulator.step_loop import StepLoop

LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                15.0, 20.0, 25.0, 30.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1,
               0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
               200.0, 400.0, 800.0)


class _Gauges(Collector):
    def __init__(self, cfg: EmulatorConfig, step_loop: StepLoop, labels: list[str]) -> None:
        self.cfg, self.step_loop, self.labels = cfg, step_loop, labels

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=LABELS)
        family.add_metric(self.labels, value)
        return family

    def collect(self) -> Iterator[Metric]:
        sched, capacity = self.step_loop.scheduler, self.cfg.max_total_num_tokens
        used = sched.kv_used()
        counters = sched.counters
        hit = counters.cached_tokens / counters.prompt_tokens if counters.prompt_tokens else 0.0
        yield self._gauge("sglang:num_running_reqs", "The number of running requests.", len(sched.running))
        yield self._gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", len(sched.waiting))
        yield self._gauge("sglang:num_used_tokens", "The number of used tokens.", used)
        yield self._gauge("sglang:token_usage", "The token usage.", used / capacity if capacity else 0.0)
        yield self._gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV pool.", capacity)
        yield self._gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", hit)
        yield self._gauge("sglang:gen_throughput", "The generation throughput (token/s).",
                          self.step_loop.gen_throughput())
        yield self._gauge("sglang:num_retracted_reqs", "The number of retracted requests.", counters.retractions)
        yield self._gauge("sglang:kv_cache_memory_usage_gb", "KV cache memory (GB).", self.cfg.memory.kv_gb)
        yield self._gauge("sglang:spec_accept_length", "The average acceptance length of speculative decoding.", 0)
        scale = GaugeMetricFamily("benchdeck_emulator_time_scale", "Slow-motion factor of the emulated engine.")
        scale.add_metric([], self.cfg.time_scale)
        yield scale
        lag = CounterMetricFamily("benchdeck_emulator_lag_seconds",
                                  "Wall seconds the emulator's step loop fell behind the model (CPU-bound).")
        lag.add_metric([], self.step_loop.lag_s)
        yield lag


class Metrics:
    def __init__(self, cfg: EmulatorConfig, step_loop: StepLoop) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        values = [cfg.served_model_name, "unified", "0", "0", "0"]
        self.registry.register(_Gauges(cfg, step_loop, values))

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=self.registry).labels(*values)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, LABELS, registry=self.registry, buckets=buckets).labels(*values)

        self.prompt_tokens = counter("sglang:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("sglang:generation_tokens", "Number of generation tokens processed.")
        self.cached_tokens = counter("sglang:cached_tokens", "Number of cached prompt tokens.")
        self.num_requests = counter("sglang:num_requests", "Number of requests processed.")
        self.ttft = histogram("sglang:time_to_first_token_seconds", "Time to first token in seconds.", TTFT_BUCKETS)
        self.itl = histogram("sglang:inter_token_latency_seconds", "Inter-token latency in seconds.", ITL_BUCKETS)
        self.e2e = histogram("sglang:e2e_request_latency_seconds", "End-to-end request latency in seconds.",
                             E2E_BUCKETS)
        self.queue = histogram("sglang:queue_time_seconds", "Time spent waiting in the queue in seconds.",
                               E2E_BUCKETS)
        step_loop.step_hooks.append(self.observe_step)

    def observe_step(self, step: Step, now: float) -> None:
        for req, _ in step.chunks:
            if req.first_token_at == now and req.generated == 1:  # prefill completed in this step
                self.prompt_tokens.inc(req.prompt_len)
                self.cached_tokens.inc(req.cached)
                self.ttft.observe(now - req.arrival)
                if req.admitted_at is not None:
                    self.queue.observe(req.admitted_at - req.arrival)
        emitted = [r for r, _ in step.chunks if r.last_token_at == now] + list(step.decoders)
        self.generation_tokens.inc(len(emitted))
        for req in emitted:
            if req.prev_token_at is not None:
                self.itl.observe(now - req.prev_token_at)
            if req.finished_at == now:
                self.num_requests.inc()
                self.e2e.observe(now - req.arrival)

    def render(self) -> bytes:
        return generate_latest(self.registry)
