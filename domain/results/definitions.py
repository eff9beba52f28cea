"""What each harness means by TTFT, TPOT, ITL and throughput: metric definitions as conditions.

Two harnesses can print the same name for different quantities.  A point's harness is its
``bench_tool`` condition (the runner records ``sglang.bench_serving``; the importers record
the harness the file names); its definitions are looked up here, and two runs whose
definitions of a metric differ are not comparable on that metric: the comparability matrix
(:mod:`domain.compare.comparability`) carries one ``def:<aspect>`` row per aspect below,
family ``metric``, and the verdict names both definitions ("TPOT: bench_serving excludes
the first token; GuideLLM includes the first token (and the wait for it)").

The definitions, as each harness's own source computes them (per request, then statistics
over the successful requests unless said otherwise):

* **bench_serving** (``sglang/benchmark/serving.py``, ``calculate_metrics``, in
  ``.venv-sglang``) and vLLM's benchmark it derives from: TTFT = first streamed chunk −
  request sent; TPOT = (latency − TTFT) / (output tokens − 1), first token excluded; ITL =
  every gap between streamed chunks, pooled over all requests; output throughput = output
  tokens of the completed requests (the server's usage count) ÷ the measured window (first
  request sent to last completion, after separate warm-up requests).
* **GuideLLM** (``guidellm`` ``request_stats.py``): TPOT = (last token − request start) ÷
  output tokens, so the first token and the wait for it are included; ITL = (last token −
  first token) ÷ (output tokens − 1) per request: bench_serving's TPOT quantity, not its
  ITL; the measured window is cut by warm-up and cool-down shares of the benchmark.
* **AIPerf** (as :mod:`domain.importer.aiperf` maps it, and as llm-d's converter writes its
  ``inter_token_latency``): TPOT = (latency − TTFT) ÷ (output tokens − 1); ITL, when the
  file has ``inter_chunk_latency``, pooled chunk gaps; output tokens counted by the client's
  tokenizer from the response text (unless told to use the server's count); the warm-up
  phase's requests are outside the profiling window.

A harness or an aspect not listed is *unknown*: never a match.  Where one definition can be
computed exactly from another's per-request data, :func:`converted_tpot` does it (a
bench_serving point's requests, read with GuideLLM's TPOT), and the verdict says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from domain.core.i18n import t

FAMILY = "metric"
PREFIX = "def:"
ASPECTS = ("ttft", "tpot", "itl", "throughput", "tokens", "window")

# harness id (bench_tool) → the name users know it by
HARNESS_NAMES = {
    "sglang.bench_serving": "bench_serving", "bench_serving": "bench_serving", "vllm-benchmark": "vLLM bench",
    "guidellm": "GuideLLM", "aiperf": "AIPerf", "inference-perf": "inference-perf", "inferencemax": "InferenceMAX",
    "aiconfigurator-silicon": "AIConfigurator",
}
_BENCH_SERVING = {"ttft": "first_chunk", "tpot": "excl_first", "itl": "pooled_gaps", "throughput": "tokens_per_window",
                  "tokens": "server_usage", "window": "after_warmup_requests"}
DEFINITIONS: dict[str, dict[str, str]] = {
    "sglang.bench_serving": _BENCH_SERVING,
    "bench_serving": _BENCH_SERVING,
    "vllm-benchmark": _BENCH_SERVING,
    "guidellm": {"ttft": "first_chunk", "tpot": "incl_first", "itl": "per_request_mean",
                 "window": "warmup_cooldown_cut"},
    "aiperf": {"ttft": "first_chunk", "tpot": "excl_first", "itl": "pooled_gaps", "throughput": "tokens_per_window",
               "tokens": "client_tokenizer", "window": "after_warmup_requests"},
}


def harness_name(harness: object) -> str:
    return HARNESS_NAMES.get(str(harness), str(harness)) if harness is not None else "?"


def definition(harness: object, aspect: str) -> str | None:
    """The definition id of ``aspect`` for ``harness``; None when unknown."""
    return DEFINITIONS.get(str(harness), {}).get(aspect) if harness is not None else None


def condition(aspect: str) -> str:
    return f"{PREFIX}{aspect}"


def aspect_of(name: str) -> str | None:
    return name.removeprefix(PREFIX) if name.startswith(PREFIX) else None


# -- the matrix rows -------------------------------------------------------------------------

State = Literal["match", "differ", "unknown", "intended"]  # comparability.State
Cell = tuple[State, bool, str, str]  # state, fatal, baseline value, value (as comparability stores them)


def run_harness(rows: pd.DataFrame) -> object:
    """The run's harness: its points' one ``bench_tool`` (None when unknown or mixed)."""
    if "bench_tool" not in rows.columns:
        return None
    values = {v for v in rows["bench_tool"] if isinstance(v, str) and v}
    return next(iter(values)) if len(values) == 1 else None


def _value(harness: object, aspect: str) -> str:
    """What the matrix keeps: ``harness|definition`` (rendered per language by :func:`value_text`)."""
    return f"{harness if harness is not None else '?'}|{definition(harness, aspect) or '?'}"


def definition_cells(base_rows: pd.DataFrame, rows: pd.DataFrame) -> list[tuple[str, str, Literal["run"], Cell]]:
    """One (family, condition, level, cell) per aspect: match, differ, or unknown.

    A difference is not fatal to the run as a whole (its other metrics still compare); it
    makes that metric not comparable, which the verdict says by naming both definitions.
    Neither harness known: no rows (the ``bench_tool`` condition says it is unknown already)."""
    base, other = run_harness(base_rows), run_harness(rows)
    if base is None and other is None:
        return []
    cells: list[tuple[str, str, Literal["run"], Cell]] = []
    for aspect in ASPECTS:
        a, b = definition(base, aspect), definition(other, aspect)
        state: State = "unknown" if a is None or b is None else "match" if a == b else "differ"
        cells.append((FAMILY, condition(aspect), "run", (state, False, _value(base, aspect), _value(other, aspect))))
    return cells


def label(name: str, lang: str) -> str:
    return t(f"definitions.aspect.{aspect_of(name)}", lang)


def value_text(name: str, value: str, lang: str) -> str:
    """``guidellm|incl_first`` → "GuideLLM includes the first token (and the wait for it)"."""
    harness, _, ident = value.partition("|")
    if ident in ("", "?"):
        return t("definitions.unknown", lang, harness=harness_name(None if harness == "?" else harness))
    return t(f"definitions.{aspect_of(name)}.{ident}", lang, harness=harness_name(harness))


def field_text(name: str, values: tuple[str, str], lang: str, *, unknown: bool = False) -> str:
    """"TPOT: bench_serving excludes the first token; GuideLLM includes …" for the verdict;
    with ``unknown``, only whose definition is unknown: "TPOT (unknown for AIConfigurator)"."""
    base, value = values
    if unknown:
        missing = [harness_name(v.partition("|")[0]) for v in values if v.partition("|")[2] in ("", "?")]
        return t("definitions.field_unknown", lang, label=label(name, lang), harnesses=", ".join(missing) or "?")
    return t("definitions.field", lang, label=label(name, lang), baseline=value_text(name, base, lang),
             value=value_text(name, value, lang))


# -- converting exactly from per-request data --------------------------------------------------


@dataclass(frozen=True)
class Converted:
    """A point's metric recomputed under another harness's definition from its requests."""

    metric: str
    to_harness: str
    definition: str
    n: int
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float


def converted_tpot(requests: pd.DataFrame, to_harness: str = "guidellm") -> Converted | None:
    """bench_serving requests read with ``to_harness``'s TPOT (only GuideLLM's differs).

    Per successful request with output tokens: (TTFT + Σ chunk gaps) ÷ output tokens, i.e.
    (last token − request sent) ÷ output tokens, GuideLLM's formula; exact for the mean,
    percentiles by linear interpolation.  None without the per-request gaps."""
    if definition(to_harness, "tpot") != "incl_first" or requests.empty or "itl_ms" not in requests.columns:
        return None
    done = requests[requests["success"].astype(bool) & (requests["output_len"].fillna(0) > 0)]
    values = [(ttft + float(np.sum(gaps))) / n for ttft, gaps, n in
              zip(done["ttft_ms"], done["itl_ms"], done["output_len"], strict=True) if _gaps(gaps)]
    if not values:
        return None
    arr = np.asarray(values, dtype=float)
    p50, p90, p99 = (float(np.percentile(arr, q)) for q in (50, 90, 99))
    return Converted("tpot", to_harness, "incl_first", len(arr), float(arr.mean()), p50, p90, p99)


def _gaps(value: object) -> bool:
    return isinstance(value, list | tuple | np.ndarray)


def conversion_line(run_id: object, converted: Converted, lang: str) -> str:
    return t("definitions.converted", lang, run_id=run_id, metric=label(condition(converted.metric), lang),
             harness=harness_name(converted.to_harness), mean=f"{converted.mean_ms:.2f}",
             p50=f"{converted.p50_ms:.2f}", p99=f"{converted.p99_ms:.2f}", n=converted.n)


def conversion_lines(frame: pd.DataFrame, run_ids: Iterable[int], requests: Mapping[int, pd.DataFrame] | None,
                     lang: str) -> list[str]:
    """For each bench_serving run compared with a run of another TPOT definition: its TPOT
    converted exactly to that definition from its per-request data, one line per point."""
    if not requests:
        return []
    ids = list(dict.fromkeys(run_ids))
    harnesses = {r: run_harness(frame[frame["run_id"] == r]) for r in ids}
    targets = {h for h in harnesses.values() if definition(h, "tpot") == "incl_first"}
    lines = []
    for run_id, harness in harnesses.items():
        if definition(harness, "tpot") != "excl_first":
            continue
        for target in sorted(str(h) for h in targets):
            lines += _point_lines(frame[frame["run_id"] == run_id], requests, run_id, target, lang)
    return lines


def _point_lines(rows: pd.DataFrame, requests: Mapping[int, pd.DataFrame], run_id: object, target: str,
                 lang: str) -> list[str]:
    lines = []
    for point_id, scenario, conc in zip(rows["point_id"], rows["scenario"], rows["concurrency"], strict=True):
        samples = requests.get(int(point_id)) if point_id is not None and not pd.isna(point_id) else None
        converted = converted_tpot(samples, target) if samples is not None else None
        if converted is not None:
            lines.append(f"{scenario}@{conc}: {conversion_line(run_id, converted, lang)}")
    return lines
