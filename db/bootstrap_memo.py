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
{statistic: [estimate, low, high, n]}}}``.  A file whose ``samples`` no longer describe
the Parquet file beside it (replaced, restored from elsewhere), or that cannot be read or
parsed, counts as absent: the intervals are computed again.  Writing is best effort (the
work directory may be read-only to the app, or on another host): a write that fails
leaves nothing behind and changes nothing shown."""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path
from typing import Any

from domain.results.requests import BootstrapMemo

SUFFIX = ".bootstrap.json"


def memo_path(samples_path: Path) -> Path:
    return samples_path.with_name(samples_path.name + SUFFIX)


def read_memo(samples_path: Path) -> BootstrapMemo:
    """The intervals kept for these samples, or none (see the module's docstring)."""
    try:
        identity = _identity(samples_path)
        document = json.loads(memo_path(samples_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(document, dict) or document.get("samples") != identity:
        return {}
    intervals = document.get("intervals")
    if not isinstance(intervals, dict):
        return {}
    return {key: entry for key, entry in intervals.items() if isinstance(key, str) and _well_formed(entry)}


def write_memo(samples_path: Path, memo: BootstrapMemo) -> bool:
    """Keep ``memo`` with what is kept already; True when the file was written."""
    try:
        identity = _identity(samples_path)
        kept = read_memo(samples_path)
        # A copy first (one step under the GIL): another session may be adding to the memo.
        fresh = {key: entry for key, entry in dict(memo).items() if key not in kept and _well_formed(entry)}
        if not fresh:
            return False
        target = memo_path(samples_path)
        # Written whole, then renamed over the old one: a reader sees the old file or the new.
        temporary = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            temporary.write_text(json.dumps({"samples": identity, "intervals": {**kept, **fresh}}), encoding="utf-8")
            os.replace(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)
    except OSError:
        return False
    return True


def _identity(samples_path: Path) -> dict[str, int]:
    stat = samples_path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _well_formed(entry: Any) -> bool:
    """statistic → [estimate, low, high, n], every one a number."""
    return isinstance(entry, dict) and all(
        isinstance(name, str) and isinstance(values, list) and len(values) == 4
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        and not math.isnan(float(values[3]))
        for name, values in entry.items())
