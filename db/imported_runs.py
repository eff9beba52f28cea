"""Importing one file: preview it, combine what it says with what the user states, and
write it in one transaction (db.Store.import_runs)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from db.store import Store
from domain.core.access import Actor
from domain.importer import ImportPreview, iter_point_rows, preview_import
from domain.importer.conditions import ImportConditions, RunStatement, preview_statements
from domain.importer.records import configuration_for, point_values


@dataclass(frozen=True)
class ImportResult:
    run_ids: list[int]
    points: int
    skipped: list[dict[str, Any]]  # points not importable (e.g. no concurrency limit), with reasons
    preview: ImportPreview


def _points(source: Path | BinaryIO, preview: ImportPreview, statements: list[RunStatement],
            skipped: list[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
    for row in iter_point_rows(source, preview):
        values = point_values(row, statements[row.run_index])
        if values["concurrency"] is None:
            # max_concurrency null: requests were not capped, so there is no concurrency to
            # put on a sweep axis; the point is reported, not guessed.
            skipped.append({"line": row.line, "code": "unbounded_concurrency"})
            continue
        yield row.run_index, values


def import_file(store: Store, source: Path | BinaryIO, stated: ImportConditions, *, actor: Actor,
                file_name: str | None = None, preview: ImportPreview | None = None) -> ImportResult:
    preview = preview or preview_import(source, file_name=file_name)
    statements = preview_statements(preview, stated)
    configurations = []
    for run, statement in zip(preview.runs, statements, strict=True):
        config = configuration_for(run, statement, preview)
        config["points"] = len(run.points)
        configurations.append(config)
    skipped: list[dict[str, Any]] = []
    points = list(_points(source, preview, statements, skipped))
    problems = [{"line": p.line, "code": p.code, **dict(p.params)} for p in preview.problems] + skipped
    run_ids = store.import_runs(sha256=preview.sha256, file_name=preview.file_name, kind=preview.source_kind,
                               actor=actor, configurations=configurations, points=points, problems=problems)
    return ImportResult(run_ids, len(points), skipped, preview)
