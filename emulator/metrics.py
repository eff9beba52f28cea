"""``/metrics``: Prometheus text with SGLang's ``sglang:`` metric names and labels.

The scheduler's gauges hold what it last published (after each prefill batch, every
``--decode-log-interval`` decode batches, and when it falls idle), not the live state; they
carry the scheduler's labels (ranks, and ``engine_type`` prefill/decode under PD), the
tokenizer manager's per-request series its own (``is_streaming``, ``cache_source``).
``tests/test_emulator_conformance.py`` checks names, types and labels against the installed
SGLang.  Two extra series, ``benchdeck_emulator_time_scale`` and
``benchdeck_emulator_lag_seconds_total``, say that the figures are emulated and whether
the host's CPU kept up with the model.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from emulator.config import EmulatorConfig
from emulator.scheduler import Request, Scheduler, Step
from emulator.step_loop import StepLoop

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                15.0, 20.0, 25.0, 30.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1,
               0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
               200.0, 400.0, 800.0)


DECODE_LOG_INTERVAL = 40  # SGLang's --decode-log-interval default
GEN_THROUGHPUT_STALENESS_S = 30.0  # after this long without a decode report the real gauge reads 0


def engine_type(args: dict[str, Any]) -> str:
    """SGLang's ``DisaggregationMode.to_engine_type``: the PD role, ``unified`` otherwise."""
    mode = args.get("disaggregation_mode")
    return mode if mode in ("prefill", "decode") else "unified"


def scheduler_labels(cfg: EmulatorConfig) -> dict[str, str]:
    """The labels of the scheduler's series: one scheduler, rank 0 of every group.  A PD role
    switch keeps one series (``dynamic``); ``priority`` and ``dp_rank`` only where SGLang adds them."""
    labels = {"model_name": cfg.served_model_name,
              "engine_type": "dynamic" if cfg.args.get("enable_pd_role_switch") else engine_type(cfg.args),
              "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
    if cfg.args.get("enable_priority_scheduling"):
        labels["priority"] = ""
    if cfg.dp_size > 1:  # a data-parallel controller gives each replica a dp_rank
        labels["dp_rank"] = "0"
    return labels


def tokenizer_labels(cfg: EmulatorConfig) -> dict[str, str]:
    """The labels of the tokenizer manager's per-request series (no ranks: it is one process)."""
    labels = {"model_name": cfg.served_model_name, "engine_type": engine_type(cfg.args)}
    if cfg.args.get("enable_priority_scheduling"):
        labels["priority"] = ""
    return labels


@dataclass
class SchedulerStats:
    """The values the scheduler last published; Prometheus reads these, not the live state."""

    num_running_reqs: int = 0
    num_queue_reqs: int = 0
    num_used_tokens: int = 0
    token_usage: float = 0.0
    cache_hit_rate: float = 0.0
    gen_throughput: float = 0.0
    num_retracted_reqs: int = 0


class StatsReporter:
    """Publishes :class:`SchedulerStats` when SGLang's scheduler does: after every prefill
    batch, after every ``--decode-log-interval``-th decode batch, and at once when it falls
    idle with a stale running count.  Between those the gauges hold their last value."""

    def __init__(self, cfg: EmulatorConfig, scheduler: Scheduler) -> None:
        self.cfg, self.scheduler = cfg, scheduler
        self.interval = int(cfg.args.get("decode_log_interval") or DECODE_LOG_INTERVAL)
        self.stats = SchedulerStats()
        self.decodes = 0
        self.last_gen_throughput = 0.0
        self._decode_mark: tuple[float | None, int] = (None, 0)  # last decode report: time, tokens
        self._retractions = 0
        # sglang:cuda_graph_passes_total by decode mode: SGLang raises it on every decode
        # batch (batch_result_processor.py), in a graph when the batch fits the captured sizes.
        self.decode_passes = {"decode_cuda_graph": 0, "decode_none": 0}

    def observe_step(self, step: Step, now: float) -> None:
        if step.kind == "prefill":
            self._report_prefill(step, now)
            return
        graph_max = self.cfg.cuda_graph_max_bs
        in_graph = graph_max is not None and len(step.decoders) <= graph_max
        self.decode_passes["decode_cuda_graph" if in_graph else "decode_none"] += 1
        self.decodes += 1
        if self.decodes % self.interval == 0:
            self._report_decode(step, now)

    def refresh_if_idle(self) -> None:
        """The idle scheduler republishes when its gauge disagrees with the empty batch."""
        if self.scheduler.idle() and self.stats.num_running_reqs:
            self._publish(running=0, throughput=0.0)

    def _report_prefill(self, step: Step, now: float) -> None:
        new = [r for r, n in step.chunks if r.prefilled - n == r.cached]  # first chunk of each request
        hit, computed = sum(r.cached for r in new), sum(n for _, n in step.chunks)
        self.stats.cache_hit_rate = hit / (hit + computed) if hit + computed else 0.0
        # PD prefill has no running batch, so the real one counts the forward batch instead.
        running = len(step.chunks) if engine_type(self.cfg.args) == "prefill" \
            else max(0, len(self.scheduler.running) - len(step.chunks))
        last_at = self._decode_mark[0]
        stale = last_at is None or now - last_at > GEN_THROUGHPUT_STALENESS_S
        self._publish(running=running, throughput=0.0 if stale else self.last_gen_throughput)

    def _report_decode(self, step: Step, now: float) -> None:
        last_at, last_tokens = self._decode_mark
        tokens = self.scheduler.counters.generation_tokens
        if last_at is not None and now > last_at:
            self.last_gen_throughput = (tokens - last_tokens) / (now - last_at)
        self._decode_mark = (now, tokens)
        self._publish(running=len(step.decoders), throughput=self.last_gen_throughput)

    def _publish(self, running: int, throughput: float) -> None:
        sched, capacity, stats = self.scheduler, self.cfg.max_total_num_tokens, self.stats
        stats.num_running_reqs, stats.num_queue_reqs, stats.gen_throughput = running, len(sched.waiting), throughput
        stats.num_used_tokens = sched.kv_used()
        stats.token_usage = stats.num_used_tokens / capacity if capacity else 0.0
        # The real gauge counts retractions since the previous report.
        stats.num_retracted_reqs = sched.counters.retractions - self._retractions
        self._retractions = sched.counters.retractions


class _Gauges(Collector):
    def __init__(self, cfg: EmulatorConfig, step_loop: StepLoop, reporter: StatsReporter) -> None:
        self.cfg, self.step_loop, self.reporter = cfg, step_loop, reporter
        self.labels = scheduler_labels(cfg)

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=list(self.labels))
        family.add_metric(list(self.labels.values()), value)
        return family

    def collect(self) -> Iterator[Metric]:
        self.reporter.refresh_if_idle()
        stats = self.reporter.stats
        yield self._gauge("sglang:num_running_reqs", "The number of running requests.", stats.num_running_reqs)
        yield self._gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.",
                          stats.num_queue_reqs)
        yield self._gauge("sglang:num_used_tokens", "The number of used tokens.", stats.num_used_tokens)
        yield self._gauge("sglang:token_usage", "The token usage.", stats.token_usage)
        yield self._gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV pool.",
                          self.cfg.max_total_num_tokens)
        yield self._gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", stats.cache_hit_rate)
        yield self._gauge("sglang:gen_throughput", "The generation throughput (token/s).", stats.gen_throughput)
        yield self._gauge("sglang:num_retracted_reqs", "The number of retracted requests.", stats.num_retracted_reqs)
        yield from self._counters()
        yield self._gauge("sglang:kv_cache_memory_usage_gb", "KV cache memory (GB).", self.cfg.memory.kv_gb)
        yield self._gauge("sglang:spec_accept_length", "The average acceptance length of speculative decoding.", 0)
        yield from self._emulator_series()

    def _counters(self) -> Iterator[Metric]:
        """The scheduler's counters as SGLang 0.5.23 exports them: a series appears with its
        first increment (a labelled prometheus Counter), so a mode that never ran has none."""
        retracted = self.step_loop.scheduler.counters.retractions
        if retracted:
            family = CounterMetricFamily("sglang:num_retracted_requests", "Total number of retracted requests.",
                                         labels=list(self.labels))
            family.add_metric(list(self.labels.values()), retracted)
            yield family
        passes = {mode: n for mode, n in self.reporter.decode_passes.items() if n}
        if passes:
            family = CounterMetricFamily("sglang:cuda_graph_passes",
                                         "Total number of forward passes categorized by CUDA graph.",
                                         labels=[*self.labels, "mode"])
            for mode, n in passes.items():
                family.add_metric([*self.labels.values(), mode], n)
            yield family

    def _emulator_series(self) -> Iterator[Metric]:
        return emulator_series(self.cfg.time_scale, self.step_loop.lag_s)


def emulator_series(time_scale: float, lag_s: float) -> Iterator[Metric]:
    """The emulator's own series, whichever engine it speaks: its slow-motion factor and how
    far its step loop fell behind the model (benchdeck_ names: never an engine's)."""
    scale = GaugeMetricFamily("benchdeck_emulator_time_scale", "Slow-motion factor of the emulated engine.")
    scale.add_metric([], time_scale)
    yield scale
    lag = CounterMetricFamily("benchdeck_emulator_lag_seconds",
                              "Wall seconds the emulator's step loop fell behind the model (CPU-bound).")
    lag.add_metric([], lag_s)
    yield lag


class Metrics:
    def __init__(self, cfg: EmulatorConfig, step_loop: StepLoop) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.reporter = StatsReporter(cfg, step_loop.scheduler)
        self.registry.register(_Gauges(cfg, step_loop, self.reporter))
        self.labels, sched_labels = tokenizer_labels(cfg), scheduler_labels(cfg)

        def counter(name: str, doc: str, extra: str) -> Counter:
            return Counter(name, doc, [*self.labels, extra], registry=self.registry)

        def histogram(name: str, doc: str, buckets: tuple[float, ...], extra: tuple[str, ...]) -> Histogram:
            return Histogram(name, doc, [*self.labels, *extra], registry=self.registry, buckets=buckets)

        # The tokenizer manager's series, split by is_streaming (cached tokens by cache_source).
        self.prompt_tokens = counter("sglang:prompt_tokens", "Number of prefill tokens processed.", "is_streaming")
        self.generation_tokens = counter("sglang:generation_tokens", "Number of generation tokens processed.",
                                         "is_streaming")
        self.cached_tokens = counter("sglang:cached_tokens", "Number of cached prompt tokens.", "cache_source")
        self.num_requests = counter("sglang:num_requests", "Number of requests processed.", "is_streaming")
        self.ttft = histogram("sglang:time_to_first_token_seconds", "Time to first token in seconds.", TTFT_BUCKETS,
                              ("is_streaming",))
        self.itl = histogram("sglang:inter_token_latency_seconds", "Inter-token latency in seconds.", ITL_BUCKETS,
                             ()).labels(**self.labels)
        self.e2e = histogram("sglang:e2e_request_latency_seconds", "End-to-end request latency in seconds.",
                             E2E_BUCKETS, ("is_streaming",))
        # The scheduler's series carry the scheduler's labels.
        self.queue = Histogram("sglang:queue_time_seconds", "Time spent waiting in the queue in seconds.",
                               list(sched_labels), registry=self.registry, buckets=E2E_BUCKETS).labels(**sched_labels)
        step_loop.step_hooks.append(self.reporter.observe_step)
        step_loop.token_hooks.append(self.observe_tokens)

    def _stream(self, req: Request) -> dict[str, str]:
        return {**self.labels, "is_streaming": "true" if req.stream else "false"}

    def observe_tokens(self, emitted: list[Request]) -> None:
        """Per request, when its token streams (the tokenizer manager observes them then)."""
        for req in emitted:
            if req.generated == 1 and req.first_token_at is not None:
                self.ttft.labels(**self._stream(req)).observe(req.first_token_at - req.arrival)
                if req.admitted_at is not None:
                    self.queue.observe(req.admitted_at - req.arrival)
            if req.prev_token_at is not None and req.last_token_at is not None:
                self.itl.observe(req.last_token_at - req.prev_token_at)
            if req.finished_at is not None:
                self._observe_finished(req, req.finished_at)

    def _observe_finished(self, req: Request, now: float) -> None:
        """The tokenizer manager counts a request's tokens once, when it finishes."""
        labels = self._stream(req)
        self.prompt_tokens.labels(**labels).inc(req.prompt_len)
        self.generation_tokens.labels(**labels).inc(req.generated)
        if req.cached:  # the radix cache is on the device
            self.cached_tokens.labels(**self.labels, cache_source="device").inc(req.cached)
        self.num_requests.labels(**labels).inc()
        self.e2e.labels(**labels).observe(now - req.arrival)

    def render(self) -> bytes:
        return generate_latest(self.registry)
