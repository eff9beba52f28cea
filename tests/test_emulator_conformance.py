"""The emulator against the installed SGLang's own source (``.venv-sglang``, see
requirements-sglang.txt): metric names, types and labels, ``/server_info`` keys, and the
start-up log lines that ``runner/logparse.py`` reads.  What the emulator says is taken from a
running emulator; what SGLang says is read statically from its source, never imported."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from domain.flags.schema import SCHEMA_DIR
from emulator.build_tokenizer import build
from emulator.metrics import StatsReporter, engine_type, scheduler_labels, tokenizer_labels
from emulator.scheduler import Request, Step
from emulator.testing import EmulatorProcess, running_emulator
from runner.logparse import log_lines, startup_facts

ROOT = Path(__file__).resolve().parents[1]
SGLANG = ROOT / ".venv-sglang/lib/python3.11/site-packages/sglang/srt"
pytestmark = pytest.mark.skipif(not SGLANG.is_dir(), reason="the SGLang environment .venv-sglang is not installed")

COLLECTOR = "observability/metrics_collector.py"
# Collector class -> the function whose ``labels`` dict is its base label set.
LABEL_SOURCES = {"SchedulerMetricsCollector": "init_new", "TokenizerMetricsCollector":
                 "tokenizer_metric_labels"}
BENCHDECK_METRIC_PREFIX = "benchdeck_emulator_"
BENCHDECK_INFO_KEYS = {"emulated", "emulator"}  # say that the server is the emulator
# Start-up lines runner/logparse.py reads, and the real files that log them.
STARTUP_ANCHORS = ("Load weight begin", "Load weight end", "KV Cache is allocated", "Memory pool end",
                   "Capture target", "max_total_num_tokens=")
STARTUP_SOURCES = ("model_executor/model_runner.py", "mem_cache/memory_pool.py", "mem_cache/kv_cache_configurator.py",
                   "model_executor/model_runner_components/cuda_graph_setup.py", "managers/scheduler.py")


def _tree(relative: str) -> ast.Module:
    return ast.parse((SGLANG / relative).read_text())


def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


# -- the real metric catalogue -----------------------------------------------------------------
@dataclass(frozen=True)
class RealMetric:
    kind: str  # gauge | counter | histogram | summary
    collector: str
    extra_labels: frozenset[str]  # the literal names added to the collector's base labels


@dataclass(frozen=True)
class BaseLabels:
    always: frozenset[str]
    optional: frozenset[str]  # set by ``labels["x"] = …`` under a condition


def _exposed_name(name: str, kind: str) -> str:
    """prometheus_client drops a counter's ``_total`` from the family name."""
    return name.removesuffix("_total") if kind == "counter" else name


def _metric_calls(cls: ast.ClassDef) -> Iterator[tuple[str, ast.Call]]:
    for node in ast.walk(cls):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("Gauge", "Counter", "Histogram", "Summary"):
            yield node.func.id.lower(), node


def _extra_labels(call: ast.Call) -> frozenset[str]:
    labelnames = next((k.value for k in call.keywords if k.arg == "labelnames"), None)
    names = (_str(n) for n in ast.walk(labelnames)) if labelnames else iter(())
    return frozenset(name for name in names if name)


def real_metrics() -> dict[str, RealMetric]:
    catalogue = {}
    for cls in (n for n in _tree(COLLECTOR).body if isinstance(n, ast.ClassDef) and n.name in LABEL_SOURCES):
        for kind, call in _metric_calls(cls):
            name = _str(next((k.value for k in call.keywords if k.arg == "name"), None))
            if name:
                catalogue[_exposed_name(name, kind)] = RealMetric(kind, cls.name, _extra_labels(call))
    return catalogue


def real_base_labels() -> dict[str, BaseLabels]:
    functions = {n.name: n for n in ast.walk(_tree(COLLECTOR)) if isinstance(n, ast.FunctionDef)}
    out = {}
    for collector, function in LABEL_SOURCES.items():
        always: set[str] = set()
        optional: set[str] = set()
        for node in ast.walk(functions[function]):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) \
                    and any(isinstance(t, ast.Name) and t.id == "labels" for t in node.targets):
                always |= {k for k in map(_str, node.value.keys) if k}
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and _str(node.slice):
                optional.add(cast(str, _str(node.slice)))
        out[collector] = BaseLabels(frozenset(always), frozenset(optional))
    return out


# -- the real /server_info keys ----------------------------------------------------------------
def _dict_keys(node: ast.AST) -> set[str]:
    """Literal keys of the dict displays and ``d["key"] = …`` stores under ``node``."""
    keys: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Dict):
            keys |= {k for k in map(_str, sub.keys) if k}
        if isinstance(sub, ast.Subscript) and isinstance(sub.ctx, ast.Store) and _str(sub.slice):
            keys.add(cast(str, _str(sub.slice)))
    return keys


def _function(relative: str, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    return next(n for n in ast.walk(_tree(relative))
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name)


def server_arg_fields() -> set[str]:
    """Every ServerArgs field (the namespaces under arg_groups/fields, and server_args.py)."""
    names: set[str] = set()
    for path in [*sorted((SGLANG / "arg_groups/fields").glob("*.py")), SGLANG / "server_args.py"]:
        for cls in (n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)):
            names |= {s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    return names


def real_top_level_keys() -> set[str]:
    return (_dict_keys(_function("entrypoints/http_server.py", "server_info"))
            | _dict_keys(_function("utils/common.py", "build_server_info"))
            | _dict_keys(_function("managers/scheduler.py", "get_init_info")) | server_arg_fields())


def real_internal_state_keys() -> set[str]:
    return _dict_keys(_tree("managers/scheduler_components/internal_state.py")) | server_arg_fields()


def real_memory_usage_keys() -> set[str]:
    return _dict_keys(_function("managers/scheduler_components/memory_usage.py", "build_memory_usage"))


def real_graph_phases() -> tuple[str, ...]:
    module = _tree("model_executor/graph_memory_usage.py")
    node = next(n for n in module.body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "GRAPH_MEMORY_USAGE_KEYS" for t in n.targets))
    return tuple(ast.literal_eval(node.value))


# -- the real start-up log formats -------------------------------------------------------------
def _template(node: ast.JoinedStr) -> re.Pattern[str]:
    """An f-string as a regex: its literal text, anything (possibly nothing) for each field."""
    parts = [re.escape(str(v.value)) if isinstance(v, ast.Constant) else ".*?" for v in node.values]
    return re.compile("".join(parts))


def real_info_templates() -> list[re.Pattern[str]]:
    templates = []
    for relative in STARTUP_SOURCES:
        for node in ast.walk(_tree(relative)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "info":
                templates += [_template(a) for a in node.args if isinstance(a, ast.JoinedStr)]
    return templates


# -- the running emulator ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    tokenizer = tmp_path_factory.mktemp("tokenizer")
    build(tokenizer)
    args = ["--model-path", "Qwen/Qwen3-30B-A3B", "--emulate-schema-dir", str(SCHEMA_DIR),
            "--emulate-startup-s", "0.4", "--enable-metrics", "--emulate-tokenizer-dir", str(tokenizer)]
    with running_emulator(args, tmp_path_factory.mktemp("emulator") / "server.log") as proc:
        prompt = {"input_ids": [7] * 100, "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
        for stream in (False, True):  # a cache hit the second time; both is_streaming values
            assert requests.post(proc.base_url + "/generate", json={**prompt, "stream": stream}, timeout=30).ok
        yield proc


def _families(emulator: EmulatorProcess) -> list[Any]:
    return list(text_string_to_metric_families(requests.get(emulator.base_url + "/metrics", timeout=10).text))


def test_every_metric_exists_in_sglang_with_its_type_and_labels(emulator: EmulatorProcess) -> None:
    real, bases = real_metrics(), real_base_labels()
    assert {"sglang:num_running_reqs", "sglang:prompt_tokens"} <= set(real), "the catalogue reader found nothing"
    # The text parser reads prometheus_client's ``<name>_created`` series as gauges of their own.
    families = [f for f in _families(emulator) if not f.name.startswith(BENCHDECK_METRIC_PREFIX)
                and f.name.removesuffix("_created") not in set(real) - {f.name}]
    assert families
    for family in families:
        assert family.name in real, f"{family.name} is not an SGLang metric"
        metric = real[family.name]
        assert family.type == metric.kind, family.name
        base = bases[metric.collector]
        for sample in family.samples:
            labels = set(sample.labels) - {"le", "quantile"}
            assert base.always | metric.extra_labels <= labels, (family.name, labels)
            assert labels <= base.always | base.optional | metric.extra_labels, (family.name, labels)


def test_every_series_of_a_request_metric_has_samples(emulator: EmulatorProcess) -> None:
    sampled = {f.name for f in _families(emulator) if f.samples}
    assert {"sglang:prompt_tokens", "sglang:cached_tokens", "sglang:time_to_first_token_seconds"} <= sampled
    streaming = {s.labels.get("is_streaming") for f in _families(emulator) if f.name == "sglang:num_requests"
                 for s in f.samples}
    assert streaming == {"true", "false"}


def test_server_info_keys_exist_in_sglangs_answer(emulator: EmulatorProcess) -> None:
    info = requests.get(emulator.base_url + "/server_info", timeout=10).json()
    assert set(info) - BENCHDECK_INFO_KEYS - real_top_level_keys() == set()
    (state,) = info["internal_states"]
    assert set(state) - real_internal_state_keys() == set()
    assert set(state["memory_usage"]) == real_memory_usage_keys()
    assert tuple(state["memory_usage"]["graph"]) == real_graph_phases()


def test_v1_models_root_is_the_served_name(emulator: EmulatorProcess) -> None:
    (card,) = requests.get(emulator.base_url + "/v1/models", timeout=10).json()["data"]
    assert card["root"] == card["id"]  # available_models: ModelCard(id=name, root=name, …)


def test_start_up_lines_match_sglangs_format_strings(emulator: EmulatorProcess) -> None:
    templates = real_info_templates()
    messages = [line.split("] ", 1)[1] for line in log_lines(emulator.log()) if "] " in line]
    checked = [m for m in messages if m.startswith(STARTUP_ANCHORS)]
    assert len(checked) >= 9, checked  # weights 2, KV 2, two graphs 2 each, the summary
    for message in checked:
        assert any(t.fullmatch(message) for t in templates), message
    captures = [m.split(" CUDA graph")[0] for m in checked if m.startswith("Capture target")]
    assert captures == ["Capture target prefill"] * 2 + ["Capture target decode"] * 2  # prefill first
    facts = startup_facts(emulator.log())
    assert facts["cuda_graph_elapsed_s"] > 0 and facts["prefill_cuda_graph_elapsed_s"] > 0


# -- labels and refresh, without a server ------------------------------------------------------
@pytest.mark.parametrize(("mode", "expected"), [(None, "unified"), ("null", "unified"), ("prefill", "prefill"),
                                                ("decode", "decode")])
def test_engine_type_is_the_pd_role(mode: str | None, expected: str) -> None:
    assert engine_type({"disaggregation_mode": mode}) == expected


def _cfg(**args: Any) -> Any:
    return SimpleNamespace(args=args, served_model_name="m", dp_size=args.pop("dp_size", 1), max_total_num_tokens=1000,
                           cuda_graph_max_bs=args.pop("cuda_graph_max_bs", 8))


def test_priority_and_dp_rank_labels_appear_where_sglang_adds_them() -> None:
    assert set(scheduler_labels(_cfg())) == {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}
    assert {"priority", "dp_rank"} <= set(scheduler_labels(_cfg(enable_priority_scheduling=True, dp_size=2)))
    assert set(tokenizer_labels(_cfg(enable_priority_scheduling=True))) == {"model_name", "engine_type", "priority"}
    assert scheduler_labels(_cfg(enable_pd_role_switch=True))["engine_type"] == "dynamic"


class _Scheduler:
    def __init__(self) -> None:
        self.running: list[Request] = []
        self.waiting: list[Request] = []
        self.counters = SimpleNamespace(generation_tokens=0, retractions=0)

    def kv_used(self) -> int:
        return 10 * len(self.running)

    def idle(self) -> bool:
        return not self.running and not self.waiting


def _decode(requests_: list[Request]) -> Step:
    return Step("decode", (), tuple(requests_), 0.01)


def test_gauges_hold_until_the_decode_log_interval() -> None:
    sched = _Scheduler()
    reporter = StatsReporter(cast(Any, _cfg(decode_log_interval=3)), cast(Any, sched))
    sched.running = [Request("a", [1] * 8, 10, 10, 0.0), Request("b", [1] * 8, 10, 10, 0.0)]
    for n in range(1, 3):
        sched.counters.generation_tokens += 2
        reporter.observe_step(_decode(sched.running), float(n))
        assert reporter.stats.num_running_reqs == 0  # not yet published
    sched.counters.generation_tokens += 2
    reporter.observe_step(_decode(sched.running), 3.0)
    assert (reporter.stats.num_running_reqs, reporter.stats.num_used_tokens) == (2, 20)
    assert reporter.decode_passes == {"decode_cuda_graph": 3, "decode_none": 0}  # counted every step, 2 ≤ 8
    sched.running = []
    reporter.refresh_if_idle()
    assert (reporter.stats.num_running_reqs, reporter.stats.gen_throughput) == (0, 0.0)
