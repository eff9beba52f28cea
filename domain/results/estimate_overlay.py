"""The estimate beside each measured point: what :mod:`domain.estimate.estimator` predicts
for the point's ISL, OSL, concurrency and server flags, and measured ÷ estimated.

:func:`estimates_for` gives one row per (run, scenario, concurrency) of a comparison's
summary.  The run's model, GPU, engine and flags come from the points frame
(:mod:`domain.results.frames`); a run or point the estimator cannot honestly describe gets
NaN and a ``reason`` (a catalogue key under ``estimate_overlay.reason.``) with its
``reason_detail``, never a guess and never an exception:

* server flags not known (an imported run whose file did not carry the server's resolved
  args): the estimate depends on TP, the KV pool and the running cap, which would be guessed;
* a router or PD topology: the frame holds the plan-wide flags only, not the replicas';
* no model, GPU or engine recorded, or one the estimator has no figures for
  (:class:`~domain.estimate.estimator.CannotEstimate`);
* the estimator's sizing leaves no KV cache for the run, or less than one request of the
  point needs (a server that ran anyway shows the sizing is off for it);
* a point without one input and one output length, or measured at a finite request rate
  (the estimator models bench_serving's closed loop at ``--max-concurrency``, every request
  sent at once).

The estimator predicts medians (with fixed lengths every request of a round sees the same
figures), so the ratios are taken against the measured medians: output tok/s, TTFT p50 and
TPOT p50.  ``extrapolated`` names the dimensions in which the point lies outside what the
constants were fitted on (:func:`~domain.estimate.estimator.extrapolated`), plus
``random_range_ratio`` when the prompts' lengths varied (the model and its fitted rows
assume fixed lengths).  The calibration columns say how the estimate was checked: the
``calibration.yaml`` entry it used and its leave-one-ISL-group-out mean absolute errors.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from domain.core.i18n import t
from domain.estimate.estimator import (
    CLIP_MAX_NEW_TOKENS,
    CannotEstimate,
    PointEstimate,
    Setup,
    estimate_point,
    extrapolated,
    setup_for,
)
from domain.results.analysis import POINT, is_missing, run_label

# The summary's measured metric → the estimate's column (medians only: see the module docstring).
ESTIMATED_METRICS: dict[str, str] = {
    "output_tok_s": "est_output_tok_s", "ttft_p50": "est_ttft_ms", "tpot_p50": "est_tpot_ms",
    "itl_p50": "est_itl_ms", "e2e_p50": "est_e2e_ms",
}
RATIO_METRICS = ("output_tok_s", "ttft_p50", "tpot_p50")  # each gets ratio_<metric> = measured ÷ estimated
CALIBRATION_COLUMNS = ("fitted_on", "calibrated_for", "borrowed", "cv_rows", "cv_ttft_mae_pct", "cv_tpot_mae_pct")
COLUMNS = (
    "run_id", "run_name", "source", *POINT, "input_len", "output_len", "est_batch", *ESTIMATED_METRICS.values(),
    "bound", *(f"ratio_{m}" for m in RATIO_METRICS), "extrapolated", "reason", "reason_detail", *CALIBRATION_COLUMNS,
)
# Measured throughput below this share of the estimate is "far below": the calibration's
# cross-validated errors are 8 % (TPOT) and 19 % (TTFT) mean absolute (calibration.yaml),
# so 30 % short is more than the model's own error explains on the rows it was checked on.
FAR_BELOW_RATIO = 0.7
AGGREGATED = "aggregated"
# The points frame's columns the estimate reads (domain/results/frames.py).
FRAME_COLUMNS = ("run_id", *POINT, "model", "gpu_type", "engine", "server_args", "server_args_known", "load_format",
                 "topology", "input_len", "output_len", "random_range_ratio", "request_rate")
CLOSED_LOOP_RATES = ("inf", "infinity", "+inf")


Record = Mapping[str, Any]  # one row of the points frame or the summary, as a dict (pandas rows are slow)


@dataclass(frozen=True)
class _Refusal:
    """Why a run or point gets no estimate: a key under ``estimate_overlay.reason.`` and its detail."""

    reason: str
    detail: str = ""


# -- the estimates -----------------------------------------------------------------------------


def estimates_for(frame: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """One row per (run_id, scenario, concurrency) of ``summary`` (columns :data:`COLUMNS`):
    the estimate, measured ÷ estimated, or NaN with the reason (see the module docstring).
    ``frame`` is the points frame the summary was made from (same scenario names)."""
    if summary.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    points: dict[tuple[object, object, object], list[Record]] = {}
    for record in _records(frame, FRAME_COLUMNS):
        points.setdefault((record["run_id"], record["scenario"], record["concurrency"]), []).append(record)
    setups: dict[object, Setup | _Refusal] = {}  # per run: the flags are the run's, not the point's
    out = []
    for measured in _records(summary, ("run_id", "run_name", "source", *POINT, *RATIO_METRICS)):
        rows = points.get((measured["run_id"], measured["scenario"], measured["concurrency"]))
        if not rows:
            out.append(_row(measured, _Refusal("lengths_unknown"), None))
            continue
        run_id = measured["run_id"]
        if run_id not in setups:
            setups[run_id] = _setup_of(rows[0])
        out.append(_point_row(measured, rows, setups[run_id]))
    return pd.DataFrame(out, columns=list(COLUMNS))


def _records(frame: pd.DataFrame, columns: Sequence[str]) -> list[Record]:
    """The rows as dicts, of the ``columns`` the frame has (a summary has hundreds)."""
    return frame[[c for c in columns if c in frame.columns]].to_dict("records")


def _setup_of(first: Record) -> Setup | _Refusal:
    """The run's estimator setup from one of its rows, or why there is none."""
    if not _flags_known(first):
        return _Refusal("server_args_unknown")
    topology = first.get("topology")
    if not is_missing(topology) and topology != AGGREGATED:
        return _Refusal("topology", str(topology))
    for column, reason in (("model", "model_unknown"), ("gpu_type", "gpu_unknown"), ("engine", "engine_unknown")):
        if is_missing(first.get(column)) or not str(first.get(column)).strip():
            return _Refusal(reason)
    try:
        setup = setup_for(str(first["model"]), str(first["gpu_type"]), _server_args(first), str(first["engine"]))
    except CannotEstimate as exc:
        return _Refusal("no_figures", str(exc))
    # The estimator's sizing leaves no KV cache: a server that ran anyway shows the sizing
    # is off for it, so its step times would be too.
    return setup if setup.kv_pool_tokens > 0 else _Refusal("kv_pool", "0")


def _flags_known(row: Record) -> bool:
    """Whether the run's whole flag set is known, so an unset flag is at its default.

    ``server_args_known`` when the frame carries it; otherwise frames.py's own mark of it:
    ``load_format`` is filled ('auto' for an unset flag) only for runs measured or emulated
    here and for imports whose file carried the server's resolved args."""
    known = row.get("server_args_known")
    if known is not None and not is_missing(known):
        return bool(known)
    return not is_missing(row.get("load_format")) and isinstance(_server_args_or_none(row), Mapping)


def _server_args_or_none(row: Record) -> Mapping[str, object] | None:
    args = row.get("server_args")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    return args if isinstance(args, Mapping) else None


def _server_args(row: Record) -> Mapping[str, object]:
    return _server_args_or_none(row) or {}


def _one(rows: Sequence[Record], column: str) -> Any:
    """The column's one value over the point's repeats, None when unknown or several."""
    values = {v for row in rows if not is_missing(v := row.get(column))}
    return next(iter(values)) if len(values) == 1 else None


def _real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))


def _closed_loop(rate: object) -> bool:
    """An unknown rate is taken as bench_serving's default (inf); a finite one is not a closed loop."""
    if rate is None:
        return True
    if isinstance(rate, str):
        return rate.strip().lower() in CLOSED_LOOP_RATES
    return isinstance(rate, numbers.Real) and math.isinf(float(rate))


def _point_row(measured: Record, rows: Sequence[Record], setup: Setup | _Refusal) -> dict[str, Any]:
    if isinstance(setup, _Refusal):
        return _row(measured, setup, None)
    isl, osl = _one(rows, "input_len"), _one(rows, "output_len")
    if not (_real(isl) and _real(osl) and isl > 0 and osl > 0):
        return _row(measured, _Refusal("lengths_unknown"), setup)
    if setup.kv_pool_tokens < int(isl) + min(int(osl), CLIP_MAX_NEW_TOKENS):
        return _row(measured, _Refusal("kv_pool", f"{setup.kv_pool_tokens:,}"), setup)
    rate = _one(rows, "request_rate")
    if not _closed_loop(rate):
        return _row(measured, _Refusal("request_rate", str(rate)), setup)
    estimate = estimate_point(setup, int(isl), int(osl), int(measured["concurrency"]))
    row = _row(measured, None, setup)
    row.update(_estimate_columns(estimate))
    outside = extrapolated(setup, estimate)
    ratio = _one(rows, "random_range_ratio")
    if _real(ratio) and ratio < 1:
        outside.append("random_range_ratio")
    row["extrapolated"] = ", ".join(outside)
    for metric in RATIO_METRICS:
        row[f"ratio_{metric}"] = _ratio(measured.get(metric), row[ESTIMATED_METRICS[metric]])
    return row


def _estimate_columns(estimate: PointEstimate) -> dict[str, Any]:
    # With fixed lengths every request of a round sees the same TTFT and TPOT, so its
    # median E2E is TTFT plus the OSL − 1 decode steps.
    e2e = estimate.ttft_ms + max(0, estimate.output_len - 1) * estimate.tpot_ms
    return {
        "input_len": estimate.input_len, "output_len": estimate.output_len, "est_batch": estimate.batch,
        "est_output_tok_s": estimate.output_tok_s, "est_ttft_ms": estimate.ttft_ms, "est_tpot_ms": estimate.tpot_ms,
        "est_itl_ms": estimate.itl_ms, "est_e2e_ms": e2e, "bound": estimate.bound,
    }


def _as_float(value: object) -> float | None:
    return float(value) if isinstance(value, numbers.Real) and _real(value) else None


def _ratio(measured: object, estimated: object) -> float:
    top, bottom = _as_float(measured), _as_float(estimated)
    return top / bottom if top is not None and bottom is not None and bottom > 0 else math.nan


def _row(measured: Record, refusal: _Refusal | None, setup: Setup | _Refusal | None) -> dict[str, Any]:
    """A row of NaNs for the point, with the refusal's reason and the calibration (if any)."""
    row: dict[str, Any] = {column: math.nan for column in COLUMNS}
    row.update({"run_id": measured["run_id"], "run_name": measured.get("run_name"), "source": measured.get("source"),
                "scenario": measured["scenario"], "concurrency": measured["concurrency"], "bound": None,
                "extrapolated": "", "reason": refusal.reason if refusal else None,
                "reason_detail": refusal.detail if refusal else None, "fitted_on": None, "calibrated_for": None,
                "borrowed": None})
    if isinstance(setup, Setup):
        calibration = setup.calibration
        row.update({"fitted_on": calibration.fitted_on or None,
                    "calibrated_for": f"{calibration.gpu}/{calibration.family}", "borrowed": calibration.borrowed,
                    "cv_rows": calibration.cv_rows, "cv_ttft_mae_pct": _or_nan(calibration.cv_ttft_mae_pct),
                    "cv_tpot_mae_pct": _or_nan(calibration.cv_tpot_mae_pct)})
    return row


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def has_estimates(estimates: pd.DataFrame | None) -> bool:
    """Whether any point of ``estimates`` has an estimated throughput."""
    return estimates is not None and not estimates.empty and estimates["est_output_tok_s"].notna().any()


# -- sentences ---------------------------------------------------------------------------------


def reason_text(reason: str, detail: object, lang: str) -> str:
    """Why a run or point has no estimate, in ``lang``."""
    return t(f"estimate_overlay.reason.{reason}", lang, detail="" if is_missing(detail) else detail)


def bound_text(bound: object, lang: str) -> str:
    """What bounds the estimate, in words (the estimator's own labels)."""
    return t(f"estimate.bound.{bound}", lang) if isinstance(bound, str) and bound else ""


def far_below(estimates: pd.DataFrame, threshold: float = FAR_BELOW_RATIO) -> pd.DataFrame:
    """The points whose measured output throughput is below ``threshold`` × the estimate."""
    ratios = pd.to_numeric(estimates["ratio_output_tok_s"], errors="coerce")
    return estimates[ratios < threshold]


def far_below_sentences(estimates: pd.DataFrame, lang: str, threshold: float = FAR_BELOW_RATIO) -> list[str]:
    """One sentence per point far below its estimate (:func:`far_below`), naming the run,
    the scenario, the share of the estimate and what bounds the estimate."""
    measured = pd.to_numeric(estimates["est_output_tok_s"], errors="coerce") * pd.to_numeric(
        estimates["ratio_output_tok_s"], errors="coerce")
    return [
        t("estimate_overlay.far_below", lang, run=run_label(row["run_id"], row["run_name"], row["source"], lang),
          scenario=row["scenario"], c=row["concurrency"], pct=100.0 * row["ratio_output_tok_s"],
          measured=measured[index], estimated=row["est_output_tok_s"], bound=bound_text(row["bound"], lang))
        for index, row in far_below(estimates, threshold).iterrows()
    ]


def _method(row: pd.Series, lang: str, *, short: bool) -> str:
    if not row["fitted_on"] or is_missing(row["cv_ttft_mae_pct"]):
        return t("estimate_overlay.uncalibrated_short" if short else "estimate.method_uncalibrated", lang)
    ttft, tpot = f"{row['cv_ttft_mae_pct']:g}", f"{row['cv_tpot_mae_pct']:g}"
    if short:
        return t("estimate_overlay.cv_short", lang, fitted_on=row["fitted_on"], ttft=ttft, tpot=tpot)
    return t("estimate.method", lang, fitted_on=row["fitted_on"], rows=int(row["cv_rows"]), ttft=ttft, tpot=tpot)


def _calibrations(estimates: pd.DataFrame) -> pd.DataFrame:
    """The distinct calibrations behind the estimated points."""
    done = estimates[pd.to_numeric(estimates["est_output_tok_s"], errors="coerce").notna()]
    return done.drop_duplicates(subset=["fitted_on", "calibrated_for"])


def chart_caption(estimates: pd.DataFrame | None, lang: str) -> str | None:
    """"dashed: estimate (…cross-validated MAE…)" for a chart's subtitle; None without estimates."""
    if estimates is None or not has_estimates(estimates):
        return None
    methods = dict.fromkeys(_method(row, lang, short=True) for _, row in _calibrations(estimates).iterrows())
    return t("estimate_overlay.chart_caption", lang, method="; ".join(methods))


def calibration_lines(estimates: pd.DataFrame, lang: str) -> list[str]:
    """How the estimates were made and checked: what the ratio columns are, each calibration's
    cross-validated error (and that it was borrowed, when it was), how many points are
    extrapolated, and which runs have no estimate and why.  Empty without estimates."""
    if not has_estimates(estimates):
        return []
    lines = [t("estimate_overlay.ratio_method", lang)]
    for _, row in _calibrations(estimates).iterrows():
        lines.append(_method(row, lang, short=False))
        if row["borrowed"] and row["fitted_on"]:
            gpu, _, family = str(row["calibrated_for"]).partition("/")
            lines.append(t("estimate.borrowed", lang, gpu=gpu, family=family, fitted_on=row["fitted_on"]))
    done = estimates[pd.to_numeric(estimates["est_output_tok_s"], errors="coerce").notna()]
    outside = done[done["extrapolated"].astype(bool)]
    if not outside.empty:
        dims = dict.fromkeys(d for text in outside["extrapolated"] for d in str(text).split(", ") if d)
        lines.append(t("estimate_overlay.extrapolated_points", lang, n=len(outside), total=len(done),
                       dims=", ".join(dims)))
    return [*lines, *refusal_lines(estimates, lang)]


def refusal_lines(estimates: pd.DataFrame, lang: str) -> list[str]:
    """One line naming each run without any estimate, with its reason."""
    refused = estimates[estimates["reason"].notna()]
    whole_runs = [run for run, rows in refused.groupby("run_id", sort=False)
                  if len(rows) == int((estimates["run_id"] == run).sum())]
    if not whole_runs:
        return []
    first = refused[refused["run_id"].isin(whole_runs)].drop_duplicates("run_id")
    runs = "; ".join(f"{run_label(r['run_id'], r['run_name'], r['source'], lang)}: "
                     f"{reason_text(r['reason'], r['reason_detail'], lang)}" for _, r in first.iterrows())
    return [t("estimate_overlay.none", lang, runs=runs)]


# -- a table for the page ----------------------------------------------------------------------

TABLE_COLUMNS = ("est_output_tok_s", "ratio_output_tok_s", "est_ttft_ms", "ratio_ttft_p50", "est_tpot_ms",
                  "ratio_tpot_p50")


def estimate_table(estimates: pd.DataFrame, lang: str) -> pd.DataFrame:
    """The estimated points with headers in ``lang``: run, scenario, concurrency, each
    estimate beside measured ÷ estimated, what bounds the estimate and the dimensions in
    which it is extrapolated.  Points without an estimate are left out (their runs are
    named by :func:`refusal_lines`)."""
    done = estimates[pd.to_numeric(estimates["est_output_tok_s"], errors="coerce").notna()]
    columns: dict[str, Any] = {
        t("slides.col.run", lang): [run_label(r, n, s, lang) for r, n, s in
                                    zip(done["run_id"], done["run_name"], done["source"], strict=True)],
        t("compare.col.scenario", lang): done["scenario"].tolist(),
        t("compare.col.concurrency", lang): done["concurrency"].tolist(),
    }
    for column in TABLE_COLUMNS:
        columns[t(f"estimate_overlay.col.{column}", lang)] = pd.to_numeric(done[column], errors="coerce").tolist()
    columns[t("estimate_overlay.col.bound", lang)] = [bound_text(b, lang) for b in done["bound"]]
    columns[t("estimate_overlay.col.extrapolated", lang)] = done["extrapolated"].tolist()
    return pd.DataFrame(columns)
