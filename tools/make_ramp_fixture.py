"""Make the ramp-in-the-window test fixture: the REAL bench_serving client (SGLang 0.5.23, from
``.venv-sglang``) measuring one concurrency twice against an emulator started cold, with
``--output-details`` (per-request arrays).

Usage::

    .venv/bin/python tools/make_ramp_fixture.py [--out DIR]

Writes ``tests/fixtures/ramp_in_window/`` (committed; ``tests/test_method_badges.py`` reads
it): ``points-0.5.23.jsonl``, the client's own ``--output-file`` (two records, appended in
order), and ``manifest.json`` with the emulator's and both client runs' command lines and
what the emulator reported about its cold phase.  Nothing in the JSONL is written by this
script.  Logs stay in ``build/ramp-fixture/`` (gitignored).

The two records:

1. **burst**: c=``CONCURRENCY``, ``--warmup-requests 0``, the first work of a server whose
   first forward steps run ``COLD_FACTOR`` times slower (``--emulate-cold-start-s``,
   emulator/step_loop.py ``ColdStart``).  The cold window is ``COLD_STEPS`` × factor × the
   predicted warm TTFT (emulator/predict.py): about the first wave's prefill and a few of its
   decode steps, so the first wave's TTFT is inflated and the waves after it are served warm.
2. **steady**: the same point once the cold phase is over (the emulator says so in
   ``/server_info``), with ``CONCURRENCY`` warmup requests, as the runner measures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make the repository importable
    sys.path.insert(0, str(ROOT))

from emulator import predict  # noqa: E402
from emulator.testing import running_emulator  # noqa: E402
from tools.make_cold_sweep_fixture import (  # noqa: E402  # the same emulator, its flags and paths
    COLD_FACTOR,
    ISL,
    OSL,
    emulator_args,
    relative,
    warm_flags,
)
from tools.make_import_fixtures import drive, ensure_tokenizer  # noqa: E402

OUT_DIR = ROOT / "tests" / "fixtures" / "ramp_in_window"
WORK_DIR = ROOT / "build" / "ramp-fixture"  # logs and the raw output (gitignored)
FIXTURE_NAME = "points-0.5.23.jsonl"
CONCURRENCY, PROMPTS = 8, 64
COLD_STEPS = 3  # the cold window in warm TTFTs (before the factor): the first wave's prefill and a few steps


def predicted_warm() -> dict[str, Any]:
    return predict(ISL, OSL, CONCURRENCY, warm_flags(), num_prompts=PROMPTS).as_dict()


def cold_seconds() -> float:
    return round(COLD_STEPS * COLD_FACTOR * predicted_warm()["median_ttft_ms"] / 1000.0, 2)


def bench_argv(base_url: str, tokenizer: Path, out: Path, warmup: int) -> list[str]:
    return ["--backend", "sglang", "--base-url", base_url, "--tokenizer", relative(tokenizer),
            "--dataset-name", "random-ids", "--random-input-len", str(ISL), "--random-output-len", str(OSL),
            "--random-range-ratio", "1.0", "--num-prompts", str(PROMPTS), "--max-concurrency", str(CONCURRENCY),
            "--warmup-requests", str(warmup), "--tokenize-prompt", "--disable-tqdm", "--output-details",
            "--output-file", str(out)]


def _lag(base_url: str) -> float:
    """How far the emulator's step loop fell behind its schedule (a CPU-bound run shows here)."""
    with urllib.request.urlopen(base_url + "/server_info", timeout=10) as answer:  # noqa: S310  # loopback
        return float(json.load(answer)["emulator"]["lag_seconds"])


def make(out_dir: Path) -> dict[str, Any]:
    tokenizer = ensure_tokenizer()
    seconds = cold_seconds()
    args = emulator_args(tokenizer, seconds)
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    output = WORK_DIR / FIXTURE_NAME
    output.unlink(missing_ok=True)  # bench_serving appends
    started = time.perf_counter()
    with running_emulator(args, WORK_DIR / "emulator.log") as emulator:
        burst = drive("module", [bench_argv(emulator.base_url, tokenizer, output, 0)], WORK_DIR / "client-burst.log")
        cold_log = [line for line in emulator.log().splitlines() if "emulated cold start" in line]
        steady = drive("module", [bench_argv(emulator.base_url, tokenizer, output, CONCURRENCY)],
                       WORK_DIR / "client-steady.log")
        lag = _lag(emulator.base_url)
    results = [*burst, *steady]
    if not all(r["ok"] for r in results):
        raise RuntimeError(f"bench_serving failed: {[r['error'] for r in results]}")
    if len(cold_log) < 2:  # the line that opens the cold phase and the one that closes it
        raise RuntimeError(f"the cold phase outlasted the burst point, so the steady one would be cold: {cold_log}")
    manifest = {
        "made_by": relative(Path(__file__)),
        "client": "sglang 0.5.23 sglang.benchmark.serving.cli_main (tools/import_fixture_driver.py module)",
        "emulator_argv": args,
        "cold_start": {"seconds": seconds, "factor": COLD_FACTOR, "steps": COLD_STEPS},
        "records": ["burst", "steady"],
        "runs": [{**r, "argv": [str(a).replace(str(WORK_DIR), "<out>") for a in r["argv"]]} for r in results],
        "predicted_warm": predicted_warm(),
        "cold_phase_log_after_burst": cold_log,
        "emulator_lag_s": lag,
        "made_in_s": round(time.perf_counter() - started, 1),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
    (out_dir / FIXTURE_NAME).write_bytes(output.read_bytes())  # the README is written by hand, kept
    return manifest


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    cli.add_argument("--out", type=Path, default=OUT_DIR, help=f"fixture directory (default {relative(OUT_DIR)})")
    opts = cli.parse_args(argv)
    manifest = make(opts.out)
    shown = ("cold_start", "cold_phase_log_after_burst", "emulator_lag_s", "made_in_s")
    print(json.dumps({k: manifest[k] for k in shown}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
