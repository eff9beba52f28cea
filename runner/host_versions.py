"""``runner check`` and ``runner submit`` validate a plan against the schema of the host
that will run it: the schemas the registered runners dumped (db/host_schemas.py), an
unpinned plan against the version of the runner that will claim it, and a pinned version no
runner has is said to wait (domain/plan/claimability.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from db import Store
from db.host_schemas import register_stored_schemas
from db.rows import RunnerRow
from domain.core.i18n import t
from domain.core.settings import Settings
from domain.flags.schema import available_versions
from domain.plan.claimability import host_version_for, registered_versions
from domain.plan.run_plan import RunPlan


@dataclass
class HostView:
    """What the registered runners tell a check: the host version for an unpinned plan and
    the notes to print with the report."""

    host_version: str | None = None
    notes: list[str] = field(default_factory=list)


def runners_of(settings: Settings, *, create: bool) -> tuple[Store | None, list[RunnerRow]]:
    """The store and its runners, their schemas registered; no store when the database file
    does not exist and ``create`` is off (a check on a machine with no benchdeck state)."""
    if not create and not settings.db.exists():
        return None, []
    store = Store.from_settings(settings)
    store.migrate()
    register_stored_schemas(store)
    return store, store.list_runners()


def host_view(plan: RunPlan, runners: list[RunnerRow], lang: str) -> HostView:
    """The version an SGLang plan is checked against and what the user should know about it."""
    if plan.engine != "sglang" or plan.emulated:
        return HostView()
    versions = registered_versions(runners)
    if plan.sglang_version is None:
        version = host_version_for(plan.gpu.type, runners)
        notes = [t("check.host_version", lang, version=version)] if version else []
        return HostView(version, notes)
    if plan.sglang_version not in versions and plan.sglang_version in available_versions():
        return HostView(None, [t("check.version_no_runner", lang, version=plan.sglang_version,
                                 versions=", ".join(versions) or "-")])
    return HostView()
