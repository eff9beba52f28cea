"""The per-request columns the method badges read (domain/results/method_badges.py
``TIMELINE_COLUMNS``: issue order, TTFT, E2E, output length), read from each point's
samples file without the rest.

A samples file is mostly the inter-token gaps (db/sample_files.py); the badges need none
of them, so a comparison that badges every point reads a few scalar columns per point
instead of every file whole.  A :class:`SampleTimelines` is a ``Mapping`` of point id →
those columns, read on first access; a file that is gone or unreadable is absent
(``KeyError``; ``get``: None), as in :class:`db.sample_files.SampleFiles`."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from domain.results.method_badges import TIMELINE_COLUMNS


class SampleTimelines(Mapping[int, pd.DataFrame]):
    """Point id → its samples' :data:`TIMELINE_COLUMNS`, read on first access."""

    def __init__(self, paths: Mapping[int, Path]) -> None:
        self._paths = dict(paths)
        self._frames: dict[int, pd.DataFrame | None] = {}  # None: gone or unreadable
        self._lock = threading.Lock()

    def __getitem__(self, point_id: int) -> pd.DataFrame:
        path = self._paths[point_id]  # KeyError: not listed
        with self._lock:
            if point_id not in self._frames:
                self._frames[point_id] = read_timeline(path)
            frame = self._frames[point_id]
        if frame is None:
            raise KeyError(point_id)
        return frame

    def __contains__(self, point_id: object) -> bool:
        return point_id in self._paths

    def __iter__(self) -> Iterator[int]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


def read_timeline(path: Path) -> pd.DataFrame | None:
    """The file's :data:`TIMELINE_COLUMNS` that it has; None when it cannot be read."""
    try:
        present = set(pq.read_schema(path).names)
        return pq.read_table(path, columns=[c for c in TIMELINE_COLUMNS if c in present]).to_pandas()
    except (OSError, pa.ArrowInvalid):
        return None
