"""The estimator: TTFT, TPOT, ITL and output tok/s for a plan's points, and what bounds each.

A steady-state model of bench_serving's closed loop (``--max-concurrency c``, fixed
ISL/OSL, infinite request rate) against one engine replica, built from the step times of
:mod:`domain.estimate.step_time`:

1. **Batch.**  ``B = min(c, max_running_requests, KV-pool capacity)`` where the pool holds
   ``max_total_num_tokens // (ISL + min(OSL, 4096))`` requests (SGLang reserves the prompt
   plus the clipped output estimate).  With ``--dp-size R`` each replica gets ``⌈c/R⌉``.
2. **Rounds.**  Fixed lengths keep the B requests in step: they arrive together, their
   B·ISL prompt tokens are prefilled first (prefill before decode, SGLang's default) in
   steps formed as SGLang's ``PrefillAdder`` forms them (:func:`_prefill_round`:
   ``chunked_prefill_size`` truncates, ``max_prefill_tokens`` only stops admission), then
   all B decode OSL − 1 steps together over an average context of ``B·(ISL + OSL/2)``
   tokens.
3. **Per request.**  A prompt's first token is produced by the prefill step that completes
   it and streams when that step's result is processed: with SGLang's overlap scheduler
   (its default) when the *next* prefill step of the round ends, or when its own step ends
   if it was the round's last (a decode step follows) or with
   ``--disable-overlap-schedule`` or ``--enable-mixed-chunk`` (the rule and its source:
   emulator/scheduler.py, which streams by the same rule).  Its TPOT is
   ``(round end − first token)/(OSL − 1)``, so the prompts that stream early carry the rest
   of the round's prefill in their TPOT.
   TTFT and TPOT are the medians of those over the B requests of a round (every round is
   the same with fixed lengths).  Requests beyond B queue for ``(c − B)/B`` rounds on
   average, which adds to their TTFT.  The median ITL is one decode step.
4. **Throughput.**  ``B·OSL / round`` per replica, × replicas.

That is the ``rounds`` serving model, SGLang's.  An engine that mixes prefill chunks into
decode steps (vLLM V1; ``SERVING_BY_FAMILY`` in :mod:`domain.estimate.constants`) gets
the ``mixed`` model instead (:func:`_mixed_point`): requests out of step, each prompt
prefilled in its own ``⌈ISL/budget⌉`` steps alongside the others' decodes.

What it ignores: request-length variance (``random_range_ratio`` < 1 desynchronises the
rounds), the prefix cache (bench prompts share nothing), retractions, speculative
decoding, mixed chunks, PD disaggregation (a PD plan is estimated as one aggregated
server of its plan-wide flags), pipeline parallelism, CPU or client limits, and warm-up.

The bound of a point is the cause that takes the largest share of its round time (the
roofline's max term goes to memory traffic or compute, whichever wins), unless the batch
is held below the offered concurrency: then ``running_cap`` or ``kv_pool``.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from domain.core.numbers import real_number
from domain.estimate import sizing
from domain.estimate.constants import Calibration, calibration_for, engine_family
from domain.estimate.prefill import PrefillBudget
from domain.estimate.step_time import Bound, StepParts, TimingConstants, TimingModel
from domain.plan.run_plan import RunPlan

CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION


class CannotEstimate(ValueError):
    """The plan names a model or GPU the estimator has no figures for."""


@dataclass(frozen=True)
class Setup:
    """One engine replica resolved as SGLang resolves its flags (defaults by GPU memory)."""

    timing: TimingModel
    chunked_prefill_size: int  # ≤ 0: chunking disabled
    max_prefill_tokens: int
    max_running_requests: int
    kv_pool_tokens: int
    dp_size: int
    calibration: Calibration
    overlap_prefill_results: bool = True  # SGLang's overlap scheduler (module docstring, step 3)

    def with_constants(self, constants: TimingConstants) -> Setup:
        return replace(self, timing=replace(self.timing, constants=constants))

    @property
    def prefill_budget(self) -> int:
        if self.chunked_prefill_size > 0:
            return min(self.chunked_prefill_size, self.max_prefill_tokens)
        return self.max_prefill_tokens


@dataclass(frozen=True)
class PointEstimate:
    input_len: int
    output_len: int
    concurrency: int
    batch: int
    ttft_ms: float
    tpot_ms: float
    itl_ms: float
    output_tok_s: float
    bound: Bound
    shares: Mapping[Bound, float]  # fraction of the round time per cause (sums to 1)

    def as_dict(self) -> dict[str, Any]:
        return {
            "input_len": self.input_len, "output_len": self.output_len, "concurrency": self.concurrency,
            "batch": self.batch, "ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "itl_ms": self.itl_ms,
            "output_tok_s": self.output_tok_s, "bound": self.bound, "shares": dict(self.shares),
        }


# -- resolving a configuration ------------------------------------------------------------------
def _first_number(args: Mapping[str, object], *names: str) -> float | None:
    """The value of the first of ``names`` (spellings of one flag) that holds a finite number."""
    found = (real_number(args.get(name), finite=True) for name in names)
    return next((number for number in found if number is not None), None)


def _graph_max_bs(args: Mapping[str, object], gpu: sizing.GpuSpec, tp: int, running: float | None) -> int | None:
    if args.get("disable-cuda-graph") is True or args.get("disable-decode-cuda-graph") is True:
        return None
    explicit = _first_number(args, "cuda-graph-max-bs-decode", "cuda-graph-max-bs")
    if explicit is not None:
        return int(explicit)
    default = sizing.default_cuda_graph_max_bs(gpu.memory_mib, tp)
    return min(default, int(running)) if running is not None else default


def setup_for(model_path: str, gpu_type: str, server_args: Mapping[str, object], engine: str = "sglang") -> Setup:
    """Resolve ``server_args`` (flag names without dashes, as a plan writes them)."""
    gpu = sizing.GPUS.get(gpu_type.upper().replace("NVIDIA", "").strip())
    if gpu is None:
        raise CannotEstimate(f"no figures for GPU {gpu_type!r} (known: {', '.join(sizing.GPUS)})")
    try:
        model = sizing.resolve_model(model_path)
    except sizing.UnknownModel as exc:
        raise CannotEstimate(str(exc)) from exc
    tp = int(_first_number(server_args, "tp-size", "tensor-parallel-size", "tp") or 1)
    dp = int(_first_number(server_args, "dp-size", "data-parallel-size") or 1)
    chunk = _first_number(server_args, "chunked-prefill-size")
    chunked = sizing.default_chunked_prefill(gpu.memory_mib) if chunk is None else int(chunk)
    max_prefill = int(_first_number(server_args, "max-prefill-tokens") or 16384)
    running_flag = _first_number(server_args, "max-running-requests")
    graph_bs = _graph_max_bs(server_args, gpu, tp, running_flag)
    fraction = _first_number(server_args, "mem-fraction-static")
    if fraction is None:
        fraction = sizing.default_mem_fraction_static(gpu.memory_mib, chunked, max_prefill, tp, 1, graph_bs)
    total = _first_number(server_args, "max-total-tokens")
    kv_dtype = server_args.get("kv-cache-dtype")
    quantization = server_args.get("quantization")
    memory = sizing.plan_memory(
        gpu, model, tp_size=tp, attn_dp_size=1, quantization=quantization if isinstance(quantization, str) else None,
        kv_cache_dtype=kv_dtype if isinstance(kv_dtype, str) else "auto", mem_fraction_static=fraction,
        max_total_tokens=int(total) if total is not None else None, graph_max_bs=graph_bs,
    )
    context_len = int(_first_number(server_args, "context-length") or model.max_position_embeddings)
    running = sizing.default_max_running_requests(
        memory.max_total_num_tokens, context_len, int(running_flag) if running_flag is not None else None,
    ) if memory.max_total_num_tokens > 0 else 0
    calibration = calibration_for(gpu, engine_family(engine))
    weight_bytes = sizing.weight_bytes_per_gpu(
        model, quantization if isinstance(quantization, str) else None, tp) * tp / model.total_params
    timing = TimingModel(model=model, gpu=gpu, tp_size=tp, cell_bytes=memory.kv_cell_bytes, weight_bytes=weight_bytes,
                         cuda_graph_max_bs=graph_bs, ceilings=calibration.ceilings, constants=calibration.constants)
    overlap = not (server_args.get("disable-overlap-schedule") is True or server_args.get("enable-mixed-chunk") is True)
    return Setup(timing=timing, chunked_prefill_size=chunked, max_prefill_tokens=max_prefill,
                 max_running_requests=running, kv_pool_tokens=memory.max_total_num_tokens, dp_size=dp,
                 calibration=calibration, overlap_prefill_results=overlap)


def setup_from_plan(plan: RunPlan) -> Setup:
    """A router plan's replicas count as data-parallel replicas with their own flags on top
    of the plan's; a PD plan is estimated as one aggregated server of the plan-wide flags."""
    topology = plan.topology
    if topology.kind == "router" and topology.replicas is not None:
        args = {**plan.server_args, **topology.replicas.server_args}
        replicas = topology.replicas.count * int(_first_number(args, "dp-size", "data-parallel-size") or 1)
        return setup_for(plan.model, plan.gpu.type, {**args, "dp-size": replicas}, plan.engine_label)
    return setup_for(plan.model, plan.gpu.type, plan.server_args, plan.engine_label)


# -- one point ----------------------------------------------------------------------------------
def _prefill_round(setup: Setup, batch: int, isl: int) -> tuple[list[StepParts], list[int]]:
    """The prefill steps of one round (B prompts of ISL tokens, in prompt order) and, per
    prompt, the index of the step that completes it.

    Each step is formed as SGLang's ``PrefillAdder`` forms a prefill batch
    (sglang/srt/managers/schedule_policy.py, ``add_chunked_req`` / ``add_one_req`` /
    ``budget_state``): the prompt chunked in the previous step continues first, then prompts
    join while both budgets are left: ``chunked_prefill_size`` (a prompt longer than what is
    left of it is truncated there, and is the step's last) and ``max_prefill_tokens`` (only
    stops admission once spent: a prompt that fits the chunk joins whole).  Without
    chunking a step takes the first prompt whole and a further one only if it is shorter
    than what is left of ``max_prefill_tokens``.  The rule is :class:`PrefillBudget`, the
    one the emulator's scheduler fills its steps with."""
    chunk = setup.chunked_prefill_size if setup.chunked_prefill_size > 0 else None
    steps: list[StepParts] = []
    finished_in: list[int] = []
    req, req_done = 0, 0  # the request being prefilled, and its tokens already in the KV cache
    while req < batch:
        pieces: list[tuple[int, int]] = []
        budget = PrefillBudget(setup.max_prefill_tokens, chunk)
        while req < batch and not budget.spent():
            take = budget.take(isl - req_done, first=not pieces)
            if take == 0:
                break
            pieces.append((take, req_done))
            req_done += take
            if req_done < isl:
                break  # truncated: the chunked request ends the step
            finished_in.append(len(steps))
            req, req_done = req + 1, 0
        steps.append(setup.timing.prefill_parts(pieces))
    return steps, finished_in


def _capacity(setup: Setup, isl: int, osl: int) -> int:
    return setup.kv_pool_tokens // (isl + min(osl, CLIP_MAX_NEW_TOKENS))


def _shares(prefill: list[StepParts], decode: StepParts, decode_steps: int) -> dict[Bound, float]:
    totals: dict[Bound, float] = {}
    for parts in [*prefill, decode.scaled(decode_steps)]:
        for cause, seconds in parts.attributed().items():
            totals[cause] = totals.get(cause, 0.0) + seconds
    whole = sum(totals.values()) or 1.0
    return {cause: seconds / whole for cause, seconds in totals.items()}


def _bound(shares: Mapping[Bound, float], batch: int, per_replica: int, capacity: int, setup: Setup) -> Bound:
    if batch < per_replica:
        return "kv_pool" if capacity < min(per_replica, setup.max_running_requests) else "running_cap"
    return max(shares, key=lambda cause: shares[cause])


def _mixed_point(setup: Setup, isl: int, osl: int, concurrency: int, per_replica: int, capacity: int,
                 batch: int) -> PointEstimate:
    """The "mixed" serving model: requests out of step; each prompt is prefilled in
    ``⌈ISL/budget⌉`` steps that also decode the other running requests, and the steps
    without a prompt chunk only decode.  TTFT is the prompt's own steps; TPOT is the mean
    step a decoding request lives through."""
    budget = max(1, setup.prefill_budget)
    chunk = min(isl, budget)
    prefill_steps = math.ceil(isl / budget)
    steps = osl - 1 + prefill_steps  # the steps of one request's life, shared by the whole batch
    with_prompt = min(steps, batch * prefill_steps)  # steps of a round that carry a prompt chunk
    context = isl + osl / 2
    mixed = setup.timing.mixed_parts(batch - 1, context, chunk, max(0.0, (isl - chunk) / 2))
    decode = setup.timing.mixed_parts(batch, context, 0, 0)
    round_s = with_prompt * mixed.total_s + (steps - with_prompt) * decode.total_s
    queued_s = max(0, per_replica - batch) / batch * round_s
    totals: dict[Bound, float] = {}
    for parts, count in ((mixed, with_prompt), (decode, steps - with_prompt)):
        for cause, seconds in parts.attributed().items():
            totals[cause] = totals.get(cause, 0.0) + seconds * count
    shares = {cause: seconds / (sum(totals.values()) or 1.0) for cause, seconds in totals.items()}
    return PointEstimate(
        input_len=isl, output_len=osl, concurrency=concurrency, batch=batch,
        ttft_ms=(prefill_steps * mixed.total_s + queued_s) * 1e3, tpot_ms=round_s / steps * 1e3,
        itl_ms=decode.total_s * 1e3, output_tok_s=batch * osl / round_s * max(1, setup.dp_size),
        bound=_bound(shares, batch, per_replica, capacity, setup), shares=shares,
    )


def _streamed_at(step_ends: list[float], step: int, overlap: bool) -> float:
    """When the first tokens of the prompts that prefill step ``step`` completes stream."""
    return step_ends[step + 1] if overlap and step + 1 < len(step_ends) else step_ends[step]


def estimate_point(setup: Setup, isl: int, osl: int, concurrency: int) -> PointEstimate:
    """The closed form of the module docstring for one (ISL, OSL, concurrency)."""
    per_replica = math.ceil(concurrency / max(1, setup.dp_size))
    capacity = _capacity(setup, isl, osl)
    batch = max(1, min(per_replica, setup.max_running_requests, capacity))
    if setup.calibration.serving == "mixed":
        return _mixed_point(setup, isl, osl, concurrency, per_replica, capacity, batch)
    prefill_steps, finished_in = _prefill_round(setup, batch, isl)
    step_ends = list(itertools.accumulate(p.total_s for p in prefill_steps))
    prefill_s = step_ends[-1]
    kv_tokens = batch * (isl + osl / 2)
    decode = setup.timing.decode_parts(batch, kv_tokens)
    decode_steps = max(0, osl - 1)
    round_s = prefill_s + decode_steps * decode.total_s
    queued_s = max(0, per_replica - batch) / batch * round_s
    # A prompt's first token streams when its step's result is processed (SGLang's
    # process_batch_result_prefill → stream_output): with the overlap scheduler after the next
    # prefill step has run, else when its own step ends (module docstring, step 3).  Its TPOT
    # then carries the rest of the round's prefill: (round end − first token) / (OSL − 1).
    first_s = [_streamed_at(step_ends, i, setup.overlap_prefill_results) for i in finished_in]
    ttft_s = statistics.median(first_s) + queued_s
    tpot_s = statistics.median((round_s - f) / decode_steps for f in first_s) if decode_steps else 0.0
    shares = _shares(prefill_steps, decode, decode_steps)
    bound = _bound(shares, batch, per_replica, capacity, setup)
    return PointEstimate(
        input_len=isl, output_len=osl, concurrency=concurrency, batch=batch,
        ttft_ms=ttft_s * 1e3, tpot_ms=tpot_s * 1e3,
        itl_ms=decode.total_s * 1e3 if decode_steps else 0.0,
        output_tok_s=batch * osl / round_s * max(1, setup.dp_size), bound=bound, shares=shares,
    )


def extrapolated(setup: Setup, point: PointEstimate) -> list[str]:
    """The dimensions (concurrency, input_len, output_len, tp_size) in which ``point`` lies
    outside what the constants were fitted on: there the figures are extrapolations."""
    values = {"concurrency": point.concurrency, "input_len": point.input_len, "output_len": point.output_len,
              "tp_size": setup.timing.tp_size}
    ranges = setup.calibration.measured_range
    return [name for name, value in values.items() if name in ranges and not
            ranges[name][0] <= value <= ranges[name][1]]


def estimate_plan(plan: RunPlan) -> list[tuple[str, PointEstimate]]:
    """(scenario name, estimate) for every distinct (scenario, concurrency) of the plan;
    repeats share one estimate, so they are listed once."""
    setup = setup_from_plan(plan)
    seen: set[tuple[str, int]] = set()
    out: list[tuple[str, PointEstimate]] = []
    for point in plan.points():
        key = (point.scenario.name, point.concurrency)
        if key in seen:
            continue
        seen.add(key)
        s = point.scenario
        out.append((s.name, estimate_point(setup, s.input_len, s.output_len, point.concurrency)))
    return out
