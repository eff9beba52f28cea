"""The run plan: the minimal YAML, defaults, and malformed plans refused by field name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from db import Store
from domain.plan.plan_io import PlanError, dump_plan, load_plan
from domain.plan.run_plan import DEFAULT_CONCURRENCY, SCENARIO_PRESETS, RunPlan, point_conditions, quick_benchmark
from tests.conftest import ROOT
from tests.plans import MINIMAL_PLAN_YAML

LIMIT = 256 * 1024


def test_minimal_yaml_is_accepted() -> None:
    plan = load_plan(MINIMAL_PLAN_YAML, max_bytes=LIMIT)
    assert (plan.engine, plan.emulated, plan.engine_label) == ("sglang", True, "emulator") and plan.gpu.count == 1
    assert plan.server_args == {"tp-size": 1, "max-running-requests": 64, "mem-fraction-static": 0.85}
    assert [(p.concurrency, p.num_prompts, p.warmup) for p in plan.points()] == [(1, 10, 2), (4, 40, 8)]


def test_defaults_follow_the_seeds() -> None:
    plan = RunPlan(name="d", engine="emulator", model="Qwen/Qwen3-30B-A3B", gpu={"type": "H200", "count": 1})
    bench = plan.benchmark
    assert tuple(bench.concurrency) == DEFAULT_CONCURRENCY == (1, 2, 4, 8, 12, 16, 24, 32)
    assert [(s.input_len, s.output_len) for s in bench.scenarios] == [(128, 128), (4000, 200), (1000, 4000)]
    assert (bench.num_prompts, bench.warmup) == ("10x", "2x")
    assert bench.random_range_ratio == 1.0  # bench_serving's own 0.0 would vary ISL/OSL
    assert bench.seed == 42 and bench.dataset == "random-ids"
    assert bench.tokenize_prompt and bench.backend == "sglang"  # exact ISL
    point = plan.points()[-1]
    assert (point.concurrency, point.num_prompts, point.warmup) == (32, 320, 64)


def test_quick_preset_is_short_at_1_2_4_8() -> None:
    quick = quick_benchmark()
    assert quick.scenarios == [SCENARIO_PRESETS["short"]] and quick.concurrency == [1, 2, 4, 8]


def test_every_condition_is_stored_with_a_point() -> None:
    plan = load_plan(MINIMAL_PLAN_YAML, max_bytes=LIMIT)
    conditions = point_conditions(plan, plan.points()[0])
    for key in ("input_len", "output_len", "random_range_ratio", "num_prompts", "warmup", "dataset", "seed",
                "request_rate", "apply_chat_template", "thinking_mode", "ignore_eos"):
        assert key in conditions


def test_yaml_round_trip() -> None:
    plan = load_plan(MINIMAL_PLAN_YAML, max_bytes=LIMIT)
    assert load_plan(dump_plan(plan), max_bytes=LIMIT) == plan


GPU_LINE = "gpu: {type: H200, count: 1}"
CONC_LINE = "concurrency: [1, 4]"
PROMPTS_LINE = "num_prompts: 10x"


def _with(old: str, new: str) -> str:
    assert old in MINIMAL_PLAN_YAML
    return MINIMAL_PLAN_YAML.replace(old, new)


BAD_PLANS = {
    "wrong type": (_with(GPU_LINE, "gpu: {type: H200, count: one}"), "gpu.count"),
    "unknown key": (MINIMAL_PLAN_YAML + "colour: blue\n", "colour"),
    "negative": (_with(GPU_LINE, "gpu: {type: H200, count: -1}"), "gpu.count"),
    "absurd concurrency": (_with(CONC_LINE, "concurrency: [1, 1000000]"), "benchmark.concurrency.1"),
    "absurd prompts": (_with(PROMPTS_LINE, "num_prompts: 100000000"), "benchmark"),
    "negative prompts": (_with(PROMPTS_LINE, "num_prompts: -5"), "benchmark.num_prompts"),
    "bad multiplier": (_with("warmup: 2x", "warmup: lots"), "benchmark.warmup"),
    "flag with dashes": (_with("  tp-size: 1", "  --tp-size: 1"), "server_args"),
    "NaN flag": (_with("mem-fraction-static: 0.85", "mem-fraction-static: .nan"), "server_args"),
    "yaml tag": (_with("name: tp1-baseline", "name: !!python/object/apply:os.system [id]"), "YAML tags"),
    "duplicate key": (MINIMAL_PLAN_YAML + "engine: sglang\n", "engine: key appears twice"),
}


@pytest.mark.parametrize("case", sorted(BAD_PLANS))
def test_malformed_plans_name_the_field(case: str) -> None:
    text, expected = BAD_PLANS[case]
    with pytest.raises(PlanError) as info:
        load_plan(text, max_bytes=LIMIT)
    assert expected in str(info.value)


def test_alias_bomb_is_refused_before_expansion() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    with pytest.raises(PlanError, match="anchors and aliases"):
        load_plan(bomb, max_bytes=LIMIT)


def test_oversized_and_deep_plans_are_refused() -> None:
    with pytest.raises(PlanError, match="limit"):
        load_plan("name: x\n" + "#" * 300_000, max_bytes=LIMIT)
    deep = "a: " + "[" * 50 + "]" * 50
    with pytest.raises(PlanError, match="nests deeper"):
        load_plan(deep, max_bytes=LIMIT)


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_cli_check_and_submit_a_valid_plan(env: dict[str, str], tmp_path: Path, db_path: Path) -> None:
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(MINIMAL_PLAN_YAML)
    checked = _cli(env, "check", str(plan_file))
    assert checked.returncode == 0 and "plan is valid: 2 points" in checked.stdout
    submitted = _cli(env, "submit", str(plan_file))
    assert submitted.returncode == 0 and submitted.stdout.strip() == "1"
    status = _cli(env, "status")
    assert "tp1-baseline" in status.stdout and "queued" in status.stdout


@pytest.mark.parametrize("case", ["wrong type", "unknown key", "yaml tag"])
def test_cli_refuses_bad_plans_with_exit_1_and_queues_nothing(
    case: str, env: dict[str, str], tmp_path: Path, db_path: Path
) -> None:
    text, expected = BAD_PLANS[case]
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(text)
    for command in ("check", "submit"):
        result = _cli(env, command, str(plan_file))
        assert result.returncode == 1
        assert expected in result.stderr and "Traceback" not in result.stderr
    if db_path.exists():
        assert Store(db_path).list_runs() == []


def test_cli_japanese_output(env: dict[str, str], tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(MINIMAL_PLAN_YAML)
    result = _cli(env, "--lang", "ja", "check", str(plan_file))
    assert "プランは有効です" in result.stdout


def test_cli_unreadable_file(env: dict[str, str]) -> None:
    result = _cli(env, "check", "/nonexistent/plan.yaml")
    assert result.returncode == 1 and "cannot read" in result.stderr and "Traceback" not in result.stderr


def test_cli_submit_over_quota_is_refused_without_a_traceback(env: dict[str, str], tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(MINIMAL_PLAN_YAML)
    env["BENCHDECK_QUOTA_QUEUED_RUNS_PER_USER"] = "1"
    assert _cli(env, "submit", str(plan_file)).returncode == 0
    second = _cli(env, "submit", str(plan_file))
    assert second.returncode == 1 and "Quota exceeded" in second.stderr and "Traceback" not in second.stderr
