"""The per-request samples of a set of points, each read from its Parquet file only when
asked for, with the bootstrap intervals kept beside each (db/bootstrap_memo.py).

A comparison of nine runs of twenty points that kept their requests (``python -m bench
compare_samples``: 117,900 requests) read 137 MB of Parquet, most of it the inter-token
gaps, on the compare page's first visit after every start; Streamlit then pickled all of it
into its data cache.  Once a point's intervals are kept, the summary of a point measured
once needs nothing else of its samples (domain/results/analysis.py ``_sampled_point``), so
the samples are read as the analysis asks for them: most points are then never read.

A :class:`SampleFiles` is a ``Mapping`` of point id → samples frame (the analysis'
``RequestSamples``): its keys are the points whose samples the database lists (``in`` reads
nothing), and reading one that is gone or unreadable gives ``KeyError`` (``get``: None), so
such a point is absent, as ``Store.request_samples`` has it.  Frames read are kept by the
instance and shared by every caller: nobody may change them.

Identity: the intervals of a point are read for its file as it is then (size, mtime).  A
file read after that with another identity (replaced in between) is not used at all: the
point's kept intervals would describe other samples."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pandas as pd
import pyarrow as pa

from db.bootstrap_memo import Identity, file_identity, read_memo, read_samples, samples_source
from db.sample_timelines import SampleTimelines
from domain.results.requests import BootstrapMemo


class SampleFiles(Mapping[int, pd.DataFrame]):
    """Point id → its samples, read on first access (see the module's docstring)."""

    def __init__(self, paths: Mapping[int, Path]) -> None:
        self._paths = dict(paths)
        self._frames: dict[int, pd.DataFrame | None] = {}  # None: gone, unreadable or replaced
        self._identities: dict[int, Identity] = {}  # as the kept intervals were read for
        self._lock = threading.Lock()
        self._timelines: SampleTimelines | None = None

    def __getitem__(self, point_id: int) -> pd.DataFrame:
        frame = self._frame(point_id)
        if frame is None:
            raise KeyError(point_id)
        return frame

    def __contains__(self, point_id: object) -> bool:
        return point_id in self._paths  # listed; whether readable is known once read

    def __iter__(self) -> Iterator[int]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def timelines(self) -> SampleTimelines:
        """The same points' per-request columns that the method badges read, without the
        inter-token gaps (db/sample_timelines.py); one instance, shared like the frames."""
        with self._lock:
            if self._timelines is None:
                self._timelines = SampleTimelines(self._paths)
            return self._timelines

    def read(self) -> dict[int, pd.DataFrame]:
        """The frames read so far (the ones whose intervals may have grown)."""
        with self._lock:
            return {point_id: frame for point_id, frame in self._frames.items() if frame is not None}

    def memos(self) -> dict[int, BootstrapMemo]:
        """The intervals kept beside each point's file as it is now, by point id (empty where
        none are kept or the file is gone)."""
        found: dict[int, BootstrapMemo] = {}
        for point_id, path in self._paths.items():
            try:
                identity = file_identity(path)
            except OSError:
                continue
            with self._lock:  # a file read already: its intervals are the ones of what was read
                read = self._frames.get(point_id)
                source = samples_source(read) if read is not None else None
                identity = self._identities.setdefault(point_id, source[1] if source is not None else identity)
            found[point_id] = read_memo(path, identity)
        return found

    def _frame(self, point_id: int) -> pd.DataFrame | None:
        path = self._paths[point_id]  # KeyError: not listed
        # One reader at a time: two sessions asking for one point read it once.
        with self._lock:
            if point_id not in self._frames:
                self._frames[point_id] = self._read(point_id, path)
            return self._frames[point_id]

    def _read(self, point_id: int, path: Path) -> pd.DataFrame | None:
        try:
            frame = read_samples(path)
        except (OSError, pa.ArrowInvalid):
            return None
        expected = self._identities.get(point_id)
        source = samples_source(frame)
        if expected is not None and (source is None or source[1] != expected):
            return None  # replaced since its intervals were read
        return frame
