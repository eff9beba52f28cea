"""The /metrics sampler (runner/telemetry.py): its line parser against the Prometheus
parser on real expositions (the reference copies of real servers, and one made by the
installed SGLang's own collectors, with its full histograms), the summaries of bitmasks and
counters, the keep-alive reader, and the token counters of a live emulator."""

from __future__ import annotations

import http.server
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import prometheus_client
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from bench.runner_gaps import real_exposition
from domain.core.settings import get_settings
from domain.engines.server_metrics import GaugeSeries
from domain.engines.sglang_metrics import (
    PASS_MODES,
    SCHEDULER_COUNTERS,
    SERVER_COUNTERS,
    SERVER_GAUGES,
    SGLANG_METRICS,
)
from domain.flags.schema import SCHEMA_DIR
from emulator.testing import running_emulator
from runner.telemetry import (
    MetricsUnavailable,
    Sample,
    Sampler,
    fetch_metrics,
    kept_series,
    read_server_metrics,
    summarise,
)
from tests.conftest import ROOT

REFERENCE = ROOT.parent / "shared" / "reference" / "real-sglang-output"
SGLANG_PYTHON = ROOT / ".venv-sglang" / "bin" / "python"


def _oracle(text: str) -> list[GaugeSeries]:
    """What the sampler read before: every kept series through prometheus_client's parser."""
    kept = {**SERVER_GAUGES, **SERVER_COUNTERS, **SCHEDULER_COUNTERS}
    return [GaugeSeries(s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text) for s in family.samples if s.name in kept]


def _totals_of(series: list[GaugeSeries], metrics: set[str]) -> dict[str, float]:
    """The one reader's totals (SGLang's names) of ``metrics`` only."""
    return {metric: value for metric, value in SGLANG_METRICS.totals(series).items() if metric in metrics}


def server_totals(series: list[GaugeSeries]) -> dict[str, float]:
    return _totals_of(series, set(SERVER_GAUGES.values()))


def counter_totals(series: list[GaugeSeries]) -> dict[str, float]:
    return _totals_of(series, set(SERVER_COUNTERS.values()))


def scheduler_counter_totals(series: list[GaugeSeries]) -> dict[str, float]:
    return _totals_of(series, {SCHEDULER_COUNTERS["sglang:num_retracted_requests_total"], *PASS_MODES.values()})


def _same_series(text: str) -> None:
    fast, slow = kept_series(text, SGLANG_METRICS), _oracle(text)
    assert sorted(map(repr, fast)) == sorted(map(repr, slow))
    assert server_totals(fast) == server_totals(slow) and counter_totals(fast) == counter_totals(slow)
    assert scheduler_counter_totals(fast) == scheduler_counter_totals(slow)


# -- the parser on real expositions -----------------------------------------------------------------

REFERENCE_FILES = sorted(REFERENCE.glob("metrics_*")) if REFERENCE.is_dir() else []


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared (reference copies of real SGLang output) is absent")
@pytest.mark.parametrize("path", REFERENCE_FILES, ids=lambda p: p.name[:10])
def test_the_line_parser_reads_what_the_prometheus_parser_reads(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    _same_series(text)


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared (reference copies of real SGLang output) is absent")
def test_the_reference_counters_are_found() -> None:
    text = (REFERENCE / "metrics_01_docs_example_llama3.1-8b_v0.4.0era.txt").read_text(encoding="utf-8")
    assert counter_totals(kept_series(text, SGLANG_METRICS)) == {"prompt_tokens_total": 8128902.0,
                                                               "generation_tokens_total": 7557572.0}


COLLECTORS = '''
import random, sys
from types import SimpleNamespace
from prometheus_client import REGISTRY, generate_latest
from sglang.srt.observability import metrics_collector as mc

class Defaults(SimpleNamespace):  # every config lookup None: SGLang's own defaults
    def __getattr__(self, name):
        return None

stub = Defaults(prefill_delayer_max_delay_passes=0, pp_rank=0)
for name in ("get_observability", "get_schedule", "get_parallel", "get_disagg", "get_serving"):
    setattr(mc, name, lambda: stub)
labels = {"model_name": "Qwen/Qwen3-30B-A3B", "engine_type": "unified"}
sched = mc.SchedulerMetricsCollector(labels={**labels, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"},
                                     server_args=Defaults())
sched.increment_retracted_reqs(3, 3000, 120)  # what the scheduler calls when it retracts
for i in range(10):  # 8 decode passes in CUDA graphs, 2 eager; 4 prefill passes (not kept)
    sched.increment_decode_cuda_graph_pass(i % 5 != 0)
    if i % 3 == 0:
        sched.increment_prefill_cuda_graph_pass(False)
tok = mc.TokenizerMetricsCollector(server_args=Defaults(), labels=labels)
random.seed(1)
for i in range(200):
    tok.observe_one_finished_request(labels, random.randint(64, 1024), random.randint(64, 1024), 0,
                                     random.random() * 20, False, None, is_streaming=i % 2 == 0,
                                     time_per_output_token=random.random() / 20)
    tok.observe_time_to_first_token(labels, random.random(), stream=True)
sys.stdout.write(generate_latest(REGISTRY).decode())
'''


@pytest.fixture(scope="module")
def sglang_exposition(tmp_path_factory: pytest.TempPathFactory) -> str:
    """/metrics as the installed SGLang's collectors write it (.venv-sglang lacks
    prometheus_client, so the app's copy is lent to it)."""
    if not SGLANG_PYTHON.exists():
        pytest.skip("the SGLang environment .venv-sglang is not installed")
    lent = tmp_path_factory.mktemp("prometheus")
    (lent / "prometheus_client").symlink_to(Path(prometheus_client.__file__).parent)
    done = subprocess.run([str(SGLANG_PYTHON), "-c", COLLECTORS], env={"PYTHONPATH": str(lent), "PATH": "/usr/bin"},
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_full_sglang_exposition_parses_the_same_with_its_buckets_skipped(sglang_exposition: str) -> None:
    buckets = [line for line in sglang_exposition.splitlines() if "_bucket{" in line]
    assert len(buckets) > 100  # the histograms the fast path skips unparsed
    _same_series(sglang_exposition)
    counters = counter_totals(kept_series(sglang_exposition, SGLANG_METRICS))
    assert set(counters) == {"prompt_tokens_total", "generation_tokens_total"}  # summed over is_streaming
    assert counters["prompt_tokens_total"] > 200 * 64
    # The scheduler's retraction and CUDA-graph pass counters, by their 0.5.23 names and labels.
    assert scheduler_counter_totals(kept_series(sglang_exposition, SGLANG_METRICS)) == {
        "retracted_requests_total": 3.0, "graph_decode_passes_total": 8.0, "eager_decode_passes_total": 2.0}


def test_the_benchmarks_dp8_exposition_is_sglangs_own_and_reads_the_same(tmp_path: Path) -> None:
    """The sampler's CPU benchmark serves what SGLang's collectors write for a DP-attention
    server over 8 ranks (runner/sglang_side/metrics_exposition.py): every family the runner
    keeps is there once per rank, under SGLang's own published labels, and the fast path
    reads it as the Prometheus parser does."""
    if not SGLANG_PYTHON.exists():
        pytest.skip("the SGLang environment .venv-sglang is not installed")
    body = real_exposition(tmp_path, SGLANG_PYTHON, dp_size=8)
    assert body is not None
    text = body.decode()
    assert text.count("_bucket{") > 2000  # the histograms a real server carries, per rank
    _same_series(text)
    series = kept_series(body, SGLANG_METRICS)
    for name in (*SERVER_GAUGES, *SERVER_COUNTERS, *SCHEDULER_COUNTERS):
        assert any(s.name == name for s in series), name
    ranks = {s.labels.get("dp_rank") for s in series if s.name == "sglang:num_running_reqs"}
    assert ranks == {str(r) for r in range(8)}


def test_scheduler_counters_count_each_dp_replica_once() -> None:
    """One series per scheduler that logs: DP replicas add up, a second TP rank of the same
    replica (exported when every rank logs) repeats the first and is not counted again."""
    text = "".join(
        f'sglang:num_retracted_requests_total{{dp_rank="{dp}",tp_rank="{tp}"}} {5 + dp}\n'
        f'sglang:cuda_graph_passes_total{{dp_rank="{dp}",mode="decode_none",tp_rank="{tp}"}} {10 * (dp + 1)}\n'
        for dp in (0, 1) for tp in (0, 1))
    _same_series(text)
    assert scheduler_counter_totals(kept_series(text, SGLANG_METRICS)) == {"retracted_requests_total": 11.0,
                                                           "eager_decode_passes_total": 30.0}


def test_retractions_and_passes_become_deltas_and_count_on_decode_under_pd() -> None:
    samples = [_server(t, "retracted_requests_total", v) for t, v in ((9.0, 2), (10.5, 2), (12, 7))]
    samples += [_server(t, "eager_decode_passes_total", v, "server:prefill-0") for t, v in ((10.5, 0), (12, 9))]
    samples += [_server(t, "eager_decode_passes_total", v, "server:decode-0") for t, v in ((10.5, 1), (12, 9))]
    rows = {(r["source"], r["metric"]): r["max"] for r in summarise(samples, since=10.0)}
    assert rows == {("server", "retracted_requests_delta"): 5.0, ("server:decode-0", "eager_decode_passes_delta"): 8.0}


def test_label_values_with_escapes_and_timestamps() -> None:
    text = ('sglang:num_running_reqs{model_name="a \\"b\\" \\\\ c",tp_rank="0"} 3.0 1700000000000\n'
            'sglang:num_queue_reqs 2\n'
            'sglang:num_queue_reqs_bucket{le="1"} 9\n')
    _same_series(text)
    assert kept_series(text, SGLANG_METRICS)[0].labels["model_name"] == 'a "b" \\ c'


def test_a_counter_typed_without_its_total_suffix_keeps_its_total_and_drops_created() -> None:
    text = ("# HELP sglang:prompt_tokens Number of prefill tokens processed.\n"
            "# TYPE sglang:prompt_tokens counter\n"
            'sglang:prompt_tokens_total{is_streaming="false"} 10.0\n'
            'sglang:prompt_tokens_created{is_streaming="false"} 1.7e9\n'
            'sglang:prompt_tokens_total{is_streaming="true"} 5.0\n'
            "# HELP sglang:prompt_tokens_histogram x\n# TYPE sglang:prompt_tokens_histogram histogram\n"
            'sglang:prompt_tokens_histogram_bucket{le="1"} 3\n')
    _same_series(text)
    assert counter_totals(kept_series(text, SGLANG_METRICS)) == {"prompt_tokens_total": 15.0}


# -- summaries -----------------------------------------------------------------------------------------

def _server(ts: float, metric: str, value: float, source: str = "server") -> Sample:
    return Sample(ts, source, None, metric, value)


def test_clock_event_reasons_are_ored_over_samples_not_maxed() -> None:
    samples = [Sample(t, "gpu", 0, "clock_event_reasons", v, "GPU-a") for t, v in ((1, 0x1), (2, 0x40), (3, 0x4))]
    [row] = summarise(samples, since=None)
    assert row["max"] == 0x45 and row["mean"] is None  # max() would say 0x40: idle and power cap lost


def test_token_counters_become_deltas_over_the_measured_window() -> None:
    samples = [_server(t, "prompt_tokens_total", v) for t, v in ((9.0, 100), (10.1, 160), (11, 400), (12, 1380))]
    samples += [_server(t, "running_reqs", 4) for t in (9.0, 10.1, 11, 12)]
    rows = {r["metric"]: r for r in summarise(samples, since=10.0)}
    assert "prompt_tokens_total" not in rows
    assert rows["prompt_tokens_delta"]["max"] == 1380 - 160  # the warmup's 160 left out
    assert rows["prompt_tokens_delta"]["n"] == 3 and rows["running_reqs"]["mean"] == 4


def test_no_delta_without_a_window_start_or_after_a_restart() -> None:
    rising = [_server(t, "generation_tokens_total", 10 * t) for t in range(5)]
    assert not [r for r in summarise(rising, since=None) if r["metric"].endswith("_delta")]
    reset = [_server(t, "generation_tokens_total", v) for t, v in ((1, 500), (2, 20))]
    assert not summarise(reset, since=0.0)


def test_a_counter_born_inside_the_window_starts_at_zero() -> None:
    samples = [_server(t, "running_reqs", 1) for t in (1, 2, 3)]
    samples += [_server(t, "generation_tokens_total", v) for t, v in ((2, 128), (3, 256))]
    rows = {r["metric"]: r for r in summarise(samples, since=1.0)}
    assert rows["generation_tokens_delta"]["max"] == 256


def test_under_pd_prompt_tokens_count_on_prefill_and_generated_tokens_on_decode() -> None:
    samples = []
    for source in ("server:prefill-0", "server:prefill-1", "server:decode-0", "server:replica-0", "server"):
        samples += [_server(t, metric, 100 * t, source) for t in (1, 2)
                    for metric in ("prompt_tokens_total", "generation_tokens_total")]
    kept = {(r["source"], r["metric"]) for r in summarise(samples, since=0.0)}
    assert kept == {("server:prefill-0", "prompt_tokens_delta"), ("server:prefill-1", "prompt_tokens_delta"),
                    ("server:decode-0", "generation_tokens_delta"),
                    ("server:replica-0", "prompt_tokens_delta"), ("server:replica-0", "generation_tokens_delta"),
                    ("server", "prompt_tokens_delta"), ("server", "generation_tokens_delta")}


def test_the_sampler_reads_once_more_after_it_is_stopped() -> None:
    stamps: list[float] = []

    def read(now: float) -> list[Sample]:
        stamps.append(now)
        return [_server(now, "running_reqs", 1)]

    sampler = Sampler(read, hz=1000)
    sampler.start()
    while not stamps:
        threading.Event().wait(0.01)
    stopped_at = time.time()
    samples = sampler.stop()
    assert samples[-1].ts >= stopped_at  # the final reading comes after the point ended


# -- the reader -----------------------------------------------------------------------------------------

class _Metrics(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the server closes after every answer: the reader must reopen
    body = b"sglang:num_running_reqs 5\nsglang:prompt_tokens_total{is_streaming=\"true\"} 7\n"

    def do_GET(self) -> None:  # the stdlib handler's name
        status = 200 if self.path == "/metrics" else 404
        self.send_response(status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def metrics_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_reader_reopens_a_closed_connection_and_refuses_a_non_200(metrics_server: str) -> None:
    for now in (1.0, 2.0, 3.0):
        got = {s.metric: s.value for s in read_server_metrics(SGLANG_METRICS, metrics_server, now)}
        assert got == {"running_reqs": 5.0, "prompt_tokens_total": 7.0}
    with pytest.raises(MetricsUnavailable):
        fetch_metrics(metrics_server + "/nowhere")


# -- a live emulator ------------------------------------------------------------------------------------

def test_the_emulators_counters_count_what_it_served(tmp_path: Path) -> None:
    """Prompt and generated tokens of requests sent between two readings, as the delta."""
    args = ["--model-path", "Qwen/Qwen3-30B-A3B", "--emulate-schema-dir", str(SCHEMA_DIR),
            "--emulate-tokenizer-dir", str(get_settings().tokenizer_dir), "--enable-metrics"]
    with running_emulator(args, tmp_path / "emulator.log") as emulator:
        lengths = [(37, 5), (100, 9), (12, 3)]
        before = {s.metric: s for s in read_server_metrics(SGLANG_METRICS, emulator.base_url, 1.0)}
        for prompt, output in lengths:
            body = {"input_ids": list(range(1, prompt + 1)), "stream": prompt % 2 == 0,
                    "sampling_params": {"max_new_tokens": output, "ignore_eos": True}}
            assert requests.post(emulator.base_url + "/generate", json=body, timeout=60).ok
        after = read_server_metrics(SGLANG_METRICS, emulator.base_url, 2.0)
    rows = {r["metric"]: r["max"] for r in summarise([*before.values(), *after], since=0.5)}
    assert rows["prompt_tokens_delta"] == sum(p for p, _ in lengths)
    assert rows["generation_tokens_delta"] == sum(o for _, o in lengths)


def test_the_emulator_counts_decode_passes_beyond_the_graphs_as_eager(tmp_path: Path) -> None:
    """With decode graphs captured up to batch 2, a third request joining two long ones that
    are already decoding makes a batch of three (eager); once it is done the two go on in
    graphs: both modes' deltas, as SGLang's sglang:cuda_graph_passes_total reports them."""
    args = ["--model-path", "Qwen/Qwen3-30B-A3B", "--emulate-schema-dir", str(SCHEMA_DIR),
            "--emulate-tokenizer-dir", str(get_settings().tokenizer_dir), "--enable-metrics",
            "--cuda-graph-max-bs-decode", "2"]

    def body(output: int, stream: bool) -> dict[str, Any]:
        return {"input_ids": list(range(1, 33)), "stream": stream,
                "sampling_params": {"max_new_tokens": output, "ignore_eos": True}}

    with running_emulator(args, tmp_path / "emulator.log") as emulator:
        before = read_server_metrics(SGLANG_METRICS, emulator.base_url, 1.0)
        # The two long requests stream: their first chunk means both are in the running batch,
        # so the short one surely overlaps them however slowly this machine sends it.
        long_ones = [requests.post(emulator.base_url + "/generate", json=body(1000, True), stream=True, timeout=60)
                     for _ in range(2)]
        lines = [r.iter_lines() for r in long_ones]
        assert all(next(line for line in it if line) for it in lines)
        assert requests.post(emulator.base_url + "/generate", json=body(8, False), timeout=60).ok
        for it in lines:
            assert b"[DONE]" in [line for line in it if line][-1]
        after = read_server_metrics(SGLANG_METRICS, emulator.base_url, 2.0)
    rows = {r["metric"]: r["max"] for r in summarise([*before, *after], since=0.5)}
    assert rows["eager_decode_passes_delta"] >= 1 and rows["graph_decode_passes_delta"] >= 1
    assert "retracted_requests_delta" not in rows  # the pool never filled: no series, no signal
