"""An ``AttemptExecution`` (runner/attempt.py) with nothing behind it but an NVML reader: for
the tests of its GPU guard, run-GPU scope and teardown memory check, which need no server,
client or database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from domain.core.settings import Settings
from domain.plan.run_plan import RunPlan
from runner.attempt import AttemptContext, AttemptExecution, HostState
from runner.lease import StopState
from runner.telemetry import NvmlReader


class NullWriter:
    """Takes every write of an attempt and keeps none."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: False


def stub_execution(tmp_path: Path, nvml: NvmlReader | None, plan: RunPlan, unhealthy: list[str],
                   own_groups: set[int] | None = None) -> AttemptExecution:
    """``unhealthy`` collects the reasons the attempt marks the host unhealthy with;
    ``own_groups`` plays the runner's other runs' process groups."""
    settings = Settings(db=tmp_path / "db.duckdb", work_dir=tmp_path / "runs")
    ctx = AttemptContext(1, 1, 1, plan, settings, NullWriter(), StopState())
    state = HostState(mark_unhealthy=unhealthy.append, stuck_port=lambda port: None,
                      own_groups=lambda: set(own_groups or ()))
    reason = None if nvml is not None else "no NVML"
    return AttemptExecution(ctx, nvml, reason, {"hostname": "test"}, None, None, None, state)
