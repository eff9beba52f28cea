"""A stand-in for the NVML binding (pynvml): the functions benchdeck calls, over GPUs whose
UUIDs, names, memory, utilisation and compute processes a test sets.  Passed to
``NvmlReader(module)`` / ``open_nvml(module)`` (runner/telemetry.py) where the real
``import pynvml`` would be."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H200"
    total_gb: float = 143.8
    used_gb: float = 0.5  # idle: the driver's own share
    util_pct: int = 0
    processes: list[tuple[int, float]] = field(default_factory=list)  # (pid, GB)
    migs: tuple[str, ...] = ()  # MIG device UUIDs carved out of this GPU


@dataclass(frozen=True)
class FakeMig:
    uuid: str
    parent: FakeGpu


class FakeNvmlError(Exception):
    """What pynvml raises (NVMLError_NotFound, ...)."""


class FakeNvml:
    NVML_CLOCK_SM = 1

    def __init__(self, gpus: list[FakeGpu], *, driver: str = "570.124.06", cuda: int = 12080):
        self.gpus, self.driver, self.cuda = gpus, driver, cuda

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return handle.uuid

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeGpu | FakeMig:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
            if uuid in gpu.migs:
                return FakeMig(uuid, gpu)
        raise FakeNvmlError("Not Found")

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, mig: FakeMig) -> FakeGpu:
        return mig.parent

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        return handle.name

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(total=int(handle.total_gb * 1e9), used=int(handle.used_gb * 1e9))

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(gpu=handle.util_pct, memory=0)

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        return 100_000 + 5_000 * handle.util_pct  # mW

    def nvmlDeviceGetClockInfo(self, handle: FakeGpu, clock: int) -> int:
        return 1980

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeGpu) -> int:
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=int(gb * 1e9)) for pid, gb in handle.processes]

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.cuda


def h200_host(count: int) -> FakeNvml:
    """``count`` idle H200s with distinct UUIDs (GPU-0000000i-…)."""
    return FakeNvml([FakeGpu(f"GPU-{i:08d}-aaaa-bbbb-cccc-{i:012d}") for i in range(count)])
