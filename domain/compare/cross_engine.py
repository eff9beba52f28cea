"""An SGLang run beside a vLLM run, knob by knob: the knobs that mean the same thing under another
name in the other engine (domain/flags/knobs.py), each side's value, the rows of the flag diff
and the notes the compare page shows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from domain.compare.flag_sets import (
    run_flags,
)
from domain.compare.values import UNSET_TEXT, display, hashable, is_vllm, rows_of
from domain.core.i18n import t
from domain.flags.dialects.vllm import classify_vllm_flag
from domain.flags.knobs import KnobRow, align_args
from domain.flags.risk import classify_flag

_RISK_ORDER = {"low": 1, "medium": 2, "high": 3}


def cross_engine_notes(frame: pd.DataFrame, baseline_run_id: int, run_ids: Sequence[int], lang: str) -> list[str]:
    """For each run on the other engine than the baseline, what its knob rows mean: one line
    per knob set on either side, naming it, whether the two flags are the same setting, the
    closest one or have no counterpart, and the knob's note (domain/flags/data/knobs.yaml)."""
    base_rows = rows_of(frame, baseline_run_id)
    lines: list[str] = []
    for run_id in dict.fromkeys(run_ids):
        rows = rows_of(frame, run_id)
        if run_id == baseline_run_id or is_vllm(rows) == is_vllm(base_rows):
            continue
        vllm_rows, sglang_rows = (base_rows, rows) if is_vllm(base_rows) else (rows, base_rows)
        for row in align_args(run_flags(sglang_rows).values, run_flags(vllm_rows).values):
            kind = "none" if row.no_counterpart else "equivalent" if row.equivalent else "closest"
            name = (row.knob.name.get(lang) or row.knob.name["en"]) if row.knob else _knob_label(row)
            note = (row.knob.note.get(lang) or row.knob.note["en"]) if row.knob else ""
            lines.append(t(f"compare.knob.{kind}", lang, run_id=run_id, knob=name, flags=_knob_label(row), note=note))
    return lines


def _knob_label(row: KnobRow) -> str:
    sglang = row.sglang or ({row.knob.sglang[0]: None} if row.knob and row.knob.sglang else {})
    vllm = row.vllm or ({row.knob.vllm[0]: None} if row.knob and row.knob.vllm else {})
    left = " ".join(f"--{flag}" for flag in sglang) or "—"
    right = " ".join(f"--{flag}" for flag in vllm) or "—"
    return f"{left} ↔ {right}"


def _side_text(args: Mapping[str, object]) -> str:
    if not args:
        return UNSET_TEXT
    if len(args) == 1:
        return display(next(iter(args.values())))
    return "; ".join(f"--{flag} {display(value)}" for flag, value in args.items())


def knob_records(run_id: int, baseline: Mapping[str, object], other: Mapping[str, object], *,
                  baseline_is_vllm: bool, show_all: bool) -> list[tuple[object, ...]]:
    """An SGLang run and a vLLM run lined up knob by knob (:func:`knobs.align_args`): the
    row's flag names both spellings ("--max-running-requests ↔ --max-num-seqs"); its values
    say each side's flags as written.  A knob set to the same value on both sides, where the
    knob is the same setting, is the only row that does not differ."""
    sglang_args, vllm_args = (other, baseline) if baseline_is_vllm else (baseline, other)
    records: list[tuple[object, ...]] = []
    for row in align_args(sglang_args, vllm_args):
        sides = (row.vllm, row.sglang) if baseline_is_vllm else (row.sglang, row.vllm)
        same = row.paired and row.equivalent and [hashable(v) for v in sides[0].values()] == [
            hashable(v) for v in sides[1].values()]
        if same and not show_all:
            continue
        found = [*(classify_flag(f) for f in row.sglang), *(classify_vllm_flag(f) for f in row.vllm)]
        layers = [layer for layer in found if layer is not None]
        top = max(layers, key=lambda layer: _RISK_ORDER.get(layer.risk, 0)) if layers else None
        counterpart = "none" if row.no_counterpart else "equivalent" if row.equivalent else "closest"
        records.append((run_id, _knob_label(row), _side_text(sides[0]), _side_text(sides[1]), not same,
                        top.id if top else None, top.risk if top else None, counterpart))
    return records
