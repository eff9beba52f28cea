"""``python -m runner doctor``: run every check (runner/doctor_checks.py, runner/doctor_gpu.py),
print the report (or ``--json``), write ``--bundle``; exit 1 when a check failed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from domain.core.i18n import t
from domain.core.settings import Settings
from runner import doctor_checks as checks
from runner.doctor import EXIT_FAILED, EXIT_OK, Finding, Report
from runner.doctor_gpu import gpu_findings

DEFAULT_ENV_FILE = Path("/etc/benchdeck/env")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doc = sub.add_parser("doctor", help="check the runner host as a whole (settings, interpreters, GPUs, models, "
                                        "ports, disks, files, auth); exit 1 when a check fails")
    doc.add_argument("--json", action="store_true", help="print one JSON object")
    doc.add_argument("--env-file", type=Path, help=f"the env file the units read (default {DEFAULT_ENV_FILE} "
                                                   "where it exists)")
    doc.add_argument("--backup-dir", type=Path, help="where backups are written (its free space is checked)")
    doc.add_argument("--bundle", type=Path, metavar="FILE", help="write a .tar.gz a helper elsewhere can read")
    doc.add_argument("--tiny-run", type=Path, metavar="MODEL_DIR",
                     help="launch the smallest model under MODEL_DIR on one GPU with one tiny bench point, timing "
                          "each start-up stage (needs a GPU and BENCHDECK_SGLANG_PYTHON)")
    doc.add_argument("--emulated", action="store_true",
                     help="with --tiny-run: the emulator stands in for SGLang (no GPU needed; proves the runner, "
                          "the bench client and the model's files, not SGLang or the GPUs)")
    doc.set_defaults(func=None, doctor=True)


def env_file_of(args: argparse.Namespace) -> Path | None:
    if args.env_file is not None:
        return Path(args.env_file)
    return DEFAULT_ENV_FILE if DEFAULT_ENV_FILE.exists() else None


def collect(settings: Settings | None, error: ValidationError | None, args: argparse.Namespace) -> Report:
    """Every check; with unreadable settings only the settings and the GPUs (with defaults)."""
    findings = checks.settings_findings(settings, error) + checks.env_file_findings(env_file_of(args))
    if settings is None:
        return Report(findings + gpu_findings(Settings.model_construct()))
    findings += gpu_findings(settings)
    findings += checks.interpreter_findings(settings)
    findings += checks.model_dir_findings(settings)
    findings += checks.port_findings(settings) + checks.disk_findings(settings, args.backup_dir)
    findings += checks.ownership_findings(settings) + checks.auth_findings(settings)
    return Report(findings + tiny_findings(settings, args))


def tiny_findings(settings: Settings, args: argparse.Namespace) -> list[Finding]:
    """``--tiny-run`` last: it launches a server, so it runs after every check that could explain its failure."""
    if args.tiny_run is None:
        return [Finding("tiny_run", "launch", "skip", "tiny_skip")]
    from runner.doctor_tiny import tiny_run_findings

    return tiny_run_findings(Path(args.tiny_run), settings, args.emulated)


def run(args: argparse.Namespace, settings: Settings | None, error: ValidationError | None) -> int:
    report = collect(settings, error, args)
    print(report.dumps(args.lang) if args.json else report.render(args.lang))
    if args.bundle is not None:
        from runner.doctor_bundle import write_bundle

        path = write_bundle(Path(args.bundle), report, settings, args.lang)
        print(t("doctor.bundle_written", args.lang, path=path), file=sys.stderr)
    return EXIT_FAILED if report.failed else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """The doctor alone (``python -m runner doctor`` comes here first, runner/__main__.py):
    it imports neither DuckDB nor pandas nor pyarrow, so it also runs, and says what is
    wrong, on a host whose app environment is only half installed."""
    from domain.core.settings import get_settings

    try:
        settings, error = get_settings(), None
    except ValidationError as exc:
        settings, error = None, exc
    parser = argparse.ArgumentParser(prog="python -m runner", description="benchdeck runner doctor")
    parser.add_argument("--lang", choices=["ja", "en"], default=settings.language if settings else "ja")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(argv), settings, error)
