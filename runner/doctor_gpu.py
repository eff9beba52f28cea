"""The doctor's GPU checks, read through NVML as the runner reads them (runner/telemetry.py,
runner/host.py): NVML itself, the GPUs' names and count against the settings, the runner's
CUDA_VISIBLE_DEVICES mapping, foreign processes, ECC and row remapping, clocks."""

from __future__ import annotations

import os
from typing import Any

from domain.core.settings import Settings
from runner import host
from runner.doctor import Finding, Status
from runner.telemetry import GpuScopeError, NvmlReader, open_nvml

# NVML clock-event reason bits (nvml.h): 0x1 GPU idle, 0x4 applications clocks setting; any
# other bit at idle (power cap, thermal slowdown, HW slowdown ...) means the GPU cannot hold
# its clocks before a load even starts.
HARMLESS_CLOCK_EVENTS = 0x1 | 0x4


def gpu_findings(settings: Settings, nvml_module: Any = None) -> list[Finding]:
    nvml, reason = open_nvml(nvml_module)
    if nvml is None:
        detail = (reason or "").removeprefix("NVML unavailable: ")
        return [Finding("gpu", "nvml", "fail", "nvml_unavailable", {"detail": detail})]
    found = [_nvml_finding(nvml), _type_finding(nvml, settings)]
    inherited = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        gpus = host.runner_gpus(nvml, inherited, settings.runner_gpu_count)
    except GpuScopeError as exc:
        return [*found, Finding("gpu", "visible_devices", "fail", "visible_bad", {"value": inherited, "detail": exc})]
    found.append(_count_finding(nvml, gpus, settings, inherited))
    found.append(_foreign_finding(nvml, gpus, settings))
    found += [_health_finding(nvml, gpus), _clock_finding(nvml, gpus)]
    return found


def _nvml_finding(nvml: NvmlReader) -> Finding:
    hardware = host.gpu_hardware(nvml)
    names = sorted({gpu["name"] for gpu in hardware["gpus"]})
    return Finding("gpu", "nvml", "ok", "nvml_ok",
                   {"count": hardware["count"], "names": ", ".join(names), "driver": hardware["driver"]}, hardware)


def _type_finding(nvml: NvmlReader, settings: Settings) -> Finding:
    mismatch = host.gpu_type_mismatch(nvml, settings.runner_gpu_type)
    if mismatch is not None:
        return Finding("gpu", "type", "fail", "gpu_type_bad", {"detail": mismatch})
    return Finding("gpu", "type", "ok", "gpu_type_ok", {"type": settings.runner_gpu_type})


def _count_finding(nvml: NvmlReader, gpus: frozenset[str] | None, settings: Settings,
                   inherited: str | None) -> Finding:
    serving = len(gpus or ())
    mapping = {index: nvml.uuids[index] for index in nvml.indexes(gpus)}
    context = {"count": serving, "declared": settings.runner_gpu_count, "visible": inherited or "-"}
    status: Status = "ok" if serving >= settings.runner_gpu_count else "fail"
    return Finding("gpu", "count", status, f"gpu_count_{status}", context, {"nvml_index_to_uuid": mapping})


def _foreign_finding(nvml: NvmlReader, gpus: frozenset[str] | None, settings: Settings) -> Finding:
    foreign = host.foreign_gpu_processes(nvml, {os.getpid()}, idle_memory_gb=settings.gpu_idle_memory_gb, gpus=gpus)
    if not foreign:
        return Finding("gpu", "foreign_processes", "ok", "foreign_none")
    listed = ", ".join(f"GPU{g} pid {p or '?'} ({gb:.1f} GB)" for g, p, gb in foreign)
    return Finding("gpu", "foreign_processes", "warn", "foreign_found", {"listed": listed},
                   {"processes": [list(entry) for entry in foreign]})


def _health_finding(nvml: NvmlReader, gpus: frozenset[str] | None) -> Finding:
    health = host.gpu_health(nvml, gpus)
    bad = [g["uuid"] for g in health["gpus"]
           if (g["ecc_uncorrected"] or 0) > 0 or g["remapped_rows_pending"] or g["remapped_rows_failure"]]
    if bad:
        return Finding("gpu", "ecc_remap", "fail", "ecc_bad", {"uuids": ", ".join(bad)}, health)
    return Finding("gpu", "ecc_remap", "ok", "ecc_ok", {}, health)


def _clock_finding(nvml: NvmlReader, gpus: frozenset[str] | None) -> Finding:
    nv, clocks, throttled = nvml.nvml, [], []
    for index in nvml.indexes(gpus):
        handle = nvml.handles[index]
        current = _reading(nv, "nvmlDeviceGetClockInfo", handle, nv.NVML_CLOCK_SM)
        highest = _reading(nv, "nvmlDeviceGetMaxClockInfo", handle, nv.NVML_CLOCK_SM)
        events = _reading(nv, "nvmlDeviceGetCurrentClocksEventReasons", handle)
        clocks.append({"index": index, "sm_mhz": current, "sm_max_mhz": highest, "clock_event_reasons": events})
        if events is not None and events & ~HARMLESS_CLOCK_EVENTS:
            throttled.append(f"GPU{index} 0x{events:x}")
    if throttled:
        return Finding("gpu", "clocks", "warn", "clocks_throttled", {"listed": ", ".join(throttled)}, {"gpus": clocks})
    highest_max = max((c["sm_max_mhz"] or 0 for c in clocks), default=0)
    return Finding("gpu", "clocks", "ok", "clocks_ok", {"max": highest_max}, {"gpus": clocks})


def _reading(nv: Any, name: str, *args: Any) -> Any:
    call = getattr(nv, name, None)
    if call is None:
        return None
    try:
        return call(*args)
    except Exception:  # NVMLError_NotSupported and kin: that reading is absent
        return None
