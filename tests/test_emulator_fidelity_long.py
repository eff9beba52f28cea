"""Long prompts: the emulator's scheduler forms prefill steps as SGLang's ``PrefillAdder``
does, and the estimator predicts what that scheduling gives when a round's prefill takes
several steps (ISL 2000-4000 at concurrency 4-8, default and small ``--chunked-prefill-size``,
``--max-prefill-tokens``, chunking off).

All on a virtual clock (:func:`emulator.predict`), a few seconds in all; the live
bench_serving client against a running emulator is in tests/test_emulator_bench.py.
"""

from __future__ import annotations

import pytest

from domain.estimate.estimator import estimate_point
from domain.flags.schema import SCHEMA_DIR
from emulator import config_from_argv, predict
from emulator.predict import estimator_setup
from emulator.scheduler import Request, Scheduler

M30 = ["--model-path", "Qwen/Qwen3-30B-A3B", "--emulate-schema-dir", str(SCHEMA_DIR)]
TOLERANCE = 0.15


def _prefill_steps(flags: list[str], prompts: list[int]) -> list[list[int]]:
    """The new tokens of each prompt in each prefill step, until every prompt is in."""
    cfg = config_from_argv([*M30, *flags])
    sched = Scheduler(cfg.timing, cfg.scheduler_limits())
    for i, isl in enumerate(prompts):
        sched.enqueue(Request(f"r{i}", [(i * 7919 + j) % 50_000 for j in range(isl)], max_new_tokens=4,
                              stop_after=4, arrival=0.0))
    steps: list[list[int]] = []
    while (step := sched.plan()) is not None and step.kind == "prefill":
        steps.append([n for _, n in step.chunks])
        sched.apply(step, 0.0)
    return steps


@pytest.mark.parametrize(("flags", "expected"), [
    # A prompt longer than what is left of the chunk is truncated there and ends the step.
    (["--chunked-prefill-size", "4096"], [[3000, 1096], [1904, 2192], [808]]),
    # max_prefill_tokens never truncates: the second prompt fits the chunk, so it joins whole.
    (["--max-prefill-tokens", "4096"], [[3000, 3000], [3000]]),
    # Chunking off: a later prompt joins only if shorter than what is left (3000 < 5192) ...
    (["--chunked-prefill-size", "-1", "--max-prefill-tokens", "8192"], [[3000, 3000], [3000]]),
    # ... and not when it is exactly what is left (SGLang: input_tokens >= rem_input_tokens).
    (["--chunked-prefill-size", "-1", "--max-prefill-tokens", "6000"], [[3000], [3000], [3000]]),
])
def test_prefill_steps_are_formed_as_sglang_forms_them(flags: list[str], expected: list[list[int]]) -> None:
    assert _prefill_steps(flags, [3000, 3000, 3000]) == expected


@pytest.mark.parametrize(("flags", "isl", "osl", "concurrency"), [
    ([], 4000, 128, 8),  # default chunk 8192: four steps
    (["--chunked-prefill-size", "2048"], 4000, 128, 4),
    (["--chunked-prefill-size", "1024"], 2000, 64, 8),
    (["--max-prefill-tokens", "4096"], 3000, 128, 8),
    (["--chunked-prefill-size", "-1", "--max-prefill-tokens", "8192"], 3000, 128, 8),
    (["--chunked-prefill-size", "2048", "--max-running-requests", "4"], 3000, 64, 8),  # queueing too
])
def test_replay_and_estimator_agree_on_multi_step_prefill(flags: list[str], isl: int, osl: int,
                                                           concurrency: int) -> None:
    cfg = config_from_argv([*M30, *flags])
    est = estimate_point(estimator_setup(cfg), isl, osl, concurrency)
    sim = predict(isl, osl, concurrency, cfg, num_prompts=4 * concurrency)
    prefill_steps = len(_prefill_steps(flags, [isl] * est.batch))
    assert prefill_steps >= 2, "not a multi-step prefill round"
    assert est.tpot_ms > est.itl_ms, "early prompts should carry the rest of the round's prefill in their TPOT"
    assert sim.median_ttft_ms == pytest.approx(est.ttft_ms, rel=TOLERANCE)
    assert sim.median_tpot_ms == pytest.approx(est.tpot_ms, rel=TOLERANCE)
    assert sim.output_throughput == pytest.approx(est.output_tok_s, rel=TOLERANCE)


def _first_tokens(flags: list[str], prompts: int, isl: int) -> tuple[list[float], list[float]]:
    """(end of each prefill step, each prompt's first-token time) of one round on a clock
    that advances by the steps' own durations."""
    cfg = config_from_argv([*M30, *flags])
    sched = Scheduler(cfg.timing, cfg.scheduler_limits())
    reqs = [Request(f"r{i}", [(i * 7919 + j) % 50_000 for j in range(isl)], max_new_tokens=4, stop_after=4,
                    arrival=0.0) for i in range(prompts)]
    for req in reqs:
        sched.enqueue(req)
    now, prefill_ends = 0.0, []
    while (step := sched.plan()) is not None:
        sched.pop_released()
        now += step.duration_s
        sched.apply(step, now)
        if step.kind == "prefill":
            prefill_ends.append(now)
    return prefill_ends, [r.first_token_at or -1.0 for r in reqs]


def test_overlap_scheduler_streams_a_prefill_steps_tokens_when_the_next_prefill_step_ends() -> None:
    """SGLang's event_loop_overlap processes a batch's result after launching the next one,
    also between two prefill batches (emulator/scheduler.py): r0, done in step 0, streams at
    the end of step 1; r1 (step 1) at the end of step 2; r2, done in the round's last prefill
    step, when its own step ends (a decode step follows).  With --disable-overlap-schedule
    each streams when its own step ends; the estimator applies the same two rules."""
    ends, first = _first_tokens(["--chunked-prefill-size", "4096"], 3, 3000)
    assert len(ends) == 3
    assert first == [ends[1], ends[2], ends[2]]
    ends_off, first_off = _first_tokens(["--chunked-prefill-size", "4096", "--disable-overlap-schedule"], 3, 3000)
    assert first_off == ends_off
    for flags in ([], ["--disable-overlap-schedule"]):
        cfg = config_from_argv([*M30, "--chunked-prefill-size", "4096", *flags])
        est = estimate_point(estimator_setup(cfg), 3000, 4, 3)
        streamed = first if not flags else first_off
        assert est.ttft_ms == pytest.approx(sorted(streamed)[1] * 1e3)  # the median of the three


def test_a_single_step_round_streams_when_its_step_ends_either_way() -> None:
    ends, first = _first_tokens([], 2, 1000)
    assert len(ends) == 1 and first == [ends[0], ends[0]]
