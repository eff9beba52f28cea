"""The quality verdict of a run against a baseline, from their probe records
(runner/quality_probe.py): same within the floor, changed, cannot tell, or not measured.

Figures (candidate against baseline, the outputs at the probe's concurrency):
- ``exact_match``: the share of prompts whose greedy outputs are identical;
- ``first_divergence_median``: the median token position where a differing output first
  differs (None when every output matches);
- ``mean_abs_dlogprob``: the baseline's tokens scored teacher-forced under the candidate,
  mean |candidate − baseline log-prob| (where the candidate scored the baseline's outputs;
  otherwise over the tokens both generated before their first divergence, and
  ``dlogprob_method`` says which);
- ``top_changed``: the share of the baseline's tokens whose top token under the candidate
  differs (teacher-forced only).

The floor is each configuration's own difference between its two batch compositions (one
request alone, then the set at the probe's concurrency), the larger of the two runs'.
Verdict: *changed* when the candidate's mismatch share exceeds the floor's beyond
Newcombe's 95 % interval, or its teacher-forced top-token changes exceed the floor's token
divergence beyond that interval; *same* when neither does and the interval's upper end is
within :data:`SAME_MARGIN`; otherwise *cannot tell*.  A probe on another prompt set, or a
run whose acceptance was pinned in SGLang's ``fixed`` token mode (its outputs are not the
model's), cannot tell; a run without a probe is not measured.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Literal

from domain.results.quality_stats import Interval, newcombe, paired_difference, wilson

Verdict = Literal["same", "changed", "cannot_tell", "not_measured"]
SAME_MARGIN = 0.25  # the largest excess mismatch share (upper 95 % bound) still called "same"
DLOGPROB_FLOOR_FACTOR = 3.0  # a mean |Δ log-prob| above this many floors (and MIN) is "changed"
DLOGPROB_MIN = 0.01


@dataclass(frozen=True)
class Floor:
    mismatches: int
    prompts: int
    divergent_tokens: int
    tokens: int
    mean_abs_dlogprob: float | None


@dataclass(frozen=True)
class QualityResult:
    run_id: int
    baseline_run_id: int
    verdict: Verdict
    reason: str
    exact_match: float | None = None
    first_divergence_median: float | None = None
    mean_abs_dlogprob: float | None = None
    dlogprob_method: str | None = None
    top_changed: float | None = None
    floor: dict[str, Any] | None = None
    mismatch_excess: dict[str, float] | None = None
    accuracy: dict[str, Any] | None = None
    accuracy_difference: dict[str, Any] | None = None
    acceptance: dict[str, Any] | None = None
    pinned_acceptance: dict[str, Any] | None = None
    emulated: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _first_divergence(a: list[int], b: list[int]) -> int | None:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def _prefix_dlogprobs(a: dict[str, Any], b: dict[str, Any]) -> list[float]:
    """|Δ log-prob| of the tokens two outputs share before they first differ."""
    stop = _first_divergence(a["ids"], b["ids"])
    n = min(len(a["logprobs"]), len(b["logprobs"]), len(a["ids"]) if stop is None else stop)
    return [abs(a["logprobs"][i] - b["logprobs"][i]) for i in range(n)
            if a["logprobs"][i] is not None and b["logprobs"][i] is not None]


def floor_of(record: dict[str, Any]) -> Floor:
    outputs = record["outputs"]
    pairs = [(o["alone"], o["batched"]) for o in outputs]
    firsts = [_first_divergence(a["ids"], b["ids"]) for a, b in pairs]
    tokens = sum(len(a["ids"]) if f is None else f + 1 for (a, _b), f in zip(pairs, firsts, strict=True))
    deltas = [d for a, b in pairs for d in _prefix_dlogprobs(a, b)]
    return Floor(sum(1 for f in firsts if f is not None), len(pairs), sum(1 for f in firsts if f is not None),
                 tokens, statistics.fmean(deltas) if deltas else None)


def _worse(a: Floor, b: Floor) -> Floor:
    def share(f: Floor) -> float:
        return f.mismatches / f.prompts if f.prompts else 0.0
    worse = a if share(a) >= share(b) else b
    deltas = [f.mean_abs_dlogprob for f in (a, b) if f.mean_abs_dlogprob is not None]
    return Floor(worse.mismatches, worse.prompts, worse.divergent_tokens, worse.tokens,
                 max(deltas) if deltas else None)


def _teacher_forced(candidate: dict[str, Any], baseline: dict[str, Any], baseline_id: int
                    ) -> tuple[list[float], int, int] | None:
    forced = candidate.get("teacher_forced") or {}
    if forced.get("reference_run_id") != baseline_id:
        return None
    deltas, changed, total = [], 0, 0
    for score, output in zip(forced["scores"], baseline["outputs"], strict=True):
        reference = output["batched"]
        for pos, (lp, top) in enumerate(zip(score["logprobs"], score["top_ids"], strict=False)):
            if lp is None or pos >= len(reference["logprobs"]):
                continue
            deltas.append(abs(lp - reference["logprobs"][pos]))
            changed += int(top is not None and top != reference["ids"][pos])
            total += 1
    return deltas, changed, total


def _unmeasured(run_id: int, baseline_id: int, record: dict[str, Any] | None) -> str | None:
    if record is None:
        return f"run {run_id} has no quality probe"
    if record.get("not_measured"):
        return f"run {run_id}: {record['not_measured']}"
    return None


def compare_quality(run_id: int, candidate: dict[str, Any] | None, baseline_id: int,
                    baseline: dict[str, Any] | None) -> QualityResult:
    for rid, record in ((run_id, candidate), (baseline_id, baseline)):
        why = _unmeasured(rid, baseline_id, record)
        if why is not None:
            return QualityResult(run_id, baseline_id, "not_measured", why,
                                 emulated=bool(candidate and candidate.get("emulated")))
    assert candidate is not None and baseline is not None  # noqa: S101 - checked just above
    if candidate["prompt_set"] != baseline["prompt_set"]:
        return QualityResult(run_id, baseline_id, "cannot_tell", "the probes used different prompt sets",
                             emulated=bool(candidate.get("emulated")))
    return _judged(run_id, candidate, baseline_id, baseline)


def _judged(run_id: int, candidate: dict[str, Any], baseline_id: int, baseline: dict[str, Any]) -> QualityResult:
    pairs = [(c["batched"], b["batched"]) for c, b in zip(candidate["outputs"], baseline["outputs"], strict=True)]
    firsts = [_first_divergence(c["ids"], b["ids"]) for c, b in pairs]
    mismatches = sum(1 for f in firsts if f is not None)
    floor = _worse(floor_of(candidate), floor_of(baseline))
    excess = newcombe(mismatches, len(pairs), floor.mismatches, floor.prompts)
    forced = _teacher_forced(candidate, baseline, baseline_id)
    if forced is not None:
        deltas, changed, total = forced
        method, top_changed = "teacher-forced", (changed / total if total else None)
        token_excess = newcombe(changed, total, floor.divergent_tokens, floor.tokens) if total else None
    else:
        deltas = [d for c, b in pairs for d in _prefix_dlogprobs(c, b)]
        method, top_changed, token_excess = "common prefix", None, None
    dlogprob = statistics.fmean(deltas) if deltas else None
    verdict, reason = _verdict(candidate, excess, token_excess, dlogprob, floor)
    accuracy, difference = _accuracy(candidate, baseline)
    divergences = [f for f in firsts if f is not None]
    return QualityResult(
        run_id, baseline_id, verdict, reason, exact_match=1 - mismatches / len(pairs),
        first_divergence_median=statistics.median(divergences) if divergences else None,
        mean_abs_dlogprob=dlogprob, dlogprob_method=method, top_changed=top_changed,
        floor={"exact_match": 1 - floor.mismatches / floor.prompts if floor.prompts else None,
               "mean_abs_dlogprob": floor.mean_abs_dlogprob,
               "token_divergence": floor.divergent_tokens / floor.tokens if floor.tokens else None},
        mismatch_excess=excess.as_dict(), accuracy=accuracy, accuracy_difference=difference,
        acceptance=candidate.get("acceptance"), pinned_acceptance=candidate.get("pinned_acceptance"),
        emulated=bool(candidate.get("emulated")))


def _verdict(candidate: dict[str, Any], excess: Interval, token_excess: Interval | None,
             dlogprob: float | None, floor: Floor) -> tuple[Verdict, str]:
    pinned = candidate.get("pinned_acceptance")
    if pinned and pinned.get("token_mode") == "fixed":
        return "cannot_tell", "the acceptance was pinned in SGLang's fixed token mode: the outputs are not the model's"
    if excess.low > 0 or (token_excess is not None and token_excess.low > 0):
        return "changed", "the outputs differ from the baseline's beyond the batch-composition floor"
    limit = max(DLOGPROB_MIN, DLOGPROB_FLOOR_FACTOR * (floor.mean_abs_dlogprob or 0.0))
    if dlogprob is not None and dlogprob > limit:
        return "changed", f"mean |Δ log-prob| {dlogprob:.4f} is above {limit:.4f} (the floor's)"
    if excess.high > SAME_MARGIN:
        return "cannot_tell", "too few prompts: the interval is too wide to call it the same"
    return "same", "within the batch-composition floor"


def _accuracy(candidate: dict[str, Any], baseline: dict[str, Any]) -> tuple[dict[str, Any] | None,
                                                                            dict[str, Any] | None]:
    ev, base = candidate.get("eval"), baseline.get("eval")
    if not ev:
        return None, None
    accuracy = {"correct": ev["correct"], "n": ev["n"], **wilson(ev["correct"], ev["n"]).as_dict()}
    if not base or base.get("sha256") != ev.get("sha256"):
        return accuracy, None
    mine = {item["id"]: item["correct"] for item in ev["items"]}
    theirs = {item["id"]: item["correct"] for item in base["items"]}
    shared = sorted(set(mine) & set(theirs))
    if not shared:
        return accuracy, None
    paired = paired_difference([mine[i] for i in shared], [theirs[i] for i in shared])
    return accuracy, paired.as_dict()
