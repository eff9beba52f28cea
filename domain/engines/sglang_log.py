"""SGLang's log, as the shared reader (``log_reader.py``) reads it: the lines SGLang's server
prints while it starts and when it dies (their wording checked against the installed
package, ``.venv-sglang/.../sglang/srt``).  The emulator (emulator/startup.py) prints the same
fatal lines, so every path here is exercised in tests (tests/test_logparse.py,
tests/test_diagnose.py).

Harmless here: the KV-pool retraction "Decode out of memory happened", "… is not available,
falling back …" warnings.  Crash reports ("Scheduler hit an exception", "Received sigquit")
rank below a line naming a cause.
"""

from __future__ import annotations

import re

from domain.core.states import FailureKind
from domain.engines.log_reader import EXCEPTION_LINE, INFERRED, REPORT, FatalPattern, LogReader, log_lines


def _p(text: str) -> re.Pattern[str]:
    return re.compile(text, re.IGNORECASE)


_OOM_HINT = "GPU out of memory: lower --mem-fraction-static, --max-running-requests or batch sizes, or add GPUs"
_CRASH_HINT = "the server crashed; the quoted line is the first clue, the log tail has the rest"
_PD_HINT = ("PD KV transfer failed: check the transfer backend (mooncake/nixl) is installed, "
            "--disaggregation-ib-device, and that the peer prefill/decode server is alive")

# Lines that look alarming and are not failures.  Checked before FATAL_PATTERNS.
HARMLESS_PATTERNS = (
    _p(r"Decode out of memory happened"),  # KV-pool retraction under load (<= 0.4.x wording)
    _p(r"KV cache pool is full\. Retract requests"),  # the same retraction, 0.5.x wording
    _p(r"Out of memory even after retracting all other requests"),  # one request aborted, server lives
    _p(r"is not available\b.*\bfalling back|communicator is not available"),  # flashinfer comm fusion, symm-mem
)

# Every line is matched against these in order; the first that matches names the line.
FATAL_PATTERNS: tuple[FatalPattern, ...] = (
    FatalPattern(_p(r"Not enough memory\. Please try to increase --mem-fraction-static"), FailureKind.OOM,
                 "KV pool is empty: raise --mem-fraction-static, or use more GPUs / a smaller model"),
    FatalPattern(_p(r"Loaded weights leave no GPU memory for the KV cache"), FailureKind.OOM,
                 "weights exceed the static budget: more GPUs (TP/EP), FP8 weights, or a higher fraction"),
    FatalPattern(_p(r"is larger than the profiled value -\d"), FailureKind.OOM,
                 "no room for the KV cache after the weights (negative profiled capacity): more GPUs or a "
                 "higher --mem-fraction-static"),
    FatalPattern(_p(r"Capture\b.*\bgraph failed:.*(?:out of memory|OutOfMemoryError)"), FailureKind.OOM,
                 "lower --cuda-graph-max-bs(-decode) or --mem-fraction-static, or disable CUDA graphs"),
    FatalPattern(_p(r"out of memory\. Try to lower your batch size|alloc_req_slots runs out of memory"),
                 FailureKind.OOM, "the KV pool ran out mid-batch: lower --max-running-requests or "
                 "--chunked-prefill-size, or raise --mem-fraction-static"),
    FatalPattern(_p(r"torch\.(?:cuda\.)?OutOfMemoryError|(?:CUDA|HIP) out of memory|CUDA error: out of memory"),
                 FailureKind.OOM, _OOM_HINT),
    FatalPattern(_p(r"(?:RuntimeError|ValueError): The memory capacity is unbalanced"), FailureKind.HOST_UNHEALTHY,
                 "GPUs of this server have unequal free memory: another process is using some of them"),
    FatalPattern(_p(r": error: (?:unrecognized arguments|argument |ambiguous option|the following arguments "
                    r"are required|invalid choice)"), FailureKind.BAD_ARGS,
                 "the server rejected its arguments: check the flags against this SGLang version"),
    FatalPattern(_p(r"port(?: at)? \d+ is not available|has invalid port number|address already in use"),
                 FailureKind.BAD_ARGS, "a port is taken: another server is running on it"),
    FatalPattern(_p(r"Transformers does not recognize this architecture"), FailureKind.BAD_ARGS,
                 "the installed transformers does not know this model type: upgrade it or pick another model"),
    FatalPattern(_p(r"No space left on device"), FailureKind.DISK_FULL, "the disk under the data directory is full"),
    FatalPattern(_p(r"NCCL error|\bnccl[A-Z]\w*Error\b|DistBackendError|Watchdog caught collective operation "
                    r"timeout|NCCL communicator was aborted"), FailureKind.NCCL,
                 "NCCL / rendezvous failure: check --dist-init-addr, ports, NCCL_SOCKET_IFNAME, the interconnect"),
    FatalPattern(_p(r"watchdog timeout"), FailureKind.SERVER_CRASH, "a forward pass hung past --watchdog-timeout"),
    FatalPattern(_p(r"KVTransferError|(?:Decode|Prefill) transfer failed|mooncake session .* is not alive"),
                 FailureKind.SERVER_CRASH, _PD_HINT),
    FatalPattern(_p(r"Initialization failed\. warmup error"), FailureKind.SERVER_CRASH,
                 "the warm-up request failed: is an http_proxy intercepting localhost? (set no_proxy=127.0.0.1)"),
    FatalPattern(_p(r"illegal memory access|device-side assert(?:ion)? triggered"), FailureKind.SERVER_CRASH,
                 "a CUDA kernel fault: try another attention backend or --disable-cuda-graph to isolate it"),
    FatalPattern(_p(r"^ImportError: .* is not installed"), FailureKind.SERVER_CRASH,
                 "a backend the flags ask for is not installed in the SGLang environment"),
    FatalPattern(_p(r"scheduler died during initialization \(exit code: -9\)"), FailureKind.OOM,
                 "host memory exhausted (SIGKILL, likely the OOM killer): fewer workers or less host-side caching",
                 tier=INFERRED),
    FatalPattern(_p(r"Capture\b.*\bgraph failed"), FailureKind.SERVER_CRASH,
                 "CUDA graph capture failed (not for memory): try --disable-cuda-graph to confirm", tier=REPORT),
    FatalPattern(_p(r"Scheduler hit an exception|Received sigquit from a child|SIGQUIT received|Subprocess .* "
                    r"crashed|scheduler died during initialization|scheduler is dead|Initialization failed"),
                 FailureKind.SERVER_CRASH, _CRASH_HINT, tier=REPORT),
)

_REQUEST_ERROR = re.compile(r"Exception in ASGI application")
# Where a traceback went through says what it means when its exception line does not.
_ARGS_FRAMES = re.compile(r"\b(?:prepare_server_args|check_server_args|get_open_port|__post_init__)$|server_args\.py")
_PD_FRAMES = re.compile(r"/disaggregation/")



def _traceback_meaning(frames: list[str]) -> FatalPattern:
    """What an exception line with no pattern of its own means, from the frames above it."""
    if any(_ARGS_FRAMES.search(frame) for frame in frames):
        return FatalPattern(EXCEPTION_LINE, FailureKind.BAD_ARGS,
                            "the server's arguments or environment (SGLANG_* variables) were rejected at start-up")
    if any(_PD_FRAMES.search(frame) for frame in frames):
        return FatalPattern(EXCEPTION_LINE, FailureKind.SERVER_CRASH, _PD_HINT)
    return FatalPattern(EXCEPTION_LINE, FailureKind.SERVER_CRASH, _CRASH_HINT, tier=REPORT)


_FLOAT = r"([0-9]+(?:\.[0-9]+)?)"
_STARTUP_LINES = {
    "load_weight_begin_avail_gb": re.compile(rf"Load weight begin\. avail mem={_FLOAT} GB"),
    "load_weight_elapsed_s": re.compile(rf"Load weight end\. elapsed={_FLOAT} s"),
    "weight_mem_gb": re.compile(rf"Load weight end\..*mem usage={_FLOAT} GB"),
    "kv_cache_tokens": re.compile(r"KV Cache is allocated\..*#tokens: ([0-9]+)"),
    # The decode graph ("Capture cuda graph end" before 0.5.9, "Capture target decode CUDA graph end" after)
    # and the prefill graph ("piecewise" before, "target prefill" after), which CUDA captures first.
    "cuda_graph_elapsed_s": _p(rf"Capture (?:target (?:decode|verify) )?cuda graph end\..*?elapsed[=:] ?{_FLOAT} ?s"),
    "prefill_cuda_graph_elapsed_s": _p(
        rf"Capture (?:target prefill|piecewise) cuda graph end\..*?elapsed[=:] ?{_FLOAT} ?s"),
    "max_total_num_tokens": re.compile(r"max_total_num_tokens=([0-9]+)"),
    "max_running_requests": re.compile(r"max_total_num_tokens=.*max_running_requests=([0-9]+)"),
    "max_prefill_tokens": re.compile(r"max_total_num_tokens=.*max_prefill_tokens=([0-9]+)"),
    "chunked_prefill_size": re.compile(r"max_total_num_tokens=.*chunked_prefill_size=(-?[0-9]+)"),
    "context_len": re.compile(r"max_total_num_tokens=.*context_len=([0-9]+)"),
    "available_gpu_mem_gb": re.compile(rf"max_total_num_tokens=.*available_gpu_mem={_FLOAT} GB"),
}
_COUNTS = frozenset({"kv_cache_tokens", "max_total_num_tokens", "max_running_requests", "max_prefill_tokens",
                     "chunked_prefill_size", "context_len"})
READY_LINE = "The server is fired up and ready to roll!"

# SGLang's start-up in order: the stage a log has reached is named by the last of these
# markers found, so a start-up timeout can say where it stalled ("startup:<stage>").
_STAGE_MARKERS = (
    ("weights", _p(r"Load weight begin")),
    ("kv_cache", _p(r"Load weight end")),
    ("cuda_graphs", _p(r"KV Cache is allocated|Memory pool end|Capture .*cuda graph begin")),
    ("http_server", _p(r"Capture .*cuda graph end|max_total_num_tokens=")),
    ("warmup", _p(r"Uvicorn running on|Application startup complete|HTTP server listening")),
    ("ready", re.compile(re.escape(READY_LINE))),
)


SGLANG_LOG = LogReader(HARMLESS_PATTERNS, FATAL_PATTERNS, _REQUEST_ERROR, _traceback_meaning, messages=log_lines,
                       startup_lines={key: (pattern,) for key, pattern in _STARTUP_LINES.items()}, counts=_COUNTS,
                       stages=_STAGE_MARKERS)
