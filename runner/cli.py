"""``python -m runner``: submit, check, status, the daemon (serve, work --burst), backup, restore and diagnose.

Every user error ends in a readable message and exit 1, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from db import DbBusy, Store
from domain.core.access import Action, PermissionDenied, local_actor, require
from domain.core.i18n import t
from domain.core.settings import Settings, get_settings
from domain.plan.checks import CheckReport, check_plan
from domain.plan.plan_io import PlanError, load_plan
from domain.plan.quotas import QuotaExceeded
from domain.plan.run_plan import RunPlan

if TYPE_CHECKING:
    from runner.daemon import Runner

EXIT_OK = 0
EXIT_INVALID = 1


def _load(path: str, settings: Settings, lang: str) -> RunPlan | None:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(t("cli.cannot_read", lang, path=path, detail=exc), file=sys.stderr)
        return None
    try:
        return load_plan(text, max_bytes=settings.max_plan_bytes)
    except PlanError as exc:
        print(t("cli.plan_invalid", lang, path=path), file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return None


def _print_report(report: CheckReport, lang: str) -> None:
    print(report.detail)
    extra = [w for w in report.warnings if w not in report.detail]
    if extra:
        print(f"{t('cli.warnings', lang)}:")
        for line in extra:
            print(f"  - {line}")


def cmd_check(args: argparse.Namespace, settings: Settings) -> int:
    plan = _load(args.plan, settings, args.lang)
    if plan is None:
        return EXIT_INVALID
    report = check_plan(plan, settings, args.lang)
    _print_report(report, args.lang)
    if report.errors:
        return EXIT_INVALID
    print(t("cli.plan_ok", args.lang, points=len(plan.points()), requests=plan.total_requests()))
    return EXIT_OK


def cmd_submit(args: argparse.Namespace, settings: Settings) -> int:
    plan = _load(args.plan, settings, args.lang)
    if plan is None:
        return EXIT_INVALID
    report = check_plan(plan, settings, args.lang)
    if report.errors:
        _print_report(report, args.lang)
        return EXIT_INVALID
    store = Store.from_settings(settings)
    store.migrate()
    try:
        run_id, created = store.submit_run(plan, submitted_by=local_actor(settings.local_role, via="cli"),
                                           idempotency_key=args.idempotency_key)
    except QuotaExceeded as exc:
        print(exc.text(args.lang), file=sys.stderr)
        return EXIT_INVALID
    except PermissionDenied as exc:
        print(t("cli.denied", args.lang, detail=str(exc)), file=sys.stderr)
        return EXIT_INVALID
    print(run_id)
    print(t("cli.queued" if created else "cli.already", args.lang, run_id=run_id), file=sys.stderr)
    return EXIT_OK


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    store = Store.from_settings(settings)
    store.migrate()
    runs = store.list_runs(limit=args.limit)
    if not runs:
        print(t("cli.no_runs", args.lang))
        return EXIT_OK
    header = f"{'id':>5}  {'status':<10} {'source':<9} {'points':>7}  {'gpu':<8} {'model':<28} name"
    print(header)
    for run in runs:
        points = f"{run.points_done}/{run.total_points}"
        gpu = f"{run.gpu_count}x{run.gpu_type}"
        failure = f" ({run.failure_kind})" if run.failure_kind else ""
        print(
            f"{run.id:>5}  {run.status:<10} {run.source:<9} {points:>7}  {gpu:<8} "
            f"{(run.model or '?')[:28]:<28} {run.name}{failure}"
        )
    return EXIT_OK


def cmd_work(args: argparse.Namespace, settings: Settings) -> int:
    from runner.daemon import configure_logging

    configure_logging()
    runner = runner_class(settings)(settings)
    runner.install_signal_handlers()
    return runner.work(burst=args.burst)


def runner_class(settings: Settings) -> type[Runner]:
    """``RayRunner`` with BENCHDECK_EXECUTOR=ray, else the local ``Runner``; imported here,
    not at the top, so that commands other than ``serve`` and ``work`` load neither."""
    if settings.executor == "ray":
        from runner.ray_executor import RayRunner

        return RayRunner
    from runner.daemon import Runner

    return Runner


def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    """The compare page's exports for scripting: table (CSV, Markdown), charts (PNG, SVG), deck."""
    from domain.results import analysis
    from domain.results.comparison import comparison_with_settings
    from domain.results.frames import points_frame
    from domain.slides import deck, tables

    store = Store.from_settings(settings)
    store.migrate()
    run_ids = [args.baseline, *args.runs]
    frame = points_frame(p.as_dict() for p in store.points_for_comparison(run_ids))
    missing = [r for r in run_ids if frame.empty or r not in set(frame["run_id"])]
    if missing:
        print(t("cli.export_missing", args.lang, runs=", ".join(map(str, missing))), file=sys.stderr)
        return EXIT_INVALID
    c = comparison_with_settings(frame, args.baseline, args.runs, args.lang, settings,
                                 intended_to_differ=frozenset(args.intended or []))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"compare-{args.baseline}-" + "-".join(map(str, args.runs))
    table = analysis.wide_table(c.compare, args.lang)
    written = []
    for fmt in args.format:
        if fmt == "csv":
            written.append(_write(out / f"{stem}.csv", tables.table_csv(table, c.caveat)))
        elif fmt == "md":
            written.append(_write(out / f"{stem}.md", tables.table_markdown(table, c.caveat, args.lang).encode()))
        elif fmt == "pptx":
            written.append(_write(out / f"{stem}.pptx", deck.comparison_deck(c)))
        else:
            for index, (_title, chart) in enumerate(deck.standard_charts(c), start=1):
                data = deck.chart_png(chart, c.caveat) if fmt == "png" else deck.chart_svg(chart, c.caveat).encode()
                written.append(_write(out / f"{stem}-chart{index}.{fmt}", data))
    for line in c.caveat:
        print(f"# {line}", file=sys.stderr)
    print("\n".join(str(p) for p in written))
    return EXIT_OK


def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    """Import bench_serving JSONL or an AIPerf export; what the file does not say, the
    options state; the rest stays unknown."""
    from pydantic import ValidationError

    from db import DuplicateImport
    from db.imported_runs import import_file
    from domain.importer.conditions import ImportConditions

    gpu_type, gpu_count = _gpu(args.gpu) if args.gpu else (None, None)
    try:
        # --sglang-version names the engine too: the pasted flags are then checked against it.
        engine = args.engine or ("sglang" if args.sglang_version else None)
        stated = ImportConditions(model=args.model, gpu_type=gpu_type, gpu_count=gpu_count,
                                  engine=engine,  # type: ignore[arg-type]  # argparse choices above
                                  engine_version=args.sglang_version, server_command=args.server_args,
                                  dataset=args.dataset, warmup=args.warmup)
    except (ValidationError, ValueError) as exc:
        print(t("cli.import_bad_statement", args.lang, detail=exc), file=sys.stderr)
        return EXIT_INVALID
    path = Path(args.file)
    if not path.is_file():
        print(t("cli.cannot_read", args.lang, path=path, detail="no such file"), file=sys.stderr)
        return EXIT_INVALID
    store = Store.from_settings(settings)
    store.migrate()
    try:
        result = import_file(store, path, stated, actor=local_actor(settings.local_role, via="cli"),
                             file_name=path.name)
    except DuplicateImport as exc:
        print(t("cli.import_duplicate", args.lang, runs=", ".join(map(str, exc.run_ids))), file=sys.stderr)
        return EXIT_INVALID
    except PermissionDenied as exc:
        print(t("cli.denied", args.lang, detail=str(exc)), file=sys.stderr)
        return EXIT_INVALID
    for problem in result.preview.problems:
        print(f"  line {problem.line}: {problem.text(args.lang)}", file=sys.stderr)
    for skipped in result.skipped:
        print(f"  line {skipped['line']}: {skipped['code']}", file=sys.stderr)
    print(" ".join(map(str, result.run_ids)))
    print(t("cli.imported", args.lang, runs=len(result.run_ids), points=result.points), file=sys.stderr)
    return EXIT_OK if result.run_ids else EXIT_INVALID


def _ops(key: str, lang: str, **params: object) -> str:
    """Backup/restore messages (domain/core/i18n/ops.yaml, keys ``cli.ops_<reason>``)."""
    return t(f"cli.ops_{key}", lang, **params)


def _print_counts(counts: dict[str, int]) -> None:
    for table, rows in counts.items():
        print(f"  {table:<22} {rows:>10}")


def cmd_backup(args: argparse.Namespace, settings: Settings) -> int:
    """A consistent copy of the DB while the runner keeps writing (db/backup.py says how)."""
    from db.backup import BackupError, backup

    try:
        report = backup(settings.db, Path(args.dest), lock_timeout_s=settings.lock_timeout_s, force=args.force)
    except BackupError as exc:
        print(_ops(exc.reason, args.lang, detail=exc.detail, **exc.params), file=sys.stderr)
        return EXIT_INVALID
    print(_ops("backup_done", args.lang, path=report.path, mb=report.size_bytes / 1e6, seconds=report.seconds,
               held=report.lock_held_s))
    _print_counts(report.row_counts)
    return EXIT_OK


def cmd_restore(args: argparse.Namespace, settings: Settings) -> int:
    """Replace the DB with a backup; refused while a runner heartbeats or holds a lease."""
    from db.backup import BackupError, restore

    actor = local_actor(settings.local_role, via="cli")
    try:
        require(actor, Action.RESTORE)
    except PermissionDenied as exc:
        print(_ops("restore_needs_admin", args.lang, detail=str(exc)), file=sys.stderr)
        return EXIT_INVALID
    try:
        report = restore(settings.db, Path(args.src), lock_timeout_s=settings.lock_timeout_s,
                         live_window_s=settings.lease_s, force=args.force)
    except BackupError as exc:
        print(_ops(exc.reason, args.lang, detail=exc.detail, **exc.params), file=sys.stderr)
        return EXIT_INVALID
    # Into the restored file: the log that goes on is the backup's, so the restore is its next entry.
    Store.from_settings(settings).audit(actor.name, "restore", None, {
        "source": str(args.src), "replaced_file_kept_as": str(report.kept or ""), "role": actor.role, "via": "cli"})
    print(_ops("restore_done", args.lang, src=args.src, kept=report.kept or "-"))
    _print_counts(report.row_counts)
    return EXIT_OK


def cmd_diagnose(args: argparse.Namespace, settings: Settings) -> int:
    from runner.diagnose import main as diagnose  # its parsers pull in requests and pyarrow: only when asked

    return diagnose(args.file, as_json=args.json, lang=args.lang)


def _gpu(text: str) -> tuple[str, int]:
    """``H200x8`` / ``8xH200`` → ("H200", 8)."""
    parts = text.lower().split("x")
    if len(parts) == 2 and parts[0].isdigit():
        return text.split("x", 1)[1] if "x" in text else text, int(parts[0])
    if len(parts) == 2 and parts[1].isdigit():
        return text.rsplit("x", 1)[0], int(parts[1])
    raise argparse.ArgumentTypeError(f"GPU must look like H200x8, got {text!r}")


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


Command = Callable[[argparse.Namespace, Settings], int]


def build_parser(settings: Settings) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m runner", description="benchdeck runner and CLI")
    parser.add_argument("--lang", choices=["ja", "en"], default=settings.language, help="output language")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="validate a plan and print errors and warnings")
    check.add_argument("plan", help="plan YAML file")
    check.set_defaults(func=cmd_check)
    submit = sub.add_parser("submit", help="validate a plan and queue a run; prints its id")
    submit.add_argument("plan", help="plan YAML file")
    submit.add_argument("--idempotency-key", help="submitting again with the same key queues nothing new")
    submit.set_defaults(func=cmd_submit)
    status = sub.add_parser("status", help="list runs and their state")
    status.add_argument("--limit", type=int, default=50)
    status.set_defaults(func=cmd_status)
    serve = sub.add_parser("serve", help="the runner daemon: claim and execute runs until stopped")
    serve.set_defaults(func=cmd_work, burst=False)
    work = sub.add_parser("work", help="execute queued runs; with --burst, drain the queue and exit")
    work.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    work.set_defaults(func=cmd_work)
    exp = sub.add_parser("export", help="write the comparison of runs as CSV / Markdown / PNG / SVG / PPTX")
    exp.add_argument("--baseline", type=int, required=True, help="the baseline run id")
    exp.add_argument("--runs", type=_id_list, required=True, help="comma-separated run ids to compare")
    exp.add_argument("--intended", action="append", help="a condition intended to differ (repeatable)")
    exp.add_argument("--format", action="append", choices=["csv", "md", "png", "svg", "pptx"],
                     default=None, help="repeatable; default: csv and md")
    exp.add_argument("--out", default=".", help="output directory")
    exp.set_defaults(func=cmd_export)
    imp = sub.add_parser("import", help="import bench_serving JSONL (any SGLang version) or an AIPerf export")
    imp.add_argument("file")
    imp.add_argument("--model", help="the model, if the file does not say")
    imp.add_argument("--gpu", help="GPU type x count, e.g. H200x8")
    imp.add_argument("--engine", choices=["sglang", "emulator", "vllm", "trt-llm", "dynamo", "other"],
                     help="the engine, if the file does not say")
    imp.add_argument("--sglang-version", help="the engine version, e.g. 0.5.23")
    imp.add_argument("--server-args", help="the server command line, pasted (parsed and validated)")
    imp.add_argument("--dataset", help="the dataset used")
    imp.add_argument("--warmup", type=int, help="warmup requests used")
    imp.set_defaults(func=cmd_import)
    diag = sub.add_parser("diagnose", help="what benchdeck reads from a server log, a /metrics text or /server_info")
    diag.add_argument("file", help="a server log, a /metrics text or a /server_info JSON (told apart by content)")
    diag.add_argument("--json", action="store_true", help="print one JSON object")
    diag.set_defaults(func=cmd_diagnose)
    _add_ops_commands(sub)
    return parser


def _add_ops_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bak = sub.add_parser("backup", help="write a consistent, verified copy of the DB (safe while the runner runs)")
    bak.add_argument("dest", help="the backup file to write")
    bak.add_argument("--force", action="store_true", help="overwrite DEST if it exists")
    bak.set_defaults(func=cmd_backup)
    res = sub.add_parser("restore", help="replace the DB with a backup; the old file is kept beside it")
    res.add_argument("src", help="a backup written by `backup`")
    res.add_argument("--force", action="store_true", help="restore even though a runner looks live")
    res.set_defaults(func=cmd_restore)


def _id_list(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of run ids: {text!r}") from None
    if not ids:
        raise argparse.ArgumentTypeError("give at least one run id")
    return ids


def main(argv: Sequence[str] | None = None) -> int:
    settings = get_settings()
    args = build_parser(settings).parse_args(argv)
    func: Command = args.func
    if getattr(args, "format", "unset") is None:
        args.format = ["csv", "md"]
    try:
        return func(args, settings)
    except DbBusy as exc:
        print(t("cli.busy", args.lang, detail=exc), file=sys.stderr)
        return EXIT_INVALID
