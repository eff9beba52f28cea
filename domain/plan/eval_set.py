"""The team's own eval set: a local JSONL file read by ``runner check`` and the probe.

One item a line: ``{"prompt": "...", "answer": "..."}``, with optional ``id`` (default: the
line number), ``scorer`` (``exact``, ``regex`` or ``numeric``; default the plan's) and
``tolerance`` (numeric only).  Blank lines are skipped.  A bad line is refused with its
number; nothing is downloaded and no eval set ships with benchdeck.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain.plan.quality import EvalSet

MAX_EVAL_BYTES = 64 * 1024 * 1024
SCORERS = ("exact", "regex", "numeric")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")


class EvalSetError(ValueError):
    """The eval set cannot be used; ``line`` is 0 for the file as a whole."""

    def __init__(self, line: int, reason: str):
        super().__init__(f"line {line}: {reason}" if line else reason)
        self.line = line
        self.reason = reason


@dataclass(frozen=True)
class EvalItem:
    id: str
    prompt: str
    answer: str
    scorer: str
    tolerance: float


@dataclass(frozen=True)
class LoadedEvalSet:
    items: list[EvalItem]
    sha256: str


def load_eval_set(spec: EvalSet) -> LoadedEvalSet:
    path = Path(spec.path)
    if not path.is_file():
        raise EvalSetError(0, f"{spec.path} is not a file on this host")
    if path.stat().st_size > MAX_EVAL_BYTES:
        raise EvalSetError(0, f"{spec.path} is larger than {MAX_EVAL_BYTES // 2**20} MiB")
    raw = path.read_bytes()
    items = _items(raw, spec)
    if not items:
        raise EvalSetError(0, f"{spec.path} has no items")
    return LoadedEvalSet(items[: spec.max_items], hashlib.sha256(raw).hexdigest()[:16])


def _items(raw: bytes, spec: EvalSet) -> list[EvalItem]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EvalSetError(0, f"not UTF-8 ({exc.reason})") from exc
    items, seen = [], set()
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            item = _item(number, line, spec)
            if item.id in seen:
                raise EvalSetError(number, f"id {item.id!r} appears twice")
            seen.add(item.id)
            items.append(item)
    return items


def _item(number: int, line: str, spec: EvalSet) -> EvalItem:
    try:
        data: Any = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EvalSetError(number, f"not JSON ({exc.msg})") from exc
    if not isinstance(data, dict):
        raise EvalSetError(number, "an item is a JSON object")
    prompt, answer = data.get("prompt"), data.get("answer")
    if not isinstance(prompt, str) or not prompt:
        raise EvalSetError(number, "prompt must be a non-empty string")
    if not isinstance(answer, str | int | float) or isinstance(answer, bool):
        raise EvalSetError(number, "answer must be a string or a number")
    scorer = data.get("scorer", spec.scorer)
    if scorer not in SCORERS:
        raise EvalSetError(number, f"scorer must be one of {', '.join(SCORERS)}, got {scorer!r}")
    _check_answer(number, str(answer), scorer)
    tolerance = data.get("tolerance", spec.tolerance)
    if not isinstance(tolerance, int | float) or isinstance(tolerance, bool) or tolerance < 0:
        raise EvalSetError(number, "tolerance must be a number >= 0")
    return EvalItem(str(data.get("id", number)), prompt, str(answer), scorer, float(tolerance))


def _check_answer(number: int, answer: str, scorer: str) -> None:
    if scorer == "regex":
        try:
            re.compile(answer)
        except re.error as exc:
            raise EvalSetError(number, f"answer is not a regular expression ({exc})") from exc
    if scorer == "numeric" and _number(answer) is None:
        raise EvalSetError(number, f"answer {answer!r} is not a number")


def _number(text: str) -> float | None:
    match = _NUMBER.search(text)
    if match is None:
        return None
    try:
        return float(match.group(0).replace(",", ""))
    except ValueError:
        return None


def is_correct(item: EvalItem, output: str) -> bool:
    """Exact: the stripped output equals the answer; regex: the pattern is found in the
    output; numeric: the output's first number is within ``tolerance`` of the answer's."""
    if item.scorer == "exact":
        return output.strip() == item.answer.strip()
    if item.scorer == "regex":
        return re.search(item.answer, output) is not None
    got, want = _number(output), _number(item.answer)
    return got is not None and want is not None and math.isclose(got, want, rel_tol=0.0,
                                                                   abs_tol=item.tolerance)
