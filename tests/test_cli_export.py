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


def _measured_run(store: Store, name: str, throughput: float, engine: str = "emulator") -> int:
    """A finished run (minimal_plan's engine is the emulator: source ``emulated``; "sglang": ``measured``)."""
    run_id, _ = store.submit_run(minimal_plan(name=name, engine=engine), submitted_by=operator("t"))
    claim = store.claim_next(RunnerCapabilities("r", "H200", 8, "0.5.23" if engine == "sglang" else None), lease_s=60)
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
         "--format", "csv", "--format", "md", "--format", "pptx", "--format", "slide", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in out.iterdir())
    stem = f"compare-{base}-{other}"
    assert written == [f"{stem}-slide.pptx", f"{stem}.csv", f"{stem}.md", f"{stem}.pptx"]
    [slide] = Presentation(str(out / f"compare-{base}-{other}-slide.pptx")).slides
    assert any(shape.name == "benchdeck-title" and shape.text_frame.text.startswith(f"#{other} vs #{base} (baseline)")
               for shape in slide.shapes)
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


def _export(env: dict[str, str], out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", "export", *args, "--format", "csv", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)


def test_export_refuses_mixing_emulated_and_measured_unless_allowed(store: Store, env: dict[str, str],
                                                                      tmp_path: Path) -> None:
    """The compare page's switch (pages/parts/selection.py), on the command line: --allow-mixed."""
    measured = _measured_run(store, "measured", 100.0, engine="sglang")
    emulated = _measured_run(store, "emulated", 100.0)
    assert [store.get_run(r).source for r in (measured, emulated)] == ["measured", "emulated"]
    refused = _export(env, tmp_path / "refused", "--baseline", str(measured), "--runs", str(emulated))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"emulated runs (#{emulated})" in refused.stderr and "--allow-mixed" in refused.stderr
    assert f"#{measured} (measured)" in refused.stderr
    assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").iterdir())

    allowed = _export(env, tmp_path / "allowed", "--baseline", str(measured), "--runs", str(emulated), "--allow-mixed")
    assert allowed.returncode == 0, allowed.stderr
    assert "mixed with measured/imported ones" in allowed.stderr
    [written] = (tmp_path / "allowed").iterdir()
    assert "(emulated)" in written.read_text(encoding="utf-8-sig")  # the emulated run's column says so

    same_kind = _export(env, tmp_path / "same", "--baseline", str(emulated), "--runs",
                        str(_measured_run(store, "emulated-2", 90.0)))
    assert same_kind.returncode == 0, same_kind.stderr  # emulated beside emulated is no mix
