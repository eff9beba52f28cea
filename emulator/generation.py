"""A generation request through the emulated engine, whichever API it came in by: the
server's state, the request's input and its checks, its run through the step loop, the
emulated model's output text, and the HTTP framing both personalities share (a JSON body,
server-sent events).  SGLang's surface (emulator/server.py) and vLLM's
(emulator/vllm_server.py) differ only in their routes and response shapes.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from aiohttp import web

from emulator import disagg, quality_http
from emulator.config import EMULATOR_VERSION, EmulatorConfig
from emulator.metrics import Metrics
from emulator.quality import EmulatedModel, profile_for
from emulator.scheduler import Request
from emulator.step_loop import StepLoop
from emulator.tokens import TokenText

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


@dataclass
class ServerState:
    """One emulated server: its configuration, step loop, tokenizer, metrics and status."""

    cfg: EmulatorConfig
    step_loop: StepLoop
    tokens: TokenText
    metrics: Metrics | None
    launch_command: str
    on_crash: Callable[[str], None]  # fault injection: print SGLang's crash lines and die
    status: str = "Starting"  # Starting | Up | UnHealthy | Draining
    started_at: float = field(default_factory=time.time)
    ready_at: float | None = None
    accepted: int = 0  # generation requests accepted, for the *-after-requests faults
    rooms: disagg.KvRooms = field(default_factory=disagg.KvRooms)  # prefill side: finished KV transfers
    model: EmulatedModel | None = None  # the emulated model's answers (emulator/quality.py)
    spec_lengths: list[float] = field(default_factory=list)  # per request, speculative plans only

    def __post_init__(self) -> None:
        if self.model is None:
            self.model = EmulatedModel(self.tokens, profile_for(self.cfg.args))

    @property
    def disaggregation_mode(self) -> str:
        return str(self.cfg.args.get("disaggregation_mode") or "null")

    @property
    def ready(self) -> bool:
        return self.status == "Up"


@dataclass(frozen=True)
class GenInput:
    """One generation request as the step loop takes it, whichever API it came in by."""

    prompt_ids: list[int]
    max_new_tokens: int
    ignore_eos: bool
    rid: str
    transferred: int = 0  # decode side of PD: prompt tokens whose KV came from the prefill server
    thinking: bool = False  # a chat request with enable_thinking true: the model reasons before answering
    natural: int | None = None  # where the emulated model stops by itself, when its answer says (quality_http)


class BadRequest(ValueError):
    pass


class ContextTooLong(BadRequest):
    """SGLang's tokenizer manager refuses the request (``_validate_one_request``): on a
    streaming ``/generate`` that is an SSE error event after HTTP 200, not a 400."""


def prompt_token_ids(tokens: TokenText, text: Any, input_ids: Any) -> list[int]:
    """The prompt as token ids: ``input_ids`` as given, else ``text`` encoded (one prompt only)."""
    if input_ids is not None:
        if isinstance(input_ids, list) and input_ids and isinstance(input_ids[0], list):
            if len(input_ids) != 1:
                raise BadRequest("batched input_ids are not supported by the emulator")
            input_ids = input_ids[0]
        if not isinstance(input_ids, list) or not all(isinstance(i, int) for i in input_ids):
            raise BadRequest("input_ids must be a list of token ids")
        return input_ids
    if isinstance(text, list):
        if len(text) != 1:
            raise BadRequest("batched prompts are not supported by the emulator")
        text = text[0]
    if not isinstance(text, str):
        raise BadRequest("either text or input_ids must be given")
    return tokens.encode(text)


def _check_lengths(cfg: EmulatorConfig, prompt_len: int, max_new: int) -> None:
    if prompt_len == 0:
        raise BadRequest("The input is empty.")
    # The tokenizer manager's two checks first (in its order), then the scheduler's.
    if prompt_len >= cfg.context_len:
        raise ContextTooLong(f"The input ({prompt_len} tokens) is longer than the model's context length "
                             f"({cfg.context_len} tokens).")
    if prompt_len + max_new > cfg.context_len:
        raise ContextTooLong(
            f"Requested token count exceeds the model's maximum context length of {cfg.context_len} tokens. "
            f"You requested a total of {prompt_len + max_new} tokens: {prompt_len} tokens from the input "
            f"messages and {max_new} tokens for the completion. Please reduce the number of tokens in the "
            "input messages or the completion to fit within the limit.")
    if prompt_len > cfg.max_req_input_len:
        raise BadRequest(f"Input length ({prompt_len} tokens) exceeds the maximum allowed length "
                         f"({cfg.max_req_input_len} tokens). Use a shorter input or enable --allow-auto-truncate.")


def gen_input(state: ServerState, prompt_ids: list[int], max_new: Any, ignore_eos: Any,
               rid: Any, thinking: bool = False) -> GenInput:
    """The request for the step loop, its lengths checked as SGLang checks them."""
    if max_new is None:
        max_new = state.cfg.context_len - len(prompt_ids)
    if not isinstance(max_new, int) or max_new < 1:
        raise BadRequest(f"max_new_tokens must be a positive integer, got {max_new!r}")
    _check_lengths(state.cfg, len(prompt_ids), max_new)
    return GenInput(prompt_ids, max_new, bool(ignore_eos), str(rid) if rid else uuid.uuid4().hex, thinking=thinking)


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object; BadRequest for anything else."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"invalid JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


# -- generation --------------------------------------------------------------------------------
@dataclass
class Output:
    """What a request has produced so far, as token ids and text."""

    tokens: TokenText
    seed: int
    ids: list[int] = field(default_factory=list)
    text: str = ""

    def catch_up(self, generated: int) -> str:
        """Extend to ``generated`` tokens; returns the new text."""
        new = []
        for index in range(len(self.ids), generated):
            token = self.tokens.output_id(self.seed, index)
            self.ids.append(token)
            new.append(self.tokens.pieces[token])
        delta = "".join(new)
        self.text += delta
        return delta


def _check_faults(state: ServerState) -> None:
    faults = state.cfg.emulate.faults
    state.accepted += 1
    crash = faults.get("crash-after-requests")
    if crash is not None and state.accepted > int(crash):
        state.on_crash(f"emulated fault: crash after {crash} requests")
    stall = faults.get("stall-after-requests")
    if stall is not None and state.accepted > int(stall):
        state.step_loop.stalled = True


async def run_request(state: ServerState, gen: GenInput, stream: bool = False) -> AsyncGenerator[Request, None]:
    """Submit ``gen`` and yield its request each time it gains tokens, until it finishes."""
    if state.status == "Draining":
        raise BadRequest("The server is shutting down.")
    _check_faults(state)
    seed = TokenText.seed(gen.prompt_ids)
    natural = state.tokens.natural_length(seed) + (state.tokens.thinking_length(seed) if gen.thinking else 0)
    natural = natural if gen.natural is None else gen.natural
    stop_after = gen.max_new_tokens if gen.ignore_eos else min(gen.max_new_tokens, natural)
    req = Request(rid=gen.rid, prompt_ids=gen.prompt_ids, max_new_tokens=gen.max_new_tokens,
                  stop_after=stop_after, arrival=asyncio.get_running_loop().time(), transferred=gen.transferred,
                  stream=stream)
    event = state.step_loop.submit(req)
    try:
        while True:
            await event.wait()
            event.clear()
            yield req
            if req.finished:
                return
    finally:
        state.step_loop.release(req)
        quality_http.record_acceptance(state, req)


def sse_event(payload: Any) -> bytes:
    """One server-sent event carrying ``payload`` as compact JSON."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def chunk_due(req: Request, sent: int, interval: int) -> bool:
    """Whether a stream sends a chunk now: the first, every ``interval`` tokens, and the last."""
    return req.finished or sent == 0 or req.generated - sent >= interval


def model_output(state: ServerState, gen: GenInput) -> tuple[GenInput, Any]:
    """The emulated model's output for ``gen`` (emulator/quality_http.py); a toy-task
    answer also says where the model stops."""
    out = quality_http.output_for(state, gen.prompt_ids)
    if out.answer:
        gen = replace(gen, natural=len(out.answer))
    return gen, out


def emulator_block(state: ServerState) -> dict[str, Any]:
    """What ``/server_info`` says of the emulator, so nothing measured here passes for a real server."""
    cfg, step_loop = state.cfg, state.step_loop
    return {
        "emulator_version": EMULATOR_VERSION, "note": "benchdeck emulator engine: NOT a real SGLang server",
        "time_scale": cfg.time_scale, "gpu": cfg.gpu.name, "gpu_count": cfg.gpu_count, "model": cfg.model.name,
        "timing_constants": asdict(cfg.timing.constants), "lag_seconds": step_loop.lag_s,
        "late_steps": step_loop.late_steps, "steps": step_loop.steps, "faults": cfg.emulate.faults,
        "tokenizer_dir": str(state.tokens.directory),
    }
