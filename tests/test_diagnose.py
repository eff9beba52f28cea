"""``python -m runner diagnose`` over real SGLang output: every file of the held-out corpus
(``../shared/reference/real-sglang-output/``, read in place, never copied) gives the verdict
its header line states, and the numbers benchdeck records come out of it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from domain.engines.sglang_metrics import SGLANG_METRICS
from runner.diagnose import diagnose_text, input_kind
from runner.server_process import server_info_facts
from runner.telemetry import gauge_series

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "reference" / "real-sglang-output"
_HEADER = re.compile(r"^#\s*source:.*\bkind: (?P<kind>\S+)\s+expected: (?P<expected>.*)$")
# Headers of decoys whose server stays up (an HTTP handler's exception): no failure expected.
_SERVER_ALIVE = re.compile(r"keeps running|not a scheduler crash|server (?:is )?still alive")
_FAILED_RETRYABLE = {"nccl", "crash_runtime", "pd_disagg"}


def _corpus_files() -> list[Any]:
    if not CORPUS.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{CORPUS} is absent"), id="no-corpus")]
    return [pytest.param(path, id=path.name) for path in sorted(CORPUS.glob("*.txt"))]


def _split(path: Path) -> tuple[str, str, str]:
    """(kind, expected, body): the header line says what a reader should conclude."""
    header, _, body = path.read_text(encoding="utf-8").partition("\n")
    match = _HEADER.match(header)
    assert match, f"{path.name}: no '# source: … kind: … expected: …' header"
    return match["kind"], match["expected"], body


def _diagnose_cli(path: Path, tmp_path: Path) -> dict[str, Any]:
    """The real command on the file without its header line (the command reads whole files)."""
    body = tmp_path / path.name
    body.write_text(_split(path)[2], encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "runner", "diagnose", "--json", str(body)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _first_int(pattern: str, text: str) -> int | None:
    match = re.search(pattern, text)
    return int(match.group(1)) if match else None


def _check_log(kind: str, expected: str, body: str, report: dict[str, Any]) -> None:
    failure = report["failure"]
    if kind in {"startup_ok", "harmless_warning"} or (kind in _FAILED_RETRYABLE and _SERVER_ALIVE.search(expected)):
        assert failure is None, failure
    elif kind.startswith("oom"):
        assert failure and failure["kind"] == "oom" and not failure["retryable"], failure
    elif kind == "bad_args":
        assert failure and failure["kind"] == "bad_args" and not failure["retryable"], failure
    else:
        assert kind in _FAILED_RETRYABLE, f"unknown kind {kind}"
        assert failure and failure["retryable"] and failure["kind"] not in {"oom", "bad_args"}, failure
        assert failure["kind"] == "nccl" or kind != "nccl", failure
    if failure:
        assert failure["line"] and failure["line"] in body and failure["hint"]
    if kind == "startup_ok":
        assert report["stage"] == "ready"
    tokens = _first_int(r"max_total_num_tokens=([0-9]+)", body)
    assert report["facts"].get("max_total_num_tokens") == tokens


def _check_metrics(body: str, report: dict[str, Any]) -> None:
    assert report["series"] and report["failure"] is None
    for name, metric in (("sglang:num_running_reqs", "running_reqs"), ("sglang:num_queue_reqs", "queued_reqs")):
        value = re.search(rf"^{name}\{{[^}}]*\}} ([0-9.e+]+)$", body, re.MULTILINE)
        if value:
            assert report["summary"][metric] == float(value.group(1))
    capacity = _first_int(r"(?m)^sglang:max_total_num_tokens\{[^}]*\} ([0-9]+)", body)
    assert report["facts"].get("max_total_num_tokens") == capacity
    assert {"running_reqs", "queued_reqs"} & set(report["summary"]) or capacity, "neither load nor capacity read"


def _check_server_info(body: str, report: dict[str, Any]) -> None:
    info = json.loads(body)
    facts = report["facts"]
    assert report["failure"] is None and facts["max_total_num_tokens"] == info["max_total_num_tokens"]
    effective = [s.get("effective_max_running_requests_per_dp") for s in info.get("internal_states") or []]
    if info.get("max_running_requests") is not None:
        assert facts["max_running_requests"] == info["max_running_requests"]
    elif effective and effective[0] is not None:
        assert facts["max_running_requests"] == effective[0]
    else:
        assert "max_running_requests" not in facts  # null says nothing: a log's value is kept


@pytest.mark.parametrize("path", _corpus_files())
def test_every_real_output_gives_the_verdict_its_header_states(path: Path) -> None:
    kind, expected, body = _split(path)
    report = diagnose_text(body)
    if kind == "metrics":
        assert report["input_kind"] == "metrics"
        _check_metrics(body, report)
    elif kind == "server_info":
        assert report["input_kind"] == "server_info"
        _check_server_info(body, report)
    else:
        assert report["input_kind"] == "log"
        _check_log(kind, expected, body, report)


def _one_per_kind() -> list[Any]:
    files = _corpus_files()
    if not CORPUS.is_dir():
        return files
    seen: dict[str, Any] = {}
    for param in files:
        seen.setdefault(_split(param.values[0])[0], param)
    return list(seen.values())


@pytest.mark.parametrize("path", _one_per_kind())
def test_the_command_prints_the_same_report_as_json(path: Path, tmp_path: Path) -> None:
    report = _diagnose_cli(path, tmp_path)
    assert {"input_kind", "failure", "stage", "facts"} <= set(report)
    assert report == json.loads(json.dumps(diagnose_text(_split(path)[2])))


def test_human_output_names_the_failure_and_the_hint(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("[TP0] Load weight begin. avail mem=139.55 GB\n"
                   "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n")
    done = subprocess.run([sys.executable, "-m", "runner", "diagnose", str(log)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "failure: oom (never retried)" in done.stdout and "mem-fraction-static" in done.stdout
    assert "start-up stage reached: weights" in done.stdout


def test_an_unreadable_file_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "runner", "--lang", "en", "diagnose", str(tmp_path / "none.log")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1 and "cannot read" in done.stderr and "Traceback" not in done.stderr


def test_inputs_are_told_apart_by_content() -> None:
    assert input_kind('{"max_total_num_tokens": 1}') == "server_info"
    assert input_kind("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{tp_rank=\"0\"} 3.0\n") == "metrics"
    assert input_kind("[2026-01-01] Load weight begin. avail mem=1 GB\n{not json\n") == "log"


DP_METRICS = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",moe_ep_rank="0",pp_rank="0",priority="",tp_rank="0"} 10.0
sglang:num_running_reqs{dp_rank="0",engine_type="unified",moe_ep_rank="0",pp_rank="0",priority="1",tp_rank="0"} 4.0
sglang:num_running_reqs{dp_rank="0",engine_type="unified",moe_ep_rank="0",pp_rank="0",priority="2",tp_rank="0"} 6.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",moe_ep_rank="0",pp_rank="0",priority="",tp_rank="4"} 7.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",moe_ep_rank="0",pp_rank="1",priority="",tp_rank="5"} 7.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",pp_rank="0",priority="",tp_rank="0"} 2.0
sglang:num_queue_reqs{dp_rank="1",engine_type="unified",pp_rank="0",priority="",tp_rank="4"} 3.0
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",engine_type="unified",pp_rank="0",tp_rank="0"} 0.5
sglang:token_usage{dp_rank="1",engine_type="unified",pp_rank="0",tp_rank="4"} 0.25
"""


def test_per_rank_and_per_priority_series_are_totalled_not_averaged() -> None:
    """Per-priority breakdowns repeat the priority="" total, and later pipeline stages repeat
    their DP replica: neither is counted again.  Ratios are averaged over replicas."""
    totals = SGLANG_METRICS.totals(gauge_series(DP_METRICS))
    assert totals == {"running_reqs": 17.0, "queued_reqs": 5.0, "token_usage": 0.375}
    report = diagnose_text(DP_METRICS)
    assert len(report["series"]) == 9 and report["summary"]["running_reqs"] == 17


def test_server_info_facts_use_the_effective_limit_and_never_a_null() -> None:
    info = {"max_running_requests": None, "max_total_num_tokens": 20480, "version": "0.5.23",
            "internal_states": [{"effective_max_running_requests_per_dp": 64,
                                 "memory_usage": {"weight": 1.0, "token_capacity": 20480}},
                                {"effective_max_running_requests_per_dp": 64}]}
    facts = server_info_facts(info)
    assert facts["max_running_requests"] == 64 and facts["max_running_requests_per_dp"] == 64
    log_facts: dict[str, Any] = {"max_running_requests": 48}
    log_facts.update(server_info_facts({"max_running_requests": None, "max_total_num_tokens": 1}))
    assert log_facts["max_running_requests"] == 48
