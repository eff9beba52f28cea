"""The quality probe against real emulator processes: outputs and log-probabilities in
SGLang's shapes, verdicts for a lossless twin and an FP8 KV cache, a 200-item synthetic
eval set whose paired interval tells a 10-point gap from none, and speculative acceptance."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from domain.flags.schema import SCHEMA_DIR
from domain.plan.run_plan import RunPlan
from domain.results.quality import compare_quality
from emulator.build_tokenizer import build
from emulator.testing import EmulatorProcess, running_emulator
from runner.quality_probe import ProbeClient, load_tokenizer, run_probe

pytestmark = pytest.mark.timeout(900)  # four emulators and ~10 probes; wall time depends on the load
MODEL = ["--model-path", "Qwen/Qwen3-30B-A3B", "--emulate-schema-dir", str(SCHEMA_DIR), "--emulate-startup-s", "0.3"]
CONFIGS = {
    "base": [],
    "fp8": ["--kv-cache-dtype", "fp8_e4m3"],
    "awq": ["--quantization", "awq"],  # the emulator's 10-point accuracy penalty
    "spec": ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/m",
             "--speculative-num-draft-tokens", "4"],
}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tokenizer")
    build(directory)
    return directory


@pytest.fixture(scope="module")
def servers(tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, EmulatorProcess]]:
    logs = tmp_path_factory.mktemp("emulators")
    with running_emulator([*MODEL, "--emulate-tokenizer-dir", str(tokenizer_dir), *CONFIGS["base"]],
                          logs / "base.log") as base, \
         running_emulator([*MODEL, "--emulate-tokenizer-dir", str(tokenizer_dir), *CONFIGS["fp8"]],
                          logs / "fp8.log") as fp8, \
         running_emulator([*MODEL, "--emulate-tokenizer-dir", str(tokenizer_dir), *CONFIGS["awq"]],
                          logs / "awq.log") as awq, \
         running_emulator([*MODEL, "--emulate-tokenizer-dir", str(tokenizer_dir), *CONFIGS["spec"]],
                          logs / "spec.log") as spec:
        yield {"base": base, "fp8": fp8, "awq": awq, "spec": spec}


@pytest.fixture(scope="module")
def eval_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 synthetic arithmetic items (the emulator's toy task), seeded."""
    rng = random.Random(7)
    path = tmp_path_factory.mktemp("eval") / "arith.jsonl"
    lines = []
    for index in range(200):
        a, b = rng.randrange(10, 999), rng.randrange(10, 999)
        lines.append(json.dumps({"id": f"q{index}", "prompt": f"What is {a} + {b}? Reply with the number.",
                                 "answer": str(a + b)}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _plan(quality: dict[str, Any]) -> RunPlan:
    return RunPlan.model_validate({"name": "q", "engine": "emulator", "model": "Qwen/Qwen3-30B-A3B",
                                   "gpu": {"type": "H200", "count": 1}, "quality": quality})


def _probe(server: EmulatorProcess, tokenizer_dir: Path, quality: dict[str, Any],
           reference: tuple[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    return run_probe(_plan(quality), ProbeClient(server.base_url), load_tokenizer(tokenizer_dir), reference)


def test_generate_returns_sglangs_logprob_fields(servers: dict[str, EmulatorProcess]) -> None:
    url = servers["base"].base_url + "/generate"
    body = {"input_ids": [11, 12, 13, 14], "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 1,
            "sampling_params": {"temperature": 0, "max_new_tokens": 5, "ignore_eos": True}}
    meta = requests.post(url, json=body, timeout=30).json()["meta_info"]
    assert meta["input_token_logprobs"][0] == [None, 11, None]  # the first prompt token has none
    assert len(meta["input_token_logprobs"]) == 4 and meta["input_top_logprobs"][0] is None
    assert len(meta["output_token_logprobs"]) == meta["output_token_logprobs_length"] == 5
    assert all(entry[0] <= 0 for entry in meta["output_token_logprobs"])
    again = requests.post(url, json=body, timeout=30).json()["meta_info"]
    assert again["output_token_logprobs"] == meta["output_token_logprobs"]  # deterministic alone


def test_a_twin_is_the_same_and_fp8_kv_changes_the_outputs(servers: dict[str, EmulatorProcess],
                                                            tokenizer_dir: Path) -> None:
    quality = {"prompts": 32, "output_len": 64, "concurrency": 8}
    baseline = _probe(servers["base"], tokenizer_dir, quality)
    twin = _probe(servers["base"], tokenizer_dir, quality, (1, baseline))
    fp8 = _probe(servers["fp8"], tokenizer_dir, quality, (1, baseline))
    same, changed = compare_quality(2, twin, 1, baseline), compare_quality(3, fp8, 1, baseline)
    assert same.verdict == "same", same
    assert changed.verdict == "changed", changed
    assert same.dlogprob_method == changed.dlogprob_method == "teacher-forced"
    assert changed.exact_match is not None and same.exact_match is not None
    assert changed.exact_match < same.exact_match and changed.first_divergence_median is not None
    assert changed.mean_abs_dlogprob is not None and same.mean_abs_dlogprob is not None
    assert changed.mean_abs_dlogprob > 3 * same.mean_abs_dlogprob
    assert changed.top_changed is not None and changed.top_changed > 0


def test_paired_interval_tells_ten_points_from_none(servers: dict[str, EmulatorProcess], tokenizer_dir: Path,
                                                   eval_set: Path) -> None:
    quality = {"prompts": 2, "output_len": 4, "concurrency": 32,
               "eval": {"path": str(eval_set), "scorer": "numeric", "max_new_tokens": 8}}
    base = _probe(servers["base"], tokenizer_dir, quality)
    awq = _probe(servers["awq"], tokenizer_dir, quality)
    spec = _probe(servers["spec"], tokenizer_dir, quality)
    lower, equal = compare_quality(2, awq, 1, base), compare_quality(3, spec, 1, base)
    assert lower.accuracy is not None and equal.accuracy is not None
    assert lower.accuracy_difference is not None and equal.accuracy_difference is not None
    assert base["eval"]["n"] == 200
    assert lower.accuracy_difference["difference_high"] < 0  # the 10-point loss: the interval excludes 0
    assert equal.accuracy_difference["difference_low"] < 0 < equal.accuracy_difference["difference_high"]


def test_speculative_acceptance_depends_on_the_prompts_and_can_be_pinned(
        servers: dict[str, EmulatorProcess], tokenizer_dir: Path, tmp_path: Path) -> None:
    def accept_length(url: str, ids: list[int]) -> float:
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}}
        return float(requests.post(url + "/generate", json=body, timeout=30).json()["meta_info"]["spec_accept_length"])

    tokenizer = load_tokenizer(tokenizer_dir)
    text = tokenizer.encode("the house of the people was near the water and the light", add_special_tokens=False).ids
    noise = random.Random(1).sample(range(tokenizer.get_vocab_size() // 2, tokenizer.get_vocab_size()), 12)
    url = servers["spec"].base_url
    assert accept_length(url, text) > accept_length(url, noise) + 1  # random ids: nothing to draft from
    info = requests.get(url + "/server_info", timeout=30).json()["internal_states"][0]
    assert info["avg_spec_accept_length"] > 1
    args = [*MODEL, "--emulate-tokenizer-dir", str(tokenizer_dir), *CONFIGS["spec"]]
    with running_emulator(args, tmp_path / "pinned.log", env={"SGLANG_SIMULATE_ACC_LEN": "2"}) as pinned:
        assert accept_length(pinned.base_url, text) == pytest.approx(2.0, abs=0.1)


def test_vllm_emulator_returns_openai_logprobs(tokenizer_dir: Path, tmp_path: Path) -> None:
    args = ["--emulate-engine", "vllm", "--model", "Qwen/Qwen3-30B-A3B", "--emulate-startup-s", "0.3",
            "--kv-cache-dtype", "fp8", "--emulate-tokenizer-dir", str(tokenizer_dir)]
    with running_emulator(args, tmp_path / "vllm.log") as vllm:
        body = {"model": "Qwen/Qwen3-30B-A3B", "prompt": [11, 12, 13], "max_tokens": 6, "ignore_eos": True,
                "temperature": 0, "logprobs": 1}
        choice = requests.post(vllm.base_url + "/v1/completions", json=body, timeout=30).json()["choices"][0]
        logprobs = choice["logprobs"]
        assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == len(logprobs["text_offset"]) == 6
        assert "".join(logprobs["tokens"]) == choice["text"] and all(lp <= 0 for lp in logprobs["token_logprobs"])
        chat = {"model": "Qwen/Qwen3-30B-A3B", "messages": [{"role": "user", "content": "What is 2 + 3?"}],
                "max_tokens": 8, "temperature": 0, "logprobs": True}
        message = requests.post(vllm.base_url + "/v1/chat/completions", json=chat, timeout=30).json()["choices"][0]
        assert message["logprobs"]["content"] and message["message"]["content"].strip().lstrip("-").isdigit()
