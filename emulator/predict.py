"""Predict what bench_serving will measure against the emulator, without running it.

:func:`predict` replays a bench_serving point (``--max-concurrency C``, ``--num-prompts N``,
fixed ISL/OSL as with ``--random-range-ratio 1.0``, infinite request rate) through the
same :class:`~emulator.scheduler.Scheduler` the live server uses, on a virtual
clock.  C clients each send a request, wait for its last token and send the next one,
until N are done.  The one timing rule that mirrors the live server: a request arriving
while a step runs joins at the next step boundary, and a follow-up request (sent when
its predecessor's last chunk arrives) misses the step that starts at that same boundary,
as in the live engine, which plans that step before the client's next request reaches it.

Figures are bench_serving's definitions (``duration`` from first dispatch to last
completion, TPOT = (latency − TTFT)/(OSL − 1)), in wall seconds: device time × the time
scale ``S``.  :func:`steady_state` is the closed form for the synchronised rounds a
fixed-length sweep settles into, useful to reason about curves; it is the estimator's
(:func:`domain.estimate.estimator.estimate_point`) on this configuration::

    B        = min(C, max_running_requests, KV-pool capacity)   batch that runs together
    first_i  = end of the prefill step that completes prompt i   (steps: SGLang's PrefillAdder)
    round    = Σ_steps t_prefill + (OSL − 1) · t_decode(B, B·(ISL + OSL/2))
    TTFT     ≈ S · median_i first_i
    TPOT     ≈ S · median_i (round − first_i) / (OSL − 1)
    out tok/s ≈ B·OSL / round                         (flat once C ≥ max_running_requests)
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from domain.estimate.constants import calibration_for
from domain.estimate.estimator import Setup, estimate_point
from emulator.config import EmulatorConfig, config_from_argv
from emulator.scheduler import Request, Scheduler


@dataclass(frozen=True)
class Prediction:
    isl: int
    osl: int
    concurrency: int
    num_prompts: int
    time_scale: float
    duration_s: float
    request_throughput: float
    output_throughput: float  # tok/s
    mean_ttft_ms: float
    median_ttft_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    mean_e2e_latency_ms: float
    max_batch: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _config(flags: EmulatorConfig | Sequence[str]) -> EmulatorConfig:
    return flags if isinstance(flags, EmulatorConfig) else config_from_argv(list(flags))


def _new_request(i: int, isl: int, osl: int, now: float) -> Request:
    # Distinct prompts (random-ids never share 32-token pages), so the prefix cache stays cold.
    ids = [(i * 7919 + j) % 50_000 for j in range(isl)]
    return Request(rid=f"p{i}", prompt_ids=ids, max_new_tokens=osl, stop_after=osl, arrival=now)


def predict(isl: int, osl: int, concurrency: int, flags: EmulatorConfig | Sequence[str],
            num_prompts: int | None = None) -> Prediction:
    """Simulate one bench_serving point; ``flags`` is a resolved config or an emulator argv."""
    cfg = _config(flags)
    n = num_prompts or max(concurrency * 4, 8)
    sched = Scheduler(cfg.timing, cfg.scheduler_limits())
    now, max_batch = 0.0, 0
    done: list[Request] = []
    for i in range(min(concurrency, n)):
        sched.enqueue(_new_request(i, isl, osl, now))
    sent = min(concurrency, n)
    arriving: list[Request] = []  # follow-ups sent at the last boundary
    while len(done) < n:
        step = sched.plan()
        released = [r for r in sched.pop_released() if r.finished]  # OSL 1: done at the first token
        done.extend(released)
        for _ in range(min(len(released), n - sent)):
            arriving.append(_new_request(sent, isl, osl, now))
            sent += 1
        if step is None:
            if not arriving:
                raise RuntimeError("scheduler idle with requests outstanding (a prompt larger than the KV pool?)")
            for req in arriving:  # an idle engine is woken by them and starts at once
                sched.enqueue(req)
            arriving = []
            continue
        for req in arriving:  # a busy engine planned this step before they reached it
            sched.enqueue(req)
        arriving = []
        max_batch = max(max_batch, len(step.decoders) + len(step.chunks))
        now += step.duration_s
        finished = [r for r in sched.apply(step, now) if r.finished]
        done.extend(finished)
        for _ in range(min(len(finished), n - sent)):
            arriving.append(_new_request(sent, isl, osl, now))
            sent += 1
    return _summarise(cfg, done, isl, osl, concurrency, n, max_batch)


def _summarise(cfg: EmulatorConfig, done: list[Request], isl: int, osl: int, concurrency: int, n: int,
               max_batch: int) -> Prediction:
    s = cfg.time_scale
    ttfts = [(r.first_token_at or 0.0) - r.arrival for r in done]
    tpots = [((r.finished_at or 0.0) - (r.first_token_at or 0.0)) / (osl - 1) for r in done] if osl > 1 else [0.0]
    e2e = [(r.finished_at or 0.0) - r.arrival for r in done]
    duration = max(r.finished_at or 0.0 for r in done) * s
    return Prediction(
        isl=isl, osl=osl, concurrency=concurrency, num_prompts=n, time_scale=s, duration_s=duration,
        request_throughput=n / duration, output_throughput=n * osl / duration,
        mean_ttft_ms=statistics.fmean(ttfts) * s * 1e3, median_ttft_ms=statistics.median(ttfts) * s * 1e3,
        mean_tpot_ms=statistics.fmean(tpots) * s * 1e3, median_tpot_ms=statistics.median(tpots) * s * 1e3,
        mean_e2e_latency_ms=statistics.fmean(e2e) * s * 1e3, max_batch=max_batch,
    )


def estimator_setup(cfg: EmulatorConfig) -> Setup:
    """The estimator's view of a resolved emulator configuration (same timing, same limits)."""
    return Setup(timing=cfg.timing, chunked_prefill_size=cfg.chunked_prefill_size,
                 max_prefill_tokens=cfg.max_prefill_tokens, max_running_requests=cfg.max_running_requests,
                 kv_pool_tokens=cfg.max_total_num_tokens, dp_size=1, calibration=calibration_for(cfg.gpu),
                 overlap_prefill_results=cfg.overlap_prefill_results)


def steady_state(isl: int, osl: int, concurrency: int, flags: EmulatorConfig | Sequence[str]) -> dict[str, Any]:
    """The closed form of the module docstring: the estimator's own (domain.estimate.estimator)."""
    cfg = _config(flags)
    est = estimate_point(estimator_setup(cfg), isl, osl, concurrency)
    s = cfg.time_scale
    return {"batch": est.batch, "ttft_ms": est.ttft_ms * s, "tpot_ms": est.tpot_ms * s,
            "output_throughput": est.output_tok_s / s, "bound": est.bound}


_THROUGHPUT_KEYS = ("request_throughput", "input_throughput", "output_throughput", "total_throughput",
                    "max_output_tokens_per_s")


def rescale_record(record: Mapping[str, Any], time_scale: float) -> dict[str, Any]:
    """Convert a bench_serving record measured at time scale ``S`` to emulated-GPU time:
    throughputs × S, latencies (``*_ms``) and ``duration`` ÷ S."""
    out = dict(record)
    for key, value in record.items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        if key in _THROUGHPUT_KEYS:
            out[key] = value * time_scale
        elif key.endswith("_ms") or key == "duration":
            out[key] = value / time_scale
    return out
