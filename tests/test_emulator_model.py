"""The emulator's pure parts: flags, sizing, timing, scheduler and predictor (no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from domain.flags.schema import SCHEMA_DIR
from emulator import config_from_argv, predict, rescale_record, steady_state
from emulator.flags import human_readable_int, parse_flags
from emulator.scheduler import Request, Scheduler
from emulator.sizing import (
    GPUS,
    QWEN3_30B_A3B,
    QWEN3_235B_A22B,
    kv_cell_bytes,
    resolve_model,
    weight_bytes_per_gpu,
)

SCHEMAS = ["--emulate-schema-dir", str(SCHEMA_DIR)]  # the emulator is told where the schemas are
M30 = ["--model-path", "Qwen/Qwen3-30B-A3B", *SCHEMAS]
M235_FP8 = ["--model-path", "Qwen/Qwen3-235B-A22B-FP8", "--tp-size", "8", *SCHEMAS]


# -- flags -------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["--cuda-graph-max-bs", "8"],  # removed by 0.5.20; argparse prefix matching must not rescue it
    ["--tp", "2"],  # works in SGLang only through prefix matching
    ["--prefill-only"],  # would silently match --prefill-only-disable-kv-cache
    ["--mem-fraction", "0.8"],
    ["--no-such-flag"],
])
def test_flags_match_exactly(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_flags([*M30, *argv])
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_flags_of_an_older_schema_are_accepted() -> None:
    flags = parse_flags([*M30, "--cuda-graph-max-bs", "16", "--emulate-sglang-version", "0.5.9"])
    assert flags.args["cuda_graph_max_bs"] == 16
    old = config_from_argv([*M30, "--cuda-graph-max-bs", "16", "--tp-size", "2", "--emulate-sglang-version", "0.5.9"])
    assert old.cuda_graph_max_bs == 16
    assert old.tp_size == 2  # parsed into tensor_parallel_size by 0.5.9's argparse


def test_flags_types_and_emulator_options() -> None:
    flags = parse_flags([*M30, "--max-total-tokens", "2Ki", "--cuda-graph-config", '{"decode": {"max_bs": 8}}',
                         "--emulate-fault", "crash-after-requests=3", "--emulate-time-scale", "2"])
    assert flags.args["max_total_tokens"] == 2048
    assert flags.args["cuda_graph_config"] == {"decode": {"max_bs": 8}}
    assert flags.emulate.faults == {"crash-after-requests": "3"}
    assert flags.emulate.time_scale == 2.0
    assert "max_total_tokens" in flags.explicit and "port" not in flags.explicit
    assert human_readable_int("1.5k") == 1500


def test_emulator_options_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCHDECK_EMULATE_STARTUP_S", "7.5")
    monkeypatch.setenv("BENCHDECK_EMULATE_GPU", "H100")
    monkeypatch.setenv("BENCHDECK_EMULATE_FAULT", "never-ready,ignore-sigterm")
    flags = parse_flags([*M30, "--emulate-gpu", "B200"])
    assert flags.emulate.startup_s == 7.5
    assert flags.emulate.gpu == "B200"  # the flag wins over the environment
    assert flags.emulate.faults == {"never-ready": "", "ignore-sigterm": ""}


def test_unknown_fault_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        parse_flags([*M30, "--emulate-fault", "explode"])
    assert exc.value.code == 2


# -- sizing (the models' config.json figures) ---------------------------------------------------------------
def test_kv_cell_and_weights_match_the_reference_arithmetic() -> None:
    assert kv_cell_bytes(QWEN3_30B_A3B, "auto", 1) == 98_304
    assert kv_cell_bytes(QWEN3_235B_A22B, "auto", 1) == 192_512
    assert kv_cell_bytes(QWEN3_235B_A22B, "fp8_e4m3", 1) == 96_256
    assert kv_cell_bytes(QWEN3_235B_A22B, "auto", 8) == 48_128  # 4 KV heads replicated at TP8
    assert QWEN3_235B_A22B.total_params == pytest.approx(235.1e9, rel=0.01)
    assert QWEN3_235B_A22B.active_params == pytest.approx(22.2e9, rel=0.01)
    assert QWEN3_30B_A3B.total_params == pytest.approx(30.5e9, rel=0.01)
    fp8 = resolve_model("Qwen/Qwen3-235B-A22B-FP8")
    assert weight_bytes_per_gpu(fp8, None, 8) / 1e9 == pytest.approx(29.4, rel=0.02)
    assert weight_bytes_per_gpu(QWEN3_235B_A22B, None, 8) / 1e9 == pytest.approx(58.8, rel=0.02)


def test_defaults_resolve_like_sglang_on_h200() -> None:
    cfg = config_from_argv(M30)
    assert cfg.gpu is GPUS["H200"]
    assert cfg.chunked_prefill_size == 8192 and cfg.cuda_graph_max_bs == 256
    assert 0.85 < cfg.mem_fraction_static < 0.93
    assert cfg.max_running_requests == 4096
    assert config_from_argv(M235_FP8).cuda_graph_max_bs == 512
    assert config_from_argv([*M30, "--max-running-requests", "4"]).cuda_graph_max_bs == 4


def test_kv_capacity_follows_mem_fraction_static() -> None:
    low = config_from_argv([*M30, "--mem-fraction-static", "0.6"]).max_total_num_tokens
    high = config_from_argv([*M30, "--mem-fraction-static", "0.85"]).max_total_num_tokens
    assert 0 < low < high
    assert config_from_argv([*M30, "--kv-cache-dtype", "fp8_e4m3", "--mem-fraction-static", "0.85"]) \
        .max_total_num_tokens == pytest.approx(2 * high, rel=0.001)


@pytest.mark.parametrize(("argv", "fatal"), [
    ([*M30, "--mem-fraction-static", "0.3"], "oom-weights"),
    (["--model-path", "Qwen/Qwen3-235B-A22B", "--tp-size", "2", *SCHEMAS], "oom-weights"),  # 235 GB BF16 on 2 GPUs
    ([*M30, "--mem-fraction-static", "0.997"], "cuda-graph"),
    ([*M30, "--emulate-fault", "fatal-at-startup=nccl"], "nccl"),
    (M30, None),
])
def test_startup_fatal(argv: list[str], fatal: str | None) -> None:
    assert config_from_argv(argv).startup_fatal == fatal


# -- timing ------------------------------------------------------------------------------------
def test_decode_step_grows_with_batch_kv_and_eager_mode() -> None:
    timing = config_from_argv([*M30, "--cuda-graph-max-bs-decode", "16"]).timing
    steps = [timing.decode_step_s(b, b * 256) for b in (1, 2, 4, 8, 16)]
    assert steps == sorted(steps)
    assert timing.decode_step_s(8, 100_000) > timing.decode_step_s(8, 1_000)
    eager_jump = timing.decode_step_s(17, 17 * 256) - timing.decode_step_s(16, 16 * 256)
    assert eager_jump > 48 * timing.constants.eager_per_layer_s * 0.9  # the CUDA-graph penalty
    disabled = config_from_argv([*M30, "--cuda-graph-backend-decode", "disabled"]).timing
    assert disabled.cuda_graph_max_bs is None
    assert disabled.decode_step_s(1, 256) > timing.decode_step_s(1, 256)


def test_prefill_is_chunked_by_chunked_prefill_size() -> None:
    def prefill_steps(chunk: int) -> int:
        cfg = config_from_argv([*M30, "--chunked-prefill-size", str(chunk)])
        sched = Scheduler(cfg.timing, cfg.scheduler_limits())
        sched.enqueue(Request("r", list(range(10_000)), max_new_tokens=4, stop_after=4, arrival=0.0))
        steps = 0
        while (step := sched.plan()) is not None and step.kind == "prefill":
            sched.apply(step, 0.0)
            steps += 1
        return steps

    assert prefill_steps(2048) == 5
    assert prefill_steps(8192) == 2
    assert prefill_steps(-1) == 1


# -- scheduler and predictor -------------------------------------------------------------------
def test_more_concurrency_more_throughput_worse_ttft_until_saturation() -> None:
    points = [predict(128, 128, c, [*M30, "--max-running-requests", "8"], num_prompts=4 * c) for c in (1, 2, 4, 8, 16)]
    throughput = [p.output_throughput for p in points]
    assert throughput[:4] == sorted(throughput[:4]) and throughput[3] > 3 * throughput[0]
    assert throughput[4] == pytest.approx(throughput[3], rel=0.05)  # plateau at max-running-requests
    assert points[4].mean_ttft_ms > 10 * points[3].mean_ttft_ms  # queueing
    assert points[4].max_batch == 8


def test_kv_capacity_limits_the_batch() -> None:
    argv = [*M30, "--max-total-tokens", "1024"]  # room for four 128+128 requests
    assert predict(128, 128, 8, argv, num_prompts=16).max_batch == 4


def test_steady_state_agrees_with_the_simulation() -> None:
    for c in (1, 4, 16):
        sim = predict(256, 256, c, M30, num_prompts=4 * c)
        closed = steady_state(256, 256, c, M30)
        assert closed["output_throughput"] == pytest.approx(sim.output_throughput, rel=0.1)


def test_time_scale_slows_everything_down() -> None:
    fast = predict(128, 64, 4, M30)
    slow = predict(128, 64, 4, [*M30, "--emulate-time-scale", "4"])
    assert slow.output_throughput == pytest.approx(fast.output_throughput / 4)
    assert slow.mean_ttft_ms == pytest.approx(fast.mean_ttft_ms * 4)
    back = rescale_record({"output_throughput": slow.output_throughput, "mean_ttft_ms": slow.mean_ttft_ms,
                           "completed": 16}, 4)
    assert back["output_throughput"] == pytest.approx(fast.output_throughput)
    assert back["mean_ttft_ms"] == pytest.approx(fast.mean_ttft_ms)
    assert back["completed"] == 16


def test_prefix_cache_hits_and_flush() -> None:
    cfg = config_from_argv(M30)
    sched = Scheduler(cfg.timing, cfg.scheduler_limits())

    def run(prompt: list[int]) -> Request:
        req = Request("r", prompt, max_new_tokens=2, stop_after=2, arrival=0.0)
        sched.enqueue(req)
        while (step := sched.plan()) is not None:
            sched.apply(step, 0.0)
        return req

    prompt = list(range(300))
    assert run(prompt).cached == 0
    assert run(prompt).cached == 288  # 9 whole 32-token pages
    assert sched.flush_cache()
    assert run(prompt).cached == 0


def test_scheduler_abort_frees_the_reservation() -> None:
    cfg = config_from_argv(M30)
    sched = Scheduler(cfg.timing, cfg.scheduler_limits())
    req = Request("r", list(range(64)), max_new_tokens=100, stop_after=100, arrival=0.0)
    sched.enqueue(req)
    step = sched.plan()
    assert step is not None and sched.reserved > 0
    sched.abort(req)
    sched.apply(step, 0.0)
    assert sched.idle() and sched.reserved == 0 and req.finish_reason == "abort"


def test_config_file_options_come_first(tmp_path: Path) -> None:
    config = tmp_path / "server.yaml"
    config.write_text("model_path: Qwen/Qwen3-30B-A3B\nmax-running-requests: 8\nenable_metrics: true\n"
                      "disable_radix_cache: false\n", encoding="utf-8")
    flags = parse_flags(["--config", str(config), "--max-running-requests", "16", *SCHEMAS])
    assert flags.args["model_path"] == "Qwen/Qwen3-30B-A3B"
    assert flags.args["max_running_requests"] == 16  # the command line wins
    assert flags.args["enable_metrics"] is True and flags.args["disable_radix_cache"] is False
    config.write_text("no_such_option: 1\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        parse_flags([*M30, "--config", str(config)])


def test_retraction_when_generations_outgrow_the_pool() -> None:
    # Reservations clip max_new_tokens at 4096 as SGLang's estimate does, so two 5000-token
    # generations are admitted together and then outgrow a 9000-token pool.
    cfg = config_from_argv([*M30, "--max-total-tokens", "9000"])
    sched = Scheduler(cfg.timing, cfg.scheduler_limits())
    reqs = [Request(f"r{i}", list(range(i, i + 100)), max_new_tokens=5000, stop_after=5000, arrival=0.0)
            for i in range(2)]
    for req in reqs:
        sched.enqueue(req)
    steps = 0
    while (step := sched.plan()) is not None:
        sched.apply(step, 0.0)
        steps += 1
        assert sched.kv_used() <= 9000 + 2
    assert all(r.generated == 5000 for r in reqs)
    assert sched.counters.retractions >= 1 and sched.idle()
