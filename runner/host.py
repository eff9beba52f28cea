"""Facts about the runner host, recorded with every attempt ("same network" is one of the
seeds' conditions), and the GPU guard: a foreign process on the GPUs blocks a start."""

from __future__ import annotations

import platform
import shutil
import socket
import subprocess
from typing import Any

import psutil

from runner.telemetry import NvmlReader


def gpu_facts(nvml: NvmlReader | None, unavailable_reason: str | None) -> dict[str, Any]:
    if nvml is None:
        return {"available": False, "reason": unavailable_reason}
    nv = nvml.nvml
    return {
        "available": True,
        "driver": nv.nvmlSystemGetDriverVersion(),
        "cuda": nv.nvmlSystemGetCudaDriverVersion_v2(),
        "gpus": [
            {"index": i, "name": nv.nvmlDeviceGetName(h), "memory_gb": nv.nvmlDeviceGetMemoryInfo(h).total / 1e9}
            for i, h in enumerate(nvml.handles)
        ],
    }


def gpu_topology() -> str | None:
    """``nvidia-smi topo -m`` (the GPU interconnect), where nvidia-smi exists."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=20, check=False)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable: {exc}"
    return done.stdout if done.returncode == 0 else f"unavailable: {done.stderr.strip()}"


def network_facts() -> list[dict[str, Any]]:
    stats = psutil.net_if_stats()
    return [
        {"name": name, "up": s.isup, "speed_mbps": s.speed, "mtu": s.mtu}
        for name, s in sorted(stats.items())
        if name != "lo"
    ]


def host_info(nvml: NvmlReader | None, unavailable_reason: str | None) -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpus": psutil.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 1e9, 1),
        "gpu": gpu_facts(nvml, unavailable_reason),
        "gpu_topology": gpu_topology() if nvml is not None else None,
        "network": network_facts(),
    }


def foreign_gpu_processes(
    nvml: NvmlReader | None, own_pids: set[int], *, idle_memory_gb: float
) -> list[tuple[int, int, float]]:
    """Users of the GPUs that are not ours: (gpu index, pid, GB); pid 0 = unnamed.

    Inside a container NVML often cannot name other namespaces' processes (seen on the lent
    H200: a torch process using the GPU was not listed), so memory in use above the idle
    floor, with no process to show for it, counts as a foreign user too."""
    if nvml is None:
        return []
    named = [entry for entry in nvml.compute_pids() if entry[1] not in own_pids]
    if named:
        return named
    unnamed = []
    for index, handle in enumerate(nvml.handles):
        used_gb = nvml.nvml.nvmlDeviceGetMemoryInfo(handle).used / 1e9
        if used_gb > idle_memory_gb:
            unnamed.append((index, 0, used_gb))
    return unnamed


def gpu_memory_used_gb(nvml: NvmlReader | None) -> float | None:
    if nvml is None:
        return None
    return sum(nvml.nvml.nvmlDeviceGetMemoryInfo(h).used for h in nvml.handles) / 1e9
