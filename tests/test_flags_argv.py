"""server_args <-> argv: exact rendering, exact parsing of pasted command lines."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import HealthCheck, given, settings

from domain.flags import CommandLineError, load_schema, parse_command_line, render_argv, validate_server_args
from tests.flag_strategies import eligible_specs, valid_server_args

SCHEMA = load_schema("0.5.23")
SPECS = eligible_specs(SCHEMA)


def test_switches_are_bare_lists_are_several_values_json_is_compact() -> None:
    args = {
        "tp-size": 8,
        "enable-torch-compile": True,
        "disable-radix-cache": False,
        "cuda-graph-bs-decode": [1, 2, 4],
        "mem-fraction-static": 0.88,
        "chunked-prefill-size": -1,
        "cuda-graph-config": {"decode": {"max_bs": 256}},
        "enable-tf32-matmul": False,
        "schedule-policy": "lpm",
        "max-running-requests": None,
    }
    assert render_argv(args, "0.5.23") == [
        "--tp-size", "8",
        "--enable-torch-compile",
        "--cuda-graph-bs-decode", "1", "2", "4",
        "--mem-fraction-static", "0.88",
        "--chunked-prefill-size", "-1",
        "--cuda-graph-config", '{"decode":{"max_bs":256}}',
        "--no-enable-tf32-matmul",
        "--schedule-policy", "lpm",
    ]  # fmt: skip


def test_the_version_decides_the_spelling_rendered() -> None:
    assert render_argv({"tensor-parallel-size": 2}, "0.5.9") == ["--tensor-parallel-size", "2"]
    with pytest.raises(ValueError, match="not a flag"):
        render_argv({"cuda-graph-max-bs": 160}, "0.5.23")


@pytest.mark.parametrize(
    "args",
    [{"served-model-name": "-x"}, {"enable-torch-compile": "yes"}, {"tp-size": True}],
)
def test_values_that_cannot_be_rendered_faithfully_raise(args: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        render_argv(args, "0.5.23")


COOKBOOK = """\
# from the SGLang cookbook, with a comment and line continuations
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 python -m sglang.launch_server \\
  --model Qwen/Qwen3-235B-A22B-FP8 \\
  --tp 8 \\
  --ep 2 \\
  # --mem-fraction-static 0.8 \\
  --reasoning-parser qwen3 \\
  --cuda-graph-config '{"decode": {"max_bs": 256}}' \\
  --chunked-prefill-size=-1 \\
  --cuda-graph-bs-decode 1 2 4 8 \\
  --enable-torch-compile
"""


def test_a_pasted_command_line_is_parsed_by_exact_spelling() -> None:
    assert parse_command_line(COOKBOOK, "0.5.23") == {
        "model": "Qwen/Qwen3-235B-A22B-FP8",
        "tp": 8,  # not silently --tp-size: validation reports it and offers tp-size
        "ep": 2,  # a real alias of --ep-size
        "reasoning-parser": "qwen3",
        "cuda-graph-config": {"decode": {"max_bs": 256}},
        "chunked-prefill-size": -1,
        "cuda-graph-bs-decode": [1, 2, 4, 8],
        "enable-torch-compile": True,
    }


def test_parsed_flags_go_through_validation_with_translations() -> None:
    args = parse_command_line("sglang serve --prefill-only --cuda-graph-max-bs 160 --tp 8", "0.5.23")
    assert args == {"prefill-only": True, "cuda-graph-max-bs": 160, "tp": 8}
    report = validate_server_args(args, "0.5.23", model_dirs=[])
    assert {t.rule for t in report.translations} == {"prefill_only", "cuda_graph_max_bs", "tp_abbreviation"}


def test_values_that_do_not_parse_stay_text_for_validation_to_report() -> None:
    args = parse_command_line("--tp-size abc --mem-fraction-static nan --max-running-requests ８", "0.5.23")
    assert args == {"tp-size": "abc", "mem-fraction-static": "nan", "max-running-requests": "８"}
    assert validate_server_args(args, "0.5.23", model_dirs=[]).codes() == ["bad_type", "bad_value", "bad_value"]


def test_a_flag_without_its_value_parses_to_none() -> None:
    args = parse_command_line("--schedule-policy --tp-size 2", "0.5.23")
    assert args == {"schedule-policy": None, "tp-size": 2}
    assert validate_server_args(args, "0.5.23", model_dirs=[]).codes() == ["missing_value"]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("--tp-size 8 ; rm -rf /", "unexpected_token"),
        ("--tp-size 8 && curl x", "unexpected_token"),
        ("--served-model-name 'unbalanced", "unbalanced"),
        ("--enable-torch-compile=yes", "switch_with_value"),
        ("--tp-size 8 stray", "unexpected_token"),
    ],
)
def test_text_that_is_not_one_launch_command_is_refused(text: str, key: str) -> None:
    with pytest.raises(CommandLineError) as caught:
        parse_command_line(text, "0.5.23")
    assert caught.value.key == key
    assert caught.value.text("ja") and caught.value.text("en")


def test_a_quoted_shell_payload_is_only_a_value_and_validation_refuses_it() -> None:
    args = parse_command_line("--served-model-name '; rm -rf /' --tool-call-parser '$(id)'", "0.5.23")
    assert args == {"served-model-name": "; rm -rf /", "tool-call-parser": "$(id)"}
    assert validate_server_args(args, "0.5.23", model_dirs=[]).codes() == ["bad_value", "bad_value"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_server_args(SPECS))
def test_generated_valid_args_validate_and_survive_render_then_parse(args: dict[str, object]) -> None:
    assert validate_server_args(args, "0.5.23", model_dirs=[]).errors == ()
    argv = render_argv(args, "0.5.23")
    parsed = parse_command_line("python -m sglang.launch_server " + shlex.join(argv), "0.5.23")
    assert parsed == {k: v for k, v in args.items()}
