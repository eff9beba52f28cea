"""The Tune page's charts (issue 17): a study's optimisation history, Optuna's parameter
importance, and a parallel-coordinates view of the trials' levers.

Each builder takes :func:`domain.tune.history.trials_frame` (or the importances of
:func:`domain.tune.history.param_importance`) and the UI language and returns an
unconfigured chart; the page calls :func:`domain.render.charts.styled` on it.  Every
value drawn is a trial's score as domain/tune/score.py computed it from the trial's
measured points; the subtitle says which objective and how.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import altair as alt
import pandas as pd

from domain.core.i18n import t
from domain.render.charts import FONT, PANEL_HEIGHT, AnyChart

WIDE = 720
FEASIBLE_COLOUR = "#1f77b4"
INFEASIBLE_COLOUR = "#d62728"
BEST_COLOUR = "#2ca02c"


def _title(text: str, subtitle: str) -> alt.TitleParams:
    return alt.TitleParams(text=text, subtitle=subtitle, font=FONT, subtitleFont=FONT)


def _scored(frame: pd.DataFrame) -> pd.DataFrame:
    """Complete trials with a value (pruned, failed and running ones have none to draw)."""
    if frame.empty:
        return frame
    return frame[(frame["state"] == "complete") & frame["value"].notna()].copy()


def _sla_label(feasible: object, lang: str) -> str:
    return t("tune.page.sla_met" if feasible is True else "tune.page.sla_missed", lang)


def history_chart(frame: pd.DataFrame, objective: str, lang: str) -> AnyChart:
    """Each scored trial's value by trial number (colour: SLA met or missed) under the best
    feasible value so far as a step line: how the search converged."""
    data = _scored(frame)
    data["sla"] = [_sla_label(f, lang) for f in data["feasible"]]
    x = alt.X("number:Q", title=t("tune.page.trial_number", lang), axis=alt.Axis(tickMinStep=1, format="d"))
    y_title = t(f"tune.page.objective.{objective}", lang)
    colours = alt.Scale(domain=[t("tune.page.sla_met", lang), t("tune.page.sla_missed", lang)],
                        range=[FEASIBLE_COLOUR, INFEASIBLE_COLOUR])
    dots = alt.Chart(data).mark_circle(size=80).encode(
        x=x, y=alt.Y("value:Q", title=y_title),
        color=alt.Color("sla:N", title=t("tune.page.sla", lang), scale=colours),
        tooltip=[alt.Tooltip("number:Q", title=t("tune.page.trial_number", lang)),
                 alt.Tooltip("value:Q", title=y_title, format=".1f"), alt.Tooltip("run_id:Q", title="run")],
    )
    best = frame[frame["best_so_far"].notna()] if not frame.empty else frame
    line = alt.Chart(best).mark_line(interpolate="step-after", color=BEST_COLOUR).encode(
        x=x, y=alt.Y("best_so_far:Q", title=y_title))
    return alt.layer(line, dots).properties(
        width=WIDE, height=PANEL_HEIGHT,
        title=_title(t("tune.page.history_title", lang), t("tune.page.history_subtitle", lang)))


def importance_chart(importances: Mapping[str, float], lang: str) -> alt.Chart:
    """One bar per lever: its share in what sets the best complete trials apart from the
    rest, as Optuna's default importance evaluator (PED-ANOVA) attributes it."""
    data = pd.DataFrame({"lever": list(importances), "importance": list(importances.values())})
    return alt.Chart(data).mark_bar(color=FEASIBLE_COLOUR).encode(
        x=alt.X("importance:Q", title=t("tune.page.importance_axis", lang), axis=alt.Axis(format="%")),
        y=alt.Y("lever:N", sort="-x", title=None, axis=alt.Axis(labelFont=FONT, labelLimit=260)),
        tooltip=[alt.Tooltip("lever:N"), alt.Tooltip("importance:Q", format=".1%")],
    ).properties(width=WIDE - 200, height=alt.Step(26),  # a band per lever: the height follows their number
                 title=_title(t("tune.page.importance_title", lang), t("tune.page.importance_subtitle", lang)))


def parallel_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The scored trials in long form for parallel coordinates: one row per trial and
    lever, its position on the lever's axis in [0, 1] (a range scaled between the values
    tried, a choice spaced by its order) and the value as set."""
    data = _scored(frame)
    rows = []
    params = [json.loads(p) for p in data["params"]] if not data.empty else []
    names = sorted({name for p in params for name in p})
    for name in names:
        values = [p.get(name) for p in params]
        positions = _positions(values)
        for trial, value, raw, pos, feasible in zip(data["number"], data["value"], values, positions,
                                                    data["feasible"], strict=True):
            rows.append({"number": int(trial), "lever": name, "position": pos, "set": str(raw),
                         "value": float(value), "feasible": bool(feasible)})
    return pd.DataFrame(rows, columns=["number", "lever", "position", "set", "value", "feasible"])


def _positions(values: list[object]) -> list[float | None]:
    numeric = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(numeric) == len([v for v in values if v is not None]) and numeric:
        low, high = min(numeric), max(numeric)
        return [None if v is None else (float(v) - low) / (high - low) if high > low else 0.5  # type: ignore[arg-type]
                for v in values]
    order = sorted({str(v) for v in values if v is not None})
    step = 1 / (len(order) - 1) if len(order) > 1 else 0.0
    return [None if v is None else (order.index(str(v)) * step if len(order) > 1 else 0.5) for v in values]


def parallel_chart(frame: pd.DataFrame, objective: str, lang: str) -> AnyChart:
    """One line per scored trial across the levers' axes, coloured by its objective value
    (dashed where it missed the SLA): which settings the good trials share."""
    data = parallel_frame(frame)
    data["sla"] = [_sla_label(f, lang) for f in data["feasible"]]
    value_title = t(f"tune.page.objective.{objective}", lang)
    base = alt.Chart(data).encode(
        x=alt.X("lever:N", title=None, axis=alt.Axis(labelAngle=0, labelFont=FONT, labelLimit=180)),
        y=alt.Y("position:Q", title=t("tune.page.parallel_axis", lang), axis=alt.Axis(format="%")),
        detail="number:N",
    )
    lines = base.mark_line(opacity=0.8).encode(
        color=alt.Color("value:Q", title=value_title, scale=alt.Scale(scheme="viridis")),
        strokeDash=alt.StrokeDash("sla:N", title=t("tune.page.sla", lang)),
        tooltip=[alt.Tooltip("number:Q", title=t("tune.page.trial_number", lang)),
                 alt.Tooltip("value:Q", title=value_title, format=".1f")],
    )
    marks = base.mark_circle(size=40).encode(
        color=alt.Color("value:Q", title=value_title, scale=alt.Scale(scheme="viridis")),
        tooltip=[alt.Tooltip("number:Q", title=t("tune.page.trial_number", lang)), "lever:N",
                 alt.Tooltip("set:N", title=t("tune.page.value_set", lang))],
    )
    return alt.layer(lines, marks).properties(
        width=WIDE, height=PANEL_HEIGHT + 60,
        title=_title(t("tune.page.parallel_title", lang), t("tune.page.parallel_subtitle", lang)))
