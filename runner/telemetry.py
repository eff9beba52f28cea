"""Telemetry sampled during each point: GPUs through NVML, the server through /metrics.

Samples are buffered in memory while a point runs and leave in one go when it ends:
the raw samples to a per-attempt Parquet file (compact; the compare page never reads
them), a summary per metric (mean, p50, max) to DuckDB.  Where there is no GPU, the
GPU telemetry is recorded as *unavailable* with the reason — never as zeros.

Two summaries are not statistics of a level (see :func:`summarise`): NVML's clock-event
reasons are a bitmask, summarised as the bitwise OR of every sample; the server's token
counters become their increase over the measured window (``*_delta``).

The /metrics reader is written once for every engine family: it is handed the family's
:class:`~domain.engines.server_metrics.MetricNames` (the engine adapter's ``metrics``: which
families it keeps under which benchdeck name, how their series add up).  It is on the
sampler's hot path (4 Hz per server for a whole sweep), so it keeps one HTTP connection per
thread and parses only the lines of the families it keeps; ``python -m bench runner_gaps``
measures what it costs.
"""

from __future__ import annotations

import http.client
import re
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from domain.engines.server_metrics import GaugeSeries, MetricNames
from domain.engines.sglang_metrics import SERVER_GAUGES, SGLANG_METRICS

# What each counter's summary is called: its increase over the measured window.
COUNTER_DELTAS = {"prompt_tokens_total": "prompt_tokens_delta", "generation_tokens_total": "generation_tokens_delta",
                  "retracted_requests_total": "retracted_requests_delta",
                  "graph_decode_passes_total": "graph_decode_passes_delta",
                  "eager_decode_passes_total": "eager_decode_passes_delta",
                  # vLLM's prefix cache (domain/engines/vllm_metrics.py): prompt tokens looked up, and found
                  "prefix_cache_queries_total": "prefix_cache_queries_delta",
                  "prefix_cache_hits_total": "prefix_cache_hits_delta"}
# Under PD a request passes both roles and each counts it: prompt tokens are the prefill
# server's work and generated tokens the decode server's, so each is kept on that role only.
# Sources are "server" or "server:<member>", members named "<role>-<index>" (domain/plan/topology.py).
_DELTA_ROLE = {"prompt_tokens_delta": "prefill", "generation_tokens_delta": "decode",
               # a decode server retracts and runs the decode passes; a prefill server does neither
               "retracted_requests_delta": "decode", "graph_decode_passes_delta": "decode",
               "eager_decode_passes_delta": "decode",
               "prefix_cache_queries_delta": "prefill", "prefix_cache_hits_delta": "prefill"}
_PD_ROLES = ("prefill", "decode")

# Derived from a GPU's util_pct samples: the share of them at 0 % (:func:`_idle_share_row`).
IDLE_SHARE = "util_idle_share"

# NVML's clock-event reasons are a bitmask: its summary is the OR of every sample.
BITMASK_METRICS = frozenset({"clock_event_reasons"})

_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPE = re.compile(r"\\[\\\"n]")


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


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: _UNESCAPE[m.group(0)], value) if "\\" in value else value


def parse_sample_line(line: str) -> GaugeSeries:
    """One sample line of the text format: ``name{k="v",...} value [timestamp]``."""
    brace = line.find("{")
    if brace < 0:
        name, _, rest = line.partition(" ")
        return GaugeSeries(name, {}, float(rest.split()[0]))
    close = line.rindex("}")
    labels = {key: _unescape(value) for key, value in _LABEL.findall(line, brace + 1, close)}
    return GaugeSeries(line[:brace], labels, float(line[close + 1:].split()[0]))


def kept_series(text: str | bytes, names: MetricNames) -> list[GaugeSeries]:
    """Every series of the families ``names`` keeps in a /metrics text, labels kept.

    Only those families' lines are looked at.  The text format keeps a family's samples
    together after its ``# TYPE`` line, so each family is found by one ``str.find`` of that
    line and read to the end of its block: the histograms (most of a real server's
    exposition, thousands of bucket lines with DP ranks) are never split into lines, let
    alone parsed.  A family without a ``# TYPE`` line is looked up sample by sample.  Read
    as bytes, only the kept lines are decoded.  Same values as the Prometheus parser
    (``tests/test_metrics_sampler.py`` checks both on real expositions)."""
    raw = text.encode() if isinstance(text, str) else text
    return [parse_sample_line(line.decode("utf-8", errors="replace"))
            for name in names.kept for line in family_lines(raw, name.encode(), counter=names.is_counter(name))]


def family_lines(text: bytes, name: bytes, *, counter: bool) -> list[bytes]:
    """The sample lines of ``name`` (a sample name: a counter's ends in ``_total``) in an
    exposition, as :func:`kept_series` reads them."""
    family = name.removesuffix(b"_total") if counter else name
    for typed in dict.fromkeys((name, family)):  # a counter's TYPE is written with or without _total
        at = text.find(b"# TYPE " + typed + b" ")
        if at >= 0:
            return _block_lines(text, text.find(b"\n", at) + 1, name, family)
    return _untyped_lines(text, name)


def _block_lines(text: bytes, start: int, name: bytes, family: bytes) -> list[bytes]:
    """From ``start`` to the end of the family's block: its samples named ``name`` (not
    e.g. a counter's ``_created``), past its own HELP/TYPE lines; any other comment or
    family ends the block."""
    wanted, lines = (name + b"{", name + b" "), []
    while 0 < start < len(text):
        end = text.find(b"\n", start)
        line = text[start:end if end >= 0 else len(text)]
        start = end + 1 if end >= 0 else len(text)
        if line.startswith(b"#"):
            if line.split(b" ", 3)[2:3] not in ([name], [family]):
                break
        elif line.startswith(wanted):
            lines.append(line)
        elif line.strip() and not line.startswith(family):
            break
    return lines


def _untyped_lines(text: bytes, name: bytes) -> list[bytes]:
    """Every line that starts with ``name`` followed by ``{`` or a space, wherever it is."""
    lines = []
    for marker in (name + b"{", name + b" "):
        at = text.find(marker)
        while at >= 0:
            if at == 0 or text[at - 1:at] == b"\n":
                end = text.find(b"\n", at)
                lines.append(text[at:end if end >= 0 else len(text)])
            at = text.find(marker, at + 1)
    return lines


def gauge_series(text: str, *, only_kept: bool = True) -> list[GaugeSeries]:
    """Every series of the gauges in an SGLang /metrics text, labels kept; ``only_kept``
    limits it to SGLang's kept gauges (the sampler's fast path, :func:`kept_series`);
    otherwise every gauge family through the Prometheus parser (``python -m runner diagnose``)."""
    if only_kept:
        return [s for s in kept_series(text, SGLANG_METRICS) if s.name in SERVER_GAUGES]
    return [GaugeSeries(sample.name, dict(sample.labels), float(sample.value))
            for family in text_string_to_metric_families(text) if family.type == "gauge"
            for sample in family.samples]


class MetricsUnavailable(RuntimeError):
    """/metrics answered with something other than 200."""


_CONNECTIONS = threading.local()  # one keep-alive connection per sampler thread and server


def _connection(base_url: str, timeout_s: float) -> http.client.HTTPConnection:
    pool: dict[str, http.client.HTTPConnection] = _CONNECTIONS.__dict__.setdefault("pool", {})
    conn = pool.get(base_url)
    if conn is None:
        parts = urlsplit(base_url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = pool[base_url] = kind(parts.hostname or "127.0.0.1", parts.port, timeout=timeout_s)
    return conn


def _drop_connection(base_url: str) -> None:
    conn = _CONNECTIONS.__dict__.get("pool", {}).pop(base_url, None)
    if conn is not None:
        conn.close()


def fetch_metrics(base_url: str, timeout_s: float = 1.0) -> bytes:
    """GET ``/metrics`` on a kept-alive connection.  Plain ``http.client``: the requests
    library costs about five times its CPU per GET (1.8 against 0.37 ms on the emulator),
    which at 4 Hz was most of the sampler's cost.  A connection the server closed while
    idle is reopened once."""
    path = (urlsplit(base_url).path.rstrip("/")) + "/metrics"
    for attempt in (1, 2):
        conn = _connection(base_url, timeout_s)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            _drop_connection(base_url)
            if attempt == 2:
                raise
            continue
        except Exception:
            _drop_connection(base_url)
            raise
        if response.status != 200:
            raise MetricsUnavailable(f"{base_url}/metrics answered {response.status}")
        return body
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def server_samples(names: MetricNames, text: bytes | str, now: float) -> list[Sample]:
    """One reading of a server's /metrics text as ``server`` samples at ``now``: the families
    ``names`` keeps, totalled for the whole server (:meth:`MetricNames.totals`; counters
    cumulative, :func:`summarise` turns them into deltas)."""
    totals = names.totals(kept_series(text, names))
    return [Sample(now, "server", None, metric, value) for metric, value in totals.items()]


def read_server_metrics(names: MetricNames, base_url: str, now: float, timeout_s: float = 1.0) -> list[Sample]:
    """GET ``base_url``/metrics on the kept-alive connection and read it as samples."""
    return server_samples(names, fetch_metrics(base_url, timeout_s), now)


def metrics_reader(names: MetricNames) -> Callable[[str, float], list[Sample]]:
    """A sampler's reader of a server's /metrics: (base URL, now) -> samples."""
    return lambda base_url, now: read_server_metrics(names, base_url, now)


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
            self._read_once()
            next_at += period
            self._stop.wait(max(0.0, next_at - time.monotonic()))
        # One more reading once the point is over: a counter's delta must end after the
        # last request finished, not up to one period before it.
        self._read_once()

    def _read_once(self) -> None:
        try:
            self.samples.extend(self.read(time.time()))
        except Exception:  # a missed sample must not end the point; the count is kept
            self.errors += 1

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.samples


def summarise(samples: list[Sample], *, since: float | None) -> list[dict[str, Any]]:
    """One row per (source, device, metric) over the measured part of a point (samples at
    or after ``since``); a GPU's rows carry its UUID as their note (the summaries table has
    no column of its own for it).  The columns mean by metric:

    - a level (utilisation, memory, a gauge): ``mean``, ``p50`` and ``max`` of the samples;
    - BITMASK_METRICS (NVML's clock-event reasons): ``max`` is the bitwise OR of every
      sample's mask (a reason seen once counts), ``mean`` and ``p50`` are None;
    - a GPU's ``util_pct`` also gives a ``util_idle_share`` row: the share of its samples at 0 %;
    - the server's counters: not kept as such; each becomes a COUNTER_DELTAS row whose ``max`` is
      the counter's increase over the window, from the first reading at or after ``since``
      to the last (the sampler's final one, taken after the point ended), ``mean`` and
      ``p50`` None.  SGLang raises these counters when a request finishes, so the warmup's
      requests (all finished before ``since``) are out, and a measured request is in unless
      it finished within one sampling period of ``since``.  No delta without ``since`` (the
      warmup would be in it), with fewer than two readings, or when the counter went down
      (the server restarted).  A counter has no series until its first request finished,
      so one that appears only after the window's first reading of its server started at 0.
      The scheduler's counters rise while requests run, not when they finish: the window
      holds the passes and retractions between its first and last reading.  Under PD only
      the role that does the work keeps it (prompt tokens on prefill; generated tokens,
      retractions and decode passes on decode)."""
    groups: dict[tuple[str, int | None, str, str | None], list[tuple[float, float]]] = {}
    first_reading: dict[str, float] = {}
    for s in samples:
        if since is None or s.ts >= since:
            groups.setdefault((s.source, s.device, s.metric, s.gpu_uuid), []).append((s.ts, s.value))
            first_reading[s.source] = min(s.ts, first_reading.get(s.source, s.ts))
    rows = []
    for (source, device, metric, uuid), points in sorted(groups.items(), key=lambda kv: str(kv[0])):
        points.sort()
        if metric in COUNTER_DELTAS and points[0][0] > first_reading[source]:
            points.insert(0, (first_reading[source], 0.0))  # read before its first series existed
        values = [value for _, value in points]
        found = [_summary_row(source, metric, values, since)]
        if source == "gpu" and metric == "util_pct":
            found.append(_idle_share_row(values))
        rows += [{"source": source, "device": device, "metric": row[0], "n": len(points), "mean": row[1],
                  "p50": row[2], "max": row[3], "note": uuid} for row in found if row is not None]
    return rows


def _idle_share_row(util_pct: list[float]) -> SummaryValues:
    """``util_idle_share``: the share of a GPU's samples at 0 % utilisation (its ``mean``,
    and ``max``): how much of the window the GPU drew power without working
    (domain/results/energy.py says it beside J/token)."""
    share = sum(1 for value in util_pct if value <= 0.0) / len(util_pct)
    return IDLE_SHARE, share, None, share


SummaryValues = tuple[str, float | None, float | None, float]


def _summary_row(source: str, metric: str, values: list[float], since: float | None) -> SummaryValues | None:
    """(metric, mean, p50, max) of one group's values in time order, or None to store nothing."""
    if metric in BITMASK_METRICS:
        mask = 0
        for value in values:
            mask |= int(value)
        return metric, None, None, float(mask)
    if metric in COUNTER_DELTAS:
        delta_metric = COUNTER_DELTAS[metric]
        if since is None or len(values) < 2 or values[-1] < values[0] or not _counted_here(source, delta_metric):
            return None
        return delta_metric, None, None, values[-1] - values[0]
    return metric, statistics.fmean(values), statistics.median(values), max(values)


def _counted_here(source: str, delta_metric: str) -> bool:
    """Whether a server source's counter delta is its own work (see ``_DELTA_ROLE``)."""
    role = source.partition(":")[2].rpartition("-")[0]
    return role not in _PD_ROLES or role == _DELTA_ROLE[delta_metric]


def write_parquet(samples: list[Sample], path: Path, *, point_key: str, since: float | None) -> None:
    # Imported here: the readers above (NVML, /metrics) also serve ``runner doctor``, which
    # must run on a host where the app's environment is only half installed.
    import pyarrow as pa
    import pyarrow.parquet as pq

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
