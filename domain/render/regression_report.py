"""The regression report of a watched configuration, for slides: Markdown and PPTX.

It names the SGLang versions before and after, what changed in the resolved server args
between them, and the points affected.  The **resolved** args of a run are what its server
ran with as far as benchdeck can know: every flag of its version's shipped schema at its
default (domain/flags/schemas/), the flags the plan set (spelled as that version spells
them), and the facts the server itself reported at start-up (``/server_info`` and the log,
``runner/server_process.py::startup_record``: the KV-cache token count, the chunked prefill
size, ...).  A default that moved between versions shows up here as well as a flag the
drift table rewrote.  Flags a version lacks and whose default says nothing (None, False)
are left out on that side: an absent switch and an unset one run the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import altair as alt
import pandas as pd

from domain.compare.values import display
from domain.core.i18n import t
from domain.flags.schema import SchemaError, load_schema
from domain.render.deck import deck_pptx
from domain.render.tables import format_number

# Start-up facts that describe one launch, not the configuration: never a "difference".
_PER_LAUNCH = frozenset({"seconds_to_ready", "host", "launch_idx", "argv", "status", "roles", "topology",
                         "memory_usage_gb", "startup_time"})
ABSENT = "—"
DIFF_COLUMNS = ("name", "before", "after", "origin")
POINT_COLUMNS = ("scenario", "concurrency", "metric", "baseline", "value", "change", "band_low", "band_high",
                 "repeats", "verdict")


@dataclass(frozen=True)
class RegressionReport:
    """What the report says; built by :func:`build_report` from the watch's history."""

    watch_name: str
    before_version: str | None
    after_version: str | None
    baseline_runs: tuple[int, ...]
    after_runs: tuple[int, ...]
    points: pd.DataFrame  # POINT_COLUMNS: the watched points whose latest verdict is not ok
    args_diff: pd.DataFrame  # DIFF_COLUMNS
    translations: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


def resolved_args(
    version: str | None, server_args: Mapping[str, Any], facts: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Flag (primary spelling, or a start-up fact's name) → the value the server ran with."""
    resolved: dict[str, Any] = {}
    schema = None
    if version:
        try:
            schema = load_schema(version)
        except SchemaError:
            schema = None
    if schema is not None:
        resolved.update({spec.primary: spec.default for spec in schema.specs
                         if not spec.suppressed and spec.default not in (None, False)})
    for flag, value in server_args.items():
        spec = schema.lookup(flag) if schema is not None else None
        resolved[spec.primary if spec is not None else flag] = value
    for name, value in (facts or {}).items():
        if name not in _PER_LAUNCH and value is not None and not isinstance(value, dict | list):
            resolved[f"server_info:{name}"] = value
    return resolved


def args_diff(before: Mapping[str, Any], after: Mapping[str, Any], given: Sequence[str] = ()) -> pd.DataFrame:
    """The resolved args that differ (columns :data:`DIFF_COLUMNS`); ``origin`` says whether a
    flag was set in either plan (``set``), reported by the server (``server``) or is a
    schema default (``default``)."""
    records = []
    for name in sorted(set(before) | set(after)):
        b, a = before.get(name, ABSENT), after.get(name, ABSENT)
        if display(b) == display(a):
            continue
        origin = "server" if name.startswith("server_info:") else "set" if name in given else "default"
        records.append((name, display(b) if b is not ABSENT else ABSENT, display(a) if a is not ABSENT else ABSENT,
                        origin))
    return pd.DataFrame.from_records(records, columns=list(DIFF_COLUMNS))


def build_report(
    *, watch_name: str, history: pd.DataFrame, before: Mapping[str, Any], after: Mapping[str, Any],
    translations: Sequence[Mapping[str, Any]] = (),
) -> RegressionReport:
    """``history``: the watch's measurements (the columns of ``db.watch_store.HistoryRow``),
    oldest first.  ``before``/``after``: ``{"version", "server_args", "facts"}`` of the last
    baseline run and of the latest run."""
    latest_run = int(history["run_id"].iloc[-1])
    latest = history[history["run_id"] == latest_run]
    flagged = latest[latest["verdict"] != "ok"]
    baseline_runs = tuple(sorted({int(r) for runs in latest["baseline_runs"] for r in _ids(runs)}))
    suspicious = history[(history["verdict"] == "suspicious") & (history["run_id"] != latest_run)]
    after_runs = tuple(sorted({*map(int, suspicious["run_id"].tail(len(flagged) or 1)), latest_run}))
    given = [*before.get("server_args", {}), *after.get("server_args", {})]
    diff = args_diff(resolved_args(before.get("version"), before.get("server_args", {}), before.get("facts")),
                     resolved_args(after.get("version"), after.get("server_args", {}), after.get("facts")), given)
    return RegressionReport(watch_name, before.get("version"), after.get("version"), baseline_runs, after_runs,
                            flagged.reindex(columns=list(POINT_COLUMNS)).reset_index(drop=True), diff,
                            tuple(translations))


def _ids(runs: Any) -> list[int]:
    if isinstance(runs, str):
        runs = json.loads(runs)
    return [int(r) for r in runs or []]


def _lines(report: RegressionReport, lang: str) -> list[str]:
    lines = [t("watch.report.versions", lang, before=report.before_version or "?", after=report.after_version or "?"),
             t("watch.report.runs", lang, baseline=", ".join(f"#{r}" for r in report.baseline_runs) or "—",
               after=", ".join(f"#{r}" for r in report.after_runs)),
             t("watch.report.method", lang)]
    for change in report.translations:
        before = " ".join(f"--{k} {v}" for k, v in dict(change.get("removed_values") or {}).items())
        after = " ".join(f"--{k} {v}" for k, v in dict(change.get("add") or {}).items())
        lines.append(t("watch.report.translation", lang, rule=change.get("rule"), before=before, after=after or "—"))
    return lines


def points_table(report: RegressionReport, lang: str) -> pd.DataFrame:
    p = report.points
    return pd.DataFrame({
        t("watch.col.scenario", lang): p["scenario"],
        t("watch.col.concurrency", lang): p["concurrency"],
        t("watch.col.metric", lang): [t(f"watch.metric.{m}", lang) for m in p["metric"]],
        t("watch.col.baseline", lang): [format_number(v) for v in p["baseline"]],
        t("watch.col.value", lang): [format_number(v) for v in p["value"]],
        t("watch.col.change", lang): [f"{c:+.1%}" if pd.notna(c) else "?" for c in p["change"]],
        t("watch.col.verdict", lang): [t(f"watch.verdict.{v}", lang) for v in p["verdict"]],
    })


def diff_table(report: RegressionReport, lang: str) -> pd.DataFrame:
    d = report.args_diff
    return pd.DataFrame({
        t("watch.col.arg", lang): d["name"],
        report.before_version or "?": d["before"],
        report.after_version or "?": d["after"],
        t("watch.col.origin", lang): [t(f"watch.origin.{o}", lang) for o in d["origin"]],
    })


def report_markdown(report: RegressionReport, lang: str) -> str:
    title = t("watch.report.title", lang, name=report.watch_name)
    parts = [f"# {title}", "", *(f"- {line}" for line in _lines(report, lang)), "",
             f"## {t('watch.report.points', lang)}", "", _markdown_table(points_table(report, lang)), "",
             f"## {t('watch.report.args', lang)}", "", _markdown_table(diff_table(report, lang))
             if not report.args_diff.empty else t("watch.report.no_args", lang), ""]
    return "\n".join(parts)


def _markdown_table(frame: pd.DataFrame) -> str:
    def cell(value: object) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    head = "| " + " | ".join(cell(c) for c in frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


def report_pptx(report: RegressionReport, lang: str) -> bytes:
    title = t("watch.report.title", lang, name=report.watch_name)
    subtitle = t("watch.report.versions", lang, before=report.before_version or "?",
                 after=report.after_version or "?")
    tables = [(t("watch.report.points", lang), points_table(report, lang))]
    if not report.args_diff.empty:
        tables.append((t("watch.report.args", lang), diff_table(report, lang)))
    return deck_pptx(title=title, subtitle=subtitle, body=_lines(report, lang)[1:], tables=tables,
                     chart_images=[], caveat=[t("watch.report.method", lang)], lang=lang)


# -- the History chart --------------------------------------------------------------------------


def history_chart(history: pd.DataFrame, lang: str) -> alt.FacetChart:
    """The History page's one chart: per metric (a row each, its own y scale), every watched
    point's value over time, the noise band around its baseline, the verdict as the mark's
    shape and the SGLang version written at each measurement.  ``history``: the columns of
    ``db.watch_store.HistoryRow``."""
    data = pd.DataFrame({
        "when": pd.to_datetime(history["measured_at"]),
        "metric": [t(f"watch.metric.{m}", lang) for m in history["metric"]],
        "point": [f"{s} @ c{c}" for s, c in zip(history["scenario"], history["concurrency"], strict=True)],
        "value": history["value"], "band_low": history["band_low"], "band_high": history["band_high"],
        "verdict": [t(f"watch.verdict.{v}", lang) for v in history["verdict"]],
        "version": history["sglang_version"].fillna("?"),
        "run": history["run_id"],
    })
    # One slot per re-measurement in time order, named by its run and version: the runs of
    # a watch may be seconds or weeks apart, and a time axis made either unreadable (its
    # ticks read ".800" for runs a second apart).  The time is in the tooltip.
    data["measurement"] = [f"#{r} · {v}" for r, v in zip(data["run"], data["version"], strict=True)]
    order = list(dict.fromkeys(data.sort_values(["when", "run"])["measurement"]))
    x = alt.X("measurement:O", sort=order, title=t("watch.chart.when", lang), axis=alt.Axis(labelAngle=0))
    colour = alt.Color("point:N", title=t("watch.chart.point", lang), legend=alt.Legend(symbolOpacity=1))
    band = alt.Chart().mark_area(opacity=0.15).encode(x=x, y=alt.Y("band_low:Q", scale=alt.Scale(zero=False)),
                                                      y2="band_high:Q", color=colour)
    # Not from zero: a 10 % change must be visible at a glance.
    y = alt.Y("value:Q", title=None, scale=alt.Scale(zero=False))
    line = alt.Chart().mark_line().encode(x=x, y=y, color=colour)
    verdicts = [t(f"watch.verdict.{v}", lang) for v in ("baseline", "ok", "suspicious", "regression", "improvement")]
    dots = alt.Chart().mark_point(size=90, filled=True).encode(
        x=x, y="value:Q", color=colour,
        shape=alt.Shape("verdict:N", title=t("watch.col.verdict", lang), scale=alt.Scale(
            domain=verdicts, range=["circle", "circle", "triangle-up", "triangle-down", "diamond"])),
        tooltip=["run:Q", alt.Tooltip("when:T", format="%Y-%m-%d %H:%M:%S"), "point:N", "version:N", "verdict:N",
                 alt.Tooltip("value:Q", format=",.1f")])
    return alt.layer(band, line, dots, data=data).properties(width=680, height=240).facet(
        row=alt.Row("metric:N", title=None), title=t("watch.chart.title", lang),
    ).resolve_scale(y="independent")
