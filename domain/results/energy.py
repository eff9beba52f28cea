"""Energy of a measured point: joules per output token and per request, from the GPU power
sampled over the point's measured window, with what makes that figure trustworthy or not.

The runner samples NVML's board power (``power_w``) of the run's GPUs only (runner/attempt.py
hands the run's GPU set to the sampler, runner/telemetry.py) and keeps, per GPU, the mean of
the samples taken after the warmup.  The energy of the window is taken as

    E = Σ over the run's GPUs of mean power × window length (bench_serving's ``duration``),

the integral of power when the samples are evenly spaced (the sampler runs at a fixed rate),
without needing the raw samples, which the compare page never reads.  J/token divides E by
the output tokens bench_serving counted (``total_output_tokens``), J/request by the
completed requests: the cost of what the user got, as InferenceX reports J per output token.

Validity, said beside the number (:func:`energy_note`):

* **sample rate**: power samples per GPU ÷ window length.  Below :data:`MIN_POWER_HZ` or
  with fewer than :data:`MIN_POWER_SAMPLES` samples the mean may miss a phase of the
  window, so the figure is marked ``few_samples``.
* **idle share**: the share of utilisation samples at 0 % over the window (the runner's
  ``util_idle_share`` per GPU, averaged): power the GPUs drew while doing nothing is in E.
  Above :data:`IDLE_SHARE_NOTE` it is said.
* **power cap**: NVML's clock-event reasons of the window included the software power cap
  (0x4) or the hardware power brake (0x80): the GPUs ran at their power limit, so J/token
  is that of a capped GPU.

No figure, with the reason, for a point without power samples: an import (the file carries
no power), a host without NVML, an external endpoint (the runner cannot tell its GPUs), or
an emulated run (the emulator has no GPU; whatever NVML read on the host was not the power
of the tokens it emulated, so no number is made from it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from domain.core.i18n import t
from domain.core.numbers import real_number
from domain.results.validity import SW_POWER_CAP

MIN_POWER_HZ = 1.0  # samples per second per GPU below which the window mean is a rough guess
MIN_POWER_SAMPLES = 5  # fewer samples per GPU than this over the window: same
IDLE_SHARE_NOTE = 0.10  # GPUs idle in more than 10 % of the window: said beside the figure
HW_POWER_BRAKE = 0x80  # NVML's clock-event reason beside the software power cap (validity.py)

# What the points frame gets, per point (frames.point_row).
ENERGY_COLUMNS = ("energy_j", "j_per_output_token", "j_per_request", "power_sample_hz", "gpu_idle_share",
                  "power_capped", "energy_status")
STATUSES = ("measured", "no_power_data", "emulated", "external")


def _number(row: Mapping[str, Any], column: str) -> float | None:
    return real_number(row.get(column), finite=True)


def energy_status(row: Mapping[str, Any]) -> str:
    """Whether a point's power can give its energy: 'measured', else why not."""
    if row.get("source") == "emulated":
        return "emulated"
    if str(row.get("engine") or "").startswith("external"):
        return "external"
    if _number(row, "gpu_power_w_sum") is None or not _number(row, "duration_s"):
        return "no_power_data"
    return "measured"


def energy_columns(row: Mapping[str, Any]) -> dict[str, Any]:
    """:data:`ENERGY_COLUMNS` of one points-frame row (which carries the telemetry's
    ``gpu_power_w_sum``, ``gpu_power_samples``, ``gpu_idle_share``,
    ``gpu_clock_event_reasons_any`` and the record's ``duration_s``, ``total_output_tokens``
    and ``completed``).  None where a figure cannot be made."""
    status = energy_status(row)
    out: dict[str, Any] = dict.fromkeys(ENERGY_COLUMNS)
    out["energy_status"] = status
    if status != "measured":
        return out
    duration = _number(row, "duration_s") or 0.0
    energy = (_number(row, "gpu_power_w_sum") or 0.0) * duration
    samples = _number(row, "gpu_power_samples")
    reasons = _number(row, "gpu_clock_event_reasons_any")
    out.update(energy_j=energy, j_per_output_token=_per(energy, _number(row, "total_output_tokens")),
               j_per_request=_per(energy, _number(row, "completed")),
               power_sample_hz=None if samples is None else samples / duration,
               gpu_idle_share=_number(row, "gpu_idle_share"),
               power_capped=None if reasons is None else bool(int(reasons) & (SW_POWER_CAP | HW_POWER_BRAKE)))
    return out


def _per(energy: float, count: float | None) -> float | None:
    return energy / count if count else None


def energy_flags(row: Mapping[str, Any]) -> list[str]:
    """The validity flags of a measured figure: 'few_samples', 'idle', 'power_capped'."""
    flags = []
    hz, duration = _number(row, "power_sample_hz"), _number(row, "duration_s")
    if hz is None or hz < MIN_POWER_HZ or (duration is not None and hz * duration < MIN_POWER_SAMPLES):
        flags.append("few_samples")
    idle = _number(row, "gpu_idle_share")
    if idle is not None and idle > IDLE_SHARE_NOTE:
        flags.append("idle")
    capped = row.get("power_capped")
    if isinstance(capped, bool | np.bool_) and capped:  # a frame cell may be NumPy's bool, or NaN when unknown
        flags.append("power_capped")
    return flags


def energy_note(row: Mapping[str, Any], lang: str) -> str:
    """One point's energy validity in words: the sample rate, idle share and power cap of a
    measured figure, or why there is none ("no power data", with the reason)."""
    status = row.get("energy_status") or energy_status(row)
    if status != "measured":
        return t(f"energy.status.{status}", lang)
    hz, idle = _number(row, "power_sample_hz"), _number(row, "gpu_idle_share")
    parts = [t("energy.note.rate", lang, hz=f"{hz:.1f}" if hz is not None else "?"),
             t("energy.note.idle", lang, pct=f"{idle * 100:.0f}") if idle is not None
             else t("energy.note.idle_unknown", lang)]
    parts += [t(f"energy.flag.{flag}", lang) for flag in energy_flags(row)]
    return ", ".join(parts)


def energy_notes(frame: pd.DataFrame, lang: str) -> pd.DataFrame:
    """Per (run, scenario, concurrency) of a points frame: ``energy``, the :func:`energy_note`
    of its repeats (distinct notes joined by " / "; empty for an emulated point)."""
    keys = ["run_id", "scenario", "concurrency"]
    if frame.empty:
        return pd.DataFrame(columns=[*keys, "energy"])
    # An emulated point's badge says it is no real GPU: no J/token follows without a note.
    notes = [energy_note(row, lang) if energy_status(row) != "emulated" else "" for row in frame.to_dict("records")]
    table = frame[keys].assign(energy=notes)
    joined = table.groupby(keys, sort=False, dropna=False)["energy"].agg(lambda n: " / ".join(dict.fromkeys(n)))
    return joined.reset_index()


def energy_label(j_per_token: object, lang: str) -> str:
    """" · 0.42 J/tok" after a point's label in the Pareto view; empty without a figure."""
    value = real_number(j_per_token, finite=True)
    return "" if value is None else t("energy.label", lang, value=f"{value:.3g}")


# -- from a run's telemetry rows (the run page reads them, not the comparison's pivot) ---------


def power_by_point(telemetry: Iterable[Any]) -> dict[int, dict[str, Any]]:
    """Per point id: ``gpu_power_w_sum``, ``gpu_power_samples``, ``gpu_idle_share`` and
    ``gpu_clock_event_reasons_any`` from its telemetry summaries (``TelemetryRow`` objects or
    mappings), as ``db/queries.py`` POINTS_FOR_COMPARISON pivots them for a comparison."""
    found: dict[int, dict[str, Any]] = {}
    for row in telemetry:
        fields = row if isinstance(row, Mapping) else vars(row)
        if fields.get("source") != "gpu":
            continue
        point = found.setdefault(int(fields["point_id"]), {"power": [], "samples": [], "idle": [], "reasons": None})
        _take_summary(point, str(fields.get("metric")), fields.get("n"), fields.get("mean"), fields.get("max"))
    return {point_id: _pivot(point) for point_id, point in found.items()}


def _take_summary(point: dict[str, Any], metric: str, n: Any, mean: Any, high: Any) -> None:
    if metric == "power_w" and mean is not None:
        point["power"].append(float(mean))
        point["samples"].append(int(n))
    elif metric == "util_idle_share" and mean is not None:
        point["idle"].append(float(mean))
    elif metric == "clock_event_reasons" and high is not None:
        point["reasons"] = (point["reasons"] or 0) | int(high)


def _pivot(point: dict[str, Any]) -> dict[str, Any]:
    return {"gpu_power_w_sum": sum(point["power"]) if point["power"] else None,
            "gpu_power_samples": min(point["samples"]) if point["samples"] else None,
            "gpu_idle_share": sum(point["idle"]) / len(point["idle"]) if point["idle"] else None,
            "gpu_clock_event_reasons_any": point["reasons"]}


def stored_point_energy(point: Any, power: Mapping[str, Any] | None, source: str, engine: str | None,
                        lang: str) -> tuple[float | None, float | None, str]:
    """(J/output token, J/request, :func:`energy_note`) of one stored point (a ``PointRow``)
    with its :func:`power_by_point` entry: the run page's points table."""
    record = json.loads(point.raw_record or "{}")
    row: dict[str, Any] = {"source": source, "engine": engine, "duration_s": point.duration_s,
                           "completed": point.completed, "total_output_tokens": record.get("total_output_tokens"),
                           **(power or {})}
    row.update(energy_columns(row))
    return row["j_per_output_token"], row["j_per_request"], energy_note(row, lang)


def runs_without_energy(frame: pd.DataFrame, lang: str) -> dict[int, str]:
    """Per run of a points frame none of whose points has a J/token figure: why, in words
    (the first point's :func:`energy_note`, e.g. "no power data")."""
    if frame.empty:
        return {}
    figures = frame["j_per_output_token"] if "j_per_output_token" in frame.columns else pd.Series(
        None, index=frame.index, dtype=object)
    found = {}
    for run_id, rows in frame.assign(_j=pd.to_numeric(figures, errors="coerce")).groupby("run_id", sort=False):
        if rows["_j"].isna().all():
            found[int(run_id)] = energy_note(rows.iloc[0].to_dict(), lang)
    return found


def energy_absence_line(frame: pd.DataFrame, lang: str) -> str | None:
    """One line naming the runs without J/token and why ("#3: no power data"); None when
    every run has a figure."""
    missing = runs_without_energy(frame, lang)
    if not missing:
        return None
    runs = "; ".join(f"#{run_id}: {note}" for run_id, note in missing.items())
    return t("energy.absent", lang, runs=runs)
