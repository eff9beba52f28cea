"""NVML telemetry on a real NVIDIA GPU: the sampler's readings under load, its CPU cost,
and the foreign-process guard.  Needs a GPU (run it on the lent H200 machine):

    python -m bench.nvml_probe [seconds]

A torch matmul loop in a child process is the load; this process only samples, so its
CPU time over the window is the sampler's cost.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from runner import host
from runner.telemetry import Sampler, open_nvml, summarise

LOAD = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + {seconds}
while time.time() < end:
    (a @ a).sum().item()
"""


def main(seconds: float = 8.0) -> int:
    nvml, reason = open_nvml()
    if nvml is None:
        print(f"no GPU telemetry here: {reason}")
        return 1
    print(json.dumps(host.gpu_facts(nvml, None)))
    print(host.gpu_topology())
    idle = Sampler(nvml.read, hz=4)
    idle.start()
    time.sleep(2)
    idle_summary = summarise(idle.stop(), since=None)
    load = subprocess.Popen([sys.executable, "-c", LOAD.format(seconds=seconds + 6)])
    time.sleep(4)  # CUDA context and first kernels
    foreign = host.foreign_gpu_processes(nvml, set(), idle_memory_gb=1.0)
    print(f"foreign-process guard sees: {foreign} (load pid {load.pid})")
    sampler = Sampler(nvml.read, hz=4)
    cpu0, wall0 = time.process_time(), time.monotonic()
    sampler.start()
    time.sleep(seconds)
    samples = sampler.stop()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    load.wait()
    print(f"sampler: {len(samples)} samples in {wall:.1f} s at 4 Hz, errors {sampler.errors}; "
          f"CPU {cpu:.3f} s = {100 * cpu / wall:.2f} % of one core")
    for label, summary in (("idle", idle_summary), ("load", summarise(samples, since=None))):
        for row in summary:
            print(f"  {label:<5} GPU{row['device']} {row['metric']:<20} mean {row['mean']:>10.2f} "
                  f"p50 {row['p50']:>10.2f} max {row['max']:>10.2f} (n={row['n']})")
    return 0


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]) if len(sys.argv) > 1 else 8.0))
