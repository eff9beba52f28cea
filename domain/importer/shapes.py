"""What a file that yielded no bench_serving record *is*, so the message names the file's
shape and what was expected, instead of per-line noise or a guess about failed requests.

bench_serving's ``--output-file`` is JSON Lines: one JSON object per line.  Files people
upload instead: one JSON array of records (``[{...}, {...}]``), one pretty-printed object
spread over many lines, plain text or CSV, or an empty file (what the Python client leaves
when every request failed: it writes no record then).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from domain.importer.types import LineProblem

_BOM = b"\xef\xbb\xbf"
_NOT_JSON = ("not_json", "not_utf8")
# File-level problems that mean the file is none of the formats the importer reads.
NOT_A_FORMAT = ("empty", "json_array", "json_document", "not_jsonl")


def _start(head: bytes) -> bytes:
    return head.removeprefix(_BOM).lstrip()


def _first_line(head: bytes) -> bytes:
    return _start(head).split(b"\n", 1)[0].strip()


def _one_document(head: bytes, line_count: int, whole: bool) -> bool:
    """One JSON object over several lines: the first line opens it alone (``{``), or the
    whole file (when ``head`` holds all of it) parses as one object."""
    if line_count < 2 or not _start(head).startswith(b"{"):
        return False
    if _first_line(head) == b"{":
        return True
    try:
        return whole and isinstance(json.loads(head.decode("utf-8-sig")), dict)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False


def file_problem(head: bytes, problems: Sequence[LineProblem], line_count: int, whole: bool) -> LineProblem:
    """The file-level problem of a JSONL upload without any record (``head``: its first
    bytes; ``whole``: whether they are the whole file)."""
    params = {"lines": line_count}
    start = _start(head)
    if not start:
        return LineProblem(0, "empty", params)
    if start.startswith(b"["):
        return LineProblem(0, "json_array", params)
    if _one_document(head, line_count, whole):
        return LineProblem(0, "json_document", params)
    if problems and all(p.code in _NOT_JSON for p in problems):
        return LineProblem(0, "not_jsonl", params)
    return LineProblem(0, "no_records", params)


def replaces_line_problems(problem: LineProblem) -> bool:
    """One JSON document instead of lines: its per-line problems say nothing more."""
    return problem.code in ("json_array", "json_document")
