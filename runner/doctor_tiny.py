"""``runner doctor --tiny-run MODEL_DIR [--emulated]``: the smallest plan launched once, on
one GPU, through the runner's own attempt code (runner/attempt.py: the same validation,
model-file check, launch, bench client, point and teardown a queued run gets), with each
start-up stage timed.  No database is written: the attempt's writes land in a
``TinyWriter`` and become the doctor's findings.

Without a GPU (NVML) or a real SGLang (``BENCHDECK_SGLANG_PYTHON``) the tiny run cannot
run and says so; ``--emulated`` runs the same steps with benchdeck's emulator standing in
for the SGLang server (docs/host.md, step 6), and every one of its findings says EMULATED.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from domain.core.settings import Settings
from domain.plan.local_models import LocalModel, missing_files, models_under
from domain.plan.plan_io import plan_from_mapping
from domain.plan.run_plan import RunPlan
from runner.doctor import Finding

GROUP = "tiny_run"
STAGE_POLL_S = 0.5  # how often the server log is read for the stage it reached (the stages' resolution)
TINY_SCENARIO = {"name": "tiny", "input_len": 32, "output_len": 16}


@dataclass
class Setup:
    """What a tiny run starts from; ``label`` is empty for a real run."""

    model: LocalModel
    emulated: bool
    sglang_version: str | None = None
    installed_schema: dict[str, Any] | None = None

    @property
    def label(self) -> dict[str, str]:
        return {"label": "[EMULATED] " if self.emulated else ""}


def tiny_plan(setup: Setup, settings: Settings) -> RunPlan:
    """One GPU, TP 1, one tiny point (concurrency 1, 3 prompts of 32 in / 16 out, 1 warm-up)."""
    return plan_from_mapping({
        "name": "doctor-tiny-run", "engine": "emulator" if setup.emulated else "sglang",
        "model": str(setup.model.path), "sglang_version": setup.sglang_version,
        "gpu": {"type": settings.runner_gpu_type, "count": 1}, "server_args": {"tp-size": 1},
        "benchmark": {"scenarios": [TINY_SCENARIO], "concurrency": [1], "num_prompts": "3x", "warmup": "1x"},
    })


# --- before anything is launched ----------------------------------------------------------
def smallest_model(model_dir: Path) -> LocalModel | None:
    """The model directory itself, or the smallest model (size on disk) found under it."""
    found = models_under(model_dir)
    return min(found, key=lambda m: m.size_gb) if found else None


def _fail(name: str, key: str, **context: Any) -> Finding:
    return Finding(GROUP, name, "fail", key, context)


def prepare(model_dir: Path, settings: Settings, emulated: bool) -> Setup | Finding:
    """The model and the host's SGLang, or the first reason the tiny run cannot start."""
    model = smallest_model(model_dir)
    if model is None:
        return _fail("model", "tiny_no_model", path=model_dir)
    missing = missing_files(model.path)
    if missing:
        return _fail("model", "tiny_model_files", path=model.path, files=", ".join(missing))
    if emulated:
        return Setup(model, emulated=True)
    return _real_setup(model, settings)


def _real_setup(model: LocalModel, settings: Settings) -> Setup | Finding:
    from runner.telemetry import open_nvml

    if settings.sglang_python is None:
        return _fail("launch", "tiny_no_sglang")
    nvml, reason = open_nvml()
    if nvml is None:
        return _fail("launch", "tiny_no_gpu", detail=(reason or "").removeprefix("NVML unavailable: "))
    from domain.flags.schema import SchemaError, register_host_schema
    from runner.schema_sync import SchemaError as DumpError
    from runner.schema_sync import cached_installed_schema

    try:
        schema = cached_installed_schema(settings.sglang_python, settings.cache_dir)
        register_host_schema(schema)
    except (DumpError, SchemaError) as exc:
        return _fail("launch", "tiny_no_schema", python=settings.sglang_python, detail=exc)
    return Setup(model, emulated=False, sglang_version=str(schema["sglang_version"]), installed_schema=schema)


# --- the attempt's writes, kept in memory ---------------------------------------------------
@dataclass
class TinyWriter:
    """An ``AttemptWriter`` (runner/attempt.py) that keeps what the attempt reports."""

    started: float = field(default_factory=time.monotonic)
    moves: dict[str, float] = field(default_factory=dict)  # status -> seconds since the start
    startup: dict[str, Any] = field(default_factory=dict)
    points: list[dict[str, Any]] = field(default_factory=list)
    unhealthy: list[str] = field(default_factory=list)

    def move(self, current: Any, new: Any) -> None:
        self.moves[str(new.value)] = round(time.monotonic() - self.started, 1)

    def record_child(self, group: Any) -> None:
        return None  # the doctor's own process owns its children: nothing outlives it unrecorded

    def record_startup(self, **facts: Any) -> None:
        self.startup = facts

    def set_current_point(self, key: str) -> None:
        return None

    def insert_point(self, **point: Any) -> None:
        self.points.append(point)

    def record_raw_output(self, raw: str) -> None:
        return None  # kept in the attempt directory's records/ by the attempt itself

    def audit(self, action: str, details: dict[str, Any]) -> None:
        return None

    def cancel_requested(self) -> bool:
        return False

    def record_quality(self, record: dict[str, Any]) -> None:
        return None

    def quality_reference(self, plan: RunPlan) -> tuple[int, dict[str, Any]] | None:
        return None


class StageClock(threading.Thread):
    """When the server's log first shows each start-up stage (the engine's own stage
    markers, domain/engines/sglang_log.py), in seconds since the clock started."""

    def __init__(self, log_path: Path, started_at: float) -> None:
        super().__init__(daemon=True, name="tiny-run-stages")
        self.log_path = log_path
        self.seen: dict[str, float] = {}
        self.done = threading.Event()
        self.started_at = started_at  # the attempt's start (TinyWriter.started): the stages' origin

    def run(self) -> None:
        while not self.done.wait(STAGE_POLL_S):
            self.read()

    def read(self) -> None:
        from domain.engines import adapter_for
        from runner.server_log import tail

        if not self.log_path.exists():
            return
        reader = adapter_for("sglang").log
        text = "\n".join(reader.messages(tail(self.log_path, 400_000)))
        now = round(time.monotonic() - self.started_at, 1)
        for stage, marker in reader.stages:
            if marker.search(text):
                self.seen.setdefault(stage, now)

    def stop(self) -> dict[str, float]:
        self.done.set()
        self.read()
        return self.seen


# --- the run ----------------------------------------------------------------------------------
def tiny_run_findings(model_dir: Path, settings: Settings, emulated: bool) -> list[Finding]:
    """The tiny run's findings: why it cannot start, or its launch, stages and point."""
    setup = prepare(model_dir, settings, emulated)
    if isinstance(setup, Finding):
        return [setup]
    return _run(setup, settings)


@dataclass
class Outcome:
    """One tiny attempt: where its files are, what it wrote, its stages, how it failed."""

    attempt_dir: Path
    writer: TinyWriter
    stages: dict[str, float]
    failure: tuple[str, str] | None  # (failure kind, message with its hint)
    ended_at: float  # seconds from the attempt's start to its teardown
    version: str | None  # the SGLang version launched (its flag schema, for the emulator)


def _run(setup: Setup, settings: Settings) -> list[Finding]:
    outcome = _attempt(setup, settings)
    found = [_launch_finding(setup, outcome)]
    if "starting" in outcome.writer.moves:
        found.append(_stages_finding(setup, outcome))
    if outcome.writer.points:
        found.append(_point_finding(setup, outcome.writer.points[0]))
    return found


def _attempt(setup: Setup, settings: Settings) -> Outcome:
    """The attempt run as a queued run's is (runner/daemon.py ``execute``), torn down after."""
    from runner.attempt import AttemptContext
    from runner.lease import StopState

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    tiny_settings = settings.model_copy(update={"work_dir": settings.work_dir / f"doctor-tiny-run-{stamp}"})
    writer = TinyWriter()
    ctx = AttemptContext(0, 0, 1, tiny_plan(setup, settings), tiny_settings, writer, StopState())
    clock = StageClock(ctx.attempt_dir / "server.log", writer.started)
    clock.start()
    failure = _execute(ctx, setup, writer)
    return Outcome(ctx.attempt_dir, writer, clock.stop(), failure, round(time.monotonic() - writer.started, 1),
                   ctx.engine_version)


def _execute(ctx: Any, setup: Setup, writer: TinyWriter) -> tuple[str, str] | None:
    from domain.flags.policy import load_policy
    from runner import host, server_process
    from runner.attempt import AttemptExecution, HostState
    from runner.telemetry import open_nvml

    nvml, reason = open_nvml()
    settings = ctx.settings
    info = host.host_info(nvml, reason, declared_type=settings.runner_gpu_type, declared_count=1)
    execution = AttemptExecution(ctx, nvml, reason, info, setup.sglang_version,
                                 load_policy(settings.flag_policy_file), None,
                                 HostState(mark_unhealthy=writer.unhealthy.append, stuck_port=lambda port: None),
                                 installed_schema=setup.installed_schema)
    failure: tuple[str, str] | None = None
    try:
        execution.run()
    except server_process.AttemptFailure as exc:
        failure = (exc.kind.value, f"{exc} — {exc.hint}" if exc.hint else str(exc))
    except Exception as exc:  # the doctor reports what happened; it never stops on a traceback
        failure = ("unexpected", f"{type(exc).__name__}: {exc}")
    finally:
        execution.teardown(succeeded=failure is None)
    return failure


def _where(outcome: Outcome) -> str:
    """Where the attempt was when it failed: before the launch, a start-up stage, or the point."""
    moves = outcome.writer.moves
    if "benchmarking" in moves:
        return "point"
    if "starting" in moves:
        reached = list(outcome.stages)
        return f"startup:{reached[-1] if reached else 'init'}"
    return "before launch"


def _launch_finding(setup: Setup, outcome: Outcome) -> Finding:
    context = {**setup.label, "model": setup.model.name, "version": outcome.version or "-",
               "dir": outcome.attempt_dir}
    if outcome.failure is not None:
        kind, message = outcome.failure
        return Finding(GROUP, "launch", "fail", "tiny_failed",
                       {**context, "where": _where(outcome), "kind": kind, "message": message},
                       {"unhealthy": outcome.writer.unhealthy, "emulated": setup.emulated})
    startup = outcome.writer.startup.get("startup_facts", {})
    return Finding(GROUP, "launch", "ok", "tiny_ready", {**context, "seconds": _ms(startup.get("seconds_to_ready"))},
                   {"startup": startup, "argv": outcome.writer.startup.get("server_argv"),
                    "emulated": setup.emulated})


def stage_durations(stages: dict[str, float], launched_at: float, ended_at: float) -> dict[str, float]:
    """Each stage's seconds, from its first sight in the log to the next stage's (``init``:
    from the launch to the first marker; the last stage: to ``ended_at``)."""
    starts = {"init": launched_at, **{name: max(at, launched_at) for name, at in stages.items()}}
    names, times = list(starts), [*starts.values(), max(ended_at, launched_at)]
    return {name: round(times[i + 1] - times[i], 1) for i, name in enumerate(names)}


def _stages_finding(setup: Setup, outcome: Outcome) -> Finding:
    moves = outcome.writer.moves
    durations = stage_durations(outcome.stages, moves["starting"], moves.get("benchmarking", outcome.ended_at))
    listed = ", ".join(f"{name} {seconds:g} s" for name, seconds in durations.items() if name != "ready") or "-"
    facts = outcome.writer.startup.get("startup_facts", {})
    own = {k: facts[k] for k in ("load_weight_elapsed_s", "cuda_graph_elapsed_s") if k in facts}
    return Finding(GROUP, "stages", "ok", "tiny_stages",
                   {**setup.label, "listed": listed, "poll": STAGE_POLL_S,
                    "weights": own.get("load_weight_elapsed_s", "-"), "graphs": own.get("cuda_graph_elapsed_s", "-")},
                   {"stage_seconds": durations, "first_seen_s_after_launch": outcome.stages, "server_log_says": own})


def _point_finding(setup: Setup, point: dict[str, Any]) -> Finding:
    metrics = point["metrics"]
    return Finding(GROUP, "point", "ok", "tiny_point",
                   {**setup.label, "completed": metrics.get("completed"), "requested": metrics.get("requested"),
                    "ttft": _ms(metrics.get("ttft_median_ms")), "tps": _ms(metrics.get("output_throughput"))},
                   {"metrics": metrics, "timing": point.get("timing")})


def _ms(value: Any) -> str:
    """One decimal, or a dash where the value is absent."""
    return "-" if value is None else f"{float(value):.1f}"
