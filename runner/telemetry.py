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
    gpu_uuid: str | None = None  # NVML's UUID of the GPU a "gpu" sample is from (device is NVML's index)


# A set of GPUs as NVML UUIDs; None = every GPU NVML sees (before a run's GPUs are known).
GpuSet = frozenset[str] | None


class GpuScopeError(ValueError):
    """A CUDA_VISIBLE_DEVICES entry that names no GPU NVML can see."""


def _text(value: str | bytes) -> str:
    """Old pynvml releases return bytes where nvidia-ml-py returns str."""
    return value.decode() if isinstance(value, bytes) else value


class NvmlReader:
    """Reads per-GPU utilisation, memory, power, SM clock and clock-event reasons.

    ``module`` is the NVML binding (pynvml by default); tests pass a stand-in object."""

    def __init__(self, module: Any = None) -> None:
        if module is None:
            import pynvml  # nvidia-ml-py; imported here so hosts without the library still load this module

            module = pynvml
        self.nvml = module
        module.nvmlInit()
        self.handles = [module.nvmlDeviceGetHandleByIndex(i) for i in range(module.nvmlDeviceGetCount())]
        self.uuids = [_text(module.nvmlDeviceGetUUID(h)) for h in self.handles]

    def indexes(self, gpus: GpuSet = None) -> list[int]:
        """NVML indexes of ``gpus`` (every GPU for None)."""
        return [i for i, uuid in enumerate(self.uuids) if gpus is None or uuid in gpus]

    def resolve(self, entry: str) -> str:
        """The UUID of the GPU one CUDA_VISIBLE_DEVICES entry names: an index, a ``GPU-…``
        UUID or a unique prefix of one (CUDA accepts both), or a ``MIG-…`` UUID (its
        parent GPU: NVML's utilisation and process lists are per physical GPU).

        An index is taken as NVML's index, which is PCI bus order; CUDA numbers the same
        way under CUDA_DEVICE_ORDER=PCI_BUS_ID and, on a host of identical GPUs, also by default."""
        entry = entry.strip()
        if entry.isdigit():
            if int(entry) >= len(self.uuids):
                raise GpuScopeError(f"GPU {entry} does not exist: NVML sees {len(self.uuids)} GPU(s)")
            return self.uuids[int(entry)]
        if entry.startswith("MIG-"):
            return self._mig_parent(entry)
        matches = [uuid for uuid in self.uuids if uuid.startswith(entry)] if entry.startswith("GPU-") else []
        if len(matches) != 1:
            raise GpuScopeError(f"CUDA_VISIBLE_DEVICES entry {entry!r} names {len(matches)} of NVML's GPUs, not one")
        return matches[0]

    def _mig_parent(self, entry: str) -> str:
        nv = self.nvml
        try:
            mig = nv.nvmlDeviceGetHandleByUUID(entry)
            return _text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)))
        except Exception as exc:  # NVMLError_NotFound, ...: NVML does not know the MIG device
            raise GpuScopeError(f"MIG device {entry!r} unknown to NVML: {exc}") from exc

    def reader(self, gpus: GpuSet) -> Callable[[float], list[Sample]]:
        """A sampler's read function over ``gpus`` only."""
        return lambda now: self.read(now, gpus)

    def read(self, now: float, gpus: GpuSet = None) -> list[Sample]:
        nv = self.nvml
        samples: list[Sample] = []
        for index in self.indexes(gpus):
            handle, uuid = self.handles[index], self.uuids[index]
            values = {
                "util_pct": float(nv.nvmlDeviceGetUtilizationRates(handle).gpu),
                "mem_used_gb": nv.nvmlDeviceGetMemoryInfo(handle).used / 1e9,
                "power_w": nv.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                "sm_clock_mhz": float(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)),
                "clock_event_reasons": float(nv.nvmlDeviceGetCurrentClocksEventReasons(handle)),
            }
            samples += [Sample(now, "gpu", index, metric, value, uuid) for metric, value in values.items()]
        return samples

    def compute_pids(self, gpus: GpuSet = None) -> list[tuple[int, int, float]]:
        """(gpu index, pid, used GB) of every compute process on ``gpus``: the foreign-process guard."""
        found = []
        for index in self.indexes(gpus):
            for proc in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handles[index]):
                found.append((index, int(proc.pid), (proc.usedGpuMemory or 0) / 1e9))
        return found


def open_nvml(module: Any = None) -> tuple[NvmlReader | None, str | None]:
    """The NVML reader, or None with the reason it is unavailable on this host."""
    try:
        return NvmlReader(module), None
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"NVML unavailable: {type(exc).__name__}: {exc}"


_SESSION = requests.Session()  # keep-alive: a new connection per 250 ms sample costs more than the read


def _wanted_lines(text: str) -> str:
    """Only the gauges we keep (and their # HELP/# TYPE lines): SGLang's /metrics also has
    large histograms, and parsing them 4 times a second is most of the sampler's CPU."""
    return "\n".join(line for line in text.splitlines()
                     if line.startswith(_GAUGE_PREFIXES) or line.startswith(_GAUGE_COMMENTS)) + "\n"


@dataclass(frozen=True)
class GaugeSeries:
    """One labelled series of a gauge, as /metrics exposes it."""

    name: str  # SGLang's name, e.g. sglang:num_running_reqs
    labels: dict[str, str]
    value: float


# Gauges that count things add up across DP replicas; a ratio of equal-sized pools does not,
# so its replicas are averaged.
_RATIO_GAUGES = frozenset({"token_usage", "cache_hit_rate"})


def gauge_series(text: str, *, only_kept: bool = True) -> list[GaugeSeries]:
    """Every series of the gauges in a /metrics text, labels kept; ``only_kept`` limits it
    to SERVER_GAUGES (the sampler's fast path)."""
    wanted = _wanted_lines(text) if only_kept else text
    return [GaugeSeries(sample.name, dict(sample.labels), float(sample.value))
            for family in text_string_to_metric_families(wanted) if only_kept or family.type == "gauge"
            for sample in family.samples]


def _replica(labels: dict[str, str]) -> tuple[str, str]:
    """Which DP replica a series describes: its ``dp_rank``, or, where SGLang sets none, its
    ``tp_rank`` (only the first attention-TP rank of each DP group exports by default)."""
    return labels.get("engine_type", ""), labels.get("dp_rank", labels.get("tp_rank", ""))


def _rank_order(labels: dict[str, str]) -> tuple[int, int]:
    return int(labels.get("pp_rank", 0) or 0), int(labels.get("tp_rank", 0) or 0)


def server_totals(series: list[GaugeSeries]) -> dict[str, float]:
    """SERVER_GAUGES for the whole server, as the runner records them.

    SGLang (``srt/observability/metrics_collector.py``) exports one series per scheduler
    that logs stats: one per DP replica (``dp_rank``; ``tp_rank`` in versions without it),
    and, with priority scheduling, per-priority breakdowns (``priority="<n>"``) next to the
    total (``priority=""``).  So: breakdowns dropped, one series per replica (the lowest
    pp/tp rank, the others repeat it), counts summed over replicas and ratios averaged.
    """
    per_replica: dict[tuple[str, str, str], GaugeSeries] = {}
    for s in series:
        metric = SERVER_GAUGES.get(s.name)
        if metric is None or s.labels.get("priority", ""):
            continue
        key = (metric, *_replica(s.labels))
        kept = per_replica.get(key)
        if kept is None or _rank_order(s.labels) < _rank_order(kept.labels):
            per_replica[key] = s
    values: dict[str, list[float]] = {}
    for (metric, _, _), s in per_replica.items():
        values.setdefault(metric, []).append(s.value)
    return {metric: (sum(v) / len(v) if metric in _RATIO_GAUGES else sum(v)) for metric, v in values.items()}


def read_server_metrics(base_url: str, now: float, timeout_s: float = 1.0) -> list[Sample]:
    response = _SESSION.get(f"{base_url}/metrics", timeout=timeout_s)
    response.raise_for_status()
    totals = server_totals(gauge_series(response.text))
    return [Sample(now, "server", None, metric, value) for metric, value in totals.items()]


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
    """mean / p50 / max per (source, device, metric) over the measured part of a point; a
    GPU's rows carry its UUID as their note (the summaries table has no column of its own for it)."""
    groups: dict[tuple[str, int | None, str, str | None], list[float]] = {}
    for s in samples:
        if since is None or s.ts >= since:
            groups.setdefault((s.source, s.device, s.metric, s.gpu_uuid), []).append(s.value)
    return [
        {"source": source, "device": device, "metric": metric, "n": len(values),
         "mean": statistics.fmean(values), "p50": statistics.median(values), "max": max(values), "note": uuid}
        for (source, device, metric, uuid), values in sorted(groups.items(), key=lambda kv: str(kv[0]))
    ]


def write_parquet(samples: list[Sample], path: Path, *, point_key: str, since: float | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({
        "point": [point_key] * len(samples),
        "ts": [s.ts for s in samples],
        "warmup": [since is not None and s.ts < since for s in samples],
        "source": [s.source for s in samples],
        "device": [s.device for s in samples],
        "gpu_uuid": pa.array([s.gpu_uuid for s in samples], type=pa.string()),
        "metric": [s.metric for s in samples],
        "value": [s.value for s in samples],
    })
    pq.write_table(table, path, compression="zstd")
