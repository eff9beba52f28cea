"""The comparability key of a measured point, and the checklist of runs against a baseline.

The seeds' lesson: a speed-up means nothing unless the model, GPU generation,
batch/concurrency, input/output length, network and metric are the same.  Each condition
below belongs to a family (model, hardware, engine, workload, generation, client,
topology, source) and is either *run-level* (one value per run) or *point-level* (one
value per measured point, compared over the (scenario, concurrency) points both runs have).

A condition's state against the baseline is one of:

* ``match``    — both values known and equal;
* ``differ``   — both known and different (shown with both values);
* ``unknown``  — either side unknown (None, typically an imported run); never a match;
* ``intended`` — it differs, and the user marked it as the thing under test.

Fatal conditions (:data:`FATAL_CONDITIONS`) make a run *not comparable* when they differ:
a different model, dtype/quantization, GPU type, input length or output length changes
what is measured, not how well it is served, so no delta between such runs is meaningful.
Having no (scenario, concurrency) point in common is fatal too: there is nothing to compare.
Every other difference leaves the run "comparable except: …".  An ``unknown`` is never
fatal (we cannot claim the runs differ) but is always listed, so it cannot pass as a match.

Also here: :func:`risk_columns` (each run's highest rule-risk layer and broken contest
rules, from :mod:`domain.flags.risk`) and :func:`config_diff` (the flags that differ).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from domain.core.i18n import t
from domain.flags.risk import DEFAULT_PROFILE, assess_risk, classify_flag
from domain.flags.schema import SchemaError, known_versions, newest_version

State = Literal["match", "differ", "unknown", "intended"]
Verdict = Literal["comparable", "comparable_except", "not_comparable"]
Level = Literal["run", "point"]

FAMILIES = ("model", "hardware", "engine", "workload", "generation", "client", "topology", "source")
# The pseudo-condition for the set of (scenario, concurrency) points each run measured.
POINTS_CONDITION = "points"


@dataclass(frozen=True)
class Condition:
    name: str  # also the frame column, except for the points set
    family: str
    level: Level


CONDITIONS: tuple[Condition, ...] = (
    Condition("model", "model", "run"),
    Condition("model_revision", "model", "run"),
    Condition("dtype", "model", "run"),
    Condition("load_format", "model", "run"),  # 'dummy' = random weights
    Condition("gpu_type", "hardware", "run"),
    Condition("gpu_count", "hardware", "run"),
    Condition("network", "hardware", "run"),
    Condition("engine", "engine", "run"),
    Condition("engine_version", "engine", "run"),
    Condition(POINTS_CONDITION, "workload", "point"),  # concurrency: which points exist
    Condition("input_len", "workload", "point"),
    Condition("output_len", "workload", "point"),
    Condition("random_range_ratio", "workload", "point"),
    Condition("num_prompts", "workload", "point"),
    Condition("warmup", "workload", "point"),
    Condition("dataset", "workload", "point"),
    Condition("seed", "workload", "point"),
    Condition("request_rate", "workload", "point"),
    Condition("apply_chat_template", "generation", "point"),
    Condition("thinking_mode", "generation", "point"),
    Condition("ignore_eos", "generation", "point"),
    Condition("bench_tool", "client", "point"),
    Condition("bench_version", "client", "point"),
    Condition("backend", "client", "point"),
    Condition("topology", "topology", "run"),
    Condition("source", "source", "run"),
)
CONDITION_NAMES = tuple(c.name for c in CONDITIONS)
FATAL_CONDITIONS = frozenset({"model", "dtype", "gpu_type", "input_len", "output_len"})

# ``fatal`` in the matrix: whether a difference in this row makes the run not comparable
# (for the points set: only when the runs share no point at all).
MATRIX_COLUMNS = ("run_id", "family", "condition", "level", "fatal", "state", "baseline_value", "value")
SUMMARY_COLUMNS = ("run_id", "verdict", "fatal", "differing", "unknown", "intended")
RISK_COLUMNS = ("run_id", "risk_version", "highest_risk", "broken_rules", "unclassified_flags", "notes")
DIFF_COLUMNS = ("run_id", "flag", "baseline_value", "value", "differs", "layer", "risk")

MISSING_TEXT = "?"


# -- values ------------------------------------------------------------------------------------


def normalise(value: object) -> object:
    """One spelling per value, so 128 == 128.0 and 'inf' == inf; None for anything unknown."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str):
        return math.inf if value.strip().lower() in ("inf", "+inf", "infinity") else value
    if isinstance(value, int | float) or hasattr(value, "__float__"):
        number = float(value)
        if math.isnan(number):
            return None
        return int(number) if number.is_integer() else number
    return value


def display(value: object) -> str:
    """A value as the checklist shows it; '?' for unknown."""
    value = normalise(value)
    if value is None:
        return MISSING_TEXT
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return str(value)


def comparability_key(point: Mapping[str, Any]) -> dict[str, dict[str, object]]:
    """The comparability key of one point (a row of the points frame), grouped by family.

    The points set is a property of a whole run, so a single point stands for it with its
    own (scenario, concurrency)."""
    key: dict[str, dict[str, object]] = {family: {} for family in FAMILIES}
    for cond in CONDITIONS:
        if cond.name == POINTS_CONDITION:
            key[cond.family]["concurrency"] = normalise(point.get("concurrency"))
            key[cond.family]["scenario"] = normalise(point.get("scenario"))
        else:
            key[cond.family][cond.name] = normalise(point.get(cond.name))
    return key


def key_summary(frame: pd.DataFrame, run_id: int, lang: str) -> str:
    """One line naming a run's key: model, dtype, weights, GPU, engine, ISL/OSL, source."""
    rows = frame[frame["run_id"] == run_id]
    if rows.empty:
        raise KeyError(f"run {run_id} has no points in the frame")
    first = rows.iloc[0]
    lengths = sorted({f"{display(i)}/{display(o)}" for i, o in zip(rows["input_len"], rows["output_len"], strict=True)})
    return t(
        "compare.key_summary",
        lang,
        model=display(first.get("model")),
        dtype=display(first.get("dtype")),
        load_format=display(first.get("load_format")),
        gpu=f"{display(first.get('gpu_type'))}×{display(first.get('gpu_count'))}",
        engine=f"{display(first.get('engine'))} {display(first.get('engine_version'))}",
        lengths=", ".join(lengths),
        source=t(f"source.{first.get('source')}", lang) if first.get("source") else MISSING_TEXT,
    )


# -- the matrix --------------------------------------------------------------------------------

Point = tuple[object, object]  # (scenario, concurrency)
RUN_LEVEL = tuple(c.name for c in CONDITIONS if c.level == "run")
POINT_LEVEL = tuple(c.name for c in CONDITIONS if c.level == "point" and c.name != POINTS_CONDITION)


@dataclass(frozen=True)
class RunView:
    """One run's condition values, normalised once: run-level values, and per point the
    set of values each point-level condition took (repeats normally agree; a set keeps
    any disagreement visible)."""

    run_values: dict[str, object]
    point_values: dict[Point, dict[str, frozenset[object]]]

    @property
    def points(self) -> set[Point]:
        return set(self.point_values)


def run_view(rows: pd.DataFrame) -> RunView:
    run_values = {name: _run_value(rows, name) for name in RUN_LEVEL}
    point_values: dict[Point, dict[str, set[object]]] = {}
    columns = [rows[name] if name in rows.columns else [None] * len(rows) for name in POINT_LEVEL]
    for scenario, conc, *values in zip(rows["scenario"], rows["concurrency"], *columns, strict=True):
        sets = point_values.setdefault((scenario, normalise(conc)), {name: set() for name in POINT_LEVEL})
        for name, value in zip(POINT_LEVEL, values, strict=True):
            sets[name].add(_hashable(normalise(value)))
    return RunView(run_values, {p: {n: frozenset(v) for n, v in sets.items()} for p, sets in point_values.items()})


def _compare_values(base: object, other: object) -> State:
    if base is None or other is None:
        return "unknown"
    return "match" if base == other else "differ"


def _run_value(rows: pd.DataFrame, column: str) -> object:
    """A run-level value: the same on every row; several distinct values are joined."""
    if column not in rows.columns:
        return None
    values = {_hashable(normalise(v)) for v in rows[column]}
    if len(values) == 1:
        return next(iter(values))
    known = sorted(display(v) for v in values if v is not None)
    return None if None in values else " | ".join(known)


def _hashable(value: object) -> Hashable:
    if isinstance(value, dict):
        return tuple(sorted(value.items()))
    if isinstance(value, list):
        return tuple(value)
    return value


def _compare_point_condition(base: RunView, other: RunView, column: str) -> tuple[State, str, str]:
    common = base.points & other.points
    base_values = {p: base.point_values[p][column] for p in common}
    other_values = {p: other.point_values[p][column] for p in common}
    states = {"unknown" if None in base_values[p] | other_values[p] else
              "match" if base_values[p] == other_values[p] else "differ" for p in common}
    # A definite difference anywhere outranks an unknown elsewhere: it is the stronger fact.
    # No common point at all leaves nothing to compare: unknown, never a match.
    state: State = "differ" if "differ" in states else "match" if states == {"match"} else "unknown"
    return state, _values_text(base_values), _values_text(other_values)


def _values_text(values: Mapping[Point, frozenset[object]]) -> str:
    distinct = {v for vs in values.values() for v in vs}
    return ", ".join(sorted(display(v) for v in distinct)) if distinct else MISSING_TEXT


def _points_text(points: Collection[Point]) -> str:
    def order(point: Point) -> tuple[str, float]:
        conc = point[1]
        return str(point[0]), float(conc) if isinstance(conc, int | float) else math.inf

    return ", ".join(f"{s}@{display(c)}" for s, c in sorted(points, key=order))


def _compare_points(base: RunView, other: RunView) -> tuple[State, bool, str, str]:
    """The point sets: equal or not; fatal only when the runs share no point at all."""
    base_points, other_points = base.points, other.points
    state: State = "match" if base_points == other_points else "differ"
    return (state, not base_points & other_points, _points_text(base_points - other_points),
            _points_text(other_points - base_points))


def _condition_row(cond: Condition, base: RunView, other: RunView) -> tuple[State, bool, str, str]:
    """State, whether a difference is fatal, and the two values as shown."""
    if cond.name == POINTS_CONDITION:
        return _compare_points(base, other)
    fatal = cond.name in FATAL_CONDITIONS
    if cond.level == "point":
        state, base_text, other_text = _compare_point_condition(base, other, cond.name)
        return state, fatal, base_text, other_text
    base_value, other_value = base.run_values[cond.name], other.run_values[cond.name]
    return _compare_values(base_value, other_value), fatal, display(base_value), display(other_value)


def comparability_matrix(
    frame: pd.DataFrame,
    baseline_run_id: int,
    run_ids: Sequence[int],
    intended_to_differ: Collection[str] = frozenset(),
) -> pd.DataFrame:
    """Long matrix, one row per (run, condition) for every run of ``run_ids`` but the baseline.

    Columns :data:`MATRIX_COLUMNS`.  For the points condition, ``baseline_value`` lists the
    points only the baseline has and ``value`` those only the run has."""
    base = run_view(_rows_of(frame, baseline_run_id))
    records = []
    for run_id in run_ids:
        if run_id == baseline_run_id:
            continue
        other = run_view(_rows_of(frame, run_id))
        for cond in CONDITIONS:
            state, fatal, base_text, other_text = _condition_row(cond, base, other)
            if state == "differ" and cond.name in intended_to_differ:
                state = "intended"
            records.append((run_id, cond.family, cond.name, cond.level, fatal, state, base_text, other_text))
    return pd.DataFrame.from_records(records, columns=list(MATRIX_COLUMNS))


def _rows_of(frame: pd.DataFrame, run_id: int) -> pd.DataFrame:
    rows = frame[frame["run_id"] == run_id]
    if rows.empty:
        raise KeyError(f"run {run_id} has no points in the frame")
    return rows


# -- summary -----------------------------------------------------------------------------------


def comparability_summary(matrix: pd.DataFrame) -> pd.DataFrame:
    """Per run: the verdict and the conditions behind it (columns :data:`SUMMARY_COLUMNS`)."""
    records = [_summarise_run(run_id, rows) for run_id, rows in matrix.groupby("run_id", sort=False)]
    return pd.DataFrame.from_records(records, columns=list(SUMMARY_COLUMNS))


def _summarise_run(run_id: object, rows: pd.DataFrame) -> tuple[object, Verdict, list, list, list, list]:
    def names(mask: pd.Series) -> list[str]:
        return list(rows.loc[mask, "condition"])

    differ = rows["state"] == "differ"
    fatal = names(differ & rows["fatal"])
    unknown = names(rows["state"] == "unknown")
    differing = names(differ)
    verdict: Verdict = "not_comparable" if fatal else "comparable_except" if differing or unknown else "comparable"
    return run_id, verdict, fatal, differing, unknown, names(rows["state"] == "intended")


def condition_label(name: str, lang: str) -> str:
    return t(f"compare.cond.{name}", lang)


def family_label(family: str, lang: str) -> str:
    return t(f"compare.family.{family}", lang)


def state_text(matrix_row: Mapping[str, Any], lang: str) -> str:
    """A matrix cell as the checklist shows it: "✓", "✗ 128 → 256", "unknown (? / 0.5.9)", …"""
    return t(f"compare.state.{matrix_row['state']}", lang, baseline=matrix_row["baseline_value"],
             value=matrix_row["value"])


def summary_line(summary_row: Mapping[str, Any], lang: str) -> str:
    """"comparable" / "comparable except: …" / "not comparable: …" in the UI language."""
    labels = lambda names: ", ".join(condition_label(n, lang) for n in names)  # noqa: E731
    if summary_row["verdict"] == "not_comparable":
        line = t("compare.summary.not_comparable", lang, fields=labels(summary_row["fatal"]))
        others = [n for n in summary_row["differing"] if n not in summary_row["fatal"]]
        if others:
            line += "; " + t("compare.summary.also", lang, fields=labels(others))
        if summary_row["unknown"]:
            line += "; " + t("compare.summary.unknown", lang, fields=labels(summary_row["unknown"]))
        return line
    if summary_row["verdict"] == "comparable_except":
        parts = [labels(summary_row["differing"])] if summary_row["differing"] else []
        if summary_row["unknown"]:
            parts.append(t("compare.summary.unknown", lang, fields=labels(summary_row["unknown"])))
        return t("compare.summary.comparable_except", lang, fields="; ".join(parts))
    return t("compare.summary.comparable", lang)


# -- risk and flags ------------------------------------------------------------------------------


def _schema_version(engine_version: object) -> str:
    """The engine's own schema when shipped; else the newest (the emulator speaks the newest)."""
    version = normalise(engine_version)
    if isinstance(version, str) and version in known_versions():
        return version
    return newest_version()


def risk_columns(frame: pd.DataFrame, profile: str = DEFAULT_PROFILE) -> pd.DataFrame:
    """Per run (columns :data:`RISK_COLUMNS`): the schema version used, the highest risk
    layer (None: no classified active flag), broken contest rules as "rule: flag=value",
    the active flags no layer claims, and value-note codes (e.g. 'dummy_weights')."""
    records: list[tuple[object, ...]] = []
    for run_id, rows in frame.groupby("run_id", sort=False):
        first = rows.iloc[0]
        version = _schema_version(first.get("engine_version"))
        try:
            report = assess_risk(dict(first.get("server_args") or {}), version, profile)
        except SchemaError:  # a schema file gone missing: show no risk rather than guess one
            records.append((run_id, version, None, [], [], []))
            continue
        broken = [f"{b.rule}: {b.flag}={b.value}" for b in report.broken]
        notes = [n.code for n in report.notes]
        records.append((run_id, version, report.highest, broken, list(report.unclassified), notes))
    return pd.DataFrame.from_records(records, columns=list(RISK_COLUMNS))


def config_diff(
    frame: pd.DataFrame, baseline_run_id: int, run_ids: Sequence[int], *, show_all: bool = False
) -> pd.DataFrame:
    """The server flags of each run against the baseline (columns :data:`DIFF_COLUMNS`),
    only those that differ unless ``show_all``; a flag one side lacks shows as '?'."""
    base_args = _server_args(frame, baseline_run_id)
    records: list[tuple[object, ...]] = []
    for run_id in run_ids:
        if run_id == baseline_run_id:
            continue
        args = _server_args(frame, run_id)
        for flag in sorted(set(base_args) | set(args)):
            b, v = normalise(base_args.get(flag)), normalise(args.get(flag))
            differs = _hashable(b) != _hashable(v)
            if differs or show_all:
                layer = classify_flag(flag)
                records.append((run_id, flag, display(b), display(v), differs,
                                layer.id if layer else None, layer.risk if layer else None))
    return pd.DataFrame.from_records(records, columns=list(DIFF_COLUMNS))


def _server_args(frame: pd.DataFrame, run_id: int) -> dict[str, object]:
    return dict(_rows_of(frame, run_id).iloc[0].get("server_args") or {})
