"""``python -m emulator --emulate-engine vllm --model M --host H --port P [vLLM flags] [--emulate-*]``.

Start-up follows ``vllm serve`` (V33 ``entrypoints/launchers/api_server/entry.py:164-201``,
``launchers/launcher.py:340-392``; V11 ``openai/api_server.py:1936-2080``):

1. the version/model line and ``non-default args: {...}``; the TCP socket is **bound but not
   listened on** ("bind the port before the engine is set up"), so a client's connect is
   refused until the engine is ready: there is no "503 while loading" phase;
2. the engine core: weights, memory profile, KV cache, CUDA graphs (lines in
   emulator/vllm_startup.py), spending ``--emulate-startup-s`` in all; a fatal error ends
   the process with vLLM's traceback and exit status 1;
3. ``Supported tasks``, ``Starting vLLM server on http://...``, the route list, then the
   socket listens and uvicorn's ``Started server process`` / ``Waiting for application
   startup.`` / ``Application startup complete.``.  (uvicorn logs startup-complete a
   moment before it listens; here the socket listens first, so a client that reacts to
   the line is never refused.)

Engine death (``--emulate-fault crash-after-requests=N`` / ``crash-after-s=T``): the engine
core logs ``EngineCore encountered a fatal error.``, the client logs its death line, requests
fail with HTTP 500, ``/health`` answers 503, and vLLM's watchdog (5 s, V33
``launchers/launcher.py:312-338``) stops the server unless ``VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1``;
the process then exits 0, as uvicorn returns normally on that path.  SIGTERM/SIGINT: uvicorn's
shutdown lines after the running requests finish, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from emulator.cold_start import cold_start_options
from emulator.config import ConfigError
from emulator.generation import ServerState
from emulator.scheduler import Scheduler
from emulator.startup import PHASES, cold_start_line
from emulator.step_loop import ColdStart, StepLoop
from emulator.tokens import TokenText, ensure_tokenizer
from emulator.vllm_config import VllmEmulatorConfig, resolve_vllm
from emulator.vllm_flags import MODEL_WARNING, VllmFlags, parse_vllm_flags
from emulator.vllm_metrics import VllmMetrics
from emulator.vllm_server import EngineDead, VllmApp, build_vllm_app, routes
from emulator.vllm_startup import (
    banner,
    die_like_vllm,
    graph_line,
    init_line,
    kv_lines,
    load_lines,
    log,
    serving_line,
    uvicorn,
    version_line,
)

WATCHDOG_S = 5.0  # VLLM_WATCHDOG_TIME_S (V33 launchers/launcher.py:317)
KEEP_ALIVE_ENV = "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH"


def bind_without_listen(host: str | None, port: int) -> socket.socket:
    """``create_server_socket``: SO_REUSEADDR (+ SO_REUSEPORT), bind, no listen."""
    family = socket.AF_INET6 if host and ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host or "0.0.0.0", port))  # noqa: S104  # vLLM's default: every interface
    return sock


def _non_default(flags: VllmFlags) -> dict[str, object]:
    return {k: flags.args[k] for k in sorted(flags.explicit)}


async def _phase(cfg: VllmEmulatorConfig, share: str) -> float:
    seconds = cfg.emulate.startup_s * PHASES[share]
    await asyncio.sleep(seconds)
    return seconds


async def start_engine(cfg: VllmEmulatorConfig) -> float:
    """The engine core's start-up, with its fatal exits; returns the emulated seconds it took."""
    fatal, faults = cfg.startup_fatal, cfg.emulate.faults
    if fatal in ("free-memory", "nccl", "host-oom"):  # worker/NCCL init, before any weight is read
        await asyncio.sleep(0.05)
        die_like_vllm(cfg, fatal)
    log(cfg, "load_start", f"Starting to load model {cfg.vllm.model_path}...", engine=True)
    loaded = await _phase(cfg, "weights")
    if fatal == "oom-weights":
        die_like_vllm(cfg, fatal)
    for key, line in load_lines(cfg, loaded):
        log(cfg, key, line, engine=True)
    profiled = await _phase(cfg, "kv")
    memory, *sizes = kv_lines(cfg)
    log(cfg, *memory, engine=True)  # logged by the profile, before the KV checks (V33 gpu_worker.py:772)
    if fatal in ("oom-kv", "kv-too-small", "watchdog"):
        die_like_vllm(cfg, fatal)
    for key, line in sizes:
        log(cfg, key, line, engine=True)
    captured = await _phase(cfg, "graphs")
    if fatal == "cuda-graph":
        die_like_vllm(cfg, fatal)
    if (graphs := graph_line(cfg, captured)) is not None:
        log(cfg, "graphs", graphs, engine=True)
    if "never-ready" in faults:
        await asyncio.Event().wait()  # the engine never reports ready: the port never listens
    warmed = await _phase(cfg, "warmup")
    if "crash-during-warmup" in faults:
        die_like_vllm(cfg, "crash-during-warmup")
    total = profiled + captured + warmed
    log(cfg, "init", init_line(cfg, total), engine=True)
    return loaded + total


class Lifecycle:
    """Engine death and shutdown, as the API server process sees them."""

    def __init__(self, cfg: VllmEmulatorConfig, state: ServerState) -> None:
        self.cfg, self.state = cfg, state
        self.stop = asyncio.Event()

    def engine_died(self, reason: str) -> None:
        """The engine core process dies: log it, fail every request, let the watchdog act."""
        if self.state.status == "Dead":
            raise EngineDead(reason)
        log(self.cfg, "engine_fatal", "EngineCore encountered a fatal error.\nTraceback (most recent call last):\n"
            f"RuntimeError: {reason}", engine=True, level="ERROR")
        old = self.cfg.vllm.version == "0.11.2"
        died = ("Engine core proc EngineCore_DP0 died unexpectedly, shutting down client." if old
                else "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup")
        log(self.cfg, "died", died, level="ERROR" if old else "WARNING")
        self.state.status = "Dead"
        self.state.step_loop.abort_all()
        if os.environ.get(KEEP_ALIVE_ENV, "0") in ("", "0"):
            asyncio.get_running_loop().call_later(WATCHDOG_S, self.stop.set)
        raise EngineDead(reason)

    def on_signal(self, signum: int) -> None:
        if "ignore-sigterm" in self.cfg.emulate.faults and signum == signal.SIGTERM:
            return
        if self.stop.is_set():
            raise SystemExit(1)
        self.state.status = "Draining" if self.state.status != "Dead" else "Dead"
        self.stop.set()


async def crash_after(life: Lifecycle, seconds: float) -> None:
    await asyncio.sleep(seconds)
    with contextlib.suppress(EngineDead):
        life.engine_died(f"emulated fault: crash after {seconds:g} s")


def _route_lines(cfg: VllmEmulatorConfig) -> None:
    log(cfg, "routes", "Available routes are:")
    for route in routes(dev=False):
        log(cfg, "route", f"Route: {route.path}, Methods: {route.method}")


async def serve(cfg: VllmEmulatorConfig, sock: socket.socket, tokens: TokenText, command: str,
                cold: ColdStart | None = None) -> int:
    await start_engine(cfg)
    step_loop = StepLoop(Scheduler(cfg.timing, cfg.scheduler_limits()), cfg.time_scale, cold)
    metrics = None if cfg.args.get("disable_log_stats") else VllmMetrics(cfg, step_loop)
    state = ServerState(cfg=cfg, step_loop=step_loop, tokens=tokens, metrics=None, launch_command=command,
                        on_crash=lambda reason: None, status="Up", ready_at=time.time())
    life = Lifecycle(cfg, state)
    state.on_crash = life.engine_died
    host, port = cfg.args.get("host"), int(cfg.args["port"])
    log(cfg, "tasks", "Supported tasks: ['generate']")
    log(cfg, "serving", serving_line(cfg, host, port))
    _route_lines(cfg)
    runner = web.AppRunner(build_vllm_app(VllmApp(state, metrics)), access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock).start()  # listen() happens here, not before
    uvicorn(cfg, f"Started server process [{os.getpid()}]")
    uvicorn(cfg, "Waiting for application startup.")
    uvicorn(cfg, "Application startup complete.")
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, life.on_signal, signum)
    tasks = [asyncio.create_task(step_loop.run())]
    if (after := cfg.emulate.faults.get("crash-after-s")) is not None:
        tasks.append(asyncio.create_task(crash_after(life, float(after))))
    await life.stop.wait()
    uvicorn(cfg, "Shutting down")
    await step_loop.wait_idle(float("inf"))
    for task in tasks:
        task.cancel()
    uvicorn(cfg, "Waiting for application shutdown.")
    uvicorn(cfg, "Application shutdown complete.")
    with contextlib.suppress(Exception):
        await runner.cleanup()
    uvicorn(cfg, f"Finished server process [{os.getpid()}]")
    return 0


def _tokenizer_dir(flags: VllmFlags) -> str | None:
    if flags.emulate.tokenizer_dir is not None:
        return str(flags.emulate.tokenizer_dir)
    given = flags.args.get("tokenizer")
    if given and os.path.isfile(os.path.join(given, "tokenizer.json")):
        return str(given)
    return None


def main(argv: Sequence[str]) -> int:
    cold, rest = cold_start_options(argv)  # the same emulated cold start as the SGLang personality
    flags = parse_vllm_flags(rest)  # exits 2 on an unknown or invalid flag
    banner()
    try:
        cfg = resolve_vllm(flags)
    except ConfigError as exc:
        print(f"Traceback (most recent call last):\n{exc}", file=sys.stderr, flush=True)
        return 1
    if flags.model_moved and cfg.vllm.version != "0.11.2":
        log(cfg, "model_flag", MODEL_WARNING, level="WARNING")
    log(cfg, "version", version_line(cfg))
    log(cfg, "args", f"non-default args: {_non_default(flags)}")
    directory = _tokenizer_dir(flags)
    if directory is None:
        print("vllm serve: error: the emulator needs --emulate-tokenizer-dir (or BENCHDECK_EMULATE_TOKENIZER_DIR), "
              "or a --tokenizer directory holding a tokenizer.json", file=sys.stderr)
        return 2
    host, port = cfg.args.get("host"), int(cfg.args["port"])
    try:
        sock = bind_without_listen(host, port)
    except OSError as exc:
        print(f"Traceback (most recent call last):\nOSError: [Errno {exc.errno}] {exc.strerror}", file=sys.stderr,
              flush=True)
        return 1
    if ensure_tokenizer(Path(directory)):
        print(f"[benchdeck emulator] built the local tokenizer in {directory}", file=sys.stderr, flush=True)
    command = shlex.join([sys.executable, "-m", "emulator", *argv])
    if cold is not None:
        print(cold_start_line(cold), file=sys.stderr, flush=True)
    return asyncio.run(serve(cfg, sock, TokenText(Path(directory)), command, cold))
