"""Thinking mode as the served model's chat template takes it, or a refusal with the reason.

Qwen3's chat template reads one keyword, ``enable_thinking``: when it is ``false`` the
template closes an empty reasoning block right after the generation prompt
(``<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n``), so the model answers directly;
otherwise the model opens ``<think>`` itself and reasons before answering.  SGLang's
template detection (``sglang/srt/parser/template_detection.py`` in .venv-sglang,
``enable_thinking_default_true``) matches exactly that form.  The keyword reaches the
template only through a chat request's ``chat_template_kwargs``, which SGLang's OpenAI
chat endpoint passes to the template it renders on the server.

So, with the installed bench client (``sglang/benchmark/serving.py``):

- the ``sglang-oai-chat`` backend posts ``/v1/chat/completions`` and merges
  ``--extra-request-body`` (JSON) into every request: that is where
  ``chat_template_kwargs`` goes (:func:`bench_argv_extras`);
- the ``sglang`` (``/generate``) and ``sglang-oai`` (``/v1/completions``) backends send
  a finished prompt, on which no template is rendered by the server; the client's own
  ``--apply-chat-template`` renders the template with ``apply_chat_template(messages,
  add_generation_prompt=True)`` only (sharegpt and custom datasets; random ones never), so
  ``enable_thinking`` cannot reach it either way.  A plan asking for thinking on/off
  there is refused (domain/plan/thinking_mode.py ``thinking_problem``), not labelled;
- a served chat template that ignores ``enable_thinking`` renders the same prompt either
  way: refused by the plan checks (:func:`template_problem`), which render the template
  both ways to find out.

The streamed chat responses of SGLang carry the server's token count only when asked
(``stream_options.include_usage``); without it the client counts each request's
*requested* length as its output length, and thinking's longer outputs would not show.
The extras ask for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from domain.plan.thinking_mode import CHAT_BACKEND, THINKING_KWARG, is_set

if TYPE_CHECKING:
    from domain.plan.run_plan import BenchmarkPlan, RunPlan

# The probe conversation a template is rendered with (both ways) to see whether it reads the kwarg.
_PROBE = [{"role": "user", "content": "Hello"}]

def request_body_extras(bench: BenchmarkPlan) -> dict[str, Any]:
    """What every request of the benchmark carries beyond the client's own fields."""
    if not is_set(bench.thinking_mode) or bench.backend != CHAT_BACKEND:
        return {}
    return {
        "chat_template_kwargs": {THINKING_KWARG: bench.thinking_mode == "on"},
        # The server's completion_tokens in the last streamed chunk: measured, not requested, lengths.
        "stream_options": {"include_usage": True},
    }


def bench_argv_extras(bench: BenchmarkPlan) -> list[str]:
    """Extra bench_serving arguments for the plan's thinking mode (none when it sets none):
    ``--extra-request-body`` with the JSON of :func:`request_body_extras`."""
    body = request_body_extras(bench)
    return ["--extra-request-body", json.dumps(body, separators=(",", ":"))] if body else []


# --- the served model's chat template -----------------------------------------------------


@dataclass(frozen=True)
class ServedTemplate:
    """The chat template the server will render, and where it was read; ``text`` None when
    it could not be read here (a hub id, a built-in template name, no template file)."""

    text: str | None
    where: str


def _template_in(directory: Path) -> str | None:
    """A tokenizer directory's template: ``chat_template.jinja`` (transformers ≥ 4.43 writes
    it), else ``tokenizer_config.json``'s ``chat_template`` (a string, or a list of named
    templates of which "default" is the one rendered)."""
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config_path = directory / "tokenizer_config.json"
    if not config_path.is_file():
        return None
    try:
        template = json.loads(config_path.read_text(encoding="utf-8")).get("chat_template")
    except (json.JSONDecodeError, AttributeError):
        return None
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def served_template(plan: RunPlan, toy_tokenizer_dir: Path) -> ServedTemplate:
    """The template the plan's server renders chat requests with: the emulator's is the toy
    tokenizer's; SGLang's is ``--chat-template`` when that names a file, else the one in
    ``tokenizer-path`` or the ``--model-path`` directory (what SGLang loads)."""
    if plan.emulated:
        return ServedTemplate(_template_in(toy_tokenizer_dir), str(toy_tokenizer_dir))
    flag = plan.server_args.get("chat-template")
    if isinstance(flag, str) and flag:
        path = Path(flag)
        return ServedTemplate(path.read_text(encoding="utf-8") if path.is_file() else None, f"--chat-template {flag}")
    where = str(plan.server_args.get(tokenizer_flag(plan)) or plan.model)
    directory = Path(where)
    return ServedTemplate(_template_in(directory) if directory.is_absolute() and directory.is_dir() else None, where)


def tokenizer_flag(plan: RunPlan) -> str:
    """The server flag naming a tokenizer apart from the model: SGLang's ``--tokenizer-path``,
    vLLM's ``--tokenizer``."""
    return "tokenizer" if plan.is_vllm else "tokenizer-path"


def _raise(message: str) -> None:
    raise TemplateError(message)


def _render(template: str, **kwargs: Any) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise  # transformers gives templates this helper
    return env.from_string(template).render(messages=_PROBE, add_generation_prompt=True, tools=None, **kwargs)


def takes_enable_thinking(template: str) -> bool | None:
    """Whether the template renders differently with ``enable_thinking`` true and false;
    None when it cannot be rendered here (it needs something only the server gives it)."""
    try:
        return _render(template, enable_thinking=True) != _render(template, enable_thinking=False)
    except (TemplateError, TypeError, ValueError, AttributeError):
        return None


def template_problem(plan: RunPlan, toy_tokenizer_dir: Path) -> tuple[str, dict[str, str]] | None:
    """Why the served template cannot honour the plan's thinking mode, as (kind, context),
    None when it can or the plan sets none.  ``thinking_template_unknown`` (the template
    could not be read or rendered here) is a warning; the other kinds refuse the plan."""
    if not is_set(plan.benchmark.thinking_mode):
        return None
    served = served_template(plan, toy_tokenizer_dir)
    if served.text is None:
        return "thinking_template_unknown", {"where": served.where}
    takes = takes_enable_thinking(served.text)
    if takes is None:
        return "thinking_template_unknown", {"where": served.where}
    if not takes:
        return "thinking_template_ignores", {"where": served.where}
    return None

