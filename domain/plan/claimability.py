"""Why no runner can claim a queued run, and which SGLang version a plan that pins none
will be validated against.

The rules mirror the claim query (``NEXT_CLAIMABLE_RUN`` in db/queries.py): a runner claims
a run of its GPU type with at most its GPU count; a real engine's run only where that engine
is installed, and a pinned version only where it is exactly that version; an unhealthy or
silent runner claims nothing; a runner whose GPUs the run would use are held by a foreign
process leaves that run queued (domain/plan/gpu_claim.py).  A run that waits says which of these stops each runner, with
the fix, on its page, on the runs page and in ``runner status``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from domain.core.i18n import t
from domain.core.settings import Settings
from domain.flags.schema import version_key
from domain.plan.gpu_claim import busy_gpus_of, held_by_others, plan_json_gpu_ids


class RunnerLike(Protocol):
    """What a runners row tells (db/rows.py ``RunnerRow``)."""

    @property
    def id(self) -> str: ...
    @property
    def gpu_type(self) -> str: ...
    @property
    def gpu_count(self) -> int: ...
    @property
    def sglang_version(self) -> str | None: ...
    @property
    def heartbeat_at(self) -> datetime: ...
    @property
    def healthy(self) -> bool: ...
    @property
    def unhealthy_reason(self) -> str | None: ...
    @property
    def info(self) -> str: ...


@dataclass(frozen=True)
class Wanted:
    """What a run needs from a runner."""

    engine: str  # the family, or "external"
    version: str | None  # pinned engine version, or None: the host's own
    gpu_type: str
    gpu_count: int
    emulated: bool = False  # benchdeck's emulator: runs on any runner of the GPU type
    gpu_ids: frozenset[int] | None = None  # the runner's GPUs its servers take; None: unknown


class RunLike(Protocol):
    """What a run row tells about its configuration (db/rows.py ``RunRow``, ``RunProgressRow``)."""

    @property
    def engine(self) -> str | None: ...
    @property
    def emulated(self) -> bool | None: ...
    @property
    def engine_version(self) -> str | None: ...
    @property
    def gpu_type(self) -> str | None: ...
    @property
    def gpu_count(self) -> int | None: ...


def wanted_of(run: RunLike) -> Wanted:
    return Wanted(run.engine or "sglang", run.engine_version, run.gpu_type or "?", int(run.gpu_count or 0),
                  bool(run.emulated), plan_json_gpu_ids(getattr(run, "plan", None)))


def offline_after_s(settings: Settings) -> float:
    """A runner silent longer than this is offline (three missed heartbeats or polls, and slack)."""
    return 3 * max(settings.poll_s, settings.heartbeat_s) + 30


def waiting_reason(run: RunLike, runners: Sequence[RunnerLike], now: datetime, settings: Settings,
                   lang: str) -> str | None:
    """For a queued run: why no runner can claim it, with the fixes; None when one can."""
    blockers = why_unclaimable(wanted_of(run), runners, now, offline_after_s(settings))
    return unclaimable_text(blockers, lang) if blockers else None


@dataclass(frozen=True)
class Blocker:
    """Why one runner (or none) cannot claim the run: a catalogue key and its values."""

    key: str
    context: dict[str, Any]

    def text(self, lang: str) -> str:
        return t(f"claim.{self.key}", lang, **self.context)


def runner_vllm_version(runner: RunnerLike) -> str | None:
    """The vLLM version a runner registered in its info (None: no real vLLM)."""
    try:
        info = json.loads(runner.info or "{}")
    except (TypeError, ValueError):
        return None
    version = info.get("vllm_version") if isinstance(info, dict) else None
    return str(version) if version else None


def _installed(runner: RunnerLike, engine: str) -> str | None:
    return runner_vllm_version(runner) if engine == "vllm" else runner.sglang_version


def runner_blocker(runner: RunnerLike, wanted: Wanted, age_s: float, offline_after_s: float) -> Blocker | None:
    """Why this runner will not claim the run now, or None when it would: what it can never
    serve first (it holds while the runner is down), then silence, then ill health."""
    ctx: dict[str, Any] = {"runner": runner.id}
    if wanted.engine != "external":
        if runner.gpu_type != wanted.gpu_type:
            return Blocker("gpu_type", {**ctx, "has": runner.gpu_type, "needs": wanted.gpu_type})
        if runner.gpu_count < wanted.gpu_count:
            return Blocker("gpu_count", {**ctx, "has": runner.gpu_count, "needs": wanted.gpu_count})
    if not wanted.emulated and wanted.engine != "external":
        installed = _installed(runner, wanted.engine)
        if installed is None:
            return Blocker("no_engine", {**ctx, "engine": wanted.engine})
        if wanted.version is not None and wanted.version != installed:
            return Blocker("version", {**ctx, "engine": wanted.engine, "has": installed, "pinned": wanted.version})
    if age_s > offline_after_s:
        return Blocker("offline", {**ctx, "age": int(age_s)})
    if not runner.healthy:
        return Blocker("unhealthy", {**ctx, "reason": runner.unhealthy_reason or "?"})
    return _gpus_blocker(runner, wanted, ctx)


def _gpus_blocker(runner: RunnerLike, wanted: Wanted, ctx: dict[str, Any]) -> Blocker | None:
    """A foreign process on one of the GPUs the run would take on this runner."""
    held = held_by_others(wanted.gpu_ids or frozenset(), busy_gpus_of(runner.info))
    if not held:
        return None
    gpus = ", ".join(str(gpu) for gpu in held)
    return Blocker("gpus_busy", {**ctx, "gpus": gpus, "reason": "; ".join(dict.fromkeys(held.values()))})


def why_unclaimable(wanted: Wanted, runners: Sequence[RunnerLike], now: datetime,
                    offline_after_s: float) -> list[Blocker]:
    """Each runner's reason not to claim the run; empty when one of them would claim it."""
    if not runners:
        return [Blocker("no_runner", {})]
    blockers = []
    for runner in runners:
        blocker = runner_blocker(runner, wanted, (now - runner.heartbeat_at).total_seconds(), offline_after_s)
        if blocker is None:
            return []
        blockers.append(blocker)
    return blockers


def unclaimable_text(blockers: Sequence[Blocker], lang: str) -> str:
    """One paragraph: the heading and each runner's reason with its fix."""
    return t("claim.heading", lang) + " " + " ".join(blocker.text(lang) for blocker in blockers)


def registered_versions(runners: Sequence[RunnerLike]) -> list[str]:
    """The SGLang versions the registered runners report, oldest first."""
    versions = {r.sglang_version for r in runners if r.sglang_version}
    return sorted(versions, key=_sort_key)


def _sort_key(version: str) -> tuple[int, ...]:
    try:
        return version_key(version)
    except ValueError:
        return (0, 0, 0, 0, 0)


def host_version_for(gpu_type: str, runners: Sequence[RunnerLike]) -> str | None:
    """The SGLang version an unpinned plan will run with: that of the runner of the plan's GPU
    type heard from last (any runner's when none has that type); None without real SGLang."""
    real = [r for r in runners if r.sglang_version]
    same = [r for r in real if r.gpu_type == gpu_type] or real
    if not same:
        return None
    return max(same, key=lambda r: r.heartbeat_at).sglang_version
