"""``/metrics`` of the vLLM personality: vLLM's ``vllm:`` names, labels and types.

Every engine series carries ``model_name`` (the first served name) and ``engine="0"``
(V33 ``v1/metrics/loggers.py:499-505``, V11 :379-385), and exists from start-up at zero,
as vLLM creates one child per engine up front.  Counters go through ``prometheus_client``
like vLLM's, so they are exposed as ``<name>_total`` with a ``<name>_created`` sample.
The gauges are read from the scheduler when scraped (vLLM refreshes them every engine step).

Which step counts what, following vLLM v1's ``IterationStats``: a request's prompt tokens
are counted once, in the step that emits its first token; every emitted token counts as a
generation token; a prefix-cache query is a newly scheduled request's prompt tokens, a hit
the tokens found cached.  With ``--disable-log-stats`` there are no ``vllm:`` series at all
(V33 ``v1/engine/async_llm.py:205-210``).  Two extra series, ``benchdeck_emulator_time_scale``
and ``benchdeck_emulator_lag_seconds_total``, say that the figures are emulated.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from emulator.metrics import emulator_series
from emulator.scheduler import Request, Step
from emulator.step_loop import StepLoop
from emulator.vllm_config import VllmEmulatorConfig

# V33 v1/metrics/buckets.py (the families vLLM's histograms draw from).
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
FINISH_REASONS = ("stop", "length", "abort")


def token_buckets(max_model_len: int) -> list[float]:
    """``build_1_2_5_buckets(max_model_len)``: 1, 2, 5, 10, 20, 50, … up to the limit."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return buckets
            buckets.append(float(value))
        exponent += 1


class _Live(Collector):
    """Gauges read from the scheduler at scrape time, and the emulator's own series."""

    def __init__(self, cfg: VllmEmulatorConfig, step_loop: StepLoop, labels: dict[str, str]) -> None:
        self.cfg, self.step_loop, self.labels = cfg, step_loop, labels

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=list(self.labels))
        family.add_metric(list(self.labels.values()), value)
        return family

    def collect(self) -> Iterator[Metric]:
        sched = self.step_loop.scheduler
        capacity = self.cfg.max_total_num_tokens
        yield self._gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                          len(sched.running))
        yield self._gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                          len(sched.waiting))
        yield self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                          sched.kv_used() / capacity if capacity else 0.0)
        yield self._cache_config_info()
        yield from emulator_series(self.cfg.time_scale, self.step_loop.lag_s)

    def _cache_config_info(self) -> GaugeMetricFamily:
        """``vllm:cache_config_info`` = 1, the cache config as labels (a subset of CacheConfig's fields)."""
        v = self.cfg.vllm
        info = {"block_size": str(v.block_size), "cache_dtype": v.kv_cache_dtype,
                "enable_prefix_caching": str(v.prefix_caching), "gpu_memory_utilization": str(v.gpu_memory_utilization),
                "num_gpu_blocks": str(v.num_gpu_blocks), "engine": "0"}
        family = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                                   labels=list(info))
        family.add_metric(list(info.values()), 1)
        return family


class VllmMetrics:
    def __init__(self, cfg: VllmEmulatorConfig, step_loop: StepLoop) -> None:
        self.cfg = cfg
        self.registry = CollectorRegistry(auto_describe=False)
        self.labels = {"model_name": cfg.served_model_name, "engine": "0"}
        self.registry.register(_Live(cfg, step_loop, self.labels))
        names = list(self.labels)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, names, registry=self.registry)

        def histogram(name: str, doc: str, buckets: tuple[float, ...] | list[float]) -> Histogram:
            return Histogram(name, doc, names, registry=self.registry, buckets=buckets)

        self.queries = counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried "
                               "tokens.").labels(**self.labels)
        self.hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached "
                            "tokens.").labels(**self.labels)
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the "
                                   "engine.").labels(**self.labels)
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.").labels(**self.labels)
        self.generation_tokens = counter("vllm:generation_tokens",
                                         "Number of generation tokens processed.").labels(**self.labels)
        success = Counter("vllm:request_success", "Count of successfully processed requests.",
                          [*names, "finished_reason"], registry=self.registry)
        self.success = {reason: success.labels(**self.labels, finished_reason=reason) for reason in FINISH_REASONS}
        lengths = token_buckets(cfg.context_len)
        self.request_prompt = histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                        lengths).labels(**self.labels)
        self.request_generation = histogram("vllm:request_generation_tokens", "Number of generation tokens "
                                            "processed.", lengths).labels(**self.labels)
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              TTFT_BUCKETS).labels(**self.labels)
        self.itl = histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             ITL_BUCKETS).labels(**self.labels)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             REQUEST_LATENCY_BUCKETS).labels(**self.labels)
        self.queue = histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for "
                               "request.", REQUEST_LATENCY_BUCKETS).labels(**self.labels)
        self._preempted = 0
        self._scheduler = step_loop.scheduler
        step_loop.step_hooks.append(self.observe_step)

    def observe_step(self, step: Step, now: float) -> None:
        for req, n in step.chunks:
            if req.prefilled - n == req.cached:  # the request's first chunk: vLLM queries the prefix cache
                self.queries.inc(req.prompt_len)
                if self.cfg.vllm.prefix_caching:
                    self.hits.inc(req.cached)
            if req.first_token_at == now and req.generated == 1:
                self.prompt_tokens.inc(req.prompt_len)
                self.request_prompt.observe(req.prompt_len)
                self.ttft.observe(now - req.arrival)
                if req.admitted_at is not None:
                    self.queue.observe(req.admitted_at - req.arrival)
        emitted = [r for r, _ in step.chunks if r.last_token_at == now] + list(step.decoders)
        self.generation_tokens.inc(len(emitted))
        for req in emitted:
            if req.prev_token_at is not None:
                self.itl.observe(now - req.prev_token_at)
            if req.finished_at == now:
                self._finished(req, now)
        retractions = self._scheduler.counters.retractions
        if retractions > self._preempted:
            self.preemptions.inc(retractions - self._preempted)
            self._preempted = retractions

    def _finished(self, req: Request, now: float) -> None:
        self.success.get(req.finish_reason or "abort", self.success["abort"]).inc()
        self.request_generation.observe(req.generated)
        self.e2e.observe(now - req.arrival)

    def render(self) -> bytes:
        return generate_latest(self.registry)
