"""Running the real bench_serving client for each sweep point.

``WarmBenchClient`` keeps one client process (runner/sglang_side/bench_driver.py, in the SGLang
environment) alive for the whole sweep; ``OneShotBenchClient`` starts
``python -m <module>`` per point, the fallback for client versions whose internals
cannot be driven in-process.  Both take the same argv and produce the same JSONL file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from domain.plan.run_plan import Point, RunPlan
from runner.process import Child, start_child, stop_group

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
    source: str  # "toy" (emulated runs), "tokenizer-path" or "model-path" (the served model's)
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
    if plan.engine == "emulator":
        return describe_tokenizer(toy_dir, "toy")
    flag = "tokenizer-path" if plan.server_args.get("tokenizer-path") else "model-path"
    where = str(plan.server_args.get("tokenizer-path") or plan.model)
    directory = Path(where)
    if not (directory.is_absolute() and any((directory / name).is_file() for name in LOADABLE_FILES)):
        raise TokenizerUnavailable(
            f"the bench client needs the served model's tokenizer on this host: {flag} {where!r} is not a local "
            f"directory with {', '.join(LOADABLE_FILES[:-1])} or {LOADABLE_FILES[-1]}. Give the model as a local "
            "directory or set tokenizer-path in server_args (nothing is downloaded, and the toy tokenizer would "
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
    plan: RunPlan, point: Point, *, base_url: str, tokenizer: Path, output_file: Path, known_flags: set[str]
) -> list[str]:
    """bench_serving arguments for one point; optional flags only where the client has them."""
    bench = plan.benchmark
    argv = [
        "--backend", bench.backend,
        "--base-url", base_url,
        "--tokenizer", str(tokenizer),
        "--dataset-name", bench.dataset,
        "--num-prompts", str(point.num_prompts),
        "--random-input-len", str(point.scenario.input_len),
        "--random-output-len", str(point.scenario.output_len),
        "--random-range-ratio", str(bench.random_range_ratio),
        "--request-rate", str(bench.request_rate),
        "--max-concurrency", str(point.concurrency),
        "--warmup-requests", str(point.warmup),
        "--seed", str(bench.seed),
        "--output-file", str(output_file),
    ]
    if bench.dataset_path:
        argv += ["--dataset-path", bench.dataset_path]
    optional = {
        "--flush-cache": bench.flush_cache,
        "--tokenize-prompt": bench.tokenize_prompt,
        "--apply-chat-template": bench.apply_chat_template,
        "--disable-ignore-eos": not bench.ignore_eos,
    }
    for flag, wanted in optional.items():
        if wanted:
            if flag not in known_flags:
                raise BenchError(f"this bench_serving has no {flag}; the plan needs it")
            argv.append(flag)
    if "--ready-check-timeout-sec" in known_flags:
        argv += ["--ready-check-timeout-sec", "0"]  # the runner already gated readiness
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

    def start(self, *, timeout_s: float = 180) -> None:
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
        self, point_id: str, argv: list[str], *, timeout_s: float, cancelled: Callable[[], bool]
    ) -> PointOutcome:
        assert self.child is not None and self.child.popen.stdin is not None  # noqa: S101
        started = time.time()
        self.child.popen.stdin.write((json.dumps({"id": point_id, "argv": argv}) + "\n").encode())
        self.child.popen.stdin.flush()
        phases: dict[str, float] = {"sent": started}
        while True:
            event = self._next_event(timeout_s, cancelled)
            name = str(event.get("event"))
            phases[name] = float(event.get("t") or time.time())
            if name == "done":
                return PointOutcome(bool(event.get("ok")), event.get("error"), phases.get("measure_start"), started,
                                    phases["done"], phases, checks=dict(event.get("checks") or {}))

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
        self, point_id: str, argv: list[str], *, timeout_s: float, cancelled: Callable[[], bool]
    ) -> PointOutcome:
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


def client_conditions(client: BenchClient | None, outcome: PointOutcome) -> dict[str, Any]:
    """What a point records about its prompts: the tokenizer (path, vocab size, hash) and
    what the warm driver corrected.  ``request_checks`` None: nothing checked them (the
    one-process-per-point fallback leaves empty completions counted as successes)."""
    tokenizer = client.tokenizer if client is not None else None
    return {"tokenizer": tokenizer.condition() if tokenizer is not None else None,
            "request_checks": outcome.checks}
