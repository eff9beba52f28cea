"""How long the real bench_serving client takes to be ready, and what a full collection of
its garbage collector would stall afterwards.

The runner keeps one client process per sweep (runner/sglang_side/bench_driver.py): it
imports the client, then answers ``ready`` and runs the points it is sent.  This starts
that driver with the SGLang environment's interpreter several times and reports the median
wall time to ``ready`` and the median CPU the process used (its rusage at exit, stdin
closed right after ``ready``).  Then, in one more process that imports the client the same
way, the duration of one full ``gc.collect()``: the pause any full collection would put in
the middle of a measured point.

``python -m bench client_start`` (about a minute); ``--quick`` starts it twice.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from domain.core.settings import get_settings

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "runner" / "sglang_side" / "bench_driver.py"
PAUSE_PROBE = """
import gc, sys, time
sys.path.insert(0, sys.argv[1])
import bench_driver
with bench_driver._collector_paused_then_frozen():
    bench_driver._load_client()
started = time.perf_counter()
gc.collect()
print((time.perf_counter() - started) * 1e3)
"""


def _one_start(python: Path) -> tuple[float, float]:
    """(wall seconds to ``ready``, CPU seconds of the whole process)."""
    started = time.perf_counter()
    proc = subprocess.Popen([str(python), str(DRIVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    assert proc.stdout is not None and proc.stdin is not None
    first = json.loads(proc.stdout.readline() or "{}")
    wall = time.perf_counter() - started
    proc.stdin.close()
    _, _, usage = os.wait4(proc.pid, 0)
    if first.get("event") != "ready":
        raise RuntimeError(f"the driver did not answer ready: {first}")
    return wall, usage.ru_utime + usage.ru_stime


def _full_collection_ms(python: Path) -> float:
    done = subprocess.run([str(python), "-c", PAUSE_PROBE, str(DRIVER.parent)], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    return float(done.stdout.strip().splitlines()[-1])


def run(*, quick: bool = False) -> None:
    python = get_settings().sglang_python or get_settings().bench_python
    starts = [_one_start(python) for _ in range(2 if quick else 5)]
    walls, cpus = zip(*starts, strict=True)
    print(f"bench_serving driver start to ready ({len(starts)} starts, {python}): "
          f"median {statistics.median(walls):.2f} s wall, {statistics.median(cpus):.2f} s CPU "
          f"(range {min(cpus):.2f}-{max(cpus):.2f})")
    print(f"one full gc.collect() after the client's imports: {_full_collection_ms(python):.1f} ms")
