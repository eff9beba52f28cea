"""The full-size workload figures of issue 43, end to end on the emulator (no GPU here): every
number comes from runs queued with ``python -m runner submit``, executed by ``python -m
runner work --burst`` with the real bench_serving client, and read back the way the compare
page and ``python -m runner export`` read them.  Takes about half an hour on two busy cores.

    .venv/bin/python -m tools.workload_figures [--out DIR] [--only gsp,rates,chat,trace]

It prints, per figure, the server's own cache counts and the client's timings, the export
files it wrote (CSV and Markdown, as ``runner export`` writes them), and ``runner check``'s
answer to a malformed trace.  The emulated figures say what the emulator's model of a
server does with these workloads; they are not measurements of a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
MODEL = "Qwen/Qwen3-30B-A3B"
SERVER = {"max-running-requests": 64, "mem-fraction-static": 0.85}
# The rate and concurrency sweeps' server: at most 16 requests run together, so both curves
# flatten inside their ranges (1-16 req/s offered; concurrency 1-64) and each has a knee.
RATES_CAP = {"max-running-requests": 16}
WORDS = "model server token request batch cache memory prefill decode throughput latency".split()


def plan(name: str, benchmark: dict[str, Any], **server: Any) -> dict[str, Any]:
    return {"name": name, "engine": "emulator", "model": MODEL, "gpu": {"type": "H200", "count": 1},
            "server_args": {**SERVER, **server}, "benchmark": benchmark}


def runner(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "runner", *args], cwd=ROOT, env=env, capture_output=True,  # noqa: S603
                          text=True, check=False, timeout=7200)
    if check and done.returncode != 0:
        raise SystemExit(f"runner {' '.join(args)} failed: {done.stderr[-2000:]}")
    return done


def submit(env: dict[str, str], out: Path, data: dict[str, Any]) -> int:
    path = out / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return int(runner(env, "submit", str(path)).stdout.strip().splitlines()[-1])


def conversations(path: Path, count: int, turns: int, words: int) -> Path:
    """Each message its own seeded draw of words, so no two conversations share a prefix."""
    chats = [[{"messages": [{"role": "user", "content": " ".join(
        random.Random(c * 1000 + t).choices(WORDS, k=words))}]} for t in range(turns)]  # noqa: S311 - text
        for c in range(count)]
    path.write_text(json.dumps({"conversations": chats}), encoding="utf-8")
    return path


def trace(path: Path, lines: int, span_s: float) -> Path:
    """Bursty arrivals (gaps of 20 to 380 ms), four prefix groups, mixed lengths."""
    stamps, now = [], 0.0
    for i in range(lines):
        stamps.append(round(now, 3))
        now += (20 + (i * 97) % 361) * span_s * 1000 / (200 * lines)
    rows = [{"timestamp": stamp, "input_len": 256 + (i * 53) % 768, "output_len": 16 + (i * 29) % 48, "group": i % 4}
            for i, stamp in enumerate(stamps)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def figures(only: set[str], out: Path) -> dict[str, list[dict[str, Any]]]:
    """The plans of each figure: (label, plan) in the order they are compared."""
    gsp = {"kind": "shared-prefix", "groups": 8, "prompts_per_group": 32, "system_prompt_len": 2048,
           "question_len": 128, "output_len": 32}
    chats = conversations(out / "chats.json", 50, 4, 300) if "chat" in only else None
    plans: dict[str, list[dict[str, Any]]] = {
        "gsp": [plan("gsp-warm", {"concurrency": [16], "warmup": 2, "flush_cache": False, "workload": gsp}),
                plan("gsp-no-radix", {"concurrency": [16], "warmup": 2, "flush_cache": False, "workload": gsp},
                     **{"disable-radix-cache": True})],
        # One configuration for both sweeps, its request cap (RATES_CAP) inside the
        # concurrency range so that the closed-loop sweep saturates (two doublings past it).
        "rates": [plan("rates", {"scenarios": [{"name": "chat", "input_len": 512, "output_len": 256}],
                                 "concurrency": [32], "num_prompts": 48, "warmup": 4,
                                 "request_rates": [1, 2, 4, 8, 16]}, **RATES_CAP),
                  plan("concurrency", {"scenarios": [{"name": "chat", "input_len": 512, "output_len": 256}],
                                       "concurrency": [1, 2, 4, 8, 16, 32, 64], "num_prompts": "2x",
                                       "warmup": "1x"}, **RATES_CAP)],
        "chat": [plan("chat-cache-on", {"concurrency": [8], "warmup": 1, "num_prompts": 50,
                                        "workload": {"kind": "multi-turn", "path": str(chats), "output_len": 64}}),
                 plan("chat-cache-off", {"concurrency": [8], "warmup": 1, "num_prompts": 50,
                                         "workload": {"kind": "multi-turn", "path": str(chats), "output_len": 64}},
                      **{"disable-radix-cache": True})],
        "trace": [plan("trace", {"concurrency": [256], "warmup": 1, "num_prompts": 200,
                                 "workload": {"kind": "trace", "path": str(trace(out / "trace.jsonl", 200, 20))}})],
    }
    return {name: runs for name, runs in plans.items() if name in only}


def export(env: dict[str, str], out: Path, run_ids: list[int]) -> list[str]:
    done = runner(env, "export", "--baseline", str(run_ids[0]), "--runs", *map(str, run_ids[1:]),
                  "--format", "csv", "--format", "md", "--out", str(out / "exports"))
    return done.stdout.split()


def show_gsp(store: Any, runs: list[int]) -> None:
    for run_id in runs:
        for p in store.points_of(run_id):
            report = json.loads(p.raw_record).get("cache_report") or {}
            print(f"  run {run_id} {p.scenario} c={p.concurrency}: cache hit {report.get('cache_hit_rate_pct')} % "
                  f"({report.get('total_cached_tokens')}/{report.get('total_prompt_tokens')} prompt tokens, "
                  f"server's count), TTFT mean {p.ttft_mean_ms:.1f} ms, median {p.ttft_median_ms:.1f} ms, "
                  f"p99 {p.ttft_p99_ms:.1f} ms, completed {p.completed}/{p.requested}")
    warm, cold = (store.points_of(r)[0] for r in runs)
    print(f"  TTFT mean without radix cache / with it: {cold.ttft_mean_ms / warm.ttft_mean_ms:.2f}x "
          f"(median {cold.ttft_median_ms / warm.ttft_median_ms:.2f}x)")


def show_rates(frame: Any, store: Any, runs: list[int]) -> None:
    from domain.compare.comparability import comparability_matrix, comparability_summary
    from domain.results import curve
    from domain.results.analysis import summarise_points
    from domain.results.workload_report import rate_curves, rate_knees

    curves = rate_curves(frame)
    for row in curves.to_dict("records"):
        print(f"  rate {row['request_rate']:g} req/s offered: achieved {row['achieved_rps']:.2f} req/s, "
              f"TTFT p99 {row['ttft_p99_ms']:.1f} ms, E2E median {row['e2e_median_ms']:.0f} ms")
    for row in rate_knees(curves).to_dict("records"):
        print(f"  rate sweep knee: {row['knee_rate']} req/s ({row['knee_method']}), max achieved "
              f"{row['max_achieved_rps']:.2f} req/s")
    summary = summarise_points(frame[frame["run_id"] == runs[1]])
    for row in summary.sort_values("concurrency").to_dict("records"):
        print(f"  concurrency {row['concurrency']:g}: output {row['output_tok_s']:.0f} tok/s, "
              f"{row['qps']:.2f} req/s, TTFT p99 {row['ttft_p99']:.1f} ms")
    for row in curve.saturation_points(summary).to_dict("records"):
        print(f"  concurrency sweep knee: c={row['knee_concurrency']} ({row['knee_method']})")
    matrix = comparability_matrix(frame, runs[0], [runs[1]], frozenset())
    verdict = comparability_summary(matrix).set_index("run_id").loc[runs[1]]
    print(f"  checklist, concurrency run #{runs[1]} against rate run #{runs[0]}: {verdict['verdict']} "
          f"(fatal: {verdict['fatal']})")


def show_chat(store: Any, runs: list[int]) -> None:
    for run_id in runs:
        [p] = store.points_of(run_id)
        checks = json.loads(p.conditions)["request_checks"]
        turns = ", ".join(f"turn {t['turn']}: TTFT {t['mean_ttft_ms']:.1f} ms, cached {t['cached_tokens']}/"
                          f"{t['prompt_tokens']} tokens ({t['requests']} requests)" for t in checks["per_turn"])
        print(f"  run {run_id} completed {p.completed}/{p.requested}: {turns}")


def show_trace(store: Any, runs: list[int], out: Path, env: dict[str, str]) -> None:
    [p] = store.points_of(runs[0])
    replay = json.loads(p.conditions)["request_checks"]["trace_replay"]
    print(f"  {p.completed} requests, trace span {replay['span_s']:.3f} s, replayed span "
          f"{replay['replayed_span_s']:.3f} s, largest lag {replay['max_lag_ms']:.1f} ms, mean lag "
          f"{replay['mean_lag_ms']:.1f} ms, largest lag = {replay['max_lag_pct_of_span']:.2f} % of the span")
    bad = out / "bad-trace.jsonl"
    lines = (out / "trace.jsonl").read_text(encoding="utf-8").splitlines()
    lines[6] = lines[6].replace('"output_len"', '"output_length"')
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = yaml.safe_load((out / "trace.yaml").read_text(encoding="utf-8"))
    data["benchmark"]["workload"]["path"] = str(bad)
    (out / "bad-trace.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    done = runner(env, "check", str(out / "bad-trace.yaml"), check=False)
    print(f"  runner check of a malformed trace: exit {done.returncode}")
    print("\n".join(f"    {line}" for line in (done.stdout + done.stderr).strip().splitlines()))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.workload_figures")
    parser.add_argument("--out", default=str(ROOT / "data" / "workload-figures"))
    parser.add_argument("--only", default="gsp,rates,chat,trace")
    parser.add_argument("--shown", action="store_true",
                        help="show the runs a previous call left in --out (same --only) without running them again")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "BENCHDECK_DB": str(out / "figures.duckdb"), "BENCHDECK_WORK_DIR": str(out / "runs"),
           "BENCHDECK_LANGUAGE": "en", "PYTHONPATH": str(ROOT)}
    plans = figures(set(args.only.split(",")), out)
    if args.shown:  # submitted in this order by the earlier call: run ids 1, 2, ...
        ids = iter(range(1, 1 + sum(len(group) for group in plans.values())))
        runs = {name: [next(ids) for _ in group] for name, group in plans.items()}
    else:
        runs = {name: [submit(env, out, data) for data in group] for name, group in plans.items()}
        runner(env, "work", "--burst")
    os.environ.update(BENCHDECK_DB=env["BENCHDECK_DB"])
    from db import Store
    from domain.results.frames import points_frame

    store = Store(Path(env["BENCHDECK_DB"]))
    for name, run_ids in runs.items():
        statuses = [getattr(store.get_run(r), "status", None) for r in run_ids]
        print(f"== {name}: runs {run_ids} ({', '.join(map(str, statuses))})")
        frame = points_frame(p.as_dict() for p in store.points_for_comparison(run_ids))
        if name == "gsp":
            show_gsp(store, run_ids)
        elif name == "rates":
            show_rates(frame, store, run_ids)
        elif name == "chat":
            show_chat(store, run_ids)
        else:
            show_trace(store, run_ids, out, env)
        if len(run_ids) > 1:
            print("  exports: " + " ".join(export(env, out, run_ids)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
