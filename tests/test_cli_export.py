"""``python -m runner export``: the compare exports from the command line, on real DB rows."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from pptx import Presentation

from db import RunnerCapabilities, Store
from domain.core.states import AttemptStatus
from domain.plan.run_plan import point_conditions
from domain.results.bench_record import METRIC_COLUMNS
from tests.conftest import ROOT
from tests.plans import minimal_plan
from tests.support.actors import operator


def _measured_run(store: Store, name: str, throughput: float) -> int:
    run_id, _ = store.submit_run(minimal_plan(name=name), submitted_by=operator("t"))
    claim = store.claim_next(RunnerCapabilities("r", "H200", 8, None), lease_s=60)
    store.move_attempt(claim.attempt_id, "r", AttemptStatus.CLAIMED, AttemptStatus.STARTING)
    store.move_attempt(claim.attempt_id, "r", AttemptStatus.STARTING, AttemptStatus.BENCHMARKING)
    for point in claim.plan.points():
        metrics = {column: 1.0 for column in METRIC_COLUMNS}
        metrics.update(output_throughput=throughput * point.concurrency, completed=point.num_prompts,
                       requested=point.num_prompts)
        store.insert_point(claim.attempt_id, "r", scenario=point.scenario.name, concurrency=point.concurrency,
                           repeat_idx=0, conditions=point_conditions(claim.plan, point), started_at=datetime.now(),
                           finished_at=datetime.now(), metrics=metrics, raw_record={}, telemetry=[])
    store.finish_attempt(claim.attempt_id, "r", AttemptStatus.BENCHMARKING, AttemptStatus.SUCCEEDED)
    return run_id


def test_export_writes_csv_markdown_and_a_deck(store: Store, env: dict[str, str], tmp_path: Path) -> None:
    base = _measured_run(store, "base", 100.0)
    other = _measured_run(store, "other", 123.0)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "runner", "export", "--baseline", str(base), "--runs", str(other),
         "--format", "csv", "--format", "md", "--format", "pptx", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in out.iterdir())
    assert written == [f"compare-{base}-{other}.csv", f"compare-{base}-{other}.md", f"compare-{base}-{other}.pptx"]
    text = (out / f"compare-{base}-{other}.csv").read_text(encoding="utf-8-sig")
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    cells = {cell for row in csv.reader(io.StringIO(body)) for cell in row}
    assert {"100.0", "400.0", "123.0", "492.0"} <= cells  # the DB's numbers, unrounded
    assert any(line.startswith("#") for line in text.splitlines())  # the caveat footer
    for slide in Presentation(str(out / f"compare-{base}-{other}.pptx")).slides:
        assert any(shape.name == "benchdeck-caveat" for shape in slide.shapes)


def test_export_refuses_unknown_runs(store: Store, env: dict[str, str], tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "runner", "export", "--baseline", "41", "--runs", "42",
                           "--out", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 1 and "41, 42" in done.stderr and "Traceback" not in done.stderr
