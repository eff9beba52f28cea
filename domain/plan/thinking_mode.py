"""Whether a benchmark's requests can carry a thinking mode at all: only the chat backend
passes ``enable_thinking`` to the served template (domain/plan/thinking.py says why).
Strings only, so that the run plan's own validation reads it without importing the plan
types that domain/plan/thinking.py uses.
"""

from __future__ import annotations

CHAT_BACKEND = "sglang-oai-chat"
THINKING_KWARG = "enable_thinking"


def is_set(thinking_mode: str) -> bool:
    """True for "on" and "off"; "n/a" leaves the template's own default."""
    return thinking_mode in ("on", "off")


def thinking_problem(backend: str, apply_chat_template: bool, thinking_mode: str) -> tuple[str, str] | None:
    """Why a benchmark's requests cannot carry its thinking mode, as (kind, English message);
    None when they can or when the plan does not set one.  The kinds are
    ``plan.problem.<kind>`` sentences (domain/core/i18n/naming.yaml)."""
    if not is_set(thinking_mode) or backend == CHAT_BACKEND:
        return None
    if apply_chat_template:
        return ("thinking_client_template",
                f"thinking_mode needs the {CHAT_BACKEND!r} backend: with backend {backend!r} the bench client "
                "renders the chat template itself and cannot pass enable_thinking to it")
    return ("thinking_no_template",
            f"thinking_mode needs the {CHAT_BACKEND!r} backend: backend {backend!r} sends a bare prompt, on "
            "which no chat template (and so no enable_thinking) is applied")
