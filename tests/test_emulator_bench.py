"""The real bench_serving client (SGLang 0.5.23, its own venv) against the emulator.

One emulator, one client process for the whole quick-preset sweep (128/128 at concurrency
1, 2, 4, 8) and a long-prompt point whose rounds prefill in several steps (4000/32 at
concurrency 4 with ``--chunked-prefill-size 2048``: eight steps a round): the client's ~10 s
of imports are paid once, and each point calls the client's own ``cli_main`` with the same
argv as ``python -m sglang.bench_serving``.

Every point's median TPOT, and the median TTFT of the points whose TTFT the model sets
(a multi-step prefill round, or queueing behind max-running-requests), must land within
15 % of the estimator's prediction for the emulator's configuration
(:func:`emulator.steady_state`, i.e. ``domain.estimate.estimator.estimate_point``).  A
128/128 round prefills in one ~26 ms step, and there two things the estimator leaves out
are as large as the step: the HTTP round trip (~15 ms on a busy CI core), and, at c ≥ 2,
the round's first follow-up request reaching an idle engine alone and prefilling in a step
of its own, the others in the next (SGLang 0.5.23 skips the finishing decode,
``enable_skip_finishing_decode`` in scheduler.py's ``event_loop_overlap``, so its engine is
idle there too).  Their TTFT must lie between 0.85× the estimate and 2.3× it (one extra
step, +15 %) plus, for c ≥ 2, the round trip as the c=1 point measured it (its TTFT beyond
the estimate: one request at a time, so nothing but the HTTP and the tokenizer adds to it;
c=1 itself keeps the bound without it, which also caps the round trip at 1.3× the estimate).  Without the
round trip the bound held by 0.06 ms or failed: at c=4, 50.2 ms against 2.3 × 21.8 ms, with
c=1 measuring 25.0 against 21.3 ms.
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
from emulator import Prediction, predict, steady_state
from emulator.build_tokenizer import build
from emulator.testing import running_emulator

REPO_ROOT = Path(__file__).resolve().parents[1]
SGLANG_PYTHON = REPO_ROOT / ".venv-sglang" / "bin" / "python"
MAX_RUNNING, CHUNK = 4, 2048  # a 2048-token chunk leaves the 128/128 rounds (≤ 512 prompt tokens) in one step
EMULATOR_ARGS = ["--model-path", "Qwen/Qwen3-30B-A3B", "--emulate-schema-dir", str(SCHEMA_DIR),
                 "--max-running-requests", str(MAX_RUNNING), "--emulate-startup-s", "0.5",
                 "--chunked-prefill-size", str(CHUNK)]
POINTS = {1: 4, 2: 6, 4: 12, 8: 16}  # concurrency → prompts: 2-4 rounds, a few seconds each
LONG = (4000, 32, 4, 8)  # ISL, OSL, concurrency, prompts: 2 rounds of 8 prefill steps, ~3 s
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


def _bench_argv(base_url: str, tokenizer_dir: Path, concurrency: int, prompts: int, out: Path,
                isl: int = 128, osl: int = 128) -> list[str]:
    return ["--backend", "sglang", "--base-url", base_url, "--tokenizer", str(tokenizer_dir),
            "--dataset-name", "random-ids", "--random-input-len", str(isl), "--random-output-len", str(osl),
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


Point = tuple[int, int, int, int]  # ISL, OSL, concurrency, prompts
SWEEP: list[Point] = [(128, 128, c, n) for c, n in POINTS.items()] + [LONG]


def _row(point: Point, record: dict[str, Any], model: Prediction, estimate: dict[str, Any]) -> str:
    isl, osl, c, _ = point
    got = record["output_throughput"]
    return (f"  {isl}/{osl} c={c}: measured {got:7.1f} tok/s, replayed {model.output_throughput:7.1f} "
            f"({got / model.output_throughput - 1:+.1%}); median TTFT {record['median_ttft_ms']:7.1f} vs estimated "
            f"{estimate['ttft_ms']:7.1f} ms; median TPOT {record['median_tpot_ms']:6.2f} vs estimated "
            f"{estimate['tpot_ms']:6.2f} ms")


def _ttft_set_by_the_model(point: Point) -> bool:
    """Several prefill steps a round, or requests queued behind max-running-requests."""
    isl, _, concurrency, _ = point
    return isl * min(concurrency, MAX_RUNNING) > CHUNK or concurrency > MAX_RUNNING


@pytest.mark.slow
def test_real_client_measures_the_model_curve(tokenizer_dir: Path, tmp_path: Path) -> None:
    args = [*EMULATOR_ARGS, "--emulate-tokenizer-dir", str(tokenizer_dir)]
    outputs = {point: tmp_path / "{}_{}_c{}.jsonl".format(*point) for point in SWEEP}
    with running_emulator(args, tmp_path / "emulator.log") as emulator:
        argvs = [_bench_argv(emulator.base_url, tokenizer_dir, c, n, outputs[(isl, osl, c, n)], isl, osl)
                 for isl, osl, c, n in SWEEP]
        done = _sglang(["-c", DRIVER, json.dumps(argvs)], timeout=240)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        info = requests.get(emulator.base_url + "/server_info", timeout=10).json()
    timings = [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("BENCH_POINT")]
    records = {point: _record(path) for point, path in outputs.items()}
    replayed = {(isl, osl, c, n): predict(isl, osl, c, EMULATOR_ARGS, num_prompts=n) for isl, osl, c, n in SWEEP}
    estimated = {(isl, osl, c, n): steady_state(isl, osl, c, EMULATOR_ARGS) for isl, osl, c, n in SWEEP}
    table = "\n".join(_row(p, records[p], replayed[p], estimated[p]) for p in SWEEP)
    why = _diagnosis(info, timings, sum(r["duration"] for r in records.values()))
    print(f"quick preset and a multi-step-prefill point against the emulator ({why}):\n{table}")

    lone = (128, 128, 1, POINTS[1])
    round_trip = max(0.0, records[lone]["median_ttft_ms"] - estimated[lone]["ttft_ms"])
    for point, record in records.items():
        _, osl, _, prompts = point
        assert record["completed"] == prompts
        assert record["total_output_tokens_retokenized"] == record["total_output_tokens"] == osl * prompts
        assert record["output_throughput"] == pytest.approx(replayed[point].output_throughput, rel=TOLERANCE), \
            f"{why}\n{table}"
        estimate = estimated[point]
        assert record["median_tpot_ms"] == pytest.approx(estimate["tpot_ms"], rel=TOLERANCE), f"{point}: {why}\n{table}"
        if _ttft_set_by_the_model(point):
            assert record["median_ttft_ms"] == pytest.approx(estimate["ttft_ms"], rel=TOLERANCE), \
                f"{point}: {why}\n{table}"
        else:
            assert (1 - TOLERANCE) * estimate["ttft_ms"] <= record["median_ttft_ms"] \
                <= 2 * (1 + TOLERANCE) * estimate["ttft_ms"] + (0 if point == lone else round_trip), \
                f"{point}: {why}\n{table}"
    measured = {c: records[(128, 128, c, n)]["output_throughput"] for c, n in POINTS.items()}
    assert measured[2] > 1.3 * measured[1] and measured[4] > 1.3 * measured[2], f"no rise: {why}\n{table}"
    assert measured[8] == pytest.approx(measured[4], rel=0.1), f"no plateau at max-running-requests: {why}\n{table}"
    assert info["emulated"] is True
