"""Prefill/decode disaggregation in the emulator (``--disaggregation-mode prefill|decode``).

What SGLang does, and what is emulated of it:

- The router (sglang-router / smg in ``--pd-disaggregation`` mode) sends every request to
  one prefill and one decode server at once, adding ``bootstrap_host``,
  ``bootstrap_port`` and ``bootstrap_room`` to the body.  Both servers refuse a request
  without them, as SGLang's disaggregated servers do.
- The **prefill** server computes the prompt (the first token) and hands the KV cache
  over; here it publishes the room on its bootstrap server (``--disaggregation-bootstrap-port``,
  8998 by default) once the emulated transfer time has passed.
- The **decode** server looks the room up at ``bootstrap_host:bootstrap_port`` (so wrong
  bootstrap fields fail, as they would for real), then decodes without recomputing the
  prompt: the transferred tokens count as already in its KV pool.

Transfer time = prompt tokens × KV bytes per token (this model, dtype and TP) ÷ the
backend's bandwidth below: a documented assumption, not a measurement.  ``fake`` (SGLang's
test backend) transfers nothing.  Everything about these servers stays labelled emulated.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

# Bytes per second of one KV transfer, per backend (assumptions, see the module text).
TRANSFER_BANDWIDTH = {"mooncake": 40e9, "nixl": 40e9, "mori": 40e9, "ascend": 20e9, "mooncake_tcp": 5e9,
                      "fake": float("inf")}
DEFAULT_BOOTSTRAP_PORT = 8998
# SGLang's decode side gives up on a room after SGLANG_DISAGGREGATION_WAITING_TIMEOUT (300 s).
WAITING_TIMEOUT_S = 300.0
POLL_S = 0.002


class MissingBootstrap(ValueError):
    pass


@dataclass(frozen=True)
class Bootstrap:
    host: str
    port: int
    room: int


def bootstrap_of(body: dict[str, Any]) -> Bootstrap:
    """The router's bootstrap fields; a disaggregated server cannot serve without them."""
    host, port, room = body.get("bootstrap_host"), body.get("bootstrap_port"), body.get("bootstrap_room")
    if not isinstance(host, str) or room is None:
        raise MissingBootstrap("bootstrap_host and bootstrap_room are required in disaggregation mode "
                               "(send requests through the router in --pd-disaggregation mode)")
    try:
        return Bootstrap(host, int(port) if port is not None else DEFAULT_BOOTSTRAP_PORT, int(room))
    except (TypeError, ValueError) as exc:
        raise MissingBootstrap(f"invalid bootstrap fields: {exc}") from exc


def transfer_seconds(prompt_tokens: int, kv_bytes_per_token: int, backend: str) -> float:
    bandwidth = TRANSFER_BANDWIDTH.get(backend, TRANSFER_BANDWIDTH["mooncake"])
    return 0.0 if bandwidth == float("inf") else prompt_tokens * kv_bytes_per_token / bandwidth


@dataclass
class KvRooms:
    """The prefill side's finished transfers, by room (what its bootstrap server answers)."""

    ready: dict[int, tuple[int, float]] = field(default_factory=dict)  # room -> (tokens, ready at, epoch s)
    keep_s: float = 600.0

    def publish(self, room: int, tokens: int, delay_s: float) -> None:
        now = time.time()
        self.ready = {r: v for r, v in self.ready.items() if v[1] > now - self.keep_s}
        self.ready[room] = (tokens, now + delay_s)

    def lookup(self, room: int) -> int | None:
        entry = self.ready.get(room)
        if entry is None or entry[1] > time.time():
            return None
        return entry[0]


ROOMS: web.AppKey[KvRooms] = web.AppKey("rooms", KvRooms)


async def _room(request: web.Request) -> web.Response:
    try:
        room = int(request.match_info["room"])
    except ValueError:
        return web.Response(status=400, text="room must be an integer\n")
    tokens = request.app[ROOMS].lookup(room)
    if tokens is None:
        return web.Response(status=404, text="not ready\n")
    return web.json_response({"room": room, "tokens": tokens})


async def _health(_request: web.Request) -> web.Response:
    return web.Response(text="OK")


def bootstrap_app(rooms: KvRooms) -> web.Application:
    app = web.Application()
    app[ROOMS] = rooms
    app.add_routes([web.get("/kv/{room}", _room), web.get("/health", _health)])
    return app


async def wait_for_kv(boot: Bootstrap, timeout_s: float = WAITING_TIMEOUT_S) -> int:
    """Tokens transferred for ``boot.room``, once the prefill side has published them."""
    url = f"http://{boot.host}:{boot.port}/kv/{boot.room}"
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return int((await response.json())["tokens"])
            except aiohttp.ClientError:
                pass  # the prefill server may still be binding its bootstrap port
            await asyncio.sleep(POLL_S)
    raise TimeoutError(f"KV transfer for room {boot.room} did not arrive from {boot.host}:{boot.port}")
