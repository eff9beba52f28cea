"""``python -m runner``: submit, check, status, the daemon (serve, work --burst), backup, restore, diagnose,
estimate, tune and max-concurrency.

Every user error ends in a readable message, never a traceback: exit 2 for an option
whose value cannot be read (as argparse does for its own), exit 1 for everything else.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from db import DbBusy, DbUnusable, Store
from db.bootstrap_memo import keep_memos, memos_for
from db.connection import KEEP_IDLE_S, keep_open
from db.store import utcnow
from domain.core.access import Action, PermissionDenied, local_actor, require
from domain.core.i18n import t
from domain.core.settings import Settings, get_settings
from domain.importer.records import is_imported_plan
from domain.plan.checks import CheckReport, check_plan
from domain.plan.claimability import waiting_reason
from domain.plan.quotas import QuotaExceeded
from runner import doctor_cmd, estimate_cmd, quality_cmd
from runner.command_args import add_max_concurrency, add_tune, imported_when_run
from runner.host_versions import host_view, runners_of
from runner.plan_file import load_plan_file

if TYPE_CHECKING:
    import pandas as pd

    from domain.importer.conditions import ImportConditions
    from runner.daemon import Runner

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2


def _print_report(report: CheckReport, lang: str) -> None:
    print(report.detail)
    extra = [w for w in report.warnings if w not in report.detail]
    if extra:
        print(f"{t('cli.warnings', lang)}:")
        for line in extra:
            print(f"  - {line}")


def cmd_check(args: argparse.Namespace, settings: Settings) -> int:
    plan = load_plan_file(args.plan, settings, args.lang)
    if plan is None:
        return EXIT_INVALID
    _store, runners = runners_of(settings, create=False)
    view = host_view(plan, runners, args.lang)
    report = check_plan(plan, settings, args.lang, view.host_version, every_vllm_version=True)
    report.warnings += view.notes
    _print_report(report, args.lang)
    if report.errors:
        return EXIT_INVALID
    print(t("cli.plan_ok", args.lang, points=len(plan.points()), requests=plan.total_requests()))
    return EXIT_OK


def cmd_submit(args: argparse.Namespace, settings: Settings) -> int:
    plan = load_plan_file(args.plan, settings, args.lang)
    if plan is None:
        return EXIT_INVALID
    store, runners = runners_of(settings, create=True)
    assert store is not None  # noqa: S101 - create=True always opens it
    view = host_view(plan, runners, args.lang)
    report = check_plan(plan, settings, args.lang, view.host_version)
    if report.errors:
        _print_report(report, args.lang)
        return EXIT_INVALID
    for note in view.notes:
        print(note, file=sys.stderr)
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
    header = f"{'id':>5}  {'status':<10} {'source':<18} {'points':>7}  {'gpu':<8} {'model':<28} name"
    print(header)
    runners, now = store.list_runners(), utcnow()
    for run in runs:
        imported = is_imported_plan(run.plan)
        # An import has no attempt: its points are all there, written in one transaction.
        points = f"{run.total_points if imported else run.points_done}/{run.total_points}"
        gpu = f"{run.gpu_count or '?'}x{run.gpu_type or '?'}"
        failure = f" ({run.failure_kind})" if run.failure_kind else ""
        print(
            f"{run.id:>5}  {run.status:<10} {_source_text(run.source, imported):<18} {points:>7}  {gpu:<8} "
            f"{(run.model or '?')[:28]:<28} {_one_line(run.name)}{failure}"
        )
        waiting = waiting_reason(run, runners, now, settings, args.lang) if run.status == "queued" else None
        if waiting is not None:
            print(f"       {waiting}")
    return EXIT_OK


def _source_text(source: str, imported: bool) -> str:
    """``emulated`` output stays emulated when imported, and says both."""
    return f"{source} (imported)" if imported and source != "imported" else source


def _one_line(text: str) -> str:
    """A name as one terminal line: names are any text, and a stored name from before the
    import cleaned them may still hold a control character."""
    return "".join(c if c.isprintable() else " " for c in text)


def cmd_work(args: argparse.Namespace, settings: Settings) -> int:
    from runner.daemon import configure_logging

    configure_logging()
    # The daemon writes a point, its telemetry and the current point about once a second and
    # heartbeats beside them, each access a DuckDB open and close (25-35 ms, issue 20) unless
    # the process keeps its connection (bench/db_lock.py measures both).  Switched on here,
    # in the process's entry point, not in Runner: tests and tools that drive a Runner in
    # their own process keep open-do-close.  The same idle limit as the app's: a waiter (the
    # app, a backup) still gets the lock within _WATCH_S of asking (db/connection.py).
    # And it serves the others' accesses while it holds the file (db/serving.py): the app's
    # reads run on the runner's open connection, so the runner's writes never wait for a
    # hand-over and an open (writes p99 ≤ 50 ms beside a polling app, issue 20).
    keep_open(KEEP_IDLE_S, serve=True)
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
    from db.quality_inputs import with_quality
    from db.scaling_gap_inputs import explained_gaps
    from domain.compare.comparison import comparison_with_settings
    from domain.render import deck, llmd_report, one_slide, pictures, tables
    from domain.results.frames import points_frame

    store = Store.from_settings(settings)
    store.migrate()
    run_ids = [args.baseline, *args.runs]
    frame = points_frame(p.as_dict() for p in store.points_for_comparison(run_ids))
    missing = [r for r in run_ids if frame.empty or r not in set(frame["run_id"])]
    if missing:
        print(t("cli.export_missing", args.lang, runs=", ".join(map(str, missing))), file=sys.stderr)
        return EXIT_INVALID
    if not _mixing_allowed(frame, run_ids, args):
        return EXIT_INVALID
    # Per-request samples: pooled percentiles and bootstrap noise, as on the compare page.
    samples = store.request_samples([int(p) for p in frame["point_id"].dropna()])
    # Their bootstrap intervals as kept beside them (db/bootstrap_memo.py); new ones kept too.
    memos = memos_for(samples)
    c = comparison_with_settings(frame, args.baseline, args.runs, args.lang, settings,
                                 intended_to_differ=frozenset(args.intended or []), requests=samples,
                                 bootstrap_memos=memos)
    keep_memos(samples, memos)
    with_quality(store, c)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"compare-{args.baseline}-" + "-".join(map(str, args.runs))
    written = []
    for fmt in args.format:
        if fmt == "csv":
            written.append(_write(out / f"{stem}.csv", tables.comparison_csv(c)))
            workloads = tables.workload_csv(c)  # the prefix cache and rate sweeps, where the runs have them
            if workloads is not None:
                written.append(_write(out / f"{stem}-workloads.csv", workloads))
        elif fmt == "md":
            written.append(_write(out / f"{stem}.md", tables.comparison_markdown(c).encode()))
        elif fmt == "slide":  # the compare page's default: one slide, the full deck named as its report
            written.append(_write(out / f"{stem}-slide.pptx", one_slide.one_slide(c, f"{stem}.pptx")))
        elif fmt == "llmd-report":
            written += [_write(out / f"{stem}-run{run_id}.llmd.yaml", llmd_report.reports_yaml(reports))
                        for run_id, reports in llmd_report.comparison_reports(c).items()]
        elif fmt == "pptx":
            # "Why not N×?" per run, from the same rows as the compare page's deck.
            written.append(_write(out / f"{stem}.pptx", deck.comparison_deck(c, gaps=explained_gaps(store, run_ids))))
        else:
            for index, (_title, chart) in enumerate(deck.standard_charts(c), start=1):
                data = (pictures.comparison_chart_png(c, chart) if fmt == "png"
                        else pictures.comparison_chart_svg(c, chart).encode())
                written.append(_write(out / f"{stem}-chart{index}.{fmt}", data))
    for line in c.caveat:
        print(f"# {line}", file=sys.stderr)
    print("\n".join(str(p) for p in written))
    return EXIT_OK


def _mixing_allowed(frame: pd.DataFrame, run_ids: list[int], args: argparse.Namespace) -> bool:
    """The compare page's rule (pages/parts/selection.py): emulated runs are not compared with
    measured or imported ones unless asked for, here with ``--allow-mixed``."""
    source = dict(zip(frame["run_id"], frame["source"], strict=True))
    emulated = [r for r in run_ids if source.get(r) == "emulated"]
    others = [r for r in run_ids if source.get(r) != "emulated"]
    if not (emulated and others):
        return True
    params = {"emulated": ", ".join(f"#{r}" for r in emulated),
              "others": ", ".join(f"#{r} ({source.get(r)})" for r in others)}
    if args.allow_mixed:
        print(t("cli.export_mixed_allowed", args.lang, **params), file=sys.stderr)
        return True
    print(t("cli.export_mixed_refused", args.lang, **params), file=sys.stderr)
    return False


def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    """Import bench_serving JSONL or an AIPerf export; what the file does not say, the
    options state; the rest stays unknown.  A file with nothing to import writes nothing."""
    from db import DuplicateImport
    from db.imported_runs import import_file

    gpu = _gpu(args.gpu) if args.gpu else (None, None)
    if gpu is None:
        print(t("cli.import_bad_gpu", args.lang, value=args.gpu), file=sys.stderr)
        return EXIT_USAGE
    stated = _statement(args, *gpu)
    if stated is None:
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
        print(f"  {problem.text(args.lang)}", file=sys.stderr)
    for skipped in result.skipped:
        print(f"  {t('import.skipped.' + skipped['code'], args.lang, line=skipped['line'])}", file=sys.stderr)
    if result.refused:
        print(t("cli.import_refused", args.lang, file=path.name), file=sys.stderr)
        return EXIT_INVALID
    print(" ".join(map(str, result.run_ids)))
    print(t("cli.imported", args.lang, runs=len(result.run_ids), points=result.points), file=sys.stderr)
    return EXIT_OK


def _statement(args: argparse.Namespace, gpu_type: str | None, gpu_count: int | None) -> ImportConditions | None:
    """The options as an ImportConditions, or None after one readable line per problem."""
    from pydantic import ValidationError

    from domain.importer.conditions import ImportConditions

    try:
        # --sglang-version names the engine too: the pasted flags are then checked against it.
        engine = args.engine or ("sglang" if args.sglang_version else None)
        return ImportConditions(model=args.model, gpu_type=gpu_type, gpu_count=gpu_count,
                                engine=engine,  # type: ignore[arg-type]  # argparse choices above
                                engine_version=args.sglang_version, server_command=args.server_args,
                                dataset=args.dataset, warmup=args.warmup)
    except ValidationError as exc:
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"]) or "-"
            print(t("cli.import_bad_statement", args.lang, detail=f"{where}: {error['msg']}"), file=sys.stderr)
    except ValueError as exc:
        print(t("cli.import_bad_statement", args.lang, detail=exc), file=sys.stderr)
    return None


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


# "H200x8", "8xH200", "8×H200", "RTX6000x2": a type and a count joined by x (the type's own
# letters may contain an x: the count is the digits at the other end).
_GPU_AFTER = re.compile(r"^(?P<type>[A-Za-z0-9][A-Za-z0-9_-]*?)\s*[xX×]\s*(?P<count>[0-9]{1,4})$")
_GPU_BEFORE = re.compile(r"^(?P<count>[0-9]{1,4})\s*[xX×]\s*(?P<type>[A-Za-z0-9][A-Za-z0-9_-]*)$")


def _gpu(text: str) -> tuple[str, int] | None:
    """``H200x8`` / ``8xH200`` → ("H200", 8); None for anything else (``CPU:1``)."""
    for pattern in (_GPU_BEFORE, _GPU_AFTER):
        match = pattern.match(text.strip())
        if match and int(match["count"]) >= 1:
            return match["type"], int(match["count"])
    return None


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
    exp = sub.add_parser("export", help="write the comparison of runs as CSV / Markdown / PNG / SVG / PPTX / "
                                        "llm-d benchmark reports v0.2.1")
    exp.add_argument("--baseline", type=int, required=True, help="the baseline run id")
    exp.add_argument("--runs", type=_id_list, required=True, help="comma-separated run ids to compare")
    exp.add_argument("--intended", action="append", help="a condition intended to differ (repeatable)")
    exp.add_argument("--format", action="append", choices=["csv", "md", "png", "svg", "pptx", "slide", "llmd-report"],
                     default=None, help="repeatable; default: csv and md")
    exp.add_argument("--out", default=".", help="output directory")
    exp.add_argument("--allow-mixed", action="store_true",
                     help="compare emulated runs with measured or imported ones (refused otherwise, as on the "
                          "compare page)")
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
    estimate_cmd.add_parser(sub)
    quality_cmd.add_parser(sub, _id_list)
    add_tune(sub, imported_when_run("runner.tune"))
    add_max_concurrency(sub, imported_when_run("runner.max_concurrency"))
    _add_ops_commands(sub)
    doctor_cmd.add_parser(sub)
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


def _without_settings(argv: Sequence[str] | None, error: ValidationError) -> int:
    """Settings that do not validate: the doctor reports them (and checks what it still can);
    any other command says which variable is wrong, without a traceback."""
    args = build_parser(Settings.model_construct()).parse_args(argv)
    if getattr(args, "doctor", False):
        return doctor_cmd.run(args, None, error)
    names = ", ".join(f"BENCHDECK_{'_'.join(str(p) for p in e['loc']).upper()}" for e in error.errors())
    print(f"benchdeck: the settings cannot be read ({names}): {error}", file=sys.stderr)
    return EXIT_USAGE


def _id_list(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of run ids: {text!r}") from None
    if not ids:
        raise argparse.ArgumentTypeError("give at least one run id")
    return ids


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = get_settings()
    except ValidationError as exc:
        return _without_settings(argv, exc)
    args = build_parser(settings).parse_args(argv)
    if getattr(args, "doctor", False):
        return doctor_cmd.run(args, settings, None)
    func: Command = args.func
    if getattr(args, "format", "unset") is None:
        args.format = ["csv", "md"]
    try:
        return func(args, settings)
    except DbBusy as exc:
        print(t("cli.busy", args.lang, detail=exc), file=sys.stderr)
        return EXIT_INVALID
    except DbUnusable as exc:  # a damaged file, or one written by newer code (db/upgrade.py)
        print(f"benchdeck: {exc}", file=sys.stderr)
        return EXIT_INVALID
