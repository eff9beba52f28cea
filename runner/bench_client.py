"""Running the real bench_serving client for each sweep point.

``WarmBenchClient`` keeps one client process (runner/sglang_side/bench_driver.py, in the SGLang
environment) alive for the whole sweep; ``OneShotBenchClient`` starts
``python -m <module>`` per point, the fallback for client versions whose internals
cannot be driven in-process.  Both take the same argv and produce the same JSONL file.
``KeptClient`` lets the runner daemon hand an idle warm client to its next run when
nothing about the client differs (``ClientKey``): the 0.5.23 client's imports are about
9-12 s of CPU that a queue of small runs, a tuning study above all, would otherwise pay
once per run while the GPU idles.

Both also leave each measured request's outcome: the warm driver writes the client's own
``RequestFuncOutput`` per request as JSON lines (``requests_from_driver``); the fallback
asks the client for ``--output-details`` and reads its arrays (``requests_from_details``).
``write_request_samples`` turns either into one Parquet file per point.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from tokenizers import Tokenizer

from domain.plan.run_plan import Point, RunPlan, repeat_seed
from domain.plan.thinking import CHAT_BACKEND, bench_argv_extras, tokenizer_flag
from domain.results.request_table import (  # noqa: F401 - re-exported: the runner's names for them
    REQUEST_SCHEMA,
    MeasuredRequest,
    request_table,
    requests_from_details,
)
from runner.process import Child, start_child, stop_group
from runner.workload_run import workload_argv

DRIVER = Path(__file__).resolve().parent / "sglang_side" / "bench_driver.py"


class BenchError(RuntimeError):
    """The client failed to produce a result for a point (it ran, but did not finish well)."""


class BenchCancelled(RuntimeError):
    pass


class TokenizerUnavailable(BenchError):
    """The served model's tokenizer is not on this host (nothing is downloaded)."""


# What a tokenizer directory may hold; any one of the loadable ones makes it usable.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "merges.txt",
                   "special_tokens_map.json", "added_tokens.json", "chat_template.jinja")
LOADABLE_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


@dataclass(frozen=True)
class BenchTokenizer:
    """The tokenizer the bench client counts and draws prompts with, as a point records it."""

    path: Path
    # "toy" (emulated runs); the served model's flag: tokenizer-path / model-path (SGLang), tokenizer / model (vLLM)
    source: str
    vocab_size: int | None  # without added tokens: the id range random-ids draws from
    sha256: str  # short hash of the tokenizer files' contents

    def condition(self) -> dict[str, Any]:
        return {"path": str(self.path), "source": self.source, "vocab_size": self.vocab_size,
                "sha256": self.sha256}


def bench_tokenizer(plan: RunPlan, toy_dir: Path) -> BenchTokenizer:
    """The toy tokenizer for emulated runs (the emulator serves with it too); for a real
    engine the served model's own: ``tokenizer-path`` from the plan's flags when set (the
    server uses it), else the ``--model-path`` directory.  Offline only: a hub id or a
    directory without tokenizer files raises :class:`TokenizerUnavailable`."""
    if plan.emulated:
        return describe_tokenizer(toy_dir, "toy")
    named = tokenizer_flag(plan)
    flag = named if plan.server_args.get(named) else ("model" if plan.is_vllm else "model-path")
    where = str(plan.server_args.get(named) or plan.model)
    directory = Path(where)
    if not (directory.is_absolute() and any((directory / name).is_file() for name in LOADABLE_FILES)):
        raise TokenizerUnavailable(
            f"the bench client needs the served model's tokenizer on this host: {flag} {where!r} is not a local "
            f"directory with {', '.join(LOADABLE_FILES[:-1])} or {LOADABLE_FILES[-1]}. Give the model as a local "
            f"directory or set {named} in server_args (nothing is downloaded, and the toy tokenizer would "
            "count and draw prompts wrongly for a real model)")
    return describe_tokenizer(directory, flag)


def describe_tokenizer(directory: Path, source: str) -> BenchTokenizer:
    digest = hashlib.sha256()
    for name in TOKENIZER_FILES:
        path = directory / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes())
    return BenchTokenizer(directory, source, _vocab_size(directory), digest.hexdigest()[:12])


def _vocab_size(directory: Path) -> int | None:
    """``tokenizer.vocab_size`` as bench_serving reads it (added tokens left out), from
    tokenizer.json; None for a directory without one (a SentencePiece model)."""
    path = directory / "tokenizer.json"
    if not path.is_file():
        return None
    return int(Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=False))


def bench_env(tokenizer_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    # Nothing may be downloaded: the tokenizer is local, datasets are local or random-ids.
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.pop("SGLANG_IS_IN_CI", None)  # it would flush the cache on its own
    return env


def build_bench_argv(
    plan: RunPlan, point: Point, *, base_url: str, tokenizer: Path, output_file: Path, known_flags: set[str],
    output_details: bool = False,
) -> list[str]:
    """bench_serving arguments for one point; optional flags only where the client has them.
    ``output_details``: ask for the per-request arrays (the fallback's only source of
    per-request data), where the client knows ``--output-details``."""
    bench = plan.benchmark
    dataset = workload_argv(bench, known_flags)
    argv = [
        "--backend", bench.backend,
        "--base-url", base_url,
        "--tokenizer", str(tokenizer),
        *dataset,
        "--num-prompts", str(point.num_prompts),
        "--random-input-len", str(point.scenario.input_len),
        "--random-output-len", str(point.scenario.output_len),
        "--random-range-ratio", str(bench.random_range_ratio),
        "--request-rate", str(point.request_rate if point.request_rate is not None else bench.request_rate),
        "--max-concurrency", str(point.concurrency),
        "--warmup-requests", str(point.warmup),
        "--seed", str(repeat_seed(bench, point.repeat_idx)),
        "--output-file", str(output_file),
    ]
    if bench.dataset_path:
        argv += ["--dataset-path", bench.dataset_path]
    optional = {
        "--flush-cache": bench.flush_cache,
        "--tokenize-prompt": bench.tokenize_prompt,
        # The server renders chat requests; the client would render a text dataset's template a second time.
        "--apply-chat-template": bench.apply_chat_template and bench.backend != CHAT_BACKEND,
        "--disable-ignore-eos": not bench.ignore_eos,
    }
    for flag, wanted in optional.items():
        if wanted:
            if flag not in known_flags:
                raise BenchError(f"this bench_serving has no {flag}; the plan needs it")
            argv.append(flag)
    if "--ready-check-timeout-sec" in known_flags:
        argv += ["--ready-check-timeout-sec", "0"]  # the runner already gated readiness
    if output_details and "--output-details" in known_flags:
        argv.append("--output-details")
    extras = bench_argv_extras(bench)  # thinking mode: chat_template_kwargs on every request
    if extras and "--extra-request-body" not in known_flags:
        raise BenchError("this bench_serving has no --extra-request-body; the plan's thinking mode needs it")
    argv += extras
    return argv


@dataclass
class PointOutcome:
    ok: bool
    error: str | None
    measure_started_at: float | None  # time.time() when warmup ended (None: unknown)
    started_at: float
    finished_at: float
    phases: dict[str, float] = field(default_factory=dict)  # warmup_start, flush_start, measure_start, done
    # What the warm driver corrected (moved random-ids starts, empty completions failed);
    # None where nothing could check (the one-process-per-point fallback).
    checks: dict[str, Any] | None = None
    # Where the warm driver wrote each measured request (None: not asked, the fallback).
    requests_file: Path | None = None


@dataclass
class WarmBenchClient:
    """One client process for the whole sweep (imports paid once)."""

    python: Path
    log_path: Path
    env: dict[str, str]
    child: Child | None = None
    module: str | None = None
    version: str | None = None
    known_flags: set[str] = field(default_factory=set)
    mode: str = "warm"
    wrap_argv: Callable[[list[str]], list[str]] | None = None  # e.g. runner.lifeline.wrap on a Ray node
    tokenizer: BenchTokenizer | None = None  # set by the attempt: what every point's prompts use
    busy: bool = False  # a point was sent and its "done" not read: the process is mid-point
    runs_served: int = 0  # attempts this process served before the current one (0: started for it)
    started_at: float | None = None  # time.time() of the process start

    def start(self, *, timeout_s: float = 180) -> None:
        self.started_at = time.time()
        argv = [str(self.python), str(DRIVER)]
        self.child = start_child(
            self.wrap_argv(argv) if self.wrap_argv else argv, log_path=self.log_path, env=self.env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        ready = self._next_event(timeout_s, cancelled=lambda: False)
        if ready.get("event") != "ready":
            raise BenchError(f"bench client did not start ({ready.get('event')}): {ready.get('error') or ready}")
        self.module, self.version = ready.get("module"), ready.get("version")
        self.known_flags = set(ready.get("flags") or [])

    def _next_event(self, timeout_s: float, cancelled: Callable[[], bool]) -> dict[str, Any]:
        assert self.child is not None and self.child.popen.stdout is not None  # noqa: S101 - started above
        stdout = self.child.popen.stdout
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if cancelled():
                raise BenchCancelled("cancelled")
            readable, _, _ = select.select([stdout], [], [], 0.2)
            if readable:
                line = stdout.readline()
                if not line:
                    raise BenchError(f"bench client exited (code {self.child.popen.wait()})")
                return dict(json.loads(line))
            if not self.child.alive:
                raise BenchError(f"bench client exited (code {self.child.returncode})")
        raise BenchError(f"bench client gave no answer within {timeout_s:.0f} s")

    def run_point(
        self, point_id: str, argv: list[str], *, timeout_s: float, cancelled: Callable[[], bool],
        requests_file: Path | None = None, dataset: dict[str, Any] | None = None,
    ) -> PointOutcome:
        """Run one point; with ``requests_file`` the driver writes every measured request there;
        ``dataset``: rows the driver loads itself (runner/workload_run.py)."""
        assert self.child is not None and self.child.popen.stdin is not None  # noqa: S101
        started = time.time()
        # log_path: the driver writes what the client prints to this attempt's log, also
        # when the process was started for an earlier run (KeptClient).
        request = {"id": point_id, "argv": argv, "requests_file": str(requests_file) if requests_file else None,
                   "log_path": str(self.log_path), "dataset": dataset}
        self.busy = True
        self.child.popen.stdin.write((json.dumps(request) + "\n").encode())
        self.child.popen.stdin.flush()
        phases: dict[str, float] = {"sent": started}
        while True:
            event = self._next_event(timeout_s, cancelled)
            name = str(event.get("event"))
            phases[name] = float(event.get("t") or time.time())
            if name == "done":
                self.busy = False
                return PointOutcome(bool(event.get("ok")), event.get("error"), phases.get("measure_start"), started,
                                    phases["done"], phases, checks=dict(event.get("checks") or {}),
                                    requests_file=requests_file)

    def close(self, grace_s: float = 5) -> None:
        if self.child is not None:
            stop_group(self.child.pgid, grace_s=grace_s, popen=self.child.popen)
            if self.child.popen.stdout:
                self.child.popen.stdout.close()
            if self.child.popen.stdin:
                self.child.popen.stdin.close()
            self.child = None


@dataclass
class OneShotBenchClient:
    """The fallback: one ``python -m <module>`` per point, for clients that cannot be
    driven in-process (their parser is built under ``if __name__ == "__main__"``).  Each
    point then pays the client's imports and tokenizer load again."""

    python: Path
    log_path: Path
    env: dict[str, str]
    module: str = "sglang.bench_serving"
    version: str | None = None
    known_flags: set[str] = field(default_factory=set)
    mode: str = "one-process-per-point"
    child: Child | None = None
    # Called with each point's process as it starts, so its group is recorded with the
    # attempt and reaped if the runner dies mid-point (as the warm client's is).
    on_start: Callable[[Child], None] | None = None
    wrap_argv: Callable[[list[str]], list[str]] | None = None  # e.g. runner.lifeline.wrap on a Ray node
    tokenizer: BenchTokenizer | None = None  # set by the attempt: what every point's prompts use

    def start(self, *, timeout_s: float = 180) -> None:
        self.known_flags = _help_flags(self.python, self.module, self.env, timeout_s)

    def run_point(
        self, point_id: str, argv: list[str], *, timeout_s: float, cancelled: Callable[[], bool],
        requests_file: Path | None = None, dataset: dict[str, Any] | None = None,
    ) -> PointOutcome:
        """Run one point in its own process; ``requests_file`` is not written (the
        per-request data comes from ``--output-details`` in the record instead).  A dataset
        only the warm driver can load cannot run here."""
        if dataset is not None:
            raise BenchError(f"this client runs one process per point and cannot load a {dataset.get('kind')} "
                             "workload (only the warm driver can)")
        started = time.time()
        command = [str(self.python), "-m", self.module, *argv]
        self.child = start_child(self.wrap_argv(command) if self.wrap_argv else command, log_path=self.log_path,
                                 env=self.env)
        deadline = time.monotonic() + timeout_s
        try:
            if self.on_start is not None:
                self.on_start(self.child)  # inside the try: a lost lease here still stops the child
            while self.child.alive:
                if cancelled():
                    raise BenchCancelled("cancelled")
                if time.monotonic() > deadline:
                    raise BenchError(f"bench client ran past {timeout_s:.0f} s")
                time.sleep(0.2)
        except BaseException:
            self.close()
            raise
        code = self.child.returncode
        self.child = None
        error = None if code == 0 else f"bench client exited with {code}"
        finished = time.time()
        return PointOutcome(code == 0, error, None, started, finished, {"sent": started, "done": finished})

    def close(self, grace_s: float = 5) -> None:
        if self.child is not None:
            stop_group(self.child.pgid, grace_s=grace_s, popen=self.child.popen)
            self.child = None


def _help_flags(python: Path, module: str, env: dict[str, str], timeout_s: float) -> set[str]:
    """The client's option strings, read from its ``--help``."""
    done = subprocess.run(  # noqa: S603 - fixed argv: configured interpreter, module name
        [str(python), "-m", module, "--help"], capture_output=True, text=True, env=env, timeout=timeout_s, check=False,
    )
    if done.returncode != 0:
        raise BenchError(f"{module} --help failed: {done.stderr.strip()[-500:]}")
    return set(re.findall(r"(--[a-z0-9][a-z0-9-]*)", done.stdout))


BenchClient = WarmBenchClient | OneShotBenchClient


@dataclass(frozen=True)
class ClientKey:
    """Everything a warm client process fixed when it started: the interpreter (hence the
    client version), its environment, and the tokenizer files it may have cached by path
    (their content hash, so a tokenizer replaced in place starts a new process)."""

    python: str
    env: tuple[tuple[str, str], ...]
    tokenizer_path: str
    tokenizer_sha256: str

    @classmethod
    def of(cls, python: Path, env: dict[str, str], tokenizer: BenchTokenizer) -> ClientKey:
        return cls(str(python), tuple(sorted(env.items())), str(tokenizer.path), tokenizer.sha256)


@dataclass
class KeptClient:
    """At most one idle warm client, held by the runner daemon between runs.

    A run takes it (``take``) only when its ``ClientKey`` is the same; at the end of a run
    the attempt gives it back (``keep``) only when it is idle between points and alive;
    anything else (a cancel, a failed point, a stop of the runner) closes it.  The next
    run's points are what a longer sweep of the same process would be: the driver reads
    each point's arguments and seeds afresh (runner/sglang_side/bench_driver.py)."""

    key: ClientKey | None = None
    client: WarmBenchClient | None = None

    def take(self, key: ClientKey) -> WarmBenchClient | None:
        """The kept client when it was started with ``key`` and still runs; else None
        (a kept client with another key is closed: one process at a time)."""
        client, kept_key = self.client, self.key
        self.client, self.key = None, None
        if client is None:
            return None
        if kept_key == key and client.child is not None and client.child.alive and not client.busy:
            client.runs_served += 1
            return client
        client.close()
        return None

    def keep(self, key: ClientKey, client: WarmBenchClient) -> bool:
        """Hold ``client`` for the next run; False (and nothing held) when it cannot serve one."""
        self.close()
        if client.child is None or not client.child.alive or client.busy or client.wrap_argv is not None:
            return False
        self.client, self.key = client, key
        return True

    def close(self, grace_s: float = 5) -> None:
        if self.client is not None:
            self.client.close(grace_s=grace_s)
        self.client, self.key = None, None


def client_conditions(client: BenchClient | None, outcome: PointOutcome) -> dict[str, Any]:
    """What a point records about its prompts: the tokenizer (path, vocab size, hash) and
    what the warm driver corrected.  ``request_checks`` None: nothing checked them (the
    one-process-per-point fallback leaves empty completions counted as successes)."""
    tokenizer = client.tokenizer if client is not None else None
    return {"tokenizer": tokenizer.condition() if tokenizer is not None else None,
            "request_checks": outcome.checks}


# --- per-request samples -----------------------------------------------------------------------
# MeasuredRequest, requests_from_details and request_table live in domain/results/request_table.py
# (an import's --output-details arrays are turned into samples the same way).
# The arrays ``--output-details`` adds to a record: one entry per measured request each,
# megabytes at a thousand prompts, so they go to the Parquet file, not the stored record.
DETAIL_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors", "cached_tokens",
               "cached_tokens_details")


def requests_from_driver(path: Path) -> list[MeasuredRequest]:
    """The warm driver's JSON lines (one ``RequestFuncOutput`` each, see
    ``runner/sglang_side/bench_driver.py``), in the client's order."""
    requests = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        out = json.loads(line)
        start = out.get("start_time")
        requests.append(MeasuredRequest(
            success=bool(out.get("success")), input_len=out.get("prompt_len"), output_len=out.get("output_len"),
            ttft_s=float(out.get("ttft") or 0.0), e2e_s=float(out.get("latency") or 0.0),
            itl_s=[float(x) for x in out.get("itl") or []],
            start=float(start) if isinstance(start, int | float) and start > 0 else None,
        ))
    return requests


def without_details(record: dict[str, Any]) -> dict[str, Any]:
    """The record as stored in the database: the per-request arrays left out."""
    return {key: value for key, value in record.items() if key not in DETAIL_KEYS}


def write_request_samples(requests: Sequence[MeasuredRequest], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(request_table(requests), path, compression="zstd")
