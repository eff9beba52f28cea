"""The attempt's quality step (issue 42): after the sweep, on the same launch, the probe of
runner/quality_probe.py; its record goes to the DB through the attempt's writer.

A probe that cannot run (no ``tokenizer.json`` to tokenize its prompts, an engine without
SGLang's ``/generate``, a request that fails) does not fail the measured run: the record
says why, and the quality verdict reads "not measured".
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import requests

from domain.plan.quality_checks import PROBED_ENGINES
from domain.plan.run_plan import RunPlan
from runner.bench_client import TokenizerUnavailable, bench_tokenizer
from runner.quality_probe import ProbeClient, ProbeUnavailable, load_tokenizer, run_probe

log = logging.getLogger(__name__)
# What a probe can meet: no tokenizer here, a request refused or cut, an answer of another shape.
PROBE_FAILURES = (ProbeUnavailable, TokenizerUnavailable, requests.RequestException, ValueError, KeyError,
                  IndexError, TypeError)


def quality_record(plan: RunPlan, base_url: str, toy_tokenizer_dir: Path,
                   reference: tuple[int, dict[str, Any]] | None) -> dict[str, Any]:
    """The probe's record, or one that says why there is none.  The prompts are tokenized
    with the bench client's tokenizer (``bench_tokenizer``: the toy one for emulated runs)."""
    assert plan.quality is not None  # noqa: S101 - called only for plans with a quality section
    unmeasured = {"prompt_set": plan.quality.prompt_set_key(), "model": plan.model, "engine": plan.engine_label,
                  "emulated": plan.emulated}
    if plan.engine not in PROBED_ENGINES:
        return {**unmeasured, "not_measured": f"engine {plan.engine_label} is not probed (the probe speaks /generate)"}
    api_key = plan.server_args.get("api-key")
    try:
        tokenizer = load_tokenizer(bench_tokenizer(plan, toy_tokenizer_dir).path)
        return run_probe(plan, ProbeClient(base_url, str(api_key) if api_key else None), tokenizer, reference)
    except PROBE_FAILURES as exc:
        log.warning("quality probe failed: %s", exc)
        return {**unmeasured, "not_measured": f"the probe failed: {exc}"}
