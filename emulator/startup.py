"""SGLang's start-up log lines and fatal exits, reproduced by the emulator.

The lines follow SGLang 0.5.23's format (``[YYYY-mm-dd HH:MM:SS TP0] message`` from the
scheduler, without ``TP0`` from the launcher) and order, so the runner's log parser and
failure classifier can be tested on them:

1. ``Load weight begin. avail mem=X GB`` / ``Load weight end. elapsed=…, mem usage=… GB.``
2. ``KV Cache is allocated. dtype: …, #tokens: N, K size: …`` / ``Memory pool end. …``
3. ``Capture target prefill CUDA graph begin/end …`` (unless it is off), then
   ``Capture target decode CUDA graph begin/end …``
4. ``max_total_num_tokens=N, chunked_prefill_size=…, max_prefill_tokens=…,
   max_running_requests=…, context_len=…, available_gpu_mem=X GB``
5. (HTTP up: ``/v1/models`` answers, ``/health`` is 503) warmup, then
   ``The server is fired up and ready to roll!``

A fatal error at start-up goes the way it goes in SGLang: the scheduler logs ``Scheduler
hit an exception: <traceback>``, the launcher logs ``Received sigquit from a child
process…`` and kills its own process tree with SIGKILL, so the exit status is −9 (137 in a
shell).  A scheduler killed by the host's OOM killer is reported by the launcher as a
``RuntimeError`` instead, exit status 1.  The very first line of output says that this is
the emulator.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import NoReturn

from emulator.config import EmulatorConfig
from emulator.scheduler import Scheduler, Step
from emulator.step_loop import ColdStart

BANNER = ("[benchdeck emulator] this is NOT SGLang: an emulated engine (emulator) that speaks "
          "SGLang's HTTP protocol; its timings come from a model, not a GPU")
# Share of the start-up time spent in each phase (weights, KV pool, CUDA graphs, warmup).
PHASES = {"weights": 0.40, "kv": 0.05, "graphs": 0.25, "warmup": 0.30}
# Share of the graph phase (time and reserved memory) that goes to the prefill graph.
PREFILL_GRAPH_SHARE = 0.25


def log(message: str, *, scheduler: bool = True) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}{' TP0' if scheduler else ''}] {message}", file=sys.stderr, flush=True)


def banner(cfg_line: str) -> None:
    print(BANNER, file=sys.stderr, flush=True)
    log(cfg_line, scheduler=False)


def _traceback(exc_type: str, message: str, where: str) -> str:
    return (
        "Traceback (most recent call last):\n"
        f'  File "<emulated sglang>/{where}", line 1, in <module>\n'
        f"{exc_type}: {message}"
    )


def fatal_message(cfg: EmulatorConfig, kind: str) -> tuple[str, str, str]:
    """(exception type, message, source file) of a fatal start-up error, as SGLang words it."""
    m = cfg.memory
    if kind == "oom-weights":
        floor = m.min_mem_fraction_static
        return ("ValueError",
                f"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static="
                f"{m.mem_fraction_static}. Raise --mem-fraction-static above {int(floor * 1000 + 0.999) / 1000:.3f} "
                f"(minimum viable = 1 - available/pre = {floor:.4f}). If using speculative decoding, draft "
                f"weights are now counted.", "mem_cache/kv_cache_configurator.py")
    if kind == "oom-kv":
        return ("RuntimeError", "Not enough memory. Please try to increase --mem-fraction-static. "
                f"Current value: mem_fraction_static={m.mem_fraction_static}", "model_executor/pool_configurator.py")
    if kind == "cuda-graph":
        return ("Exception",
                "Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
                "Possible solutions:\n"
                "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
                "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
                "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
                "(Not recommended. Huge performance loss)\n"
                "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
                "model_executor/runner/decode_cuda_graph_runner.py")
    if kind == "nccl":
        return ("torch.distributed.DistBackendError",
                "NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled system error "
                "(run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3\n"
                "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
                "device error.", "distributed/parallel_state.py")
    if kind == "watchdog":
        return ("RuntimeError", "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
                "utils/watchdog.py")
    raise ValueError(f"unknown fatal kind {kind}")


def die_like_sglang(cfg: EmulatorConfig, kind: str) -> NoReturn:
    """Print the fatal lines of ``kind`` and exit the way SGLang's launcher does."""
    if kind == "host-oom":
        log("Traceback (most recent call last):\n  File \"<emulated sglang>/entrypoints/engine.py\", line 1\n"
            "RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 "
            "(SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.",
            scheduler=False)
        raise SystemExit(1)
    exc_type, message, where = fatal_message(cfg, kind)
    log(f"Scheduler hit an exception: {_traceback(exc_type, message, where)}")
    log("Received sigquit from a child process. It usually means the child failed.", scheduler=False)
    kill_self()


def kill_self() -> NoReturn:
    """``kill_process_tree(os.getpid())``: SGLang's launcher SIGKILLs itself."""
    sys.stderr.flush()
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    raise SystemExit(137)  # not reached


def weight_lines(cfg: EmulatorConfig, elapsed: float) -> tuple[str, str]:
    m = cfg.memory
    begin = f"Load weight begin. avail mem={m.avail_before_load_gb:.2f} GB"
    end = (f"Load weight end. elapsed={elapsed:.2f} s, type={(cfg.model.architectures or ('Model',))[0]}, "
           + ("quant=fp8, " if cfg.timing.weight_bytes < 2 else "")
           + f"avail mem={m.avail_after_weights_gb:.2f} GB, mem usage={m.weight_gb:.2f} GB.")
    return begin, end


def kv_lines(cfg: EmulatorConfig) -> tuple[str, str]:
    m = cfg.memory
    dtype = "torch.float8_e4m3fn" if m.kv_cell_bytes < 2 * cfg.model.num_layers * cfg.model.head_dim * 2 \
        else "torch.bfloat16"
    half = m.kv_gb / 2
    return (f"KV Cache is allocated. dtype: {dtype}, #tokens: {m.max_total_num_tokens}, "
            f"K size: {half:.2f} GB, V size: {half:.2f} GB",
            f"Memory pool end. avail mem={m.avail_after_pool_gb:.2f} GB")


def graph_lines(cfg: EmulatorConfig, elapsed: float) -> tuple[str, str] | None:
    if cfg.cuda_graph_max_bs is None:
        return None
    avail = cfg.memory.avail_after_pool_gb - graph_memory(cfg)["prefill"]
    return (f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
            f"avail mem={avail:.2f} GB",
            f"Capture target decode CUDA graph end. bs={list(cfg.cuda_graph_bs)}, elapsed={elapsed:.2f} s, "
            f"mem usage={graph_memory(cfg)['decode']:.2f} GB, avail mem={available_gb(cfg):.2f} GB.")


def prefill_graph_tokens(cfg: EmulatorConfig) -> list[int]:
    """The token buckets of the prefill (breakable) CUDA graph, empty when it is off.

    0.5.23 captures it by default on CUDA; ``--disable-cuda-graph``, ``--disable-prefill-cuda-graph``
    and pipeline parallelism turn it off unless ``--cuda-graph-backend-prefill`` names a backend.
    Its largest bucket defaults to ``chunked_prefill_size`` (capped by ``--max-total-tokens``)."""
    args = cfg.args
    backend = args.get("cuda_graph_backend_prefill")
    off = args.get("disable_cuda_graph") or args.get("disable_prefill_cuda_graph") or cfg.pp_size > 1
    if backend == "disabled" or (backend is None and off):
        return []
    max_tokens = int(args.get("cuda_graph_max_bs_prefill") or cfg.chunked_prefill_size)
    if args.get("max_total_tokens"):
        max_tokens = min(max_tokens, int(args["max_total_tokens"]))
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_tokens + 1, 512)]
    return [size for size in sizes if size <= max_tokens]


def graph_memory(cfg: EmulatorConfig) -> dict[str, float]:
    """GB captured per graph phase: an assumption, the one graph reserve of emulator/sizing.py
    split between the two captures, PREFILL_GRAPH_SHARE of it to the prefill graph."""
    reserve = cfg.memory.graph_reserve_gb
    prefill = reserve * PREFILL_GRAPH_SHARE if prefill_graph_tokens(cfg) else 0.0
    return {"prefill": prefill, "decode": reserve - prefill if cfg.cuda_graph_max_bs is not None else 0.0}


def prefill_graph_lines(cfg: EmulatorConfig, elapsed: float) -> tuple[str, str] | None:
    """The prefill graph, captured before the decode graph (``capture_cuda_graphs``)."""
    tokens = prefill_graph_tokens(cfg)
    if not tokens:
        return None
    before, used = cfg.memory.avail_after_pool_gb, graph_memory(cfg)["prefill"]
    backend = cfg.args.get("cuda_graph_backend_prefill") or "breakable"
    return (f"Capture target prefill CUDA graph begin. backend={backend}, num_tokens={tokens}, "
            f"avail mem={before:.2f} GB",
            f"Capture target prefill CUDA graph end. elapsed={elapsed:.2f} s, "
            f"mem usage={used:.2f} GB, avail mem={before - used:.2f} GB.")


def available_gb(cfg: EmulatorConfig) -> float:
    return cfg.memory.avail_after_pool_gb - cfg.memory.graph_reserve_gb


def summary_line(cfg: EmulatorConfig) -> str:
    return (f"max_total_num_tokens={cfg.max_total_num_tokens}, chunked_prefill_size={cfg.chunked_prefill_size}, "
            f"max_prefill_tokens={cfg.max_prefill_tokens}, max_running_requests={cfg.max_running_requests}, "
            f"context_len={cfg.context_len}, available_gpu_mem={available_gb(cfg):.2f} GB")


class BatchLog:
    """SGLang's per-batch scheduler lines: every prefill batch, and every ``--decode-log-interval``
    decode batches (default 40) with the generation throughput since the previous one."""

    def __init__(self, cfg: EmulatorConfig, scheduler: Scheduler) -> None:
        self.cfg, self.scheduler = cfg, scheduler
        self.interval = int(cfg.args.get("decode_log_interval") or 40)
        self.decodes = 0
        self.mark = (time.monotonic(), 0)

    def _usage(self) -> str:
        capacity = self.cfg.max_total_num_tokens
        return f"{self.scheduler.kv_used() / capacity if capacity else 0.0:.2f}"

    def __call__(self, step: Step, now: float) -> None:
        sched = self.scheduler
        if step.kind == "prefill":
            new = [r for r, n in step.chunks if r.prefilled - n == r.cached]  # first chunk of the request
            log(f"Prefill batch, #new-seq: {len(new)}, #new-token: {sum(n for _, n in step.chunks)}, "
                f"#cached-token: {sum(r.cached for r in new)}, token usage: {self._usage()}, "
                f"#running-req: {len(sched.running) - len(step.chunks)}, #queue-req: {len(sched.waiting)}, "
                f"#pending-token: 0, ")
            return
        self.decodes += 1
        if self.decodes % self.interval:
            return
        t0, n0 = self.mark
        wall, tokens = time.monotonic(), sched.counters.generation_tokens
        self.mark = (wall, tokens)
        graph = not self.cfg.timing.eager(len(step.decoders))
        log(f"Decode batch, #running-req: {len(step.decoders)}, #token: {sched.kv_used()}, "
            f"token usage: {self._usage()}, cuda graph: {graph}, "
            f"gen throughput (token/s): {(tokens - n0) / max(wall - t0, 1e-9):.2f}, #queue-req: {len(sched.waiting)}")


# -- emulated cold start -------------------------------------------------------------------------


def cold_start_line(cold: ColdStart) -> str:
    """Logged at start-up when ``--emulate-cold-start-s`` is given: the slowdown is emulated."""
    return (f"[benchdeck emulator] emulated cold start: the first {cold.seconds:g} s of forward steps run "
            f"{cold.factor:g}x slower (a fresh server's lazy kernel compilation and first-use warm-up)")


class ColdStartLog:
    """A step hook that logs once, when the emulated cold phase is over."""

    def __init__(self, cold: ColdStart) -> None:
        self.cold = cold
        self.logged = False

    def __call__(self, step: Step, now: float) -> None:
        if self.logged or not self.cold.over:
            return
        self.logged = True
        log(f"[benchdeck emulator] emulated cold start over: {self.cold.slowed_steps} forward steps ran "
            f"{self.cold.factor:g}x slower in {self.cold.seconds:g} s", scheduler=False)
