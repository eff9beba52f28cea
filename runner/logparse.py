"""Reading an engine server's log: start-up phases, and what a fatal line means.

The patterns are the lines SGLang's server itself prints while it starts and when it dies
(their wording checked against the installed package, ``.venv-sglang/.../sglang/srt``); the
emulator (emulator/startup.py) prints the same fatal lines, so every path here is exercised in
tests (tests/test_logparse.py, tests/test_diagnose.py).

How a log is read (``find_failure``):

* every line is unwrapped first: docker compose ``name  | ``, CRI ``<RFC3339> stdout F `` and
  Ray ``(SGLangEngine pid=…, ip=…) `` prefixes are stripped;
* harmless lines never classify (the KV-pool retraction "Decode out of memory happened",
  "… is not available, falling back …" warnings), nor does a traceback that an HTTP request
  handler printed ("Exception in ASGI application": that request failed, the server lives);
* a line naming a *cause* (out of memory, rejected arguments, NCCL, a full disk, …) beats a
  line that only *reports* a crash ("Scheduler hit an exception", "Received sigquit"), and
  among causes the last one wins;
* fatal output with no known cause (a traceback, a crash report) is a retryable
  ``server_crash`` quoting the exception line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from domain.core.states import NEVER_RETRIED, FailureKind


def _p(text: str) -> re.Pattern[str]:
    return re.compile(text, re.IGNORECASE)


# Prefixes that log collectors put in front of every line; the ANSI colour codes first.
_WRAPPERS = (
    re.compile(r"\x1b\[[0-9;]*m"),
    re.compile(r"^\d{4}-\d{2}-\d{2}T[\d:.]+(?:Z|[+-]\d{2}:?\d{2})? (?:stdout|stderr) [FP] "),  # CRI (containerd)
    re.compile(r"^\([^()]*\bpid=\d+[^()]*\) "),  # Ray: (SGLangEngine pid=952, ip=10.0.0.1)
    re.compile(r"^[\w.-]+ +\| "),  # docker compose: sglang-1  |
)


def unwrap(line: str) -> str:
    """The line as SGLang printed it, without a log collector's prefix."""
    for wrapper in _WRAPPERS:
        line = wrapper.sub("", line, count=1)
    return line


def log_lines(log_text: str) -> list[str]:
    """Unwrapped lines; ``\\r`` (tqdm progress bars) ends a line too."""
    return [unwrap(line) for line in log_text.splitlines()]


# Tiers: a line naming a cause beats an inference from an exit code, which beats a line that
# only reports that something crashed.
CAUSE, INFERRED, REPORT = 3, 2, 1


@dataclass(frozen=True)
class FatalPattern:
    pattern: re.Pattern[str]
    kind: FailureKind
    hint: str
    tier: int = CAUSE


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

# An exception line ends a traceback: "RuntimeError: …", "torch.OutOfMemoryError: …", "EOFError".
EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)(?::\s|$)")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)')
_REQUEST_ERROR = re.compile(r"Exception in ASGI application")
# What the launcher raises after a scheduler died: a consequence, never the cause worth quoting.
_CONSEQUENCES = re.compile(r"^(?:EOFError|BrokenPipeError|ConnectionResetError|KeyboardInterrupt)\b")
# Where a traceback went through says what it means when its exception line does not.
_ARGS_FRAMES = re.compile(r"\b(?:prepare_server_args|check_server_args|get_open_port|__post_init__)$|server_args\.py")
_PD_FRAMES = re.compile(r"/disaggregation/")


@dataclass(frozen=True)
class Diagnosis:
    kind: FailureKind
    line: str
    hint: str

    @property
    def retryable(self) -> bool:
        return self.kind not in NEVER_RETRIED


@dataclass(frozen=True)
class _Finding:
    tier: int
    order: int
    diagnosis: Diagnosis


@dataclass(frozen=True)
class LogReader:
    """How one engine's log shows a failure: its harmless lines, its fatal patterns, the
    line that says one request failed while the server lives, and what an exception with no
    pattern of its own means from the frames above it.  SGLang's is :data:`SGLANG_LOG`;
    vLLM's is in runner/vllm_log.py.  Tracebacks read alike for both (Python's own)."""

    harmless: tuple[re.Pattern[str], ...]
    fatal: tuple[FatalPattern, ...]
    request_error: re.Pattern[str]
    traceback_meaning: Callable[[list[str]], FatalPattern]

    def match_line(self, line: str) -> FatalPattern | None:
        if any(harmless.search(line) for harmless in self.harmless):
            return None
        return next((fatal for fatal in self.fatal if fatal.pattern.search(line)), None)

    def findings(self, lines: list[str]) -> Iterator[_Finding]:
        frames: list[str] = []
        in_traceback = request_error = False
        for order, line in enumerate(lines):
            text = line.strip()
            if self.request_error.search(text):
                request_error = True
            if _TRACEBACK.search(text):
                in_traceback, frames = True, []
            frame = _FRAME.match(line)
            if frame:
                in_traceback = True
                frames.append(f"{frame.group(1)} {frame.group(2)}")
                continue
            if in_traceback and line[:1].isspace():
                continue  # a frame's source line (`raise RuntimeError(f"NCCL error: …")`) says nothing happened
            ends_traceback = in_traceback and bool(EXCEPTION_LINE.match(text))
            if not request_error:
                fatal = self.match_line(text)
                if fatal is None and ends_traceback and not _CONSEQUENCES.match(text):
                    fatal = self.traceback_meaning(frames)
                if fatal is not None:
                    yield _Finding(fatal.tier, order, Diagnosis(fatal.kind, text, fatal.hint))
            if ends_traceback:
                in_traceback = request_error = False

    def find_failure(self, lines: list[str]) -> Diagnosis | None:
        """The failure these (unwrapped) lines show, or None where they show none."""
        findings = list(self.findings(lines))
        return _pick(findings) if findings else None


def _traceback_meaning(frames: list[str]) -> FatalPattern:
    """What an exception line with no pattern of its own means, from the frames above it."""
    if any(_ARGS_FRAMES.search(frame) for frame in frames):
        return FatalPattern(EXCEPTION_LINE, FailureKind.BAD_ARGS,
                            "the server's arguments or environment (SGLANG_* variables) were rejected at start-up")
    if any(_PD_FRAMES.search(frame) for frame in frames):
        return FatalPattern(EXCEPTION_LINE, FailureKind.SERVER_CRASH, _PD_HINT)
    return FatalPattern(EXCEPTION_LINE, FailureKind.SERVER_CRASH, _CRASH_HINT, tier=REPORT)


def _is_exception(finding: _Finding) -> bool:
    return bool(EXCEPTION_LINE.match(finding.diagnosis.line))


def _pick(findings: list[_Finding]) -> Diagnosis:
    """The last finding of the strongest tier; for a bare crash report, the last exception
    line (what failed) in preference to the report line (that something failed)."""
    tier = max(f.tier for f in findings)
    strongest = [f for f in findings if f.tier == tier]
    if tier == REPORT:
        exceptions = [f for f in strongest if _is_exception(f)]
        return (exceptions or strongest[:1])[-1].diagnosis
    return strongest[-1].diagnosis


SGLANG_LOG = LogReader(HARMLESS_PATTERNS, FATAL_PATTERNS, _REQUEST_ERROR, _traceback_meaning)


def find_failure(log_text: str) -> Diagnosis | None:
    """The failure a log shows, or None where it shows none."""
    return SGLANG_LOG.find_failure(log_lines(log_text))


def classify(log_text: str, *, default: FailureKind) -> Diagnosis:
    """The failure kind a log shows; ``default`` (with no line) if it shows none."""
    return find_failure(log_text) or Diagnosis(default, "", "")


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


def startup_stage(log_text: str) -> str:
    """Where a start-up got to: ``init`` (before weight loading: process start, NCCL and
    distributed init), ``weights``, ``kv_cache``, ``cuda_graphs``, ``http_server``,
    ``warmup`` (HTTP up, the warmup request not done) or ``ready``."""
    text = "\n".join(log_lines(log_text))
    stage = "init"
    for name, pattern in _STAGE_MARKERS:
        if pattern.search(text):
            stage = name
    return stage


def startup_facts(log_text: str) -> dict[str, float]:
    """Start-up phases parsed from the log (weight load, KV allocation, CUDA graphs) and the
    scheduler's capacity line; counts are ints.  The first rank's line wins (ranks agree)."""
    text = "\n".join(log_lines(log_text))
    facts: dict[str, float] = {}
    for name, pattern in _STARTUP_LINES.items():
        match = pattern.search(text)
        if match:
            facts[name] = int(match.group(1)) if name in _COUNTS else float(match.group(1))
    return facts
