"""``python -m runner doctor [--json] [--env-file FILE] [--backup-dir DIR] [--bundle FILE]``:
the runner host checked as a whole before (or after) the first real run.

Each check is one ``Finding``: a group (settings, interpreters, gpu, models, ports, disk,
files, auth), a name, a status (ok, warn, fail, skip), a message from the ja/en catalogue
(``doctor.*`` in domain/core/i18n/doctor.yaml) and the facts it read.  Any ``fail`` makes
the exit status 1.  The checks themselves live in runner/doctor_checks.py and
runner/doctor_gpu.py; ``--bundle`` (runner/doctor_bundle.py) writes them with what a
helper elsewhere needs into one archive.
"""

from __future__ import annotations

import json
import platform
import socket
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from domain.core.i18n import t

Status = Literal["ok", "warn", "fail", "skip"]
EXIT_OK = 0
EXIT_FAILED = 1
_MARKS = {"ok": "OK  ", "warn": "WARN", "fail": "FAIL", "skip": "SKIP"}


@dataclass
class Finding:
    """One check's verdict; ``key`` and ``context`` make its message in either language."""

    group: str
    name: str
    status: Status
    key: str
    context: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)

    def message(self, lang: str) -> str:
        return t(f"doctor.{self.key}", lang, **self.context)

    def as_json(self, lang: str) -> dict[str, Any]:
        data = asdict(self)
        data["message"] = self.message(lang)
        return data


@dataclass
class Report:
    findings: list[Finding]
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @property
    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "fail"]

    def as_json(self, lang: str) -> dict[str, Any]:
        return {"ok": not self.failed, "host": socket.gethostname(), "platform": platform.platform(),
                "started_at": self.started_at, "failed": [f"{f.group}.{f.name}" for f in self.failed],
                "checks": [f.as_json(lang) for f in self.findings]}

    def render(self, lang: str) -> str:
        lines = [t("doctor.heading", lang, host=socket.gethostname())]
        for finding in self.findings:
            lines.append(f"[{_MARKS[finding.status]}] {finding.group}.{finding.name}: {finding.message(lang)}")
        summary = "doctor.summary_failed" if self.failed else "doctor.summary_ok"
        lines.append(t(summary, lang, n=len(self.failed), names=", ".join(f"{f.group}.{f.name}" for f in self.failed)))
        return "\n".join(lines)

    def dumps(self, lang: str) -> str:
        return json.dumps(self.as_json(lang), indent=1, ensure_ascii=False, default=str)
