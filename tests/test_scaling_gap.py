"""domain.results.scaling_gap on constructed points: each cause alone comes out on top, the
causes add up to the gap, and with no signal the gap stays "remaining"."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pandas as pd
import pytest

from domain.core.i18n import LANGUAGES, catalogue, t
from domain.results.scaling_gap import (
    CAUSES,
    GAP_COLUMNS,
    ScalingPoint,
    ServerFacts,
    crosses_graph,
    explain_gaps,
    explain_run,
    gap_sentences,
    scaling_points,
    server_facts,
    top_cause,
)


def closed_loop(c: int, *, a: float = 1.0, L: float = 256.0, W: float = 0.0, P: float = 50.0,
                D: float = 10.0, I: float = 0.0, **extra: Any) -> ScalingPoint:  # noqa: E741
    """A point whose bench figures obey bench_serving's identity for the given terms (ms):
    E2E = W + P + (L − 1)(D + I), λ = c·a/E2E, thr = λ·L, mean queue = W·λ (Little)."""
    e2e = W + P + (L - 1) * (D + I)
    rate = c * a / e2e * 1000.0  # req/s
    fields: dict[str, Any] = {
        "run_id": 1, "scenario": "s", "concurrency": c, "output_throughput": rate * L, "request_throughput": rate,
        "completed": 100.0, "total_output_tokens": 100.0 * L, "achieved_concurrency": c * a,
        "ttft_mean_ms": W + P, "e2e_mean_ms": e2e, "itl_median_ms": D, "input_len": 128, "output_len": int(L),
        "random_range_ratio": 1.0, "queued_mean": W * rate / 1000.0, "running_max": float(c),
    }
    fields.update(extra)
    return ScalingPoint(**fields)


def shares(frame: pd.DataFrame, c_from: int, c_to: int) -> dict[str, float]:
    step = frame[(frame.c_from == c_from) & (frame.c_to == c_to)]
    return dict(zip(step.cause, step.tok_s, strict=True))


def assert_adds_up(frame: pd.DataFrame) -> None:
    for _, step in frame.groupby(["run_id", "scenario", "c_from", "c_to"]):
        assert step.tok_s.sum() == pytest.approx(step.gap.iloc[0], rel=1e-9, abs=1e-9)
        assert list(step.cause) == list(CAUSES)
        if step.gap.iloc[0]:
            assert step.share.sum() == pytest.approx(1.0)


def test_the_running_cap_alone_is_the_top_cause_and_named_in_its_sentence() -> None:
    facts = ServerFacts(max_running_requests=4, max_running_requests_flag=4)
    low = closed_loop(4, facts=facts)
    # At c=8 only 4 run: each request waits one whole service time of the 4-batch.
    service = 50.0 + 255 * 10.0
    high = closed_loop(8, W=service, facts=facts, running_max=4.0)
    frame = explain_gaps([low, high])
    assert_adds_up(frame)
    assert top_cause(frame, 4, 8) == "running_cap_or_kv_pool"
    parts = shares(frame, 4, 8)
    assert parts["running_cap_or_kv_pool"] == pytest.approx(frame.gap.iloc[0])  # nothing else changed
    [summary, text] = gap_sentences(frame, "en")
    assert summary.startswith("c=4→8: ") and "gap " in summary
    assert "ran at most 4 requests: --max-running-requests 4 caps the batch" in text
    assert "--max-running-requests 4" in gap_sentences(frame, "ja")[1]


def test_a_full_kv_pool_is_named_when_no_cap_binds() -> None:
    facts = ServerFacts(max_running_requests=64)
    low = closed_loop(4, facts=facts)
    high = closed_loop(8, W=800.0, facts=facts, running_max=5.0, token_usage_max=0.97)
    frame = explain_gaps([low, high])
    assert top_cause(frame, 4, 8) == "running_cap_or_kv_pool"
    assert frame.set_index("cause").loc["running_cap_or_kv_pool", "sentence_key"] == "scaling_gap.cause.kv_pool"
    assert "KV pool reached 97%" in gap_sentences(frame, "en")[1]
    # Retractions are named when recorded; a pool that turns requests away below 90 % usage
    # (SGLang reserves prompt + output) shows as requests waiting while fewer than c and the cap ran.
    retracted = explain_gaps([low, replace(high, token_usage_max=0.5, retractions=3.0)])
    assert "and 3 were retracted" in gap_sentences(retracted, "en")[1]
    reserved = explain_gaps([low, replace(high, token_usage_max=0.8, queued_mean=3.0)])
    assert set(reserved[reserved.cause == "running_cap_or_kv_pool"].sentence_key) == {"scaling_gap.cause.kv_pool"}
    transient = explain_gaps([low, replace(high, token_usage_max=0.2, running_max=8.0, queued_mean=0.3)])
    assert set(transient[transient.cause == "running_cap_or_kv_pool"].sentence_key) == {"scaling_gap.cause.queue"}


def test_decode_step_growth_alone_is_the_top_cause() -> None:
    frame = explain_gaps([closed_loop(4, D=10.0), closed_loop(8, D=14.0)])
    assert_adds_up(frame)
    assert top_cause(frame, 4, 8) == "decode_step_growth"
    assert shares(frame, 4, 8)["running_cap_or_kv_pool"] == 0


def test_prefill_interference_alone_is_the_top_cause_with_the_chunk_count() -> None:
    facts = ServerFacts(chunked_prefill_size=64)
    low = closed_loop(2, P=300.0, I=1.0, input_len=4000, facts=facts)
    high = closed_loop(4, P=900.0, I=4.0, input_len=4000, facts=facts)
    frame = explain_gaps([low, high])
    assert_adds_up(frame)
    assert top_cause(frame, 2, 4) == "prefill_interference"
    text = gap_sentences(frame, "en")[1]
    assert "prompts of 4000 tokens take 63 prefill chunks of 64" in text


def test_a_queue_while_every_request_ran_is_prefill_interference_not_a_cap() -> None:
    """All 4 requests ran at some point, yet requests queued: they waited for the prefill
    budget (one chunked prompt at a time), so the wait is interference."""
    facts = ServerFacts(chunked_prefill_size=128)
    low = closed_loop(2, P=3000.0, I=10.0, input_len=4000, facts=facts, running_max=2.0)
    high = closed_loop(4, W=6000.0, P=3000.0, I=30.0, input_len=4000, facts=facts, running_max=4.0)
    frame = explain_gaps([low, high])
    assert_adds_up(frame)
    assert shares(frame, 2, 4)["running_cap_or_kv_pool"] == 0
    assert top_cause(frame, 2, 4) == "prefill_interference"
    # The same wait with the batch held below c (at most 3 ran) is the cap or pool's.
    held = explain_gaps([low, replace(high, running_max=3.0)])
    assert shares(held, 2, 4)["running_cap_or_kv_pool"] > 0


def test_eager_batches_take_the_growth_above_the_trend_below_the_graph_limit() -> None:
    facts = ServerFacts(cuda_graph_max_bs=2)
    # 1→2 inside the graphs: +10 % per doubling; 2→4 leaves them: +10 % trend, then +40 % eager.
    series = [closed_loop(1, D=10.0, facts=facts), closed_loop(2, D=11.0, facts=facts),
              closed_loop(4, D=11.0 * 1.1 * 1.4, facts=facts)]
    frame = explain_gaps(series)
    assert_adds_up(frame)
    assert top_cause(frame, 2, 4) == "eager_batches"
    parts = shares(frame, 2, 4)
    assert parts["decode_step_growth"] > 0 and parts["eager_batches"] > 2 * parts["decode_step_growth"]
    assert shares(frame, 1, 2)["eager_batches"] == 0  # 1→2 stays inside the graphs
    eager = [line for line in gap_sentences(frame, "en") if "CUDA graph" in line]
    assert len(eager) == 1 and "from 11.0 to 16.9 ms, 40% above what the growth" in eager[0]


def test_eager_batches_get_nothing_without_a_graph_limit() -> None:
    series = [closed_loop(1, D=10.0), closed_loop(2, D=11.0), closed_loop(4, D=11.0 * 1.1 * 1.4)]
    frame = explain_gaps(series)
    assert shares(frame, 2, 4)["eager_batches"] == 0
    assert top_cause(frame, 2, 4) == "decode_step_growth"


def test_throttling_alone_is_the_top_cause() -> None:
    low = closed_loop(4, D=10.0, sm_clock_mhz=1980.0, clock_event_reasons=0)
    high = closed_loop(8, D=10.0 * 1980 / 1500, sm_clock_mhz=1500.0, clock_event_reasons=0x20)
    frame = explain_gaps([low, high])
    assert_adds_up(frame)
    assert top_cause(frame, 4, 8) == "throttling"
    assert shares(frame, 4, 8)["decode_step_growth"] == pytest.approx(0, abs=1e-9)
    assert "sw_thermal" in gap_sentences(frame, "en")[1]


def test_a_lower_clock_without_a_slowdown_reason_is_not_throttling() -> None:
    low = closed_loop(4, D=10.0, sm_clock_mhz=1980.0, clock_event_reasons=0)
    high = closed_loop(8, D=13.2, sm_clock_mhz=1500.0, clock_event_reasons=0x1)  # idle bit only
    frame = explain_gaps([low, high])
    assert shares(frame, 4, 8)["throttling"] == 0


def test_length_variance_alone_is_the_top_cause() -> None:
    low = closed_loop(4, L=256.0, random_range_ratio=0.5, output_len=256, total_output_tokens=100 * 200.0)
    high = closed_loop(8, L=256.0, a=0.8, random_range_ratio=0.5, output_len=256, total_output_tokens=100 * 200.0)
    frame = explain_gaps([low, high])
    assert_adds_up(frame)
    assert top_cause(frame, 4, 8) == "length_variance"


def test_without_a_signal_the_gap_stays_remaining() -> None:
    # The client kept fewer requests in flight at c=8, with fixed lengths: no cause has a signal.
    frame = explain_gaps([closed_loop(4), closed_loop(8, a=0.8)])
    assert_adds_up(frame)
    parts = shares(frame, 4, 8)
    assert top_cause(frame, 4, 8) == "remaining"
    assert all(parts[c] == pytest.approx(0, abs=1e-9) for c in CAUSES[:-1])


def test_points_without_latencies_leave_everything_remaining() -> None:
    low = ScalingPoint(run_id=1, scenario="s", concurrency=1, output_throughput=100.0)
    high = ScalingPoint(run_id=1, scenario="s", concurrency=2, output_throughput=150.0)
    frame = explain_gaps([low, high])
    assert_adds_up(frame)
    assert shares(frame, 1, 2) == {**dict.fromkeys(CAUSES[:-1], 0.0), "remaining": pytest.approx(50.0)}


def test_a_super_linear_step_still_adds_up_and_a_better_term_gives_a_negative_share() -> None:
    frame = explain_gaps([closed_loop(4, D=12.0), closed_loop(8, D=10.0)])
    assert_adds_up(frame)
    assert frame.gap.iloc[0] < 0
    assert shares(frame, 4, 8)["decode_step_growth"] < 0


def test_several_causes_at_once_add_up_and_keep_their_order() -> None:
    facts = ServerFacts(max_running_requests=8, max_running_requests_flag=8, chunked_prefill_size=512)
    low = closed_loop(4, D=10.0, P=80.0, I=0.5, facts=facts)
    high = closed_loop(16, W=2000.0, D=15.0, P=200.0, I=2.0, a=0.9, facts=facts, running_max=8.0)
    frame = explain_gaps([low, high])
    assert_adds_up(frame)
    parts = shares(frame, 4, 16)
    assert all(parts[c] > 0 for c in ("running_cap_or_kv_pool", "decode_step_growth", "prefill_interference",
                                      "remaining"))
    ratio = math.prod(frame.factor)
    assert ratio == pytest.approx(frame.measured.iloc[0] / frame.ideal.iloc[0])


def test_steps_are_consecutive_concurrencies_per_run_and_scenario() -> None:
    points = [closed_loop(c) for c in (1, 2, 4)] + [replace(closed_loop(c), scenario="t") for c in (2, 8)]
    frame = explain_gaps(points)
    assert list(frame.columns) == list(GAP_COLUMNS)
    steps = sorted({(s, a, b) for s, a, b in zip(frame.scenario, frame.c_from, frame.c_to, strict=True)})
    assert steps == [("s", 1, 2), ("s", 2, 4), ("t", 2, 8)]


def test_server_facts_read_the_server_before_the_flags() -> None:
    facts = server_facts({"max_running_requests": 48, "chunked_prefill_size": 8192,
                          "server_info": {"cuda_graph_max_bs_decode": 256}},
                         {"max-running-requests": 64, "cuda-graph-max-bs-decode": 8})
    assert facts == ServerFacts(max_running_requests=48, max_running_requests_flag=64, cuda_graph_max_bs=256,
                                chunked_prefill_size=8192)
    # 0.5.9 spells it cuda_graph_max_bs; disabled graphs are 0; nothing known stays None.
    assert server_facts({"server_info": {"cuda_graph_max_bs": 160}}, {}).cuda_graph_max_bs == 160
    assert server_facts({"server_info": {"disable_cuda_graph": True}}, {}).cuda_graph_max_bs == 0
    assert server_facts(None, {"cuda-graph-max-bs": 4}).cuda_graph_max_bs == 4
    assert server_facts(None, None) == ServerFacts()


def test_explain_run_reads_a_points_frame_and_its_telemetry() -> None:
    """Repeats fold into medians; the queue gauge (Little's law) puts the cap on top."""
    def row(point_id: int, c: int, repeat: int, thr: float, ttft: float, e2e: float, rate: float) -> dict[str, Any]:
        return {"point_id": point_id, "run_id": 7, "scenario": "s", "concurrency": c, "repeat_idx": repeat,
                "output_throughput": thr, "request_throughput": rate, "completed": 20, "total_output_tokens": 20 * 128,
                "achieved_concurrency": float(c), "ttft_mean_ms": ttft, "e2e_mean_ms": e2e, "itl_median_ms": 10.0,
                "input_len": 64, "output_len": 128, "random_range_ratio": 1.0,
                "server_args": {"max-running-requests": 4}, "gpu_clock_event_reasons_any": None}
    service = 50.0 + 127 * 10.0
    points = pd.DataFrame([
        row(1, 4, 0, 4 * 128 / service * 1000, 50.0, service, 4 / service * 1000),
        row(2, 4, 1, 4 * 128 / service * 1000, 50.0, service, 4 / service * 1000),
        row(3, 8, 0, 4 * 128 / service * 1000, 50.0 + service, 2 * service, 4 / service * 1000),
    ])
    telemetry = [
        {"point_id": 3, "source": "server", "device": None, "metric": "queued_reqs", "n": 10, "mean": 4.0,
         "p50": 4.0, "max": 4.0},
        {"point_id": 3, "source": "server", "device": None, "metric": "running_reqs", "n": 10, "mean": 4.0,
         "p50": 4.0, "max": 4.0},
        {"point_id": 1, "source": "gpu", "device": 0, "metric": "unavailable", "n": 0, "mean": None, "p50": None,
         "max": None},
    ]
    frame = explain_run(points, telemetry, {7: {"max_running_requests": 4}})
    assert_adds_up(frame)
    assert top_cause(frame, 4, 8) == "running_cap_or_kv_pool"
    assert shares(frame, 4, 8)["running_cap_or_kv_pool"] == pytest.approx(frame.gap.iloc[0], rel=1e-6)


def test_counter_deltas_of_a_real_server_are_read_when_recorded() -> None:
    """sglang:num_retracted_requests_total and sglang:cuda_graph_passes_total (by mode), as
    deltas: the eager share of decode passes tells a crossing without the graph limit."""
    def row(point_id: int, c: int) -> dict[str, Any]:
        return {"point_id": point_id, "run_id": 3, "scenario": "s", "concurrency": c, "repeat_idx": 0,
                "output_throughput": 100.0 * c, "server_args": {}}
    def delta(point_id: int, metric: str, value: float, source: str = "server") -> dict[str, Any]:
        return {"point_id": point_id, "source": source, "device": None, "metric": metric, "n": 2, "mean": None,
                "p50": None, "max": value}
    # Point 1 ran every decode pass in a graph: its eager mode has no series, hence no delta.
    telemetry = [delta(1, "graph_decode_passes_delta", 500.0),
                 delta(2, "eager_decode_passes_delta", 450.0), delta(2, "graph_decode_passes_delta", 50.0),
                 delta(2, "retracted_requests_delta", 2.0, "server:decode-0"),
                 delta(2, "retracted_requests_delta", 1.0, "server:decode-1")]
    low, high = scaling_points(pd.DataFrame([row(1, 2), row(2, 4)]), telemetry)
    assert (low.eager_share, high.eager_share, high.retractions) == (0.0, 0.9, 3.0)
    assert low.retractions is None  # not recorded: no signal, not zero
    assert crosses_graph(low, high) and not crosses_graph(low, replace(high, eager_share=0.2))


def test_every_sentence_renders_in_both_languages() -> None:
    facts = ServerFacts(max_running_requests=4, chunked_prefill_size=64, cuda_graph_max_bs=2)
    series = [closed_loop(1, facts=facts, input_len=4000), closed_loop(2, facts=facts, input_len=4000),
              closed_loop(4, W=100.0, D=20.0, facts=facts, input_len=4000, running_max=4.0)]
    frame = explain_gaps(series)
    keys = set(frame.sentence_key)
    assert keys <= set(catalogue())
    for _, r in frame.iterrows():
        for lang in LANGUAGES:
            assert "{" not in t(r.sentence_key, lang, **r.params)
    for cause in CAUSES:
        assert t(f"scaling_gap.cause_label.{cause}", "ja") != t(f"scaling_gap.cause_label.{cause}", "en")
