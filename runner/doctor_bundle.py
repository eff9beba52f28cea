"""``runner doctor --bundle FILE``: one .tar.gz that a helper elsewhere can read: the doctor's
report (JSON and text), the settings with secrets redacted, ``pip freeze`` of every Python
environment benchdeck uses, ``nvidia-smi -q`` where it exists, and the newest attempts'
server logs (their tails) each with ``diagnose --json`` of it."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from domain.core.settings import Settings
from runner.diagnose import diagnose_text
from runner.doctor import Report

LAST_ATTEMPTS = 5  # the newest attempt directories bundled
LOG_TAIL_BYTES = 4 * 1024 * 1024  # of each server log: the start-up and the failure are at its ends


def _add(tar: tarfile.TarFile, name: str, data: str | bytes) -> None:
    raw = data.encode() if isinstance(data, str) else data
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(raw), int(time.time()), 0o644
    tar.addfile(info, io.BytesIO(raw))


def _output(argv: list[str], timeout_s: float = 120) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not run {argv[0]}: {exc}\n"
    return done.stdout + (f"\n[stderr]\n{done.stderr}" if done.returncode else "")


def _interpreters(settings: Settings | None) -> dict[str, Path]:
    found = {"app": Path(sys.executable)}
    if settings is not None:
        named = {"sglang": settings.sglang_python, "vllm": settings.vllm_python, "bench": settings.bench_python,
                 "router": settings.router_python}
        found.update({name: path for name, path in named.items() if path is not None})
    return found


def _tail(path: Path) -> bytes:
    with path.open("rb") as handle:
        size = handle.seek(0, 2)
        handle.seek(max(0, size - LOG_TAIL_BYTES))
        return handle.read()


def _attempt_dirs(work_dir: Path) -> list[Path]:
    """The newest attempts' directories: queued runs' and the doctor's own tiny runs'."""
    found = (d for pattern in ("attempt-*", "doctor-tiny-run-*/attempt-*") for d in work_dir.glob(pattern))
    dirs = [d for d in found if d.is_dir()] if work_dir.is_dir() else []
    return sorted(dirs, key=lambda d: d.stat().st_mtime, reverse=True)[:LAST_ATTEMPTS]


def _add_attempts(tar: tarfile.TarFile, work_dir: Path) -> None:
    for attempt in _attempt_dirs(work_dir):
        log = attempt / "server.log"
        if not log.is_file():
            continue
        text, name = _tail(log), attempt.relative_to(work_dir)
        _add(tar, f"attempts/{name}/server.log.tail", text)
        report = diagnose_text(text.decode("utf-8", errors="replace"))
        _add(tar, f"attempts/{name}/diagnose.json", json.dumps(report, indent=1, default=str))


def write_bundle(path: Path, report: Report, settings: Settings | None, lang: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        _add(tar, "doctor.json", report.dumps(lang))
        _add(tar, "doctor.txt", report.render(lang) + "\n")
        facts = next((f.facts for f in report.findings if f.group == "settings" and f.name == "parse"), {})
        _add(tar, "settings.json", json.dumps(facts.get("settings", {}), indent=1, default=str))
        for name, python in _interpreters(settings).items():
            _add(tar, f"pip-freeze/{name}.txt", _output([str(python), "-m", "pip", "freeze", "--all"]))
        smi = shutil.which("nvidia-smi")
        _add(tar, "nvidia-smi-q.txt", _output([smi, "-q"]) if smi else "nvidia-smi not found on this host\n")
        if settings is not None:
            _add_attempts(tar, settings.work_dir)
    return path
