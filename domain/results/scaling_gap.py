"""Why not N×?  Each concurrency step's gap to linear scaling, split into causes.

For a step ``c1 → c2`` of one run and scenario, the ideal is linear scaling of the first
point, ``thr(c1)·c2/c1``, and the gap is ``ideal − thr(c2)`` (output tok/s, bench_serving's
``output_throughput``).  The split rests on an identity of bench_serving's closed loop:
with ``λ = completed/duration``, ``thr = λ·L`` (``L`` mean output tokens of a request) and,
by Little's law, ``achieved_concurrency = λ·E2E`` (bench_serving's ``concurrency`` is
``Σ e2e / duration``).  So, with ``a = achieved_concurrency / c``::

    thr(c) = c · a · L / E2E,      E2E = W + P + (L − 1)·(D + I)

where every term is measured, none is modelled:

- ``W``  queue wait per request: the server's mean waiting queue (``sglang:num_queue_reqs``
  sampled from /metrics over the measured window) over ``λ`` (Little's law on the queue),
  at most the mean TTFT (a request waits before its first token);
- ``P``  the rest of the mean TTFT (its prefill, and the other prompts prefilled before it);
- ``D``  the decode step: the median inter-token latency (ITL), at most the per-token time;
- ``I``  what prefill steps add per output token: ``(E2E − TTFT)/(L − 1) − D`` (the mean
  time per output token above the median step; SGLang pauses decoding for prefill).

Going from ``c1`` to ``c2`` changes ``a, W, P, D, I, L``.  The ratio ``thr(c2)/ideal`` is
split into one factor per cause by changing the terms from their ``c1`` to their ``c2``
values **in a fixed order**, each factor being the throughput after the change over the
throughput before it:

1. ``running_cap_or_kv_pool``: ``W``, where the server held its batch below ``c2``
   (:func:`batch_held`: the running gauge stayed below ``c2`` while requests queued, the
   pool was nearly full, or requests were retracted): requests waited because
   ``--max-running-requests`` or the KV pool kept them out;
2. ``throttling``: ``D`` scaled by the SM clock ratio (NVML), only where the point's
   clock-event reasons include a slowdown or the power cap;
3. ``eager_batches``: ``D`` scaled by its growth above the trend, only where the running
   batch crosses the largest captured CUDA graph at this step (``cuda_graph_max_bs[_decode]``
   from the server's ``/server_info``); the trend is the median ITL's growth per batch
   doubling measured on the neighbouring step that does not cross it (none: no share);
4. ``decode_step_growth``: the rest of ``D``'s growth (a bigger batch reads more experts
   and KV per step);
5. ``prefill_interference``: ``P`` and ``I``, and ``W`` where the batch was not held
   (every offered request ran at some point, so the queue waited for the prefill budget);
6. ``length_variance``: ``L`` (output shortfall, random lengths), and ``a`` where the
   lengths vary (range ratio < 1 or a shortfall): variable lengths drain the batch slowly;
7. ``remaining``: whatever the product of those factors does not explain (with fixed
   lengths mostly ``a``: the client's ramp-up and drain), shown as such.

A cause without its signal has the factor 1.  The factors multiply to ``thr(c2)/ideal``
exactly, and each becomes tok/s by the logarithmic-mean split
``tok_s_i = −ln f_i · (ideal − measured)/(ln ideal − ln measured)`` (``ideal`` when the two
are equal), so the causes' tok/s add up to the gap whatever its sign; a factor above 1 (a
term that improved) gives a negative share.

Inputs are the points frame (:mod:`domain.results.frames`), the telemetry summaries of the
run (``db/queries.py`` TELEMETRY_OF_RUN: ``point_id, source, device, metric, n, mean, p50,
max``) and the attempt's start-up facts (``runner/attempt.py``); :func:`scaling_points`
turns them into :class:`ScalingPoint` values, :func:`explain_gaps` is pure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from domain.core.i18n import t
from domain.results.validity import SW_POWER_CAP, THROTTLE_MASK, THROTTLE_REASONS

CAUSES = ("running_cap_or_kv_pool", "throttling", "eager_batches", "decode_step_growth", "prefill_interference",
          "length_variance", "remaining")
GAP_COLUMNS = ("run_id", "scenario", "c_from", "c_to", "ideal", "measured", "gap", "cause", "factor", "share",
               "tok_s", "sentence_key", "params")
SLOWDOWN_MASK = THROTTLE_MASK | SW_POWER_CAP  # the clock-event reasons that lower the clock under load
KV_FULL = 0.9  # peak token_usage from which the KV pool, not a cap, is named as what holds requests back
SHORTFALL = 0.98  # mean output below this fraction of what the lengths ask for is a shortfall

# The gauges and counter deltas of runner/telemetry.py this module reads (source "server").
RUNNING, QUEUED, TOKEN_USAGE = "running_reqs", "queued_reqs", "token_usage"
# Counter deltas a real server exposes (sglang:num_retracted_requests_total, sglang:cuda_graph_passes_total
# by mode; runner/telemetry.py SCHEDULER_COUNTERS): read when present, no signal when absent.
RETRACTIONS = "retracted_requests_delta"
EAGER_PASSES, GRAPH_PASSES = "eager_decode_passes_delta", "graph_decode_passes_delta"
EAGER_JUMP = 0.5  # a rise in the eager share of decode passes that counts as leaving the graphs
SM_CLOCK = "sm_clock_mhz"


@dataclass(frozen=True)
class ServerFacts:
    """What the server said about itself at start-up, for one run."""

    max_running_requests: int | None = None  # the limit the scheduler applies
    max_running_requests_flag: int | None = None  # --max-running-requests as given (None: auto-sized)
    cuda_graph_max_bs: int | None = None  # largest captured decode batch; 0: graphs disabled; None: unknown
    chunked_prefill_size: int | None = None  # ≤ 0: chunking disabled


@dataclass(frozen=True)
class ScalingPoint:
    """One measured concurrency of one run and scenario (repeats folded: medians of the
    bench figures, mean of the gauges' means, max of their maxima)."""

    run_id: int
    scenario: str
    concurrency: int
    output_throughput: float | None  # tok/s
    request_throughput: float | None = None  # req/s
    completed: float | None = None
    total_output_tokens: float | None = None
    achieved_concurrency: float | None = None  # bench_serving's Σ e2e / duration
    ttft_mean_ms: float | None = None
    ttft_median_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_median_ms: float | None = None
    tpot_p99_ms: float | None = None
    itl_median_ms: float | None = None
    e2e_mean_ms: float | None = None
    input_len: int | None = None
    output_len: int | None = None
    random_range_ratio: float | None = None
    clock_event_reasons: int | None = None  # OR over samples and GPUs
    sm_clock_mhz: float | None = None  # mean over samples and GPUs
    running_mean: float | None = None
    running_max: float | None = None
    queued_mean: float | None = None
    queued_max: float | None = None
    token_usage_max: float | None = None
    retractions: float | None = None
    eager_share: float | None = None  # decode passes run without a CUDA graph, of all decode passes
    facts: ServerFacts = field(default_factory=ServerFacts)


# -- building the inputs ------------------------------------------------------------------------

def _get(row: Any, name: str) -> Any:
    return row.get(name) if isinstance(row, Mapping) else getattr(row, name, None)


def _num(value: Any) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _int(value: Any) -> int | None:
    number = _num(value)
    return None if number is None else int(number)


def server_facts(startup_facts: Mapping[str, Any] | None, server_args: Mapping[str, Any] | None) -> ServerFacts:
    """The facts of one run: the start-up facts first (the scheduler's line, ``/server_info``'s
    resolved flags), the flags as given where the server said nothing."""
    facts, args = dict(startup_facts or {}), dict(server_args or {})
    raw_info = facts.get("server_info")
    info: Mapping[str, Any] = raw_info if isinstance(raw_info, Mapping) else {}
    return ServerFacts(
        max_running_requests=_int(facts.get("max_running_requests")) or _int(args.get("max-running-requests")),
        max_running_requests_flag=_int(args.get("max-running-requests")),
        cuda_graph_max_bs=_graph_max_bs(info, args),
        chunked_prefill_size=_int(facts.get("chunked_prefill_size") or info.get("chunked_prefill_size")
                                  or args.get("chunked-prefill-size")),
    )


def _graph_max_bs(info: Mapping[str, Any], args: Mapping[str, Any]) -> int | None:
    """The largest captured decode batch: 0.5.20+ calls it ``cuda_graph_max_bs_decode``,
    earlier versions ``cuda_graph_max_bs``; ``disable_cuda_graph`` means none (0)."""
    if info.get("disable_cuda_graph") or args.get("disable-cuda-graph"):
        return 0
    for value in (info.get("cuda_graph_max_bs_decode"), info.get("cuda_graph_max_bs"),
                  args.get("cuda-graph-max-bs-decode"), args.get("cuda-graph-max-bs")):
        if _int(value) is not None:
            return _int(value)
    return None


def _telemetry_by_point(telemetry: Iterable[Any]) -> dict[int, dict[str, dict[str, list[float]]]]:
    """point_id → metric → {"mean": [...], "max": [...]} over the server's (``server``,
    ``server:<member>``) and the GPUs' rows."""
    out: dict[int, dict[str, dict[str, list[float]]]] = {}
    for row in telemetry:
        source, metric = str(_get(row, "source") or ""), str(_get(row, "metric") or "")
        if not (source == "gpu" or source.startswith("server")) or _get(row, "point_id") is None:
            continue
        stats = out.setdefault(int(_get(row, "point_id")), {}).setdefault(metric, {"mean": [], "max": []})
        for stat in ("mean", "max"):
            value = _num(_get(row, stat))
            if value is not None:
                stats[stat].append(value)
    return out


def _median(values: Iterable[Any]) -> float | None:
    """The median of the recorded values (the middle two's mean for an even count, as
    pandas' median); None when none was recorded.  ``statistics.median`` on the floats
    themselves: a point's few repeats, where building a Series per metric cost 1 ms each."""
    numbers = [v for v in (_num(x) for x in values) if v is not None]
    return float(statistics.median(numbers)) if numbers else None


def _reasons(values: Iterable[Any]) -> int | None:
    mask, seen = 0, False
    for value in values:
        if _num(value) is not None:
            mask, seen = mask | int(_num(value) or 0), True
    return mask if seen else None


def _gauge(tele: list[dict[str, dict[str, list[float]]]], metric: str, stat: str) -> float | None:
    """A gauge over a point's repeats: the mean of its means (summed over servers) or the max of its maxima."""
    per_repeat = []
    for point in tele:
        values = point.get(metric, {}).get(stat, [])
        if values:
            per_repeat.append(max(values) if stat == "max" else sum(values))
    if not per_repeat:
        return None
    return max(per_repeat) if stat == "max" else sum(per_repeat) / len(per_repeat)


def _delta(tele: list[dict[str, dict[str, list[float]]]], metric: str) -> float | None:
    """A counter's increase over the measured window: summed over servers, averaged over repeats."""
    per_repeat = [sum(point[metric]["max"]) for point in tele if point.get(metric, {}).get("max")]
    return sum(per_repeat) / len(per_repeat) if per_repeat else None


def _eager_share(tele: list[dict[str, dict[str, list[float]]]]) -> float | None:
    eager, graph = _delta(tele, EAGER_PASSES), _delta(tele, GRAPH_PASSES)
    if eager is None and graph is None:
        return None
    # A mode's series appears with its first pass: with the counter there, an absent mode ran none.
    eager, graph = eager or 0.0, graph or 0.0
    return eager / (eager + graph) if eager + graph > 0 else None


def _gpu_mean(tele: list[dict[str, dict[str, list[float]]]], metric: str) -> float | None:
    values = [v for point in tele for v in point.get(metric, {}).get("mean", [])]
    return sum(values) / len(values) if values else None


def scaling_points(points: pd.DataFrame, telemetry: Iterable[Any],
                   startup_facts: Mapping[int, Mapping[str, Any]] | None = None) -> list[ScalingPoint]:
    """The inputs of :func:`explain_gaps` from a points frame (``domain.results.frames``),
    the telemetry summaries of its points (``TelemetryRow`` objects or mappings) and each
    run's start-up facts (run_id → the attempt's ``startup_facts``)."""
    if points.empty:
        return []
    by_point = _telemetry_by_point(telemetry)
    out = []
    for (run_id, scenario, concurrency), group in points.groupby(["run_id", "scenario", "concurrency"], sort=True):
        first = group.iloc[0]
        tele = [by_point.get(int(pid), {}) for pid in group.get("point_id", pd.Series(dtype=float)).dropna()]
        facts = server_facts((startup_facts or {}).get(int(run_id)), first.get("server_args"))
        out.append(_point(int(run_id), str(scenario), int(concurrency), group, tele, facts))
    return out


def _point(run_id: int, scenario: str, concurrency: int, group: pd.DataFrame,
           tele: list[dict[str, dict[str, list[float]]]], facts: ServerFacts) -> ScalingPoint:
    def med(column: str) -> float | None:
        return _median(group[column]) if column in group else None

    first = group.iloc[0]
    return ScalingPoint(
        run_id=run_id, scenario=scenario, concurrency=concurrency,
        output_throughput=med("output_throughput"), request_throughput=med("request_throughput"),
        completed=med("completed"), total_output_tokens=med("total_output_tokens"),
        achieved_concurrency=med("achieved_concurrency"), ttft_mean_ms=med("ttft_mean_ms"),
        ttft_median_ms=med("ttft_median_ms"), ttft_p99_ms=med("ttft_p99_ms"), tpot_median_ms=med("tpot_median_ms"),
        tpot_p99_ms=med("tpot_p99_ms"), itl_median_ms=med("itl_median_ms"), e2e_mean_ms=med("e2e_mean_ms"),
        input_len=_int(first.get("input_len")), output_len=_int(first.get("output_len")),
        random_range_ratio=_num(first.get("random_range_ratio")),
        clock_event_reasons=_reasons(group.get("gpu_clock_event_reasons_any", [])),
        sm_clock_mhz=_gpu_mean(tele, SM_CLOCK),
        running_mean=_gauge(tele, RUNNING, "mean"), running_max=_gauge(tele, RUNNING, "max"),
        queued_mean=_gauge(tele, QUEUED, "mean"), queued_max=_gauge(tele, QUEUED, "max"),
        token_usage_max=_gauge(tele, TOKEN_USAGE, "max"), retractions=_delta(tele, RETRACTIONS),
        eager_share=_eager_share(tele),
        facts=facts,
    )


# -- the terms of the identity ------------------------------------------------------------------

@dataclass(frozen=True)
class Terms:
    """``thr = c · a · L / (W + P + (L − 1)·(D + I))``; times in ms (see the module docstring)."""

    a: float  # achieved concurrency / offered
    L: float  # mean output tokens per request
    W: float  # queue wait
    P: float  # TTFT beyond the queue wait
    D: float  # decode step (median ITL)
    I: float  # prefill's addition per output token  # noqa: E741 - the docstring's name

    def rate(self) -> float:
        """Throughput per offered request (tok/ms): ``a · L / E2E``."""
        e2e = self.W + self.P + (self.L - 1.0) * (self.D + self.I)
        return self.a * self.L / e2e if e2e > 0 else math.nan


def nominal_output(point: ScalingPoint) -> float | None:
    """The mean output length the bench asked for: bench_serving draws uniform integers in
    ``[max(int(len·ratio), 1), len]`` (``compute_random_lens``)."""
    if point.output_len is None:
        return None
    ratio = 1.0 if point.random_range_ratio is None else point.random_range_ratio
    return (max(int(point.output_len * ratio), 1) + point.output_len) / 2.0


def output_mean(point: ScalingPoint) -> float | None:
    if point.total_output_tokens and point.completed:
        return point.total_output_tokens / point.completed
    return nominal_output(point)


def queue_wait_ms(point: ScalingPoint) -> float:
    """Little's law on the waiting queue: mean queue length / request rate, at most the mean TTFT."""
    if not point.queued_mean or not point.request_throughput or point.ttft_mean_ms is None:
        return 0.0
    return min(point.queued_mean / point.request_throughput * 1000.0, point.ttft_mean_ms)


def terms(point: ScalingPoint) -> Terms | None:
    """The identity's terms of one point; None where bench_serving's latencies are missing."""
    length, e2e, ttft = output_mean(point), point.e2e_mean_ms, point.ttft_mean_ms
    if length is None or length <= 1 or e2e is None or ttft is None or e2e <= 0:
        return None
    per_token = max(e2e - ttft, 0.0) / (length - 1.0)
    step = per_token if point.itl_median_ms is None else min(point.itl_median_ms, per_token)
    wait = queue_wait_ms(point)
    achieved = (point.achieved_concurrency or point.concurrency) / point.concurrency
    return Terms(a=achieved, L=length, W=wait, P=ttft - wait, D=step, I=per_token - step)


# -- the split ----------------------------------------------------------------------------------

def batch(point: ScalingPoint) -> float:
    """The running batch: the offered concurrency, held down by the server's running cap."""
    cap = point.facts.max_running_requests
    return float(min(point.concurrency, cap) if cap else point.concurrency)


def crosses_graph(low: ScalingPoint, high: ScalingPoint) -> bool:
    """Whether the batch leaves the captured CUDA graphs between the two points: the server's
    count of eager decode passes where recorded, else the running batch against the largest
    captured graph."""
    if low.eager_share is not None and high.eager_share is not None:
        return high.eager_share - low.eager_share >= EAGER_JUMP
    graph = high.facts.cuda_graph_max_bs
    return bool(graph) and batch(low) <= graph < batch(high)  # type: ignore[operator]  # bool(graph): not None


def throttle_ratio(low: ScalingPoint, high: ScalingPoint) -> float:
    """How much slower the clock ran at the higher point (≥ 1), where a slowdown reason was set."""
    if not (high.clock_event_reasons or 0) & SLOWDOWN_MASK or not low.sm_clock_mhz or not high.sm_clock_mhz:
        return 1.0
    return max(1.0, low.sm_clock_mhz / high.sm_clock_mhz)


def _step_growth(low: ScalingPoint, high: ScalingPoint) -> tuple[float, float] | None:
    """(median ITL ratio, batch ratio) of a step, throttling divided out."""
    t_low, t_high = terms(low), terms(high)
    if t_low is None or t_high is None or t_low.D <= 0 or batch(high) <= batch(low):
        return None
    return t_high.D / t_low.D / throttle_ratio(low, high), batch(high) / batch(low)


def eager_ratio(series: Sequence[ScalingPoint], index: int) -> float:
    """The step ``series[index-1] → series[index]``'s decode-step growth above the trend of a
    neighbouring step that stays on one side of the graph limit (previous first, else next)."""
    low, high = series[index - 1], series[index]
    if not crosses_graph(low, high):
        return 1.0
    here = _step_growth(low, high)
    for j in (index - 1, index + 1):
        if 1 <= j < len(series) and not crosses_graph(series[j - 1], series[j]):
            reference = _step_growth(series[j - 1], series[j])
            if here is not None and reference is not None:
                # A bigger batch never makes a step shorter: a trend below 1 is noise, read as flat.
                expected = max(1.0, reference[0]) ** (math.log(here[1]) / math.log(reference[1]))
                return max(1.0, here[0] / expected)
    return 1.0


def batch_held(point: ScalingPoint) -> bool:
    """Whether the server held its running batch below the offered concurrency: the running
    gauge never reached it while requests queued (a running cap or the KV pool), the pool was
    nearly full, or it retracted requests; without the gauge, a running cap below the
    concurrency.  Where every offered request ran at some point, requests in the waiting
    queue were waiting for the prefill budget (one chunked prompt at a time), not for room."""
    if (point.token_usage_max or 0) >= KV_FULL or (point.retractions or 0) > 0:
        return True
    if point.running_max is not None:
        return point.running_max < point.concurrency and (point.queued_mean or 0) > 0
    cap = point.facts.max_running_requests
    return cap is not None and point.concurrency > cap


def has_length_variance(low: ScalingPoint, high: ScalingPoint) -> bool:
    for point in (low, high):
        nominal, actual = nominal_output(point), output_mean(point)
        if (point.random_range_ratio is not None and point.random_range_ratio < 1) or (
                nominal and actual is not None and actual < SHORTFALL * nominal):
            return True
    return False


def factors(series: Sequence[ScalingPoint], index: int) -> dict[str, float]:
    """Each cause's throughput factor for the step into ``series[index]`` (the module docstring's order)."""
    low, high = series[index - 1], series[index]
    t1, t2 = terms(low), terms(high)
    out = dict.fromkeys(CAUSES[:-1], 1.0)
    if t1 is None or t2 is None:
        return out
    h, e = throttle_ratio(low, high), eager_ratio(series, index)
    variance = has_length_variance(low, high)
    held = batch_held(high)  # otherwise the queue waited for the prefill budget: interference
    steps: list[tuple[str, dict[str, float] | None]] = [
        ("running_cap_or_kv_pool", {"W": t2.W} if held else None),
        ("throttling", None if h == 1 else {"D": t1.D * h}),
        ("eager_batches", None if e == 1 else {"D": t1.D * h * e}),
        ("decode_step_growth", {"D": t2.D}),
        ("prefill_interference", {"P": t2.P, "I": t2.I, **({} if held else {"W": t2.W})}),
        ("length_variance", {"L": t2.L, "a": t2.a if variance else t1.a}),
    ]
    state = t1
    for cause, change in steps:
        if change is not None:
            after = replace(state, **change)
            out[cause] = after.rate() / state.rate()
            state = after
    return out


def _log_weight(ideal: float, measured: float) -> float:
    """The logarithmic mean of ideal and measured: what turns ln-factors into tok/s."""
    if math.isclose(ideal, measured, rel_tol=1e-12):
        return ideal
    return (ideal - measured) / (math.log(ideal) - math.log(measured))


def _series(points: Iterable[ScalingPoint]) -> dict[tuple[int, str], list[ScalingPoint]]:
    groups: dict[tuple[int, str], list[ScalingPoint]] = {}
    for point in points:
        groups.setdefault((point.run_id, point.scenario), []).append(point)
    return {key: sorted(group, key=lambda p: p.concurrency) for key, group in sorted(groups.items())}


def explain_gaps(points: Iterable[ScalingPoint]) -> pd.DataFrame:
    """One row per (run, scenario, step, cause): GAP_COLUMNS.  ``tok_s`` of a step's causes
    add up to its ``gap``; ``share`` is ``tok_s / gap`` (None when the gap is 0)."""
    rows: list[dict[str, Any]] = []
    for (run_id, scenario), series in _series(points).items():
        for index in range(1, len(series)):
            rows += _step_rows(run_id, scenario, series, index)
    return pd.DataFrame(rows, columns=list(GAP_COLUMNS))


def _step_rows(run_id: int, scenario: str, series: Sequence[ScalingPoint], index: int) -> list[dict[str, Any]]:
    low, high = series[index - 1], series[index]
    if not low.output_throughput or not high.output_throughput or low.output_throughput <= 0:
        return []
    ideal = low.output_throughput * high.concurrency / low.concurrency
    measured = high.output_throughput
    found = factors(series, index)
    explained = math.prod(found.values())
    found["remaining"] = (measured / ideal) / explained
    weight, gap = _log_weight(ideal, measured), ideal - measured
    rows = []
    for cause in CAUSES:
        tok_s = -math.log(found[cause]) * weight
        key, params = sentence(cause, low, high, tok_s, gap)
        if cause == "eager_batches":
            params["excess_pct"] = 100.0 * (eager_ratio(series, index) - 1.0)
        rows.append({"run_id": run_id, "scenario": scenario, "c_from": low.concurrency, "c_to": high.concurrency,
                     "ideal": ideal, "measured": measured, "gap": gap, "cause": cause, "factor": found[cause],
                     "share": tok_s / gap if gap else None, "tok_s": tok_s, "sentence_key": key, "params": params})
    return rows


# -- sentences ----------------------------------------------------------------------------------

def sentence(cause: str, low: ScalingPoint, high: ScalingPoint, tok_s: float, gap: float) -> tuple[str, dict[str, Any]]:
    """The catalogue key (``scaling_gap.cause.*``) and its parameters for one cause of one step."""
    base = {"c_from": low.concurrency, "c_to": high.concurrency, "tok_s": tok_s,
            "pct": 100.0 * tok_s / gap if gap else 0.0}
    key, params = _SENTENCES[cause](low, high)
    return f"scaling_gap.cause.{key}", {**base, **params}


def _running_sentence(low: ScalingPoint, high: ScalingPoint) -> tuple[str, dict[str, Any]]:
    facts, running = high.facts, high.running_max
    params = {"running": _or_dash(running, 0), "queued": _or_dash(high.queued_mean, 1),
              "wait_ms": queue_wait_ms(high), "cap": facts.max_running_requests or "—",
              "usage": _or_dash(None if high.token_usage_max is None else 100 * high.token_usage_max, 0),
              "retracted": _or_dash(high.retractions, 0)}
    capped = facts.max_running_requests and running is not None and running >= facts.max_running_requests
    if capped and high.concurrency > (facts.max_running_requests or 0):
        return ("running_cap_flag" if facts.max_running_requests_flag else "running_cap_auto"), params
    if _held_by_pool(high):
        return ("kv_pool_retracted" if (high.retractions or 0) > 0 else "kv_pool"), params
    return "queue", params


def _held_by_pool(point: ScalingPoint) -> bool:
    """Whether the KV pool, not a cap, kept requests waiting: the pool was nearly full, the
    server retracted requests, or requests waited (a mean queue of one or more) while fewer
    than both the offered concurrency and the running cap ever ran.  SGLang admits a request
    only when its prompt plus its reserved output fits the pool, so a pool can turn requests
    away while ``token_usage`` (tokens actually held) stays below 1."""
    if (point.token_usage_max or 0) >= KV_FULL or (point.retractions or 0) > 0:
        return True
    limit = min(point.concurrency, point.facts.max_running_requests or point.concurrency)
    return point.running_max is not None and point.running_max < limit and (point.queued_mean or 0) >= 1


def _throttle_sentence(low: ScalingPoint, high: ScalingPoint) -> tuple[str, dict[str, Any]]:
    reasons = high.clock_event_reasons or 0
    names = [name for bit, name in {SW_POWER_CAP: "sw_power_cap", **THROTTLE_REASONS}.items() if reasons & bit]
    return "throttling", {"clock_from": _or_dash(low.sm_clock_mhz, 0), "clock_to": _or_dash(high.sm_clock_mhz, 0),
                          "reasons": ", ".join(names) or "—"}


def _eager_sentence(low: ScalingPoint, high: ScalingPoint) -> tuple[str, dict[str, Any]]:
    graph = high.facts.cuda_graph_max_bs
    return "eager_batches", {"batch": int(batch(high)), "graph": "—" if graph is None else graph,
                             "d_from": _term(low, "D", 1), "d_to": _term(high, "D", 1)}


def _term(point: ScalingPoint, name: str, digits: int) -> str:
    found = terms(point)
    return _or_dash(None if found is None else float(getattr(found, name)), digits)


def _decode_sentence(low: ScalingPoint, high: ScalingPoint) -> tuple[str, dict[str, Any]]:
    return "decode_step_growth", {"d_from": _term(low, "D", 1), "d_to": _term(high, "D", 1),
                                  "b_from": int(batch(low)), "b_to": int(batch(high))}


def _prefill_ms(point: ScalingPoint, held: bool) -> str:
    """TTFT not spent waiting for a running slot (the queue wait counts when nothing held the batch)."""
    found = terms(point)
    return _or_dash(None if found is None else found.P + (0.0 if held else found.W), 0)


def _prefill_sentence(low: ScalingPoint, high: ScalingPoint) -> tuple[str, dict[str, Any]]:
    held = batch_held(high)
    params: dict[str, Any] = {"p_from": _prefill_ms(low, held), "p_to": _prefill_ms(high, held),
                              "i_from": _term(low, "I", 2), "i_to": _term(high, "I", 2)}
    chunk, prompt = high.facts.chunked_prefill_size, high.input_len
    if chunk and chunk > 0 and prompt and prompt > chunk:
        return "prefill_chunked", {**params, "isl": prompt, "chunk": chunk, "chunks": math.ceil(prompt / chunk)}
    return "prefill", params


def _length_sentence(low: ScalingPoint, high: ScalingPoint) -> tuple[str, dict[str, Any]]:
    ratio = high.random_range_ratio
    return "length_variance", {"l_from": _or_dash(output_mean(low), 0), "l_to": _or_dash(output_mean(high), 0),
                               "nominal": _or_dash(nominal_output(high), 0),
                               "ratio": "—" if ratio is None else f"{ratio:g}"}


def _remaining_sentence(low: ScalingPoint, high: ScalingPoint) -> tuple[str, dict[str, Any]]:
    achieved = high.achieved_concurrency
    return "remaining", {"achieved": _or_dash(achieved, 1)}


_SENTENCES = {
    "running_cap_or_kv_pool": _running_sentence, "throttling": _throttle_sentence, "eager_batches": _eager_sentence,
    "decode_step_growth": _decode_sentence, "prefill_interference": _prefill_sentence,
    "length_variance": _length_sentence, "remaining": _remaining_sentence,
}


def _or_dash(value: float | None, digits: int) -> str:
    """A figure as the sentence shows it; "—" where it was not recorded."""
    return "—" if value is None else f"{value:,.{digits}f}"


def gap_sentences(frame: pd.DataFrame, lang: str, *, min_share: float = 0.05) -> list[str]:
    """Per step: its summary (ideal, measured, gap), then the sentences of the causes that
    take at least ``min_share`` of its gap (remaining too, when it does), largest first."""
    out = []
    for (_, _, c_from, c_to), step in frame.groupby(["run_id", "scenario", "c_from", "c_to"], sort=True):
        first = step.iloc[0]
        out.append(t("scaling_gap.summary", lang, c_from=c_from, c_to=c_to, ideal=first["ideal"],
                     measured=first["measured"], gap=first["gap"]))
        for _, row in step.sort_values("tok_s", ascending=False).iterrows():
            if row["share"] is not None and not pd.isna(row["share"]) and row["share"] >= min_share:
                out.append(t(row["sentence_key"], lang, **row["params"]))
    return out


def top_cause(frame: pd.DataFrame, c_from: int, c_to: int, scenario: str | None = None) -> str:
    """The cause with the most tok/s of one step (of ``scenario`` when given)."""
    step = frame[(frame["c_from"] == c_from) & (frame["c_to"] == c_to)]
    if scenario is not None:
        step = step[step["scenario"] == scenario]
    return str(step.sort_values("tok_s", ascending=False).iloc[0]["cause"])


def explain_run(points: pd.DataFrame, telemetry: Iterable[Any],
                startup_facts: Mapping[int, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """:func:`explain_gaps` of :func:`scaling_points`: what the run page and the deck call."""
    return explain_gaps(scaling_points(points, telemetry, startup_facts))
