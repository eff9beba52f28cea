"""Which of this runner's GPUs a foreign process holds, keyed as a topology's layout keys
them (0 = the runner's first GPU), each with the reason a waiting run shows
(domain/plan/gpu_claim.py).  The daemon's pre-flight publishes them; its claim skips a run
that would use one of them and takes the next whose GPUs are free."""

from __future__ import annotations

from runner import host
from runner.attempt import foreign_reason
from runner.telemetry import GpuScopeError, NvmlReader


def busy_runner_gpus(nvml: NvmlReader | None, foreign: list[tuple[int, int, float]], inherited: str | None,
                     count: int) -> dict[int, str]:
    """The runner's GPU ids that ``foreign`` users (NVML index, pid, GB) sit on, with the reason."""
    by_id: dict[int, list[tuple[int, int, float]]] = {}
    for entry in foreign:
        for gpu_id in _runner_ids_of(nvml, entry[0], inherited, count):
            by_id.setdefault(gpu_id, []).append(entry)
    return {gpu_id: foreign_reason(nvml, entries) for gpu_id, entries in sorted(by_id.items())}


def _runner_ids_of(nvml: NvmlReader | None, index: int, inherited: str | None, count: int) -> list[int]:
    """The runner's ids of NVML's GPU ``index``.  Without NVML the simulated users
    (BENCHDECK_SIMULATED_GPU_USERS) name the runner's ids themselves."""
    if nvml is None:
        return [index] if 0 <= index < count else []
    return [gpu_id for gpu_id in range(count) if _uuid_at(nvml, gpu_id, inherited) == nvml.uuids[index]]


def _uuid_at(nvml: NvmlReader, gpu_id: int, inherited: str | None) -> str | None:
    try:
        found = host.run_gpus(nvml, [gpu_id], inherited)
    except GpuScopeError:
        return None
    return next(iter(found)) if found else None
