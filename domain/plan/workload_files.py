"""A workload's local file, checked before anything is queued (``runner check``, submit).

A file that is missing, unreadable or malformed is refused with the line of the problem
(the client itself skips lines it cannot parse, e.g. ``custom`` and ``openai``, so a
damaged file would silently shrink the workload).  Also here: the file's hash, which the
runner adds to each point's ``workload`` condition (a workload is its parameters and its
file's exact bytes).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain.core.i18n import t
from domain.plan.workload import MultiTurn, TextFile, Trace, Workload, workload_path

MAX_FILE_BYTES = 2 * 1024**3


@dataclass(frozen=True)
class FileProblem:
    """One problem of a workload file: ``line`` 0 for the file as a whole."""

    path: str
    line: int
    what: str  # English, for logs; text() is the user's sentence

    def text(self, lang: str) -> str:
        if self.line == 0:
            return t("workload.file_problem", lang, path=self.path, detail=self.what)
        return t("workload.line_problem", lang, path=self.path, line=self.line, detail=self.what)


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def workload_file_problems(workload: Workload) -> list[FileProblem]:
    """Every problem of the workload's file (empty: none, or no file)."""
    path = workload_path(workload)
    if path is None:
        return []
    text, problem = _read(path)
    if problem is not None:
        return [problem]
    checker = _checker(workload)
    return list(checker(path, text))


def _checker(workload: Workload) -> Callable[[str, str], Iterator[FileProblem]]:
    if isinstance(workload, Trace):
        return _trace_problems
    if isinstance(workload, MultiTurn):
        return _conversations_problems
    if isinstance(workload, TextFile) and workload.format == "jsonl":
        return lambda path, text: _prompt_problems(path, text, workload.output_len is not None)
    return _sharegpt_problems


def _read(path: str) -> tuple[str, FileProblem | None]:
    file = Path(path)
    if not file.is_absolute():
        return "", FileProblem(path, 0, "the path must be absolute (the runner's working directory is not yours)")
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            return "", FileProblem(path, 0, f"larger than {MAX_FILE_BYTES // 1024**3} GiB")
        return file.read_text(encoding="utf-8"), None
    except FileNotFoundError:
        return "", FileProblem(path, 0, "no such file")
    except (OSError, UnicodeDecodeError) as exc:
        return "", FileProblem(path, 0, f"cannot be read ({type(exc).__name__}: {exc})")


def _json_lines(path: str, text: str) -> Iterator[tuple[int, Any] | FileProblem]:
    """(line number, parsed object) per non-empty line, or the problem of a line that is not JSON."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            yield FileProblem(path, number, f"not JSON ({exc.msg} at column {exc.colno})")


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _trace_line(row: Any) -> str | None:
    """What is wrong with one trace line (None: nothing)."""
    if not isinstance(row, dict):
        return "a trace line must be a JSON object"
    stamp = row.get("timestamp")
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not math.isfinite(stamp) or stamp < 0:
        return "timestamp must be a number of milliseconds >= 0"
    for name in ("input_len", "output_len"):
        if not _positive_int(row.get(name)):
            return f"{name} must be an integer >= 1"
    group = row.get("group")
    if group is not None and (isinstance(group, bool) or not isinstance(group, int | str)):
        return "group, when given, must be an integer or a text"
    unknown = sorted(set(row) - {"timestamp", "input_len", "output_len", "group"})
    return f"unknown field(s) {', '.join(unknown)}" if unknown else None


def _trace_problems(path: str, text: str) -> Iterator[FileProblem]:
    rows = 0
    for item in _json_lines(path, text):
        if isinstance(item, FileProblem):
            yield item
            continue
        number, row = item
        rows += 1
        what = _trace_line(row)
        if what is not None:
            yield FileProblem(path, number, what)
    if rows == 0:
        yield FileProblem(path, 0, "the trace has no lines")


def _prompt_problems(path: str, text: str, has_default: bool) -> Iterator[FileProblem]:
    rows = 0
    for item in _json_lines(path, text):
        if isinstance(item, FileProblem):
            yield item
            continue
        number, row = item
        rows += 1
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            yield FileProblem(path, number, 'each line needs "prompt": a non-empty text')
        elif "output_len" in row and not _positive_int(row["output_len"]):
            yield FileProblem(path, number, "output_len must be an integer >= 1")
        elif "output_len" not in row and not has_default:
            yield FileProblem(path, number, "no output_len here, and the workload sets none")
    if rows == 0:
        yield FileProblem(path, 0, "the file has no prompts")


def _whole_json(path: str, text: str) -> tuple[Any, FileProblem | None]:
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, FileProblem(path, exc.lineno, f"not JSON ({exc.msg} at column {exc.colno})")


def _sharegpt_problems(path: str, text: str) -> Iterator[FileProblem]:
    data, problem = _whole_json(path, text)
    if problem is not None:
        yield problem
        return
    if not isinstance(data, list) or not data:
        yield FileProblem(path, 0, "a ShareGPT file is a non-empty JSON list of conversations")
        return
    usable = sum(1 for item in data if isinstance(item, dict) and len(item.get("conversations") or []) >= 2)
    if usable == 0:
        yield FileProblem(path, 0, 'no entry has "conversations" with a question and an answer')


def _conversations_problems(path: str, text: str) -> Iterator[FileProblem]:
    data, problem = _whole_json(path, text)
    if problem is not None:
        yield problem
        return
    conversations = data.get("conversations") if isinstance(data, dict) else None
    if not isinstance(conversations, list) or not conversations:
        yield FileProblem(path, 0, 'a multi-turn file is {"conversations": [[{"messages": [...]}, ...], ...]}')
        return
    for index, conversation in enumerate(conversations):
        what = _conversation_problem(conversation)
        if what is not None:
            yield FileProblem(path, 0, f"conversation {index + 1}: {what}")


def _conversation_problem(conversation: Any) -> str | None:
    if not isinstance(conversation, list) or not conversation:
        return "must be a non-empty list of turns"
    for turn_index, turn in enumerate(conversation, start=1):
        messages = turn.get("messages") if isinstance(turn, dict) else None
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages):
            return f'turn {turn_index} needs "messages": a list of {{"role", "content"}}'
    return None
