"""The liveness rule (runner/liveness.py) against a stub server: slow is not dead, only no
answer or a 5xx counts, and the verdict needs both the count and the window."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from runner.liveness import LivenessProbe, LivenessRule, probe_once


@contextmanager
def stub(generate_status: int, delay_s: float = 0.0) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health_generate":
                time.sleep(delay_s)
            self.send_response(generate_status if self.path == "/health_generate" else 200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _watch(url: str, rule: LivenessRule, seconds: float) -> LivenessProbe:
    probe = LivenessProbe([("server", url)], rule).start()
    deadline = time.monotonic() + seconds
    while not probe.dead and time.monotonic() < deadline:
        time.sleep(0.05)
    probe.stop()
    return probe


def test_a_slow_answer_is_alive_and_only_5xx_or_silence_fails() -> None:
    with stub(200, delay_s=0.5) as url:
        assert probe_once(url, timeout_s=2) is None
    with stub(404) as url:
        assert probe_once(url, timeout_s=2) is None  # answered: the scheduler is not what failed
    with stub(503) as url:
        assert probe_once(url, timeout_s=2) == "HTTP 503"
    with stub(200, delay_s=1.0) as url:
        assert probe_once(url, timeout_s=0.3) == "no answer within 0.3 s"


def test_the_verdict_needs_the_count_and_the_window() -> None:
    with stub(503) as url:
        probe = _watch(url, LivenessRule(interval_s=0.1, failures=3, window_s=0.0, timeout_s=2), 5)
        assert probe.verdict is not None
        assert probe.verdict.startswith("scheduler not responding: /health_generate failed 3 times over")
        assert probe.verdict.endswith("while /health answers 200; last: HTTP 503")
        started = time.monotonic()
        probe = _watch(url, LivenessRule(interval_s=0.1, failures=3, window_s=1.0, timeout_s=2), 5)
        assert probe.dead and time.monotonic() - started >= 1.0
    with stub(200, delay_s=0.3) as url:
        assert not _watch(url, LivenessRule(interval_s=0.05, failures=2, window_s=0.0, timeout_s=2), 1.5).dead
