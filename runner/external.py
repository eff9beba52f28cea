"""``engine: external`` (issue 18): benchmark a server benchdeck did not start.

The plan names an endpoint an administrator listed in BENCHDECK_EXTERNAL_ENDPOINTS; the
runner looks the name up in its own list again before any request (the list may change
between submit and claim) and fails the attempt as bad_args when it is gone.  Then:

* nothing is launched, and teardown stops nothing: :class:`ExternalDeployment` has no
  members, so the attempt's teardown (``AttemptExecution._stop_servers``) and the daemon's
  log tail pass it by;
* readiness is ``GET <base_url>/v1/models`` answering 200 within
  BENCHDECK_STARTUP_TIMEOUT_S (the OpenAI-compatible API is all benchdeck may assume;
  ``/health`` is SGLang's and vLLM's, not every server's);
* the start-up facts are what ``/v1/models`` says (served ids, ``max_model_len`` where
  the server gives it) beside ``declared``: the plan's word for engine, version, model,
  GPUs and topology, which benchdeck cannot check;
* server telemetry comes from the endpoint's ``metrics_url`` with the reader of the
  declared engine (SGLang's names or vLLM's); any other engine, or no URL, is recorded as
  unavailable with the reason.  GPU telemetry is never read: the runner cannot tell which
  GPUs serve the endpoint, so it records them as unavailable rather than read its own;
* liveness while a point runs probes ``/v1/models`` (any answer below 500 is alive): it
  is the one path every OpenAI-compatible server has, and a server that stopped
  answering it ends the point early instead of at the point timeout.  It says the HTTP
  front is up, not that a scheduler behind it moves; that is all an outside observer can
  see.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from domain.core.i18n import t
from domain.core.settings import ExternalEndpoint, Settings
from domain.core.states import FailureKind
from domain.engines import adapter_for, families
from domain.plan.run_plan import RunPlan
from runner import server_process
from runner import topology as topo
from runner.bench_client import BenchTokenizer, TokenizerUnavailable, bench_tokenizer, describe_tokenizer
from runner.telemetry import Sample, metrics_reader

MODELS_PATH = "/v1/models"
PROBE_TIMEOUT_S = 5.0
GPU_NOT_HERE = ("not on this host: an external endpoint's GPUs are not this runner's to read (benchdeck did "
                "not start the server and cannot tell which GPUs serve it)")
# The declared engines whose /metrics benchdeck can read, and with which reader.
Reader = Callable[[str, float], list[Sample]]
METRICS_READERS: dict[str, Reader] = {
    family: metrics_reader(adapter_for(family).metrics) for family in families() if adapter_for(family).metrics.kept
}
SOURCE = "server"


def endpoint_for(plan: RunPlan, settings: Settings) -> ExternalEndpoint:
    """The endpoint this runner lists under the plan's name; bad_args (never retried: the
    same list refuses it again) when it lists none, before any request is sent."""
    assert plan.external is not None  # noqa: S101 - external plans only
    endpoint = settings.external_endpoint(plan.external.endpoint)
    if endpoint is None:
        raise server_process.AttemptFailure(
            FailureKind.BAD_ARGS, t("runner.external_unlisted", "en", endpoint=plan.external.endpoint),
            "an administrator lists it in BENCHDECK_EXTERNAL_ENDPOINTS on the runner host")
    return endpoint


def bench_tokenizer_for(plan: RunPlan, endpoint: ExternalEndpoint | None, toy_dir: Path) -> BenchTokenizer:
    """The tokenizer the client counts and draws prompts with: the endpoint's listed
    ``tokenizer_dir`` (the served model's, on this host), else the plan's model as a local
    directory, as for a launched engine (runner/bench_client.py; nothing is downloaded)."""
    if endpoint is not None and endpoint.tokenizer_dir is not None:
        if not endpoint.tokenizer_dir.is_dir():
            raise TokenizerUnavailable(f"the external endpoint {endpoint.name}'s tokenizer_dir "
                                       f"{str(endpoint.tokenizer_dir)!r} is not a directory on this host")
        return describe_tokenizer(endpoint.tokenizer_dir, "endpoint")
    return bench_tokenizer(plan, toy_dir)


def models_answer(base_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[int | None, dict[str, Any]]:
    """GET <base_url>/v1/models: (status, JSON body); (None, {}) when nothing answers."""
    try:
        response = requests.get(f"{base_url}{MODELS_PATH}", timeout=timeout_s)
    except requests.RequestException:
        return None, {}
    try:
        body = response.json()
    except ValueError:
        body = {}
    return response.status_code, body if isinstance(body, dict) else {}


@dataclass
class ExternalDeployment(topo.Deployment):
    """The endpoint where a launched topology would be: no members (nothing to stop, no
    log), the endpoint's URL as the front, its /metrics as the only telemetry."""

    endpoint: ExternalEndpoint = field(kw_only=True)

    @property
    def base_url(self) -> str:
        return self.endpoint.base_url

    @property
    def alive(self) -> bool:
        """No process of ours to watch: alive while /v1/models answers below 500."""
        status, _ = models_answer(self.endpoint.base_url)
        return status is not None and status < 500

    def crash_failure(self, *, default: FailureKind, what: str) -> server_process.AttemptFailure:
        return server_process.AttemptFailure(
            default, f"{what}: the external endpoint {self.endpoint.name} ({self.endpoint.base_url}) does not "
            f"answer {MODELS_PATH}",
            "benchdeck did not start this server and cannot read its log: ask whoever runs it")

    def log_tail(self, max_bytes: int = 16_384) -> str:
        return ""

    def stop(self, grace_s: float) -> list[int]:
        return []  # not ours to stop

    def metrics_urls(self) -> list[tuple[str, str]]:
        base = self.endpoint.metrics_base
        return [] if base is None else [(self.endpoint.name, base)]

    def describe(self) -> dict[str, Any]:
        return {"kind": "external", "endpoint": self.endpoint.name, "base_url": self.endpoint.base_url,
                "metrics_url": self.endpoint.metrics_url}


def wait_ready(endpoint: ExternalEndpoint, *, budget_s: float, cancelled: Callable[[], bool]) -> float:
    """Seconds until /v1/models answered 200; startup_timeout when it did not in ``budget_s``."""
    start = time.monotonic()
    last: int | None = None
    while True:
        if cancelled():
            raise server_process.AttemptCancelled("cancelled while waiting for the external endpoint")
        last, _ = models_answer(endpoint.base_url, timeout_s=min(PROBE_TIMEOUT_S, max(budget_s, 0.1)))
        if last == 200:
            return time.monotonic() - start
        if time.monotonic() - start > budget_s:
            said = "no answer" if last is None else f"HTTP {last}"
            raise server_process.AttemptFailure(
                FailureKind.STARTUP_TIMEOUT,
                f"timeout: the external endpoint {endpoint.name} ({endpoint.base_url}) did not answer {MODELS_PATH} "
                f"with 200 within {budget_s:.0f} s (BENCHDECK_STARTUP_TIMEOUT_S); last: {said}",
                "benchdeck does not start external servers: check that it is up and reachable from the runner host")
        time.sleep(0.25)


def startup_facts(plan: RunPlan, endpoint: ExternalEndpoint, seconds_to_ready: float) -> dict[str, Any]:
    """What /v1/models says, and what the plan declares (marked ``declared``)."""
    assert plan.external is not None  # noqa: S101 - external plans only
    _, body = models_answer(endpoint.base_url)
    cards = [card for card in body.get("data") or [] if isinstance(card, dict)]
    served = [str(card.get("id")) for card in cards if card.get("id") is not None]
    facts: dict[str, Any] = {
        "engine": "external", "emulated": False, "seconds_to_ready": round(seconds_to_ready, 3),
        "ready_check": MODELS_PATH, "served_models": served,
        # The client asks /v1/models for its model too (no --model): the first id is what it sends.
        "served_model_is_declared": plan.model in served,
        "endpoint": {"name": endpoint.name, "base_url": endpoint.base_url, "metrics_url": endpoint.metrics_url},
        "declared": {**plan.external.declared(), "model": plan.model, "gpu_type": plan.gpu.type,
                     "gpu_count": plan.gpu.count, "topology": plan.topology.snapshot()},
        "v1_models": body,
    }
    limits = [card["max_model_len"] for card in cards if isinstance(card.get("max_model_len"), int)]
    if limits:
        facts["max_model_len"] = limits[0]
    return facts


def samplers_for(plan: RunPlan, deployment: ExternalDeployment) -> list[tuple[str, Reader]]:
    """(metrics base URL, reader) for the endpoint's /metrics, read as the declared engine's."""
    assert plan.external is not None  # noqa: S101 - external plans only
    reader = METRICS_READERS.get(plan.external.engine)
    if reader is None:
        return []
    return [(url, reader) for _name, url in deployment.metrics_urls()]


def unavailable_rows(plan: RunPlan, endpoint: ExternalEndpoint) -> list[dict[str, Any]]:
    """The telemetry a point of this run cannot have, each with its reason (as the GPU's
    'unavailable' row of a host without NVML)."""
    assert plan.external is not None  # noqa: S101 - external plans only
    rows = [_unavailable("gpu", GPU_NOT_HERE)]
    if endpoint.metrics_url is None:
        rows.append(_unavailable(SOURCE, f"the external endpoint {endpoint.name} lists no metrics_url"))
    elif plan.external.engine not in METRICS_READERS:
        rows.append(_unavailable(SOURCE, f"declared engine {plan.external.engine}: benchdeck reads only SGLang's "
                                         "and vLLM's /metrics"))
    return rows


def _unavailable(source: str, note: str) -> dict[str, Any]:
    return {"source": source, "device": None, "metric": "unavailable", "n": 0, "mean": None, "p50": None,
            "max": None, "note": note}


def point_conditions(plan: RunPlan) -> dict[str, Any]:
    """What every point of an external run adds to its conditions: the declared facts."""
    assert plan.external is not None  # noqa: S101 - external plans only
    return {"declared": True, "declared_engine": plan.external.engine,
            "declared_version": plan.external.version, "external_endpoint": plan.external.endpoint}
