"""Generate the importer's test fixtures by running the REAL clients against the emulator.

Usage::

    .venv/bin/python tools/make_import_fixtures.py [--force]

Writes ``build/import-fixtures/`` (gitignored) with a ``manifest.json`` that records every
command, its outcome and the time taken.  Nothing in it is hand-written:

* ``sglang-0.5.23.jsonl``: the installed client (``.venv-sglang``), two runs in one file
  (ISL 64/OSL 32 at concurrency 1, 2, 4, then ISL 32/OSL 16 tagged ``second`` at 1, 2);
* ``sglang-0.5.23-details.jsonl``: one run with ``--output-details``;
* ``sglang-0.5.23-rust.jsonl``: the Rust client (``"request_rate": "inf"``), concurrency 1, 2;
* ``sglang-0.4.6.post5.jsonl`` / ``-details.jsonl``: the 0.4.6.post5 client (35-key
  records), its single-file ``bench_serving.py`` taken from the PyPI wheel (downloaded
  once, without dependencies, into ``build/sglang-wheels/``) and run with the SGLang
  interpreter;
* ``all-failed-<mode>-<version>.jsonl``: what each client leaves when every measured
  request fails, the server either crashing after the warmup request or rejecting every
  request; the outcome (exit, error, whether a record was written) is in the manifest;
* ``aiperf/concurrency_<c>/profile_export_aiperf.{json,csv}``: ``aiperf==0.13.0`` (its own
  environment, ``.venv-aiperf``, created here if missing) sweeping concurrency 1 and 4.

Everything talks to loopback emulators only and nothing is downloaded at run time except
the one wheel: bench_serving runs with ``HF_HUB_OFFLINE=1``.  AIPerf 0.13.0 cannot load a
local tokenizer directory in offline mode (it hands the path to ``snapshot_download``,
which rejects it), so it runs with ``HF_ENDPOINT`` pointed at a closed loopback port: any
Hub request fails at once instead of downloading.

The output is regenerated only when this script, the driver or the AIPerf requirement
changes (their hash is in the manifest); a lock makes concurrent callers wait.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make the repository importable
    sys.path.insert(0, str(ROOT))

from domain.flags.schema import SCHEMA_DIR  # noqa: E402
from emulator.build_tokenizer import build as build_tokenizer  # noqa: E402
from emulator.testing import EmulatorProcess, running_emulator  # noqa: E402
from tools.regenerate_schemas import fetch_wheel  # noqa: E402

OUT_DIR = ROOT / "build" / "import-fixtures"
LOCK_FILE = ROOT / "build" / "import-fixtures.lock"
DRIVER = ROOT / "tools" / "import_fixture_driver.py"
AIPERF_REQUIREMENTS = ROOT / "requirements-aiperf.txt"
AIPERF_VENV = ROOT / ".venv-aiperf"
DEFAULT_TOKENIZER = ROOT / "data" / "tokenizer"
NEW_VERSION = "0.5.23"
OLD_VERSION = "0.4.6.post5"
MODEL = "Qwen/Qwen3-30B-A3B"
ISL, OSL = 64, 32
CONCURRENCY = (1, 2, 4)
AIPERF_CONCURRENCY = (1, 4)  # each AIPerf run costs ~15-40 s of service start-up here
RUN_TIMEOUT_S = 300
# The emulator's own default speed; 0.2 s "startup" keeps the fixtures quick.
EMULATOR_ARGS = ["--model-path", MODEL, "--emulate-startup-s", "0.2", "--emulate-schema-dir", str(SCHEMA_DIR)]


def sglang_python() -> Path:
    """The SGLang interpreter; the same variable the runner and the tests read."""
    return Path(os.environ.get("BENCHDECK_BENCH_PYTHON", ROOT / ".venv-sglang" / "bin" / "python"))


def generator_id() -> str:
    """Changes whenever what the fixtures are made from changes: the clients' driver and
    the server they run against (the emulator's code, whose answers the files record)."""
    digest = hashlib.sha256()
    for path in (Path(__file__), DRIVER, AIPERF_REQUIREMENTS, *sorted((ROOT / "emulator").glob("*.py"))):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def prompts_for(concurrency: int) -> int:
    return 2 * concurrency  # two rounds per point: quick, still a real sweep


def offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGLANG_IS_IN_CI")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1")
    return env


def aiperf_env() -> dict[str, str]:
    env = {k: v for k, v in offline_env().items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_DISABLE_TELEMETRY="1")  # port 9: nothing listens
    return env


def run_logged(argv: list[str], log: Path, env: dict[str, str], timeout: float = RUN_TIMEOUT_S) -> int:
    """Run argv (no shell) with its output in ``log``; the exit status."""
    print("+", " ".join(argv), file=sys.stderr, flush=True)
    with log.open("ab") as out:
        done = subprocess.run(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,  # noqa: S603
                              stdin=subprocess.DEVNULL, timeout=timeout, check=False, start_new_session=True)
    return done.returncode


# -- bench_serving ----------------------------------------------------------------------------


def bench_argv(base_url: str, tokenizer: Path, out: Path, concurrency: int, *, isl: int = ISL, osl: int = OSL,
               details: bool = False, tag: str | None = None, tokenize_prompt: bool = True) -> list[str]:
    argv = ["--backend", "sglang", "--base-url", base_url, "--tokenizer", str(tokenizer),
            "--dataset-name", "random-ids", "--random-input-len", str(isl), "--random-output-len", str(osl),
            "--random-range-ratio", "1.0", "--num-prompts", str(prompts_for(concurrency)),
            "--max-concurrency", str(concurrency), "--warmup-requests", "1", "--disable-tqdm",
            "--output-file", str(out)]
    argv += ["--tokenize-prompt"] if tokenize_prompt else []  # 0.4.6 has no --tokenize-prompt
    argv += ["--output-details"] if details else []
    argv += ["--tag", tag] if tag else []
    return argv


def drive(client: str, runs: list[list[str]], log: Path) -> list[dict[str, Any]]:
    """Run several bench_serving argvs in one client process; the outcome of each."""
    argv = [str(sglang_python()), str(DRIVER), client, json.dumps(runs)]
    print("+", " ".join(argv[:3]), f"<{len(runs)} runs>", file=sys.stderr, flush=True)
    done = subprocess.run(argv, cwd=ROOT, env=offline_env(), capture_output=True, text=True,  # noqa: S603
                          timeout=RUN_TIMEOUT_S, check=False, start_new_session=True)
    log.write_text(done.stdout + done.stderr, encoding="utf-8")
    results = [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines()
               if line.startswith("FIXTURE_RUN ")]
    if done.returncode != 0 or len(results) != len(runs):
        raise RuntimeError(f"bench driver failed (exit {done.returncode}), see {log}:\n{done.stderr[-3000:]}")
    return [{"argv": run, **result} for run, result in zip(runs, results, strict=True)]


def _require_ok(results: list[dict[str, Any]], what: str) -> None:
    failed = [r for r in results if not r["ok"]]
    if failed:
        raise RuntimeError(f"{what}: {len(failed)} run(s) failed: {failed[0]['error']}")


def _records(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip()) if path.exists() else 0


def new_python_client(work: Path, tokenizer: Path, emulator: EmulatorProcess) -> dict[str, Any]:
    url = emulator.base_url
    main_file, details_file = work / f"sglang-{NEW_VERSION}.jsonl", work / f"sglang-{NEW_VERSION}-details.jsonl"
    runs = [bench_argv(url, tokenizer, main_file, c) for c in CONCURRENCY]
    runs += [bench_argv(url, tokenizer, main_file, c, isl=32, osl=16, tag="second") for c in (1, 2)]
    runs += [bench_argv(url, tokenizer, details_file, 2, details=True)]
    results = drive("module", runs, work / "logs" / "sglang-new.log")
    _require_ok(results, f"sglang {NEW_VERSION}")
    client = f"sglang {NEW_VERSION} benchmark.serving (python)"
    return {main_file.name: {"client": client, "runs": results[:5], "records": _records(main_file)},
            details_file.name: {"client": client, "runs": results[5:], "records": _records(details_file)}}


def rust_client(work: Path, tokenizer: Path, emulator: EmulatorProcess) -> dict[str, Any]:
    out = work / f"sglang-{NEW_VERSION}-rust.jsonl"
    runs = [bench_argv(emulator.base_url, tokenizer, out, c) for c in (1, 2)]
    results = drive("rust", runs, work / "logs" / "sglang-rust.log")
    _require_ok(results, "sglang rust client")
    return {out.name: {"client": f"sglang {NEW_VERSION} benchmark.rust_client", "runs": results,
                       "records": _records(out)}}


def old_client_script(work: Path) -> Path:
    """``bench_serving.py`` of the old release, taken from its wheel (a single file)."""
    wheel = fetch_wheel(sglang_python(), OLD_VERSION)
    target = work / "clients" / f"sglang-{OLD_VERSION}" / "bench_serving.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        target.write_bytes(archive.read("sglang/bench_serving.py"))
    return target


def old_python_client(work: Path, tokenizer: Path, emulator: EmulatorProcess, script: Path) -> dict[str, Any]:
    url = emulator.base_url
    main_file, details_file = work / f"sglang-{OLD_VERSION}.jsonl", work / f"sglang-{OLD_VERSION}-details.jsonl"
    runs = [bench_argv(url, tokenizer, main_file, c, tokenize_prompt=False) for c in CONCURRENCY]
    runs += [bench_argv(url, tokenizer, details_file, 2, details=True, tokenize_prompt=False)]
    results = drive(str(script), runs, work / "logs" / "sglang-old.log")
    _require_ok(results, f"sglang {OLD_VERSION}")
    client = f"sglang {OLD_VERSION} bench_serving.py (python, from the wheel)"
    return {main_file.name: {"client": client, "runs": results[:3], "records": _records(main_file)},
            details_file.name: {"client": client, "runs": results[3:], "records": _records(details_file)}}


# Two ways for every measured request to fail.  "crash": the server dies right after the
# warmup request.  "rejected": the server stays up and refuses each measured request (prompt
# 64 + output 64 > --context-length 112) while the warmup, which both clients cap at 32
# output tokens, still passes (0.4.6.post5 ignores --warmup-requests and always sends one).
FAILURE_MODES: dict[str, tuple[list[str], int]] = {
    "crash": (["--emulate-fault", "crash-after-requests=1"], OSL),
    "rejected": (["--context-length", "112"], 64),
}


def all_failed(work: Path, tokenizer: Path, client: str, version: str) -> dict[str, dict[str, Any]]:
    """One run of ``client`` per failure mode, in one client process (its imports are most of
    a run's CPU), each against an emulator of its own; what the client leaves, by mode."""
    outs = {mode: work / f"all-failed-{mode}-{version}.jsonl" for mode in FAILURE_MODES}
    with contextlib.ExitStack() as stack:
        argvs = []
        for mode, (emulator_args, osl) in FAILURE_MODES.items():
            args = [*EMULATOR_ARGS, "--emulate-tokenizer-dir", str(tokenizer), *emulator_args]
            log = work / "logs" / f"emulator-all-failed-{mode}-{version}.log"
            emulator = stack.enter_context(running_emulator(args, log))
            argvs.append(bench_argv(emulator.base_url, tokenizer, outs[mode], 2, osl=osl,
                                    tokenize_prompt=version != OLD_VERSION))
        results = drive(client, argvs, work / "logs" / f"all-failed-{version}.log")
    return {f"{mode}-{version}": {"client": f"sglang {version}", "mode": mode, **result,
                                  "record_written": out.exists(), "records": _records(out), "file": out.name}
            for (mode, out), result in zip(outs.items(), results, strict=True)}


# -- AIPerf ---------------------------------------------------------------------------------


def aiperf_bin() -> Path:
    return AIPERF_VENV / "bin" / "aiperf"


def ensure_aiperf_venv() -> None:
    """``.venv-aiperf`` with exactly requirements-aiperf.txt; reinstalled only when it changes."""
    stamp = AIPERF_VENV / ".benchdeck-installed"
    want = hashlib.sha256(AIPERF_REQUIREMENTS.read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text().strip() == want and aiperf_bin().exists():
        return
    print(f"installing {AIPERF_VENV.name} from {AIPERF_REQUIREMENTS.name}", file=sys.stderr, flush=True)
    python = AIPERF_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(AIPERF_VENV)], check=True)  # noqa: S603
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(AIPERF_REQUIREMENTS)],  # noqa: S603
                   check=True)
    stamp.write_text(want + "\n")


def aiperf_sweep(work: Path, tokenizer: Path, emulator: EmulatorProcess) -> dict[str, Any]:
    out = work / "aiperf"
    argv = [str(aiperf_bin()), "profile", "--model", MODEL, "--url", emulator.base_url,
            "--endpoint-type", "completions", "--streaming", "--tokenizer", str(tokenizer),
            "--concurrency", ",".join(str(c) for c in AIPERF_CONCURRENCY),
            "--request-count", str(prompts_for(max(AIPERF_CONCURRENCY))),
            "--warmup-request-count", "1", "--prompt-input-tokens-mean", str(ISL), "--prompt-input-tokens-stddev",
            "0", "--prompt-output-tokens-mean", str(OSL), "--prompt-output-tokens-stddev", "0",
            "--extra-inputs", "ignore_eos:true", "--random-seed", "42", "--output-artifact-dir", str(out),
            "--no-server-metrics", "--no-gpu-telemetry", "--ui-type", "none"]
    started = time.perf_counter()
    status = run_logged(argv, work / "logs" / "aiperf.log", aiperf_env())
    exports = sorted(str(p.relative_to(work)) for p in out.glob("concurrency_*/profile_export_aiperf.*"))
    if status != 0 or len(exports) != 2 * len(AIPERF_CONCURRENCY):
        raise RuntimeError(f"aiperf exited {status} with {len(exports)} exports; see {work / 'logs' / 'aiperf.log'}")
    version = subprocess.run([str(aiperf_bin()), "--version"], capture_output=True, text=True,  # noqa: S603
                             check=True).stdout.strip()
    return {"client": f"aiperf {version}", "argv": argv[1:], "wall_s": round(time.perf_counter() - started, 3),
            "exports": exports}


# -- putting it together ----------------------------------------------------------------------


def ensure_tokenizer(directory: Path = DEFAULT_TOKENIZER) -> Path:
    if not (directory / "tokenizer.json").exists():
        build_tokenizer(directory)
    return directory


@contextlib.contextmanager
def _emulator(work: Path, tokenizer: Path, name: str) -> Iterator[EmulatorProcess]:
    args = [*EMULATOR_ARGS, "--emulate-tokenizer-dir", str(tokenizer)]
    with running_emulator(args, work / "logs" / f"emulator-{name}.log") as emulator:
        yield emulator


def _lanes(work: Path, tokenizer: Path, old_script: Path) -> list[Callable[[], dict[str, Any]]]:
    """Independent jobs, each with its own emulator(s), so they can run side by side."""
    def new_lane() -> dict[str, Any]:
        with _emulator(work, tokenizer, "new") as emulator:
            return {"files": {**new_python_client(work, tokenizer, emulator),
                              **rust_client(work, tokenizer, emulator)}}

    def old_lane() -> dict[str, Any]:
        with _emulator(work, tokenizer, "old") as emulator:
            return {"files": old_python_client(work, tokenizer, emulator, old_script)}

    def failure_lane() -> dict[str, Any]:
        clients = {NEW_VERSION: "module", f"{NEW_VERSION}-rust": "rust", OLD_VERSION: str(old_script)}
        by_client = [all_failed(work, tokenizer, client, version) for version, client in clients.items()]
        return {"all_failed": {key: outcome for outcomes in by_client for key, outcome in outcomes.items()}}

    def aiperf_lane() -> dict[str, Any]:
        ensure_aiperf_venv()
        with _emulator(work, tokenizer, "aiperf") as emulator:
            return {"aiperf": aiperf_sweep(work, tokenizer, emulator)}

    return [aiperf_lane, new_lane, old_lane, failure_lane]


def generate(work: Path, tokenizer: Path) -> dict[str, Any]:
    (work / "logs").mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    manifest: dict[str, Any] = {"generator": generator_id(), "files": {}, "tokenizer": str(tokenizer),
                                "isl": ISL, "osl": OSL, "concurrency": list(CONCURRENCY),
                                "aiperf_concurrency": list(AIPERF_CONCURRENCY)}
    old_script = old_client_script(work)
    lanes = _lanes(work, tokenizer, old_script)
    with ThreadPoolExecutor(max_workers=len(lanes)) as pool:
        for part in [future.result() for future in [pool.submit(lane) for lane in lanes]]:
            manifest["files"].update(part.pop("files", {}))
            manifest.update(part)
    manifest["generated_in_s"] = round(time.perf_counter() - started, 1)
    (work / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def up_to_date(out_dir: Path = OUT_DIR) -> bool:
    try:
        manifest = json.loads((out_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(manifest.get("generator") == generator_id())


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with LOCK_FILE.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second caller waits, then finds the fixtures made
        yield


def ensure_fixtures(*, force: bool = False, out_dir: Path = OUT_DIR) -> Path:
    """The fixture directory, generated first if missing or stale (idempotent)."""
    with _locked():
        if not force and up_to_date(out_dir):
            return out_dir
        work = out_dir.with_name(out_dir.name + ".tmp")
        shutil.rmtree(work, ignore_errors=True)
        manifest = generate(work, ensure_tokenizer())
        shutil.rmtree(out_dir, ignore_errors=True)
        work.rename(out_dir)  # the directory appears complete or not at all
        print(f"import fixtures in {out_dir.relative_to(ROOT)} ({manifest['generated_in_s']} s)", file=sys.stderr)
        return out_dir


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    cli.add_argument("--force", action="store_true", help="regenerate even if the fixtures are up to date")
    opts = cli.parse_args(argv)
    ensure_fixtures(force=opts.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
