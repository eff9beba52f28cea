"""Workloads in a plan (domain/plan/workload.py), their files checked with the line of
each problem (domain/plan/workload_files.py, ``runner check``), the client arguments they
become, and the driver's own pieces (trace prompts, replay fidelity, per-turn summary)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from domain.core.i18n import t
from domain.plan.plan_io import PlanError, dump_plan, load_plan
from domain.plan.run_plan import point_conditions
from domain.plan.workload_files import workload_file_problems
from runner.sglang_side.bench_driver import per_turn, trace_prompts, trace_replay
from runner.workload_run import workload_argv
from tests.conftest import ROOT

HEAD = """\
name: w
engine: emulator
model: Qwen/Qwen3-30B-A3B
gpu: {type: H200, count: 1}
benchmark:
  concurrency: [4]
"""


def _plan(workload: str, extra: str = "") -> Any:
    return load_plan(HEAD + f"  workload: {workload}\n" + extra, max_bytes=1 << 20)


def _trace(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GSP = ("{kind: shared-prefix, groups: 8, prompts_per_group: 32, system_prompt_len: 2048, question_len: 128, "
       "output_len: 64}")


def test_shared_prefix_is_the_clients_own_dataset_and_a_condition() -> None:
    plan = _plan(GSP)
    [point] = plan.points()
    assert point.num_prompts == 256 and (point.scenario.input_len, point.scenario.output_len) == (2176, 64)
    conditions = point_conditions(plan, point)
    assert conditions["dataset"] == "generated-shared-prefix"
    assert conditions["workload"] == ("shared-prefix groups=8 output_len=64 prompts_per_group=32 question_len=128 "
                                      "system_prompt_len=2048")
    random = load_plan(HEAD, max_bytes=1 << 20)
    assert workload_argv(random.benchmark, {"--cache-report"}) == ["--dataset-name", "random-ids", "--cache-report"]
    argv = workload_argv(plan.benchmark, {"--cache-report"})
    assert argv[:2] == ["--dataset-name", "generated-shared-prefix"] and argv[-1] == "--cache-report"
    assert argv[argv.index("--gsp-num-groups") + 1] == "8"
    assert load_plan(dump_plan(plan), max_bytes=1 << 20) == plan  # a stored plan reads back


def test_text_and_multi_turn_imply_their_client_settings(tmp_path: Path) -> None:
    chat = _plan(f"{{kind: multi-turn, path: {tmp_path}/c.json, output_len: 32}}")
    bench = chat.benchmark
    assert (bench.backend, bench.tokenize_prompt, bench.apply_chat_template) == ("sglang-oai-chat", False, True)
    conditions = point_conditions(chat, chat.points()[0])
    assert conditions["dataset"] == "agentic-trace" and conditions["input_len"] is None
    text = _plan(f"{{kind: text, path: {tmp_path}/s.json, format: sharegpt, output_len: 16}}")
    assert workload_argv(text.benchmark, set())[-2:] == ["--sharegpt-output-len", "16"]


@pytest.mark.parametrize(("extra", "kind"), [
    ("  scenarios: [{name: s, input_len: 1, output_len: 1}]\n", "workload_alone"),
    ("  dataset: sharegpt\n  dataset_path: /x.json\n", "workload_alone"),
    ("  tokenize_prompt: true\n", "workload_text"),
])
def test_a_workload_refuses_what_contradicts_it(extra: str, kind: str) -> None:
    with pytest.raises(PlanError) as refused:
        _plan("{kind: text, path: /x.json, format: sharegpt}", extra)
    assert [p.kind for p in refused.value.problems] == [kind]


def test_a_malformed_trace_is_refused_with_its_line(tmp_path: Path) -> None:
    path = _trace(tmp_path, ['{"timestamp": 0, "input_len": 10, "output_len": 4}', "",
                             '{"timestamp": 5, "input_len": 0, "output_len": 4}',
                             '{"timestamp": 9, "input_len": 10, "output_len": 4, "group": 1',
                             '{"timestamp": "soon", "input_len": 10, "output_len": 4}'])
    plan = _plan(f"{{kind: trace, path: {path}}}")
    problems = workload_file_problems(plan.benchmark.workload)
    assert [(p.line, p.what.split(" ")[0]) for p in problems] == [(3, "input_len"), (4, "not"), (5, "timestamp")]
    assert problems[0].text("ja").startswith(f"ワークロードのファイル {path} の 3 行目")


@pytest.mark.parametrize(("content", "expected"), [
    (None, "no such file"),
    ('{"conversations": [[{"messages": [{"role": "user"}]}]]}', "conversation 1: turn 1"),
    ('{"conversations": [\n[}', "line 2"),
])
def test_multi_turn_files_are_checked(tmp_path: Path, content: str | None, expected: str) -> None:
    path = tmp_path / "chats.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    [problem] = workload_file_problems(_plan(f"{{kind: multi-turn, path: {path}}}").benchmark.workload)
    assert expected in problem.text("en")


def test_runner_check_names_the_line_of_a_malformed_trace(env: dict[str, str], tmp_path: Path) -> None:
    trace = _trace(tmp_path, ['{"timestamp": 0, "input_len": 10, "output_len": 4}',
                              '{"timestamp": 1, "input_len": 10}'])
    plan = tmp_path / "plan.yaml"
    plan.write_text(HEAD + f"  workload: {{kind: trace, path: {trace}}}\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "runner", "check", str(plan)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    assert f"workload file {trace}, line 2: output_len must be an integer >= 1" in done.stdout + done.stderr


def test_trace_groups_share_a_prefix_and_replay_lag_is_measured() -> None:
    rows = [{"timestamp": 0, "input_len": 40, "output_len": 1, "group": "a"},
            {"timestamp": 10, "input_len": 50, "output_len": 1, "group": "a"},
            {"timestamp": 20, "input_len": 30, "output_len": 1}]
    first, second, third = trace_prompts(rows, vocab=1000, seed=1)
    assert [len(p) for p in (first, second, third)] == [40, 50, 30]
    assert first[:39] == second[:39]
    assert third[:5] != first[:5]
    replay = trace_replay([0.0, 1.0, 2.0], [100.0, 101.02, 102.05])
    assert replay["max_lag_ms"] == pytest.approx(50) and replay["max_lag_pct_of_span"] == pytest.approx(2.5)


def test_per_turn_summary_keeps_the_servers_cached_tokens() -> None:
    lines = [{"turn": t, "success": True, "ttft": 0.01 * t, "cached_tokens": 32 * (t - 1), "prompt_len": 100 * t}
             for t in (1, 2, 2)]
    summary = per_turn(lines)
    assert [(s["turn"], s["requests"], s["cached_tokens"]) for s in summary] == [(1, 1, 0), (2, 2, 64)]
    assert summary[1]["mean_ttft_ms"] == pytest.approx(20)
    assert json.dumps(summary)  # stored with the point's conditions


# -- what the compare page and the exports show ---------------------------------------------------

def _rate_point(rate: float, achieved: float, ttft_p99: float, **overrides: Any) -> dict[str, Any]:
    from tests.test_analysis import point

    return point(2, 16, scenario=f"short.rate{rate:g}", request_rate=rate, arrival="poisson", rate_sweep_of="short",
                 request_throughput=achieved, ttft_p99_ms=ttft_p99, **overrides)


def test_a_rate_sweep_is_a_curve_with_its_knee_and_never_lined_up_with_concurrency() -> None:
    from domain.compare.comparability import comparability_matrix, comparability_summary
    from domain.results.workload_report import rate_curves, rate_knees
    from tests.test_analysis import frame, point

    rates = [(1, 1.0, 50), (2, 2.0, 55), (4, 3.9, 70), (8, 7.2, 150), (16, 7.5, 2000), (32, 7.6, 9000)]
    data = frame(*[point(1, c) for c in (1, 2, 4, 8, 16)], *[_rate_point(*r) for r in rates])
    curves = rate_curves(data)
    assert list(curves["request_rate"]) == [1, 2, 4, 8, 16, 32]
    [knee] = rate_knees(curves, sla_threshold_ms=1000).to_dict("records")
    assert knee["knee_rate"] == 8 and knee["sla_break_rate"] == 16 and knee["max_achieved_rps"] == 7.6
    data["workload"] = "random-ids"
    data["cache_state"] = "flushed"
    data.loc[data["run_id"] == 1, "arrival"] = "closed-loop"
    matrix = comparability_matrix(data, 1, [2], frozenset())
    verdict = comparability_summary(matrix).set_index("run_id").loc[2, "verdict"]
    assert verdict == "not_comparable"  # a rate point's scenario is its own: no point in common
    # Poisson arrivals at the same (scenario, concurrency) as closed-loop ones: arrival is fatal.
    poisson = frame(*[point(1, c, arrival="closed-loop") for c in (1, 2)],
                    *[point(3, c, arrival="poisson", request_rate=4.0) for c in (1, 2)])
    matrix = comparability_matrix(poisson, 1, [3], frozenset())
    arrival = matrix[(matrix["run_id"] == 3) & (matrix["condition"] == "arrival")].iloc[0]
    assert arrival["state"] == "differ" and arrival["fatal"]
    assert comparability_summary(matrix).set_index("run_id").loc[3, "verdict"] == "not_comparable"


def test_cache_figures_per_group_size_and_an_unexpected_hit_is_badged() -> None:
    from domain.results.validity import point_badges
    from domain.results.workload_columns import workload_columns
    from domain.results.workload_report import cache_by_group_size
    from tests.test_analysis import frame, point

    record = {"cache_report": {"total_prompt_tokens": 1000, "total_cached_tokens": 900, "cache_hit_rate_pct": 90.0}}
    gsp = workload_columns({"workload": "shared-prefix groups=8 prompts_per_group=32", "flush_cache": False}, record)
    assert (gsp["cache_state"], gsp["cache_hit_pct"], gsp["prompts_per_group"]) == ("warm", 90.0, 32)
    random = workload_columns({"dataset": "random-ids", "flush_cache": True, "request_rate": "inf"}, record)
    assert random["workload"] == "random-ids" and random["arrival"] == "closed-loop"
    row = point(1, 4, dataset="random-ids", **random)
    assert ("unexpected_cache_hit", "90.0 % of prompt tokens cached by the server") in point_badges(row)
    assert not [b for b in point_badges(point(1, 4, dataset="generated-shared-prefix", **gsp))
                if b[0] == "unexpected_cache_hit"]
    table = cache_by_group_size(frame(point(1, 4, **gsp, ttft_mean_ms=30.0), point(1, 8, **gsp, ttft_mean_ms=50.0)))
    shown = table[["prompts_per_group", "points", "cache_hit_pct", "ttft_mean_ms"]].values.tolist()
    assert shown == [[32, 2, 90.0, 40.0]]


def test_the_rate_curve_is_drawn_with_its_knee_and_exported() -> None:
    """A concurrency sweep and a rate sweep of one configuration compared: the chart set
    gains the rate chart (its knee a dashed rule, named in the subtitle), the Markdown export
    carries the knee table, and the checklist calls the pair not comparable."""
    from domain.compare.comparison import build_comparison
    from domain.render import deck, pictures, tables
    from tests.test_analysis import frame, point

    rates = [(1, 1.0, 50), (2, 2.0, 55), (4, 3.9, 70), (8, 7.2, 150), (16, 7.5, 2000)]
    data = frame(*[point(1, c) for c in (1, 2, 4, 8, 16)],
                 *[_rate_point(*r, workload="random-ids", cache_state="flushed") for r in rates])
    c = build_comparison(data, 1, [2], "en")
    assert c.checklist.set_index("run_id").loc[2, "verdict"] == "not_comparable"
    titles = [title for title, _chart in deck.standard_charts(c)]
    assert titles[-1] == t("workload.chart.rate_title", "en")
    svg = pictures.comparison_chart_svg(c, deck.standard_charts(c)[-1][1])
    assert "saturates at an arrival rate of 8 req/s" in svg and "stroke-dasharray" in svg
    markdown = tables.comparison_markdown(c)
    assert t("workload.section.rate_knees", "en") in markdown and "| 8 |" in markdown.replace("8.0", "8")
