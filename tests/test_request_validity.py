"""Real-host fidelity of requests: the served model's tokenizer, distinct random-ids
prompts, the emulator's SSE refusal of an over-long input (as SGLang 0.5.23 streams it),
and the context-length pre-check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import requests

from domain.core.settings import get_settings
from domain.flags.schema import SCHEMA_DIR
from domain.plan.checks import check_plan, context_length, context_length_errors
from domain.plan.run_plan import RunPlan
from emulator.build_tokenizer import VOCAB_SIZE, build
from emulator.testing import running_emulator
from runner.bench_client import TokenizerUnavailable, bench_tokenizer
from runner.sglang_side.bench_driver import distinct_starts
from tests.support.runner_harness import small_plan


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tokenizer")
    build(directory)
    return directory


def _plan(scenario: tuple[int, int], **server_args: object) -> RunPlan:
    isl, osl = scenario
    return small_plan(server_args={"mem-fraction-static": 0.85, **server_args},
                      benchmark={"scenarios": [{"name": "big", "input_len": isl, "output_len": osl}],
                                 "concurrency": [1]})


# -- distinct random-ids starts ----------------------------------------------------------------
def test_repeated_starts_move_to_the_next_unused_id() -> None:
    assert distinct_starts([5, 9, 5, 6, 5], vocab_size=100) == ([5, 9, 6, 7, 8], 3)
    assert distinct_starts([99, 99], vocab_size=100) == ([99, 0], 1)  # wraps around the vocab


def test_starts_repeat_only_once_the_vocab_is_exhausted() -> None:
    starts, moved = distinct_starts([0] * 5, vocab_size=3)
    assert sorted(set(starts)) == [0, 1, 2] and moved == 2


# -- the bench client's tokenizer ----------------------------------------------------------------
def test_emulated_runs_use_the_toy_tokenizer(tokenizer_dir: Path) -> None:
    chosen = bench_tokenizer(small_plan(), tokenizer_dir)
    assert (chosen.source, chosen.path, chosen.vocab_size) == ("toy", tokenizer_dir, VOCAB_SIZE)
    assert len(chosen.sha256) == 12 and chosen.condition()["vocab_size"] == VOCAB_SIZE


def test_a_real_engine_uses_the_served_models_tokenizer(tokenizer_dir: Path, tmp_path: Path) -> None:
    model = tmp_path / "Qwen3-30B-A3B"
    shutil.copytree(tokenizer_dir, model)
    plan = small_plan(engine="sglang", model=str(model))
    chosen = bench_tokenizer(plan, Path("/nonexistent/toy"))
    assert (chosen.source, chosen.path) == ("model-path", model)
    own = tmp_path / "tok"
    shutil.copytree(tokenizer_dir, own)
    (own / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    other = bench_tokenizer(small_plan(engine="sglang", model=str(model), server_args={"tokenizer-path": str(own)}),
                            Path("/nonexistent/toy"))
    assert other.source == "tokenizer-path" and other.path == own and other.sha256 != chosen.sha256


@pytest.mark.parametrize("model", ["Qwen/Qwen3-30B-A3B", "/models/none/Qwen3-30B-A3B"])
def test_a_real_engine_without_a_local_tokenizer_is_refused(model: str, tokenizer_dir: Path) -> None:
    with pytest.raises(TokenizerUnavailable, match="nothing is downloaded"):
        bench_tokenizer(small_plan(engine="sglang", model=model), tokenizer_dir)


# -- the context-length pre-check ---------------------------------------------------------------
def test_context_length_comes_from_the_flag_else_the_preset() -> None:
    assert context_length(_plan((10, 10))) == (40_960, "Qwen/Qwen3-30B-A3B")
    assert context_length(_plan((10, 10), **{"context-length": 4096})) == (4096, "--context-length")
    assert context_length(small_plan(model="/models/some-other-model")) is None


@pytest.mark.parametrize(("scenario", "refused"), [((40_000, 960), False), ((40_000, 961), True),
                                                   ((40_960, 1), True), ((128, 128), False)])
def test_isl_plus_osl_past_the_context_is_an_error(scenario: tuple[int, int], refused: bool) -> None:
    assert bool(context_length_errors(_plan(scenario), "en")) is refused


def test_the_error_is_in_both_languages_and_blocks_the_plan() -> None:
    plan = _plan((200, 100), **{"context-length": 256})
    report = check_plan(plan, get_settings(), "en")
    assert not report.ok
    [error] = [e for e in report.errors if "context length" in e]
    assert "300" in error and "256" in error and error in report.detail
    [ja] = context_length_errors(plan, "ja")
    assert "コンテキスト長 256" in ja


# -- the emulator refuses as SGLang does ----------------------------------------------------------
def test_over_long_streaming_generate_is_an_sse_error_after_200(tokenizer_dir: Path, tmp_path: Path) -> None:
    args = ["--model-path", "Qwen/Qwen3-30B-A3B", "--emulate-schema-dir", str(SCHEMA_DIR), "--emulate-startup-s",
            "0.4", "--emulate-tokenizer-dir", str(tokenizer_dir), "--context-length", "256"]
    body = {"input_ids": list(range(200)), "sampling_params": {"max_new_tokens": 100}, "stream": True}
    with running_emulator(args, tmp_path / "server.log") as emulator:
        streamed = requests.post(emulator.base_url + "/generate", json=body, timeout=30)
        plain = requests.post(emulator.base_url + "/generate", json={**body, "stream": False}, timeout=30)
        completion = requests.post(emulator.base_url + "/v1/completions", timeout=30, json={
            "prompt": list(range(200)), "max_tokens": 100, "stream": True})
        fits = requests.post(emulator.base_url + "/generate", timeout=30,
                             json={**body, "sampling_params": {"max_new_tokens": 56}})
    assert streamed.status_code == 200
    events = streamed.content.decode().split("\n\n")
    assert events[1:] == ["data: [DONE]", ""]
    error = json.loads(events[0].removeprefix("data: "))["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == 400 and error["retryable"] is False
    assert error["message"].startswith("Requested token count exceeds the model's maximum context length of 256")
    # Not streamed, and the OpenAI route (it validates before sending 200): a 400, as in 0.5.23.
    assert plain.status_code == 400 and "context length" in plain.json()["error"]["message"]
    assert completion.status_code == 400 and completion.json()["object"] == "error"
    assert fits.status_code == 200 and '"completion_tokens":56' in fits.text
