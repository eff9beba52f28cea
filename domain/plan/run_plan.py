"""The run plan: one pydantic model shared by the form, the CLI, the runner and the importer.

Defaults follow the seeds and the field's practice: concurrency 1…32, three scenarios
(short / long prompt / long output), prompts = 10 × concurrency, warmup = 2 × concurrency,
``random_range_ratio`` 1.0 (bench_serving's own 0.0 silently varies ISL/OSL), a fixed
seed, a dataset that needs no network (``random-ids``) and an exact ISL
(``--tokenize-prompt`` with the ``sglang`` backend).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from domain.plan.topology import Topology, layout_problems

FlagValue = bool | int | float | str | list[int] | list[float] | list[str]

MAX_CONCURRENCY = 4096
MAX_TOKENS_PER_SIDE = 1_000_000
MAX_PROMPTS_PER_POINT = 100_000
MAX_POINTS = 2_000

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,79}$"
_GPU_TYPE = r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,31}$"
_FLAG_NAME = re.compile(r"^[a-z0-9][a-z0-9\-]{0,79}$")
_MULTIPLIER = re.compile(r"^([0-9]{1,4}(?:\.[0-9]{1,3})?)x$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuSpec(_Strict):
    type: Annotated[str, Field(pattern=_GPU_TYPE)]
    count: Annotated[int, Field(ge=1, le=64, strict=True)]


class Scenario(_Strict):
    name: Annotated[str, Field(pattern=_NAME)]
    input_len: Annotated[int, Field(ge=1, le=MAX_TOKENS_PER_SIDE, strict=True)]
    output_len: Annotated[int, Field(ge=1, le=MAX_TOKENS_PER_SIDE, strict=True)]


SCENARIO_PRESETS: dict[str, Scenario] = {
    "short": Scenario(name="short", input_len=128, output_len=128),
    "long_prompt": Scenario(name="long_prompt", input_len=4000, output_len=200),
    "long_output": Scenario(name="long_output", input_len=1000, output_len=4000),
}
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 12, 16, 24, 32)
QUICK_CONCURRENCY = (1, 2, 4, 8)


def _count_spec(value: object, field: str) -> int | str:
    """Accept an integer or "<k>x" (k × concurrency); reject everything else by name."""
    if isinstance(value, bool):
        raise ValueError(f"{field} must be an integer or like '10x', not a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{field} must not be negative")
        return value
    if isinstance(value, str) and _MULTIPLIER.match(value):
        return value
    raise ValueError(f"{field} must be an integer or like '10x' (10 × concurrency), got {value!r}")


def resolve_count(spec: int | str, concurrency: int) -> int:
    if isinstance(spec, int):
        return spec
    match = _MULTIPLIER.match(spec)
    if match is None:  # validated on the way in; reaching here is a bug
        raise ValueError(f"not a count: {spec!r}")
    return math.ceil(float(match.group(1)) * concurrency)


class BenchmarkPlan(_Strict):
    scenarios: Annotated[list[Scenario], Field(min_length=1, max_length=20)] = Field(
        default_factory=lambda: list(SCENARIO_PRESETS.values())
    )
    concurrency: Annotated[list[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY, strict=True)]], Field(
        min_length=1, max_length=64
    )] = Field(default_factory=lambda: list(DEFAULT_CONCURRENCY))
    num_prompts: int | str = "10x"
    warmup: int | str = "2x"
    repeats: Annotated[int, Field(ge=1, le=20, strict=True)] = 1
    dataset: Literal["random-ids", "random", "sharegpt"] = "random-ids"
    dataset_path: str | None = None
    seed: Annotated[int, Field(ge=0, le=2**31 - 1, strict=True)] = 42
    random_range_ratio: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] = 1.0
    request_rate: Annotated[float, Field(gt=0)] | Literal["inf"] = "inf"
    backend: Literal["sglang", "sglang-oai", "sglang-oai-chat"] = "sglang"
    tokenize_prompt: bool = True
    apply_chat_template: bool = False
    thinking_mode: Literal["off", "on", "n/a"] = "n/a"
    ignore_eos: bool = True
    flush_cache: bool = True

    @field_validator("num_prompts", "warmup", mode="before")
    @classmethod
    def _counts(cls, value: object, info: Any) -> int | str:
        return _count_spec(value, info.field_name)

    @field_validator("concurrency")
    @classmethod
    def _distinct_concurrency(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError("concurrency values must be distinct")
        return sorted(value)

    @field_validator("scenarios")
    @classmethod
    def _distinct_scenarios(cls, value: list[Scenario]) -> list[Scenario]:
        names = [s.name for s in value]
        if len(set(names)) != len(names):
            raise ValueError("scenario names must be distinct")
        return value

    @field_validator("request_rate", mode="before")
    @classmethod
    def _finite_rate(cls, value: object) -> object:
        if isinstance(value, float) and math.isinf(value):
            return "inf"
        if isinstance(value, float) and math.isnan(value):
            raise ValueError("request_rate must be a number or 'inf', not NaN")
        return value

    @model_validator(mode="after")
    def _sizes(self) -> BenchmarkPlan:
        if self.tokenize_prompt and self.backend != "sglang":
            raise ValueError("tokenize_prompt (exact ISL) works only with the 'sglang' backend")
        if self.dataset != "random-ids" and not self.dataset_path:
            raise ValueError(f"dataset {self.dataset!r} needs a local dataset_path (no network downloads)")
        points = len(self.scenarios) * len(self.concurrency) * self.repeats
        if points > MAX_POINTS:
            raise ValueError(f"{points} points is more than the {MAX_POINTS} a run may have")
        for c in self.concurrency:
            prompts = resolve_count(self.num_prompts, c)
            if prompts < 1:
                raise ValueError("num_prompts must give at least 1 prompt per point")
            if prompts > MAX_PROMPTS_PER_POINT:
                raise ValueError(f"num_prompts gives {prompts} prompts at concurrency {c}; "
                                 f"the limit is {MAX_PROMPTS_PER_POINT}")
        return self


@dataclass(frozen=True)
class Point:
    """One measured point of a sweep, with every condition the benchmark will use."""

    scenario: Scenario
    concurrency: int
    repeat_idx: int
    num_prompts: int
    warmup: int

    @property
    def key(self) -> str:
        return f"{self.scenario.name}/c{self.concurrency}/r{self.repeat_idx}"


class RunPlan(_Strict):
    name: Annotated[str, Field(pattern=_NAME)]
    engine: Literal["sglang", "emulator"]
    sglang_version: Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+)?$")] | None = None
    model: Annotated[str, Field(min_length=1, max_length=512)]
    gpu: GpuSpec
    topology: Topology = Field(default_factory=Topology)
    server_args: dict[str, FlagValue] = Field(default_factory=dict)
    benchmark: BenchmarkPlan = Field(default_factory=BenchmarkPlan)
    tags: Annotated[list[Annotated[str, Field(pattern=_NAME)]], Field(max_length=20)] = Field(default_factory=list)
    priority: Annotated[int, Field(ge=-100, le=100, strict=True)] = 0

    @field_validator("topology", mode="before")
    @classmethod
    def _topology_by_name(cls, value: object) -> object:
        # Plans written before topologies existed say just "aggregated".
        return {"kind": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _topology_fits(self) -> RunPlan:
        for _role, group in self.topology.groups():
            self._flag_names(group.server_args)  # the same name and value rules as plan-wide flags
        problems = layout_problems(self.topology, self.server_args, self.gpu.count)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @field_validator("server_args")
    @classmethod
    def _flag_names(cls, value: dict[str, FlagValue]) -> dict[str, FlagValue]:
        for name, flag_value in value.items():
            if not _FLAG_NAME.match(name):
                raise ValueError(f"{name!r} is not a flag name (write it without leading dashes)")
            if isinstance(flag_value, float) and not math.isfinite(flag_value):
                raise ValueError(f"{name}: value must be a finite number")
        return value

    def points(self) -> list[Point]:
        bench = self.benchmark
        return [
            Point(
                scenario=scenario,
                concurrency=c,
                repeat_idx=r,
                num_prompts=resolve_count(bench.num_prompts, c),
                warmup=resolve_count(bench.warmup, c),
            )
            for scenario in bench.scenarios
            for c in bench.concurrency
            for r in range(bench.repeats)
        ]

    def total_requests(self) -> int:
        return sum(p.num_prompts + p.warmup for p in self.points())

    def configuration_snapshot(self) -> dict[str, Any]:
        """What identifies the engine set-up (not the benchmark): hashed into a configuration id."""
        return {
            "engine": self.engine,
            "engine_version": self.sglang_version,
            "model": self.model,
            "gpu_type": self.gpu.type,
            "gpu_count": self.gpu.count,
            "topology": self.topology.snapshot(),
            "server_args": dict(sorted(self.server_args.items())),
        }


def configuration_id(snapshot: dict[str, Any]) -> str:
    canonical = json.dumps(snapshot, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def quick_benchmark() -> BenchmarkPlan:
    """The README demo: 128/128 at concurrency 1, 2, 4, 8 — a few minutes on the emulator."""
    return BenchmarkPlan(scenarios=[SCENARIO_PRESETS["short"]], concurrency=list(QUICK_CONCURRENCY))


def point_conditions(plan: RunPlan, point: Point) -> dict[str, Any]:
    """Every value the benchmark used, stored with each point (comparisons depend on it)."""
    bench = plan.benchmark
    return {
        "scenario": point.scenario.name,
        "input_len": point.scenario.input_len,
        "output_len": point.scenario.output_len,
        "concurrency": point.concurrency,
        "repeat_idx": point.repeat_idx,
        "num_prompts": point.num_prompts,
        "warmup": point.warmup,
        "random_range_ratio": bench.random_range_ratio,
        "dataset": bench.dataset,
        "dataset_path": bench.dataset_path,
        "seed": bench.seed,
        "request_rate": bench.request_rate,
        "backend": bench.backend,
        "tokenize_prompt": bench.tokenize_prompt,
        "apply_chat_template": bench.apply_chat_template,
        "thinking_mode": bench.thinking_mode,
        "ignore_eos": bench.ignore_eos,
        "flush_cache": bench.flush_cache,
    }
