"""Idle time between sweep points, and the telemetry sampler's CPU cost.

A real runner (``python -m runner work --burst``) sweeps the emulator with the real
bench_serving client: 8 points of about 30 s (128/256 tokens, concurrency 1…8, 24
prompts per concurrency slot).  From the phase times the client reports per point:

    gap(i→i+1) = (measure_start[i+1] − done[i]) − (flush_start[i+1] − warmup_start[i+1])

that is, from the end of one measured point to the start of the next, flush, request
hand-over, dataset and tokenizer preparation included, the next point's warmup excluded
(warmup is method, not waste).  Reported as the median gap ÷ the median measured point.

The same sweep with BENCHDECK_BENCH_MODE=per-point (one client process per point, the
fallback for clients that cannot be driven in-process) has no phase marks; its gap is
the wall time between points plus each process's run time not spent in the measured
benchmark or its warmup (taken from the warm sweep's same point).

``python -m bench runner_gaps`` (about 12 minutes); ``--quick`` uses 8 points of ~6 s.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import prometheus_client
import psutil

from db import Store
from domain.core.access import Actor, Role
from domain.core.settings import get_settings
from domain.engines.sglang_metrics import SGLANG_METRICS
from domain.flags.schema import SCHEMA_DIR
from domain.plan.plan_io import plan_from_mapping
from domain.plan.presets import MODELS
from runner.process import pick_free_port, start_child, stop_group
from runner.telemetry import Sampler, fetch_metrics, read_server_metrics

ROOT = Path(__file__).resolve().parent.parent


def _plan(prompts_per_slot: int) -> Any:
    return plan_from_mapping({
        "name": "gap-bench", "engine": "emulator", "model": "Qwen/Qwen3-30B-A3B", "gpu": {"type": "H200", "count": 1},
        "server_args": {"max-running-requests": 64},
        "benchmark": {"scenarios": [{"name": "s", "input_len": 128, "output_len": 256}],
                      "concurrency": [1, 2, 3, 4, 5, 6, 7, 8], "num_prompts": f"{prompts_per_slot}x", "warmup": "1x"},
    })


def _sweep(tmp: Path, mode: str, prompts_per_slot: int) -> list[dict[str, Any]]:
    db = tmp / f"{mode}.duckdb"
    store = Store(db)
    store.migrate()
    run_id, _ = store.submit_run(_plan(prompts_per_slot), submitted_by=Actor("bench", Role.OPERATOR, via="bench"))
    env = dict(os.environ, BENCHDECK_DB=str(db), BENCHDECK_WORK_DIR=str(tmp / f"runs-{mode}"),
               BENCHDECK_BENCH_MODE=mode, BENCHDECK_RUNNER_ID=f"bench-{mode}", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "runner", "work", "--burst"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=3600, check=False)
    if store.get_run(run_id).status != "succeeded":  # type: ignore[union-attr]
        raise RuntimeError(f"{mode} sweep failed: {done.stderr[-2000:]}")
    points = [{**p.as_dict(), "timing": json.loads(p.timing or "{}")} for p in store.points_of(run_id)]
    return sorted(points, key=lambda p: p["timing"]["sent"])


def _warm_gaps(points: list[dict[str, Any]]) -> tuple[list[float], list[float], list[float]]:
    gaps, durations, warmups = [], [], []
    for prev, nxt in itertools.pairwise(points):
        t = nxt["timing"]
        warmup = t["flush_start"] - t["warmup_start"]
        gaps.append(t["measure_start"] - prev["timing"]["done"] - warmup)
        warmups.append(warmup)
    durations = [p["timing"]["done"] - p["timing"]["measure_start"] for p in points]
    return gaps, durations, warmups


def _per_point_gaps(points: list[dict[str, Any]], warm_points: list[dict[str, Any]]) -> list[float]:
    gaps = []
    for i in range(1, len(points)):
        t = points[i]["timing"]
        warm = warm_points[i]["timing"]
        measured = warm["done"] - warm["measure_start"]
        warmup = warm["flush_start"] - warm["warmup_start"]
        overhead = (t["done"] - t["sent"]) - measured - warmup
        gaps.append((t["sent"] - points[i - 1]["timing"]["done"]) + overhead)
    return gaps


def sampler_cost(seconds: float = 20.0) -> None:
    """CPU of the server-metrics sampler at 4 Hz (no GPU here; the NVML sampler was
    measured on the lent H200: see bench/nvml_probe.py), against three expositions:

    - the emulator's own ``/metrics`` (about a hundred lines);
    - what a real SGLang TP8 server of Qwen3-235B-A22B-FP8 exposes once every metric has
      been touched, written by SGLang's own collectors (runner/sglang_side/metrics_exposition.py,
      about 1,100 lines and 130 KB);
    - the same with DP attention over 8 ranks and every scheduler exporting (about
      4,200 lines and 650 KB): the largest exposition the team's layouts produce.

    The real texts are served by a separate process on a kept-alive connection, as
    uvicorn serves a real server's; only the sampler's own process is counted."""
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        _sampler_against_emulator(tmp, seconds)
        sglang_python = get_settings().sglang_python or get_settings().bench_python  # an SGLang environment
        for dp in (1, 8):
            body = real_exposition(tmp, sglang_python, dp_size=dp)
            if body is None:
                print(f"real SGLang exposition (dp {dp}): not measured, the SGLang environment could not write it")
                continue
            path = tmp / f"metrics-dp{dp}.txt"
            path.write_bytes(body)
            label = (f"real SGLang 0.5.23 exposition, TP8{' DP-attention 8' if dp > 1 else ''} "
                     f"({body.count(chr(10).encode()):,} lines, {len(body) / 1024:.0f} KiB)")
            _sampler_against_file(tmp, path, label, seconds)


def real_exposition(tmp: Path, sglang_python: Path, *, dp_size: int) -> bytes | None:
    """The ``/metrics`` text SGLang's collectors write for Qwen3-235B-A22B-FP8 at TP8."""
    model = MODELS["qwen3-235b-a22b-fp8"]
    model_dir = tmp / "model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "hidden_size": model.hidden_size, "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads, "num_key_value_heads": model.num_kv_heads,
        "head_dim": model.head_dim, "vocab_size": model.vocab_size, "num_experts": model.num_experts,
        "num_experts_per_tok": model.experts_per_token, "moe_intermediate_size": model.moe_intermediate_size,
        "max_position_embeddings": model.max_position_embeddings, "torch_dtype": "bfloat16",
        "tie_word_embeddings": model.tie_word_embeddings}))
    # The client environment has no prometheus_client (the server's exporter): the app's
    # copy is lent to it, as tests/test_metrics_sampler.py does.
    lent = tmp / "lent"
    if not lent.exists():
        lent.mkdir()
        (lent / "prometheus_client").symlink_to(Path(prometheus_client.__file__).parent)
    done = subprocess.run([str(sglang_python), str(ROOT / "runner" / "sglang_side" / "metrics_exposition.py"),
                           "--model-path", str(model_dir), "--dp-size", str(dp_size)],
                          env={**os.environ, "PYTHONPATH": str(lent)}, capture_output=True, timeout=300, check=False)
    return done.stdout if done.returncode == 0 and done.stdout else None


def _sampler_against_emulator(tmp: Path, seconds: float) -> None:
    port = pick_free_port(31000, 31999)
    child = start_child([sys.executable, "-m", "emulator", "--model-path", "Qwen/Qwen3-30B-A3B",
                         "--emulate-schema-dir", str(SCHEMA_DIR),
                         "--emulate-tokenizer-dir", str(get_settings().tokenizer_dir),
                         "--host", "127.0.0.1", "--port", str(port), "--enable-metrics"],
                        log_path=tmp / "emu.log")
    try:
        url = f"http://127.0.0.1:{port}"
        _await_metrics(url)
        body = fetch_metrics(url)
        label = f"emulator ({body.count(chr(10).encode()):,} lines, {len(body) / 1024:.0f} KiB)"
        _print_sampler_cost(url, label, seconds)
    finally:
        stop_group(child.pgid, grace_s=5, popen=child.popen)


# A static /metrics server for a fixed text: aiohttp keeps connections alive, as uvicorn does.
_STATIC_METRICS = """
import sys
from aiohttp import web
body = open(sys.argv[1], "rb").read()
async def metrics(request):
    return web.Response(body=body, content_type="text/plain", charset="utf-8")
app = web.Application()
app.router.add_get("/metrics", metrics)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[2]), print=None)
"""


def _sampler_against_file(tmp: Path, path: Path, label: str, seconds: float) -> None:
    port = pick_free_port(31000, 31999)
    child = start_child([sys.executable, "-c", _STATIC_METRICS, str(path), str(port)], log_path=tmp / "static.log")
    try:
        url = f"http://127.0.0.1:{port}"
        _await_metrics(url)
        _print_sampler_cost(url, label, seconds)
    finally:
        stop_group(child.pgid, grace_s=5, popen=child.popen)


def _await_metrics(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            read_server_metrics(SGLANG_METRICS, url, time.time())
            return
        except Exception:
            time.sleep(0.3)


def _print_sampler_cost(url: str, label: str, seconds: float) -> None:
    me = psutil.Process()
    cpu0 = sum(me.cpu_times()[:2])
    sampler = Sampler(lambda now: read_server_metrics(SGLANG_METRICS, url, now), hz=4)
    sampler.start()
    time.sleep(seconds)
    samples = sampler.stop()
    cpu = sum(me.cpu_times()[:2]) - cpu0
    print(f"server /metrics sampler at 4 Hz, {label}: {cpu:.3f} s CPU over {seconds:.0f} s = "
          f"{100 * cpu / seconds:.2f} % of one core (goal ≤ 1 %; {len(samples)} samples, {sampler.errors} errors)",
          flush=True)


def run(quick: bool = False) -> None:
    prompts = 5 if quick else 24
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        warm = _sweep(tmp, "warm", prompts)
        gaps, durations, warmups = _warm_gaps(warm)
        median_point = statistics.median(durations)
        print(f"warm client (one process per sweep): {len(warm)} points, median measured point {median_point:.1f} s, "
              f"median warmup {statistics.median(warmups):.2f} s")
        print(f"  idle gap median {statistics.median(gaps):.3f} s, max {max(gaps):.3f} s "
              f"= {100 * statistics.median(gaps) / median_point:.2f} % of the median point (goal ≤ 2 %)")
        per_point = _sweep(tmp, "per-point", prompts)
        pp_gaps = _per_point_gaps(per_point, warm)
        print(f"one process per point (fallback): idle gap median {statistics.median(pp_gaps):.2f} s, "
              f"max {max(pp_gaps):.2f} s = {100 * statistics.median(pp_gaps) / median_point:.1f} % of the median point")
    sampler_cost()
