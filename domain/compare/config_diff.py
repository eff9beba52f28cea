"""What the server flags of compared runs say beside the comparability key: each run's highest
rule-risk layer and broken contest rules (from domain/flags/risk.py), and the flags that differ
from the baseline's, with their layer, risk and the other engine's counterpart."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from domain.compare.cross_engine import knob_records
from domain.compare.flag_sets import (
    _schema_version,
    run_flags,
)
from domain.compare.values import display, hashable, is_vllm, rows_of
from domain.flags.dialects.vllm import classify_vllm_flag
from domain.flags.risk import DEFAULT_PROFILE, RiskLayer, assess_risk, classify_flag
from domain.flags.schema import SchemaError

RISK_COLUMNS = ("run_id", "risk_version", "highest_risk", "broken_rules", "unclassified_flags", "notes")


# counterpart: None between runs of one engine; between an SGLang and a vLLM run each row is
# a knob (domain/flags/knobs.py): "equivalent" (the same setting), "closest" (the nearest
# setting, not the same: the knob's note says how) or "none" (one engine only).
DIFF_COLUMNS = ("run_id", "flag", "baseline_value", "value", "differs", "layer", "risk", "counterpart")


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
    only those that differ unless ``show_all``; spelled as the schema's primary names.  A
    flag one side lacks shows its default where that side's flag set is known
    (:func:`flag_set_known`; "unset" for a None default), else '?'."""
    base_rows = rows_of(frame, baseline_run_id)
    base = run_flags(base_rows)
    records: list[tuple[object, ...]] = []
    for run_id in dict.fromkeys(run_ids):
        if run_id == baseline_run_id:
            continue
        other_rows = rows_of(frame, run_id)
        other = run_flags(other_rows)
        if is_vllm(base_rows) != is_vllm(other_rows):
            records += knob_records(run_id, base.values, other.values, baseline_is_vllm=is_vllm(base_rows),
                                     show_all=show_all)
            continue
        for flag in sorted(set(base.values) | set(other.values)):
            b, v = base.value(flag), other.value(flag)
            differs = hashable(b) != hashable(v)
            if differs or show_all:
                layer = _layer_of(flag, vllm=is_vllm(base_rows))
                records.append((run_id, flag, display(b), display(v), differs,
                                layer.id if layer else None, layer.risk if layer else None, None))
    return pd.DataFrame.from_records(records, columns=list(DIFF_COLUMNS))


def _layer_of(flag: str, *, vllm: bool) -> RiskLayer | None:
    return classify_vllm_flag(flag) if vllm else classify_flag(flag)


