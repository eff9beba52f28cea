"""What the user states about an imported run, and how it meets what the file says.

Every field is optional: a field left out stays **unknown** (the checklist shows it as its
own state) and is never filled with a default.  A pasted server command is parsed with
:func:`domain.flags.argv.parse_command_line` and checked with
:func:`domain.flags.validate.validate_server_args` against the stated SGLang version.

The check describes a launch that already happened elsewhere, so the launch *policy*
(runner-owned flags, forbidden flags, loopback host, model directories) does not apply:
only the schema and value findings are kept.  Flag errors (a flag the stated version
does not have, a malformed value) make the statement invalid: either the version or the
command is wrong, and guessing which would be worse than asking.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from domain.flags.argv import CommandLineError, parse_command_line
from domain.flags.issues import BAD_MODEL_REF, FORBIDDEN, RUNNER_OWNED, FlagReport
from domain.flags.policy import load_policy
from domain.flags.schema import SchemaError, known_versions, load_schema, newest_version
from domain.flags.validate import validate_server_args
from domain.importer.types import ImportPreview, RunGroup

Engine = Literal["sglang", "emulator", "vllm", "trt-llm", "dynamo", "other"]
SGLANG_ENGINES = ("sglang", "emulator")
_VERSION = r"^[0-9A-Za-z][0-9A-Za-z.+\-]{0,39}$"
_SGLANG_VERSION = r"^[0-9]+\.[0-9]+\.[0-9]+((rc|\.post)[0-9]+)?$"
_GPU_TYPE = r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,31}$"
_DATASET = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,79}$"
_POLICY_CODES = (RUNNER_OWNED, FORBIDDEN, BAD_MODEL_REF)


@dataclass(frozen=True)
class FlagCheck:
    """A pasted command read as ``server_args``; ``report`` is None when no schema could check it."""

    server_args: dict[str, object]
    report: FlagReport | None
    checked_against: str | None


def _descriptive(report: FlagReport) -> FlagReport:
    """Only schema and value findings: the launch policy governs benchdeck's launches, not history."""
    kept = tuple(i for i in report.issues if i.code not in _POLICY_CODES)
    return dataclasses.replace(report, issues=kept)


def check_server_command(text: str, sglang_version: str | None) -> FlagCheck:
    """Parse a pasted launch command and check it against ``sglang_version``'s shipped schema.

    Without a version, or for one with no shipped schema, the command is only parsed (with
    the newest schema, for how many values each flag takes) and ``report`` is None.
    Raises CommandLineError (with ``.text(lang)``) for text that is not one launch."""
    version = sglang_version if sglang_version in known_versions() else None
    server_args = parse_command_line(text, version or newest_version())
    if version is None:
        return FlagCheck(server_args, None, None)
    policy = dataclasses.replace(load_policy(), model_ref_flags=frozenset(), path_flags=frozenset())
    report = validate_server_args(server_args, version, model_dirs=(), policy=policy, schema=load_schema(version))
    return FlagCheck(server_args, _descriptive(report), version)


class ImportConditions(BaseModel):
    """What the user states about an imported run; None everywhere means "unknown"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    gpu_type: Annotated[str, Field(pattern=_GPU_TYPE)] | None = None
    gpu_count: Annotated[int, Field(ge=1, le=512, strict=True)] | None = None
    engine: Engine | None = None
    engine_version: Annotated[str, Field(pattern=_VERSION)] | None = None
    server_command: Annotated[str, Field(min_length=1, max_length=20_000)] | None = None
    dataset: Annotated[str, Field(pattern=_DATASET)] | None = None
    warmup: Annotated[int, Field(ge=0, le=100_000, strict=True)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ImportConditions:
        if self.engine in SGLANG_ENGINES and self.engine_version is not None:
            if not re.match(_SGLANG_VERSION, self.engine_version):
                raise ValueError(f"{self.engine_version!r} is not an SGLang release version (like 0.5.23)")
        if self.server_command is not None:
            self.flag_check()  # raises on text that is not a launch or on flag errors
        return self

    @property
    def sglang_version(self) -> str | None:
        return self.engine_version if self.engine in SGLANG_ENGINES else None

    def flag_check(self) -> FlagCheck | None:
        """The pasted command as ``server_args`` with its findings; ValueError on errors."""
        if self.server_command is None:
            return None
        if self.engine is not None and self.engine not in SGLANG_ENGINES:
            raise ValueError(f"server flags can only be read for SGLang, not for engine {self.engine!r}")
        try:
            check = check_server_command(self.server_command, self.sglang_version)
        except CommandLineError as exc:
            raise ValueError(exc.text("en")) from exc
        except SchemaError as exc:  # no shipped schema at all: an installation problem
            raise ValueError(str(exc)) from exc
        if check.report is not None and check.report.errors:
            raise ValueError("; ".join(issue.message("en") for issue in check.report.errors))
        return check

    def server_args(self) -> dict[str, object] | None:
        check = self.flag_check()
        return check.server_args if check is not None else None


# -- the file's facts beside the user's statement --------------------------------------------

Provenance = Literal["file", "user", "unknown"]


@dataclass(frozen=True)
class StatedValue:
    value: Any
    provenance: Provenance


@dataclass(frozen=True)
class RunStatement:
    """Each run-level fact with where it came from, and where file and user disagree."""

    values: Mapping[str, StatedValue]
    conflicts: Mapping[str, tuple[Any, Any]]  # name → (from the file, from the user)

    @property
    def unknown(self) -> tuple[str, ...]:
        return tuple(name for name, stated in self.values.items() if stated.provenance == "unknown")


_STACK_FACTS = ("gpu_type", "gpu_count", "engine", "engine_version", "server_args")


def file_run_facts(run: RunGroup) -> dict[str, Any]:
    """Run-level facts the file itself states (server_info, the AIPerf config)."""
    first = run.points[0]
    server = run.server
    facts: dict[str, Any] = {
        "model": first.file_facts.get("model"),
        "warmup": first.conditions.get("warmup") if "warmup" not in first.unknown else None,
        "dataset": first.conditions.get("dataset") if "dataset" not in first.unknown else None,
    }
    # A report that describes its stack (the llm-d report) states these itself.
    facts.update({k: first.file_facts[k] for k in _STACK_FACTS if first.file_facts.get(k) is not None})
    if server is not None:
        facts.update(model=facts["model"] or server.model_path, engine=server.engine,
                     engine_version=server.engine_version, server_args=dict(server.server_args),
                     max_total_num_tokens=server.max_total_num_tokens, gpu_type=server.gpu_type,
                     gpu_count=server.gpu_count)
    return {k: v for k, v in facts.items() if v is not None}


def _primary_names(server_args: Mapping[str, object], version: str | None) -> dict[str, object]:
    """Aliases (``--tensor-parallel-size``) under the flag's main name, as server_info's args are."""
    schema = load_schema(version if version in known_versions() else newest_version())
    named: dict[str, object] = {}
    for flag, value in server_args.items():
        spec = schema.lookup(flag)
        named[spec.primary if spec is not None else flag] = value
    return named


def _user_values(stated: ImportConditions) -> dict[str, Any]:
    values = stated.model_dump(exclude={"server_command"}, exclude_none=True)
    server_args = stated.server_args()
    if server_args is not None:
        values["server_args"] = _primary_names(server_args, stated.sglang_version)
    return values


STATEMENT_KEYS = ("model", "gpu_type", "gpu_count", "engine", "engine_version", "server_args", "dataset", "warmup",
                  "max_total_num_tokens")


def run_statement(run: RunGroup, stated: ImportConditions) -> RunStatement:
    """File facts win and are marked "file"; the user fills the rest; disagreements are listed.

    Server args from the file are the *resolved* values (every default included), so a
    pasted command is compared flag by flag, only on the flags it sets."""
    from_file, from_user = file_run_facts(run), _user_values(stated)
    values: dict[str, StatedValue] = {}
    conflicts: dict[str, tuple[Any, Any]] = {}
    for name in STATEMENT_KEYS:
        if name in from_file:
            values[name] = StatedValue(from_file[name], "file")
            if name in from_user and _disagree(name, from_file[name], from_user[name]):
                conflicts[name] = (from_file[name], from_user[name])
        elif name in from_user:
            values[name] = StatedValue(from_user[name], "user")
        else:
            values[name] = StatedValue(None, "unknown")
    return RunStatement(values, conflicts)


def _disagree(name: str, file_value: Any, user_value: Any) -> bool:
    if name == "server_args":
        return any(file_value.get(flag, value) != value for flag, value in user_value.items())
    return bool(file_value != user_value)


def preview_statements(preview: ImportPreview, stated: ImportConditions) -> list[RunStatement]:
    return [run_statement(run, stated) for run in preview.runs]
