"""Table exports of a comparison: CSV and Markdown.  Each opens with what changed (the
verdict of every compared run and the changed flags and conditions, :func:`export_head`)
and closes with the caveat footer of :func:`domain.compare.caveat.caveat_lines`.

* CSV keeps every number exactly as the frame holds it (pandas writes the shortest repr
  that round-trips).  The head lines come before the table and the caveat after it (after
  a blank line), all as ``# ``-prefixed lines; every text cell is quoted, so
  ``pd.read_csv(path, comment="#")`` reads the table back whole (a '#' inside a quoted
  name is kept).  UTF-8 with a BOM, so Excel shows Japanese.  Text a spreadsheet would
  take for a formula is neutralised (:func:`neutralise_formula`).
* Markdown rounds numbers for reading (see :func:`format_number`) and says so in its
  footer; text is escaped (:func:`md_text`) so a run name can neither split a table
  column nor become HTML or a link.
* :func:`comparison_table` adds each run's scaling efficiency, saturation point and
  validity badges to the wide table, and marks runs that are not comparable in their
  column headers.
* Where the estimator can describe a run (:mod:`domain.results.estimate_overlay`), the
  per-point notes carry measured ÷ estimated (output tok/s, TTFT p50, TPOT p50) and what
  bounds the estimate, and the footer says how the estimate was made and checked.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Sequence

import pandas as pd

from domain.compare.comparison import Comparison
from domain.core.i18n import t
from domain.core.markdown import NEWLINES, md_text
from domain.render.workload_charts import workload_sections
from domain.results import analysis, energy, estimate_overlay, validity

CSV_ENCODING = "utf-8-sig"
CAVEAT_PREFIX = "# "
# OWASP "CSV Injection": a cell starting with one of these is a formula to a spreadsheet.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
# A cell that is only a number written as text ("-9.8%", "+4.9%") is read as a number, not run.
_PLAIN_NUMBER = re.compile(r"[+-]?(\d[\d,]*(\.\d*)?|\.\d+)([eE][+-]?\d+)?%?")
# Spreadsheets split a '# ' line on the list separator (',' or ';' by locale): each piece is a cell.
_SEPARATOR = re.compile(r"([,;])")


def flat_table(table: pd.DataFrame) -> pd.DataFrame:
    """Index levels become columns and multi-level headers are joined with ' · '."""
    out = table.reset_index() if _has_named_index(table) else table.copy()
    if isinstance(out.columns, pd.MultiIndex):
        out.columns = [" · ".join(str(p) for p in col if str(p)) for col in out.columns]
    return out


def _has_named_index(table: pd.DataFrame) -> bool:
    return any(name is not None for name in table.index.names)


# -- what changed ------------------------------------------------------------------------------


def export_head(c: Comparison) -> list[str]:
    """The first lines of every export: each compared run's headline, its verdict and the
    change under test from the older run to the newer (``c.headline_lines``, which name the
    runs by id as the column headers do), then the quality rows (``c.quality_lines``: same /
    changed / cannot tell / not measured, a faster and changed run as a trade-off), then the
    changed flags with their layer and risk and the conditions under test (``c.changed_lines``)."""
    return [*c.headline_lines, *c.quality_lines, *c.changed_lines]


def run_label_of(c: Comparison, run_id: object) -> str:
    """A run of ``c`` as headers and legends name it (:func:`domain.results.analysis.run_label`)."""
    # Looked up in the comparison's table of names (built once), not masked out of the
    # summary per run: nine such lookups were 18 ms of a cold compare page's headers.
    name, source = c.run_names[run_id]
    return analysis.run_label(run_id, name, source, c.lang)


def marked_label(c: Comparison, run_id: object) -> str:
    """:func:`run_label_of`, ending in the not-comparable mark when the checklist's verdict
    for the run is 'not_comparable'."""
    marked = run_id in c.not_comparable
    return run_label_of(c, run_id) + (t("compare.deck.not_comparable", c.lang) if marked else "")


# -- saturation, scaling and validity per point ------------------------------------------------

RATIO_COLUMNS = tuple(f"ratio_{m}" for m in estimate_overlay.RATIO_METRICS)
NOTE_COLUMNS = ("run_id", "scenario", "concurrency", "efficiency_pct", "efficiency_basis", "saturation", "validity",
                *RATIO_COLUMNS, "estimate_bound")


def point_notes(c: Comparison) -> pd.DataFrame:
    """One row per (run, scenario, concurrency) of the summary (columns :data:`NOTE_COLUMNS`):
    scaling efficiency in % of linear (:func:`domain.results.curve.scaling_efficiency`),
    the concurrency it is measured from when the scaling frame says so, the saturation
    rule that fired at this point (if any), the validity badges in words (repeats
    merged, plus the scaling frame's cold / super-linear marks when it carries them, then the
    energy figure's validity or why there is none: :func:`domain.results.energy.energy_note`), and
    measured ÷ estimated with what bounds the estimate (NaN and empty where the run or
    point has no estimate: :func:`domain.results.estimate_overlay.estimates_for`)."""
    keys = ["run_id", *analysis.POINT]
    notes = c.summary[keys].drop_duplicates().reset_index(drop=True)
    notes = notes.merge(_scaling_notes(c), on=keys, how="left")
    notes = notes.merge(_saturation_notes(c), on=keys, how="left")
    notes = notes.merge(_badge_notes(c), on=keys, how="left")
    notes = notes.merge(_estimate_notes(c), on=keys, how="left")
    notes = notes.merge(energy.energy_notes(c.frame, c.lang), on=keys, how="left")
    notes["energy"] = [t("energy.in_validity", c.lang, note=note) if isinstance(note, str) and note else ""
                       for note in notes["energy"]]
    notes["saturation"] = [text if isinstance(text, str) else "" for text in notes["saturation"]]
    notes["validity"] = [", ".join(p for p in parts if isinstance(p, str) and p)
                         for parts in zip(notes["badges"], notes["scaling_marks"], notes["energy"], strict=True)]
    notes["estimate_bound"] = [text if isinstance(text, str) else "" for text in notes["estimate_bound"]]
    return notes[list(NOTE_COLUMNS)]


def comparison_estimates(c: Comparison) -> pd.DataFrame:
    """The estimates :func:`domain.compare.comparison.build_comparison` computed once for the
    comparison (``Comparison.estimates``): the page, the tables and the deck share them."""
    return c.estimates


def _estimate_notes(c: Comparison) -> pd.DataFrame:
    keys = ["run_id", *analysis.POINT]
    estimates = comparison_estimates(c)
    out = estimates[[*keys, *RATIO_COLUMNS]].copy()
    out["estimate_bound"] = [estimate_overlay.bound_text(b, c.lang) for b in estimates["bound"]]
    return out


def estimate_lines(c: Comparison) -> list[str]:
    """How the measured ÷ estimated columns were made and checked, then one sentence per
    point far below its estimate; empty when no run has an estimate."""
    estimates = comparison_estimates(c)
    return [*estimate_overlay.calibration_lines(estimates, c.lang),
            *estimate_overlay.far_below_sentences(estimates, c.lang)]


def _scaling_notes(c: Comparison) -> pd.DataFrame:
    scaling = c.scaling
    keys = ["run_id", *analysis.POINT]
    out = scaling[keys].copy()
    out["efficiency_pct"] = pd.to_numeric(scaling["efficiency"], errors="coerce") * 100.0
    out["efficiency_basis"] = scaling["baseline_concurrency"] if "baseline_concurrency" in scaling else math.nan
    marks = [(column, t(f"slides.scaling.{column}", c.lang)) for column in ("cold", "super_linear")
             if column in scaling]
    out["scaling_marks"] = [", ".join(text for column, text in marks if _true(row[column]))
                            for _, row in scaling.iterrows()]
    return out


def _true(value: object) -> bool:
    return not analysis.is_missing(value) and bool(value)


def _saturation_notes(c: Comparison) -> pd.DataFrame:
    keys = ["run_id", *analysis.POINT]
    fired = c.saturation.dropna(subset=["rule", "concurrency"])
    out = fired[keys].copy()
    out["saturation"] = [t(f"slides.saturation.{rule}", c.lang) for rule in fired["rule"]]
    return out


def _badge_notes(c: Comparison) -> pd.DataFrame:
    keys = ["run_id", *analysis.POINT]
    if c.badges.empty:
        return pd.DataFrame(columns=[*keys, "badges"])
    by_point = validity.badges_by_point(c.badges)
    by_point["badges"] = [", ".join(validity.badge_label(b, c.lang) for b in names) for names in by_point["badges"]]
    return by_point[[*keys, "badges"]]


def comparison_table(c: Comparison, metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """:func:`domain.results.analysis.wide_table` of the comparison with, per run, its
    scaling efficiency, saturation and validity columns beside its metrics; a run whose
    checklist verdict is 'not_comparable' says so in every one of its column headers."""
    table = analysis.wide_table(c.compare, c.lang, metrics)
    notes = point_notes(c)
    run_order: dict[str, int] = {}
    for order, run_id in enumerate([c.baseline_run_id, *c.run_ids]):
        label = run_label_of(c, run_id)
        run_order[label] = order
        of_run = notes[notes["run_id"] == run_id].set_index(list(analysis.POINT))
        for column, key in _NOTE_HEADERS:
            if column in _OPTIONAL_NOTES and _empty(of_run[column]):
                continue
            table[(label, t(key, c.lang))] = of_run[column].reindex(table.index)
    ordered = sorted(table.columns, key=lambda col: run_order.get(col[0], len(run_order)))  # stable: metrics first
    return _mark_not_comparable(c, table[ordered])


_NOTE_HEADERS = (("efficiency_pct", "slides.col.efficiency"), ("efficiency_basis", "slides.col.efficiency_basis"),
                 ("saturation", "slides.col.saturation"), ("validity", "slides.col.validity"),
                 *((column, f"estimate_overlay.col.{column}") for column in RATIO_COLUMNS),
                 ("estimate_bound", "estimate_overlay.col.bound"))
# Left out of a table when no row has a value: the scaling frame does not say (the lowest
# concurrency, as the efficiency header states), or no point has an estimate.
_OPTIONAL_NOTES = ("efficiency_basis", *RATIO_COLUMNS, "estimate_bound")


def _empty(values: pd.Series) -> bool:
    return bool(values.isna().all() or (values.astype(str) == "").all())


def _mark_not_comparable(c: Comparison, table: pd.DataFrame) -> pd.DataFrame:
    renames = {run_label_of(c, r): marked_label(c, r) for r in c.run_ids}
    return table.rename(columns=renames, level=0)


def notes_table(c: Comparison) -> pd.DataFrame:
    """:func:`point_notes` with run labels and headers in the UI language (the Markdown section)."""
    notes = point_notes(c)
    # One label per run, not per row: each label looks the run up in the whole summary.
    labels = {run_id: marked_label(c, run_id) for run_id in notes["run_id"].unique()}
    runs = [labels[r] for r in notes["run_id"]]
    columns = {t("slides.col.run", c.lang): runs, t("compare.col.scenario", c.lang): notes["scenario"],
               t("compare.col.concurrency", c.lang): notes["concurrency"]}
    for column, key in _NOTE_HEADERS:
        if column not in _OPTIONAL_NOTES or not _empty(notes[column]):
            columns[t(key, c.lang)] = notes[column]
    return pd.DataFrame(columns)


# -- CSV -----------------------------------------------------------------------------------------


def neutralise_formula(text: str) -> str:
    """OWASP's CSV-injection rule: text that starts with a formula trigger gets a leading
    single quote, so a spreadsheet shows it as text.  Text that is only a number
    ("-9.8%") is left alone; numbers themselves never pass through here."""
    if text.startswith(FORMULA_TRIGGERS) and not _PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return text


def comment_line(text: str) -> str:
    """A '# ' line that stays one line and whose every separator-split piece is neutralised
    (a spreadsheet opening the CSV makes a cell of each piece)."""
    pieces = _SEPARATOR.split(NEWLINES.sub(" ", text))
    safe = [piece if piece in (",", ";") else _neutralise_piece(piece) for piece in pieces]
    return CAVEAT_PREFIX + "".join(safe)


def _neutralise_piece(piece: str) -> str:
    # Leading spaces and a quote are skipped before the trigger check: '  "=x' is still a formula.
    body = piece.lstrip(' "')
    lead = piece[:len(piece) - len(body)]
    return lead + neutralise_formula(body)


def _csv_safe(table: pd.DataFrame) -> pd.DataFrame:
    out = table.copy()
    out.columns = [neutralise_formula(str(col)) for col in out.columns]
    for column in out.columns:
        if not pd.api.types.is_numeric_dtype(out[column]):
            out[column] = [neutralise_formula(v) if isinstance(v, str) else v for v in out[column]]
    return out


def table_csv(table: pd.DataFrame, caveat: Sequence[str], head: Sequence[str] = ()) -> bytes:
    """CSV with exact numbers, ``head`` before and the caveat after it (see the module docstring)."""
    body = _csv_safe(flat_table(table)).to_csv(index=False, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
    header = "".join(comment_line(line) + "\n" for line in head)
    footer = "".join(comment_line(line) + "\n" for line in caveat)
    return (header + body + "\n" + footer).encode(CSV_ENCODING)


def comparison_csv(c: Comparison, metrics: Sequence[str] | None = None) -> bytes:
    """The comparison's CSV export: what changed, :func:`comparison_table`, the caveat and
    how the estimate columns were made (:func:`estimate_lines`)."""
    return table_csv(comparison_table(c, metrics), [*c.caveat, *estimate_lines(c)], export_head(c))


def workload_csv(c: Comparison) -> bytes | None:
    """The workload sections as one CSV (a ``section`` column first), with the comparison's
    head and caveat as the table export writes them; None when there is none."""
    sections = workload_sections(c)
    if not sections:
        return None
    merged = pd.concat([table.assign(**{t("workload.col.section", c.lang): title})
                        for title, table in sections], ignore_index=True)
    first = t("workload.col.section", c.lang)
    merged = merged[[first, *[col for col in merged.columns if col != first]]]
    return table_csv(merged, c.caveat, export_head(c))


# -- Markdown ------------------------------------------------------------------------------------


def format_number(value: object) -> str:
    """Rounded for reading: whole numbers as integers with separators; 1 decimal from 100,
    2 from 1, 3 below.  NaN/None as an empty cell."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    number = float(value)
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    if number.is_integer():
        return f"{int(number):,}"
    decimals = 1 if abs(number) >= 100 else 2 if abs(number) >= 1 else 3
    return f"{number:,.{decimals}f}"


# At the start of a line these open a heading, quote, list or code block.
_MD_LINE_START = re.compile(r"^(\s*)([#>+\-=]|\d+(?=[.)]))")


def _md_line(value: object) -> str:
    """:func:`md_text` for text that starts a line: a leading '#', '>', '-', '1.' … escaped."""
    text = md_text(value).lstrip()
    match = _MD_LINE_START.match(text)
    if match is None:
        return text
    if match.group(2).isdigit():  # "1." → "1\." : the dot, not the digit, opens a list
        end = match.end()
        return text[:end] + "\\" + text[end:]
    return "\\" + text


def markdown_grid(table: pd.DataFrame) -> list[str]:
    """A GitHub Markdown table, numbers rounded (:func:`format_number`), text escaped."""
    flat = flat_table(table)
    header = [md_text(c) for c in flat.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(_md_align(flat[c]) for c in flat.columns) + "|"]
    for row in flat.itertuples(index=False):
        lines.append("| " + " | ".join(md_text(format_number(v)) for v in row) + " |")
    return lines


def table_markdown(table: pd.DataFrame | None, caveat: Sequence[str], lang: str, head: Sequence[str] = (),
                   sections: Sequence[tuple[str, pd.DataFrame]] = ()) -> str:
    """``head`` as a list, the table (if any), each (title, table) section, then the caveat
    and a note that the values are rounded."""
    parts = ["\n".join(f"- {_md_line(line)}" for line in head)] if head else []
    if table is not None:
        parts.append("\n".join(markdown_grid(table)))
    for title, section in sections:
        parts.append(f"### {_md_line(title)}\n\n" + "\n".join(markdown_grid(section)))
    notes = [*caveat, t("compare.caveat.rounded", lang)]
    parts.append("\n".join(f"> {md_text(note)}  " for note in notes))
    return "\n\n".join(parts) + "\n"


def comparison_markdown(c: Comparison, metrics: Sequence[str] | None = None) -> str:
    """The comparison's Markdown export: what changed, one table per metric (points as rows,
    runs as columns, each cell the value and its Δ: nine runs stay eleven columns wide;
    not-comparable runs marked), the per-point efficiency / saturation / validity / measured
    ÷ estimated section, the caveat and how the estimate columns were made (:func:`estimate_lines`)."""
    wanted = metrics or list(dict.fromkeys(c.compare["metric"]))
    sections = [(analysis.metric_label(m, c.lang), metric_pivot(c, m)) for m in wanted]
    return table_markdown(None, [*c.caveat, *estimate_lines(c)], c.lang, export_head(c),
                          sections=[*((title, table) for title, table in sections if not table.empty),
                                    (t("slides.md.points", c.lang), notes_table(c)), *workload_sections(c)])


def metric_pivot(c: Comparison, metric: str) -> pd.DataFrame:
    """One metric: (scenario, concurrency) as rows, a column per run (its marked label), each
    cell "value (Δ)" rounded for reading; empty when no run has a value."""
    rows = c.compare[(c.compare["metric"] == metric) & c.compare["value"].notna()]
    columns: dict[str, dict[tuple[object, object], str]] = {}
    for run_id in [c.baseline_run_id, *c.run_ids]:
        of_run = rows[rows["run_id"] == run_id]
        columns[marked_label(c, run_id)] = {
            (s, conc): _value_with_delta(value, delta, verdict, c.lang, interval)
            for s, conc, value, delta, verdict, *interval in zip(
                of_run["scenario"], of_run["concurrency"], of_run["value"], of_run["delta_pct"], of_run["verdict"],
                of_run["delta_low_pct"], of_run["delta_high_pct"], strict=True)}
    table = pd.DataFrame({label: cells for label, cells in columns.items() if cells})
    if table.empty:
        return table
    table.index.names = [t("compare.col.scenario", c.lang), t("compare.col.concurrency", c.lang)]
    return table.sort_index().fillna("")


def _value_with_delta(value: object, delta: float, verdict: str, lang: str, interval: list[float]) -> str:
    text = analysis.delta_text(delta, verdict, lang, *interval)
    return format_number(value) + (f" ({text})" if text else "")


def _md_align(column: pd.Series) -> str:
    return " ---: " if pd.api.types.is_numeric_dtype(column) else " --- "
