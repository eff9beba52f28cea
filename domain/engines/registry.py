"""The registry of engine adapters: one adapter per engine family, looked up by name.

A plan names an engine family (``engine: sglang``) and whether benchdeck's emulator
stands in for it (``emulated: true``).  Everything that differs between families sits in
that family's :class:`EngineAdapter`; the code that validates, renders, launches and
reads an engine is written once and is handed the adapter.  A new family is one module
that builds an adapter and passes it to :func:`register` (``domain/engines/__init__.py``
registers the shipped ones; a test registers a toy one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from domain.engines.log_reader import LogReader
from domain.engines.server_metrics import NO_METRICS, MetricNames
from domain.flags.dialect import FlagDialect

EXTERNAL = "external"  # not a family: a server benchdeck did not start and has no adapter for
LOOPBACK = "127.0.0.1"  # every engine server benchdeck starts listens here only


@dataclass(frozen=True)
class EngineAdapter:
    """What one engine family does its own way.  ``hooks`` holds the family's functions
    and tables the shared code calls by name (see each family's module)."""

    family: str
    name: str  # as messages and pages name the engine ("SGLang", "vLLM")
    version_field: str  # the plan field pinning the flag schema's version
    emulated_label: str  # the one word the plan's engine had for the emulated family
    bench_backend: str  # bench_serving's --backend that speaks to this engine's server
    tokenize_prompt: bool  # whether that backend sends token ids (--tokenize-prompt)
    topologies: frozenset[str]  # the topology kinds benchdeck launches for this family
    flags: FlagDialect  # its flags: schema dumps, value and argv syntax, drift, risk, policy
    log: LogReader  # its log: fatal lines, start-up facts and stages
    launch_module: tuple[str, ...]  # ``python -m <these>`` starts a real server
    owned_flags: Callable[[str, str], list[str]]  # (model, port) -> the flags the runner sets itself
    interpreter_setting: str  # the Settings field naming the engine's interpreter on a runner host
    no_interpreter_key: str  # the check's warning where that setting is unset here
    emulator_args: tuple[str, ...] = ()  # how ``python -m emulator`` is told to speak this engine
    emulator_schema_dir: bool = False  # the emulator is told where the flag schemas are
    metrics: MetricNames = NO_METRICS  # its /metrics: the families kept and how they add up
    hooks: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def label(self, emulated: bool) -> str:
        """The plan's engine as one word (``emulator``, ``vllm-emulator``): what configuration
        ids hash, so a configuration keeps its id whichever way its plan spells the engine."""
        return self.emulated_label if emulated else self.family


_ADAPTERS: dict[str, EngineAdapter] = {}


def register(adapter: EngineAdapter) -> EngineAdapter:
    """Add (or replace, by family) an adapter; returns it."""
    if adapter.family == EXTERNAL:
        raise ValueError("'external' names no family: it is a server benchdeck does not launch")
    _ADAPTERS[adapter.family] = adapter
    return adapter


def unregister(family: str) -> None:
    """Drop a family (a test's toy one)."""
    _ADAPTERS.pop(family, None)


def adapter_for(family: str) -> EngineAdapter:
    """The adapter of ``family``; KeyError for a family nobody registered."""
    return _ADAPTERS[family]


def families() -> tuple[str, ...]:
    """Every registered family, in registration order."""
    return tuple(_ADAPTERS)


def split_label(label: str) -> tuple[str, bool] | None:
    """``emulator`` -> (``sglang``, True), ``vllm`` -> (``vllm``, False): the one-word engine
    of plans and configurations written before the split; None for a word no adapter uses."""
    for adapter in _ADAPTERS.values():
        if label in (adapter.family, adapter.emulated_label):
            return adapter.family, label == adapter.emulated_label
    return None


def stored_engine(word: str | None) -> tuple[str | None, bool | None]:
    """How the configurations table stores an engine a plan, a file or a user named in one
    word: (family, emulated); a word no adapter uses (``external``, an imported file's
    ``trt-llm``) as itself, not emulated; None (unknown) as (None, None)."""
    if word is None:
        return None, None
    return split_label(word) or (word, False)
