"""Reading an engine server's log, for any engine: what a fatal line means, the start-up
facts and the stage a start-up reached.  Written once; each engine adapter
(``domain/engines/``) brings its :class:`LogReader` with its own wordings (SGLang's in
``sglang_log.py``, vLLM's in ``vllm_log.py``).

How a log is read (:meth:`LogReader.diagnose`):

* every line is unwrapped first: docker compose ``name  | ``, CRI ``<RFC3339> stdout F `` and
  Ray ``(SGLangEngine pid=…, ip=…) `` prefixes are stripped, then the engine's own header;
* harmless lines never classify, nor does a traceback that an HTTP request handler printed
  (that request failed, the server lives);
* a line naming a *cause* (out of memory, rejected arguments, NCCL, a full disk, …) beats an
  inference from an exit code, which beats a line that only *reports* a crash, and among
  equals the last one wins;
* fatal output with no known cause (a traceback, a crash report) is a retryable
  ``server_crash`` quoting the exception line, unless the frames above it say more.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from domain.core.states import NEVER_RETRIED, FailureKind

# Prefixes that log collectors put in front of every line; the ANSI colour codes first.
_WRAPPERS = (
    re.compile(r"\x1b\[[0-9;]*m"),
    re.compile(r"^\d{4}-\d{2}-\d{2}T[\d:.]+(?:Z|[+-]\d{2}:?\d{2})? (?:stdout|stderr) [FP] "),  # CRI (containerd)
    re.compile(r"^\([^()]*\bpid=\d+[^()]*\) "),  # Ray: (SGLangEngine pid=952, ip=10.0.0.1)
    re.compile(r"^[\w.-]+ +\| "),  # docker compose: sglang-1  |
)


def unwrap(line: str) -> str:
    """The line as the engine printed it, without a log collector's prefix."""
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


# An exception line ends a traceback: "RuntimeError: …", "torch.OutOfMemoryError: …", "EOFError".
EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)(?::\s|$)")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)')
# What the launcher raises after a scheduler died: a consequence, never the cause worth quoting.
_CONSEQUENCES = re.compile(r"^(?:EOFError|BrokenPipeError|ConnectionResetError|KeyboardInterrupt)\b")


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
    """How one engine's log reads: its harmless lines, its fatal patterns, the line that
    says one request failed while the server lives, what an exception with no pattern of
    its own means from the frames above it, how a raw line becomes the message the engine
    logged, the start-up facts (each key's patterns tried in order, the first match's last
    group), and the start-up stages in order.  Tracebacks read alike for every engine."""

    harmless: tuple[re.Pattern[str], ...]
    fatal: tuple[FatalPattern, ...]
    request_error: re.Pattern[str]
    traceback_meaning: Callable[[list[str]], FatalPattern]
    messages: Callable[[str], list[str]] = log_lines
    startup_lines: Mapping[str, tuple[re.Pattern[str], ...]] | None = None
    counts: frozenset[str] = frozenset()  # facts that are counts (ints; "1,234" reads 1234)
    stages: tuple[tuple[str, re.Pattern[str]], ...] = ()

    def diagnose(self, log_text: str) -> Diagnosis | None:
        """The failure a log shows, or None where it shows none."""
        return self.find_failure(self.messages(log_text))

    def classify(self, log_text: str, *, default: FailureKind) -> Diagnosis:
        """The failure kind a log shows; ``default`` (with no line) if it shows none."""
        return self.diagnose(log_text) or Diagnosis(default, "", "")

    def startup_facts(self, log_text: str) -> dict[str, float]:
        """The start-up facts found in a log; counts are ints.  The first match wins (the
        first rank's or engine's line: they agree)."""
        text = "\n".join(self.messages(log_text))
        facts: dict[str, float] = {}
        for key, patterns in (self.startup_lines or {}).items():
            match = next((m for m in (p.search(text) for p in patterns) if m is not None), None)
            if match is not None:
                value = match.group(match.re.groups)
                facts[key] = int(value.replace(",", "")) if key in self.counts else float(value)
        return facts

    def startup_stage(self, log_text: str) -> str:
        """Where a start-up got to: ``init``, or the last of the engine's stages whose marker
        the log shows."""
        text = "\n".join(self.messages(log_text))
        stage = "init"
        for name, pattern in self.stages:
            if pattern.search(text):
                stage = name
        return stage

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


