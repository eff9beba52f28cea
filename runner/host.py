"""Facts about the runner host, recorded with every attempt ("same network" is one of the
seeds' conditions), and the GPU guard: a foreign process on the GPUs blocks a start.

GPUs are named by NVML UUID: a run's GPUs (``run_gpus``) are the CUDA_VISIBLE_DEVICES
entries its servers get, resolved through NVML, so the guard, the teardown check and the
telemetry cover exactly those GPUs, and runs on disjoint GPUs of one host stay apart."""

from __future__ import annotations

import errno
import json
import os
import platform
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import psutil

from runner.telemetry import GpuScopeError, GpuSet, NvmlReader
from runner.topology import visible_devices


def gpu_facts(nvml: NvmlReader | None, unavailable_reason: str | None, *, declared_type: str | None = None,
              declared_count: int | None = None) -> dict[str, Any]:
    """The GPUs as NVML measures them (``source`` measured); without NVML, what the
    settings declare (``source`` declared).  The declared type and count are kept either way."""
    declared = {"type": declared_type, "count": declared_count}
    if nvml is None:
        return {"available": False, "reason": unavailable_reason, "source": "declared", "declared": declared}
    return {"available": True, "source": "measured", **gpu_hardware(nvml), "declared": declared}


def gpu_hardware(nvml: NvmlReader, gpus: GpuSet = None) -> dict[str, Any]:
    """Driver, CUDA driver version, and name, UUID and memory of each of ``gpus`` (all for None)."""
    nv = nvml.nvml
    listed = [
        {"index": i, "uuid": nvml.uuids[i], "name": str(nv.nvmlDeviceGetName(nvml.handles[i])),
         "memory_gb": nv.nvmlDeviceGetMemoryInfo(nvml.handles[i]).total / 1e9}
        for i in nvml.indexes(gpus)
    ]
    return {"driver": nv.nvmlSystemGetDriverVersion(), "cuda": nv.nvmlSystemGetCudaDriverVersion_v2(),
            "count": len(listed), "gpus": listed}


def gpu_type_mismatch(nvml: NvmlReader | None, declared: str, gpus: GpuSet = None) -> str | None:
    """Why the declared GPU type (BENCHDECK_RUNNER_GPU_TYPE) is not what NVML names, or None.

    The type matches a GPU when each of its words is a word of NVML's device name: H200
    matches "NVIDIA H200" and "NVIDIA H200 NVL"; A100-80GB matches "NVIDIA A100-SXM4-80GB".
    Without NVML there is nothing to check against: the declared type stands."""
    if nvml is None:
        return None
    wanted = _words(declared)
    names = {str(nvml.nvml.nvmlDeviceGetName(nvml.handles[i])) for i in nvml.indexes(gpus)}
    wrong = sorted(name for name in names if not wanted <= _words(name))
    if not wrong:
        return None
    return (f"GPU type mismatch: BENCHDECK_RUNNER_GPU_TYPE is {declared!r}, NVML names {', '.join(wrong)}; "
            "set the type to what the host has")


def _words(name: str) -> set[str]:
    return set("".join(c if c.isalnum() else " " for c in name.upper()).split())


def runner_gpus(nvml: NvmlReader | None, inherited: str | None, count: int) -> GpuSet:
    """The GPUs this runner serves: the first ``count`` (BENCHDECK_RUNNER_GPU_COUNT) of its
    own CUDA_VISIBLE_DEVICES (on a Ray node, or a host shared between runners), else of
    NVML's; fewer where there are fewer.  Topologies index these, so no run goes past them.
    None without NVML."""
    if nvml is None:
        return None
    pool = [e.strip() for e in inherited.split(",") if e.strip()] if inherited else [str(i) for i in nvml.indexes()]
    return frozenset(nvml.resolve(entry) for entry in pool[:count])


def run_gpus(nvml: NvmlReader | None, gpu_ids: Collection[int], inherited: str | None) -> GpuSet:
    """The UUIDs of a run's GPUs.  ``gpu_ids`` index the runner's GPUs, as in the topology's
    layout; each becomes the CUDA_VISIBLE_DEVICES entry its server gets (``visible_devices``:
    with the runner's own CUDA_VISIBLE_DEVICES set, id 0 is its first entry), then the GPU
    NVML knows by that entry.  None without NVML.  ``GpuScopeError`` for an id the runner lacks."""
    if nvml is None:
        return None
    ids = tuple(sorted(set(gpu_ids)))
    entries = [e for e in visible_devices(ids, inherited).split(",") if e]
    if len(entries) != len(ids):
        raise GpuScopeError(f"GPU ids {list(ids)} reach past the runner's CUDA_VISIBLE_DEVICES={inherited!r}")
    return frozenset(nvml.resolve(entry) for entry in entries)


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


def host_info(nvml: NvmlReader | None, unavailable_reason: str | None, *, declared_type: str | None = None,
              declared_count: int | None = None) -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpus": psutil.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 1e9, 1),
        "gpu": gpu_facts(nvml, unavailable_reason, declared_type=declared_type, declared_count=declared_count),
        "gpu_topology": gpu_topology() if nvml is not None else None,
        "network": network_facts(),
    }


def foreign_gpu_processes(
    nvml: NvmlReader | None, own_pids: set[int], *, idle_memory_gb: float, gpus: GpuSet = None,
    own_groups: Collection[int] = (),
) -> list[tuple[int, int, float]]:
    """Users of ``gpus`` (every GPU for None) that are not ours: (NVML index, pid, GB); pid
    0 = unnamed.  Ours: a pid in ``own_pids``, or one in a process group of ``own_groups``
    (this runner's other runs).  GPUs outside ``gpus`` are another run's business.

    Inside a container NVML often cannot name other namespaces' processes (seen on the lent
    H200: a torch process using the GPU was not listed), so memory in use above the idle
    floor on a GPU with no process to show for it counts as a foreign user too."""
    if nvml is None:
        return _simulated_foreign(own_pids, idle_memory_gb)
    listed = nvml.compute_pids(gpus)
    named = [entry for entry in listed if not _ours(entry[1], own_pids, own_groups)]
    if named:
        return named
    explained = {index for index, _, _ in listed}  # memory there belongs to processes of ours
    unnamed = []
    for index in nvml.indexes(gpus):
        used_gb = nvml.nvml.nvmlDeviceGetMemoryInfo(nvml.handles[index]).used / 1e9
        if index not in explained and used_gb > idle_memory_gb:
            unnamed.append((index, 0, used_gb))
    return unnamed


def _ours(pid: int, own_pids: set[int], own_groups: Collection[int]) -> bool:
    if pid in own_pids:
        return True
    if not pid or not own_groups:
        return False
    try:
        return os.getpgid(pid) in own_groups
    except (ProcessLookupError, PermissionError):  # gone, or another PID namespace: not one we can vouch for
        return False


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


def gpu_memory_used_gb(nvml: NvmlReader | None, gpus: GpuSet = None) -> float | None:
    """GPU memory in use on ``gpus`` (every GPU for None), summed; None without NVML."""
    by_gpu = gpu_memory_by_gpu(nvml, gpus)
    return None if by_gpu is None else sum(by_gpu.values())


def gpu_memory_by_gpu(nvml: NvmlReader | None, gpus: GpuSet = None) -> dict[str, float] | None:
    """GB in use per GPU UUID on ``gpus`` (every GPU for None); None without NVML."""
    if nvml is None:
        return None
    return {nvml.uuids[i]: nvml.nvml.nvmlDeviceGetMemoryInfo(nvml.handles[i]).used / 1e9 for i in nvml.indexes(gpus)}


def gpu_health(nvml: NvmlReader | None, gpus: GpuSet = None) -> dict[str, Any]:
    """What says each of ``gpus`` is fit to measure on, read before launch (idle): its clock-event
    reasons (0x1 idle expected; a throttle bit at idle is a cooling or power fault), uncorrected
    ECC errors since the driver loaded, pending or failed memory row remapping (on the lent H200
    retired pages are 'Not Supported': row remapping replaces them).  An unanswered reading is
    None; ``checked`` False without NVML."""
    if nvml is None:
        return {"checked": False}
    nv = nvml.nvml
    return {"checked": True, "gpus": [_gpu_health(nv, nvml.handles[i], nvml.uuids[i]) for i in nvml.indexes(gpus)]}


def _gpu_health(nv: Any, handle: Any, uuid: str) -> dict[str, Any]:
    remapped = _nvml_or_none(nv, "nvmlDeviceGetRemappedRows", handle)  # (correctable, uncorrectable, pending, failure)
    return {
        "uuid": uuid,
        "clock_event_reasons": _nvml_or_none(nv, "nvmlDeviceGetCurrentClocksEventReasons", handle),
        "ecc_uncorrected": _nvml_or_none(nv, "nvmlDeviceGetTotalEccErrors", handle,
                                         getattr(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                                         getattr(nv, "NVML_VOLATILE_ECC", 0)),
        "remapped_rows_pending": bool(remapped[2]) if remapped else None,
        "remapped_rows_failure": bool(remapped[3]) if remapped else None,
    }


def _nvml_or_none(nv: Any, name: str, *args: Any) -> Any:
    """One NVML reading, None where the binding or the device does not answer it."""
    call = getattr(nv, name, None)  # a stand-in NVML in tests may lack the call
    if call is None:
        return None
    try:
        return call(*args)
    except Exception:  # NVMLError_NotSupported: ECC off, no row remapper
        return None
