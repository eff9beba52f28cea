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

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from domain.engines import EXTERNAL, adapter_for, families, split_label
from domain.plan.arrivals import RATE_SEPARATOR, rate_scenario_name, rate_sweep_problem
from domain.plan.naming import clean_name, name_problem
from domain.plan.quality import PinnedAcceptance, QualityPlan
from domain.plan.thinking_mode import thinking_problem
from domain.plan.topology import Topology, layout_problems
from domain.plan.workload import (
    FILE_KINDS,
    Workload,
    dataset_name,
    nominal_lengths,
    workload_label,
    workload_prompts,
)

FlagValue = bool | int | float | str | list[int] | list[float] | list[str]

MAX_CONCURRENCY = 4096
MAX_TOKENS_PER_SIDE = 1_000_000
MAX_PROMPTS_PER_POINT = 100_000
MAX_POINTS = 2_000

# Scenario names and tags stay ASCII identifiers (a scenario's name is part of each point's
# key and record file name); a run's own name is any text (domain/plan/naming.py).
_ASCII_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,79}$"
_GPU_TYPE = r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,31}$"
_FLAG_NAME = re.compile(r"^[a-z0-9][a-z0-9\-]{0,79}$")
_MULTIPLIER = re.compile(r"^([0-9]{1,4}(?:\.[0-9]{1,3})?)x$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def plan_rule(kind: str, message: str, **context: Any) -> PydanticCustomError:
    """A refusal with its own error type: ``kind`` names the ``plan.problem.<kind>`` sentence
    (ja/en, domain/core/i18n/naming.yaml) that domain/plan/plan_io.py shows for it, and
    ``message`` (formatted with ``context``) is the English text the CLI and logs keep."""
    return PydanticCustomError(kind, message, context)


class GpuSpec(_Strict):
    type: Annotated[str, Field(pattern=_GPU_TYPE)]
    count: Annotated[int, Field(ge=1, le=64, strict=True)]


class Scenario(_Strict):
    name: Annotated[str, Field(pattern=_ASCII_NAME)]
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
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise plan_rule("count_negative", "{field} must not be negative", field=field)
        return value
    if isinstance(value, str) and _MULTIPLIER.match(value):
        return value
    raise plan_rule("count_format", "{field} must be an integer or like '10x' (10 × concurrency), got {value}",
                    field=field, value=repr(value))


def _request_rate(value: object) -> float | str:
    """A positive number of requests per second, or "inf" (all at once); a float infinity
    (YAML's ``.inf``) reads as "inf"."""
    if value == "inf" or (isinstance(value, float) and value == math.inf):
        return "inf"
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    raise plan_rule("request_rate", "request_rate must be a positive number or 'inf', got {value}",
                    value=repr(value))


def resolve_count(spec: int | str, concurrency: int) -> int:
    if isinstance(spec, int):
        return spec
    match = _MULTIPLIER.match(spec)
    if match is None:  # validated on the way in; reaching here is a bug
        raise ValueError(f"not a count: {spec!r}")
    return math.ceil(float(match.group(1)) * concurrency)


class SlaStop(_Strict):
    """Stop a sweep once a measured point breaks a p99 latency limit (a tuner's trial,
    issue 17): the points left are skipped and recorded as such (runner/attempt.py),
    since a configuration that fails its SLA at one load rarely passes it at a higher one."""

    ttft_p99_ms: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    tpot_p99_ms: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    # The concurrencies the SLA is about (None: every one); a point at another never stops the sweep.
    concurrencies: list[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY, strict=True)]] | None = None

    @model_validator(mode="after")
    def _some_limit(self) -> SlaStop:
        if self.ttft_p99_ms is None and self.tpot_p99_ms is None:
            raise plan_rule("sla_stop_empty", "stop_on_sla needs ttft_p99_ms or tpot_p99_ms")
        return self

    def violations(self, concurrency: int, ttft_p99_ms: float | None, tpot_p99_ms: float | None) -> list[str]:
        """The limits one point breaks, as English sentences (empty: within the SLA).  A
        metric the point lacks breaks nothing: the sweep is not stopped on missing data."""
        if self.concurrencies is not None and concurrency not in self.concurrencies:
            return []
        broken = []
        for name, limit, measured in (("p99 TTFT", self.ttft_p99_ms, ttft_p99_ms),
                                      ("p99 TPOT", self.tpot_p99_ms, tpot_p99_ms)):
            if limit is not None and measured is not None and measured > limit:
                broken.append(f"{name} {measured:.1f} ms > {limit:g} ms")
        return broken


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
    # Repeats on one launch measure client-side noise only; a fresh launch per repeat also
    # measures launch-to-launch variance (graph capture, memory layout, expert placement).
    fresh_launch_per_repeat: bool = False
    dataset: Literal["random-ids", "random", "sharegpt"] = "random-ids"
    dataset_path: str | None = None
    seed: Annotated[int, Field(ge=0, le=2**31 - 1, strict=True)] = 42
    random_range_ratio: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] = 1.0
    request_rate: float | Literal["inf"] = "inf"  # checked by _rate below
    # A sweep over open-loop Poisson rates (req/s) under one concurrency cap: a curve of its
    # own, never lined up with a concurrency sweep (domain/plan/arrivals.py).
    request_rates: Annotated[list[Annotated[float, Field(gt=0, le=100_000, allow_inf_nan=False)]],
                             Field(min_length=1, max_length=64)] | None = None
    # "vllm": the same client's OpenAI completions backend, for vLLM plans (RunPlan sets it)
    backend: Literal["sglang", "sglang-oai", "sglang-oai-chat", "vllm"] = "sglang"
    tokenize_prompt: bool = True
    apply_chat_template: bool = False
    thinking_mode: Literal["off", "on", "n/a"] = "n/a"
    ignore_eos: bool = True
    flush_cache: bool = True
    stop_on_sla: SlaStop | None = None  # None: every point is measured, whatever its latency
    # Shared prefixes, local text, multi-turn, traces (domain/plan/workload.py); None: scenarios of random prompts.
    workload: Workload | None = None

    @model_validator(mode="before")
    @classmethod
    def _workload_client_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("workload"), dict):
            return data
        return {**workload_client_defaults(data["workload"].get("kind")), **data}

    @model_validator(mode="after")
    def _rates_fit(self) -> BenchmarkPlan:
        refusal = rate_sweep_problem(self.request_rates, self.request_rate, self.concurrency)
        if refusal is not None:
            raise plan_rule(*refusal)
        return self

    @model_validator(mode="after")
    def _workload_fits(self) -> BenchmarkPlan:
        if self.workload is not None:
            refusal = workload_problem(self)
            if refusal is not None:
                raise plan_rule(*refusal)
        return self

    def sweep_scenarios(self) -> list[Scenario]:
        """The scenarios a sweep runs: the plan's, or the workload's one."""
        if self.workload is None:
            return self.scenarios
        name, input_len, output_len, _known = nominal_lengths(self.workload)
        return [Scenario(name=name, input_len=input_len, output_len=output_len)]

    @field_validator("num_prompts", "warmup", mode="before")
    @classmethod
    def _counts(cls, value: object, info: Any) -> int | str:
        return _count_spec(value, info.field_name)

    @field_validator("concurrency")
    @classmethod
    def _distinct_concurrency(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise plan_rule("concurrency_distinct", "concurrency values must be distinct")
        return sorted(value)

    @field_validator("scenarios")
    @classmethod
    def _distinct_scenarios(cls, value: list[Scenario]) -> list[Scenario]:
        names = [s.name for s in value]
        if len(set(names)) != len(names):
            raise plan_rule("scenario_distinct", "scenario names must be distinct")
        return value

    @field_validator("request_rate", mode="before")
    @classmethod
    def _rate(cls, value: object) -> float | str:
        return _request_rate(value)

    @model_validator(mode="after")
    def _requests(self) -> BenchmarkPlan:
        if self.tokenize_prompt and self.backend != "sglang":
            raise plan_rule("tokenize_needs_sglang",
                            "tokenize_prompt (exact ISL) works only with the 'sglang' backend")
        if self.backend == "sglang-oai-chat" and not self.apply_chat_template:
            raise plan_rule("chat_template_implied", "the 'sglang-oai-chat' backend sends chat requests, which "
                            "the server always renders with the model's chat template: set apply_chat_template")
        refusal = thinking_problem(self.backend, self.apply_chat_template, self.thinking_mode)
        if refusal is not None:
            raise plan_rule(*refusal)
        if self.dataset != "random-ids" and not self.dataset_path:
            raise plan_rule("dataset_needs_path", "dataset {dataset} needs a local dataset_path (no network "
                            "downloads)", dataset=self.dataset)
        return self

    def prompts_at(self, concurrency: int) -> int:
        fixed = workload_prompts(self.workload) if self.workload is not None else None
        return fixed if fixed is not None else resolve_count(self.num_prompts, concurrency)

    @model_validator(mode="after")
    def _sizes(self) -> BenchmarkPlan:
        points = len(self.sweep_scenarios()) * len(self.concurrency) * len(self.request_rates or [0]) * self.repeats
        if points > MAX_POINTS:
            raise plan_rule("too_many_points", "{points} points is more than the {limit} a run may have",
                            points=points, limit=MAX_POINTS)
        for c in self.concurrency:
            prompts = self.prompts_at(c)
            if prompts < 1:
                raise plan_rule("prompts_too_few", "num_prompts must give at least 1 prompt per point")
            if prompts > MAX_PROMPTS_PER_POINT:
                raise plan_rule("prompts_too_many", "num_prompts gives {prompts} prompts at concurrency "
                                "{concurrency}; the limit is {limit}", prompts=prompts, concurrency=c,
                                limit=MAX_PROMPTS_PER_POINT)
        return self


_NAME_MESSAGES = {
    "name_empty": "a run needs a name (it is empty or only spaces)",
    "name_too_long": "the name is {length} characters long; the limit is {limit}",
    "name_control": "the name contains a control character ({code})",
}


@dataclass(frozen=True)
class Point:
    """One measured point of a sweep, with every condition the benchmark will use."""

    scenario: Scenario
    concurrency: int
    repeat_idx: int
    num_prompts: int
    warmup: int
    request_rate: float | None = None  # a rate sweep's point (None: the plan's request_rate)

    @property
    def key(self) -> str:
        return f"{self.scenario.name}/c{self.concurrency}/r{self.repeat_idx}"


# The engine a plan names: a registered family (domain/engines: sglang, vllm), real
# (launched with the interpreter an administrator configured) or ``emulated: true``
# (benchdeck's emulator speaking that engine's API); or "external": a server benchdeck did
# not start, which it only sends requests to.  Plans written before the split name the
# emulated families in one word (``emulator``, ``vllm-emulator``): read as family + emulated.
Engine = str
_VERSION = r"^[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+)?$"
# What an external server says it runs: declared by the plan, never checked by benchdeck.
DeclaredEngine = Literal["trt-llm", "dynamo", "vllm", "sglang", "other"]
_DECLARED_VERSION = r"^[A-Za-z0-9][A-Za-z0-9._+\-]{0,39}$"
_ENDPOINT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"  # domain/core/settings.py ENDPOINT_NAME
# The client an external server gets: bench_serving's OpenAI completions backend, no
# --tokenize-prompt (token ids go only to SGLang's backend) and no --flush-cache (the cache
# endpoint it posts to is SGLang's or vLLM's development mode; another server may lack it).
EXTERNAL_CLIENT = {"backend": "vllm", "tokenize_prompt": False, "flush_cache": False}


class ExternalTarget(_Strict):
    """An ``engine: external`` plan's server: an endpoint an administrator listed in
    BENCHDECK_EXTERNAL_ENDPOINTS, by name, and what the plan declares it runs."""

    endpoint: Annotated[str, Field(pattern=_ENDPOINT_NAME)]
    engine: DeclaredEngine
    version: Annotated[str, Field(pattern=_DECLARED_VERSION)] | None = None

    def declared(self) -> dict[str, Any]:
        """As points and attempts record it: ``declared: true`` marks these facts as the plan's word."""
        return {"declared": True, "endpoint": self.endpoint, "engine": self.engine, "version": self.version}


class RunPlan(_Strict):
    name: str  # any text: see domain/plan/naming.py and _name below
    engine: Engine
    emulated: Annotated[bool, Field(strict=True)] = False
    sglang_version: Annotated[str, Field(pattern=_VERSION)] | None = None
    vllm_version: Annotated[str, Field(pattern=_VERSION)] | None = None  # engine vllm / vllm-emulator only
    model: Annotated[str, Field(min_length=1, max_length=512)]
    gpu: GpuSpec
    topology: Topology = Field(default_factory=Topology)
    server_args: dict[str, FlagValue] = Field(default_factory=dict)
    benchmark: BenchmarkPlan = Field(default_factory=BenchmarkPlan)
    # engine: external only (model, gpu and topology then are declared, not launched)
    external: ExternalTarget | None = None
    quality: QualityPlan | None = None  # the quality probe after the sweep (domain/plan/quality.py)
    pinned_acceptance: PinnedAcceptance | None = None  # SGLang's simulated speculative acceptance
    tags: Annotated[list[Annotated[str, Field(pattern=_ASCII_NAME)]], Field(max_length=20)] = Field(
        default_factory=list)
    priority: Annotated[int, Field(ge=-100, le=100, strict=True)] = 0

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        name = clean_name(value)
        problem = name_problem(name)
        if problem is not None:
            kind, context = problem
            raise plan_rule(kind, _NAME_MESSAGES[kind], **context)
        return name

    @model_validator(mode="before")
    @classmethod
    def _engine_in_one_word(cls, data: Any) -> Any:
        """``engine: emulator`` (a plan from before the split) is ``engine: sglang`` +
        ``emulated: true``; saying ``emulated: false`` beside it is a contradiction."""
        if not isinstance(data, dict) or not isinstance(data.get("engine"), str):
            return data
        split = split_label(data["engine"])
        if split is None or not split[1]:
            return data
        if data.get("emulated", True) is not True:
            raise plan_rule("engine_emulated_conflict", "engine {engine} is an emulated engine; "
                            "emulated: false contradicts it", engine=data["engine"])
        return {**data, "engine": split[0], "emulated": True}

    @field_validator("engine")
    @classmethod
    def _engine_registered(cls, value: str) -> str:
        if value != EXTERNAL and value not in families():
            raise plan_rule("engine_unknown", "engine must be one of {engines} (with emulated: true for "
                            "benchdeck's emulator), not {engine}", engines=", ".join([*families(), EXTERNAL]),
                            engine=repr(value))
        return value

    @model_validator(mode="before")
    @classmethod
    def _vllm_client_defaults(cls, data: Any) -> Any:
        """A vLLM plan's client defaults: bench_serving's ``vllm`` backend (vLLM serves the
        OpenAI API, not SGLang's /generate) and so no ``--tokenize-prompt`` (the client sends
        token ids only to SGLang's backend).  What the plan says itself is kept and checked
        in :meth:`_engine_speaks_the_backend`."""
        defaults = _client_defaults(data)
        bench = data.get("benchmark") if isinstance(data, dict) else None
        if defaults is None or not isinstance(bench, dict | None):
            return data
        return {**data, "benchmark": {**defaults, **(bench or {})}}

    @model_validator(mode="after")
    def _engine_speaks_the_backend(self) -> RunPlan:
        backend = self.benchmark.backend
        if self.is_external and backend != "vllm":
            raise plan_rule("external_backend", "an external server gets bench_serving's OpenAI completions "
                            "client (backend 'vllm', /v1/completions), not {backend}", backend=backend)
        speaks = "vllm" if self.is_external else adapter_for(self.engine).bench_backend
        if (speaks == "vllm") != (backend == "vllm"):
            raise plan_rule("backend_engine_mismatch", "the {backend} client backend does not speak to engine "
                            "{engine}'s server (vLLM plans use 'vllm', SGLang plans an SGLang backend)",
                            backend=backend, engine=self.engine)
        return self

    @model_validator(mode="after")
    def _external_fits(self) -> RunPlan:
        """An external plan names a listed endpoint and declares what it runs; benchdeck sets
        no flag there, launches nothing (so no fresh launch per repeat) and sends no
        cache flush.  The ``external`` fields mean nothing on a plan benchdeck launches."""
        if not self.is_external:
            if self.external is not None:
                raise plan_rule("external_fields", "external is for engine: external plans only (engine {engine} "
                                "is launched by benchdeck)", engine=self.engine)
            return self
        if self.external is None:
            raise plan_rule("external_missing", "an engine: external plan needs external: its endpoint (a name "
                            "BENCHDECK_EXTERNAL_ENDPOINTS lists), the engine it declares and its version (or null)")
        if self.server_args or any(group.server_args for _role, group in self.topology.groups()):
            raise plan_rule("external_server_args", "an external server runs with its own flags: benchdeck sets "
                            "none, so server_args must be empty")
        if self.sglang_version is not None or self.vllm_version is not None:
            raise plan_rule("external_version", "an external plan declares its version as external.version "
                            "(sglang_version and vllm_version name benchdeck's flag schemas)")
        if self.benchmark.flush_cache:
            raise plan_rule("external_flush_cache", "flush_cache is off for external servers: the endpoint "
                            "bench_serving posts to may not exist there")
        if self.benchmark.fresh_launch_per_repeat:
            raise plan_rule("external_fresh_launch", "benchdeck does not launch an external server, so it "
                            "cannot relaunch it per repeat")
        return self

    @model_validator(mode="after")
    def _engine_version_fits(self) -> RunPlan:
        """A version names the engine's flag schema: an SGLang version on a vLLM plan (or the
        reverse) would validate the flags against the wrong engine."""
        own = None if self.is_external else adapter_for(self.engine).version_field
        for version_field in ("sglang_version", "vllm_version"):
            if getattr(self, version_field) is not None and own not in (None, version_field):
                raise plan_rule("engine_version_mismatch", "{field} is not for {engine} plans; a {engine} plan "
                                "names {own}", field=version_field, engine=self.engine, own=own)
        if not self.is_external and self.topology.kind not in adapter_for(self.engine).topologies:
            raise plan_rule("vllm_topology", "a vLLM plan runs one aggregated server (benchdeck launches "
                            "no vLLM prefill/decode pairs)")
        return self

    @model_serializer(mode="wrap")
    def _without_unused_external(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Plans without the optional sections (external, quality, pinned acceptance) dump as
        they did before those fields existed (YAML, the stored plan JSON)."""
        data: dict[str, Any] = handler(self)
        for optional in ("external", "quality", "pinned_acceptance"):
            if data.get(optional, ...) is None:
                data.pop(optional)
        return data

    @property
    def is_vllm(self) -> bool:
        """Launched as vLLM (an external server declared as vLLM is not: benchdeck launches nothing)."""
        return self.engine == "vllm"

    @property
    def is_external(self) -> bool:
        return self.engine == "external"

    @model_validator(mode="after")
    def _external_is_not_emulated(self) -> RunPlan:
        """``emulated``: served by benchdeck's emulator, every figure emulated, never measured.
        An external server is whatever it is: its figures are measured by the client here."""
        if self.is_external and self.emulated:
            raise plan_rule("external_emulated", "an external server is not benchdeck's emulator: "
                            "emulated must be false")
        return self

    @property
    def engine_label(self) -> str:
        """The engine in one word, as plans spelt it before the split (``emulator``,
        ``vllm-emulator``, ``sglang``, ``vllm``, ``external``): hashed into configuration ids,
        so a configuration keeps its id across the split, and the Build form's engine choice."""
        return EXTERNAL if self.is_external else adapter_for(self.engine).label(self.emulated)

    @property
    def engine_version(self) -> str | None:
        """The version whose flag schema the plan's flags follow (None: the host's own); for
        an external plan, the version it declares (no schema: it has no flags here)."""
        if self.external is not None:
            return self.external.version
        version: str | None = getattr(self, adapter_for(self.engine).version_field, None)
        return version

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
                raise plan_rule("flag_name", "{name} is not a flag name (write it without leading dashes)",
                                name=repr(name))
            if isinstance(flag_value, float) and not math.isfinite(flag_value):
                raise plan_rule("flag_not_finite", "{name}: value must be a finite number", name=name)
        return value

    def points(self) -> list[Point]:
        bench = self.benchmark
        return [
            Point(
                scenario=rate_scenario(scenario, rate),
                concurrency=c,
                repeat_idx=r,
                num_prompts=bench.prompts_at(c),
                warmup=resolve_count(bench.warmup, c),
                request_rate=rate,
            )
            for scenario in bench.sweep_scenarios()
            for rate in _rates_or_one(bench)
            for c in bench.concurrency
            for r in range(bench.repeats)
        ]

    def total_requests(self) -> int:
        return sum(p.num_prompts + p.warmup for p in self.points())

    def configuration_snapshot(self) -> dict[str, Any]:
        """What identifies the engine set-up (not the benchmark): hashed into a configuration id."""
        return {
            "engine": self.engine_label,
            "engine_version": self.engine_version,
            "model": self.model,
            "gpu_type": self.gpu.type,
            "gpu_count": self.gpu.count,
            "topology": self.topology.snapshot(),
            "server_args": dict(sorted(self.server_args.items())),
            # Only on external plans, so every other plan keeps its configuration id.
            **({"external": self.external.model_dump()} if self.external is not None else {}),
            # Only when pinned: a pinned acceptance changes what the engine does.
            **({"pinned_acceptance": self.pinned_acceptance.model_dump()} if self.pinned_acceptance else {}),
        }


def _client_defaults(data: Any) -> dict[str, Any] | None:
    """The client defaults an engine other than SGLang needs (None: bench_serving's own)."""
    engine = data.get("engine") if isinstance(data, dict) else None
    if engine == EXTERNAL:
        return EXTERNAL_CLIENT
    split = split_label(engine) if isinstance(engine, str) else None
    if split is None or split[0] == "sglang":
        return None
    adapter = adapter_for(split[0])
    return {"backend": adapter.bench_backend, "tokenize_prompt": adapter.tokenize_prompt}


def configuration_id(snapshot: dict[str, Any]) -> str:
    canonical = json.dumps(snapshot, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def quick_benchmark() -> BenchmarkPlan:
    """The README demo: 128/128 at concurrency 1, 2, 4, 8 — a few minutes on the emulator."""
    return BenchmarkPlan(scenarios=[SCENARIO_PRESETS["short"]], concurrency=list(QUICK_CONCURRENCY))


def repeat_seed(bench: BenchmarkPlan, repeat_idx: int) -> int:
    """The seed of one repeat: the plan's seed plus the repeat index, so repeats draw
    different prompts and lengths and their spread measures run-to-run variance rather
    than replaying one prompt set (the first repeat keeps the plan's own seed)."""
    return bench.seed + repeat_idx


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
        "seed": repeat_seed(bench, point.repeat_idx),
        "base_seed": bench.seed,
        "request_rate": point.request_rate if point.request_rate is not None else bench.request_rate,
        "backend": bench.backend,
        "tokenize_prompt": bench.tokenize_prompt,
        "apply_chat_template": bench.apply_chat_template,
        "thinking_mode": bench.thinking_mode,
        "ignore_eos": bench.ignore_eos,
        "flush_cache": bench.flush_cache,
        **(workload_conditions(bench.workload) if bench.workload is not None else {}),
        **({"rate_sweep_of": point.scenario.name.rsplit(RATE_SEPARATOR, 1)[0]} if point.request_rate else {}),
    }


def _rates_or_one(bench: BenchmarkPlan) -> list[float | None]:
    """A rate sweep's rates, or one None: the points of a plan without one."""
    return list(bench.request_rates) if bench.request_rates else [None]


def rate_scenario(scenario: Scenario, rate: float | None) -> Scenario:
    """A rate sweep's point has a scenario of its own per rate, so nothing keyed by
    (scenario, concurrency) ever merges two rates or lines a rate point up with a
    concurrency point (domain/plan/arrivals.py)."""
    if rate is None:
        return scenario
    return scenario.model_copy(update={"name": rate_scenario_name(scenario.name, rate)})


def workload_conditions(workload: Workload) -> dict[str, Any]:
    """What a workload changes in a point's conditions (the runner adds the file's hash to
    ``workload``); a file's lengths are unknown before it runs."""
    known = nominal_lengths(workload)[3]
    return {"dataset": dataset_name(workload), "dataset_path": getattr(workload, "path", None),
            "workload": workload_label(workload), "workload_kind": workload.kind,
            **({} if known else {"input_len": None, "output_len": None})}


def workload_client_defaults(kind: object) -> dict[str, Any]:
    """Client settings a workload implies unless the plan says otherwise: the client's text
    datasets refuse ``--tokenize-prompt``; multi-turn replays through the chat backend."""
    if kind == "multi-turn":
        return {"tokenize_prompt": False, "backend": "sglang-oai-chat", "apply_chat_template": True}
    return {"tokenize_prompt": False} if kind == "text" else {}


def workload_problem(bench: BenchmarkPlan) -> tuple[str, str] | None:
    """Why a workload cannot run with the rest of the benchmark section (None: it can)."""
    workload = bench.workload
    if workload is None:
        return None
    # Scenarios at their defaults (as a stored plan dumps them) are the workload's to replace.
    if bench.scenarios != list(SCENARIO_PRESETS.values()) or bench.dataset != "random-ids" or bench.dataset_path:
        return ("workload_alone", "a workload sets the prompts itself: leave scenarios, dataset and dataset_path out")
    if workload.kind in FILE_KINDS - {"trace"} and bench.tokenize_prompt:
        return ("workload_text", "the client reads a text workload as text: tokenize_prompt must be false")
    if workload.kind == "multi-turn" and bench.backend != "sglang-oai-chat":
        return ("workload_chat", "a multi-turn workload replays chats: it needs the sglang-oai-chat backend "
                "(vLLM plans cannot run it here)")
    return None
