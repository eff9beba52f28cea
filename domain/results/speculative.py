"""Speculative decoding's conditions (issue 42): what the acceptance of a point was
measured on, recorded with each point, and the badge of a point whose acceptance does not
stand for real text.

A draft model (EAGLE, MTP, n-gram) is accepted as often as it predicts the target's next
token, so its acceptance on uniformly drawn token ids (bench_serving's ``random-ids``) is
not what a real text distribution gets; a pinned acceptance (SGLang's
``SGLANG_SIMULATE_ACC_LEN``) is not measured at all.  Such points are badged
``acceptance_not_representative``; the dataset condition already keeps a random-ids run
apart from a run on text (domain/compare/comparability.py: a differing dataset is fatal).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from domain.plan.quality_checks import is_speculative
from domain.plan.run_plan import RunPlan

RANDOM_DATASETS = frozenset({"random-ids", "random"})


def speculative_conditions(plan: RunPlan, record: Mapping[str, Any]) -> dict[str, Any]:
    """The acceptance conditions a point records (nothing for a plan without speculation):
    the client's ``accept_length`` (the server's ``avg_spec_accept_length``), the pinned
    acceptance when there is one, and whether the acceptance stands for real text."""
    pinned = plan.pinned_acceptance
    if not is_speculative(plan) and pinned is None:
        return {}
    return {"accept_length": record.get("accept_length"),
            "pinned_acceptance": pinned.label() if pinned is not None else None,
            "acceptance_representative": pinned is None and plan.benchmark.dataset not in RANDOM_DATASETS}


def acceptance_badge(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """``acceptance_not_representative`` for a speculative point measured on random
    prompts or with a pinned acceptance; the detail names which."""
    args = row.get("server_args")
    speculative = isinstance(args, Mapping) and args.get("speculative-algorithm") not in (None, "", "NONE")
    pinned = row.get("pinned_acceptance")
    if isinstance(pinned, str) and pinned:
        return "acceptance_not_representative", pinned
    if speculative and row.get("dataset") in RANDOM_DATASETS:
        return "acceptance_not_representative", str(row.get("dataset"))
    return None
