"""Facts about the runner host, recorded with every attempt ("same network" is one of the
seeds' conditions), and the GPU guard: a foreign process on the GPUs blocks a start."""

from __future__ import annotations

import errno
import json
import os
import platform
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
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
        return _simulated_foreign(own_pids, idle_memory_gb)
    named = [entry for entry in nvml.compute_pids() if entry[1] not in own_pids]
    if named:
        return named
    unnamed = []
    for index, handle in enumerate(nvml.handles):
        used_gb = nvml.nvml.nvmlDeviceGetMemoryInfo(handle).used / 1e9
        if used_gb > idle_memory_gb:
            unnamed.append((index, 0, used_gb))
    return unnamed


# --- GPU state simulated for tests (no GPU on the CI machine) ------------------------------
# SIMULATION ONLY.  Where NVML is unavailable (no GPU), the GPU guard has nothing to read,
# so the fault suite names a JSON file here that plays the part of NVML's process list:
# ``[{"gpu": 0, "pid": 4242, "used_gb": 20.0}, ...]`` (pid 0: memory in use with no process
# NVML can name).  A missing or empty file means clean GPUs.  It is never consulted on a
# host where NVML works, so it cannot hide a real foreign process.
SIMULATED_GPU_USERS_ENV = "BENCHDECK_SIMULATED_GPU_USERS"


def simulated_gpu_users() -> list[tuple[int, int, float]] | None:
    """(gpu, pid, GB) from the simulation file; None when no simulation is configured."""
    path = os.environ.get(SIMULATED_GPU_USERS_ENV)
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return []
    entries = json.loads(text) if text else []
    return [(int(e["gpu"]), int(e.get("pid", 0)), float(e.get("used_gb", 0.0))) for e in entries]


def _simulated_foreign(own_pids: set[int], idle_memory_gb: float) -> list[tuple[int, int, float]]:
    users = simulated_gpu_users() or []
    named = [u for u in users if u[1] and u[1] not in own_pids]
    if named:
        return named
    return [u for u in users if not u[1] and u[2] > idle_memory_gb]


def gpu_guard_source(nvml: NvmlReader | None) -> str:
    """Where the GPU guard's reading came from, for messages: NVML, a simulation, or nothing."""
    if nvml is not None:
        return "nvml"
    return "simulated" if simulated_gpu_users() is not None else "none"


# --- disk space --------------------------------------------------------------------------------
DISK_PROBE_BYTES = 64 * 1024


def disk_full(directory: Path, probe_bytes: int = DISK_PROBE_BYTES) -> str | None:
    """A reason when the filesystem under ``directory`` cannot take a small write (no space,
    or quota), else None.  A real write, not statvfs: tmpfs, quotas and reserved blocks all
    answer the same way a log or a Parquet file would meet them."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".space-probe-", dir=directory)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"no space left under {directory}: {exc.strerror}"
        raise
    try:
        written = os.write(fd, b"\0" * probe_bytes)
        if written < probe_bytes:
            return f"no space left under {directory}: only {written} of {probe_bytes} probe bytes written"
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"no space left under {directory}: {exc.strerror}"
        raise
    finally:
        os.close(fd)
        os.unlink(name)
    return None


# --- who answers on a port ----------------------------------------------------------------------
def listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` or one of its descendants listens on TCP ``port``."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return False
    for proc in procs:
        try:
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                    return True
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return False


def gpu_memory_used_gb(nvml: NvmlReader | None) -> float | None:
    if nvml is None:
        return None
    return sum(nvml.nvml.nvmlDeviceGetMemoryInfo(h).used for h in nvml.handles) / 1e9
