"""Keeps one real bench_serving client warm for a whole sweep.

Run with the SGLang interpreter (``<sglang python> runner/sglang_side/bench_driver.py``), never with
the app's: it imports sglang, and nothing of benchdeck (it must run in SGLang's own
environment).  One start of the client costs seconds of CPU, mostly imports; a sweep
that started it per point would idle that long between points.  So this process imports
the client once, captures its own argument parser, and then runs one benchmark per
request read from stdin — the same ``run_benchmark(args)`` that ``python -m
sglang.benchmark.serving`` calls, with argv parsed by the client's own parser.

Protocol (JSON lines).  In, on stdin: ``{"id": str, "argv": [...], "requests_file": str | null,
"log_path": str | null}`` (``log_path``: from this request on, what the client prints goes to
that file, the current attempt's log, as the runner may keep this process for its next run).  Out, on the
original stdout (everything the client prints goes to stderr instead):
``{"event": "ready", "module", "version", "flags": [the client's option strings]}``, then per request
``warmup_start``, ``flush_start`` and ``measure_start`` events (``{"event", "id", "t"}``,
t = wall clock) as the point moves through its phases, and ``{"event": "done", "id", "ok",
"error", "t", "checks"}``; ``checks`` counts what this driver corrected in the point (see
``_distinct_random_ids`` and ``_fail_empty_completions``).  With ``requests_file`` set, every
measured request's outcome is written there as one JSON line (``_capture_requests``).
Exit code 3 with ``{"event": "unsupported", "error"}`` means this client version cannot
be driven in-process; the runner then falls back to one process per point.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import importlib
import inspect
import json
import os
import random
import sys
import time
import traceback
from collections.abc import Iterator
from typing import Any

MODULES = ("sglang.benchmark.serving", "sglang.bench_serving")
EXIT_UNSUPPORTED = 3


class _ParserCaptured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__("parser captured")
        self.parser = parser


def _capture_parser(cli_main: Any) -> argparse.ArgumentParser:
    """Run the client's own CLI set-up up to ``parse_args`` and keep its parser."""
    original = argparse.ArgumentParser.parse_args

    def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _ParserCaptured(self)

    argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign]
    try:
        cli_main()
    except _ParserCaptured as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
    raise RuntimeError("the client's cli_main never parsed arguments")


@contextlib.contextmanager
def _collector_paused_then_frozen() -> Iterator[None]:
    """The cyclic garbage collector off while the client imports, then everything the import
    made moved out of its reach (``gc.freeze``).  The client's imports (torch, transformers,
    SGLang's runtime) leave hundreds of thousands of long-lived objects: with the collector on,
    the import spends a large share of its CPU scanning them again and again, and every full
    collection during a measured point would scan them all once more, a pause of the client's
    event loop in the middle of the requests it is timing.  Objects made later are collected as
    usual.  The twin of domain/core/collector.py's, which this script, run in SGLang's own
    environment, cannot import."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.freeze()


def _load_client() -> tuple[Any, argparse.ArgumentParser]:
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "run_benchmark") and hasattr(module, "cli_main"):
            return module, _capture_parser(module.cli_main)
    raise RuntimeError(f"no in-process entry point (run_benchmark + cli_main) in {MODULES}")


def _emit(channel: Any, **message: Any) -> None:
    channel.write(json.dumps(message) + "\n")
    channel.flush()


def _hook_phases(module: Any, channel: Any, current: dict[str, Any]) -> None:
    """Mark the phases of a point: ``warmup_start`` when the client's ``benchmark()``
    coroutine begins (dataset and tokenizer are ready), ``flush_start`` when the warmup is
    over, and ``measure_start`` once the cache is flushed.  Telemetry before
    ``measure_start`` is warmup; the idle-gap benchmark subtracts the warmup phase."""
    flush = getattr(module, "flush_server_cache", None)
    bench = getattr(module, "benchmark", None)
    if flush is not None:
        def flush_then_mark(*args: Any, **kwargs: Any) -> Any:
            _emit(channel, event="flush_start", id=current.get("id"), t=time.time())
            result = flush(*args, **kwargs)
            _emit(channel, event="measure_start", id=current.get("id"), t=time.time())
            return result

        module.flush_server_cache = flush_then_mark
    if bench is not None:
        async def mark_then_benchmark(*args: Any, **kwargs: Any) -> Any:
            _emit(channel, event="warmup_start", id=current.get("id"), t=time.time())
            return await bench(*args, **kwargs)

        module.benchmark = mark_then_benchmark


def distinct_starts(starts: list[int], vocab_size: int) -> tuple[list[int], int]:
    """Each random-ids prompt is the run of ids ``start, start+1, …`` (mod the vocab), so
    two prompts with one start are one prompt to a prefix cache.  A repeated start moves
    to the next unused id; the first use of each start keeps its place.  Returns the new
    starts and how many moved (none can move once every id is taken)."""
    used: set[int] = set()
    moved, out = 0, []
    for start in starts:
        new = start
        while new in used and len(used) < vocab_size:
            new = (new + 1) % vocab_size
        moved += new != start
        used.add(new)
        out.append(new)
    return out, moved


def _distinct_random_ids(channel_checks: dict[str, Any]) -> None:
    """Wrap bench_serving's random-ids generator (``sample_random_requests`` with
    ``random_sample=False``): its offsets are drawn independently, so prompts repeat (with
    seed 42, 11 of 1,280 at a 151,643-id vocab, 171 at 4,096: bench/prompt_duplicates.py).  The client's own rows are
    kept, each repeat re-drawn from a distinct start, exactly as the client builds a row."""
    try:
        datasets = importlib.import_module("sglang.benchmark.datasets.random")
    except ImportError:
        return  # older clients: prompts are left as the client draws them (not counted)
    original = datasets.sample_random_requests
    signature = inspect.signature(original)

    def distinct(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        params = bound.arguments
        if params["random_sample"]:
            return original(*args, **kwargs)
        return_text, tokenizer = params["return_text"], params["tokenizer"]
        params["return_text"] = False  # ids first; decoded below exactly as the client would
        rows = original(**params)
        vocab = int(tokenizer.vocab_size)
        special = int(tokenizer.num_special_tokens_to_add()) if return_text else 0
        starts, moved = distinct_starts([int(row.prompt[0]) if row.prompt else 0 for row in rows], vocab)
        channel_checks.update(prompt_starts_moved=moved, vocab_size=vocab, prompts=len(rows))
        return [_row_from(row, start, vocab, special, tokenizer if return_text else None)
                for row, start in zip(rows, starts, strict=True)]

    setattr(datasets, "sample_random_requests", distinct)  # noqa: B010 - a module the type checker cannot see


def _row_from(row: Any, start: int, vocab: int, special: int, tokenizer: Any) -> Any:
    """The client's row with its ids re-drawn from ``start``; with text prompts, shortened
    by the special tokens the server adds and decoded (what the client does itself)."""
    length = max(1, row.prompt_len - special)
    ids = [(start + j) % vocab for j in range(length)]
    prompt: Any = tokenizer.decode(ids) if tokenizer is not None else ids
    lengths = {name: length for name in ("prompt_len", "text_prompt_len")
               if name in {f.name for f in dataclasses.fields(row)}}
    return dataclasses.replace(row, prompt=prompt, **lengths)


EMPTY_COMPLETION = ("no text streamed: the server answered 200 without output (real SGLang streams "
                    "a refusal, e.g. an input longer than the context, as an SSE error event)")


def _fail_empty_completions(module: Any, channel_checks: dict[str, Any]) -> None:
    """bench_serving counts a streamed answer with no text as a success with TTFT 0 and the
    requested output length (what real SGLang's SSE error for an over-long input gives).
    An errored or empty completion is a failed request here, before the client's metrics
    are computed, so completed, throughput and latencies leave it out."""
    funcs = getattr(module, "ASYNC_REQUEST_FUNCS", None)
    if not isinstance(funcs, dict):
        return

    def checked(func: Any) -> Any:
        async def request(*args: Any, **kwargs: Any) -> Any:
            output = await func(*args, **kwargs)
            if getattr(output, "success", False) and not getattr(output, "generated_text", ""):
                output.success, output.error = False, EMPTY_COMPLETION
                # Warmup requests included: the record's completed/requested has the measured ones.
                channel_checks["empty_completions"] = channel_checks.get("empty_completions", 0) + 1
            return output

        return request

    for backend, func in list(funcs.items()):
        funcs[backend] = checked(func)


REQUEST_FIELDS = ("success", "error", "prompt_len", "output_len", "ttft", "latency", "itl", "start_time",
                  "cached_tokens")


def request_line(output: Any) -> dict[str, Any]:
    """One request's ``RequestFuncOutput`` as the client measured it (seconds, its own
    perf_counter for ``start_time``; ``cached_tokens`` as the server reported them); a
    field this client version lacks is null.  ``turn``: a multi-turn round (1-based)."""
    line = {name: getattr(output, name, None) for name in REQUEST_FIELDS}
    line["itl"] = list(line["itl"] or [])
    line["turn"] = getattr(output, TURN_ATTRIBUTE, None)
    return line


# --- workloads benchdeck adds to the client (domain/plan/workload.py says which and why) ------
TURN_ATTRIBUTE = "benchdeck_turn"


def trace_lines(path: str, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` lines of a trace JSONL (checked by ``runner check`` beforehand)."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) >= limit:
                break
    return rows


def trace_prompts(rows: list[dict[str, Any]], vocab: int, seed: int) -> list[list[int]]:
    """One prompt of token ids per trace line, ``input_len`` long.  Lines of one ``group``
    share their first tokens: as many as the group's shortest prompt has, less one (each
    prompt keeps one token of its own), so a prefix cache can hit them as a real
    application's shared system prompt."""
    shortest: dict[Any, int] = {}
    for row in rows:
        if row.get("group") is not None:
            shortest[row["group"]] = min(shortest.get(row["group"], row["input_len"]), row["input_len"])
    prefixes = {group: random.Random(f"{seed}:{group}").choices(range(vocab), k=length - 1)  # noqa: S311 - prompts
                for group, length in shortest.items()}
    own = random.Random(seed)  # noqa: S311 - prompts, not secrets
    prompts = []
    for row in rows:
        shared = prefixes.get(row.get("group"), [])
        prompts.append(shared + own.choices(range(vocab), k=row["input_len"] - len(shared)))
    return prompts


def _trace_rows(module: Any, args: Any, tokenizer: Any, dataset: dict[str, Any], current: dict[str, Any]) -> Any:
    rows = trace_lines(dataset["path"], int(args.num_prompts))
    prompts = trace_prompts(rows, int(tokenizer.vocab_size), int(args.seed))
    out = []
    for row, ids in zip(rows, prompts, strict=True):
        prompt = ids if args.tokenize_prompt else tokenizer.decode(ids)
        out.append(module.DatasetRow(prompt=prompt, prompt_len=len(ids), output_len=int(row["output_len"]),
                                     timestamp=float(row["timestamp"])))
    stamps = sorted(float(row["timestamp"]) for row in rows)
    current["trace_targets"] = [(stamp - stamps[0]) / 1000.0 * float(dataset["time_scale"]) for stamp in stamps]
    return out


def _jsonl_rows(module: Any, args: Any, tokenizer: Any, dataset: dict[str, Any]) -> Any:
    """A plain JSONL of prompts (``{"prompt", "output_len"?}``), the client's text path: the
    prompt as text, its length as the tokenizer counts it."""
    out = []
    with open(dataset["path"], encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            row = json.loads(line)
            length = int(row.get("output_len") or dataset["output_len"])
            out.append(module.DatasetRow(prompt=row["prompt"], prompt_len=len(tokenizer.encode(row["prompt"])),
                                         output_len=length))
            if len(out) >= int(args.num_prompts):
                break
    return out


def _hook_workloads(module: Any, current: dict[str, Any]) -> None:
    """Rows benchdeck loads itself (``dataset`` in a request), the client's own trace-timestamp
    replay for them (its ``get_request`` has it; ``benchmark()`` never turns it on), and the
    round of each multi-turn request."""
    load, replay = getattr(module, "get_dataset", None), getattr(module, "get_request", None)
    wrap_turns = getattr(module, "wrap_multi_turn_request_func", None)
    if load is None or replay is None:
        return

    def get_dataset(args: Any, tokenizer: Any, *rest: Any, **kwargs: Any) -> Any:
        dataset = current.get("dataset")
        current.pop("trace_targets", None)
        if not dataset:
            return load(args, tokenizer, *rest, **kwargs)
        if dataset["kind"] == "trace":
            return _trace_rows(module, args, tokenizer, dataset, current)
        return _jsonl_rows(module, args, tokenizer, dataset)

    def get_request(input_requests: Any, request_rate: Any, *rest: Any, **kwargs: Any) -> Any:
        dataset = current.get("dataset") or {}
        if dataset.get("kind") == "trace":
            return replay(input_requests, request_rate, use_trace_timestamps=True,
                          slowdown_factor=float(dataset["time_scale"]))
        return replay(input_requests, request_rate, *rest, **kwargs)

    module.get_dataset, module.get_request = get_dataset, get_request
    if wrap_turns is not None:
        module.wrap_multi_turn_request_func = lambda func, backend: _tag_turns(wrap_turns(func, backend=backend))


def _tag_turns(multi_turn: Any) -> Any:
    async def tagged(*args: Any, **kwargs: Any) -> Any:
        outputs = await multi_turn(*args, **kwargs)
        for index, output in enumerate(outputs, start=1):
            setattr(output, TURN_ATTRIBUTE, index)
        return outputs

    return tagged


def trace_replay(targets: list[float], starts: list[float]) -> dict[str, Any]:
    """How closely the client's request starts (its own clock) followed the trace's arrival
    times: the largest and mean lag, and the largest as a share of the trace's span."""
    if not targets or len(starts) != len(targets):
        return {"requests": len(starts), "compared": False}
    measured = [start - starts[0] for start in starts]
    lags = [abs(m - t) for m, t in zip(measured, targets, strict=True)]
    span = targets[-1]
    return {"requests": len(starts), "compared": True, "span_s": span, "replayed_span_s": measured[-1],
            "max_lag_ms": max(lags) * 1000, "mean_lag_ms": sum(lags) / len(lags) * 1000,
            "max_lag_pct_of_span": max(lags) / span * 100 if span > 0 else None}


def per_turn(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each multi-turn round's requests, mean TTFT and the server's cached tokens."""
    turns: dict[int, list[dict[str, Any]]] = {}
    for line in lines:
        if line.get("turn") is not None and line.get("success"):
            turns.setdefault(int(line["turn"]), []).append(line)
    return [{"turn": turn, "requests": len(rows),
             "mean_ttft_ms": sum(float(r["ttft"] or 0) for r in rows) / len(rows) * 1000,
             "cached_tokens": sum(int(r.get("cached_tokens") or 0) for r in rows),
             "prompt_tokens": sum(int(r.get("prompt_len") or 0) for r in rows)} for turn, rows in sorted(turns.items())]


def _summarise_workload(lines: list[dict[str, Any]], current: dict[str, Any], checks: dict[str, Any]) -> None:
    targets = current.get("trace_targets")
    if targets is not None:
        starts = [float(line["start_time"]) for line in lines if line.get("start_time")]
        checks["trace_replay"] = trace_replay(targets, sorted(starts))
    turns = per_turn(lines)
    if turns:
        checks["per_turn"] = turns


def _capture_requests(module: Any, current: dict[str, Any], checks: dict[str, Any]) -> None:
    """Keep every measured request: the client hands exactly those (warmup requests never
    reach it, multi-turn rounds already flattened) to ``calculate_metrics``, which every
    metric of the record comes from.  Written after the metrics are computed, so the
    empty completions failed by ``_fail_empty_completions`` are failures here too."""
    original = getattr(module, "calculate_metrics", None)
    if original is None:
        return  # a client without it: no per-request file, the runner stores none
    signature = inspect.signature(original)

    def capturing(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        outputs = signature.bind(*args, **kwargs).arguments.get("outputs") or []
        lines = [request_line(output) for output in outputs]
        _summarise_workload(lines, current, checks)
        path = current.get("requests_file")
        if path:
            with open(path, "w", encoding="utf-8") as out:
                for line in lines:
                    out.write(json.dumps(line) + "\n")
        return result

    module.calculate_metrics = capturing


def _run_one(module: Any, parser: argparse.ArgumentParser, argv: list[str]) -> None:
    args = parser.parse_args(argv)
    validate = getattr(module, "_validate_parsed_gsp_args", None)
    if validate is not None:
        validate(parser, args)
    module.run_benchmark(args)


def _log_to(path: str | None, current: dict[str, Any]) -> None:
    """Point fds 1 and 2 (where the client's prints and logging go) at ``path``, once per new path."""
    if not path or path == current.get("log_path"):
        return
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.dup2(fd, 2)
        os.dup2(fd, 1)
    finally:
        os.close(fd)
    current["log_path"] = path


def main() -> int:
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the client's own prints go to the log, not the protocol channel
    sys.stdout = sys.stderr
    try:
        with _collector_paused_then_frozen():
            module, parser = _load_client()
    except Exception as exc:
        _emit(channel, event="unsupported", error=f"{type(exc).__name__}: {exc}")
        return EXIT_UNSUPPORTED
    version = getattr(importlib.import_module("sglang"), "__version__", None)
    current: dict[str, Any] = {}
    checks: dict[str, Any] = {}  # per point: what the two wrappers below corrected
    _hook_phases(module, channel, current)
    _distinct_random_ids(checks)
    _fail_empty_completions(module, checks)
    _capture_requests(module, current, checks)
    _hook_workloads(module, current)
    flags = sorted(option for action in parser._actions for option in action.option_strings)
    _emit(channel, event="ready", module=module.__name__, version=version, flags=flags)
    for line in sys.stdin:
        request = json.loads(line)
        _log_to(request.get("log_path"), current)
        current["id"] = request["id"]
        current["requests_file"] = request.get("requests_file")
        current["dataset"] = request.get("dataset")
        checks.clear()
        try:
            _run_one(module, parser, request["argv"])
        except BaseException as exc:  # SystemExit from parser.error too: report, keep serving
            traceback.print_exc()
            _emit(channel, event="done", id=request["id"], ok=False, error=f"{type(exc).__name__}: {exc}",
                  t=time.time(), checks=dict(checks))
        else:
            _emit(channel, event="done", id=request["id"], ok=True, error=None, t=time.time(), checks=dict(checks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
