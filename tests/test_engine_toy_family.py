"""The engine seam (issue 39): a toy third engine family, registered in a few dozen lines,
goes through the same code as SGLang and vLLM: a plan naming it loads, ``check_plan``
validates its flags against its schema and policy, ``server_argv`` renders its command in
its own syntax, and the server process reads its log through its adapter's reader."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from domain.core.settings import get_settings
from domain.core.states import FailureKind
from domain.engines import SGLANG, EngineAdapter, adapter_for, register, unregister
from domain.engines.log_reader import EXCEPTION_LINE, REPORT, FatalPattern, LogReader, log_lines
from domain.flags.dialect import FlagDialect
from domain.flags.dialects.sglang import SGLANG_FLAGS
from domain.flags.risk import LayerTable
from domain.flags.schema import FlagSpec, Schema
from domain.plan.checks import check_plan
from domain.plan.command import server_argv
from domain.plan.plan_io import plan_from_mapping
from domain.plan.run_plan import RunPlan
from runner.server_process import launch

TOY_SPECS = [  # the shape SGLang's schema dump writes (runner/sglang_side/schema_dump.py)
    {"dest": "slots", "flags": ["--slots"], "primary": "--slots", "action": "_StoreAction", "type": "int",
     "nargs": None},
    {"dest": "turbo", "flags": ["--turbo", "--no-turbo"], "primary": "--turbo", "action": "BooleanOptionalAction",
     "type": None, "nargs": 0},
]


def _toy_schema(raw: dict[str, object]) -> Schema:
    specs = tuple(FlagSpec.from_dict(spec) for spec in raw["args"])  # type: ignore[attr-defined]
    return Schema(version=str(raw["toy_version"]), specs=specs, family="toy")


TOY_LOG = LogReader(
    harmless=(), fatal=(FatalPattern(re.compile(r"toy ran out of slots"), FailureKind.OOM, "fewer --slots"),),
    request_error=re.compile(r"request failed"),
    traceback_meaning=lambda _frames: FatalPattern(EXCEPTION_LINE, FailureKind.SERVER_CRASH, "crashed", tier=REPORT),
    messages=lambda text: [line.removeprefix("[toy] ") for line in log_lines(text)],
    startup_lines={"max_total_num_tokens": (re.compile(r"kv pool: ([0-9,]+) tokens"),)},
    counts=frozenset({"max_total_num_tokens"}),
    stages=(("weights", re.compile(r"loading weights")), ("ready", re.compile(r"toy is up"))),
)


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[EngineAdapter]:
    (tmp_path / "toy_args_1.0.0.json").write_text(json.dumps({"toy_version": "1.0.0", "args": TOY_SPECS}))
    flags = FlagDialect(
        family="toy", name="Toy", read_schema=_toy_schema, detail=lambda detail: detail,
        translation=lambda *_: None, deprecated=lambda schema, flag: False,
        check_value=SGLANG_FLAGS.check_value, render_scalar=lambda _option, value: str(value), attach_dashed=True,
        policy=SGLANG_FLAGS.policy, risk_table=lambda: LayerTable((), ()), classify=lambda _flag: None,
        schema_dir=tmp_path,
    )
    adapter = register(replace(
        SGLANG, family="toy", name="Toy", version_field="toy_version", emulated_label="toy-emulator",
        bench_backend="vllm", tokenize_prompt=False, topologies=frozenset({"aggregated"}), flags=flags, log=TOY_LOG,
        launch_module=("toy.serve",), owned_flags=lambda model, port: ["--model", model, "--port", port],
        interpreter_setting="sglang_python"))
    yield adapter
    unregister("toy")


def _plan(**server_args: object) -> RunPlan:
    return plan_from_mapping({"name": "toy", "engine": "toy", "model": "Qwen/Qwen3-30B-A3B",
                              "gpu": {"type": "H200", "count": 1}, "server_args": server_args})


def test_a_toy_family_goes_through_check_argv_and_log_reading(toy: EngineAdapter, tmp_path: Path) -> None:
    plan = _plan(slots=-4, turbo=False)
    assert (plan.engine, plan.benchmark.backend, adapter_for("toy")) == ("toy", "vllm", toy)
    report = check_plan(plan, get_settings(), "en")
    assert report.ok and report.detail == ""
    refused = check_plan(_plan(slot=4, turbo="yes"), get_settings(), "en")
    assert [line.split(":")[0] for line in refused.errors] == ["Toy 1.0.0", "Toy 1.0.0"]
    assert "--slots" in refused.detail  # the nearest real flag of the toy's own schema
    argv = server_argv(plan, python="/toy/python", port=9, version="1.0.0", tokenizer_dir=None)
    assert argv == ["/toy/python", "-m", "toy.serve", "--model", "Qwen/Qwen3-30B-A3B", "--port", "9",
                    "--slots=-4", "--no-turbo"]  # the toy's syntax: a dashed value attached with "="
    # A real child process that logs as the toy does and dies, read as the runner reads it.
    script = "print('[toy] loading weights'); print('[toy] kv pool: 1,024 tokens'); print('[toy] toy ran out of slots')"
    server = launch([sys.executable, "-c", script + "; raise SystemExit(1)"], port=9, log_path=tmp_path / "server.log",
                    env=dict(os.environ), engine="toy")
    server.child.popen.wait(timeout=30)
    failure = server.crash_failure(default=FailureKind.SERVER_CRASH, what="the toy died")
    assert (failure.kind, failure.hint, str(failure)) == (FailureKind.OOM, "fewer --slots",
                                                         "the toy died (exit code 1): toy ran out of slots")
    log = adapter_for(server.engine).log
    assert log.startup_facts(server.log_tail()) == {"max_total_num_tokens": 1024}
    assert log.startup_stage(server.log_tail()) == "weights"
