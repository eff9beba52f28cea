"""Importing results measured outside benchdeck: bench_serving JSONL and AIPerf exports.

Pure (no Streamlit, no subprocesses).  Two passes over an uploaded file, both streaming:

1. :func:`preview_import` reads the file once, line by line, and returns an
   :class:`ImportPreview`: the runs found, their points (typed columns and conditions,
   no raw records), problems per line, the SHA-256 of the content (duplicate detection)
   and what is detected or unknown.  Memory stays near one line, whatever the file size.
2. After the user confirms, :func:`iter_point_rows` reads it again and yields one
   :class:`PointRow` at a time, with the raw record, for one database transaction.  It
   first checks that the content still has the preview's hash.

How lines form runs: see :mod:`domain.importer.grouping`.  What the user states:
:class:`ImportConditions`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from domain.importer import aiperf, llmd
from domain.importer.bench_jsonl import decode_line, point_from_record
from domain.importer.conditions import (
    FlagCheck,
    ImportConditions,
    RunStatement,
    StatedValue,
    check_server_command,
    preview_statements,
    run_statement,
)
from domain.importer.grouping import group_runs, run_key
from domain.importer.lines import MAX_LINE_BYTES, HashingReader, sha256_of
from domain.importer.shapes import file_problem, replaces_line_problems
from domain.importer.types import (
    CONDITION_KEYS,
    ImportedPoint,
    ImportPreview,
    LineProblem,
    PointRow,
    RecordFormat,
    RunGroup,
    ServerFacts,
    SourceKind,
)
from domain.results.bench_record import json_safe

__all__ = [
    "CONDITION_KEYS", "FileChanged", "FlagCheck", "ImportConditions", "ImportPreview", "ImportedPoint",
    "LineProblem", "PointRow", "RecordFormat", "RunGroup", "RunStatement", "ServerFacts", "SourceKind",
    "StatedValue", "check_server_command", "detect_kind", "group_runs", "iter_point_rows", "preview_import",
    "preview_statements", "run_key", "run_statement",
]

Source = Path | BinaryIO
_HEAD_BYTES = 64 * 1024


class FileChanged(RuntimeError):
    """The content differs from what was previewed; nothing of it may be written."""


@contextlib.contextmanager
def _opened(source: Source) -> Iterator[BinaryIO]:
    """A binary stream at its start: a path is opened, an upload (seekable) is rewound."""
    if isinstance(source, Path):
        with source.open("rb") as stream:
            yield stream
    else:
        source.seek(0)
        yield source


def detect_kind(head: bytes, file_name: str = "") -> SourceKind:
    """Which format a file is, from its first bytes (and, for CSV and YAML, its name)."""
    if llmd.looks_like_llmd(head, file_name):
        return "llmd_report"
    if aiperf.looks_like_aiperf_json(head):
        return "aiperf_json"
    if aiperf.looks_like_aiperf_csv(head) or file_name.lower().endswith(".csv"):
        return "aiperf_csv"
    return "bench_serving_jsonl"


def preview_import(source: Source, *, file_name: str | None = None,
                   max_line_bytes: int = MAX_LINE_BYTES) -> ImportPreview:
    """Read ``source`` once and describe what an import would write."""
    name = file_name or (source.name if isinstance(source, Path) else "upload")
    with _opened(source) as stream:
        kind = detect_kind(stream.read(_HEAD_BYTES), name)
        stream.seek(0)
        if kind == "bench_serving_jsonl":
            return _preview_jsonl(stream, name, max_line_bytes)
        if kind == "llmd_report":
            return _preview_llmd(stream, name)
        return _preview_whole_file(stream, name, kind)


def _preview_jsonl(stream: BinaryIO, name: str, max_line_bytes: int) -> ImportPreview:
    head = stream.read(_HEAD_BYTES)
    stream.seek(0)
    reader = HashingReader(stream, max_line_bytes=max_line_bytes)
    points: list[ImportedPoint] = []
    problems: list[LineProblem] = []
    servers: dict[str, ServerFacts] = {}
    line_count = 0
    for line in reader:
        line_count = line.number
        decoded = decode_line(line)
        outcome = point_from_record(decoded, line.number, servers) if isinstance(decoded, dict) else decoded
        if isinstance(outcome, ImportedPoint):
            points.append(outcome)
        elif outcome is not None:
            problems.append(outcome)
    if not points:
        problem = file_problem(head, problems, line_count, whole=reader.size <= len(head))
        problems = [problem] if replaces_line_problems(problem) else [*problems, problem]
    return ImportPreview("bench_serving_jsonl", name, reader.sha256, reader.size, line_count,
                         group_runs(points), tuple(problems))


def _whole_file_point(data: bytes, kind: SourceKind) -> tuple[ImportedPoint | LineProblem, dict[str, Any] | None]:
    if kind == "aiperf_json":
        return aiperf.point_from_aiperf_json(data)
    return aiperf.point_from_aiperf_csv(data)


def _preview_whole_file(stream: BinaryIO, name: str, kind: SourceKind) -> ImportPreview:
    """AIPerf exports: one small document per file, one point."""
    digest, size = sha256_of(stream)
    stream.seek(0)
    data = aiperf.read_capped(stream)
    if isinstance(data, LineProblem):
        return ImportPreview(kind, name, digest, size, 0, (), (data,))
    outcome, _ = _whole_file_point(data, kind)
    if isinstance(outcome, LineProblem):
        return ImportPreview(kind, name, digest, size, data.count(b"\n"), (), (outcome,))
    return ImportPreview(kind, name, digest, size, data.count(b"\n"), group_runs([outcome]), ())


def _preview_llmd(stream: BinaryIO, name: str) -> ImportPreview:
    """llm-d reports: one point per report, several reports per file (domain.importer.llmd)."""
    digest, size = sha256_of(stream)
    stream.seek(0)
    data = aiperf.read_capped(stream)
    if isinstance(data, LineProblem):
        return ImportPreview("llmd_report", name, digest, size, 0, (), (data,))
    points, problems, parsed = llmd.points_from_file(data)
    return ImportPreview("llmd_report", name, digest, size, len(parsed), group_runs(points), tuple(problems))


def iter_point_rows(source: Source, preview: ImportPreview) -> Iterator[PointRow]:
    """The preview's points with their raw records, one at a time, in file order.

    Raises FileChanged before yielding anything if the content no longer has the
    preview's hash (and again at the end, should it change while being read)."""
    with _opened(source) as stream:
        if sha256_of(stream)[0] != preview.sha256:
            raise FileChanged(f"{preview.file_name} changed since it was previewed")
        stream.seek(0)
        if preview.source_kind == "bench_serving_jsonl":
            yield from _jsonl_rows(stream, preview)
        elif preview.source_kind == "llmd_report":
            yield from _llmd_rows(stream, preview)
        else:
            yield from _whole_file_rows(stream, preview)


def _row(run_index: int, point: ImportedPoint, raw: dict[str, Any]) -> PointRow:
    return PointRow(run_index, point.line, point.metrics, point.conditions, point.unknown, json_safe(raw))


def _jsonl_rows(stream: BinaryIO, preview: ImportPreview) -> Iterator[PointRow]:
    placed = {point.line: (run.index, point) for run in preview.runs for point in run.points}
    reader = HashingReader(stream)
    for line in reader:
        if line.number not in placed:
            continue  # problem lines, blank lines
        record = decode_line(line)
        if not isinstance(record, dict):
            raise FileChanged(f"line {line.number} no longer holds its record")
        run_index, point = placed[line.number]
        yield _row(run_index, point, record)
    if reader.sha256 != preview.sha256:
        raise FileChanged(f"{preview.file_name} changed while it was being imported")


def _llmd_rows(stream: BinaryIO, preview: ImportPreview) -> Iterator[PointRow]:
    data = aiperf.read_capped(stream)
    if isinstance(data, LineProblem):
        return
    _, _, parsed = llmd.points_from_file(data)
    for run in preview.runs:
        for point in run.points:
            yield _row(run.index, point, parsed[point.line - 1])


def _whole_file_rows(stream: BinaryIO, preview: ImportPreview) -> Iterator[PointRow]:
    data = aiperf.read_capped(stream)
    if isinstance(data, LineProblem) or not preview.runs:
        return
    _, raw = _whole_file_point(data, preview.source_kind)
    run = preview.runs[0]
    yield _row(run.index, run.points[0], raw or {})
