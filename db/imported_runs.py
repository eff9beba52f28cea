"""Importing one file: preview it, combine what it says with what the user states, and
write it in one transaction (db.Store.import_runs).

Nothing is written for a file that would import no point (no record, or every record
left out): it is refused, and no import log entry records it, so fixing the file or the
statement and importing again works.  A run of the file whose every point is left out is
not created either."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from db.store import Store
from domain.core.access import Actor
from domain.importer import ImportPreview, iter_point_rows, preview_import
from domain.importer.conditions import ImportConditions, RunStatement, preview_statements
from domain.importer.records import configuration_for, point_values, run_name, safe_file_name


@dataclass(frozen=True)
class ImportResult:
    run_ids: list[int]
    points: int
    skipped: list[dict[str, Any]]  # points not importable (e.g. no concurrency limit), with reasons
    preview: ImportPreview

    @property
    def refused(self) -> bool:
        """Nothing was written: the file has no point to import (its problems say why)."""
        return not self.run_ids


def _skipped(preview: ImportPreview) -> list[dict[str, Any]]:
    """Points with no concurrency to put on a sweep axis: the client ran without a limit
    (max_concurrency null), or the file does not say (AIPerf's CSV).  Reported, not guessed."""
    return [{"line": point.line,
             "code": "unknown_concurrency" if "concurrency" in point.unknown else "unbounded_concurrency"}
            for point in preview.points if point.conditions.get("concurrency") is None]


def _points(source: Path | BinaryIO, preview: ImportPreview, statements: list[RunStatement],
            positions: dict[int, int]) -> Iterator[tuple[int, dict[str, Any]]]:
    """One point at a time, streamed into the transaction (a file's raw records are never all held)."""
    for row in iter_point_rows(source, preview):
        values = point_values(row, statements[row.run_index])
        if values["concurrency"] is not None:
            yield positions[row.run_index], values


def import_file(store: Store, source: Path | BinaryIO, stated: ImportConditions, *, actor: Actor,
                file_name: str | None = None, preview: ImportPreview | None = None) -> ImportResult:
    """Import ``source``; ``file_name`` (the upload's name) becomes the runs' names, as text
    (domain.importer.records.safe_file_name).  Returns a refused result, writing nothing,
    when no point would be imported."""
    raw_name = file_name or (source.name if isinstance(source, Path) else "upload")
    preview = preview or preview_import(source, file_name=raw_name)
    skipped = _skipped(preview)
    counts = {run.index: sum(1 for p in run.points if p.conditions.get("concurrency") is not None)
              for run in preview.runs}
    kept = [index for index, count in counts.items() if count]  # runs with a point, renumbered 0.. below
    if not kept:
        return ImportResult([], 0, skipped, preview)
    name = safe_file_name(raw_name, len(kept))
    statements = preview_statements(preview, stated)
    configurations = []
    for position, index in enumerate(kept):
        config = configuration_for(preview.runs[index], statements[index], preview)
        config["environment"]["imported_from"] = name
        config["points"] = counts[index]
        config["name"] = run_name(name, position, len(kept))
        configurations.append(config)
    positions = {index: position for position, index in enumerate(kept)}
    problems = [{"line": p.line, "code": p.code, **dict(p.params)} for p in preview.problems] + skipped
    run_ids = store.import_runs(sha256=preview.sha256, file_name=name, kind=preview.source_kind, actor=actor,
                                configurations=configurations, points=_points(source, preview, statements, positions),
                                problems=problems)
    return ImportResult(run_ids, sum(counts[index] for index in kept), skipped, preview)
