"""The engine server of one attempt: launch, readiness and teardown.  Its exact command
is built in domain/plan/command.py, shared with the form's preview."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from domain.core.states import FailureKind
from domain.engines import adapter_for
from domain.plan.command import LOOPBACK
from runner.process import Child, port_is_free, start_child, stop_group, tail
from runner.server_log import DEFAULT_ROTATION, LogRotation


class AttemptFailure(Exception):
    """Ends an attempt as failed with a failure kind, a readable message and a hint."""

    def __init__(self, kind: FailureKind, message: str, hint: str = ""):
        super().__init__(message)
        self.kind = kind
        self.hint = hint


class PortTaken(AttemptFailure):
    """The port picked for a server was taken by the time it launched (a stale server?)."""

    def __init__(self, port: int):
        super().__init__(FailureKind.HOST_UNHEALTHY, f"port {port} is taken (a stale server?)")
        self.port = port


class AttemptCancelled(Exception):
    """The user cancelled the run, or the runner is stopping."""


@dataclass
class EngineServer:
    child: Child
    port: int
    argv: list[str]
    engine: str = "sglang"  # whose log wordings and endpoints: "sglang" (and its emulator) or "vllm"

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def log_tail(self, max_bytes: int = 16_384) -> str:
        return tail(self.child.log_path, max_bytes)

    def crash_failure(self, *, default: FailureKind, what: str) -> AttemptFailure:
        self.child.settle_log()  # the fatal line may still be in the pipe
        diagnosis = adapter_for(self.engine).log.classify(tail(self.child.log_path, 200_000), default=default)
        code = self.child.returncode
        message = f"{what} (exit code {code})" if code is not None else what
        if diagnosis.line:
            message += f": {diagnosis.line}"
        return AttemptFailure(diagnosis.kind, message, diagnosis.hint)

    def stop(self, grace_s: float) -> None:
        stop_group(self.child.pgid, grace_s=grace_s, popen=self.child.popen)
        self.child.settle_log()  # the group is gone: the pipe reaches EOF and the log is complete


def launch(argv: list[str], *, port: int, log_path: Path, env: dict[str, str],
           rotation: LogRotation = DEFAULT_ROTATION, engine: str = "sglang") -> EngineServer:
    """Start the server with its output in ``log_path``, rotated at ``rotation`` (the
    daemon passes ``LogRotation.from_settings(settings)``)."""
    if not port_is_free(port):
        raise PortTaken(port)
    return EngineServer(start_child(argv, log_path=log_path, env=env, rotation=rotation), port, argv, engine)


def http_status(url: str, timeout_s: float = 2.0) -> int | None:
    """GET ``url``: its status code, or None when nothing answers in time."""
    try:
        return requests.get(url, timeout=timeout_s).status_code
    except requests.RequestException:
        return None


def wait_ready(server: EngineServer, *, budget_s: float, cancelled: Callable[[], bool]) -> float:
    """Wait until /health answers 200 while the child is alive; return seconds to ready.

    /v1/models answers before an SGLang server has warmed up, so it is not a readiness
    signal.  vLLM serves no HTTP at all until its engine is up (domain/engines/vllm_log.py), and its
    /health then answers 200 until the engine dies."""
    start = time.monotonic()
    while True:
        if not server.child.alive:
            raise server.crash_failure(default=FailureKind.SERVER_CRASH, what="the server exited during start-up")
        if cancelled():
            raise AttemptCancelled("cancelled during server start-up")
        if http_status(f"{server.base_url}/health") == 200:
            return time.monotonic() - start
        if time.monotonic() - start > budget_s:
            stage = adapter_for(server.engine).log.startup_stage(tail(server.child.log_path, 400_000))
            raise AttemptFailure(
                FailureKind.STARTUP_TIMEOUT,
                f"timeout: startup:{stage} — the server was not ready within {budget_s:.0f} s "
                "(BENCHDECK_STARTUP_TIMEOUT_S)",
                "init = NCCL/distributed set-up (check --dist-timeout, the network); weights/kv_cache/cuda_graphs = "
                "loading (large models take 10–60 min: raise the budget); warmup = HTTP up but the first request "
                "never finished",
            )
        time.sleep(0.25)


def server_info(server: EngineServer) -> dict[str, Any]:
    for path in ("/server_info", "/get_server_info"):  # the older alias for servers before 0.5.9
        try:
            response = requests.get(f"{server.base_url}{path}", timeout=10)
        except requests.RequestException:
            continue
        if response.status_code == 200:
            return dict(response.json())
    return {}


_INFO_FACTS = ("max_total_num_tokens", "max_running_requests", "chunked_prefill_size", "version",
               "mem_fraction_static", "max_req_input_len", "status", "tp_size", "dp_size")


def server_info_facts(info: dict[str, Any]) -> dict[str, Any]:
    """The facts a /server_info (or /get_server_info) answer gives; a null says nothing.

    The top-level ``max_running_requests`` is the flag as given (null unless the user set
    it); the limit the scheduler applies is ``internal_states[i].effective_max_running_requests_per_dp``
    (one state per DP rank), the value SGLang's own start-up line prints."""
    facts = {key: info[key] for key in _INFO_FACTS if info.get(key) is not None}
    states = [state for state in info.get("internal_states") or [] if isinstance(state, dict)]
    per_dp = [s["effective_max_running_requests_per_dp"] for s in states
              if s.get("effective_max_running_requests_per_dp") is not None]
    if per_dp:
        facts["max_running_requests_per_dp"] = per_dp[0]
        facts.setdefault("max_running_requests", per_dp[0])
    memory = states[0].get("memory_usage") if states else None
    if isinstance(memory, dict):
        facts["memory_usage_gb"] = memory
        if memory.get("token_capacity") is not None:
            facts.setdefault("max_total_num_tokens", memory["token_capacity"])
    return facts


def startup_record(server: EngineServer, seconds_to_ready: float) -> dict[str, Any]:
    if server.engine == "vllm":
        return vllm_startup_record(server, seconds_to_ready)
    info = server_info(server)
    facts: dict[str, Any] = dict(adapter_for(server.engine).log.startup_facts(tail(server.child.log_path, 400_000)))
    facts["seconds_to_ready"] = round(seconds_to_ready, 3)
    facts.update(server_info_facts(info))  # never a null over the log's value
    facts["emulated"] = bool(info.get("emulated") or info.get("benchdeck_emulator"))
    facts["server_info"] = info
    return facts


def vllm_startup_record(server: EngineServer, seconds_to_ready: float) -> dict[str, Any]:
    """A vLLM server's facts come from its log (domain/engines/vllm_log.py): it has no
    /server_info outside development mode.  ``emulated`` is left to the attempt, which
    knows the plan (a real vLLM's log never says so)."""
    facts: dict[str, Any] = dict(adapter_for("vllm").log.startup_facts(tail(server.child.log_path, 400_000)))
    facts["seconds_to_ready"] = round(seconds_to_ready, 3)
    facts["engine"] = "vllm"
    return facts
