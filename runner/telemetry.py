"""Telemetry sampled during each point: GPUs through NVML, the server through /metrics.

Samples are buffered in memory while a point runs and leave in one go when it ends:
the raw samples to a per-attempt Parquet file (compact; the compare page never reads
them), a summary per metric (mean, p50, max) to DuckDB.  Where there is no GPU, the
GPU telemetry is recorded as *unavailable* with the reason — never as zeros.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import requests
from prometheus_client.parser import text_string_to_metric_families

# sglang: gauges worth a time series; counters are summarised from the bench record instead.
SERVER_GAUGES = {
    "sglang:num_running_reqs": "running_reqs",
    "sglang:num_queue_reqs": "queued_reqs",
    "sglang:token_usage": "token_usage",
    "sglang:cache_hit_rate": "cache_hit_rate",
    "sglang:gen_throughput": "gen_throughput",
    "sglang:num_used_tokens": "used_tokens",
}


_GAUGE_PREFIXES = tuple(f"{name}{{" for name in SERVER_GAUGES) + tuple(f"{name} " for name in SERVER_GAUGES)
_GAUGE_COMMENTS = tuple(f"# {kind} {name} " for name in SERVER_GAUGES for kind in ("HELP", "TYPE"))


@dataclass(frozen=True)
class Sample:
    ts: float
    source: str  # "gpu" | "server"
    device: int | None
    metric: str
    value: float


class NvmlReader:
    """Reads per-GPU utilisation, memory, power, SM clock and clock-event reasons."""

    def __init__(self) -> None:
        import pynvml  # nvidia-ml-py; imported here so hosts without the library still load this module

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    def read(self, now: float) -> list[Sample]:
        nv = self.nvml
        samples: list[Sample] = []
        for index, handle in enumerate(self.handles):
            values = {
                "util_pct": float(nv.nvmlDeviceGetUtilizationRates(handle).gpu),
                "mem_used_gb": nv.nvmlDeviceGetMemoryInfo(handle).used / 1e9,
                "power_w": nv.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                "sm_clock_mhz": float(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)),
                "clock_event_reasons": float(nv.nvmlDeviceGetCurrentClocksEventReasons(handle)),
            }
            samples += [Sample(now, "gpu", index, metric, value) for metric, value in values.items()]
        return samples

    def compute_pids(self) -> list[tuple[int, int, float]]:
        """(gpu index, pid, used GB) of every compute process: the foreign-process guard."""
        found = []
        for index, handle in enumerate(self.handles):
            for proc in self.nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                found.append((index, int(proc.pid), (proc.usedGpuMemory or 0) / 1e9))
        return found


def open_nvml() -> tuple[NvmlReader | None, str | None]:
    """The NVML reader, or None with the reason it is unavailable on this host."""
    try:
        return NvmlReader(), None
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"NVML unavailable: {type(exc).__name__}: {exc}"


_SESSION = requests.Session()  # keep-alive: a new connection per 250 ms sample costs more than the read


def _wanted_lines(text: str) -> str:
    """Only the gauges we keep (and their # HELP/# TYPE lines): SGLang's /metrics also has
    large histograms, and parsing them 4 times a second is most of the sampler's CPU."""
    return "\n".join(line for line in text.splitlines()
                     if line.startswith(_GAUGE_PREFIXES) or line.startswith(_GAUGE_COMMENTS)) + "\n"


def read_server_metrics(base_url: str, now: float, timeout_s: float = 1.0) -> list[Sample]:
    response = _SESSION.get(f"{base_url}/metrics", timeout=timeout_s)
    response.raise_for_status()
    samples: list[Sample] = []
    for family in text_string_to_metric_families(_wanted_lines(response.text)):
        for sample in family.samples:
            metric = SERVER_GAUGES.get(sample.name)
            if metric is not None:
                samples.append(Sample(now, "server", None, metric, float(sample.value)))
    return samples


@dataclass
class Sampler:
    """A background thread sampling at ``hz`` until stopped; samples stay in memory."""

    read: Callable[[float], list[Sample]]
    hz: float = 4.0
    samples: list[Sample] = field(default_factory=list)
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="telemetry")
        self._thread.start()

    def _loop(self) -> None:
        period = 1.0 / self.hz
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.samples.extend(self.read(time.time()))
            except Exception:  # a missed sample must not end the point; the count is kept
                self.errors += 1
            next_at += period
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.samples


def summarise(samples: list[Sample], *, since: float | None) -> list[dict[str, Any]]:
    """mean / p50 / max per (source, device, metric) over the measured part of a point."""
    groups: dict[tuple[str, int | None, str], list[float]] = {}
    for s in samples:
        if since is None or s.ts >= since:
            groups.setdefault((s.source, s.device, s.metric), []).append(s.value)
    return [
        {"source": source, "device": device, "metric": metric, "n": len(values),
         "mean": statistics.fmean(values), "p50": statistics.median(values), "max": max(values), "note": None}
        for (source, device, metric), values in sorted(groups.items(), key=lambda kv: str(kv[0]))
    ]


def write_parquet(samples: list[Sample], path: Path, *, point_key: str, since: float | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({
        "point": [point_key] * len(samples),
        "ts": [s.ts for s in samples],
        "warmup": [since is not None and s.ts < since for s in samples],
        "source": [s.source for s in samples],
        "device": [s.device for s in samples],
        "metric": [s.metric for s in samples],
        "value": [s.value for s in samples],
    })
    pq.write_table(table, path, compression="zstd")
