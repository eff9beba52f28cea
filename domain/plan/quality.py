"""The plan's ``quality:`` section: the probe the runner sends to the launched server after
the sweep (runner/quality_probe.py), and the pinned speculative acceptance a plan may ask for.

The probe has two parts.  *Output equivalence*: a fixed prompt set drawn from ``seed``,
decoded greedily (temperature 0) twice, one request alone and then the whole set at
``concurrency`` (the two batch compositions whose difference is the probe's own floor),
then a reference run's tokens scored teacher-forced.  *Task accuracy*: an optional local
JSONL eval set (``eval``), each item scored by ``exact``, ``regex`` or ``numeric``.

``pinned_acceptance`` is SGLang's benchmarking switch for speculative decoding
(``SGLANG_SIMULATE_ACC_LEN`` and its companions, read by 0.5.23's
``srt/speculative/spec_utils.py``): the runner passes it in the server's environment and
records it; every view of such a run names it, since its speed is not the model's own.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_PROBE_PROMPTS = 1000
MAX_EVAL_ITEMS = 5000
# Seconds per output token of the probe's sequential pass, and per teacher-forced request:
# the same rough rates as domain/plan/estimate.py's (a form estimate, labelled rough).
PROBE_TOKEN_S = 0.010
PROBE_REQUEST_S = 0.05


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EvalSet(_Strict):
    """A local JSONL file: one item a line, ``{"prompt": …, "answer": …}`` (optional ``id``,
    ``scorer``, ``tolerance``).  Nothing is downloaded; the README says how to write one."""

    path: Annotated[str, Field(min_length=1, max_length=1024)]
    scorer: Literal["exact", "regex", "numeric"] = "exact"
    tolerance: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] = 0.0
    max_new_tokens: Annotated[int, Field(ge=1, le=32768, strict=True)] = 64
    max_items: Annotated[int, Field(ge=1, le=MAX_EVAL_ITEMS, strict=True)] = MAX_EVAL_ITEMS


class QualityPlan(_Strict):
    prompts: Annotated[int, Field(ge=1, le=MAX_PROBE_PROMPTS, strict=True)] = 32
    output_len: Annotated[int, Field(ge=1, le=4096, strict=True)] = 64
    input_len: Annotated[int, Field(ge=1, le=8192, strict=True)] = 64  # words per probe prompt
    concurrency: Annotated[int, Field(ge=1, le=1024, strict=True)] = 8
    seed: Annotated[int, Field(ge=0, le=2**31 - 1, strict=True)] = 1234
    # The run whose outputs are scored teacher-forced; None: the first earlier run of the
    # same model with the same prompt set (the runner records which one it took).
    reference_run: Annotated[int, Field(ge=1, strict=True)] | None = None
    eval: EvalSet | None = None

    def prompt_set_key(self) -> dict[str, int]:
        """What makes two probes' prompts the same set: compared only when equal."""
        return {"prompts": self.prompts, "output_len": self.output_len, "input_len": self.input_len,
                "seed": self.seed}


class PinnedAcceptance(_Strict):
    """SGLang's simulated acceptance (environment variables, not flags), for benchmarking a
    speculative configuration at a fixed acceptance length."""

    accept_length: Annotated[float, Field(gt=0.0, le=64.0, allow_inf_nan=False)]
    method: Literal["match-expected", "multinomial"] = "match-expected"
    token_mode: Literal["fixed", "real-draft-token"] = "fixed"  # noqa: S105 - a token mode, not a secret

    def environment(self) -> dict[str, str]:
        return {"SGLANG_SIMULATE_ACC_LEN": f"{self.accept_length:g}",
                "SGLANG_SIMULATE_ACC_METHOD": self.method,
                "SGLANG_SIMULATE_ACC_TOKEN_MODE": self.token_mode}

    def label(self) -> str:
        return f"SGLANG_SIMULATE_ACC_LEN={self.accept_length:g} ({self.method}, {self.token_mode})"


def probe_seconds(quality: QualityPlan | None, eval_items: int | None = None) -> float:
    """A rough duration of the probe: a sequential pass, a batched pass, the teacher-forced
    scoring and the eval set (its size if known, else its ``max_items`` cap up to 200)."""
    if quality is None:
        return 0.0
    sequential = quality.prompts * quality.output_len * PROBE_TOKEN_S
    batched = math.ceil(quality.prompts / quality.concurrency) * quality.output_len * PROBE_TOKEN_S
    forced = quality.prompts * PROBE_REQUEST_S
    evaluation = 0.0
    if quality.eval is not None:
        items = eval_items if eval_items is not None else min(quality.eval.max_items, 200)
        evaluation = math.ceil(items / quality.concurrency) * quality.eval.max_new_tokens * PROBE_TOKEN_S
    return sequential + batched + forced + evaluation
