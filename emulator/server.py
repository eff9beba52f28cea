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
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from emulator import disagg, quality_http, startup
from emulator import health as health_check
from emulator.config import resolved_server_args
from emulator.generation import (
    SSE_HEADERS,
    BadRequest,
    ContextTooLong,
    GenInput,
    Output,
    ServerState,
    chunk_due,
    emulator_block,
    gen_input,
    json_body,
    model_output,
    prompt_token_ids,
    run_request,
    sse_event,
)
from emulator.prefix_cache import sglext
from emulator.scheduler import Request
from emulator.tokens import TokenText

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPEN_PATHS = {"/health", "/health_generate", "/ready", "/metrics"}
# SGLang's GRAPH_MEMORY_USAGE_KEYS: memory_usage.graph always lists every capture phase.
GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")


STATE: web.AppKey[ServerState] = web.AppKey("state", ServerState)


def _state(request: web.Request) -> ServerState:
    return request.app[STATE]


def _error(message: str, status: int = 400) -> web.Response:
    return web.json_response({"object": "error", "message": message, "type": "BadRequestError",
                              "param": None, "code": status}, status=status)


# -- request parsing ---------------------------------------------------------------------------
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


async def generate(request: web.Request) -> web.StreamResponse:
    state = _state(request)
    try:
        body = await json_body(request)
        params = body.get("sampling_params") or {}
        prompt = prompt_token_ids(state.tokens, body.get("text"), body.get("input_ids"))
        gen = gen_input(state, prompt, params.get("max_new_tokens", 128), params.get("ignore_eos"), body.get("rid"))
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


async def _stream_refusal(request: web.Request, exc: ContextTooLong) -> web.StreamResponse:
    """As SGLang's ``/generate`` streams a ValueError from the tokenizer manager
    (http_server ``stream_results``): 200, one ``data: {"error": …}`` event, ``[DONE]``."""
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    await response.write(sse_event({"error": {"message": str(exc), "type": "invalid_request_error", "code": 400,
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
    await response.write(sse_event(payload))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def _collect(state: ServerState, gen: GenInput, out: Output) -> Request:
    """Run ``gen`` to the end (non-streaming requests)."""
    last: Request | None = None
    async with aclosing(run_request(state, gen)) as updates:
        async for req in updates:
            out.catch_up(req.generated)
            last = req
    if last is None:  # cannot happen: run_request yields the update that finishes the request
        raise RuntimeError("request ended without an update")
    return last


async def _stream_generate(request: web.Request, state: ServerState, gen: GenInput, out: Output) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    incremental = bool(state.cfg.args.get("incremental_streaming_output"))
    interval = max(1, int(state.cfg.args.get("stream_interval") or 1))
    sent = 0
    try:
        async with aclosing(run_request(state, gen, stream=True)) as updates:
            async for req in updates:
                if not chunk_due(req, sent, interval):
                    continue
                start = len(out.ids)
                delta = out.catch_up(req.generated)
                text, ids = (delta, out.ids[start:]) if incremental else (out.text, out.ids)
                await response.write(sse_event({"text": text, "output_ids": ids, "meta_info": _meta(state, req)}))
                sent = req.generated
        await response.write(b"data: [DONE]\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        return response  # the client went away; run_request's cleanup aborted the request
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
        body = await json_body(request)
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
            prompt = prompt_token_ids(state.tokens, None if ids is not None else raw, ids)
            max_new = body.get("max_tokens", 16)
            enable_thinking = None  # a completion request renders no template
        if int(body.get("n") or 1) != 1:
            raise BadRequest("n > 1 is not supported by the emulator")
        gen = gen_input(state, prompt, max_new, body.get("ignore_eos"), body.get("rid"),
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
            await response.write(sse_event(shape.chunk([shape.choice("", None, first=True)])))
        async with aclosing(run_request(state, gen, stream=True)) as updates:
            async for req in updates:
                last = req
                if not chunk_due(req, sent, interval):
                    continue
                delta = out.catch_up(req.generated)
                await response.write(sse_event(shape.chunk([shape.choice(delta, _openai_reason(req))])))
                sent = req.generated
        if shape.include_usage and last is not None:
            ext = sglext({"return_cached_tokens_details": shape.cached_details}, last.cached)
            await response.write(sse_event({**shape.chunk([], _usage(last)), **ext}))
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
