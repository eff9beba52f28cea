"""The real bench_serving client (SGLang 0.5.23, its own venv) against the emulator.

One emulator, one client process for the whole quick-preset sweep (128/128 at concurrency
1, 2, 4, 8): the client's ~10 s of imports are paid once, and each point calls the
client's own ``cli_main`` with the same argv as ``python -m sglang.bench_serving``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import requests

from domain.flags.schema import SCHEMA_DIR
from emulator import Prediction, predict
from emulator.build_tokenizer import build
from emulator.testing import running_emulator

REPO_ROOT = Path(__file__).resolve().parents[1]
SGLANG_PYTHON = REPO_ROOT / ".venv-sglang" / "bin" / "python"
EMULATOR_ARGS = ["--model-path", "Qwen/Qwen3-30B-A3B", "--emulate-schema-dir", str(SCHEMA_DIR),
                 "--max-running-requests", "4", "--emulate-startup-s", "0.5"]
POINTS = {1: 4, 2: 6, 4: 12, 8: 16}  # concurrency → prompts: 2-4 rounds, a few seconds each
TOLERANCE = 0.15

pytestmark = [
    pytest.mark.sglang,
    pytest.mark.skipif(not SGLANG_PYTHON.exists(), reason="needs the SGLang environment (.venv-sglang)"),
]

DRIVER = """
import json, sys, time
from sglang.benchmark.serving import cli_main
for argv in json.loads(sys.argv[1]):
    sys.argv = ["bench_serving", *argv]
    wall, cpu = time.perf_counter(), time.process_time()
    cli_main()
    print("BENCH_POINT " + json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}),
          flush=True)
"""


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tokenizer")
    build(directory)
    return directory


def _sglang(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([str(SGLANG_PYTHON), *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False, start_new_session=True)


def test_transformers_loads_the_local_tokenizer(tokenizer_dir: Path) -> None:
    code = (
        "import sys; from transformers import AutoTokenizer\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "ids = t.encode('the model server decodes 42 tokens.', add_special_tokens=False)\n"
        "assert t.decode(ids) == 'the model server decodes 42 tokens.', t.decode(ids)\n"
        "assert t.eos_token == '<|endoftext|>' and t.bos_token == '<|startoftext|>'\n"
        "print(t.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=False, add_generation_prompt=True))"
    )
    done = _sglang(["-c", code, str(tokenizer_dir)], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "<|im_start|>assistant" in done.stdout


def _bench_argv(base_url: str, tokenizer_dir: Path, concurrency: int, prompts: int, out: Path) -> list[str]:
    return ["--backend", "sglang", "--base-url", base_url, "--tokenizer", str(tokenizer_dir),
            "--dataset-name", "random-ids", "--random-input-len", "128", "--random-output-len", "128",
            "--random-range-ratio", "1.0", "--num-prompts", str(prompts), "--max-concurrency", str(concurrency),
            "--tokenize-prompt", "--warmup-requests", "1", "--flush-cache", "--disable-tqdm",
            "--output-file", str(out)]


def _record(path: Path) -> dict[str, Any]:
    # bench_serving writes a bare Infinity for request_rate, which is not JSON.
    return json.loads(path.read_text().strip().splitlines()[-1].replace("Infinity", "1e999"))


def _diagnosis(emulator_info: dict[str, Any], timings: list[dict[str, float]], duration: float) -> str:
    lag = emulator_info["emulator"]["lag_seconds"]
    client_busy = max(t["cpu"] / t["wall"] for t in timings)
    if lag > 0.02 * duration or client_busy > 0.8:
        return (f"the CPU, not the model, set the curve: the emulator's step loop fell {lag:.2f} s behind, "
                f"the bench client used up to {client_busy:.0%} of a core")
    return (f"the CPU kept up: emulator lag {lag:.3f} s, bench client ≤ {client_busy:.0%} of a core, so any "
            "mismatch below is the emulator's own")


def _row(concurrency: int, record: dict[str, Any], model: Prediction) -> str:
    got = record["output_throughput"]
    return (f"  c={concurrency}: measured {got:7.1f} tok/s, predicted {model.output_throughput:7.1f} "
            f"({got / model.output_throughput - 1:+.1%}); TTFT {record['mean_ttft_ms']:.1f} vs "
            f"{model.mean_ttft_ms:.1f} ms; TPOT {record['mean_tpot_ms']:.2f} vs {model.mean_tpot_ms:.2f} ms")


@pytest.mark.slow
def test_real_client_measures_the_model_curve(tokenizer_dir: Path, tmp_path: Path) -> None:
    args = [*EMULATOR_ARGS, "--emulate-tokenizer-dir", str(tokenizer_dir)]
    with running_emulator(args, tmp_path / "emulator.log") as emulator:
        outputs = {c: tmp_path / f"c{c}.jsonl" for c in POINTS}
        points = [_bench_argv(emulator.base_url, tokenizer_dir, c, n, outputs[c]) for c, n in POINTS.items()]
        done = _sglang(["-c", DRIVER, json.dumps(points)], timeout=240)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        info = requests.get(emulator.base_url + "/server_info", timeout=10).json()
    timings = [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("BENCH_POINT")]
    records = {c: _record(path) for c, path in outputs.items()}
    measured = {c: r["output_throughput"] for c, r in records.items()}
    predicted = {c: predict(128, 128, c, EMULATOR_ARGS, num_prompts=n) for c, n in POINTS.items()}
    table = "\n".join(_row(c, records[c], predicted[c]) for c in POINTS)
    why = _diagnosis(info, timings, sum(r["duration"] for r in records.values()))
    print(f"quick preset against the emulator ({why}):\n{table}")

    for c, record in records.items():
        assert record["completed"] == POINTS[c]
        assert record["total_output_tokens_retokenized"] == record["total_output_tokens"] == 128 * POINTS[c]
        assert measured[c] == pytest.approx(predicted[c].output_throughput, rel=TOLERANCE), f"{why}\n{table}"
    assert measured[2] > 1.3 * measured[1] and measured[4] > 1.3 * measured[2], f"no rise: {why}\n{table}"
    assert measured[8] == pytest.approx(measured[4], rel=0.1), f"no plateau at max-running-requests: {why}\n{table}"
    assert info["emulated"] is True
