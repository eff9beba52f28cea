"""``python -m runner diagnose FILE [--json]``: what benchdeck reads from an engine server's output.

The file is a server log, a ``/metrics`` text or a ``/server_info`` JSON, told apart by its
content.  The report is exactly what the runner extracts, through the runner's own code:

* a log: the failure (``runner/logparse.py::find_failure``: kind, whether a retry may help,
  the quoted line, the hint) or none, the start-up stage reached and the start-up facts;
* metrics: every gauge series with its labels, and the totals the runner records for a
  point (SGLang's ``MetricNames.totals``, ``domain/engines/sglang_metrics.py``);
* server info: the facts ``runner/server_process.py::server_info_facts`` keeps.

Operators run it on a failed run's server log; tests run it on real SGLang output.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from domain.core.i18n import t
from domain.engines.server_metrics import GaugeSeries
from domain.engines.sglang_metrics import SGLANG_METRICS
from runner.logparse import Diagnosis, find_failure, startup_facts, startup_stage
from runner.server_process import server_info_facts
from runner.telemetry import gauge_series

# One Prometheus sample line: name{labels} value [timestamp].
_SAMPLE = re.compile(r"^[A-Za-z_:][\w:]*(?:\{.*\})?\s+(?:[-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?|NaN|[-+]?Inf)(?:\s+-?\d+)?$")
_COMMENT = re.compile(r"^# (?:HELP|TYPE) \S+")
# Capacity gauges SGLang exports once at start-up: the same facts a start-up log gives.
_CAPACITY_GAUGES = {"sglang:max_total_num_tokens": "max_total_num_tokens",
                    "sglang:max_running_requests": "max_running_requests",
                    "sglang:max_prefill_tokens": "max_prefill_tokens", "sglang:context_len": "context_len"}


def _server_info(text: str) -> dict[str, Any] | None:
    if not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _prometheus_lines(text: str) -> list[str]:
    """The well-formed exposition lines (a copy cut mid-line loses only that line)."""
    return [line for line in text.splitlines() if _COMMENT.match(line) or _SAMPLE.match(line.strip())]


def _is_metrics(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    samples = [line for line in lines if _SAMPLE.match(line.strip())]
    return bool(samples) and len(_prometheus_lines(text)) >= 0.9 * len(lines)


def input_kind(text: str) -> str:
    """``server_info`` (a JSON object), ``metrics`` (Prometheus text) or ``log``."""
    if _server_info(text) is not None:
        return "server_info"
    return "metrics" if _is_metrics(text) else "log"


def failure_json(diagnosis: Diagnosis | None) -> dict[str, Any] | None:
    if diagnosis is None:
        return None
    return {"kind": diagnosis.kind.value, "retryable": diagnosis.retryable, "line": diagnosis.line,
            "hint": diagnosis.hint}


def _json_number(value: float) -> float | int:
    """A gauge's value as JSON shows it: an integral value as an int."""
    return int(value) if float(value).is_integer() else value


def _series_json(series: GaugeSeries) -> dict[str, Any]:
    return {"name": series.name, "labels": series.labels, "value": _json_number(series.value)}


def _log_report(text: str) -> dict[str, Any]:
    return {"failure": failure_json(find_failure(text)), "stage": startup_stage(text), "facts": startup_facts(text)}


def _metrics_report(text: str) -> dict[str, Any]:
    clean = "\n".join(_prometheus_lines(text)) + "\n"
    series = gauge_series(clean, only_kept=False)
    facts = {fact: _json_number(s.value) for s in reversed(series) if (fact := _CAPACITY_GAUGES.get(s.name))}
    totals = {metric: _json_number(value) for metric, value in SGLANG_METRICS.totals(series).items()}
    return {"failure": None, "stage": None, "facts": facts, "series": [_series_json(s) for s in series],
            "summary": totals}


def diagnose_text(text: str) -> dict[str, Any]:
    """The report for one file's text, as ``--json`` prints it."""
    kind = input_kind(text)
    if kind == "server_info":
        report = {"failure": None, "stage": None, "facts": server_info_facts(_server_info(text) or {})}
    else:
        report = _metrics_report(text) if kind == "metrics" else _log_report(text)
    return {"input_kind": kind, **report}


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{key}="{value}"' for key, value in labels.items()) + "}"


def _failure_lines(failure: dict[str, Any] | None) -> list[str]:
    if failure is None:
        return ["failure: none"]
    retry = "retried" if failure["retryable"] else "never retried"
    return [f"failure: {failure['kind']} ({retry})", f"  line: {failure['line']}", f"  hint: {failure['hint']}"]


def render(report: dict[str, Any]) -> str:
    """The report for a person: plain lines, the same content as the JSON."""
    lines = [f"input: {report['input_kind']}", *_failure_lines(report["failure"])]
    if report["stage"] is not None:
        lines.append(f"start-up stage reached: {report['stage']}")
    lines += ["facts:", *(f"  {key}: {value}" for key, value in report["facts"].items())]
    if report["input_kind"] == "metrics":
        lines += ["gauges per series:",
                  *(f"  {s['name']}{_labels(s['labels'])} {s['value']}" for s in report["series"])]
        lines += ["as the runner records them (counts summed over DP replicas, ratios averaged):",
                  *(f"  {metric}: {value}" for metric, value in report["summary"].items())]
    return "\n".join(lines)


def main(path: str, *, as_json: bool, lang: str) -> int:
    """The ``diagnose`` subcommand: 0 when the file was read, 1 when it could not be."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        print(t("cli.cannot_read", lang, path=path, detail=exc), file=sys.stderr)
        return 1
    report = diagnose_text(text)
    print(json.dumps(report, ensure_ascii=False, default=str) if as_json else render(report))
    return 0
