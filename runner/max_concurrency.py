"""``python -m runner max-concurrency PLAN.yaml --tpot-p99-ms Y [--ttft-p99-ms X]``: how
much load one configuration holds under an SLA (issue 17).

A bisection on concurrency (domain/tune/bisect.py): every probe is an ordinary run of the
plan at that one concurrency, queued through db.Store.submit_run with the tag
``max-concurrency`` (visible in the queue, cancellable, comparable), waited for, and read
as its SLA margin over the plan's scenarios (domain/tune/score.py).  The answer is the
crossing of the margins' monotone fit, interpolated between the last passing and the first
failing concurrency.  Each probe's idempotency key is the plan, the SLA and the
concurrency, so running the same command again (after a restart, or to read the answer
once more) queues nothing twice.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from dataclasses import dataclass
from typing import Any

from db import Store
from db.rows import RunRow
from domain.core.access import Actor, PermissionDenied, local_actor
from domain.core.i18n import t
from domain.core.settings import Settings, get_settings
from domain.core.states import RunStatus
from domain.plan.quotas import QuotaExceeded
from domain.plan.run_plan import RunPlan
from domain.results.frames import points_frame
from domain.tune.bisect import Bisection, bisect_max_concurrency
from domain.tune.score import concurrency_margins
from domain.tune.study import Sla
from runner.command_args import Subparsers, add_max_concurrency
from runner.plan_file import load_plan_file
from runner.run_wait import RunVanished, wait_until_finished

TAG = "max-concurrency"
EXIT_OK, EXIT_INVALID, EXIT_PROBE_FAILED = 0, 1, 3


class ProbeFailed(RuntimeError):
    """A probe's run did not succeed: no margin can be read from it."""


def add_parser(subparsers: Subparsers) -> None:
    add_max_concurrency(subparsers, command)


def command(args: argparse.Namespace, settings: Settings) -> int:
    lang = getattr(args, "lang", None) or "en"
    plan = load_plan_file(args.plan, settings, lang)
    problem = _argument_problem(args)
    if plan is None or problem is not None:
        if problem is not None:
            print(t(problem, lang), file=sys.stderr)
        return EXIT_INVALID
    sla = Sla(ttft_p99_ms=args.ttft_p99_ms, tpot_p99_ms=args.tpot_p99_ms)
    store = Store.from_settings(settings)
    store.migrate()
    prober = Prober(plan, sla, store, local_actor(settings.local_role, via="cli"), lang, args.poll)
    try:
        result = bisect_max_concurrency(prober.margin, args.low, args.high, resolution=args.resolution)
    except ProbeFailed as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_PROBE_FAILED
    except (QuotaExceeded, PermissionDenied) as exc:
        print(exc.text(lang) if isinstance(exc, QuotaExceeded) else t("cli.denied", lang, detail=str(exc)),
              file=sys.stderr)
        return EXIT_INVALID
    outcome = summary(result, prober.runs)
    print(json.dumps(outcome) if args.json else _sentence(result, lang))
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    return command(args, get_settings())


def _argument_problem(args: argparse.Namespace) -> str | None:
    """The catalogue key of what is wrong with the options, or None."""
    if args.ttft_p99_ms is None and args.tpot_p99_ms is None:
        return "maxconc.need_limit"
    limits = [v for v in (args.ttft_p99_ms, args.tpot_p99_ms) if v is not None]
    if any(not (math.isfinite(v) and v > 0) for v in limits):
        return "maxconc.bad_limit"
    if not (1 <= args.low <= args.high) or args.resolution < 1:
        return "maxconc.bad_range"
    return None


@dataclass
class Prober:
    """Measures one concurrency as one queued run and reads its SLA margin."""

    plan: RunPlan
    sla: Sla
    store: Store
    actor: Actor
    lang: str = "en"
    poll_s: float = 2.0

    def __post_init__(self) -> None:
        self.runs: dict[int, int] = {}  # concurrency → run id

    def margin(self, concurrency: int) -> float:
        run_id, created = self.store.submit_run(probe_plan(self.plan, concurrency), submitted_by=self.actor,
                                                idempotency_key=probe_key(self.plan, self.sla, concurrency))
        self.runs[concurrency] = run_id
        print(t("maxconc.queued" if created else "maxconc.waiting", self.lang, concurrency=concurrency,
                run_id=run_id), file=sys.stderr, flush=True)
        run = self._wait(run_id)
        if run.status != RunStatus.SUCCEEDED:
            raise ProbeFailed(t("maxconc.probe_failed", self.lang, concurrency=concurrency, run_id=run_id,
                                status=run.status))
        frame = points_frame(p.as_dict() for p in self.store.points_for_comparison([run_id]))
        margins = dict(concurrency_margins(frame, self.sla))
        margin = margins.get(concurrency, math.nan)
        print(t("maxconc.measured", self.lang, concurrency=concurrency, run_id=run_id,
                margin=f"{margin:+.1%}" if math.isfinite(margin) else "—"), file=sys.stderr, flush=True)
        return margin

    def _wait(self, run_id: int) -> RunRow:
        try:
            return wait_until_finished(self.store, run_id, self.poll_s)
        except RunVanished as exc:
            raise ProbeFailed(str(exc)) from exc


def probe_plan(plan: RunPlan, concurrency: int) -> RunPlan:
    """The plan at one concurrency, tagged as a probe (no early stop: one point)."""
    benchmark = plan.benchmark.model_copy(update={"concurrency": [concurrency], "stop_on_sla": None})
    tags = list(dict.fromkeys([*plan.tags, TAG]))
    return plan.model_copy(update={"benchmark": benchmark, "tags": tags,
                                   "name": f"{plan.name} · c={concurrency} probe"})


def probe_key(plan: RunPlan, sla: Sla, concurrency: int) -> str:
    """Same plan, SLA and concurrency → the same key: a repeated command reuses the run."""
    digest = hashlib.sha256((plan.model_dump_json() + sla.model_dump_json()).encode()).hexdigest()[:16]
    return f"max-concurrency:{digest}:{concurrency}"


def summary(result: Bisection, runs: dict[int, int]) -> dict[str, Any]:
    return {"max_concurrency": result.max_concurrency, "at_least": result.at_least,
            "low": result.low, "high": result.high, "resolution": result.resolution,
            "probes": [{"concurrency": c, "margin": m if math.isfinite(m) else None, "passed": m > 0,
                        "run_id": runs.get(c)} for c, m in result.margins]}


def _sentence(result: Bisection, lang: str) -> str:
    if result.max_concurrency is None:
        return t("maxconc.none", lang, low=result.low)
    if result.at_least:
        return t("maxconc.at_least", lang, high=result.high, probes=len(result.margins))
    passed = max(result.passed)
    above = [c for c in result.failed if c > passed] or result.failed  # the probes disagree with a monotone curve
    return t("maxconc.answer", lang, value=f"{result.max_concurrency:.1f}", passed=passed, failed=min(above),
             probes=len(result.margins))
