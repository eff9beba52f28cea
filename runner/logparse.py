"""Reading an engine server's log: start-up phases, and what a fatal line means.

The patterns are lines SGLang's server itself prints while it starts and when it dies; the
emulator (emulator/) prints the same ones, so every path here is exercised in tests
(tests/test_logparse.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from domain.core.states import FailureKind


@dataclass(frozen=True)
class FatalPattern:
    pattern: re.Pattern[str]
    kind: FailureKind
    hint: str


def _p(text: str) -> re.Pattern[str]:
    return re.compile(text, re.IGNORECASE)


# Order matters: the first pattern that matches any line wins, most specific first.
FATAL_PATTERNS: tuple[FatalPattern, ...] = (
    FatalPattern(_p(r"Not enough memory\. Please try to increase --mem-fraction-static"), FailureKind.OOM,
                 "KV pool is empty: raise --mem-fraction-static, or use more GPUs / a smaller model"),
    FatalPattern(_p(r"Loaded weights leave no GPU memory for the KV cache"), FailureKind.OOM,
                 "weights exceed the static budget: more GPUs (TP/EP), FP8 weights, or a higher fraction"),
    FatalPattern(_p(r"Capture cuda graph failed"), FailureKind.OOM,
                 "lower --cuda-graph-max-bs-decode or --mem-fraction-static, or disable CUDA graphs"),
    FatalPattern(_p(r"torch\.OutOfMemoryError|CUDA out of memory"), FailureKind.OOM,
                 "GPU out of memory: lower --mem-fraction-static, --max-running-requests or batch sizes"),
    FatalPattern(_p(r"scheduler died during initialization \(exit code: -9\)|OOM killer"), FailureKind.OOM,
                 "host memory exhausted (OOM killer): fewer workers or less host-side caching"),
    FatalPattern(_p(r"is not available\b.*|address already in use"), FailureKind.BAD_ARGS,
                 "a port is taken: another server is running on it"),
    FatalPattern(_p(r"error: unrecognized arguments|error: argument --|ambiguous option"), FailureKind.BAD_ARGS,
                 "the server rejected its arguments: check the flags against this SGLang version"),
    FatalPattern(_p(r"watchdog timeout"), FailureKind.SERVER_CRASH,
                 "a forward pass hung past --watchdog-timeout"),
    FatalPattern(_p(r"NCCL error|ncclUnhandledCudaError|ncclSystemError|Watchdog caught collective|DistBackendError"),
                 FailureKind.SERVER_CRASH, "NCCL / rendezvous failure: check --dist-init-addr, ports, interconnect"),
    FatalPattern(_p(r"Scheduler hit an exception|Received sigquit from a child process|Initialization failed"),
                 FailureKind.SERVER_CRASH, "the server crashed; see the log tail"),
    FatalPattern(_p(r"No space left on device"), FailureKind.DISK_FULL, "the disk under the data directory is full"),
)


@dataclass(frozen=True)
class Diagnosis:
    kind: FailureKind
    line: str
    hint: str


def classify(log_text: str, *, default: FailureKind) -> Diagnosis:
    """The failure kind a log shows; ``default`` if none.  The most specific pattern found
    anywhere wins: a crash report ("Scheduler hit an exception") often precedes the line
    that names its cause (out of memory)."""
    lines = log_text.splitlines()
    for fatal in FATAL_PATTERNS:
        for line in lines:
            if fatal.pattern.search(line):
                return Diagnosis(fatal.kind, line.strip(), fatal.hint)
    return Diagnosis(default, "", "")


_FLOAT = r"([0-9]+(?:\.[0-9]+)?)"
_STARTUP_LINES = {
    "load_weight_begin_avail_gb": re.compile(rf"Load weight begin\. avail mem={_FLOAT} GB"),
    "load_weight_elapsed_s": re.compile(rf"Load weight end\. elapsed={_FLOAT} s"),
    "weight_mem_gb": re.compile(rf"Load weight end\..*mem usage={_FLOAT} GB"),
    "kv_cache_tokens": re.compile(r"KV Cache is allocated\..*#tokens: ([0-9]+)"),
    "cuda_graph_elapsed_s": re.compile(rf"Capture .*cuda graph end\..*elapsed[=:] ?{_FLOAT} ?s", re.IGNORECASE),
    "max_total_num_tokens": re.compile(r"max_total_num_tokens=([0-9]+)"),
    "max_running_requests": re.compile(r"max_total_num_tokens=.*max_running_requests=([0-9]+)"),
    "available_gpu_mem_gb": re.compile(rf"max_total_num_tokens=.*available_gpu_mem={_FLOAT} GB"),
}
READY_LINE = "The server is fired up and ready to roll!"

# SGLang's start-up in order: the stage a log has reached is named by the last of these
# markers found, so a start-up timeout can say where it stalled ("startup:<stage>").
_STAGE_MARKERS = (
    ("weights", _p(r"Load weight begin")),
    ("kv_cache", _p(r"Load weight end")),
    ("cuda_graphs", _p(r"KV Cache is allocated|Capture .*cuda graph begin")),
    ("http_server", _p(r"Capture .*cuda graph end|max_total_num_tokens=")),
    ("warmup", _p(r"Uvicorn running on|Application startup complete|HTTP server listening")),
)


def startup_stage(log_text: str) -> str:
    """Where a start-up got to: ``init`` (before weight loading: process start, NCCL and
    distributed init), ``weights``, ``kv_cache``, ``cuda_graphs``, ``http_server`` or
    ``warmup`` (HTTP up, the warmup request not done)."""
    stage = "init"
    for name, pattern in _STAGE_MARKERS:
        if pattern.search(log_text):
            stage = name
    return stage


def startup_facts(log_text: str) -> dict[str, float]:
    """Start-up phases parsed from the log (weight load, KV allocation, CUDA graphs)."""
    facts: dict[str, float] = {}
    for name, pattern in _STARTUP_LINES.items():
        match = pattern.search(log_text)
        if match:
            facts[name] = float(match.group(1))
    return facts
