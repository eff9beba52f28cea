"""The emulator's vLLM personality as a real subprocess: readiness, endpoints, metrics, log
lines, flag refusal, a fatal start-up, engine death, and the real SGLang bench client with
``--backend vllm`` against it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from emulator.build_tokenizer import build
from emulator.testing import PACKAGE_PARENT, EmulatorProcess, free_port, http_status, running_emulator
from emulator.vllm_startup import BANNER

REPO_ROOT = Path(__file__).resolve().parents[1]
SGLANG_PYTHON = REPO_ROOT / ".venv-sglang" / "bin" / "python"
MODEL = "Qwen/Qwen3-30B-A3B"
SERVED = "emulated-qwen"
VLLM = ["--emulate-engine", "vllm", "--model", MODEL, "--emulate-startup-s", "0.3"]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tokenizer")
    build(directory)
    return directory


@pytest.fixture(scope="module")
def server(tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    args = [*VLLM, "--served-model-name", SERVED, "--max-num-seqs", "4", "--emulate-tokenizer-dir", str(tokenizer_dir)]
    with running_emulator(args, log) as proc:
        yield proc


def _run_emulator(args: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    port = str(free_port())
    return subprocess.run([sys.executable, "-m", "emulator", "--host", "127.0.0.1", "--port", port, *args],
                          cwd=PACKAGE_PARENT, capture_output=True, text=True, timeout=timeout, check=False)


def _events(response: requests.Response) -> list[Any]:
    body = response.content.decode()
    assert body.endswith("data: [DONE]\n\n"), body[-200:]
    return [json.loads(e.removeprefix("data: ")) for e in body.split("\n\n")[:-2]]


# -- start-up ----------------------------------------------------------------------------------
def test_startup_lines_in_vllm_order(server: EmulatorProcess) -> None:
    log = server.log()
    assert log.splitlines()[0] == BANNER
    order = [f"[startup.py:39] vLLM server version 0.33.0, serving model {MODEL}", "non-default args: {",
             f"Starting to load model {MODEL}...", "Loading weights took ", "Model loading took ",
             "Available KV cache memory: ", "GPU KV cache size: ", "Graph capturing finished in ",
             "init engine (profile, create kv cache, warmup model) took ", "Supported tasks: ['generate']",
             f"Starting vLLM server on http://127.0.0.1:{server.port}", "Available routes are:",
             "INFO:     Application startup complete."]
    positions = [log.index(marker) for marker in order]
    assert positions == sorted(positions)
    kv = next(line for line in log.splitlines() if "GPU KV cache size:" in line)
    assert "tokens, Maximum concurrency for 40,960 tokens per request: " in kv and kv.endswith("x")
    assert "(EngineCore pid=" in kv and "[kv_cache_utils.py:1148]" in kv


def test_port_refuses_connections_until_the_engine_is_ready(tokenizer_dir: Path, tmp_path: Path) -> None:
    args = [*VLLM, "--emulate-tokenizer-dir", str(tokenizer_dir), "--emulate-fault", "never-ready"]
    with running_emulator(args, tmp_path / "log", ready=False) as proc:
        deadline = time.monotonic() + 20
        while "Graph capturing finished" not in proc.log():
            assert time.monotonic() < deadline and proc.alive(), proc.log()
            time.sleep(0.1)
        with pytest.raises(ConnectionRefusedError), socket.create_connection((proc.host, proc.port), timeout=2):
            pass  # bound, not listening: vLLM's setup_server before the engine exists
        assert http_status(proc.base_url + "/v1/models") is None
        assert "Application startup complete." not in proc.log()


# -- endpoints ---------------------------------------------------------------------------------
def test_information_endpoints(server: EmulatorProcess) -> None:
    url = server.base_url
    health = requests.get(url + "/health", timeout=5)
    assert (health.status_code, health.content) == (200, b"")
    assert requests.post(url + "/ping", timeout=5).status_code == 200
    assert requests.get(url + "/version", timeout=5).json() == {"version": "0.33.0"}
    assert requests.get(url + "/load", timeout=5).json() == {"server_load": 0}
    models = requests.get(url + "/v1/models", timeout=5).json()
    card = models["data"][0]
    assert models["object"] == "list" and card["id"] == SERVED and card["root"] == MODEL
    assert (card["owned_by"], card["max_model_len"], card["parent"]) == ("vllm", 40960, None)
    assert card["permission"][0]["object"] == "model_permission"
    for path in ("/flush_cache", "/get_server_info", "/server_info", "/model_info"):
        response = requests.get(url + path, timeout=5)
        assert (response.status_code, response.json()) == (404, {"detail": "Not Found"}), path


def test_completion_stream_in_vllm_sse_format(server: EmulatorProcess) -> None:
    body = {"model": SERVED, "prompt": "the model server", "max_tokens": 5, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    events = _events(requests.post(server.base_url + "/v1/completions", json=body, timeout=30))
    *tokens, usage = events
    assert [e["object"] for e in tokens] == ["text_completion"] * 5
    assert [e["choices"][0]["finish_reason"] for e in tokens] == [None] * 4 + ["length"]
    assert all(e["model"] == SERVED and e["choices"][0]["stop_reason"] is None for e in tokens)
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 5


def test_chat_stream_and_unknown_model(server: EmulatorProcess) -> None:
    body = {"model": SERVED, "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 3,
            "stream": True, "ignore_eos": True}
    events = _events(requests.post(server.base_url + "/v1/chat/completions", json=body, timeout=30))
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    assert events[-1]["choices"][0]["finish_reason"] == "length" and "usage" not in events[-1]
    wrong = requests.post(server.base_url + "/v1/completions", json={"model": "nope", "prompt": "x"}, timeout=10)
    assert wrong.status_code == 404
    assert wrong.json()["error"] == {"message": f"The model `nope` does not exist. Valid aliases: {SERVED}.",
                                     "type": "NotFoundError", "param": "model", "code": 404}


def test_metrics_have_vllm_names_and_labels(server: EmulatorProcess) -> None:
    body = {"model": SERVED, "prompt": "count me", "max_tokens": 4, "ignore_eos": True}
    assert requests.post(server.base_url + "/v1/completions", json=body, timeout=30).status_code == 200
    text = requests.get(server.base_url + "/metrics", timeout=5).text
    labels = f'{{engine="0",model_name="{SERVED}"}}'
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line and not line.startswith("#")}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:num_preemptions_total", "vllm:prompt_tokens_created"):
        assert name + labels in samples, name
    assert samples["vllm:generation_tokens_total" + labels] >= 4
    assert "# TYPE vllm:prompt_tokens_total counter" in text and "# TYPE vllm:kv_cache_usage_perc gauge" in text
    assert "vllm:time_to_first_token_seconds_bucket" in text and "sglang:" not in text


# -- refusals and failures ---------------------------------------------------------------------
def test_unknown_flag_exits_2_with_the_nearest_name() -> None:
    done = _run_emulator([*VLLM, "--max-num-seq", "8"])
    assert done.returncode == 2
    assert "usage: vllm serve [model_tag] [options]" in done.stderr
    assert "vllm serve: error: unrecognized arguments: --max-num-seq 8" in done.stderr
    assert "--max-num-seq → --max-num-seqs" in done.stderr


def test_fatal_kv_fault_prints_vllm_lines_and_exits_1(tokenizer_dir: Path) -> None:
    done = _run_emulator([*VLLM, "--emulate-tokenizer-dir", str(tokenizer_dir),
                          "--emulate-fault", "fatal-at-startup=oom-kv"])
    assert done.returncode == 1, done.stderr[-2000:]
    assert "ERROR" in done.stderr and "[core.py:1584] EngineCore failed to start." in done.stderr
    assert "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`" \
        in done.stderr
    assert ("RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {'EngineCore': 1}") in done.stderr
    assert "Application startup complete." not in done.stderr


def test_v0112_wording_dev_mode_and_engine_death(tokenizer_dir: Path, tmp_path: Path) -> None:
    args = ["--emulate-engine", "vllm", "--emulate-vllm-version", "0.11.2", MODEL, "--emulate-startup-s", "0.3",
            "--enforce-eager", "--emulate-tokenizer-dir", str(tokenizer_dir), "--emulate-fault",
            "crash-after-requests=1"]
    env = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "1"}
    with running_emulator(args, tmp_path / "log", env=env) as proc:
        log = proc.log()
        assert "[api_server.py:1977] vLLM API server version 0.11.2" in log
        assert f"Starting vLLM API server 0 on http://127.0.0.1:{proc.port}" in log
        assert "GPU KV cache size: " in log and "Maximum concurrency for 40,960 tokens per request: " in log
        assert "Graph capturing finished" not in log  # --enforce-eager
        assert "(APIServer pid=" in log.split("Application startup complete.")[0].splitlines()[-1]
        info = requests.get(proc.base_url + "/server_info", timeout=5).json()
        assert info["emulated"] is True and "vllm_config" in info
        body = {"prompt": "one", "max_tokens": 2}
        assert requests.post(proc.base_url + "/v1/completions", json=body, timeout=30).status_code == 200
        assert requests.post(proc.base_url + "/v1/completions", json=body, timeout=30).status_code == 500
        assert http_status(proc.base_url + "/health") == 503
        assert "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client." in proc.log()


# -- the real client ---------------------------------------------------------------------------
@pytest.mark.sglang
@pytest.mark.skipif(not SGLANG_PYTHON.exists(), reason="needs the SGLang environment (.venv-sglang)")
def test_sglang_bench_client_with_vllm_backend(server: EmulatorProcess, tokenizer_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.jsonl"
    argv = ["-m", "sglang.bench_serving", "--backend", "vllm", "--base-url", server.base_url, "--tokenizer",
            str(tokenizer_dir), "--dataset-name", "random-ids", "--random-input-len", "32", "--random-output-len",
            "16", "--random-range-ratio", "1.0", "--num-prompts", "4", "--max-concurrency", "2", "--disable-tqdm",
            "--output-file", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([str(SGLANG_PYTHON), *argv], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads(out.read_text().strip().splitlines()[-1].replace("Infinity", "1e999"))
    assert (record["backend"], record["completed"], record["total_output_tokens"]) == ("vllm", 4, 64)
    assert record["server_info"] is None  # vLLM has no /server_info outside dev mode
