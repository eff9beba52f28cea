"""What the emulated model answers, and how sure it is: greedy tokens, log-probabilities,
teacher-forced scoring, a toy task skill, and speculative acceptance (all emulated).

The emulated model is deterministic per context.  A context is a *branch*: the prompt's
seed (``TokenText.seed``), changed only where the context's token differs from what the
base model predicts there.  At each position the base model predicts a ``ref`` token
(today's ``TokenText.output_id``, so a lossless server emits exactly what it always did)
and has a runner-up ``alt``.  A lossy flag (KV-cache dtype, weight quantization, a
speculative algorithm, a pinned acceptance in SGLang's ``fixed`` token mode) flips the
argmax to ``alt`` at a per-token rate of its own (:data:`LOSSY`) and perturbs the
log-probabilities; a different decode batch (how many requests run beside this one) flips
it at a much smaller rate (:data:`BATCH_NOISE_FLIP`), as real kernels are not
batch-invariant.  Every draw is a hash of (branch, position, what drew it), so a
configuration's outputs repeat exactly for the same batch composition.

The toy task: a prompt asking ``What is A + B?`` (or ``-``, ``*``) is answered with a number,
right with probability :attr:`LossProfile.accuracy` (the base accuracy minus each lossy
flag's emulated penalty), so accuracy depends on the flags.  Every constant here is an
emulator constant chosen to make effects visible, not a measurement of any model.
"""

from __future__ import annotations

import os
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from emulator.tokens import TokenText

MASK = (1 << 64) - 1
BASE_ACCURACY = 0.80
STABLE_ITEM_SHARE = 0.7  # items whose right/wrong draw is the same for every configuration
BATCH_NOISE_FLIP = 3e-4  # per token, between two different decode batch sizes
BATCH_NOISE_LOGPROB = 0.002
# flag dest -> value -> (argmax flip rate per token, log-prob perturbation, accuracy penalty)
LOSSY: dict[str, dict[str, tuple[float, float, float]]] = {
    # vLLM's "fp8" KV cache is e4m3.
    "kv_cache_dtype": {"fp8_e4m3": (0.006, 0.03, 0.015), "fp8": (0.006, 0.03, 0.015), "fp8_e5m2": (0.01, 0.05, 0.025),
                       "fp4_e2m1": (0.03, 0.12, 0.08)},
    "quantization": {"fp8": (0.004, 0.02, 0.01), "w8a8_fp8": (0.004, 0.02, 0.01), "modelopt_fp8": (0.004, 0.02, 0.01),
                     "w8a8_int8": (0.006, 0.03, 0.02), "awq": (0.03, 0.12, 0.10), "gptq": (0.03, 0.12, 0.10),
                     "awq_marlin": (0.03, 0.12, 0.10), "gptq_marlin": (0.03, 0.12, 0.10),
                     "w4afp8": (0.03, 0.12, 0.10), "modelopt_fp4": (0.02, 0.08, 0.06)},
}
# Greedy verification accepts only the target's own tokens: lossless in exact arithmetic;
# the verify kernels' other shapes still move a few near-ties.
SPECULATIVE = (0.0015, 0.004, 0.0)
# Emulated mean acceptance length (tokens per verify step) per algorithm, on real text
# and on random token ids (where a draft model has nothing to predict from).
ACCEPT_TEXT = {"EAGLE": 2.6, "EAGLE3": 3.1, "NEXTN": 2.4, "STANDALONE": 2.2, "NGRAM": 1.8}
ACCEPT_RANDOM_IDS = 1.25
_TASK = re.compile(r"What is (-?\d{1,12}) ([+\-*]) (-?\d{1,12})\?")


def _mix(*parts: int) -> int:
    """splitmix64 over the parts: a fast, well-spread 64-bit hash."""
    h = 0x9E3779B97F4A7C15
    for part in parts:
        h = (h ^ (part & MASK)) * 0xBF58476D1CE4E5B9 & MASK
        h = (h ^ (h >> 27)) * 0x94D049BB133111EB & MASK
        h ^= h >> 31
    return h


def _u(*parts: int) -> float:
    return _mix(*parts) / 2**64


def _word(text: str) -> int:
    return _mix(*text.encode())


@dataclass(frozen=True)
class Acceptance:
    """Speculative decoding's emulated acceptance; ``pinned`` when SGLANG_SIMULATE_ACC_LEN set it."""

    algorithm: str
    draft_tokens: int
    text_length: float
    pinned: float | None = None
    token_mode: str = "fixed"  # noqa: S105 - SGLang's token mode, not a secret

    def length(self, prompt_ids: Sequence[int], vocab_size: int) -> float:
        if self.pinned is not None:
            return min(self.pinned, self.draft_tokens)
        return ACCEPT_RANDOM_IDS if looks_random(prompt_ids, vocab_size) else min(self.text_length, self.draft_tokens)

    def rate(self, length: float) -> float:
        return max(0.0, (length - 1) / max(1, self.draft_tokens - 1))


def looks_random(prompt_ids: Sequence[int], vocab_size: int) -> bool:
    """A BPE vocabulary numbers its merges by frequency, so real text sits in the low ids
    and uniformly drawn ids (bench_serving's random-ids) do not: a median above a quarter
    of the vocabulary reads as random."""
    return bool(prompt_ids) and statistics.median(prompt_ids) > vocab_size / 4


@dataclass(frozen=True)
class LossProfile:
    flip_rate: float
    logprob_scale: float
    accuracy: float
    fingerprint: int  # which draws this configuration's perturbations take
    acceptance: Acceptance | None = None
    lossy: dict[str, Any] = field(default_factory=dict)


def profile_for(args: dict[str, Any], environ: Mapping[str, str] | None = None) -> LossProfile:
    """The loss profile of a server's resolved args (and SGLang's simulated-acceptance
    environment variables, read as SGLang reads them at import)."""
    flip, scale, penalty, lossy = 0.0, 0.0, 0.0, {}
    for dest, table in LOSSY.items():
        value = args.get(dest)
        if value in table:
            f, s, p = table[value]
            flip, scale, penalty, lossy[dest] = flip + f, scale + s, penalty + p, value
    acceptance = _acceptance(args, os.environ if environ is None else environ)
    if acceptance is not None:
        flip, scale = flip + SPECULATIVE[0], scale + SPECULATIVE[1]
        lossy["speculative_algorithm"] = acceptance.algorithm
        if acceptance.pinned is not None and acceptance.token_mode == "fixed":  # noqa: S105 - a token mode
            # SGLang fills accepted draft positions with a fixed token id: not the model's output.
            flip = max(flip, 1 - 1 / max(1.0, acceptance.pinned))
            lossy["pinned_acceptance"] = acceptance.pinned
    fingerprint = _mix(*(_word(f"{k}={v}") for k, v in sorted(lossy.items()))) if lossy else 0
    return LossProfile(min(flip, 0.9), scale, max(0.0, BASE_ACCURACY - penalty), fingerprint, acceptance, lossy)


def _acceptance(args: dict[str, Any], environ: Mapping[str, str]) -> Acceptance | None:
    algorithm = str(args.get("speculative_algorithm") or "").upper()
    if not algorithm or algorithm == "NONE":
        return None
    draft = int(args.get("speculative_num_draft_tokens") or (int(args.get("speculative_num_steps") or 3) + 1))
    pinned = float(environ.get("SGLANG_SIMULATE_ACC_LEN", "-1") or -1)
    return Acceptance(algorithm, max(2, draft), ACCEPT_TEXT.get(algorithm, 2.0), pinned if pinned > 0 else None,
                      environ.get("SGLANG_SIMULATE_ACC_TOKEN_MODE", "fixed"))


@dataclass(frozen=True)
class Step:
    token: int
    logprob: float
    top: int


class EmulatedModel:
    """One configuration's greedy decoding and scoring over the toy tokenizer's words."""

    def __init__(self, tokens: TokenText, profile: LossProfile) -> None:
        self.tokens = tokens
        self.profile = profile
        self.words = tokens.emit_ids
        self.index = {token: i for i, token in enumerate(self.words)}

    def _candidates(self, branch: int, pos: int) -> tuple[int, int]:
        n = len(self.words)
        ref = (branch + pos * 7919) % n
        alt = (ref + 1 + _mix(branch, pos, 0xA17) % (n - 1)) % n
        return self.words[ref], self.words[alt]

    def _flipped(self, branch: int, pos: int, batch: int) -> bool:
        p = self.profile
        if p.flip_rate and _u(branch, pos, p.fingerprint, 0xF11) < p.flip_rate:
            return True
        return batch > 1 and _u(branch, pos, batch, 0xBA7) < BATCH_NOISE_FLIP

    def _logprob(self, branch: int, pos: int, batch: int, near_tie: bool) -> float:
        base = -0.69 - 0.1 * _u(branch, pos, 0x71E) if near_tie else -2.0 * _u(branch, pos, 0x1B) ** 3
        p = self.profile
        shift = p.logprob_scale * (2 * _u(branch, pos, p.fingerprint, 0x5C) - 1) if p.logprob_scale else 0.0
        noise = BATCH_NOISE_LOGPROB * (2 * _u(branch, pos, batch, 0x70) - 1) if batch > 1 else 0.0
        return min(0.0, base + shift + noise)

    def step(self, branch: int, pos: int, batch: int) -> Step:
        ref, alt = self._candidates(branch, pos)
        flipped = self._flipped(branch, pos, batch)
        top = alt if flipped else ref
        return Step(top, self._logprob(branch, pos, batch, flipped), top)

    def score(self, branch: int, pos: int, batch: int, token: int) -> Step:
        """Teacher forcing: ``token``'s log-probability at ``pos``, and the top token there."""
        chosen = self.step(branch, pos, batch)
        if token == chosen.token:
            return chosen
        ref, alt = self._candidates(branch, pos)
        if token in (ref, alt):  # the runner-up of a near-tie
            return Step(token, chosen.logprob - (0.02 + 0.2 * _u(branch, pos, 0x6A9)), chosen.top)
        return Step(token, -4.0 - 4.0 * _u(branch, pos, token, 0x07E), chosen.top)

    @staticmethod
    def advance(branch: int, pos: int, token: int, ref: int) -> int:
        """The context's branch after ``token`` at ``pos`` (unchanged where it is the base model's)."""
        return branch if token == ref else _mix(branch, pos, token)

    def ref_token(self, branch: int, pos: int) -> int:
        return self._candidates(branch, pos)[0]


class Decoder:
    """One request's greedy continuation, generated as the step loop produces tokens."""

    def __init__(self, model: EmulatedModel, prompt_ids: Sequence[int]) -> None:
        self.model = model
        self.branch = TokenText.seed(prompt_ids)
        self.ids: list[int] = []
        self.logprobs: list[float] = []

    def extend(self, generated: int, batch: int) -> list[int]:
        new = []
        while len(self.ids) < generated:
            pos = len(self.ids)
            step = self.model.step(self.branch, pos, batch)
            self.branch = self.model.advance(self.branch, pos, step.token, self.model.ref_token(self.branch, pos))
            self.ids.append(step.token)
            self.logprobs.append(step.logprob)
            new.append(step.token)
        return new


def teacher_forced(model: EmulatedModel, prompt_ids: Sequence[int], forced: Sequence[int],
                   batch: int) -> list[Step]:
    branch, steps = TokenText.seed(prompt_ids), []
    for pos, token in enumerate(forced):
        steps.append(model.score(branch, pos, batch, token))
        branch = model.advance(branch, pos, token, model.ref_token(branch, pos))
    return steps


def task_answer(text: str, profile: LossProfile) -> str | None:
    """The toy task's answer to the last ``What is A op B?`` in ``text``; None: no task."""
    matches = _TASK.findall(text)
    if not matches:
        return None
    a, op, b = matches[-1]
    right = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
    item = _word(f"{a}{op}{b}")
    stable = _u(item, 0x57AB) < STABLE_ITEM_SHARE
    draw = _u(item, 0xACC) if stable else _u(item, profile.fingerprint, 0xACC)
    return str(right if draw < profile.accuracy else right + 1 + _mix(item, 0xB0) % 9)
