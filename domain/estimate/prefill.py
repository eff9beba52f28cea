"""The token budgets of one SGLang prefill step, shared by the estimator (which forms a
round's prefill steps with it, ``estimator._prefill_round``) and the emulator's scheduler
(``emulator/scheduler.py``): one rule for how a step is filled, two users."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PrefillBudget:
    """The two token budgets of one prefill step, as SGLang's ``PrefillAdder`` keeps them
    (sglang/srt/managers/schedule_policy.py: ``rem_input_tokens`` from ``--max-prefill-tokens``,
    ``rem_chunk_tokens`` from ``--chunked-prefill-size``, ``budget_state``,
    ``_select_prefill_admission``, ``_update_prefill_budget``).

    With chunking, a prompt that fits what is left of the chunk joins whole, a longer one is
    truncated there; ``max_prefill_tokens`` never truncates, it only stops admission once
    spent.  Without chunking the step's first prompt joins whole whatever its length, a
    later one only if it is shorter than what is left of ``max_prefill_tokens``."""

    rem_input: int
    rem_chunk: int | None  # None: chunking disabled

    def spent(self) -> bool:
        """``budget_state() == OTHER``: no further prompt joins this step."""
        return self.rem_input <= 0 or (self.rem_chunk is not None and self.rem_chunk <= 0)

    def take(self, remaining: int, first: bool) -> int:
        """Charge and return the tokens a prompt with ``remaining`` uncomputed tokens
        prefills in this step (0: it does not join)."""
        if self.rem_chunk is not None:
            n = max(0, min(remaining, self.rem_chunk))
        elif first or remaining < self.rem_input:
            n = remaining
        else:
            n = 0
        self.rem_input -= n
        if self.rem_chunk is not None:
            self.rem_chunk -= n
        return n
