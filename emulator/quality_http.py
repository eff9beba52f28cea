"""The emulated model (emulator/quality.py) on the HTTP surface: each request's output,
SGLang's logprob fields on ``/generate``, OpenAI ``logprobs`` on completions, and the
speculative acceptance fields, in the shapes the real servers use.

SGLang 0.5.23 (``tokenizer_manager.add_logprob_to_meta_info``): with ``return_logprob``,
``meta_info`` carries ``input_token_logprobs`` (from ``logprob_start_len``; the prompt's
first token has no log-probability, so its entry is ``null``), ``output_token_logprobs``
and ``output_token_logprobs_length``, each entry ``[logprob, token_id, text-or-null]``;
with ``top_logprobs_num`` > 0 also ``input_top_logprobs`` / ``output_top_logprobs``.  With
speculative decoding, ``spec_accept_length``, ``spec_accept_rate`` and ``spec_verify_ct``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from emulator.quality import Decoder, EmulatedModel, Step, task_answer, teacher_forced

TASK_MAX_PROMPT = 2048  # longer prompts are not read for the toy task (the sweep's are long)


class ModelOutput:
    """What a request has produced so far (the server's ``Output`` interface): the toy
    task's answer first where the prompt asks one, then the greedy continuation."""

    def __init__(self, model: EmulatedModel, prompt_ids: Sequence[int], batch: Callable[[], int],
                 answer: list[int] | None = None) -> None:
        self.tokens = model.tokens
        self.decoder = Decoder(model, prompt_ids)
        self.batch = batch
        self.answer = answer or []
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.text = ""

    def catch_up(self, generated: int) -> str:
        new: list[int] = []
        while len(self.ids) < min(generated, len(self.answer)):
            new.append(self.answer[len(self.ids)])
            self.ids.append(new[-1])
            self.logprobs.append(-0.05)
        if generated > len(self.ids):
            for token in self.decoder.extend(generated - len(self.answer), self.batch()):
                self.ids.append(token)
                self.logprobs.append(self.decoder.logprobs[len(self.ids) - len(self.answer) - 1])
                new.append(token)
        delta = self.tokens.tokenizer.decode(new) if self.answer else "".join(self.tokens.pieces[t] for t in new)
        self.text += delta
        return delta


def model_of(state: Any) -> EmulatedModel:
    return state.model  # built with the server state (emulator/generation.py)


def running_batch(state: Any) -> Callable[[], int]:
    scheduler = state.step_loop.scheduler
    return lambda: max(1, len(scheduler.running))


def task_answer_ids(state: Any, prompt_ids: Sequence[int]) -> list[int] | None:
    """The toy task's answer tokens (the emulated model's own EOS ends them); None: no task."""
    if len(prompt_ids) > TASK_MAX_PROMPT:
        return None
    answer = task_answer(state.tokens.tokenizer.decode(list(prompt_ids)), model_of(state).profile)
    return None if answer is None else state.tokens.encode(" " + answer)


def output_for(state: Any, prompt_ids: Sequence[int]) -> ModelOutput:
    return ModelOutput(model_of(state), prompt_ids, running_batch(state), task_answer_ids(state, prompt_ids))


def _entry(logprob: float | None, token: int) -> list[Any]:
    return [logprob, token, None]


def _top(step: Step, k: int) -> list[list[Any]]:
    return [_entry(step.logprob if step.token == step.top else min(0.0, step.logprob + 0.1), step.top)][:k]


def _input_logprobs(state: Any, prompt_ids: Sequence[int], start: int, k: int) -> dict[str, Any]:
    """Teacher forcing: the prompt from ``start`` scored as the continuation of what precedes it."""
    start = max(0, min(start, len(prompt_ids)))
    head, forced = (prompt_ids[:1], prompt_ids[1:]) if start == 0 else (prompt_ids[:start], prompt_ids[start:])
    steps = teacher_forced(model_of(state), head, forced, running_batch(state)())
    entries = ([_entry(None, prompt_ids[0])] if start == 0 else []) + [_entry(s.logprob, s.token) for s in steps]
    meta: dict[str, Any] = {"input_token_logprobs": entries}
    if k > 0:
        meta["input_top_logprobs"] = ([None] if start == 0 else []) + [_top(s, k) for s in steps]
    return meta


def generate_meta(state: Any, body: dict[str, Any], prompt_ids: Sequence[int], out: Any,
                  generated: int) -> dict[str, Any]:
    """The extra ``meta_info`` fields of a finished ``/generate`` request."""
    meta: dict[str, Any] = {}
    if not body.get("return_logprob"):
        return meta
    k = int(body.get("top_logprobs_num") or 0)
    start = body.get("logprob_start_len")
    start = len(prompt_ids) if start is None or int(start) < 0 else int(start)
    if start < len(prompt_ids):
        meta |= _input_logprobs(state, prompt_ids, start, k)
    else:
        meta["input_token_logprobs"] = []
    logprobs = getattr(out, "logprobs", [0.0] * len(out.ids))
    meta["output_token_logprobs"] = [_entry(lp, t) for lp, t in zip(logprobs, out.ids, strict=False)]
    meta["output_token_logprobs_length"] = len(out.ids)
    if k > 0:
        meta["output_top_logprobs"] = [[_entry(lp, t)] for lp, t in zip(logprobs, out.ids, strict=False)]
    return meta


def spec_meta(state: Any, prompt_ids: Sequence[int], generated: int) -> dict[str, Any]:
    acceptance = model_of(state).profile.acceptance
    if acceptance is None or generated <= 0:
        return {}
    length = acceptance.length(prompt_ids, state.tokens.vocab_size)
    verify = max(1, math.ceil(generated / length))
    return {"spec_accept_length": generated / verify, "spec_accept_rate": acceptance.rate(length),
            "spec_verify_ct": verify}


def openai_logprobs(body: dict[str, Any], out: Any, chat: bool) -> dict[str, Any] | None:
    """OpenAI ``logprobs`` of a finished choice: completions' token lists, chat's content list."""
    asked = body.get("logprobs")
    if asked in (None, False, 0) and not (chat and body.get("top_logprobs")):
        return None
    tokens = out.tokens
    logprobs = getattr(out, "logprobs", [0.0] * len(out.ids))
    pieces = [tokens.tokenizer.decode([t]) for t in out.ids]
    if chat:
        return {"content": [{"token": p, "logprob": lp, "bytes": list(p.encode()), "top_logprobs": []}
                            for p, lp in zip(pieces, logprobs, strict=False)]}
    offsets, at = [], 0
    for piece in pieces:
        offsets.append(at)
        at += len(piece)
    return {"tokens": pieces, "token_logprobs": list(logprobs), "text_offset": offsets,
            "top_logprobs": [{p: lp} for p, lp in zip(pieces, logprobs, strict=False)]}


def record_acceptance(state: Any, req: Any) -> None:
    """Keep a finished request's acceptance length for ``avg_spec_accept_length``."""
    fields = spec_meta(state, req.prompt_ids, req.generated) if req.finished else {}
    if fields:
        state.spec_lengths.append(fields["spec_accept_length"])


def server_info_fields(state: Any) -> dict[str, Any]:
    """``internal_states[0].avg_spec_accept_length`` (read by bench_serving as the record's
    ``accept_length``): the mean over the requests served so far; absent without speculation."""
    if model_of(state).profile.acceptance is None:
        return {}
    served = state.spec_lengths
    return {"avg_spec_accept_length": sum(served) / len(served) if served else None}
