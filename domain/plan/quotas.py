"""Quotas a submission must fit: the whole GPU host is shared, so one user cannot flood
the queue or book it for days.  Checked in db/ inside the submitting transaction (a
hidden button is not a permission check), with a clear message, never a traceback."""

from __future__ import annotations

from dataclasses import dataclass

from domain.core.i18n import t
from domain.core.settings import Settings
from domain.plan.eta import plan_seconds
from domain.plan.run_plan import RunPlan


class QuotaExceeded(ValueError):
    def __init__(self, key: str, **params: object):
        super().__init__(f"{key}: {params}")
        self.key = key
        self.params = params

    def text(self, lang: str) -> str:
        return t(f"quota.{self.key}", lang, **self.params)


@dataclass(frozen=True)
class Quotas:
    queued_runs_per_user: int = 20
    prompts_per_point: int = 20_000
    points_per_run: int = 500
    concurrency: int = 1024
    run_hours: float = 24.0

    @classmethod
    def from_settings(cls, settings: Settings) -> Quotas:
        return cls(settings.quota_queued_runs_per_user, settings.quota_prompts_per_point,
                   settings.quota_points_per_run, settings.quota_concurrency, settings.quota_run_hours)

    def check_plan(self, plan: RunPlan) -> None:
        points = plan.points()
        if len(points) > self.points_per_run:
            raise QuotaExceeded("points", points=len(points), limit=self.points_per_run)
        prompts = max(p.num_prompts for p in points)
        if prompts > self.prompts_per_point:
            raise QuotaExceeded("prompts", prompts=prompts, limit=self.prompts_per_point)
        concurrency = max(plan.benchmark.concurrency)
        if concurrency > self.concurrency:
            raise QuotaExceeded("concurrency", concurrency=concurrency, limit=self.concurrency)
        hours = plan_seconds(plan) / 3600
        if hours > self.run_hours:
            raise QuotaExceeded("run_time", hours=f"{hours:.1f}", limit=self.run_hours)

    def check_queue(self, queued_by_user: int, user: str) -> None:
        if queued_by_user >= self.queued_runs_per_user:
            raise QuotaExceeded("queued", user=user, queued=queued_by_user, limit=self.queued_runs_per_user)
