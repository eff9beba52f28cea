"""The Build page's text boxes read as plan values (``domain/plan/form_input.py``): plain
functions, so every reading and every refusal is checked here without Streamlit."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from domain.plan.form_input import (
    MAX_ROLE_FLAGS_CHARS,
    concurrency_list,
    count_or_text,
    flags_yaml,
    gpu_ids_text,
    highest_concurrency,
    parse_gpu_ids,
    parse_role_flags,
    rate_or_text,
    readable_problems,
    typed_scalar,
)
from domain.plan.plan_io import PlanError, PlanProblem, plan_from_mapping


@pytest.mark.parametrize(("text", "value"), [
    ("8192", 8192), ("0.85", 0.85), ("true", "true"), ("fp8_e5m2", "fp8_e5m2"), ("{", "{"), ("1 2", "1 2"),
])
def test_typed_scalar_reads_numbers_and_keeps_the_rest_as_text(text: str, value: object) -> None:
    assert typed_scalar(text) == value
    assert type(typed_scalar(text)) is type(value)


def test_counts_rates_and_concurrency_read_what_they_can() -> None:
    assert count_or_text(" 200 ") == 200 and count_or_text("auto") == "auto"
    assert rate_or_text("inf") == "inf" and rate_or_text(" 2.5 ") == 2.5 and rate_or_text("fast") == "fast"
    assert concurrency_list("1, 8、64 ,, x") == [1, 8, 64, "x"]
    assert highest_concurrency("1, 64, x, 8") == 64 and highest_concurrency("x") is None


def test_flags_and_gpu_ids_written_back_read_the_same() -> None:
    args = {"mem-fraction-static": 0.7, "cuda-graph-bs": [1, 2]}
    text = flags_yaml(args)
    assert text.splitlines()[0] == "mem-fraction-static: 0.7"
    assert parse_role_flags(text, "decode", "en") == (args, [])
    assert flags_yaml({}) == ""
    assert gpu_ids_text([[0, 1], [2, 3]]) == "0,1;2,3" and gpu_ids_text(None) == ""
    assert parse_gpu_ids("0,1;2,3", "prefill", 2, 2, "en") == ([[0, 1], [2, 3]], [])


@pytest.mark.parametrize(("text", "count", "gpus", "message"), [
    ("zero", 1, 1, "prefill: “zero” is not a GPU list"),
    ("0;1", 1, 1, "prefill: the GPU ids name 2 servers, but the role has 1."),
    ("0,1;2", 2, 2, "prefill: server 1 is given 1 GPU ids, but each server has 2 GPUs."),
])
def test_gpu_ids_that_do_not_fit_the_role_are_named(text: str, count: int, gpus: int, message: str) -> None:
    ids, problems = parse_gpu_ids(text, "prefill", count, gpus, "en")
    assert ids is None and len(problems) == 1 and problems[0].startswith(message)


def test_empty_gpu_ids_mean_packed_in_order() -> None:
    assert parse_gpu_ids(" ; ", "decode", 1, 1, "en") == (None, [])


@pytest.mark.parametrize(("text", "message"), [
    ("{mem-fraction-static: 0.8", "decode: the other flags are not valid YAML/JSON:"),
    ("- 1\n- 2", "decode: the other flags must be a mapping"),
    ("a: &x 1\nb: *x", "decode: YAML anchors and aliases are not allowed here."),
    ("mem-fraction-static: {a: 1}", "decode: --mem-fraction-static needs a number"),
    ("1: 2", "decode: “1” is not a flag name."),
    ("x" * (MAX_ROLE_FLAGS_CHARS + 1), f"decode: the other flags are longer than {MAX_ROLE_FLAGS_CHARS}"),
])
def test_role_flags_that_cannot_be_read_are_explained_not_raised(text: str, message: str) -> None:
    flags, problems = parse_role_flags(text, "decode", "en")
    assert flags == {} and any(p.startswith(message) for p in problems), problems


def test_role_flags_name_the_line_of_a_yaml_error_and_speak_japanese() -> None:
    _, problems = parse_role_flags("a: 1\nb: [", "prefill", "en")
    assert problems[0].endswith("(line 2, column 5)")
    _, problems = parse_role_flags("- 1", "prefill", "ja")
    assert problems[0].startswith("プリフィル:")
    assert parse_role_flags("  ", "prefill", "en") == ({}, []) and parse_role_flags("~", "prefill", "en") == ({}, [])


def test_readable_problems_give_one_sentence_per_reason_of_a_layout() -> None:
    problems = [PlanProblem(field="benchmark.concurrency", message="Value error, too many; not sorted",
                            kind="value_error")]
    assert readable_problems(problems) == ["Concurrency has a problem: too many.",
                                           "Concurrency has a problem: not sorted."]
    assert readable_problems(problems, "ja")[0] == "並列数(concurrency)に問題があります(too many)。"


# --- every constraint of the form, as a sentence in the UI's language ---------------------------

FORM_PLAN: dict[str, Any] = {
    "name": "base", "engine": "emulator", "sglang_version": "0.5.23", "model": "Qwen/Qwen3-30B-A3B",
    "gpu": {"type": "H200", "count": 1}, "server_args": {},
    "benchmark": {"scenarios": [{"name": "short", "input_len": 128, "output_len": 128}], "concurrency": [1, 2],
                  "num_prompts": "10x", "warmup": "2x", "repeats": 1, "dataset": "random-ids", "seed": 42,
                  "random_range_ratio": 1.0, "request_rate": "inf", "backend": "sglang",
                  "apply_chat_template": False, "thinking_mode": "n/a"},
    "tags": [],
}

INVALID: list[tuple[str, object]] = [
    ("name", ""), ("name", "   "), ("name", "x" * 200), ("name", "a\tb"), ("name", "a\u202eb"), ("name", 5),
    ("gpu.type", "H 200"), ("gpu.type", ""), ("gpu.type", "H" * 40), ("gpu.type", "日本"),
    ("gpu.count", 0), ("gpu.count", 65), ("gpu.count", "one"),
    ("model", ""), ("sglang_version", "0.5"), ("engine", "gpu"),
    ("benchmark.concurrency", []), ("benchmark.concurrency", [1, "a"]), ("benchmark.concurrency", [0]),
    ("benchmark.concurrency", [5000]), ("benchmark.concurrency", [1, 1]), ("benchmark.concurrency", list(range(1, 70))),
    ("benchmark.num_prompts", "lots"), ("benchmark.num_prompts", -1), ("benchmark.num_prompts", 10**9),
    ("benchmark.num_prompts", 0), ("benchmark.warmup", "x"), ("benchmark.repeats", 0), ("benchmark.repeats", 21),
    ("benchmark.seed", -1), ("benchmark.random_range_ratio", 2.0), ("benchmark.random_range_ratio", -0.1),
    ("benchmark.random_range_ratio", "x"), ("benchmark.request_rate", "fast"), ("benchmark.request_rate", 0),
    ("benchmark.request_rate", -1.0), ("benchmark.scenarios", []),
    ("benchmark.scenarios", [{"name": "a b", "input_len": 0, "output_len": 2_000_000}]),
    ("benchmark.scenarios", [{"name": "s", "input_len": 1, "output_len": 1}] * 2),
    ("benchmark.dataset", "x"), ("benchmark.backend", "http"), ("benchmark.thinking_mode", "maybe"),
    ("benchmark.thinking_mode", "on"), ("benchmark.fresh_launch_per_repeat", "maybe"),
    ("tags", ["日本"]), ("priority", 1000), ("colour", "blue"), ("server_args", {"--tp": 1}),
]
# What must never reach a person: a pattern's metacharacters, or pydantic's own English.
RAW = re.compile(r"\^\[|\]\{|\$$|\\\.|\{0,|Input should|String should|List should|Value error|valid (integer|string|"
                 r"number|boolean)|Extra inputs|Field required")
JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


def _with_value(path: str, value: object) -> dict[str, Any]:
    plan = copy.deepcopy(FORM_PLAN)
    *parents, last = path.split(".")
    node = plan
    for key in parents:
        node = node[key]
    node[last] = value
    return plan


def test_the_form_plan_is_valid() -> None:
    assert plan_from_mapping(FORM_PLAN).name == "base"


@pytest.mark.parametrize(("path", "value"), INVALID, ids=[f"{p}={v!r}"[:40] for p, v in INVALID])
def test_every_refusal_is_a_sentence_in_the_pages_language(path: str, value: object) -> None:
    with pytest.raises(PlanError) as info:
        plan_from_mapping(_with_value(path, value))
    japanese = readable_problems(info.value.problems, "ja")
    english = readable_problems(info.value.problems, "en")
    assert japanese and len(japanese) == len(english)
    for line in japanese:
        assert JAPANESE.search(line) and line.endswith("。"), line
        assert not RAW.search(line), line
    for line in english:
        assert line.endswith(".") and not RAW.search(line), line
