"""vLLM's start-up log lines and fatal exits, in the emulated version's wording.

Format (V33 ``logger.py:28-33``; V11 ``logger.py:26-30`` plus the ``(APIServer pid=N) ``
prefix its stdout wrapper adds, V11 ``utils/system_utils.py:143-176``)::

    (APIServer pid=N) INFO 12-02 00:30:00 [entry.py:139] Starting vLLM server on http://...
    (EngineCore pid=N) INFO 12-02 00:30:00 [gpu_worker.py:772] Available KV cache memory: ...

uvicorn's own lines keep uvicorn's default format (``INFO:     Application startup
complete.``), which vLLM leaves alone (V33 ``launchers/utils/server_utils.py:32-69``).  The
``[file:line]`` of each line is the real call site.  Both "processes" are this one process
here, so both show its pid.  The very first line of output says that this is the emulator.

A fatal start-up error goes vLLM's way: the engine core logs ``EngineCore failed to start.``
with the traceback (V33 ``v1/engine/core.py:1582-1588``), the API server raises
``RuntimeError: Engine core initialization failed. See root cause above. Failed core
proc(s): {'EngineCore': 1}`` (V33 ``v1/engine/utils.py:1473-1482``) and the process ends on
the uncaught exception, exit status 1.  The port never answered (it was bound, not listening).
"""

from __future__ import annotations

import os
import sys
import time
from typing import NoReturn

from emulator.vllm_config import VllmEmulatorConfig

BANNER = ("[benchdeck emulator] this is NOT vLLM: an emulated engine (emulator) that speaks "
          "vLLM's HTTP protocol; its timings come from a model, not a GPU")
OLD = "0.11.2"  # the older shipped version: its wording differs where noted

# (0.33.0 call site, 0.11.2 call site) of each line.
SITES = {
    "version": ("startup.py:39", "api_server.py:1977"),
    "args": ("startup.py:96", "utils.py:253"),
    "model_flag": ("argparse_utils.py:330", "argparse_utils.py:330"),
    "load_start": ("gpu_model_runner.py:4978", "gpu_model_runner.py:3260"),
    "load_weights": ("default_loader.py:506", "default_loader.py:315"),
    "load_done": ("gpu_model_runner.py:5088", "gpu_model_runner.py:3339"),
    "kv_memory": ("gpu_worker.py:772", "gpu_worker.py:360"),
    "kv_size": ("kv_cache_utils.py:1148", "kv_cache_utils.py:1229"),
    "concurrency": ("kv_cache_utils.py:1148", "kv_cache_utils.py:1234"),
    "graphs": ("gpu_model_runner.py:6516", "gpu_model_runner.py:4268"),
    "init": ("core.py:394", "core.py:251"),
    "tasks": ("entry.py:135", "api_server.py:1725"),
    "serving": ("entry.py:139", "api_server.py:2052"),
    "routes": ("launcher.py:188", "launcher.py:38"),
    "route": ("launcher.py:197", "launcher.py:46"),
    "engine_failed": ("core.py:1584", "core.py:842"),
    "engine_fatal": ("core.py:1586", "core.py:844"),
    "load_oom": ("gpu_model_runner.py:5086", "gpu_model_runner.py:5086"),  # 0.11.2 logs nothing here
    "died": ("core_client.py:839", "core_client.py:599"),
}


def _site(cfg: VllmEmulatorConfig, key: str) -> str:
    new, old = SITES[key]
    return old if cfg.vllm.version == OLD else new


def _process(cfg: VllmEmulatorConfig, engine: bool) -> str:
    """The log prefix's process name (0.11.2 names the engine process ``EngineCore_DP0``,
    V11 ``v1/engine/utils.py:123``)."""
    if not engine:
        return "APIServer"
    return "EngineCore_DP0" if cfg.vllm.version == OLD else "EngineCore"


def log(cfg: VllmEmulatorConfig, key: str, message: str, *, engine: bool = False, level: str = "INFO") -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"({_process(cfg, engine)} pid={os.getpid()}) {level} {stamp} [{_site(cfg, key)}] {message}",
          file=sys.stderr, flush=True)


def uvicorn(cfg: VllmEmulatorConfig, message: str) -> None:
    """uvicorn's default format; 0.11.2's stdout wrapper prefixes it too."""
    prefix = f"(APIServer pid={os.getpid()}) " if cfg.vllm.version == OLD else ""
    print(f"{prefix}INFO:     {message}", file=sys.stderr, flush=True)


def banner() -> None:
    print(BANNER, file=sys.stderr, flush=True)


def version_line(cfg: VllmEmulatorConfig) -> str:
    """V33 ``entrypoints/common/startup.py:16-39`` (the plain form, as with ``VLLM_DISABLE_LOG_LOGO``);
    V11 ``openai/api_server.py:1977``."""
    if cfg.vllm.version == OLD:
        return f"vLLM API server version {cfg.vllm.version}"
    return f"vLLM server version {cfg.vllm.version}, serving model {cfg.vllm.model_path}"


def gib(value: float, cfg: VllmEmulatorConfig, old_format: str) -> str:
    """0.33.0 prints ``format_gib`` (``round(b / GiB, 2)``, V33 ``utils/mem_utils.py:30-31``)."""
    return old_format % value if cfg.vllm.version == OLD else str(round(value, 2))


def load_lines(cfg: VllmEmulatorConfig, elapsed: float) -> list[tuple[str, str]]:
    v = cfg.vllm
    return [("load_weights", f"Loading weights took {elapsed * 0.9:.2f} seconds"),
            ("load_done", f"Model loading took {gib(v.weight_gib, cfg, '%.4f')} GiB memory and {elapsed:.6f} seconds")]


def kv_lines(cfg: VllmEmulatorConfig) -> list[tuple[str, str]]:
    v = cfg.vllm
    lines = [("kv_memory", f"Available KV cache memory: {gib(v.kv_available_gib, cfg, '%.2f')} GiB")]
    size, length = f"{v.kv_tokens:,}", f"{v.max_model_len:,}"
    if cfg.vllm.version == OLD:  # two lines (V11 kv_cache_utils.py:1229, 1234-1238)
        lines += [("kv_size", f"GPU KV cache size: {size} tokens"),
                  ("concurrency", f"Maximum concurrency for {length} tokens per request: {v.max_concurrency:.2f}x")]
    else:  # one line; num_tokens = int(max_concurrency × max_model_len) (V33 kv_cache_utils.py:1120-1155)
        tokens = f"{int(v.max_concurrency * v.max_model_len):,}"
        lines.append(("kv_size", f"GPU KV cache size: {tokens} tokens, Maximum concurrency for {length} tokens "
                                 f"per request: {v.max_concurrency:.2f}x"))
    return lines


def graph_line(cfg: VllmEmulatorConfig, elapsed: float) -> str | None:
    if not cfg.vllm.capture_sizes:
        return None  # --enforce-eager: nothing is captured
    return f"Graph capturing finished in {elapsed:.0f} secs, took {cfg.vllm.graph_gib:.2f} GiB"


def init_line(cfg: VllmEmulatorConfig, elapsed: float) -> str:
    unit = "seconds" if cfg.vllm.version == OLD else "s"
    return f"init engine (profile, create kv cache, warmup model) took {elapsed:.2f} {unit}"


def serving_line(cfg: VllmEmulatorConfig, host: str | None, port: int) -> str:
    """The address as vLLM builds it: ``http://{host or 0.0.0.0}:{port}``, IPv6 bracketed
    (V33 ``launchers/launcher.py:385-391``, V11 ``openai/api_server.py:2007-2013``)."""
    shown = host or "0.0.0.0"  # noqa: S104  # vLLM's wording for "every interface"
    address = f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"
    if cfg.vllm.version == OLD:
        return f"Starting vLLM API server 0 on {address}"
    return f"Starting vLLM server on {address}"


# -- fatal exits -------------------------------------------------------------------------------


def _gb(value: float) -> str:
    return f"{value:.2f}"


def fatal_exception(cfg: VllmEmulatorConfig, kind: str) -> tuple[str, str]:
    """(exception type, message) the engine core dies with, in the version's wording."""
    v = cfg.vllm
    if kind == "free-memory":  # V33 v1/worker/utils.py:761-770, V11 gpu_worker.py:245-255
        device = "" if v.version == OLD else " cuda:0"
        return ("ValueError", f"Free memory on device{device} ({_gb(v.free_at_start_gib)}/{_gb(v.total_gib)} GiB) on "
                f"startup is less than desired GPU memory utilization ({v.gpu_memory_utilization}, "
                f"{_gb(v.requested_gib)} GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
                "processes.")
    if kind in ("oom-weights", "cuda-graph"):
        need = v.weight_gib if kind == "oom-weights" else max(v.graph_gib, 2.0)
        return ("torch.OutOfMemoryError", f"CUDA out of memory. Tried to allocate {need:.2f} GiB. GPU 0 has a total "
                f"capacity of {v.total_gib:.2f} GiB of which 0 bytes is free. (emulated)")
    if kind == "oom-kv":  # V33 v1/core/kv_cache_planning.py:56-64, V11 kv_cache_utils.py:686-690
        tail = ("(this flag also controls CPU memory reservation on the CPU backend, despite its name). See "
                "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
        return ("ValueError", "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine" + ("." if v.version == OLD else " " + tail))
    if kind == "kv-too-small":  # V33 kv_cache_planning.py:66-87, V11 kv_cache_utils.py:694-715
        needed = v.max_model_len * cfg.memory.kv_cell_bytes / 2**30
        models = "models's" if v.version == OLD else "model's"
        return ("ValueError", f"To serve at least one request with the {models} max seq len ({v.max_model_len}), "
                f"({needed:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
                f"({max(v.kv_available_gib, 0):.2f} GiB). Based on the available memory, the estimated maximum model "
                f"length is {v.kv_tokens}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
                "when initializing the engine.")
    if kind == "nccl":  # V33 pynccl_wrapper.py:458-464, V11 :363-366
        last = "" if v.version == OLD else "\nLast error:\nsocket connect failed (emulated)"
        return ("RuntimeError", "NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)" + last)
    if kind == "crash-during-warmup":
        return ("RuntimeError", "emulated fault: crash during warmup")
    raise ValueError(f"unknown fatal kind {kind}")


def _traceback(exc_type: str, message: str) -> str:
    return ("Traceback (most recent call last):\n"
            '  File "<emulated vllm>/v1/engine/core.py", line 1, in run_engine_core\n'
            f"{exc_type}: {message}")


def init_failed(cfg: VllmEmulatorConfig, exit_codes: str) -> NoReturn:
    """The API server's side of a failed engine start (V33 v1/engine/utils.py:1473-1482): an
    uncaught RuntimeError, exit status 1."""
    print("Traceback (most recent call last):\n"
          '  File "<emulated vllm>/entrypoints/cli/main.py", line 1, in main\n'
          "RuntimeError: Engine core initialization failed. See root cause above. "
          f"Failed core proc(s): {exit_codes}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def die_like_vllm(cfg: VllmEmulatorConfig, kind: str) -> NoReturn:
    """Print the fatal lines of ``kind`` and exit as ``vllm serve`` does."""
    engine = "EngineCore_DP0" if cfg.vllm.version == OLD else "EngineCore"
    if kind == "host-oom":  # the OOM killer SIGKILLs the engine core: nothing logged, exit code -9
        init_failed(cfg, f"{{'{engine}': -9}}")
    if kind == "watchdog":  # the engine core dies without a word: the client's death wording
        died = ("Engine core proc EngineCore_DP0 died unexpectedly, shutting down client." if cfg.vllm.version == OLD
                else "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup")
        log(cfg, "died", died, level="ERROR" if cfg.vllm.version == OLD else "WARNING")
        init_failed(cfg, f"{{'{engine}': 1}}")
    exc_type, message = fatal_exception(cfg, kind)
    if kind == "oom-weights" and cfg.vllm.version != OLD:  # V33 gpu_model_runner.py:5077-5087
        log(cfg, "load_oom", "Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization to "
            "free memory for weights, increasing --tensor-parallel-size, or using --quantization. See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more tips. "
            f"(original error: {message})", engine=True, level="ERROR")
    if cfg.tp_size > 1 and kind in ("nccl", "oom-weights", "cuda-graph"):
        print(f"(Worker_TP0 pid={os.getpid()}) ERROR {time.strftime('%m-%d %H:%M:%S')} "
              "[multiproc_executor.py:1057] WorkerProc failed to start.", file=sys.stderr, flush=True)
    log(cfg, "engine_failed", "EngineCore failed to start.\n" + _traceback(exc_type, message), engine=True,
        level="ERROR")
    init_failed(cfg, f"{{'{engine}': 1}}")
