"""``python -m emulator --model-path M --host H --port P [SGLang flags] [--emulate-* options]``.

Start-up goes through SGLang's phases in order (see :mod:`emulator.startup`),
spending ``--emulate-startup-s`` seconds in all, then serves until SIGTERM/SIGINT.  On the
first signal it logs SGLang's ``Draining requests`` line, refuses new requests, waits for
the running ones (with no time limit, as SGLang does) and exits 0; a second signal exits
at once.  Exit statuses: 0 after a drain, 1 for a configuration SGLang refuses (unknown
model, too few GPUs) or a port in use, 2 for an unknown or invalid flag (argparse), −9
(SIGKILL of itself) for a fatal start-up error or an injected crash, as SGLang's launcher.

Emulated cold start (default off), read here before the SGLang flags are parsed:

* ``--emulate-cold-start-s S`` (or ``BENCHDECK_EMULATE_COLD_START_S``): the first ``S``
  wall seconds of forward steps after launch (idle time not counted) run slower, as a
  fresh SGLang server's first batches do while kernels compile lazily (Triton/JIT) and
  graphs and caches warm up on first use.  A sweep whose first point runs in that window
  measures a cold first point (tests/fixtures/cold_first_point/ is one).
* ``--emulate-cold-start-factor F`` (or ``BENCHDECK_EMULATE_COLD_START_FACTOR``), F ≥ 1:
  how much slower, default :data:`emulator.step_loop.DEFAULT_COLD_FACTOR`.

Both stay on the command line the server reports (``launch_command`` in ``/server_info``),
so a record measured against a cold emulator says so; the log says when the cold phase
starts and ends.  The flag wins over the environment variable.
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

from emulator import disagg, startup
from emulator.cold_start import cold_start_options, take_option, usage_error
from emulator.config import ConfigError, EmulatorConfig, resolve
from emulator.flags import PROG, ParsedFlags, parse_flags
from emulator.generation import ServerState
from emulator.metrics import Metrics
from emulator.predict import steady_state
from emulator.scheduler import Scheduler
from emulator.server import build_app
from emulator.step_loop import ColdStart, StepLoop
from emulator.tokens import TokenText, ensure_tokenizer

PROCESS_START = time.time()  # /server_info's startup_time counts from here, as SGLang's does
# Aggregate token rate that bench_serving and this server can stream together on a 2-core
# host without the CPU bending the curve (measured by tests/test_emulator_bench.py, which
# reports the step loop's lag beside each figure).
CPU_SAFE_TOK_S = 2500.0


def port_available(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def tokenizer_dir(flags: ParsedFlags) -> Path:
    """The tokenizer is an argument, never a guess: the emulator reads no benchdeck setting."""
    if flags.emulate.tokenizer_dir is not None:
        return flags.emulate.tokenizer_dir
    given = flags.args.get("tokenizer_path")
    if given and (Path(given) / "tokenizer.json").is_file():
        return Path(given)
    print(f"{PROG}: error: the emulator needs --emulate-tokenizer-dir (or BENCHDECK_EMULATE_TOKENIZER_DIR), "
          "or a --tokenizer-path directory holding a tokenizer.json", file=sys.stderr)
    raise SystemExit(2)


def _cpu_warning(cfg: EmulatorConfig) -> None:
    batch = min(cfg.max_running_requests, 256)
    peak = steady_state(1024, 1024, batch, cfg)["output_throughput"]
    if peak > CPU_SAFE_TOK_S:
        needed = peak / CPU_SAFE_TOK_S * cfg.time_scale
        startup.log(f"[benchdeck emulator] WARNING: at concurrency {batch} this configuration emulates about "
                    f"{peak:.0f} output tok/s, more than the ~{CPU_SAFE_TOK_S:.0f} tok/s this host can stream "
                    f"reliably; pass --emulate-time-scale {needed:.1f} or more to keep the CPU out of the "
                    "measurement", scheduler=False)


async def _phase(cfg: EmulatorConfig, share: str) -> float:
    seconds = cfg.emulate.startup_s * startup.PHASES[share]
    await asyncio.sleep(seconds)
    return seconds


async def load_model(cfg: EmulatorConfig) -> None:
    """Weights, KV pool and CUDA graphs: the scheduler's start-up, with its fatal exits."""
    fatal = cfg.startup_fatal
    begin, _ = startup.weight_lines(cfg, 0.0)
    startup.log(begin)
    elapsed = await _phase(cfg, "weights")
    startup.log(startup.weight_lines(cfg, elapsed)[1])
    if fatal in ("oom-weights", "host-oom", "oom-kv"):
        startup.die_like_sglang(cfg, fatal)
    for line in startup.kv_lines(cfg):
        startup.log(line)
    await _phase(cfg, "kv")
    graphs_s = cfg.emulate.startup_s * startup.PHASES["graphs"]
    for line in startup.prefill_graph_lines(cfg, graphs_s * startup.PREFILL_GRAPH_SHARE) or ():
        startup.log(line)  # SGLang captures the prefill graph first
    graph = startup.graph_lines(cfg, graphs_s * (1 - startup.PREFILL_GRAPH_SHARE))
    if graph is not None:
        startup.log(graph[0])
    if fatal == "cuda-graph":
        startup.die_like_sglang(cfg, fatal)
    await _phase(cfg, "graphs")
    if graph is not None:
        startup.log(graph[1])
    if fatal is not None:  # nccl, watchdog
        startup.die_like_sglang(cfg, fatal)
    startup.log(startup.summary_line(cfg))


async def warm_up(state: ServerState) -> None:
    faults = state.cfg.emulate.faults
    if "never-ready" in faults:
        return  # /v1/models answers, /health stays 503 for ever
    if "crash-during-warmup" in faults:
        await asyncio.sleep(state.cfg.emulate.startup_s * startup.PHASES["warmup"] / 2)
        startup.log("Initialization failed. warmup error: Traceback (most recent call last):\n"
                    "RuntimeError: emulated fault: crash during warmup", scheduler=False)
        startup.kill_self()
    if not state.cfg.args.get("skip_server_warmup"):
        await _phase(state.cfg, "warmup")
    state.status = "Up"
    state.ready_at = time.time()
    startup.log("The server is fired up and ready to roll!", scheduler=False)
    if (after := faults.get("crash-after-s")) is not None:
        await asyncio.sleep(float(after))
        crash(f"emulated fault: crash after {after} s")


def crash(reason: str) -> None:
    startup.log(f"Scheduler hit an exception: Traceback (most recent call last):\nRuntimeError: {reason}")
    startup.log("Received sigquit from a child process. It usually means the child failed.", scheduler=False)
    startup.kill_self()


def _install_signals(state: ServerState, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    ignore = "ignore-sigterm" in state.cfg.emulate.faults

    def on_signal(signum: int) -> None:
        if ignore and signum == signal.SIGTERM:
            startup.log("SIGTERM received and ignored (emulated fault: ignore-sigterm)", scheduler=False)
            return
        if stop.is_set():
            startup.log("Second signal received: exiting without draining.", scheduler=False)
            raise SystemExit(1)
        startup.log(f"SIGTERM received. signum={signum} frame=None. Draining requests and shutting down...",
                    scheduler=False)
        state.status = "Draining"
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)


async def serve(cfg: EmulatorConfig, tokens: TokenText, launch_command: str, cold: ColdStart | None = None) -> int:
    await load_model(cfg)
    step_loop = StepLoop(Scheduler(cfg.timing, cfg.scheduler_limits()), cfg.time_scale, cold)
    step_loop.step_hooks.append(startup.BatchLog(cfg, step_loop.scheduler))
    if cold is not None:
        startup.log(startup.cold_start_line(cold), scheduler=False)
        step_loop.step_hooks.append(startup.ColdStartLog(cold))
    metrics = Metrics(cfg, step_loop) if cfg.args.get("enable_metrics") else None
    state = ServerState(cfg=cfg, step_loop=step_loop, tokens=tokens, metrics=metrics, launch_command=launch_command,
                        on_crash=crash, started_at=PROCESS_START)
    runner = web.AppRunner(build_app(state), access_log=None, handle_signals=False)
    await runner.setup()
    host, port = cfg.args["host"], int(cfg.args["port"])
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        startup.log(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address ('{host}', {port}): "
                    f"{exc.strerror}", scheduler=False)
        return 1
    startup.log(f"Emulated HTTP server listening on http://{host}:{port}", scheduler=False)
    if state.disaggregation_mode == "prefill":
        boot_port = int(cfg.args.get("disaggregation_bootstrap_port") or disagg.DEFAULT_BOOTSTRAP_PORT)
        boot_runner = web.AppRunner(disagg.bootstrap_app(state.rooms), access_log=None, handle_signals=False)
        await boot_runner.setup()
        try:
            await web.TCPSite(boot_runner, host, boot_port).start()
        except OSError as exc:
            startup.log(f"ERROR: bootstrap server cannot bind {host}:{boot_port}: {exc.strerror}", scheduler=False)
            return 1
        startup.log(f"Emulated PD bootstrap server listening on {host}:{boot_port}", scheduler=False)
    stop = asyncio.Event()
    _install_signals(state, stop)
    tasks = [asyncio.create_task(step_loop.run()), asyncio.create_task(warm_up(state))]
    await stop.wait()
    await step_loop.wait_idle(float("inf"))
    for task in tasks:
        task.cancel()
    with contextlib.suppress(Exception):
        await runner.cleanup()
    startup.log("Shutdown complete.", scheduler=False)
    return 0


ENGINES = ("sglang", "vllm")


def take_engine(argv: list[str]) -> str:
    """``--emulate-engine sglang|vllm`` (or ``BENCHDECK_EMULATE_ENGINE``), removed from ``argv``
    for the SGLang parser; the vLLM parser reads it from the whole command line."""
    engine = take_option(list(argv), "--emulate-engine") or os.environ.get("BENCHDECK_EMULATE_ENGINE") or "sglang"
    if engine not in ENGINES:
        usage_error(f"argument --emulate-engine: invalid choice: {engine!r} (choose from {', '.join(ENGINES)})")
    return engine


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if take_engine(argv) == "vllm":
        from emulator.vllm_launch import main as vllm_main  # the SGLang path never imports it

        return vllm_main(argv)
    take_option(argv, "--emulate-engine")  # "sglang": today's emulator
    cold, sglang_argv = cold_start_options(argv)  # exits 2 on an invalid value
    flags = parse_flags(sglang_argv)  # exits 2 on an unknown or invalid flag
    explicit = ", ".join(f"{k}={flags.args[k]!r}" for k in sorted(flags.explicit))
    startup.banner(f"server_args=ServerArgs({explicit}) (emulated SGLang {flags.schema_version})")
    try:
        cfg = resolve(flags)
    except ConfigError as exc:
        startup.log(f"Traceback (most recent call last):\n{exc}", scheduler=False)
        return 1
    host, port = cfg.args["host"], int(cfg.args["port"])
    if not port_available(host, port):
        startup.log(f"ERROR:    [Errno 98] error while attempting to bind on address ('{host}', {port}): "
                    "address already in use", scheduler=False)
        startup.log(f"ValueError: port at {port} is not available", scheduler=False)
        return 1
    directory = tokenizer_dir(flags)
    if ensure_tokenizer(directory):
        startup.log(f"[benchdeck emulator] built the local tokenizer in {directory}", scheduler=False)
    if cfg.max_running_requests > 0:
        _cpu_warning(cfg)
    command = shlex.join([sys.executable, "-m", "emulator", *argv])
    return asyncio.run(serve(cfg, TokenText(directory), command, cold))
