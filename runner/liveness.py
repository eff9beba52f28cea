"""Scheduler liveness while a point runs: ``/health_generate`` polled on each server.

``/health`` can stay 200 while the scheduler behind it is dead (docs/fault-suite.md, case
7); the bench client then waits on streams that never move until the point timeout.
``/health_generate`` goes through the scheduler: the server answers 200 once it sees any
scheduler output, 503 when none came in its own timeout (``emulator/health.py`` follows
SGLang's handler).  So:

* an answer below 500, however slow, is alive and resets the count ("slow" is not "dead");
* no answer (refused, reset, past ``timeout_s``) or a 5xx is a failure;
* ``failures`` consecutive failures spanning at least ``window_s`` (from the first one's
  start to the last one's end) make the verdict, kept in :attr:`LivenessProbe.verdict`.

One thread per server, so a slow probe of one member does not delay the others'.  The
router is not probed: it is a proxy without a scheduler, and its workers are probed
directly (``Deployment.workers``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import requests

from runner.server_process import http_status

HEALTH_TIMEOUT_S = 5.0  # the /health look that goes into the verdict's message


@dataclass(frozen=True)
class LivenessRule:
    interval_s: float
    failures: int
    window_s: float
    timeout_s: float


@dataclass
class _Streak:
    """Consecutive failures of one server: when the first began, the last error."""

    count: int = 0
    since: float = 0.0
    last_error: str = ""

    def fail(self, started: float, error: str) -> None:
        if self.count == 0:
            self.since = started
        self.count += 1
        self.last_error = error


def probe_once(base_url: str, timeout_s: float, path: str = "/health_generate") -> str | None:
    """None when the scheduler answered (any status below 500); else what went wrong."""
    try:
        response = requests.get(f"{base_url}{path}", timeout=timeout_s)
    except requests.Timeout:
        return f"no answer within {timeout_s:g} s"
    except requests.RequestException as exc:
        return f"no answer ({type(exc).__name__})"
    return f"HTTP {response.status_code}" if response.status_code >= 500 else None


def health_word(base_url: str) -> str:
    """What /health says now, for the message: the case worth naming is '200'."""
    status = http_status(f"{base_url}/health", HEALTH_TIMEOUT_S)
    return f"gives no answer within {HEALTH_TIMEOUT_S:g} s" if status is None else f"answers {status}"


@dataclass
class LivenessProbe:
    targets: list[tuple[str, str]]  # (member name, base URL)
    rule: LivenessRule
    verdict: str | None = None
    path: str = "/health_generate"  # vLLM: /health, which asks its engine core (runner/attempt.py)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    @property
    def dead(self) -> bool:
        return self.verdict is not None

    def start(self) -> LivenessProbe:
        for name, url in self.targets:
            thread = threading.Thread(target=self._watch, args=(name, url), name=f"liveness-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop polling; a probe in flight is left to end on its own timeout (daemon thread)."""
        self._stop.set()

    def _watch(self, name: str, url: str) -> None:
        streak = _Streak()
        while not self._stop.is_set() and self.verdict is None:
            started = time.monotonic()
            error = probe_once(url, self.rule.timeout_s, self.path)
            if error is None:
                streak = _Streak()
            else:
                streak.fail(started, error)
                if self._enough(streak):
                    self.verdict = self._message(name, url, streak)
                    return
            self._stop.wait(self.rule.interval_s)

    def _enough(self, streak: _Streak) -> bool:
        return streak.count >= self.rule.failures and time.monotonic() - streak.since >= self.rule.window_s

    def _message(self, name: str, url: str, streak: _Streak) -> str:
        span = time.monotonic() - streak.since
        who = "" if len(self.targets) == 1 else f" ({name})"
        return (f"scheduler not responding{who}: {self.path} failed {streak.count} times over {span:.0f} s "
                f"while /health {health_word(url)}; last: {streak.last_error}")
