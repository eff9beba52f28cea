"""The HTTP surface of the vLLM personality (aiohttp), shaped as ``vllm serve`` answers.

Routes (0.33.0 sources under V33 ``entrypoints/``; 0.11.2 in V11 ``openai/api_server.py``):

* ``GET /health``: 200 with an empty body, 503 once the engine is dead
  (V33 ``serve/instrumentator/health.py:22-33``); ``GET|POST /ping`` answers the same
  (V33 ``serve/sagemaker/api_router.py:91-96``);
* ``GET /v1/models``: a ``ModelList`` of ``ModelCard`` (``owned_by: vllm``, ``root`` = the
  model path, ``max_model_len``, ``permission``) per served name (V33 ``openai/models/
  serving.py:64-77``, ``serve/engine/protocol.py:90-118``);
* ``GET /version`` ``{"version": ...}`` and ``GET /load`` ``{"server_load": n}`` (V33
  ``serve/instrumentator/basic.py:30-56``; the load counts only with
  ``--enable-server-load-tracking``);
* ``/metrics`` (emulator/vllm_metrics.py);
* ``POST /v1/completions`` and ``/v1/chat/completions``, streamed as vLLM streams them:
  ``data: {chunk}\\n\\n`` per output, a usage-only chunk with empty ``choices`` when
  ``stream_options.include_usage`` (or ``--enable-force-include-usage``) asks for it,
  ``data: [DONE]`` (V33 ``openai/completion/serving.py:437-558``);
* only with ``VLLM_SERVER_DEV_MODE=1``: ``/server_info``, ``POST /reset_prefix_cache``,
  ``/is_sleeping`` (V33 ``entrypoints/serve/__init__.py:43-65``).  ``/flush_cache``,
  ``/get_server_info`` and ``/model_info`` never exist (404, FastAPI's ``{"detail": "Not Found"}``).

Nothing answers before the engine is ready: the socket is bound early but listened on only
then (emulator/vllm_launch.py).  ``/server_info`` (dev mode) carries ``"emulated": true``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from emulator import quality_http
from emulator.generation import (
    SSE_HEADERS,
    BadRequest,
    GenInput,
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
from emulator.vllm_config import VllmEmulatorConfig
from emulator.vllm_metrics import VllmMetrics

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
DEAD_MESSAGE = "The server had an error while processing your request."  # EngineDeadError.CLIENT_MESSAGE
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"


class EngineDead(RuntimeError):
    """The engine core has died: every request fails, /health answers 503."""


@dataclass
class VllmApp:
    state: ServerState
    metrics: VllmMetrics | None
    in_flight: int = 0

    @property
    def cfg(self) -> VllmEmulatorConfig:
        cfg = self.state.cfg
        assert isinstance(cfg, VllmEmulatorConfig)  # noqa: S101  # built by vllm_launch only
        return cfg

    @property
    def dead(self) -> bool:
        return self.state.status == "Dead"


APP: web.AppKey[VllmApp] = web.AppKey("vllm_app", VllmApp)


def _app(request: web.Request) -> VllmApp:
    return request.app[APP]


def error(message: str, kind: str = "BadRequestError", status: int = 400, param: str | None = None) -> web.Response:
    """vLLM's ``ErrorResponse``: ``{"error": {message, type, param, code}}``."""
    return respond({"error": {"message": message, "type": kind, "param": param, "code": status}},
                             status=status)


def _dead_chunk() -> bytes:
    return sse_event({"error": {"message": DEAD_MESSAGE, "type": "InternalServerError", "param": None, "code": 500}})


def respond(payload: Any, status: int = 200) -> web.Response:
    """JSON as Starlette's ``JSONResponse`` writes it: compact separators."""
    return web.json_response(payload, status=status, dumps=lambda o: json.dumps(o, separators=(",", ":"), default=str))


# -- information -------------------------------------------------------------------------------
async def health(request: web.Request) -> web.Response:
    return web.Response(status=503 if _app(request).dead else 200)


async def version(request: web.Request) -> web.Response:
    return respond({"version": _app(request).cfg.vllm.version})


async def load(request: web.Request) -> web.Response:
    return respond({"server_load": _app(request).in_flight})


def model_card(cfg: VllmEmulatorConfig, name: str, created: int) -> dict[str, Any]:
    permission = {"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission", "created": created,
                  "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                  "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                  "organization": "*", "group": None, "is_blocking": False}
    return {"id": name, "object": "model", "created": created, "owned_by": "vllm", "root": cfg.vllm.model_path,
            "parent": None, "max_model_len": cfg.context_len, "permission": [permission]}


async def models(request: web.Request) -> web.Response:
    cfg = _app(request).cfg
    created = int(time.time())
    return respond({"object": "list", "data": [model_card(cfg, n, created) for n in cfg.vllm.served_names]})


async def metrics(request: web.Request) -> web.Response:
    collector = _app(request).metrics
    body = collector.render() if collector is not None else b""  # --disable-log-stats: no vllm: series
    return web.Response(body=body, content_type="text/plain", charset="utf-8")


# -- dev mode ----------------------------------------------------------------------------------
async def server_info(request: web.Request) -> web.Response:
    vapp = _app(request)
    cfg = vapp.cfg
    config = {k: v for k, v in cfg.args.items() if v is not None}
    return respond({"vllm_config": json.dumps(config, default=str), "emulated": True,
                    "emulator": emulator_block(vapp.state)})


async def reset_prefix_cache(request: web.Request) -> web.Response:
    _app(request).state.step_loop.scheduler.cache.clear()
    return web.Response(status=200)


async def is_sleeping(request: web.Request) -> web.Response:
    return respond({"is_sleeping": False})


# -- generation --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    """The chunk and response shapes of one OpenAI-compatible request."""

    chat: bool
    rid: str
    model: str
    created: int

    def chunk(self, text: str | None, reason: str | None, role: bool = False) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {"content": text}
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
            if reason is not None:
                choice["stop_reason"] = None
            return {"id": self.rid, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                    "choices": [choice]}
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "stop_reason": None,
                  "prompt_token_ids": None, "token_ids": None, "weight_versions": None}
        return {"id": self.rid, "object": "text_completion", "created": self.created, "model": self.model,
                "choices": [choice], "kv_transfer_params": None}

    def usage_chunk(self, usage: dict[str, int]) -> dict[str, Any]:
        """The final usage chunk, serialised with ``exclude_none=True`` (V33 completion/serving.py:535-547)."""
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": self.rid, "object": kind, "created": self.created, "model": self.model, "choices": [],
                "usage": usage}


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}


def _reason(finish: str | None) -> str | None:
    return None if finish is None else ("length" if finish == "length" else "stop")


@dataclass(frozen=True)
class Parsed:
    gen: GenInput
    shape: Shape
    stream: bool
    include_usage: bool
    continuous_usage: bool
    logprobs: dict[str, Any] | None = None  # the request's logprobs fields (emulator/quality_http.py)


def _parse(vapp: VllmApp, body: dict[str, Any], chat: bool) -> Parsed | web.Response:
    cfg, tokens = vapp.cfg, vapp.state.tokens
    model = body.get("model") or cfg.served_model_name
    if model not in cfg.vllm.served_names:
        # V33 serve/engine/serving.py:75-83 (0.11.2 stops after the first sentence)
        aliases = "" if cfg.vllm.version == "0.11.2" else f" Valid aliases: {', '.join(cfg.vllm.served_names)}."
        return error(f"The model `{model}` does not exist.{aliases}", "NotFoundError", 404, "model")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        kwargs = body.get("chat_template_kwargs") or {}
        thinking = kwargs.get("enable_thinking") if isinstance(kwargs, dict) else None
        prompt = tokens.encode(tokens.chat_prompt(messages, None if thinking is None else bool(thinking)))
        requested = body.get("max_completion_tokens") or body.get("max_tokens")
    else:
        raw = body.get("prompt")
        ids = raw if isinstance(raw, list) and raw and not isinstance(raw[0], str) else None
        prompt = prompt_token_ids(tokens, None if ids is not None else raw, ids)
        requested = body.get("max_tokens", 16)  # CompletionRequest.max_tokens defaults to 16
        thinking = None
    limit = cfg.context_len
    if len(prompt) >= limit:  # V33 renderers/params.py:540-552
        raise BadRequest(f"This model's maximum context length is {limit} tokens. However, your prompt contains "
                         f"{len(prompt)} input tokens, which exceeds this limit even without any output tokens. "
                         "Please reduce the length of the input prompt.")
    # get_max_tokens (V33 serve/utils/api_utils.py:234-262): the output is capped, not refused.
    max_new = min(int(requested), limit - len(prompt)) if requested is not None else limit - len(prompt)
    if int(body.get("n") or 1) != 1:
        raise BadRequest("n > 1 is not supported by the emulator")
    gen = gen_input(vapp.state, prompt, max_new, body.get("ignore_eos"), None, thinking=thinking is True)
    options = body.get("stream_options") or {}
    force = bool(cfg.args.get("enable_force_include_usage"))
    rid = ("chatcmpl-" if chat else "cmpl-") + gen.rid
    gen, _ = model_output(vapp.state, gen)  # a toy-task answer says where the emulated model stops
    return Parsed(gen, Shape(chat, rid, str(model), int(time.time())), bool(body.get("stream")),
                  bool(options.get("include_usage")) or force, bool(options.get("continuous_usage_stats")),
                  {k: body[k] for k in ("logprobs", "top_logprobs") if k in body})


async def _openai(request: web.Request, chat: bool) -> web.StreamResponse:
    vapp = _app(request)
    if vapp.dead:
        return error(DEAD_MESSAGE, "InternalServerError", 500)
    try:
        parsed = _parse(vapp, await json_body(request), chat)
    except BadRequest as exc:
        return error(str(exc))
    if isinstance(parsed, web.Response):
        return parsed
    track = bool(vapp.cfg.args.get("enable_server_load_tracking"))
    vapp.in_flight += track
    try:
        if parsed.stream:
            return await _stream(request, vapp, parsed)
        return await _complete(vapp, parsed)
    except EngineDead:
        return error(DEAD_MESSAGE, "InternalServerError", 500)
    except BadRequest as exc:  # the server is shutting down
        return error(str(exc), "ServiceUnavailableError", 503)
    finally:
        vapp.in_flight -= track


async def _complete(vapp: VllmApp, parsed: Parsed) -> web.Response:
    out = quality_http.output_for(vapp.state, parsed.gen.prompt_ids)
    last = None
    async with aclosing(run_request(vapp.state, parsed.gen)) as updates:
        async for req in updates:
            out.catch_up(req.generated)
            last = req
    if last is None or vapp.dead:
        raise EngineDead
    shape = parsed.shape
    reason = _reason(last.finish_reason)
    logprobs = quality_http.openai_logprobs(parsed.logprobs or {}, out, shape.chat)
    if shape.chat:
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": out.text,
                                                          "refusal": None, "tool_calls": [], "reasoning": None},
                                  "logprobs": logprobs, "finish_reason": reason, "stop_reason": None}
    else:
        choice = {"index": 0, "text": out.text, "logprobs": logprobs, "finish_reason": reason, "stop_reason": None,
                  "prompt_logprobs": None}
    return respond({"id": shape.rid, "object": "chat.completion" if shape.chat else "text_completion",
                              "created": shape.created, "model": shape.model, "choices": [choice],
                              "usage": {**_usage(last.prompt_len, last.generated), "prompt_tokens_details": None},
                              "system_fingerprint": None, "kv_transfer_params": None})


async def _stream(request: web.Request, vapp: VllmApp, parsed: Parsed) -> web.StreamResponse:
    shape, gen = parsed.shape, parsed.gen
    out = quality_http.output_for(vapp.state, gen.prompt_ids)
    updates = run_request(vapp.state, gen, stream=True)
    first = await anext(updates)  # raises EngineDead before any byte is sent
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    interval = max(1, int(vapp.cfg.args.get("stream_interval") or 1))
    sent, last = 0, first
    try:
        if shape.chat:
            await response.write(sse_event(shape.chunk(None, None, role=True)))
        async with aclosing(updates):
            req = first
            while True:
                last = req
                if vapp.dead:
                    await response.write(_dead_chunk())
                    break
                if chunk_due(req, sent, interval):
                    chunk = shape.chunk(out.catch_up(req.generated), _reason(req.finish_reason))
                    if parsed.continuous_usage:
                        chunk["usage"] = _usage(req.prompt_len, req.generated)
                    await response.write(sse_event(chunk))
                    sent = req.generated
                if req.finished:
                    break
                req = await anext(updates)
        if parsed.include_usage and not vapp.dead:
            await response.write(sse_event(shape.usage_chunk(_usage(last.prompt_len, last.generated))))
        await response.write(b"data: [DONE]\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        return response
    await response.write_eof()
    return response


# The stream's last lines and these two routes read like emulator/server.py's (a `duplicates`
# pair) and stay: the two servers speak different request and chunk shapes (SGLang's meta_info,
# vLLM's usage chunk), so what they share is aiohttp's own end of a stream.
async def completions(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=True)


# -- the app -----------------------------------------------------------------------------------
@web.middleware
async def not_found_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """FastAPI's 404 body, ``{"detail": "Not Found"}``."""
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return respond({"detail": "Not Found"}, status=404)
    except web.HTTPMethodNotAllowed:
        return respond({"detail": "Method Not Allowed"}, status=405)


def _auth(keys: list[str]) -> Callable[..., Awaitable[web.StreamResponse]]:
    """``--api-key`` guards only ``/v1`` (and ``/v2``, ``/inference``) paths (the flag's help)."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        guarded = request.path.startswith(("/v1", "/v2", "/inference"))
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if guarded and token not in keys:
            return respond({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return check


def dev_mode() -> bool:
    return os.environ.get(DEV_MODE_ENV, "0") not in ("", "0")


def routes(dev: bool) -> list[web.RouteDef]:
    table = [
        web.get("/health", health), web.get("/ping", health), web.post("/ping", health), web.get("/load", load),
        web.get("/version", version), web.get("/v1/models", models), web.get("/metrics", metrics),
        web.post("/v1/completions", completions), web.post("/v1/chat/completions", chat_completions),
    ]
    if dev:
        table += [web.get("/server_info", server_info), web.post("/reset_prefix_cache", reset_prefix_cache),
                  web.get("/is_sleeping", is_sleeping)]
    return table


def build_vllm_app(vapp: VllmApp) -> web.Application:
    keys = vapp.cfg.args.get("api_key") or []
    middlewares = [not_found_json] + ([_auth(list(keys))] if keys else [])
    app = web.Application(middlewares=middlewares, client_max_size=64 * 1024 * 1024)
    app[APP] = vapp
    app.add_routes(routes(dev_mode()))
    return app
