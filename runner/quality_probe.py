"""The quality probe, run on the launched server after the sweep (same launch, no reload).

What it sends (SGLang's native ``/generate``, temperature 0, token ids in): the plan's
seeded prompt set once one request at a time and once at the probe's concurrency (two batch
compositions: their difference is the probe's own floor), each with ``return_logprob``;
then a reference run's outputs teacher-forced (``input_ids`` = prompt + reference tokens,
``logprob_start_len`` = prompt length, ``top_logprobs_num`` 1); then the eval set, through
the chat template when the plan uses one.  The record it returns is stored as is
(db/quality_store.py) and judged by domain/results/quality.py.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests
from tokenizers import Tokenizer

from domain.plan.eval_set import EvalItem, is_correct, load_eval_set
from domain.plan.quality import QualityPlan
from domain.plan.run_plan import RunPlan

REQUEST_TIMEOUT_S = 600
# Plain English words for the probe's prompts: text a model reads as text (random token ids
# would probe a distribution no user sends).
WORDS = (
    "the of and to in is was for on that with as by at from his her they this have had are not but one "
    "were which all she when there can an their said each time about many then them would write like so "
    "these long make thing see him two has look more day could come did number sound most people over know "
    "water than call first who may down side been now find any new work part take get place made live where "
    "after back little only round man year came show every good give our under name very through just form "
    "sentence great think say help low line differ turn cause much mean before move right boy old too same "
    "tell does set three want air well also play small end put home read hand port large spell add even land "
    "here must big high such follow act why ask men change went light kind off need house picture try again "
    "animal point mother world near build self earth father head stand own page should country found answer "
    "school grow study still learn plant cover food sun four between state keep eye never last let thought "
    "city tree cross farm hard start might story saw far sea draw left late run while press close night real "
    "life few north open seem together next white children begin got walk example ease paper group always music"
).split()


class ProbeUnavailable(RuntimeError):
    """The probe cannot run here (no tokenizer file, an engine without /generate)."""


def probe_prompts(quality: QualityPlan) -> list[str]:
    rng = random.Random(quality.seed)  # noqa: S311 - a reproducible prompt set, not a secret
    return [" ".join(rng.choice(WORDS) for _ in range(quality.input_len)) for _ in range(quality.prompts)]


def load_tokenizer(directory: Path) -> Tokenizer:
    path = directory / "tokenizer.json"
    if not path.is_file():
        raise ProbeUnavailable(f"the probe tokenizes its prompts with {path}, which is missing")
    return Tokenizer.from_file(str(path))


class ProbeClient:
    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        self.base_url = base_url
        self.session = requests.Session()
        if api_key:
            self.session.headers["Authorization"] = f"Bearer {api_key}"

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.session.post(self.base_url + path, json=body, timeout=REQUEST_TIMEOUT_S)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def greedy(self, prompt_ids: list[int], output_len: int) -> dict[str, Any]:
        data = self.post("/generate", {"input_ids": prompt_ids, "return_logprob": True, "sampling_params": {
            "temperature": 0.0, "max_new_tokens": output_len, "ignore_eos": True}})
        meta = data.get("meta_info") or {}
        logprobs = [entry[0] for entry in meta.get("output_token_logprobs") or []]
        accept = {k: meta[k] for k in ("spec_accept_length", "spec_accept_rate") if meta.get(k) is not None}
        return {"ids": list(data.get("output_ids") or []), "logprobs": logprobs, **accept}

    def forced(self, prompt_ids: list[int], reference: list[int]) -> dict[str, Any]:
        data = self.post("/generate", {
            "input_ids": prompt_ids + reference, "return_logprob": True, "logprob_start_len": len(prompt_ids),
            "top_logprobs_num": 1, "sampling_params": {"temperature": 0.0, "max_new_tokens": 1}})
        meta = data.get("meta_info") or {}
        logprobs = [entry[0] for entry in meta.get("input_token_logprobs") or []][: len(reference)]
        tops = [(row[0][1] if row else None) for row in (meta.get("input_top_logprobs") or [])][: len(reference)]
        return {"logprobs": logprobs, "top_ids": tops}


def _pool_map(fn: Callable[[Any], Any], items: Sequence[Any], workers: int) -> list[Any]:
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(fn, items))


def run_probe(plan: RunPlan, client: ProbeClient, tokenizer: Tokenizer,
              reference: tuple[int, dict[str, Any]] | None) -> dict[str, Any]:
    """The probe's record; ``reference`` = (run id, its probe record) to teacher-force."""
    quality = plan.quality
    assert quality is not None  # noqa: S101 - called only for plans with a quality section
    started = time.monotonic()
    prompts = [tokenizer.encode(text, add_special_tokens=False).ids for text in probe_prompts(quality)]
    alone = [client.greedy(ids, quality.output_len) for ids in prompts]
    batched = _pool_map(lambda ids: client.greedy(ids, quality.output_len), prompts, quality.concurrency)
    record: dict[str, Any] = {
        "prompt_set": quality.prompt_set_key(), "model": plan.model, "engine": plan.engine_label,
        "emulated": plan.emulated, "concurrency": quality.concurrency,
        "pinned_acceptance": plan.pinned_acceptance.model_dump() if plan.pinned_acceptance else None,
        "outputs": [{"alone": a, "batched": b} for a, b in zip(alone, batched, strict=True)],
        "teacher_forced": _teacher_forced(client, prompts, reference, quality.concurrency),
        "eval": _evaluate(plan, client, quality),
        "acceptance": _acceptance(batched),
    }
    record["duration_s"] = round(time.monotonic() - started, 3)
    return record


def _teacher_forced(client: ProbeClient, prompts: list[list[int]], reference: tuple[int, dict[str, Any]] | None,
                    concurrency: int) -> dict[str, Any] | None:
    if reference is None:
        return None
    run_id, record = reference
    tokens = [output["batched"]["ids"] for output in record["outputs"]]
    scored = _pool_map(lambda pair: client.forced(*pair), list(zip(prompts, tokens, strict=True)), concurrency)
    return {"reference_run_id": run_id, "scores": scored}


def _acceptance(outputs: list[dict[str, Any]]) -> dict[str, float] | None:
    lengths = [o["spec_accept_length"] for o in outputs if "spec_accept_length" in o]
    rates = [o["spec_accept_rate"] for o in outputs if "spec_accept_rate" in o]
    if not lengths:
        return None
    return {"accept_length": sum(lengths) / len(lengths), "accept_rate": sum(rates) / len(rates) if rates else None,
            "requests": len(lengths)}


def _evaluate(plan: RunPlan, client: ProbeClient, quality: QualityPlan) -> dict[str, Any] | None:
    if quality.eval is None:
        return None
    loaded = load_eval_set(quality.eval)
    answer = _chat_answer if plan.benchmark.apply_chat_template else _plain_answer
    outputs = _pool_map(lambda item: answer(plan, client, item, quality.eval.max_new_tokens),  # type: ignore[union-attr]
                        loaded.items, quality.concurrency)
    items = [{"id": item.id, "correct": is_correct(item, text), "output": text[:200]}
             for item, text in zip(loaded.items, outputs, strict=True)]
    return {"path": quality.eval.path, "sha256": loaded.sha256, "scorer": quality.eval.scorer,
            "chat_template": plan.benchmark.apply_chat_template, "thinking_mode": plan.benchmark.thinking_mode,
            "items": items, "correct": sum(1 for i in items if i["correct"]), "n": len(items)}


def _plain_answer(plan: RunPlan, client: ProbeClient, item: EvalItem, max_new: int) -> str:
    data = client.post("/generate", {"text": item.prompt, "sampling_params": {"temperature": 0.0,
                                                                               "max_new_tokens": max_new}})
    return str(data.get("text") or "")


def _chat_answer(plan: RunPlan, client: ProbeClient, item: EvalItem, max_new: int) -> str:
    body: dict[str, Any] = {"model": plan.model, "messages": [{"role": "user", "content": item.prompt}],
                            "temperature": 0.0, "max_tokens": max_new}
    if plan.benchmark.thinking_mode in ("on", "off"):
        body["chat_template_kwargs"] = {"enable_thinking": plan.benchmark.thinking_mode == "on"}
    data = client.post("/v1/chat/completions", body)
    message = (data.get("choices") or [{}])[0].get("message") or {}
    return str(message.get("content") or "")
