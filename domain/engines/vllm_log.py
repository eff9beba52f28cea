"""vLLM's log, as the shared reader (``log_reader.py``) reads it: start-up facts and stages,
and what a fatal line means.  The wordings are vLLM's own,
read from the two shipped wheels' sources (``.venv-vllm/src/<version>/vllm``, 0.33.0 and
0.11.2), and tests/test_vllm_reading.py builds its log lines from those sources.

A vLLM log line is ``(<process> pid=<n>) <LEVEL> <MM-DD HH:MM:SS> [<file>:<line>] <message>``
(0.33.0 ``vllm/logger.py``; 0.11.2 writes the same, its ``(<process> pid=<n>)`` from a
coloured stdout wrapper), and a logged multi-line message (a traceback from
``logger.exception``) repeats that header on every line (``NewLineFormatter``).  Each line is
unwrapped (``log_reader.unwrap``: collectors' prefixes, ANSI colours, the process prefix) and
then loses the level/time/file header, so a traceback reads as Python printed it.

Start-up facts (``VLLM_LOG.startup_facts``).  Keys that mean what SGLang's do carry SGLang's
names (``sglang_log.py``), so the run page, frames and comparisons read both engines alike:

* ``kv_cache_tokens`` and ``max_total_num_tokens``: the KV cache in tokens, "GPU KV cache size:
  N tokens" (what SGLang logs as ``#tokens`` and as ``max_total_num_tokens``; frames.py and
  the comparison's ``kv_capacity`` read the latter);
* ``context_len``: the longest request, vLLM's ``max_model_len``, from "Maximum concurrency for
  N tokens per request" (or ``max_seq_len=`` of the engine's config line);
* ``load_weight_elapsed_s`` and ``weight_mem_gb``: "Model loading took X GiB memory and Y
  seconds", the whole model load as SGLang's "Load weight end." times it (both engines' GB are
  GiB: SGLang divides by ``1 << 30``);
* ``cuda_graph_elapsed_s``: "Graph capturing finished in N secs" (every graph vLLM captures);
* ``max_running_requests``: the cap on requests running at once (per engine, as SGLang's is per
  data-parallel replica), vLLM's ``max_num_seqs``: from
  the "non-default args" line when given, else from "Defaulting max_num_seqs to N" (a DEBUG
  line: absent at the default log level, when the key is absent too).

New keys, vLLM's alone:

* ``max_concurrency_for_context``: "Maximum concurrency for N tokens per request: Y.YYx",
  how many requests of ``context_len`` tokens the KV cache holds at once;
* ``kv_cache_mem_gb``: "Available KV cache memory: X GiB" (GiB);
* ``cuda_graph_mem_gb``: the GiB "Graph capturing finished … took X GiB";
* ``weights_read_s``: "Loading weights took X seconds", reading the checkpoint only;
* ``engine_init_s``: "init engine (profile, create kv cache, warmup model) took X s";
* ``compile_s``: torch.compile's time, "(compilation: X s" of that line (0.33.0) or
  "torch.compile takes X s in total" (0.11.2);
* ``max_num_batched_tokens``: the tokens one scheduler step may hold, "Chunked prefill is
  enabled with max_num_batched_tokens=N." (not SGLang's ``chunked_prefill_size``: vLLM's budget
  holds decode tokens too).

How a log is read follows the shared reader: harmless lines never classify, nor
does the traceback of one failed request; a line naming a cause beats an exit code's
inference, which beats a line that only reports a crash; among equals the last one wins.
"""

from __future__ import annotations

import re

from domain.core.states import FailureKind
from domain.engines.log_reader import EXCEPTION_LINE, INFERRED, REPORT, FatalPattern, LogReader, log_lines


def _p(text: str) -> re.Pattern[str]:
    return re.compile(text, re.IGNORECASE)


# 0.11.2 colours its process prefix ("\033[1;36m(APIServer pid=7)\033[0;0m "): every colour
# code goes, not only the first that log_reader.unwrap strips.
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
# The process prefix again: under a docker compose prefix log_reader.unwrap strips that one only.
_PROCESS = re.compile(r"^\([^()]*\bpid=\d+[^()]*\) ")
# vLLM's header after the process prefix: "INFO 12-02 00:21:42 [core.py:1586] ".
_HEADER = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)? \[[^\]]*\] ")


def messages(log_text: str) -> list[str]:
    """The log's lines as the messages vLLM logged: unwrapped (``log_reader.unwrap``), without
    colours, the process prefix or the level/time header."""
    lines = (_PROCESS.sub("", line, count=1) for line in log_lines(_COLOUR.sub("", log_text)))
    return [_HEADER.sub("", line, count=1) for line in lines]


_OOM_HINT = ("GPU out of memory: lower --max-num-seqs, --max-num-batched-tokens or --max-model-len, or add "
             "GPUs (--tensor-parallel-size)")
_CRASH_HINT = "the vLLM engine died; the quoted line is the first clue, the log tail has the rest"

# Lines that look alarming and are not failures.  Checked before FATAL_PATTERNS.
HARMLESS_PATTERNS = (
    # Logged at ERROR when the NCCL library cannot be loaded; pynccl then disables itself
    # (distributed/device_communicators/pynccl.py) and a real NCCL need fails later on its own.
    _p(r"Failed to load NCCL library from"),
    # The advisory after memory profiling ("… on startup. Desired GPU memory utilization is …"),
    # unlike the fatal "… on startup is less than desired GPU memory utilization".
    _p(r"on startup\. Desired GPU memory utilization is"),
    _p(r"is deprecated|DeprecationWarning|FutureWarning"),
)

# This table and its harmless lines look like SGLang's (domain/engines/sglang_log.py) and stay so
# (a `duplicates` pair): both are the same reader's data, (pattern, kind, hint) per line, and
# the wordings and hints are each engine's own.
# Every line is matched against these in order; the first that matches names the line.
FATAL_PATTERNS: tuple[FatalPattern, ...] = (
    FatalPattern(_p(r"No available memory for the cache blocks"), FailureKind.OOM,
                 "nothing left for the KV cache after the weights: raise --gpu-memory-utilization, or use more "
                 "GPUs / a smaller or quantized model"),
    FatalPattern(_p(r"To serve at least one request with the models?'s max seq len"), FailureKind.OOM,
                 "the KV cache cannot hold one request of --max-model-len tokens: lower --max-model-len (the "
                 "line gives the estimated maximum) or raise --gpu-memory-utilization"),
    FatalPattern(_p(r"CUDA out of memory occurred when warming up"), FailureKind.OOM,
                 "the warm-up of --max-num-seqs dummy requests ran out of memory: lower --max-num-seqs or "
                 "--gpu-memory-utilization"),
    FatalPattern(_p(r"Failed to load model - not enough GPU memory"), FailureKind.OOM,
                 "the weights do not fit: raise --tensor-parallel-size or use --quantization (vLLM also "
                 "suggests a lower --gpu-memory-utilization, to leave the weights more room)"),
    FatalPattern(_p(r"torch\.(?:cuda\.)?OutOfMemoryError|(?:CUDA|HIP) out of memory|CUDA error: out of memory"),
                 FailureKind.OOM, _OOM_HINT),
    FatalPattern(_p(r"on startup is less than desired GPU memory utilization"), FailureKind.HOST_UNHEALTHY,
                 "the GPU is not free enough for --gpu-memory-utilization: another process is using it"),
    FatalPattern(_p(r": error: (?:unrecognized arguments|argument |ambiguous option|the following arguments "
                    r"are required|invalid choice)"), FailureKind.BAD_ARGS,
                 "vLLM rejected its arguments: check the flags against this vLLM version"),
    FatalPattern(_p(r"ValidationError: \d+ validation errors? for"), FailureKind.BAD_ARGS,
                 "a value is out of range for vLLM's configuration (the lines below it name the field)"),
    FatalPattern(_p(r"^(?:[\w.]+\.)?(?:ValueError|TypeError|KeyError): .*\bis not a valid\b"), FailureKind.BAD_ARGS,
                 "a flag's value is not one vLLM accepts"),
    FatalPattern(_p(r"address already in use"), FailureKind.BAD_ARGS,
                 "a port is taken: another server is running on it"),
    FatalPattern(_p(r"No space left on device"), FailureKind.DISK_FULL, "the disk under the data directory is full"),
    FatalPattern(_p(r"NCCL error|\bnccl[A-Z]\w*Error\b|DistBackendError|Watchdog caught collective operation "
                    r"timeout|NCCL communicator was aborted"), FailureKind.NCCL,
                 "NCCL failure: check NCCL_SOCKET_IFNAME, the interconnect and that every rank is alive"),
    FatalPattern(_p(r"illegal memory access|device-side assert(?:ion)? triggered"), FailureKind.SERVER_CRASH,
                 "a CUDA kernel fault: try another --attention-backend or --enforce-eager to isolate it"),
    # A process killed by SIGKILL during start-up or at run time: on a host, the OOM killer.
    FatalPattern(_p(r"Failed core proc\(s\): \{.*: -9\b|died unexpectedly \(exit code: -9\)"), FailureKind.OOM,
                 "host memory exhausted (SIGKILL, likely the OOM killer): fewer workers, less CPU offload or swap",
                 tier=INFERRED),
    FatalPattern(_p(r"EngineCore failed to start|EngineCore encountered a fatal error|Engine core initialization "
                    r"failed|Frontend process failed during engine core initialization|WorkerProc failed to start|"
                    r"WorkerProc hit an exception|Worker proc \S+ died unexpectedly|Engine core proc \S+ died "
                    r"unexpectedly|engine core exited unexpectedly|EngineDeadError"),
                 FailureKind.SERVER_CRASH, _CRASH_HINT, tier=REPORT),
)

# One request failed and the server lives: uvicorn's line, and vLLM's own for a stream.
_REQUEST_ERROR = re.compile(r"Exception in ASGI application|Error in (?:[\w ]+ )?stream generator\.|"
                            r"Error in token generation stream\.")
# Where a traceback went through says what it means when its exception line does not: the
# argument checks and config validation that run before the engine starts.
_ARGS_FRAMES = re.compile(r"/vllm/config/|/vllm/engine/arg_utils\.py|\b(?:validate_parsed_serve_args|"
                          r"create_engine_config)$")


def _traceback_meaning(frames: list[str]) -> FatalPattern:
    if any(_ARGS_FRAMES.search(frame) for frame in frames):
        return FatalPattern(EXCEPTION_LINE, FailureKind.BAD_ARGS,
                            "vLLM rejected its arguments or configuration at start-up")
    return FatalPattern(EXCEPTION_LINE, FailureKind.SERVER_CRASH, _CRASH_HINT, tier=REPORT)


_FLOAT = r"([0-9]+(?:\.[0-9]+)?)"
_COUNT = r"([0-9][0-9,]*)"  # vLLM writes token counts with thousands separators: "1,234,560"
_STARTUP_LINES: dict[str, tuple[re.Pattern[str], ...]] = {
    "kv_cache_tokens": (re.compile(rf"KV cache size: {_COUNT} tokens"),),
    "max_total_num_tokens": (re.compile(rf"KV cache size: {_COUNT} tokens"),),
    "context_len": (re.compile(rf"Maximum concurrency for {_COUNT} tokens per request"),
                    re.compile(r"with config: .*\bmax_seq_len=([0-9]+)")),
    "max_concurrency_for_context": (re.compile(rf"Maximum concurrency for {_COUNT} tokens per request: {_FLOAT}x"),),
    "weight_mem_gb": (re.compile(rf"Model loading took {_FLOAT} GiB memory"),),
    "load_weight_elapsed_s": (re.compile(rf"Model loading took {_FLOAT} GiB memory and {_FLOAT} seconds"),),
    "weights_read_s": (re.compile(rf"Loading weights took {_FLOAT} seconds"),),
    "kv_cache_mem_gb": (re.compile(rf"Available KV cache memory: {_FLOAT} GiB"),),
    "cuda_graph_elapsed_s": (re.compile(rf"Graph capturing finished in {_FLOAT} secs"),),
    "cuda_graph_mem_gb": (re.compile(rf"Graph capturing finished in {_FLOAT} secs, took {_FLOAT} GiB"),),
    "engine_init_s": (re.compile(rf"init engine \(profile, create kv cache, warmup model\) took {_FLOAT} s"),),
    "compile_s": (re.compile(rf"init engine \(profile, create kv cache, warmup model\) took [0-9.]+ s "
                             rf"\(compilation: {_FLOAT} s"),
                  re.compile(rf"torch\.compile takes {_FLOAT} s in total")),
    "max_running_requests": (re.compile(r"non-default args: \{.*'max_num_seqs': ([0-9]+)"),
                             re.compile(r"Defaulting max_num_seqs to ([0-9]+)")),
    "max_num_batched_tokens": (re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=([0-9]+)"),
                               re.compile(r"non-default args: \{.*'max_num_batched_tokens': ([0-9]+)")),
}
_COUNTS = frozenset({"kv_cache_tokens", "max_total_num_tokens", "context_len", "max_running_requests",
                     "max_num_batched_tokens"})


# The API server is up: vLLM's port line (0.33.0; 0.11.2 numbers its API servers), logged
# just before uvicorn serves, and uvicorn's own (uvicorn does not print "Uvicorn running on"
# when given a socket, as vLLM gives it).
READY_LINES = ("Starting vLLM server on ", "Starting vLLM API server ", "Application startup complete.")

# vLLM's start-up in order, named as sglang_log.py names SGLang's.  There is no
# "warmup" stage: vLLM warms up inside the engine, before the HTTP server starts.
_STAGE_MARKERS = (
    ("weights", re.compile(r"Starting to load model ")),
    ("kv_cache", re.compile(r"Model loading took ")),
    ("cuda_graphs", re.compile(r"Available KV cache memory:|KV cache size: |Capturing CUDA graphs")),
    ("http_server", re.compile(r"Graph capturing finished in |init engine \(profile, create kv cache")),
    ("ready", re.compile("|".join(re.escape(line) for line in READY_LINES))),
)


# The reader is the shared one (domain/engines/log_reader.py); only the wordings are vLLM's.
VLLM_LOG = LogReader(HARMLESS_PATTERNS, FATAL_PATTERNS, _REQUEST_ERROR, _traceback_meaning, messages=messages,
                     startup_lines=_STARTUP_LINES, counts=_COUNTS, stages=_STAGE_MARKERS)
