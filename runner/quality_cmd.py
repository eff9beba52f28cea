"""``python -m runner quality --baseline RUN --runs RUN[,RUN...] [--json]``: each run's
quality verdict against the baseline, from the probes stored in the DB
(domain/results/quality.py).  The plain form prints one line a run; ``--json`` prints a
list of objects: ``exact_match``, ``first_divergence_median``, ``mean_abs_dlogprob`` with
the floor, ``accuracy`` with its interval where an eval set ran, and ``verdict``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from db.quality_store import QualityStore
from db.store import Store
from domain.core.i18n import t
from domain.core.settings import Settings
from domain.results.quality import QualityResult, compare_quality

EXIT_OK = 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
               id_list: Any) -> None:
    cmd = subparsers.add_parser("quality", help="each run's quality verdict against a baseline (same / changed / "
                                                "cannot tell / not measured), from the stored probes")
    cmd.add_argument("--baseline", type=int, required=True, help="the baseline run id")
    cmd.add_argument("--runs", type=id_list, required=True, help="comma-separated run ids")
    cmd.add_argument("--json", action="store_true", help="print a JSON list, one object per run")
    cmd.set_defaults(func=command)


def results(settings: Settings, baseline: int, runs: list[int]) -> list[QualityResult]:
    store = Store.from_settings(settings)
    store.migrate()
    probes = QualityStore(store).probes_of([baseline, *runs])
    return [compare_quality(run, probes.get(run), baseline, probes.get(baseline)) for run in runs]


def command(args: argparse.Namespace, settings: Settings) -> int:
    found = results(settings, args.baseline, args.runs)
    if args.json:
        print(json.dumps([r.as_dict() for r in found], indent=2))
        return EXIT_OK
    for result in found:
        print(line(result, args.lang))
    return EXIT_OK


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def line(result: QualityResult, lang: str) -> str:
    floor = result.floor or {}
    text = t("quality.cli.line", lang, run=result.run_id, baseline=result.baseline_run_id,
             verdict=t(f"quality.verdict.{result.verdict}", lang), exact=_pct(result.exact_match),
             floor=_pct(floor.get("exact_match")),
             dlogprob="-" if result.mean_abs_dlogprob is None else f"{result.mean_abs_dlogprob:.4f}",
             reason=result.reason)
    if result.accuracy is not None:
        acc = result.accuracy
        text += t("quality.cli.accuracy", lang, accuracy=_pct(acc["estimate"]), low=_pct(acc["low"]),
                  high=_pct(acc["high"]))
    return text + (t("quality.emulated", lang) if result.emulated else "")
