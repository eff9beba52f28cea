"""The emulator's HTTP surface: SGLang's native and OpenAI-compatible endpoints (aiohttp).

Readiness follows SGLang: the HTTP server comes up after the scheduler's start-up, so
``/v1/models`` and ``/model_info`` answer while ``/health``, ``/health_generate`` and
``/ready`` still return 503 during the warmup.  ``/metrics`` exists only with
``--enable-metrics``.  Every ``/server_info`` carries ``"emulated": true`` and an
``emulator`` block (time scale, constants, lag), so nothing measured here can pass for a
real SGLang result.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from aiohttp import web

from emulator import disagg, quality_http, startup
from emulator import health as health_check
from emulator.config import EMULATOR_VERSION, EmulatorConfig, resolved_server_args
from emulator.metrics import Metrics
from emulator.prefix_cache import sglext
from emulator.quality import EmulatedModel, profile_for
from emulator.scheduler import Request
from emulator.step_loop import StepLoop
from emulator.tokens import TokenText

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPEN_PATHS = {"/health", "/health_generate", "/ready", "/metrics"}
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
# SGLang's GRAPH_MEMORY_USAGE_KEYS: memory_usage.graph always lists every capture phase.
GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")


@dataclass
class ServerState:
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


STATE: web.AppKey[ServerState] = web.AppKey("state", ServerState)


def _state(request: web.Request) -> ServerState:
    return request.app[STATE]


def _error(message: str, status: int = 400) -> web.Response:
    return web.json_response({"object": "error", "message": message, "type": "BadRequestError",
                              "param": None, "code": status}, status=status)


# -- request parsing ---------------------------------------------------------------------------
def _prompt_ids(tokens: TokenText, text: Any, input_ids: Any) -> list[int]:
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


def _gen_input(state: ServerState, prompt_ids: list[int], max_new: Any, ignore_eos: Any,
               rid: Any, thinking: bool = False) -> GenInput:
    if max_new is None:
        max_new = state.cfg.context_len - len(prompt_ids)
    if not isinstance(max_new, int) or max_new < 1:
        raise BadRequest(f"max_new_tokens must be a positive integer, got {max_new!r}")
    _check_lengths(state.cfg, len(prompt_ids), max_new)
    return GenInput(prompt_ids, max_new, bool(ignore_eos), str(rid) if rid else uuid.uuid4().hex, thinking=thinking)


def _enable_thinking(body: dict[str, Any]) -> bool | None:
    """``chat_template_kwargs.enable_thinking`` of a chat request (None when not given), read
    as a Jinja template reads it: any value but false/null counts as true."""
    kwargs = body.get("chat_template_kwargs")
    if kwargs is None:
        return None
    if not isinstance(kwargs, dict):
        raise BadRequest("chat_template_kwargs must be a JSON object")
    value = kwargs.get("enable_thinking")
    return None if value is None else bool(value)


async def _json_body(request: web.Request) -> dict[str, Any]:
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


async def _run(state: ServerState, gen: GenInput, stream: bool = False) -> AsyncGenerator[Request, None]:
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


def _finish_reason(state: ServerState, req: Request) -> dict[str, Any] | None:
    if not req.finished:
        return None
    if req.finish_reason == "length":
        return {"type": "length", "length": req.max_new_tokens}
    if req.finish_reason == "stop":
        return {"type": "stop", "matched": state.tokens.eos_id}
    return {"type": "abort", "message": "aborted"}


def _meta(state: ServerState, req: Request) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": req.rid, "finish_reason": _finish_reason(state, req), "prompt_tokens": req.prompt_len,
        "weight_version": "default", "completion_tokens": req.generated, "cached_tokens": req.cached,
    }
    if req.finished and req.finished_at is not None:
        meta["e2e_latency"] = req.finished_at - req.arrival
    if req.finished:
        meta |= quality_http.spec_meta(state, req.prompt_ids, req.generated)
    return meta


def _sse(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _due(req: Request, sent: int, interval: int) -> bool:
    return req.finished or sent == 0 or req.generated - sent >= interval


async def generate(request: web.Request) -> web.StreamResponse:
    state = _state(request)
    try:
        body = await _json_body(request)
        params = body.get("sampling_params") or {}
        prompt = _prompt_ids(state.tokens, body.get("text"), body.get("input_ids"))
        gen = _gen_input(state, prompt, params.get("max_new_tokens", 128), params.get("ignore_eos"), body.get("rid"))
    except ContextTooLong as exc:
        if body.get("stream"):
            return await _stream_refusal(request, exc)
        return web.json_response({"error": {"message": str(exc)}}, status=400)
    except BadRequest as exc:
        return web.json_response({"error": {"message": str(exc)}}, status=400)
    if state.disaggregation_mode in ("prefill", "decode"):
        return await _disaggregated(request, state, body, gen)
    gen, out = model_output(state, gen)
    if not body.get("stream"):
        req = await _collect(state, gen, out)
        meta = _meta(state, req) | quality_http.generate_meta(state, body, gen.prompt_ids, out, req.generated)
        return web.json_response({"text": out.text, "output_ids": out.ids, "meta_info": meta})
    return await _stream_generate(request, state, gen, out)


def model_output(state: ServerState, gen: GenInput) -> tuple[GenInput, Any]:
    """The emulated model's output for ``gen`` (emulator/quality_http.py); a toy-task
    answer also says where the model stops."""
    out = quality_http.output_for(state, gen.prompt_ids)
    if out.answer:
        gen = replace(gen, natural=len(out.answer))
    return gen, out


async def _stream_refusal(request: web.Request, exc: ContextTooLong) -> web.StreamResponse:
    """As SGLang's ``/generate`` streams a ValueError from the tokenizer manager
    (http_server ``stream_results``): 200, one ``data: {"error": …}`` event, ``[DONE]``."""
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    await response.write(_sse({"error": {"message": str(exc), "type": "invalid_request_error", "code": 400,
                                         "retryable": False}}))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def _disaggregated(request: web.Request, state: ServerState, body: dict[str, Any],
                         gen: GenInput) -> web.StreamResponse:
    """PD mode (see emulator/disagg.py): prefill computes the prompt and publishes
    its KV under the room; decode waits for that room, then decodes without the prompt."""
    try:
        boot = disagg.bootstrap_of(body)
    except disagg.MissingBootstrap as exc:
        return web.json_response({"error": {"message": str(exc)}}, status=400)
    if state.disaggregation_mode == "decode":
        try:
            transferred = await disagg.wait_for_kv(boot)
        except TimeoutError as exc:
            return web.json_response({"error": {"message": str(exc)}}, status=500)
        gen = GenInput(gen.prompt_ids, gen.max_new_tokens, gen.ignore_eos, gen.rid, transferred=transferred)
        gen, out = model_output(state, gen)
        if not body.get("stream"):
            req = await _collect(state, gen, out)
            return web.json_response({"text": out.text, "output_ids": out.ids, "meta_info": _meta(state, req)})
        return await _stream_generate(request, state, gen, out)
    # Prefill: the prompt and the first token, then the KV hand-over.
    first = GenInput(gen.prompt_ids, 1, True, gen.rid)
    out = Output(state.tokens, TokenText.seed(gen.prompt_ids))
    req = await _collect(state, first, out)
    backend = str(state.cfg.args.get("disaggregation_transfer_backend") or "mooncake")
    delay = disagg.transfer_seconds(len(gen.prompt_ids), state.cfg.memory.kv_cell_bytes, backend)
    state.rooms.publish(boot.room, len(gen.prompt_ids), delay * state.cfg.time_scale)
    payload = {"text": out.text, "output_ids": out.ids, "meta_info": _meta(state, req)}
    if not body.get("stream"):
        return web.json_response(payload)
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    await response.write(_sse(payload))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def _collect(state: ServerState, gen: GenInput, out: Output) -> Request:
    """Run ``gen`` to the end (non-streaming requests)."""
    last: Request | None = None
    async with aclosing(_run(state, gen)) as updates:
        async for req in updates:
            out.catch_up(req.generated)
            last = req
    if last is None:  # cannot happen: _run yields the update that finishes the request
        raise RuntimeError("request ended without an update")
    return last


async def _stream_generate(request: web.Request, state: ServerState, gen: GenInput, out: Output) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    incremental = bool(state.cfg.args.get("incremental_streaming_output"))
    interval = max(1, int(state.cfg.args.get("stream_interval") or 1))
    sent = 0
    try:
        async with aclosing(_run(state, gen, stream=True)) as updates:
            async for req in updates:
                if not _due(req, sent, interval):
                    continue
                start = len(out.ids)
                delta = out.catch_up(req.generated)
                text, ids = (delta, out.ids[start:]) if incremental else (out.text, out.ids)
                await response.write(_sse({"text": text, "output_ids": ids, "meta_info": _meta(state, req)}))
                sent = req.generated
        await response.write(b"data: [DONE]\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        return response  # the client went away; _run's cleanup aborted the request
    await response.write_eof()
    return response


# -- OpenAI-compatible -------------------------------------------------------------------------
def _usage(req: Request) -> dict[str, Any]:
    return {"prompt_tokens": req.prompt_len, "completion_tokens": req.generated,
            "total_tokens": req.prompt_len + req.generated,
            "prompt_tokens_details": {"cached_tokens": req.cached} if req.cached else None}


def _openai_reason(req: Request) -> str | None:
    return None if not req.finished else ("length" if req.finish_reason == "length" else "stop")


async def _openai(request: web.Request, chat: bool) -> web.StreamResponse:
    state = _state(request)
    try:
        body = await _json_body(request)
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("messages must be a non-empty list")
            enable_thinking = _enable_thinking(body)
            prompt = state.tokens.encode(state.tokens.chat_prompt(messages, enable_thinking))
            max_new = body.get("max_completion_tokens") or body.get("max_tokens")
        else:
            raw = body.get("prompt")
            ids = raw if isinstance(raw, list) and raw and not isinstance(raw[0], str) else None
            prompt = _prompt_ids(state.tokens, None if ids is not None else raw, ids)
            max_new = body.get("max_tokens", 16)
            enable_thinking = None  # a completion request renders no template
        if int(body.get("n") or 1) != 1:
            raise BadRequest("n > 1 is not supported by the emulator")
        gen = _gen_input(state, prompt, max_new, body.get("ignore_eos"), body.get("rid"),
                         thinking=enable_thinking is True)
    except BadRequest as exc:
        return _error(str(exc))
    rid = ("chatcmpl-" if chat else "cmpl-") + gen.rid
    model = body.get("model") or state.cfg.served_model_name
    gen, out = model_output(state, gen)
    if body.get("stream"):
        include_usage = bool((body.get("stream_options") or {}).get("include_usage")) or bool(
            state.cfg.args.get("stream_response_default_include_usage"))
        shape = _OpenAIShape(chat, rid, model, include_usage, bool(body.get("return_cached_tokens_details")))
        return await _openai_stream(request, state, gen, out, shape)
    req = await _collect(state, gen, out)
    choice: dict[str, Any] = {"index": 0, "finish_reason": _openai_reason(req),
                              "logprobs": quality_http.openai_logprobs(body, out, chat)}
    if chat:
        choice["message"] = {"role": "assistant", "content": out.text, "reasoning_content": None, "tool_calls": None}
    else:
        choice["text"] = out.text
    return web.json_response({"id": rid, "object": "chat.completion" if chat else "text_completion",
                              "created": int(time.time()), "model": model, "choices": [choice],
                              "usage": _usage(req), **sglext(body, req.cached)})


@dataclass(frozen=True)
class _OpenAIShape:
    chat: bool
    rid: str
    model: str
    include_usage: bool
    cached_details: bool = False  # return_cached_tokens_details: sglext on the usage chunk

    def chunk(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"id": self.rid, "object": "chat.completion.chunk" if self.chat else "text_completion",
                "created": int(time.time()), "model": self.model, "choices": choices, "usage": usage}

    def choice(self, delta: str, reason: str | None, first: bool = False) -> dict[str, Any]:
        if self.chat:
            content: dict[str, Any] = {"role": "assistant", "content": delta} if first else {"content": delta}
            return {"index": 0, "delta": content, "logprobs": None, "finish_reason": reason}
        return {"index": 0, "text": delta, "logprobs": None, "finish_reason": reason}


async def _openai_stream(request: web.Request, state: ServerState, gen: GenInput, out: Output,
                         shape: _OpenAIShape) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    interval = max(1, int(state.cfg.args.get("stream_interval") or 1))
    sent, last = 0, None
    try:
        if shape.chat:
            await response.write(_sse(shape.chunk([shape.choice("", None, first=True)])))
        async with aclosing(_run(state, gen, stream=True)) as updates:
            async for req in updates:
                last = req
                if not _due(req, sent, interval):
                    continue
                delta = out.catch_up(req.generated)
                await response.write(_sse(shape.chunk([shape.choice(delta, _openai_reason(req))])))
                sent = req.generated
        if shape.include_usage and last is not None:
            ext = sglext({"return_cached_tokens_details": shape.cached_details}, last.cached)
            await response.write(_sse({**shape.chunk([], _usage(last)), **ext}))
        await response.write(b"data: [DONE]\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        return response
    await response.write_eof()
    return response


async def completions(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=True)


# -- control and information ---------------------------------------------------------------------
async def health(request: web.Request) -> web.Response:
    return web.Response(status=200 if _state(request).ready else 503)


async def health_generate(request: web.Request) -> web.Response:
    state = _state(request)
    return web.Response(status=await health_check.probe_status(state.status, state.step_loop))


async def models(request: web.Request) -> web.Response:
    state = _state(request)
    card = {"id": state.cfg.served_model_name, "object": "model", "created": int(state.started_at),
            "owned_by": "sglang", "root": state.cfg.served_model_name, "parent": None,
            "max_model_len": state.cfg.context_len}
    return web.json_response({"object": "list", "data": [card]})


async def model_info(request: web.Request) -> web.Response:
    state = _state(request)
    cfg = state.cfg
    return web.json_response({
        "model_path": cfg.args["model_path"], "served_model_name": cfg.served_model_name,
        "tokenizer_path": str(state.tokens.directory), "is_generation": True,
        "preferred_sampling_params": None, "weight_version": "default", "load_format": cfg.args.get("load_format"),
        "reasoning_parser": cfg.args.get("reasoning_parser"), "tool_call_parser": cfg.args.get("tool_call_parser"),
        "disaggregation_mode": cfg.args.get("disaggregation_mode"), "has_image_understanding": False,
        "has_audio_understanding": False, "model_type": cfg.model.model_type,
        "architectures": list(cfg.model.architectures), "emulated": True,
    })


def emulator_block(state: ServerState) -> dict[str, Any]:
    cfg, step_loop = state.cfg, state.step_loop
    return {
        "emulator_version": EMULATOR_VERSION, "note": "benchdeck emulator engine: NOT a real SGLang server",
        "time_scale": cfg.time_scale, "gpu": cfg.gpu.name, "gpu_count": cfg.gpu_count, "model": cfg.model.name,
        "timing_constants": asdict(cfg.timing.constants), "lag_seconds": step_loop.lag_s,
        "late_steps": step_loop.late_steps, "steps": step_loop.steps, "faults": cfg.emulate.faults,
        "tokenizer_dir": str(state.tokens.directory),
    }


async def server_info(request: web.Request) -> web.Response:
    state = _state(request)
    cfg, m = state.cfg, state.cfg.memory
    # build_memory_usage's shape: GB to 3 places, graph memory per capture phase.
    graph = dict.fromkeys(GRAPH_PHASES, 0.0) | {k: round(v, 3) for k, v in startup.graph_memory(cfg).items()}
    memory = {"weight": round(m.weight_gb, 3), "kvcache": round(m.kv_gb, 3),
              "startup_available": round(m.avail_before_load_gb, 3), "token_capacity": cfg.max_total_num_tokens,
              "token_capacity_swa": None, "graph": graph}
    internal = {"effective_max_running_requests_per_dp": cfg.max_running_requests,
                "last_gen_throughput": state.step_loop.gen_throughput(), "memory_usage": memory,
                "disaggregation_mode": cfg.args.get("disaggregation_mode") or "null",
                "decode_cuda_graph_bs": list(cfg.cuda_graph_bs), "decode_cuda_graph_memory_gb": graph["decode"],
                **quality_http.server_info_fields(state)}
    info = resolved_server_args(cfg)
    info.update(
        launch_command=state.launch_command, status=state.status, max_total_num_tokens=cfg.max_total_num_tokens,
        max_req_input_len=cfg.max_req_input_len,
        startup_time=(state.ready_at - state.started_at) if state.ready_at else None, kv_events=None,
        version=cfg.version, frontend="python", internal_states=[internal], emulated=True,
        emulator=emulator_block(state),
    )
    return web.json_response(info, dumps=lambda obj: json.dumps(obj, default=str))


async def flush_cache(request: web.Request) -> web.Response:
    state = _state(request)
    try:
        timeout = float(request.query.get("timeout", "0"))
    except ValueError:
        return web.Response(status=400, text="timeout must be a number\n")
    if not state.step_loop.scheduler.idle():
        await state.step_loop.wait_idle(timeout)
    if state.step_loop.scheduler.flush_cache():
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details. (When there are "
                                 "running or waiting requests, the operation will not be performed.)\n")
    return web.Response(status=400, text="Flush cache failed.\n")


async def metrics(request: web.Request) -> web.Response:
    collector = _state(request).metrics
    if collector is None:  # the route exists only with --enable-metrics
        raise web.HTTPNotFound()
    return web.Response(body=collector.render(), content_type="text/plain", charset="utf-8")


async def profile(request: web.Request) -> web.Response:
    return web.Response(text="Start profiling. (emulated: nothing is recorded)\n")


def _auth_middleware(api_key: str) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in OPEN_PATHS and request.headers.get("Authorization") != f"Bearer {api_key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return check


def build_app(state: ServerState) -> web.Application:
    api_key = state.cfg.args.get("api_key")
    app = web.Application(middlewares=[_auth_middleware(api_key)] if api_key else [],
                          client_max_size=64 * 1024 * 1024)
    app[STATE] = state
    routes = [
        web.get("/health", health), web.get("/health_generate", health_generate), web.get("/ready", health),
        web.get("/server_info", server_info), web.get("/get_server_info", server_info),
        web.get("/model_info", model_info), web.get("/get_model_info", model_info),
        web.get("/v1/models", models), web.post("/generate", generate),
        web.post("/v1/completions", completions), web.post("/v1/chat/completions", chat_completions),
        web.get("/flush_cache", flush_cache), web.post("/flush_cache", flush_cache),
        web.route("*", "/start_profile", profile), web.route("*", "/stop_profile", profile),
    ]
    if state.metrics is not None:
        routes.append(web.get("/metrics", metrics))
    app.add_routes(routes)
    return app
