"""A point's bootstrap intervals kept beside its request samples, so that they are computed
once per point, not once per comparison and process.

Resampling a point's requests for its intervals (domain/results/requests.py) costs 26 ms
of CPU for 100 requests and 120 ms for 1,000 here; a comparison of nine runs of twenty
such points spent seconds on it every time a server process first showed them, on the
compare page's path.  The samples of a point never change once written and the resampling
is seeded, so its intervals are a fixed function of the file and of the parameters that
``requests.bootstrap_key`` names.

The intervals are a JSON file next to the Parquet file of the samples
(``<samples>.bootstrap.json``): ``{"samples": {"size", "mtime_ns"}, "intervals": {key:
{statistic: [estimate, low, high, n, rho, n_eff]}}}``.  The samples' identity (size and mtime) is taken
when they are read (:func:`read_samples`, which the Store uses, records it in the frame's
``attrs``); intervals are read only from a file made for that identity and written only
while the Parquet file still has it, so intervals computed from samples that have since
been replaced (another run's file at the same path, a restore) are never kept for the new
ones, nor the new ones' used for the old.  A file that cannot be read or parsed counts as
absent: the intervals are computed again.  Writing is best effort (the work directory may
be read-only to the app, or on another host): a write that fails leaves nothing behind and
changes nothing shown."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from domain.results.analysis import REQUEST_METRIC_NAMES
from domain.results.requests import BootstrapMemo, bootstrap_intervals

SUFFIX = ".bootstrap.json"
SAMPLES_FILE = "samples_file"  # the attrs key of a samples frame: {"path", "size", "mtime_ns"}

Identity = dict[str, int]


def memo_path(samples_path: Path) -> Path:
    return samples_path.with_name(samples_path.name + SUFFIX)


def read_samples(path: Path) -> pd.DataFrame:
    """A point's samples, naming in ``attrs`` the file and the identity they were read with
    (none when the file changed while being read: its intervals are then neither read nor
    kept)."""
    before = file_identity(path)
    frame = pq.read_table(path).to_pandas()
    if file_identity(path) == before:
        frame.attrs[SAMPLES_FILE] = {"path": str(path), **before}
    return frame


def memos_for(samples: Mapping[int, pd.DataFrame]) -> dict[int, BootstrapMemo]:
    """The intervals kept for each point's samples as read, by point id (an empty memo
    where none are kept; no memo for samples that do not name their file)."""
    found = {}
    for point_id, frame in samples.items():
        source = samples_source(frame)
        if source is not None:
            found[point_id] = read_memo(source[0], source[1])
    return found


def keep_memos(samples: Mapping[int, pd.DataFrame], memos: Mapping[int, BootstrapMemo]) -> int:
    """Keep each point's intervals beside its samples while the file is the one they were
    read from; how many files were written."""
    written = 0
    for point_id, memo in memos.items():
        source = samples_source(samples[point_id]) if point_id in samples else None
        if source is not None and memo:
            written += write_memo(source[0], memo, source[1])
    return written


def keep_intervals(samples_path: Path, duration_s: float | None,
                   names: Sequence[str] = REQUEST_METRIC_NAMES) -> float | None:
    """Compute a point's intervals as a comparison will ask for them (every request metric
    of ``analysis.METRICS``, the point's stored duration) and keep them beside its samples,
    so the first comparison of a fresh point resamples nothing; the CPU seconds it took, or
    None when nothing was kept (no file, unreadable samples, nothing computable)."""
    started = time.process_time()
    try:
        frame = read_samples(samples_path)
        memo: BootstrapMemo = {}
        bootstrap_intervals(frame, duration_s, names=names, memo=memo)
        source = samples_source(frame)
        kept = source is not None and bool(memo) and write_memo(source[0], memo, source[1])
    except (OSError, ValueError, pa.ArrowException):
        return None
    return time.process_time() - started if kept else None


def read_memo(samples_path: Path, identity: Identity | None = None) -> BootstrapMemo:
    """The intervals kept for these samples (``identity``: as read; default: the file now),
    or none (see the module's docstring)."""
    try:
        expected = identity if identity is not None else file_identity(samples_path)
        document = json.loads(memo_path(samples_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(document, dict) or document.get("samples") != expected:
        return {}
    intervals = document.get("intervals")
    if not isinstance(intervals, dict):
        return {}
    return {key: entry for key, entry in intervals.items() if isinstance(key, str) and _well_formed(entry)}


def write_memo(samples_path: Path, memo: BootstrapMemo, identity: Identity | None = None) -> bool:
    """Keep ``memo`` with what is kept already, if the samples file still has ``identity``
    (the one its samples were read with); True when the file was written."""
    try:
        current = file_identity(samples_path)
        if identity is not None and identity != current:
            return False  # replaced since the samples were read: these intervals are not its
        kept = read_memo(samples_path, current)
        # A copy first (one step under the GIL): another session may be adding to the memo.
        fresh = {key: entry for key, entry in dict(memo).items() if key not in kept and _well_formed(entry)}
        if not fresh:
            return False
        target = memo_path(samples_path)
        # Written whole, then renamed over the old one: a reader sees the old file or the new.
        temporary = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            temporary.write_text(json.dumps({"samples": current, "intervals": {**kept, **fresh}}), encoding="utf-8")
            os.replace(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)
    except (OSError, ValueError):
        return False
    return True


def samples_source(frame: pd.DataFrame) -> tuple[Path, Identity] | None:
    """The file a samples frame was read from and its identity then (:func:`read_samples`),
    or None when it names none."""
    named = frame.attrs.get(SAMPLES_FILE)
    if not isinstance(named, dict) or not isinstance(named.get("path"), str):
        return None
    return Path(named["path"]), {"size": named["size"], "mtime_ns": named["mtime_ns"]}


def file_identity(samples_path: Path) -> Identity:
    """The samples file's size and modification time: what its kept intervals are kept for."""
    stat = samples_path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _well_formed(entry: Any) -> bool:
    """statistic → [estimate, low, high, n, rho, n_eff]: numbers, the count finite."""
    try:
        return isinstance(entry, dict) and all(
            isinstance(name, str) and isinstance(values, list) and len(values) == 6
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
            and math.isfinite(float(values[3])) and float(values[3]) == int(values[3])
            for name, values in entry.items())
    except (OverflowError, ValueError):
        return False
