"""SGLang's real parser and benchdeck's validator never disagree (issue 3, "Done when").

The pinned SGLang's own ``ServerArgs`` argparse parser (run in .venv-sglang) parses
every preset and hundreds of generated configurations:

* whatever the validator accepts, rendered by ``render_argv``, SGLang parses to the
  values the plan meant;
* broken values the validator rejects (wrong type, outside the choices, unknown flags)
  SGLang rejects too.  Policy refusals (``--trust-remote-code``, shell syntax) are
  stricter than SGLang on purpose and are not part of this comparison, nor are Unicode
  digits (Python's ``int('８')`` is 8) or argparse's prefix matching, which benchdeck
  refuses by design (see the last two tests).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.flags import load_schema, render_argv, validate_server_args
from domain.plan.presets import CONFIG_PRESETS
from tests.conftest import ROOT
from tests.flag_strategies import eligible_specs, expected_dest_value, valid_server_args

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

PINNED = "0.5.23"
SCHEMA = load_schema(PINNED)
SPECS = eligible_specs(SCHEMA)
BY_NAME = {spec.primary: spec for spec in SPECS}


class SglangParser:
    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def parse(self, argv: list[str]) -> dict[str, object]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(argv) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())


@pytest.fixture(scope="module")
def sglang_parser() -> Iterator[SglangParser]:
    python = Path(os.environ.get("BENCHDECK_BENCH_PYTHON", ROOT / ".venv-sglang" / "bin" / "python"))
    process = subprocess.Popen(
        [str(python), "-m", "tests.support.sglang_argparse_server"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    assert json.loads(process.stdout.readline()) == {"ready": True}
    yield SglangParser(process)
    process.stdin.close()
    process.wait(timeout=30)


def assert_sglang_reads(parser: SglangParser, args: dict[str, object]) -> None:
    argv = render_argv(args, PINNED)
    answer = parser.parse(argv)
    assert answer["ok"], (argv, answer)
    values = answer["values"]
    for flag, value in args.items():
        spec = SCHEMA.lookup(flag)
        assert spec is not None
        assert values[spec.dest] == json.loads(json.dumps(expected_dest_value(spec, value))), (flag, argv)


def test_sglang_parses_every_preset_as_written(sglang_parser: SglangParser) -> None:
    for preset in CONFIG_PRESETS:
        args = preset.server_args_for(PINNED)
        assert validate_server_args(args, PINNED, model_dirs=[]).errors == ()
        assert_sglang_reads(sglang_parser, args)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_server_args(SPECS))
def test_what_the_validator_accepts_sglang_parses_to_the_same_values(
    sglang_parser: SglangParser, args: dict[str, object]
) -> None:
    assert validate_server_args(args, PINNED, model_dirs=[]).errors == ()
    assert_sglang_reads(sglang_parser, args)


INT_FLAGS = sorted(name for name, spec in BY_NAME.items() if spec.type == "int" and not spec.takes_list)
CHOICE_FLAGS = sorted(name for name, spec in BY_NAME.items() if spec.choices and not spec.takes_list)


@st.composite
def broken_case(draw: st.DrawFn) -> tuple[dict[str, object], list[str]]:
    """A single broken flag, as server_args and as the argv a careless user would type."""
    kind = draw(st.sampled_from(["int", "choice", "unknown"]))
    if kind == "int":
        flag = draw(st.sampled_from(INT_FLAGS))
        text = draw(st.sampled_from(["abc", "1.5", "1e3", "0x10", "nan", "", "8k"]))
        return {flag: text}, [f"--{flag}", text]
    if kind == "choice":
        flag = draw(st.sampled_from(CHOICE_FLAGS))
        text = draw(st.from_regex(r"zz[a-z]{1,8}", fullmatch=True))
        return {flag: text}, [f"--{flag}", text]
    name = draw(st.from_regex(r"zz-[a-z]{1,10}", fullmatch=True))  # no real flag starts with "zz"
    return {name: True}, [f"--{name}"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_case())
def test_what_sglang_rejects_the_validator_rejects_too(
    sglang_parser: SglangParser, case: tuple[dict[str, object], list[str]]
) -> None:
    args, argv = case
    assert validate_server_args(args, PINNED, model_dirs=[]).errors, args
    assert not sglang_parser.parse(argv)["ok"], argv


def test_chunked_prefill_minus_one_is_read_as_a_number_by_sglang(sglang_parser: SglangParser) -> None:
    assert_sglang_reads(sglang_parser, {"chunked-prefill-size": -1})


def test_sglang_itself_reads_full_width_digits_which_we_refuse(sglang_parser: SglangParser) -> None:
    answer = sglang_parser.parse(["--max-running-requests", "８"])
    assert answer["ok"] and answer["values"]["max_running_requests"] == 8
    assert validate_server_args({"max-running-requests": "８"}, PINNED, model_dirs=[]).codes() == ["bad_value"]


def test_sglang_itself_would_prefix_match_prefill_only_which_is_why_we_refuse_it(sglang_parser: SglangParser) -> None:
    answer = sglang_parser.parse(["--prefill-only"])
    assert answer["ok"] and answer["values"]["prefill_only_disable_kv_cache"] is True
    assert validate_server_args({"prefill-only": True}, PINNED, model_dirs=[]).codes() == ["unknown_flag"]


def test_the_runner_launch_command_is_read_exactly_by_sglang(sglang_parser: SglangParser) -> None:
    """The whole argv the runner launches (its own flags included) through SGLang's parser;
    every option in it is spelled exactly as the schema does, so prefix matching never
    has to rescue anything."""
    from domain.plan.command import server_argv
    from domain.plan.presets import CONFIG_PRESETS
    from domain.plan.run_plan import RunPlan

    options = {name for spec in SCHEMA.specs for name in spec.names}
    for preset in CONFIG_PRESETS:
        plan = RunPlan(name="p", engine="sglang", sglang_version=PINNED, model=preset.model.hf_id,
                       gpu={"type": preset.gpu.key, "count": preset.gpu_count},
                       server_args=dict(preset.server_args))
        argv = server_argv(plan, python="python", port=30123, version=PINNED, tokenizer_dir=None)
        assert argv[:3] == ["python", "-m", "sglang.launch_server"]
        flags = [token[2:] for token in argv[3:] if token.startswith("--")]
        assert set(flags) <= options, set(flags) - options
        answer = sglang_parser.parse(argv[3:])
        assert answer["ok"], (argv, answer)
        values = answer["values"]
        assert (values["model_path"], values["host"], values["port"]) == (preset.model.hf_id, "127.0.0.1", 30123)
        assert values["enable_metrics"] is True
        for flag, value in preset.server_args.items():
            spec = SCHEMA.lookup(flag)
            assert spec is not None
            assert values[spec.dest] == json.loads(json.dumps(expected_dest_value(spec, value))), flag
