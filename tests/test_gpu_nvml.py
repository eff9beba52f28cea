"""NVML telemetry on a real NVIDIA GPU (marked ``gpu``: skipped where NVML is absent, as in
CI; run on the lent H200 with ``pytest --noconftest -m gpu tests/test_gpu_nvml.py``)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from runner.telemetry import Sampler, open_nvml, summarise

pytestmark = pytest.mark.gpu

LOAD = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 10
while time.time() < end:
    (a @ a).sum().item()
"""


def test_sampler_reads_plausible_values_under_load() -> None:
    nvml, reason = open_nvml()
    if nvml is None:
        pytest.skip(f"no NVIDIA GPU here: {reason}")
    load = subprocess.Popen([sys.executable, "-c", LOAD])
    try:
        time.sleep(4)
        sampler = Sampler(nvml.read, hz=4)
        sampler.start()
        time.sleep(4)
        rows = {(r["device"], r["metric"]): r for r in summarise(sampler.stop(), since=None)}
    finally:
        load.wait(timeout=60)
    assert sampler.errors == 0
    assert rows[(0, "util_pct")]["max"] >= 50
    assert rows[(0, "power_w")]["max"] > 150
    assert rows[(0, "sm_clock_mhz")]["max"] > 500
    assert rows[(0, "mem_used_gb")]["max"] > 0.1
    assert rows[(0, "clock_event_reasons")]["n"] >= 12  # 4 Hz for 4 s
