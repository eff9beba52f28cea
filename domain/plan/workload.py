"""Workloads beyond random prompts: shared prefixes, local text, multi-turn chats, traces.

A plan's ``benchmark.workload`` names one of four kinds; each maps onto the real
``bench_serving`` 0.5.23 client's own machinery where it has it:

* ``shared-prefix`` → the client's ``generated-shared-prefix`` dataset (``--gsp-*``):
  ``groups`` system prompts, ``prompts_per_group`` questions after each.
* ``text`` → ShareGPT-format JSON: the client's ``sharegpt`` dataset (``--dataset-path``).
  A plain JSONL of prompts (``{"prompt": str, "output_len"?: int}`` per line) the client
  cannot read: benchdeck's driver builds those rows itself (``format: jsonl``).
* ``multi-turn`` → the client's ``agentic-trace`` dataset: one JSON file of conversations
  (``{"conversations": [[{"messages": [...]}, ...], ...]}``), replayed turn by turn with
  the server's real answers in the history, through the chat backend.
* ``trace`` → benchdeck adds this: the client's ``mooncake`` replay builds prompts from
  hash ids and ignores a trace's input lengths, and its ``get_request`` can replay row
  timestamps but ``benchmark()`` never asks it to.  benchdeck's driver builds one row per
  trace line (``{"timestamp": ms, "input_len": int, "output_len": int, "group"?: …}``) and
  has the client's own ``get_request`` replay their timestamps (× ``time_scale``).

Each workload is a condition of the comparability key (:func:`workload_label`, with the
file's hash added by the runner).  The files are checked by
:mod:`domain.plan.workload_files` (``runner check``), with the line of each problem.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_LEN = 1_000_000
_Len = Annotated[int, Field(ge=1, le=MAX_LEN, strict=True)]
_Path = Annotated[str, Field(min_length=1, max_length=4096)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SharedPrefix(_Strict):
    kind: Literal["shared-prefix"]
    groups: Annotated[int, Field(ge=1, le=4096, strict=True)]
    prompts_per_group: Annotated[int, Field(ge=1, le=10_000, strict=True)]
    system_prompt_len: _Len
    question_len: _Len
    output_len: _Len

    @property
    def scenario_name(self) -> str:
        return f"gsp-{self.groups}x{self.prompts_per_group}-s{self.system_prompt_len}-q{self.question_len}"

    def client_argv(self) -> list[str]:
        return ["--dataset-name", "generated-shared-prefix", "--gsp-num-groups", str(self.groups),
                "--gsp-prompts-per-group", str(self.prompts_per_group),
                "--gsp-system-prompt-len", str(self.system_prompt_len), "--gsp-question-len", str(self.question_len),
                "--gsp-output-len", str(self.output_len), "--gsp-range-ratio", "1"]


class TextFile(_Strict):
    kind: Literal["text"]
    path: _Path
    format: Literal["sharegpt", "jsonl"]
    # sharegpt: every answer this long (--sharegpt-output-len; None: the file's answer's length);
    # jsonl: the length of a line that names none (None: such a line is refused).
    output_len: _Len | None = None

    def client_argv(self) -> list[str]:
        if self.format == "jsonl":  # the driver builds these rows (module docstring)
            return ["--dataset-name", "custom", "--dataset-path", self.path]
        argv = ["--dataset-name", "sharegpt", "--dataset-path", self.path]
        return argv + (["--sharegpt-output-len", str(self.output_len)] if self.output_len else [])


class MultiTurn(_Strict):
    kind: Literal["multi-turn"]
    path: _Path
    output_len: _Len = 64  # every answer (--sharegpt-output-len)
    max_turns: Annotated[int, Field(ge=1, le=1000, strict=True)] | None = None

    def client_argv(self) -> list[str]:
        argv = ["--dataset-name", "agentic-trace", "--dataset-path", self.path,
                "--sharegpt-output-len", str(self.output_len)]
        return argv + (["--agentic-max-turns", str(self.max_turns)] if self.max_turns else [])


class Trace(_Strict):
    kind: Literal["trace"]
    path: _Path
    time_scale: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)] = 1.0  # 2 = half as fast

    def client_argv(self) -> list[str]:
        # A placeholder the client's parser accepts; the driver replaces the rows (module docstring).
        return ["--dataset-name", "custom", "--dataset-path", self.path]


Workload = Annotated[SharedPrefix | TextFile | MultiTurn | Trace, Field(discriminator="kind")]
FILE_KINDS = frozenset({"text", "multi-turn", "trace"})
# The kinds benchdeck's driver loads itself (runner/sglang_side/bench_driver.py).
DRIVER_LOADED = frozenset({"trace", "jsonl"})


def workload_path(workload: Workload) -> str | None:
    return None if isinstance(workload, SharedPrefix) else workload.path


def driver_dataset(workload: Workload) -> dict[str, object] | None:
    """What the warm driver must load itself instead of the client's dataset (None: the client's own)."""
    if isinstance(workload, Trace):
        return {"kind": "trace", "path": workload.path, "time_scale": workload.time_scale}
    if isinstance(workload, TextFile) and workload.format == "jsonl":
        return {"kind": "jsonl", "path": workload.path, "output_len": workload.output_len}
    return None


def dataset_name(workload: Workload) -> str:
    """The dataset a point records: the client's name, or benchdeck's where the driver loads it."""
    if isinstance(workload, SharedPrefix):
        return "generated-shared-prefix"
    if isinstance(workload, MultiTurn):
        return "agentic-trace"
    if isinstance(workload, Trace):
        return "trace (benchdeck)"
    return "sharegpt" if workload.format == "sharegpt" else "jsonl prompts (benchdeck)"


def workload_label(workload: Workload, sha256: str | None = None) -> str:
    """The workload as one comparable text: its kind, every parameter, and the file's hash."""
    fields = workload.model_dump(exclude={"kind", "path"}, exclude_none=True)
    parts = [workload.kind, *(f"{name}={value}" for name, value in sorted(fields.items()))]
    if sha256 is not None:
        parts.append(f"sha256={sha256[:16]}")
    return " ".join(parts)


def nominal_lengths(workload: Workload) -> tuple[str, int, int, bool]:
    """The sweep's one scenario for a workload: (name, input_len, output_len, known).  Only
    a shared-prefix workload knows its lengths before it runs; a file's are whatever its
    prompts are (``known`` False: the point records them as unknown, the file's hash is
    its identity), and the 1 and the output length stand in for the plan's memory checks."""
    if isinstance(workload, SharedPrefix):
        return (workload.scenario_name, workload.system_prompt_len + workload.question_len,
                workload.output_len, True)
    output_len = getattr(workload, "output_len", None) or 1
    return workload.kind, 1, output_len, False


def workload_prompts(workload: Workload) -> int | None:
    """Requests per point a workload fixes itself (None: the plan's num_prompts)."""
    return workload.groups * workload.prompts_per_group if isinstance(workload, SharedPrefix) else None
