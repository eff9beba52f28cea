"""The emulator as a real subprocess: endpoints, SSE format, readiness, failures and faults."""

from __future__ import annotations

import itertools
import json
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from domain.flags.schema import SCHEMA_DIR
from emulator.build_tokenizer import build
from emulator.startup import BANNER
from emulator.testing import EmulatorProcess, http_status, running_emulator, start_emulator
from emulator.tokens import TokenText

MODEL = ["--model-path", "Qwen/Qwen3-30B-A3B", "--emulate-schema-dir", str(SCHEMA_DIR)]
FAST = ["--emulate-startup-s", "0.4"]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tokenizer")
    build(directory)
    return directory


@pytest.fixture(scope="module")
def emulator(tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    log = tmp_path_factory.mktemp("emulator") / "server.log"
    args = [*MODEL, *FAST, "--enable-metrics", "--emulate-tokenizer-dir", str(tokenizer_dir)]
    with running_emulator(args, log) as proc:
        yield proc


def _args(tokenizer_dir: Path, *extra: str) -> list[str]:
    return [*MODEL, *FAST, "--emulate-tokenizer-dir", str(tokenizer_dir), *extra]


def _sse(response: requests.Response) -> list[str]:
    """The ``data:`` payloads of an SSE response, checking the framing on the way."""
    body = response.content.decode()
    events = body.split("\n\n")
    assert events[-1] == "", "every event ends with a blank line"
    payloads = []
    for event in events[:-1]:
        assert event.startswith("data: "), event
        payloads.append(event[len("data: "):])
    return payloads


def _post(emulator: EmulatorProcess, path: str, body: dict[str, Any], **kwargs: Any) -> requests.Response:
    return requests.post(emulator.base_url + path, json=body, timeout=30, **kwargs)


# -- start-up ----------------------------------------------------------------------------------
def test_startup_lines_in_sglang_order(emulator: EmulatorProcess) -> None:
    log = emulator.log()
    assert log.splitlines()[0] == BANNER
    order = ["Load weight begin. avail mem=", "Load weight end. elapsed=", "KV Cache is allocated. dtype:",
             "Memory pool end.", "Capture target decode CUDA graph begin.", "Capture target decode CUDA graph end.",
             "max_total_num_tokens=", "Emulated HTTP server listening", "The server is fired up and ready to roll!"]
    positions = [log.index(marker) for marker in order]
    assert positions == sorted(positions)
    summary = next(line for line in log.splitlines() if "max_total_num_tokens=" in line)
    for key in ("chunked_prefill_size=", "max_prefill_tokens=", "max_running_requests=", "context_len=",
                "available_gpu_mem="):
        assert key in summary


def test_v1_models_answers_before_health(tokenizer_dir: Path, tmp_path: Path) -> None:
    with running_emulator(_args(tokenizer_dir, "--emulate-fault", "never-ready"), tmp_path / "log",
                          ready=False) as proc:
        proc.wait_for("/v1/models", 200)
        for path in ("/health", "/health_generate", "/ready"):
            assert http_status(proc.base_url + path) == 503
        time.sleep(1.0)  # longer than the whole start-up budget: still not ready
        assert http_status(proc.base_url + "/health") == 503
        assert "fired up" not in proc.log()
        assert http_status(proc.base_url + "/metrics") == 404  # only with --enable-metrics


# -- generation --------------------------------------------------------------------------------
def test_generate_streams_sglang_sse_chunks(emulator: EmulatorProcess) -> None:
    body = {"input_ids": list(range(100, 164)), "stream": True,
            "sampling_params": {"max_new_tokens": 12, "ignore_eos": True, "temperature": 0.0}}
    response = _post(emulator, "/generate", body)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    payloads = _sse(response)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == list(range(1, 13))
    for previous, current in itertools.pairwise(chunks):
        assert current["text"].startswith(previous["text"])  # cumulative text
        assert current["output_ids"][:-1] == previous["output_ids"]
    last = chunks[-1]
    assert len(last["output_ids"]) == 12
    assert last["meta_info"]["finish_reason"] == {"type": "length", "length": 12}
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    assert last["meta_info"]["prompt_tokens"] == 64
    assert {"id", "cached_tokens", "completion_tokens"} <= last["meta_info"].keys()


def test_generated_text_retokenizes_to_the_same_count(emulator: EmulatorProcess, tokenizer_dir: Path) -> None:
    response = _post(emulator, "/generate", {"text": "How fast is the emulated server?",
                                             "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}})
    out = response.json()
    tokens = TokenText(tokenizer_dir)
    assert out["meta_info"]["prompt_tokens"] == len(tokens.encode("How fast is the emulated server?"))
    assert tokens.encode(out["text"]) == out["output_ids"]
    assert out["meta_info"]["completion_tokens"] == 40


def test_without_ignore_eos_generation_stops_early(emulator: EmulatorProcess, tokenizer_dir: Path) -> None:
    tokens = TokenText(tokenizer_dir)
    prompts = (list(range(start, start + 32)) for start in range(1000))
    prompt = next(p for p in prompts if tokens.natural_length(TokenText.seed(p)) < 40)  # a short test
    natural = tokens.natural_length(TokenText.seed(prompt))
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": natural + 10}}
    meta = _post(emulator, "/generate", body).json()["meta_info"]
    assert meta["completion_tokens"] == natural
    assert meta["finish_reason"]["type"] == "stop"


def test_stream_interval_and_incremental_output(tokenizer_dir: Path, tmp_path: Path) -> None:
    args = _args(tokenizer_dir, "--stream-interval", "4", "--incremental-streaming-output")
    with running_emulator(args, tmp_path / "log") as proc:
        body = {"input_ids": [1, 2, 3], "stream": True, "sampling_params": {"max_new_tokens": 9, "ignore_eos": True}}
        chunks = [json.loads(p) for p in _sse(_post(proc, "/generate", body))[:-1]]
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == [1, 5, 9]
    assert [len(c["output_ids"]) for c in chunks] == [1, 4, 4]  # deltas, not cumulative


def test_openai_completions(emulator: EmulatorProcess) -> None:
    body = {"model": "x", "prompt": "Once upon a time", "max_tokens": 5, "ignore_eos": True}
    plain = _post(emulator, "/v1/completions", body).json()
    assert plain["object"] == "text_completion"
    assert plain["choices"][0]["finish_reason"] == "length"
    assert plain["usage"]["completion_tokens"] == 5
    payloads = _sse(_post(emulator, "/v1/completions", {**body, "stream": True}))
    assert payloads[-1] == "[DONE]"
    texts = [json.loads(p)["choices"][0]["text"] for p in payloads[:-1]]
    assert len(texts) == 5 and "".join(texts) == plain["choices"][0]["text"]


def test_openai_chat_stream_with_usage(emulator: EmulatorProcess) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}}
    chunks = [json.loads(p) for p in _sse(_post(emulator, "/v1/chat/completions", body))[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    contents = [c["choices"][0]["delta"]["content"] for c in chunks[1:-1]]
    assert len(contents) == 4 and all(contents)
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4
    plain = _post(emulator, "/v1/chat/completions", {**body, "stream": False}).json()
    assert plain["object"] == "chat.completion" and plain["choices"][0]["message"]["content"]


def test_bad_requests_are_400(emulator: EmulatorProcess) -> None:
    too_long = {"input_ids": [1] * 40_960, "sampling_params": {"max_new_tokens": 1}}
    response = _post(emulator, "/generate", too_long)
    assert response.status_code == 400 and "context length" in response.text
    response = requests.post(emulator.base_url + "/generate", data=b"{not json", timeout=10)
    assert response.status_code == 400


# -- information and control -------------------------------------------------------------------
def test_models_and_model_info(emulator: EmulatorProcess, tokenizer_dir: Path) -> None:
    models = requests.get(emulator.base_url + "/v1/models", timeout=10).json()
    assert models["data"][0]["id"] == "Qwen/Qwen3-30B-A3B"
    for path in ("/model_info", "/get_model_info"):
        info = requests.get(emulator.base_url + path, timeout=10).json()
        assert info["tokenizer_path"] == str(tokenizer_dir)
        assert info["model_path"] == "Qwen/Qwen3-30B-A3B"


def test_server_info_is_resolved_and_marked_emulated(emulator: EmulatorProcess) -> None:
    for path in ("/server_info", "/get_server_info"):
        info = requests.get(emulator.base_url + path, timeout=10).json()
        assert info["emulated"] is True and info["version"].startswith("emulator-")
        assert info["max_total_num_tokens"] > 100_000
        assert info["chunked_prefill_size"] == 8192 and info["max_running_requests"] == 4096
        assert info["cuda_graph_max_bs_decode"] == 256 and info["mem_fraction_static"] < 1
        assert info["enable_metrics"] is True and info["status"] == "Up"
        memory = info["internal_states"][0]["memory_usage"]
        assert {"weight", "kvcache", "token_capacity"} <= memory.keys()
        assert info["emulator"]["time_scale"] == 1.0


def test_flush_cache_get_and_post(emulator: EmulatorProcess) -> None:
    assert requests.get(emulator.base_url + "/flush_cache", timeout=10).status_code == 200
    response = requests.post(emulator.base_url + "/flush_cache", params={"timeout": 5}, timeout=10)
    assert response.status_code == 200 and "Cache flushed" in response.text


def test_metrics_use_sglang_names(emulator: EmulatorProcess) -> None:
    _post(emulator, "/generate", {"input_ids": [7] * 40, "sampling_params": {"max_new_tokens": 3}})
    text = requests.get(emulator.base_url + "/metrics", timeout=10).text
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:cache_hit_rate",
                 "sglang:gen_throughput", "sglang:num_used_tokens", "sglang:max_total_num_tokens",
                 "sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:num_requests_total",
                 "sglang:time_to_first_token_seconds_bucket", "sglang:inter_token_latency_seconds_bucket",
                 "sglang:e2e_request_latency_seconds_bucket", "benchdeck_emulator_time_scale"):
        assert name in text, name
    assert 'model_name="Qwen/Qwen3-30B-A3B"' in text


# -- failures ----------------------------------------------------------------------------------
def _run_to_exit(args: list[str], tmp_path: Path, timeout: float = 20) -> tuple[int, str]:
    proc = start_emulator(args, tmp_path / "log")
    try:
        return proc.wait_exit(timeout), proc.log()
    finally:
        proc.stop()


def test_out_of_memory_dies_like_sglang(tokenizer_dir: Path, tmp_path: Path) -> None:
    code, log = _run_to_exit(_args(tokenizer_dir, "--mem-fraction-static", "0.3"), tmp_path)
    assert code == -signal.SIGKILL
    assert "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.3" in log
    assert "Scheduler hit an exception" in log and "Received sigquit from a child process" in log
    assert "KV Cache is allocated" not in log and "fired up" not in log


@pytest.mark.parametrize(("kind", "line", "code"), [
    ("oom-kv", "Not enough memory. Please try to increase --mem-fraction-static.", -signal.SIGKILL),
    ("cuda-graph", "Capture cuda graph failed", -signal.SIGKILL),
    ("host-oom", "scheduler died during initialization (exit code: -9)", 1),
    ("nccl", "ncclSystemError", -signal.SIGKILL),
])
def test_injected_fatal_lines(kind: str, line: str, code: int, tokenizer_dir: Path, tmp_path: Path) -> None:
    exit_code, log = _run_to_exit(_args(tokenizer_dir, "--emulate-fault", f"fatal-at-startup={kind}"), tmp_path)
    assert exit_code == code
    assert line in log


def test_unknown_flag_exits_2(tokenizer_dir: Path, tmp_path: Path) -> None:
    code, log = _run_to_exit(_args(tokenizer_dir, "--mem-fraction", "0.8"), tmp_path)
    assert code == 2
    assert "error: unrecognized arguments: --mem-fraction 0.8" in log


def test_too_few_gpus_exits_1(tokenizer_dir: Path, tmp_path: Path) -> None:
    code, log = _run_to_exit(_args(tokenizer_dir, "--tp-size", "8", "--emulate-gpu-count", "4"), tmp_path)
    assert code == 1 and "invalid device ordinal" in log


def test_port_in_use(tokenizer_dir: Path, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = start_emulator(_args(tokenizer_dir), tmp_path / "log", port=port)
        try:
            assert proc.wait_exit(20) == 1
        finally:
            proc.stop()
    assert f"port at {port} is not available" in proc.log()


def test_crash_after_requests(tokenizer_dir: Path, tmp_path: Path) -> None:
    with running_emulator(_args(tokenizer_dir, "--emulate-fault", "crash-after-requests=1"), tmp_path / "log") as proc:
        body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}
        assert _post(proc, "/generate", body).status_code == 200
        with pytest.raises(requests.ConnectionError):
            _post(proc, "/generate", body)
        assert proc.wait_exit(10) == -signal.SIGKILL
        assert "Scheduler hit an exception" in proc.log()


def test_crash_after_seconds(tokenizer_dir: Path, tmp_path: Path) -> None:
    code, log = _run_to_exit(_args(tokenizer_dir, "--emulate-fault", "crash-after-s=0.2"), tmp_path)
    assert code == -signal.SIGKILL
    assert log.index("fired up") < log.index("Scheduler hit an exception")


def test_crash_during_warmup(tokenizer_dir: Path, tmp_path: Path) -> None:
    code, log = _run_to_exit(_args(tokenizer_dir, "--emulate-fault", "crash-during-warmup"), tmp_path)
    assert code == -signal.SIGKILL
    assert "Initialization failed. warmup error" in log and "fired up" not in log


def test_sigterm_drains_running_requests(tokenizer_dir: Path, tmp_path: Path) -> None:
    with running_emulator(_args(tokenizer_dir, "--emulate-time-scale", "4"), tmp_path / "log") as proc:
        body = {"input_ids": [1, 2, 3], "stream": True, "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}
        with requests.post(proc.base_url + "/generate", json=body, stream=True, timeout=30) as response:
            lines = response.iter_lines()
            assert next(lines).startswith(b"data: ")
            proc.signal_group(signal.SIGTERM)
            rest = [line for line in lines if line]
        assert rest[-1] == b"data: [DONE]"
        assert json.loads(rest[-2][len(b"data: "):])["meta_info"]["completion_tokens"] == 40
        assert proc.wait_exit(10) == 0
        assert "Draining requests" in proc.log()


def test_ignore_sigterm_needs_sigkill(tokenizer_dir: Path, tmp_path: Path) -> None:
    with running_emulator(_args(tokenizer_dir, "--emulate-fault", "ignore-sigterm"), tmp_path / "log") as proc:
        proc.signal_group(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.alive()
        assert proc.stop(grace_s=0.5) == -signal.SIGKILL


def test_batch_log_lines(emulator: EmulatorProcess) -> None:
    _post(emulator, "/generate", {"input_ids": list(range(50)), "sampling_params": {"max_new_tokens": 45,
                                                                                   "ignore_eos": True}})
    log = emulator.log()
    assert "Prefill batch, #new-seq: 1, #new-token: 50, #cached-token: 0, token usage:" in log
    assert "Decode batch, #running-req: 1, #token:" in log and "gen throughput (token/s):" in log


def _running(emulator: EmulatorProcess) -> float:
    for line in requests.get(emulator.base_url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("sglang:num_running_reqs{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no sglang:num_running_reqs")


def test_client_disconnect_aborts_the_request(emulator: EmulatorProcess) -> None:
    body = {"input_ids": [9] * 20, "stream": True, "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}}
    with requests.post(emulator.base_url + "/generate", json=body, stream=True, timeout=30) as response:
        lines = response.iter_lines()  # keep a reference: a dropped iterator closes the connection
        assert next(lines).startswith(b"data: ")
        # The gauge is published every 40th decode batch (SGLang's default interval), not live.
        deadline = time.monotonic() + 10
        while _running(emulator) != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _running(emulator) == 1
    deadline = time.monotonic() + 5
    while _running(emulator) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _running(emulator) == 0


def test_stall_after_requests(tokenizer_dir: Path, tmp_path: Path) -> None:
    with running_emulator(_args(tokenizer_dir, "--emulate-fault", "stall-after-requests=1"), tmp_path / "log") as proc:
        body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}
        assert _post(proc, "/generate", body).status_code == 200
        with pytest.raises(requests.Timeout):
            requests.post(proc.base_url + "/generate", json=body, timeout=1.0)
        assert proc.alive() and http_status(proc.base_url + "/v1/models") == 200
        assert proc.stop(grace_s=0.5) == -signal.SIGKILL  # the drain waits for the stuck request for ever


def test_health_generate_answers_while_working_and_times_out_into_503_when_stalled(
    tokenizer_dir: Path, tmp_path: Path
) -> None:
    """SGLang's check waits a second at a time for any scheduler output, up to
    SGLANG_HEALTH_CHECK_TIMEOUT, then answers 503 (emulator/health.py)."""
    args = _args(tokenizer_dir, "--emulate-fault", "stall-after-requests=1")
    with running_emulator(args, tmp_path / "log", env={"SGLANG_HEALTH_CHECK_TIMEOUT": "2"}) as proc:
        assert http_status(proc.base_url + "/health_generate", timeout=5) == 200
        body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}
        assert _post(proc, "/generate", body).status_code == 200
        with pytest.raises(requests.Timeout):
            requests.post(proc.base_url + "/generate", json=body, timeout=0.5)  # the stall begins
        started = time.monotonic()
        assert http_status(proc.base_url + "/health_generate", timeout=5) == 503
        assert 1.5 <= time.monotonic() - started < 4
        assert http_status(proc.base_url + "/health") == 200
