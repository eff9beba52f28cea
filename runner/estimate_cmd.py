"""``python -m runner estimate PLAN.yaml [--json]``: the estimator's figures for every point of a plan.

Nothing runs and nothing is written: the plan is read (``domain/plan/plan_io.py``), its
configuration resolved as SGLang would, and each distinct (scenario, concurrency) is
estimated by ``domain/estimate/estimator.py``.  The plain form prints a table under two
lines that say these are estimates and how good they were against measurements;
``--json`` prints a list of objects, one per point, for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from domain.core.i18n import t
from domain.core.settings import Settings, get_settings
from domain.estimate.constants import Calibration
from domain.estimate.estimator import (
    CannotEstimate,
    PointEstimate,
    Setup,
    estimate_plan,
    extrapolated,
    setup_from_plan,
)
from domain.plan.run_plan import RunPlan
from runner.plan_file import load_plan_file

EXIT_OK = 0
EXIT_INVALID = 1


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    est = subparsers.add_parser("estimate", help="estimate TTFT, TPOT and throughput for every point of a plan "
                                                 "(a model, not a measurement)")
    est.add_argument("plan", help="plan YAML file")
    est.add_argument("--json", action="store_true", help="print a JSON list, one object per point")
    est.set_defaults(func=command)


def command(args: argparse.Namespace, settings: Settings) -> int:
    """The form ``runner/cli.py`` calls its commands in."""
    return _run(args, settings)


def run(args: argparse.Namespace) -> int:
    return _run(args, get_settings())


def _lang(args: argparse.Namespace) -> str:
    return getattr(args, "lang", None) or "en"


def _run(args: argparse.Namespace, settings: Settings) -> int:
    lang = _lang(args)
    plan = load_plan_file(args.plan, settings, lang)
    if plan is None:
        return EXIT_INVALID
    try:
        setup = setup_from_plan(plan)
        points = estimate_plan(plan)
    except CannotEstimate as exc:
        print(t("estimate.cannot", lang, detail=exc), file=sys.stderr)
        return EXIT_INVALID
    if args.json:
        print(json.dumps([point_object(name, p, setup) for name, p in points], ensure_ascii=False, indent=1))
    else:
        print("\n".join(_header(plan, setup, lang)))
        print(_table(points, setup, lang))
    return EXIT_OK


def _method(calibration: Calibration) -> str:
    """How the figures were obtained, in one English phrase (the JSON's ``estimated_by``)."""
    if calibration.cv_rows:
        return (f"benchdeck estimator (roofline step-time model), constants fitted on {calibration.fitted_on}"
                f"{' (borrowed)' if calibration.borrowed else ''}; leave-one-ISL-group-out cross-validated MAE "
                f"TTFT {calibration.cv_ttft_mae_pct} %, TPOT {calibration.cv_tpot_mae_pct} % "
                f"over {calibration.cv_rows} measured points")
    return "benchdeck estimator (roofline step-time model), built-in default constants, not validated"


def point_object(scenario: str, point: PointEstimate, setup: Setup) -> dict[str, Any]:
    """One point for ``--json``; ``extrapolated`` lists the dimensions outside the measured range."""
    return {"scenario": scenario, **point.as_dict(), "extrapolated": extrapolated(setup, point),
            "estimated_by": _method(setup.calibration)}


def _header(plan: RunPlan, setup: Setup, lang: str) -> list[str]:
    cal = setup.calibration
    lines = [t("estimate.header", lang, model=plan.model, gpu=plan.gpu.type, gpus=plan.gpu.count,
               tp=setup.timing.tp_size, engine=plan.engine_label)]
    if cal.cv_rows:
        lines.append(t("estimate.method", lang, fitted_on=cal.fitted_on, rows=cal.cv_rows,
                       ttft=cal.cv_ttft_mae_pct, tpot=cal.cv_tpot_mae_pct))
    else:
        lines.append(t("estimate.method_uncalibrated", lang))
    if cal.borrowed and cal.cv_rows:
        lines.append(t("estimate.borrowed", lang, gpu=cal.gpu, family=cal.family, fitted_on=cal.fitted_on))
    if plan.topology.kind == "pd":
        lines.append(t("estimate.pd_note", lang))
    return lines


def _table(points: list[tuple[str, PointEstimate]], setup: Setup, lang: str) -> str:
    head = (f"{t('estimate.col.scenario', lang):<16} {'ISL':>6} {'OSL':>6} {t('estimate.col.concurrency', lang):>6} "
            f"{t('estimate.col.batch', lang):>6} {'TTFT ms':>9} {'TPOT ms':>8} {'ITL ms':>7} "
            f"{t('estimate.col.output_tok_s', lang):>10}  {t('estimate.col.bound', lang)}")
    rows = [
        f"{name[:16]:<16} {p.input_len:>6} {p.output_len:>6} {p.concurrency:>6} {p.batch:>6} {p.ttft_ms:>9.1f} "
        f"{p.tpot_ms:>8.2f} {p.itl_ms:>7.2f} {p.output_tok_s:>10.1f}  {t(f'estimate.bound.{p.bound}', lang)}"
        f"{'  *' if extrapolated(setup, p) else ''}"
        for name, p in points
    ]
    ranges = setup.calibration.measured_range
    if any(extrapolated(setup, p) for _, p in points):
        span = ", ".join(f"{name} {low}–{high}" for name, (low, high) in ranges.items())
        rows.append(t("estimate.extrapolated", lang, ranges=span))
    return "\n".join([head, *rows])
