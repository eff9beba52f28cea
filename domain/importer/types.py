"""What an import preview holds: points, run groups, per-line problems, facts from the file.

Everything here is small: a preview never keeps a record's raw JSON (a file with
``--output-details`` arrays can be tens of megabytes); :func:`domain.importer.iter_point_rows`
reads the raw records again, one at a time, when the import is confirmed.

*Unknown* is explicit: every point carries the names of the conditions its file does not
state (``unknown``).  A condition whose value is ``None`` but which is not listed there is
known to be unset; the one case is ``concurrency`` when bench_serving ran without
``--max-concurrency`` (no limit).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from domain.core.i18n import t

SourceKind = Literal["bench_serving_jsonl", "aiperf_json", "aiperf_csv", "llmd_report"]

# Conditions a point may state, the same names the runner stores per point
# (domain.plan.run_plan.point_conditions), plus ``tag`` which bench_serving ≥ 0.5.9 records.
CONDITION_KEYS = (
    "scenario", "input_len", "output_len", "concurrency", "repeat_idx", "num_prompts", "warmup",
    "random_range_ratio", "dataset", "dataset_path", "seed", "request_rate", "backend", "tokenize_prompt",
    "apply_chat_template", "thinking_mode", "ignore_eos", "flush_cache", "tag",
)
# Labels and counters the importer derives itself; never "unknown".
DERIVED_KEYS = ("scenario", "repeat_idx")
# Every LineProblem code; each has a text ``import.problem.<code>`` in domain/core/i18n/import.yaml.
PROBLEM_CODES = ("too_long", "not_utf8", "truncated", "not_json", "not_object", "missing_keys", "bad_value",
                 "all_failed", "refused_as_completed", "no_records", "aiperf_incomplete",
                 # file-level (line 0), domain.importer.shapes: what a file without any record is
                 "empty", "json_array", "json_document", "not_jsonl")


@dataclass(frozen=True)
class LineProblem:
    """One line (or, for whole-file formats, the file: line 0) that did not become a point."""

    line: int
    code: str  # one of PROBLEM_CODES
    params: Mapping[str, str | int] = field(default_factory=dict)

    def text(self, lang: str) -> str:
        return t(f"import.problem.{self.code}", lang, line=self.line, **self.params)


@dataclass(frozen=True)
class ServerFacts:
    """What the record's ``server_info`` (the server's own ``/server_info``) says.

    Shown as "from the file": these are the server's resolved values, not the user's
    statement.  ``server_args`` is keyed by flag name without dashes (``tp-size``), like a
    plan's ``server_args``; it holds every resolved argument, defaults included."""

    version: str | None
    max_total_num_tokens: int | None
    model_path: str | None
    launch_command: str | None
    emulated: bool
    server_args: Mapping[str, Any]
    fingerprint: str  # equal for every point measured against the same launch
    # Only benchdeck's emulator names its (emulated) GPU; a real server_info has no GPU name.
    gpu_type: str | None = None
    gpu_count: int | None = None
    provenance: Literal["file"] = "file"

    @property
    def engine(self) -> str:
        return "emulator" if self.emulated else "sglang"

    @property
    def engine_version(self) -> str | None:
        """The SGLang version; the emulator reports the one it emulates as ``emulator-<version>``."""
        if self.version is None:
            return None
        return self.version.removeprefix("emulator-") if self.emulated else self.version


@dataclass(frozen=True)
class RecordFormat:
    """Which client wrote a record, as far as its keys tell (never a version guess)."""

    family: str  # "sglang-35" (≤ 0.5.3), "sglang-49" (≥ 0.5.9), "sglang-rust", "sglang-<n>", "aiperf"
    base_keys: int  # keys without the optional groups below
    extras: tuple[str, ...] = ()  # "details", "goodput", "cache_report"


@dataclass(frozen=True)
class ImportedPoint:
    """One measured point: typed metric columns (bench_record.METRIC_COLUMNS) and conditions."""

    line: int
    metrics: Mapping[str, float | int | None]
    conditions: Mapping[str, Any]
    unknown: tuple[str, ...]
    record_format: RecordFormat
    server: ServerFacts | None = None
    file_facts: Mapping[str, Any] = field(default_factory=dict)  # model, warmup, ... stated by the file

    @property
    def detected(self) -> tuple[str, ...]:
        return tuple(k for k in CONDITION_KEYS if k not in self.unknown and k not in DERIVED_KEYS)


@dataclass(frozen=True)
class RunGroup:
    """Consecutive points that share every run condition; their concurrencies are the sweep."""

    index: int
    points: tuple[ImportedPoint, ...]
    key: Mapping[str, Any]

    @property
    def server(self) -> ServerFacts | None:
        return self.points[0].server

    @property
    def concurrencies(self) -> tuple[int | None, ...]:
        return tuple(p.conditions.get("concurrency") for p in self.points)

    @property
    def unknown(self) -> tuple[str, ...]:
        """Conditions unknown for at least one point of the run."""
        names = {name for p in self.points for name in p.unknown}
        return tuple(k for k in CONDITION_KEYS if k in names)

    @property
    def detected(self) -> tuple[str, ...]:
        unknown = set(self.unknown)
        return tuple(k for k in CONDITION_KEYS if k not in unknown and k not in DERIVED_KEYS)

    @property
    def lines(self) -> tuple[int, int]:
        return self.points[0].line, self.points[-1].line


@dataclass(frozen=True)
class ImportPreview:
    """Everything the import page shows before the user confirms (no raw records)."""

    source_kind: SourceKind
    file_name: str
    sha256: str
    size_bytes: int
    line_count: int
    runs: tuple[RunGroup, ...]
    problems: tuple[LineProblem, ...]

    @property
    def points(self) -> tuple[ImportedPoint, ...]:
        return tuple(p for run in self.runs for p in run.points)

    @property
    def conditions_detected(self) -> tuple[str, ...]:
        """Conditions every point of the file states."""
        unknown = set(self.conditions_unknown)
        return tuple(k for k in CONDITION_KEYS if k not in unknown and k not in DERIVED_KEYS)

    @property
    def conditions_unknown(self) -> tuple[str, ...]:
        names = {name for run in self.runs for name in run.unknown}
        return tuple(k for k in CONDITION_KEYS if k in names)

    @property
    def importable(self) -> bool:
        return bool(self.runs)


@dataclass(frozen=True)
class PointRow:
    """One point ready for the database: what the lead's transaction writes per point."""

    run_index: int  # index into ImportPreview.runs
    line: int
    metrics: Mapping[str, float | int | None]
    conditions: Mapping[str, Any]
    unknown: tuple[str, ...]
    raw: dict[str, Any]  # the record as the file holds it, non-finite floats as strings (json_safe)
