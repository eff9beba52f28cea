"""The continuous-batching scheduler of the emulated engine, as a pure state machine.

No clock, no I/O and no asyncio here: :meth:`Scheduler.plan` picks the next forward step
and its duration (from :mod:`emulator.timing`), :meth:`Scheduler.apply` advances
the requests when that step ends.  The live engine (:mod:`emulator.step_loop`) sleeps
through each step in real time; the predictor (:mod:`emulator.predict`) runs the
very same object on a virtual clock.  That is why measured and predicted figures can be
compared at all.

The policy mirrors SGLang's default scheduler (FCFS, chunked prefill, no mixed chunk):

1. **Prefill first.**  If a request is part-way through a chunked prefill, or requests
   wait and the batch has room, the step is a prefill step; running decodes pause for it
   (with ``--enable-mixed-chunk`` they ride along as one-token chunks).
2. **Token budgets** (:class:`~domain.estimate.prefill.PrefillBudget`, SGLang's ``PrefillAdder``).  A prefill step
   takes at most ``chunked_prefill_size`` new tokens: a prompt longer than what is left of
   it is chunked, and its remaining chunks go first in the following steps.
   ``max_prefill_tokens`` only stops admission once spent (a prompt that fits the chunk
   joins whole even past it).  With chunking disabled (-1) the first prompt of a step joins
   whole whatever its length, a later one only if shorter than what is left of
   ``max_prefill_tokens``.
3. **Admission.**  A waiting request is admitted (FCFS, head-of-line blocking) while fewer
   than ``max_running_requests`` run and its reservation fits the KV pool:
   ``Σ reserved + prompt + min(max_new_tokens, CLIP) ≤ max_total_num_tokens`` (SGLang
   clips the output estimate at 4096 tokens, ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``).
4. **Decode.**  Otherwise every request whose prefill is complete decodes one token.  If
   the KV pool cannot hold one more token per request, the newest request is retracted
   (back to the head of the queue, to prefill prompt + generated again), as SGLang does.
5. **Prefix cache.**  A radix-cache stand-in matches prompts by 32-token pages; matched
   tokens are not recomputed (at least one prompt token always is).  Its memory is the KV
   pool's (:mod:`emulator.prefix_cache`).  ``/flush_cache`` empties it;
   ``--disable-radix-cache`` turns it off.

Not modelled: data-parallel replicas (``--dp-size``) and attention-DP ranks run as one
scheduler over one GPU's KV pool (their memory arithmetic is still applied), speculative
decoding, and priority or cache-aware (``lpm``) ordering, which all behave as FCFS here.

The first output token is produced by the step that completes the prefill and streamed
when that step's result is processed (SGLang: ``process_batch_result_prefill`` →
``stream_output`` in sglang/srt/managers/scheduler_components/batch_result_processor.py).
With the overlap scheduler (SGLang's default; off with ``--disable-overlap-schedule`` and
on PD servers here) ``event_loop_overlap`` processes a batch's result only after it has
launched the next batch (sglang/srt/managers/scheduler.py), and for two prefill batches in
a row it does not skip that (``is_disable_overlap_for_batch``: only
``SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP``, default off, does, "to improve the TTFT of
the first batch").  Launching an eager prefill forward of thousands of kernels returns
only when the device has nearly run it (the launch queue is bounded), so the prompts a
prefill step completes stream when the *next* prefill step ends; before a decode step (one
CUDA-graph launch) or an idle engine they stream when their own step ends.  The
estimator applies the same rule (``domain/estimate/estimator.py``).  A request ends after
``stop_after`` tokens (``max_new_tokens``, or an earlier emulated EOS when the request
does not set ``ignore_eos``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from domain.estimate.prefill import PrefillBudget
from emulator.prefix_cache import PAGE, PrefixCache
from emulator.timing import TimingModel

CLIP_MAX_NEW_TOKENS = 4096
__all__ = ["PAGE", "PrefixCache", "Request", "Scheduler", "SchedulerLimits", "Step"]


@dataclass(eq=False)
class Request:
    rid: str
    prompt_ids: Sequence[int]
    max_new_tokens: int
    stop_after: int  # tokens actually generated before finishing (≤ max_new_tokens)
    arrival: float
    prefill_target: int = 0  # tokens to have in KV before decoding (prompt, or more after a retraction)
    prefilled: int = 0
    cached: int = 0
    transferred: int = 0  # PD decode side: prompt tokens whose KV arrived from a prefill server
    generated: int = 0
    first_token_at: float | None = None
    last_token_at: float | None = None
    prev_token_at: float | None = None
    finished_at: float | None = None
    finish_reason: str | None = None  # "length" | "stop" | "abort"
    admitted_at: float | None = None
    page_keys: list[int] = field(default_factory=list)
    stream: bool = False  # answered as a stream (the metrics' is_streaming label)

    def __post_init__(self) -> None:
        self.prefill_target = self.prefill_target or len(self.prompt_ids)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def kv_tokens(self) -> int:
        """Tokens this request holds in the KV pool now."""
        if self.prefilled < self.prefill_target:
            return self.prefilled
        # After a retraction, the tokens generated so far were prefilled again with the prompt.
        recomputed = self.prefill_target - self.prompt_len
        return self.prefilled + self.generated - recomputed

    @property
    def reservation(self) -> int:
        return self.prefill_target + min(self.max_new_tokens, CLIP_MAX_NEW_TOKENS)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(frozen=True)
class Step:
    kind: str  # "prefill" | "decode"
    chunks: tuple[tuple[Request, int], ...]  # (request, new tokens) prefilled in this step
    decoders: tuple[Request, ...]  # requests that decode one token in this step
    duration_s: float  # device seconds


@dataclass
class SchedulerLimits:
    max_total_num_tokens: int
    max_running_requests: int
    chunked_prefill_size: int  # -1: disabled
    max_prefill_tokens: int
    radix_cache: bool = True
    mixed_chunk: bool = False
    # SGLang's overlap scheduler: a prefill step's first tokens stream when the next prefill
    # step ends (module docstring).  False for --disable-overlap-schedule, PD roles and vLLM.
    overlap_prefill_results: bool = False


@dataclass
class Counters:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generation_tokens: int = 0
    finished_requests: int = 0
    retractions: int = 0


class Scheduler:
    def __init__(self, timing: TimingModel, limits: SchedulerLimits) -> None:
        self.timing = timing
        self.limits = limits
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.reserved = 0
        self.cache = PrefixCache(limits.max_total_num_tokens, limits.radix_cache)
        self.counters = Counters()
        # Prompts completed by the last prefill step whose result the overlap scheduler has
        # not processed yet (module docstring), the end of the last step, and the held ones
        # that plan() let go before a decode step or idleness (see pop_released).
        self.held: list[Request] = []
        self.last_end = 0.0
        self._released: list[Request] = []

    # -- queue -------------------------------------------------------------------------------
    def enqueue(self, req: Request) -> None:
        req.page_keys = PrefixCache.keys(req.prompt_ids) if self.cache.enabled else []
        self.waiting.append(req)

    def abort(self, req: Request) -> None:
        if req in self.held:
            self.held.remove(req)
        if req in self.waiting:
            self.waiting.remove(req)
        elif req in self.running:
            self._release(req)
        if not req.finished:
            req.finish_reason = "abort"

    def idle(self) -> bool:
        return not self.waiting and not self.running

    def kv_used(self) -> int:
        return sum(r.kv_tokens for r in self.running)

    def flush_cache(self) -> bool:
        """SGLang refuses to flush while requests run or wait."""
        if not self.idle():
            return False
        self.cache.clear()
        return True

    # -- planning ----------------------------------------------------------------------------
    def _budget(self) -> PrefillBudget:
        chunk = self.limits.chunked_prefill_size
        # --enable-mixed-chunk: the decodes riding along take their rows out of both budgets.
        mixing = self.limits.mixed_chunk and chunk > 0  # SGLang's is_mixed_chunk needs chunking on
        riders = sum(1 for r in self.running if r.prefilled >= r.prefill_target) if mixing else 0
        return PrefillBudget(self.limits.max_prefill_tokens - riders, chunk - riders if chunk > 0 else None)

    def _admit(self, budget: PrefillBudget, chunks: list[tuple[Request, int]]) -> None:
        while self.waiting and not budget.spent() and len(self.running) < self.limits.max_running_requests:
            req = self.waiting[0]
            need = min(req.reservation, self.limits.max_total_num_tokens)
            if self.reserved + need > self.limits.max_total_num_tokens:
                break  # FCFS: the head blocks the queue until memory frees up
            cached = min(self.cache.match(req.page_keys), req.prefill_target - 1)
            # KV handed over by a prefill server is in the pool already: not recomputed.
            ready = max(cached, min(req.transferred, req.prefill_target - 1))
            take = budget.take(req.prefill_target - ready, first=not chunks)
            if take == 0:
                break  # an unchunked prompt that does not fit what is left waits for the next step
            self.waiting.popleft()
            req.cached, req.prefilled = max(req.cached, cached), ready
            self.running.append(req)
            self.reserved += need
            self.cache.fit(self.limits.max_total_num_tokens - self.reserved)
            chunks.append((req, take))

    def _retract_if_full(self) -> None:
        decoding = [r for r in self.running if r.prefilled >= r.prefill_target]
        while len(decoding) > 1 and self.kv_used() + len(decoding) > self.limits.max_total_num_tokens:
            victim = decoding.pop()
            self._release(victim)
            victim.prefill_target = victim.prompt_len + victim.generated
            victim.prefilled = 0
            victim.transferred = 0  # a retracted request recomputes its prompt
            self.waiting.appendleft(victim)
            self.counters.retractions += 1

    def plan(self) -> Step | None:
        chunks: list[tuple[Request, int]] = []
        budget = self._budget()
        for req in self.running:  # a chunked prefill in progress continues first
            if req.prefilled < req.prefill_target:
                take = budget.take(req.prefill_target - req.prefilled, first=not chunks)
                if take > 0:
                    chunks.append((req, take))
        self._admit(budget, chunks)
        in_prefill = {id(r) for r, _ in chunks}
        if not chunks:
            self._release_held()
            self._retract_if_full()
        decoders = tuple(r for r in self.running
                         if r.prefilled >= r.prefill_target and id(r) not in in_prefill)
        if chunks:
            riders = decoders if self.limits.mixed_chunk else ()
            pieces = [(n, r.prefilled) for r, n in chunks] + [(1, r.kv_tokens) for r in riders]
            return Step("prefill", tuple(chunks), riders, self.timing.prefill_step_s(pieces))
        if decoders:
            kv = sum(r.kv_tokens for r in decoders)
            return Step("decode", (), decoders, self.timing.decode_step_s(len(decoders), kv))
        return None

    # -- completion --------------------------------------------------------------------------
    def apply(self, step: Step, now: float) -> list[Request]:
        """Advance the requests of ``step``, ended at ``now``; returns those that got a token."""
        emitted: list[Request] = []
        if step.kind == "prefill":  # its launch returned only now: the last prefill's results stream
            for req in self.held:
                self._emit(req, now, emitted)
            self.held = []
        for req, n in step.chunks:
            req.prefilled += n
            if req.prefilled >= req.prefill_target:
                self.counters.prompt_tokens += req.prompt_len if req.first_token_at is None else 0
                self.counters.cached_tokens += req.cached if req.first_token_at is None else 0
                self._cache_prefilled(req)
                if self.limits.overlap_prefill_results:
                    self.held.append(req)
                else:
                    self._emit(req, now, emitted)
        for req in step.decoders:
            self._emit(req, now, emitted)
        self.last_end = now
        return emitted

    def _cache_prefilled(self, req: Request) -> None:
        """A prompt's pages join the cache once prefilled, as SGLang's ``cache_unfinished_req``
        inserts a request's KV after its prefill: a request of the same prefix that arrives
        while this one decodes reuses it (one admitted in the same prefill batch does not)."""
        self.cache.insert(req.page_keys)
        self.cache.fit(self.limits.max_total_num_tokens - self.reserved)

    def _release_held(self) -> None:
        """The next step is a decode step (or none): the overlap scheduler processes the held
        prefill results right after its quick launch, i.e. when their own step ended."""
        for req in self.held:
            self._emit(req, self.last_end, self._released)
        self.held = []

    def pop_released(self) -> list[Request]:
        """The held requests that :meth:`plan` let go (their token is stamped at the end of
        the step that produced it); the caller wakes their streams."""
        out, self._released = self._released, []
        return out

    def _emit(self, req: Request, now: float, emitted: list[Request]) -> None:
        if req.finished:  # aborted while its step ran
            return
        req.generated += 1
        self.counters.generation_tokens += 1
        if req.first_token_at is None:
            req.first_token_at = now
        req.prev_token_at, req.last_token_at = req.last_token_at, now
        if req.generated >= req.stop_after:
            req.finish_reason = "length" if req.stop_after >= req.max_new_tokens else "stop"
            req.finished_at = now
            self.counters.finished_requests += 1
            self._release(req)
            self.cache.insert(req.page_keys)
            self.cache.fit(self.limits.max_total_num_tokens - self.reserved)
        emitted.append(req)

    def _release(self, req: Request) -> None:
        if req in self.running:
            self.running.remove(req)
            self.reserved -= min(req.reservation, self.limits.max_total_num_tokens)
