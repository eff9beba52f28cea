"""Make the cold-first-point test fixture: the REAL bench_serving client (SGLang 0.5.23, from
``.venv-sglang``) sweeping concurrency 1, 2, 4, 8, 16 against an emulator started cold.

Usage::

    .venv/bin/python tools/make_cold_sweep_fixture.py [--out DIR]

Writes ``tests/fixtures/cold_first_point/`` (committed; ``tests/test_cold_sweep_fixture.py``
reads it): ``sweep-0.5.23.jsonl``, the client's own ``--output-file`` (one record per
point, appended in sweep order), and ``manifest.json`` with the emulator's and every
client run's command line, the predicted warm figures and what the emulator reported
(its step loop's lag, so a CPU-bound run can be recognised).  Nothing in the JSONL is
written by this script.  The emulator's and the client's logs stay in
``build/cold-sweep-fixture/`` (gitignored); the fixture's README.md is written by hand.

How the first point comes out cold, as on a freshly launched server: the emulator runs
with ``--emulate-cold-start-s`` (emulator/launch.py), its first forward steps
``COLD_FACTOR`` times slower, and the c=1 point has ``--warmup-requests 0``, so it is the
first work the server does.  The cold window is sized from the emulator's own predictor
(emulator/predict.py): ``COLD_MARGIN`` × factor × the predicted warm duration of the c=1
point, so the whole c=1 point runs cold and what is left of the window is spent in the
c=2 point's warmup request, which bench_serving does not measure.  The later points
warm up with one request (bench_serving's default).

The sweep runs in one client process (tools/import_fixture_driver.py), as the runner's
warm driver does, with ``HF_HUB_OFFLINE=1``; about a minute on an idle 2-core host
(the client's imports are most of it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make the repository importable
    sys.path.insert(0, str(ROOT))

from domain.flags.schema import SCHEMA_DIR  # noqa: E402
from domain.results.curve import COLD_EFFICIENCY  # noqa: E402
from emulator import predict  # noqa: E402
from emulator.step_loop import DEFAULT_COLD_FACTOR  # noqa: E402
from emulator.testing import running_emulator  # noqa: E402
from tools.make_import_fixtures import drive, ensure_tokenizer  # noqa: E402

OUT_DIR = ROOT / "tests" / "fixtures" / "cold_first_point"
WORK_DIR = ROOT / "build" / "cold-sweep-fixture"  # logs and the raw output (gitignored)
FIXTURE_NAME = "sweep-0.5.23.jsonl"
MODEL = "Qwen/Qwen3-30B-A3B"
ISL, OSL = 64, 32
CONCURRENCY = (1, 2, 4, 8, 16)
# Slow motion ×2: the emulated c=16 point stays far below the ~2500 tok/s this host can
# stream (emulator/launch.py, CPU_SAFE_TOK_S), so the curve is the model's, not the CPU's.
TIME_SCALE = 2.0
COLD_FACTOR = DEFAULT_COLD_FACTOR
# The cold window covers the predicted c=1 point and 10 % more: the client's gaps between
# requests are not stepping time, and the rest goes into c=2's unmeasured warmup request.
COLD_MARGIN = 1.1


def prompts_for(concurrency: int) -> int:
    """Four requests at c=1 (a point of seconds, not one request), two rounds above."""
    return max(4, 2 * concurrency)


def warmup_for(concurrency: int) -> int:
    """No warmup at the first point, so it is the server's first work: the cold point."""
    return 0 if concurrency == CONCURRENCY[0] else 1


def relative(path: Path) -> str:
    """Paths as the commands give them (the emulator and the client run from the repository);
    not resolved, as ``data`` may be a symlink out of it."""
    return os.path.relpath(path, ROOT)


def emulator_args(tokenizer: Path, cold_s: float) -> list[str]:
    return ["--model-path", MODEL, "--emulate-schema-dir", relative(SCHEMA_DIR), "--emulate-startup-s", "0.2",
            "--emulate-time-scale", f"{TIME_SCALE:g}", "--emulate-tokenizer-dir", relative(tokenizer),
            "--emulate-cold-start-s", f"{cold_s:g}", "--emulate-cold-start-factor", f"{COLD_FACTOR:g}"]


def warm_flags() -> list[str]:
    """The emulator's flags that set its warm timing, for emulator/predict.py."""
    return ["--model-path", MODEL, "--emulate-schema-dir", str(SCHEMA_DIR), "--emulate-time-scale", f"{TIME_SCALE:g}"]


def predicted_warm(concurrency: int) -> dict[str, Any]:
    """What the warm emulator serves at this point (emulator/predict.py, same flags)."""
    return predict(ISL, OSL, concurrency, warm_flags(), num_prompts=prompts_for(concurrency)).as_dict()


def cold_seconds() -> float:
    """The cold window: COLD_MARGIN × COLD_FACTOR × the predicted warm c=1 point."""
    return round(COLD_MARGIN * COLD_FACTOR * predicted_warm(CONCURRENCY[0])["duration_s"], 1)


def bench_argv(base_url: str, tokenizer: Path, out: Path, concurrency: int) -> list[str]:
    return ["--backend", "sglang", "--base-url", base_url, "--tokenizer", relative(tokenizer),
            "--dataset-name", "random-ids", "--random-input-len", str(ISL), "--random-output-len", str(OSL),
            "--random-range-ratio", "1.0", "--num-prompts", str(prompts_for(concurrency)),
            "--max-concurrency", str(concurrency), "--warmup-requests", str(warmup_for(concurrency)),
            "--tokenize-prompt", "--disable-tqdm", "--output-file", str(out)]


def _records(path: Path) -> list[dict[str, Any]]:
    # bench_serving writes a bare Infinity for request_rate, which is not JSON.
    return [json.loads(line.replace("Infinity", "1e999")) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def check_cold(records: list[dict[str, Any]]) -> float:
    """The c=2 point's efficiency against c=1; refuses a sweep whose first point is not cold."""
    by_c = {int(r["max_concurrency"]): float(r["output_throughput"]) for r in records}
    if sorted(by_c) != list(CONCURRENCY):
        raise RuntimeError(f"expected one record per concurrency {CONCURRENCY}, got {sorted(by_c)}")
    efficiency = (by_c[2] / by_c[1]) / 2
    if efficiency <= COLD_EFFICIENCY:
        raise RuntimeError(f"the c=1 point did not come out cold (c=2 efficiency {efficiency:.2f} ≤ "
                           f"{COLD_EFFICIENCY}): {by_c}")
    return efficiency


def make(out_dir: Path) -> dict[str, Any]:
    tokenizer = ensure_tokenizer()
    seconds = cold_seconds()
    args = emulator_args(tokenizer, seconds)
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    output = WORK_DIR / FIXTURE_NAME
    output.unlink(missing_ok=True)  # bench_serving appends
    started = time.perf_counter()
    with running_emulator(args, WORK_DIR / "emulator.log") as emulator:
        runs = [bench_argv(emulator.base_url, tokenizer, output, c) for c in CONCURRENCY]
        results = drive("module", runs, WORK_DIR / "client.log")
        with urllib.request.urlopen(emulator.base_url + "/server_info", timeout=10) as answer:  # noqa: S310  # loopback
            info = json.load(answer)
        log = emulator.log()
    failed = [r for r in results if not r["ok"]]
    if failed:
        raise RuntimeError(f"bench_serving failed: {failed[0]['error']}")
    records = _records(output)
    efficiency = check_cold(records)
    manifest = {
        "made_by": relative(Path(__file__)),
        "client": "sglang 0.5.23 sglang.benchmark.serving.cli_main (tools/import_fixture_driver.py module)",
        "emulator_argv": args,
        "cold_start": {"seconds": seconds, "factor": COLD_FACTOR, "margin": COLD_MARGIN},
        "runs": [{**r, "argv": [str(a).replace(str(WORK_DIR), "<out>") for a in r["argv"]]} for r in results],
        "predicted_warm": {c: predicted_warm(c) for c in CONCURRENCY},
        "measured_output_tok_s": {int(r["max_concurrency"]): r["output_throughput"] for r in records},
        "c2_efficiency_against_c1": round(efficiency, 3),
        "emulator_lag_s": info["emulator"]["lag_seconds"],
        "cold_phase_log": [line for line in log.splitlines() if "emulated cold start" in line],
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
    print(json.dumps({k: manifest[k] for k in ("cold_start", "measured_output_tok_s", "c2_efficiency_against_c1",
                                               "emulator_lag_s", "made_in_s")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
