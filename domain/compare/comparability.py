"""The comparability key of a measured point, and the checklist of runs against a baseline.

The seeds' lesson: a speed-up means nothing unless the model, GPU generation,
batch/concurrency, input/output length, network and metric are the same.  Each condition
below belongs to a family (model, hardware, engine, workload, generation, client,
topology, source, flags) and is either *run-level* (one value per run) or *point-level* (one
value per measured point, compared over the (scenario, concurrency) points both runs have).

A condition's state against the baseline is one of:

* ``match``    — both values known and equal;
* ``differ``   — both known and different (shown with both values);
* ``unknown``  — either side unknown (None, typically an imported run); never a match;
* ``intended`` — it differs, and the user marked it as the thing under test.

Fatal conditions (:data:`FATAL_CONDITIONS`) make a run *not comparable* when they differ,
because they change what is measured, not how well it is served: the model, its
dtype/quantization, the GPU type, the engine, the input and output lengths, the length
spread (``random_range_ratio`` 0 halves the mean lengths), the dataset, and the source
(emulated, measured or imported numbers are different kinds of fact).  A GPU type known on
one side only is fatal too (:data:`FATAL_WHEN_ONE_SIDED`): it stays ``unknown``, but a
known H200 against an unknown device is no like-for-like; unknown on both sides is only
listed.  Having no (scenario, concurrency) point in common is fatal: nothing to compare.

The server flags of the high-risk layers named in :data:`VERDICT_LAYERS` (quantization,
KV-cache dtype included; speculative decoding; experimental features; see
``domain/flags/data/risk_layers.yaml``) are conditions as well, one row per flag either run
sets, named ``flag:<flag>`` in the family ``flags``; a difference there is fatal.  A run
whose full flag set is known (measured, emulated, or imported with the server's resolved
args) has every absent flag at its schema default, so "auto → fp8_e4m3" is shown, not "? →".

Every other difference leaves the run "comparable except: …".  Any other ``unknown`` is
never fatal (we cannot claim the runs differ) but is always listed, so it cannot pass as a
match.  The user marks a condition as the thing under test with its name (``intended``).

Beside it in this package: a run's flag set as the key reads it (:mod:`flag_sets`), the
value normal form (:mod:`values`), the risk columns and the flag diff (:mod:`config_diff`) and
an SGLang run read knob by knob against a vLLM run (:mod:`cross_engine`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from domain.compare.flag_sets import (
    FlagSet,
    condition_flag,
    flag_condition,
    point_flags,
    run_flags,
    verdict_flags,
)
from domain.compare.values import MISSING_TEXT, display, hashable, is_vllm, normalise, rows_of
from domain.core.i18n import t
from domain.flags.risk import classify_flag
from domain.results import definitions

State = Literal["match", "differ", "unknown", "intended"]
Verdict = Literal["comparable", "comparable_except", "not_comparable"]
Level = Literal["run", "point"]

FAMILIES = ("model", "hardware", "engine", "workload", "generation", "client", "metric", "topology", "source", "flags")
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
    Condition("arrival", "workload", "point"),  # closed-loop vs poisson: domain/plan/arrivals.py
    Condition("workload", "workload", "point"),  # kind, parameters, file hash: domain/plan/workload.py
    Condition("cache_state", "workload", "point"),  # flushed or warm before the measured requests
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
FATAL_CONDITIONS = frozenset({"model", "dtype", "gpu_type", "engine", "input_len", "output_len", "random_range_ratio",
                              "dataset", "source", "arrival", "workload"})
# Fatal also when known on one side only (still shown as unknown): see the module docstring.
FATAL_WHEN_ONE_SIDED = frozenset({"gpu_type"})

FLAG_FAMILY = "flags"

# ``fatal`` in the matrix: whether the row, as it stands, makes the run not comparable (a
# fatal condition that differs, a one-sided unknown GPU, no common point at all).
MATRIX_COLUMNS = ("run_id", "family", "condition", "level", "fatal", "state", "baseline_value", "value")
SUMMARY_COLUMNS = ("run_id", "verdict", "fatal", "differing", "unknown", "intended", "values")


# -- values ------------------------------------------------------------------------------------


def comparability_key(point: Mapping[str, Any]) -> dict[str, dict[str, object]]:
    """The comparability key of one point (a row of the points frame), grouped by family.

    The points set is a property of a whole run, so a single point stands for it with its
    own (scenario, concurrency).  The ``flags`` family holds the high-risk flags it sets."""
    key: dict[str, dict[str, object]] = {family: {} for family in FAMILIES}
    flags = point_flags(point)
    key[FLAG_FAMILY] = {flag: flags.value(flag) for flag in verdict_flags([flags])}
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
            sets[name].add(hashable(normalise(value)))
    return RunView(run_values, {p: {n: frozenset(v) for n, v in sets.items()} for p, sets in point_values.items()})


def _compare_values(base: object, other: object) -> State:
    if base is None or other is None:
        return "unknown"
    return "match" if base == other else "differ"


def _run_value(rows: pd.DataFrame, column: str) -> object:
    """A run-level value: the same on every row; several distinct values are joined."""
    if column not in rows.columns:
        return None
    values = {hashable(normalise(v)) for v in rows[column]}
    if len(values) == 1:
        return next(iter(values))
    known = sorted(display(v) for v in values if v is not None)
    return None if None in values else " | ".join(known)


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
    """State, whether the row as it stands makes the run not comparable, and both values as shown."""
    if cond.name == POINTS_CONDITION:
        return _compare_points(base, other)
    if cond.level == "point":
        state, base_text, other_text = _compare_point_condition(base, other, cond.name)
    else:
        base_value, other_value = base.run_values[cond.name], other.run_values[cond.name]
        state = _compare_values(base_value, other_value)
        base_text, other_text = display(base_value), display(other_value)
    return state, _is_fatal(cond.name, state, base_text, other_text), base_text, other_text


def _is_fatal(name: str, state: State, base_text: str, other_text: str) -> bool:
    """Whether this row makes the run not comparable (before the user's intended marks)."""
    if state == "differ":
        return name in FATAL_CONDITIONS
    one_sided = state == "unknown" and (base_text == MISSING_TEXT) != (other_text == MISSING_TEXT)
    return one_sided and name in FATAL_WHEN_ONE_SIDED


def _flag_row(flag: str, base: FlagSet, other: FlagSet) -> tuple[State, bool, str, str]:
    base_value, other_value = base.value(flag), other.value(flag)
    state = _compare_values(hashable(base_value), hashable(other_value))
    return state, state == "differ", display(base_value), display(other_value)


def _marked(state: State, fatal: bool, name: str, intended_to_differ: Collection[str]) -> State:
    """A difference (or a fatal one-sided unknown) the user marked as the thing under test."""
    if name in intended_to_differ and (state == "differ" or (state == "unknown" and fatal)):
        return "intended"
    return state


def comparability_matrix(
    frame: pd.DataFrame,
    baseline_run_id: int,
    run_ids: Sequence[int],
    intended_to_differ: Collection[str] = frozenset(),
) -> pd.DataFrame:
    """Long matrix, one row per (run, condition) for every run of ``run_ids`` but the baseline,
    the flag conditions (:func:`flag_conditions`) after the fixed ones.

    Columns :data:`MATRIX_COLUMNS`; ``fatal`` says whether the row, as it stands, makes the
    run not comparable (it stays set on a row the user marked as intended).  For the points
    condition, ``baseline_value`` lists the points only the baseline has and ``value`` those
    only the run has."""
    base_rows = rows_of(frame, baseline_run_id)
    base, base_flags = run_view(base_rows), run_flags(base_rows)
    others = {r: rows_of(frame, r) for r in dict.fromkeys(run_ids) if r != baseline_run_id}
    flags = {r: run_flags(rows) for r, rows in others.items()}
    flag_names = verdict_flags([base_flags, *flags.values()])
    records = []
    for run_id, rows in others.items():
        other = run_view(rows)
        cells = [(c.family, c.name, c.level, _condition_row(c, base, other)) for c in CONDITIONS]
        cells += [(FLAG_FAMILY, flag_condition(f), "run", _flag_row(f, base_flags, flags[run_id])) for f in flag_names]
        cells += definitions.definition_cells(base_rows, rows)  # what each harness means by TPOT, ...
        marked = _with_engine_consequences(intended_to_differ, base_rows, rows)
        for family, name, level, (state, fatal, base_text, other_text) in cells:
            state = _marked(state, fatal, name, marked)
            records.append((run_id, family, name, level, fatal, state, base_text, other_text))
    return pd.DataFrame.from_records(records, columns=list(MATRIX_COLUMNS))


def _with_engine_consequences(intended: Collection[str], base_rows: pd.DataFrame,
                              rows: pd.DataFrame) -> Collection[str]:
    """With the engine under test, what follows from it is too: its version (another
    engine's versions do not line up with this one's) and, between SGLang and vLLM, the
    client backend each engine's API needs (bench_serving's ``vllm`` against vLLM,
    an SGLang one against SGLang; domain/plan/run_plan.py refuses any other pairing)."""
    if "engine" not in intended:
        return intended
    follows = {"engine_version"}
    if is_vllm(base_rows) != is_vllm(rows):
        follows.add("backend")
    return {*intended, *follows}


def intended_choices(frame: pd.DataFrame, baseline_run_id: int, run_ids: Sequence[int]) -> list[str]:
    """The condition names a user can mark as the thing under test for these runs: the fixed
    conditions, then the flag conditions of their high-risk flags."""
    runs = [r for r in dict.fromkeys([baseline_run_id, *run_ids]) if r in set(frame["run_id"])]
    flags = verdict_flags([run_flags(rows_of(frame, r)) for r in runs])
    return [*CONDITION_NAMES, *(flag_condition(f) for f in flags)]


def is_condition_name(name: str) -> bool:
    """A fixed condition, or a well-formed flag condition (kept from a URL before the runs load)."""
    return name in CONDITION_NAMES or (condition_flag(name) or "").strip() != ""


# -- summary -----------------------------------------------------------------------------------


def comparability_summary(matrix: pd.DataFrame) -> pd.DataFrame:
    """Per run: the verdict and the conditions behind it (columns :data:`SUMMARY_COLUMNS`);
    ``values`` maps every condition not matching to its (baseline, run) values as shown."""
    # Plain rows grouped by hand: a frame per run, masked four times, was most of this
    # function's time at nine runs, for a few dozen conditions each.
    by_run: dict[object, list[dict[str, Any]]] = {}
    for row in matrix[["run_id", "condition", "state", "fatal", "baseline_value", "value"]].to_dict("records"):
        by_run.setdefault(row["run_id"], []).append(row)
    records = [_summarise_run(run_id, rows) for run_id, rows in by_run.items()]
    return pd.DataFrame.from_records(records, columns=list(SUMMARY_COLUMNS))


def _summarise_run(run_id: object, rows: list[dict[str, Any]]) -> tuple[object, ...]:
    def names(*states: str, fatal_only: bool = False) -> list[str]:
        return [r["condition"] for r in rows if r["state"] in states and (bool(r["fatal"]) or not fatal_only)]

    fatal = names("differ", "unknown", fatal_only=True)
    differing, unknown = names("differ"), names("unknown")
    verdict: Verdict = ("not_comparable" if fatal else "comparable_except" if differing or unknown
                        else "comparable")
    values = {r["condition"]: (r["baseline_value"], r["value"]) for r in rows if r["state"] != "match"}
    return run_id, verdict, fatal, differing, unknown, names("intended"), values


def condition_label(name: str, lang: str) -> str:
    if definitions.aspect_of(name) is not None:
        return definitions.label(name, lang)
    flag = condition_flag(name)
    if flag is None:
        return t(f"compare.cond.{name}", lang)
    layer = classify_flag(flag)
    layer_name = (layer.name.get(lang) or layer.name["en"]) if layer else t("compare.changed.unclassified", lang)
    return t("compare.cond.flag", lang, flag=flag, layer=layer_name)


def family_label(family: str, lang: str) -> str:
    return t(f"compare.family.{family}", lang)


def state_text(matrix_row: Mapping[str, Any], lang: str) -> str:
    """A matrix cell as the checklist shows it: "✓", "✗ 128 → 256", "unknown (? / 0.5.9)", …"""
    if definitions.aspect_of(str(matrix_row["condition"])) is not None:
        name = str(matrix_row["condition"])
        return t(f"compare.state.{matrix_row['state']}", lang,
                 baseline=definitions.value_text(name, matrix_row["baseline_value"], lang),
                 value=definitions.value_text(name, matrix_row["value"], lang))
    return t(f"compare.state.{matrix_row['state']}", lang, baseline=matrix_row["baseline_value"],
             value=matrix_row["value"])


def summary_line(summary_row: Mapping[str, Any], lang: str) -> str:
    """The verdict naming each difference with both values, in the UI language: "comparable",
    "comparable except — seed: 42 → 7", "not comparable — KV-cache …: auto → fp8_e4m3; …"."""
    values: Mapping[str, tuple[str, str]] = summary_row.get("values") or {}
    fatal = list(summary_row["fatal"])
    groups = [("", fatal if fatal else list(summary_row["differing"]), "differ")]
    if fatal:
        groups.append(("compare.summary.also", [n for n in summary_row["differing"] if n not in fatal], "differ"))
    unknown = [n for n in summary_row["unknown"] if n not in fatal]
    # Unknown on both sides (an import's silent fields): the names are enough, "? / ?" says nothing.
    both = [n for n in unknown if tuple(values.get(n) or ()) == (MISSING_TEXT, MISSING_TEXT)]
    groups += [("compare.summary.unknown", [n for n in unknown if n not in both], "unknown"),
               ("compare.summary.unknown_both", both, "label"),
               ("compare.summary.intended", list(summary_row["intended"]), "differ")]
    parts = [_group_text(key, names, style, values, lang) for key, names, style in groups if names]
    fields = "; ".join(parts)
    verdict = summary_row["verdict"]
    if verdict == "comparable" and not fields:
        return t("compare.summary.comparable", lang)
    return t("compare.summary.comparable_with" if verdict == "comparable" else f"compare.summary.{verdict}", lang,
             fields=fields)


def _group_text(key: str, names: Sequence[str], style: str, values: Mapping[str, tuple[str, str]], lang: str) -> str:
    if style == "label":
        fields = ", ".join(condition_label(n, lang) for n in names)
    else:
        fields = "; ".join(_field_text(n, values.get(n), style, lang) for n in names)
    return t(key, lang, fields=fields) if key else fields


def _field_text(name: str, values: tuple[str, str] | None, style: str, lang: str) -> str:
    """One condition with both values: "label: a → b", "label (? / b)" when unknown."""
    label = condition_label(name, lang)
    if values is None:
        return label
    base, value = values
    if definitions.aspect_of(name) is not None:
        return definitions.field_text(name, values, lang, unknown=style == "unknown")
    if name == POINTS_CONDITION:
        return t("compare.summary.field_points", lang, label=label, baseline=base or "—", value=value or "—")
    key = "compare.summary.field_unknown" if style == "unknown" else "compare.summary.field"
    return t(key, lang, label=label, baseline=base, value=value)


def verdict_line(summary_row: Mapping[str, Any], baseline_run_id: int, lang: str) -> str:
    """"run #12 vs baseline #10: not comparable — …": one line per compared run, for exports."""
    return t("compare.verdict_line", lang, run_id=summary_row["run_id"], baseline=baseline_run_id,
             verdict=summary_line(summary_row, lang))


def verdict_lines(checklist: pd.DataFrame, baseline_run_id: int, lang: str) -> list[str]:
    return [verdict_line(row, baseline_run_id, lang) for row in checklist.to_dict("records")]


# -- server flags --------------------------------------------------------------------------------


# -- risk and flags ------------------------------------------------------------------------------


