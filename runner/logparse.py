"""Reading an SGLang server's log from the runner and ``python -m runner diagnose``: the
shared reader (``domain/engines/log_reader.py``) with SGLang's wordings
(``domain/engines/sglang_log.py``).  Another engine's log is read by its adapter's reader
(``adapter_for(family).log``), with the same methods.
"""

from __future__ import annotations

from domain.core.states import FailureKind
from domain.engines.log_reader import Diagnosis, log_lines, unwrap
from domain.engines.sglang_log import FATAL_PATTERNS, HARMLESS_PATTERNS, READY_LINE, SGLANG_LOG

__all__ = ["FATAL_PATTERNS", "HARMLESS_PATTERNS", "READY_LINE", "Diagnosis", "classify", "find_failure", "log_lines",
           "startup_facts", "startup_stage", "unwrap"]


def find_failure(log_text: str) -> Diagnosis | None:
    """The failure a log shows, or None where it shows none."""
    return SGLANG_LOG.diagnose(log_text)


def classify(log_text: str, *, default: FailureKind) -> Diagnosis:
    """The failure kind a log shows; ``default`` (with no line) if it shows none."""
    return SGLANG_LOG.classify(log_text, default=default)


def startup_facts(log_text: str) -> dict[str, float]:
    """Start-up phases parsed from the log (weight load, KV allocation, CUDA graphs) and the
    scheduler's capacity line; counts are ints.  The first rank's line wins (ranks agree)."""
    return SGLANG_LOG.startup_facts(log_text)


def startup_stage(log_text: str) -> str:
    """Where a start-up got to: ``init`` (before weight loading: process start, NCCL and
    distributed init), ``weights``, ``kv_cache``, ``cuda_graphs``, ``http_server``,
    ``warmup`` (HTTP up, the warmup request not done) or ``ready``."""
    return SGLANG_LOG.startup_stage(log_text)
