"""The Build page's form state: its session-state keys, filling it from a plan (a preset,
a duplicated run through ``?from_run=<id>``, an uploaded YAML), keeping the draft across
page switches, and reading it back as the mapping a plan is validated from."""

from __future__ import annotations

import uuid
from typing import Any

import streamlit as st

from db import DbBusy
from domain.engines import split_label
from domain.flags.dialects.vllm import newest_vllm_version
from domain.flags.drift import retarget
from domain.flags.schema import known_versions
from domain.plan.form_input import concurrency_list, count_or_text, rate_or_text
from domain.plan.naming import MAX_NAME_CHARS
from domain.plan.presets import GPUS, PRESET_SGLANG_VERSION, quick_demo_plan
from domain.plan.run_plan import SCENARIO_PRESETS, RunPlan
from domain.plan.thinking import CHAT_BACKEND
from pages.parts import variant
from pages.parts.common import store
from pages.parts.flag_widgets import SERVER_ARGS, VLLM_ARGS, forget_flag_widgets
from pages.parts.quality_form import QUALITY_KEYS, load_quality_into_form, quality_mapping
from pages.parts.topology_editor import TOPOLOGY_DEFAULTS, load_topology_into_form, topology_mapping
from pages.parts.vllm_carry import CARRIED

# One per form instance: the same submission arriving twice queues one run.  It changes
# only when the user deliberately starts a new form (a preset, an upload, a duplicated run,
# "queue another"), never as a side effect of a submission: a second click's rerun, which
# may arrive after the first one has queued, then carries the same key.
IDEMPOTENCY_KEY = "build.idempotency_key"
QUEUED_RUN = "build.queued_run"  # (form instance key, run id) once that instance is queued
LOADED_FROM = "build.loaded_from"  # "quick", "preset:<key>", "run:<id>" or "file:<upload id>"

# Streamlit drops a widget's state when its page is not shown; these keys are copied aside
# at the end of every run and restored on the way back, so the draft survives navigation.
FORM_KEYS = ("b.name", "b.engine", "b.version", "b.vllm_version", "b.model", "b.gpu_type", "b.gpu_custom",
             "b.gpu_count",
             "b.scenarios", "b.custom_on", "b.custom_isl", "b.custom_osl", "b.concurrency", "b.prompts", "b.warmup",
             "b.repeats", "b.fresh_launch", "b.dataset", "b.seed", "b.range_ratio", "b.rate", "b.backend",
             "b.tokenize", "b.chat", "b.thinking", "b.stop_eos", "b.tags", *TOPOLOGY_DEFAULTS, *QUALITY_KEYS)


def reset_idempotency_key() -> None:
    """Start a new form instance: the next submission queues a new run."""
    st.session_state[IDEMPOTENCY_KEY] = uuid.uuid4().hex


def submission_key(user: str) -> str:
    """The key this form instance submits under: per user and per instance, so two people
    submitting the same plan at once get a run each, and one person's repeats get one."""
    return f"build:{user}:{st.session_state[IDEMPOTENCY_KEY]}"


def queued_run() -> int | None:
    """The run this form instance has already queued, if it has."""
    entry = st.session_state.get(QUEUED_RUN)
    if entry is not None and entry[0] == st.session_state.get(IDEMPOTENCY_KEY):
        return int(entry[1])
    return None


def remember_queued(run_id: int) -> None:
    st.session_state[QUEUED_RUN] = (st.session_state[IDEMPOTENCY_KEY], run_id)


def _load_benchmark_into_form(plan: RunPlan) -> None:
    ss = st.session_state
    bench = plan.benchmark
    ss["b.scenarios"] = [s.name for s in bench.scenarios if s.name in SCENARIO_PRESETS]
    custom = [s for s in bench.scenarios if s.name not in SCENARIO_PRESETS]
    ss["b.custom_on"] = bool(custom)
    if custom:
        ss["b.custom_isl"], ss["b.custom_osl"] = custom[0].input_len, custom[0].output_len
    ss["b.concurrency"] = ", ".join(str(c) for c in bench.concurrency)
    ss["b.prompts"] = str(bench.num_prompts)
    ss["b.warmup"] = str(bench.warmup)
    ss["b.repeats"] = bench.repeats
    ss["b.fresh_launch"] = bench.fresh_launch_per_repeat
    ss["b.dataset"] = bench.dataset
    ss["b.seed"] = bench.seed
    ss["b.range_ratio"] = bench.random_range_ratio
    ss["b.rate"] = str(bench.request_rate)
    ss["b.backend"] = bench.backend
    ss["b.tokenize"] = bench.tokenize_prompt  # no widget: kept as loaded, applied with the sglang backend
    ss["b.chat"] = bench.apply_chat_template
    ss["b.thinking"] = bench.thinking_mode
    ss["b.stop_eos"] = not bench.ignore_eos


# The SGLang version the registered runners report (the newest), set by the build page: a
# preset or the quick demo is pinned to it rather than to the presets' own version, so the
# form's default run is one the host's runner claims (domain/plan/claimability.py).
HOST_VERSION = "b.host_version"


def _on_host_version(plan: RunPlan, origin: str) -> RunPlan:
    """A preset's plan re-pinned to the host's SGLang, its flags translated by the drift table.
    An emulated plan runs on any runner and the emulator speaks only the shipped versions:
    on a host whose version benchdeck ships no schema for, it keeps the presets' version."""
    host = st.session_state.get(HOST_VERSION)
    if not host or plan.sglang_version != PRESET_SGLANG_VERSION or host == plan.sglang_version:
        return plan
    if plan.emulated and host not in known_versions():
        return plan
    if origin != "quick" and not origin.startswith("preset:"):
        return plan
    args = retarget(plan.server_args, PRESET_SGLANG_VERSION, host).args
    return plan.model_copy(update={"sglang_version": host, "server_args": args})


def load_plan_into_form(plan: RunPlan, origin: str) -> None:
    """Put a plan's values into the widgets' state (used by presets, duplicates, uploads)."""
    ss = st.session_state
    plan = _on_host_version(plan, origin)
    ss["b.name"] = plan.name
    ss["b.engine"] = plan.engine_label  # the form offers the engine as one choice
    ss["b.version"] = plan.sglang_version or PRESET_SGLANG_VERSION
    ss["b.vllm_version"] = plan.vllm_version or newest_vllm_version()
    ss["b.model"] = plan.model
    ss["b.gpu_type"] = plan.gpu.type if plan.gpu.type in GPUS else "custom"
    ss["b.gpu_custom"] = plan.gpu.type if plan.gpu.type not in GPUS else ""
    ss["b.gpu_count"] = plan.gpu.count
    # A plan's flags are one engine's: the other engine's store starts empty.
    ss[SERVER_ARGS] = {} if plan.is_vllm else dict(plan.server_args)
    ss[VLLM_ARGS] = dict(plan.server_args) if plan.is_vllm else {}
    ss.pop(CARRIED, None)  # the last carry's report was about the previous form
    _load_benchmark_into_form(plan)
    load_quality_into_form(plan)
    ss["b.tags"] = ", ".join(plan.tags)
    load_topology_into_form(plan.topology)
    ss[LOADED_FROM] = origin
    forget_flag_widgets()
    reset_idempotency_key()


def keep_draft() -> None:
    for key in FORM_KEYS:
        if key in st.session_state:
            st.session_state[f"keep.{key}"] = st.session_state[key]


def _restore_draft() -> None:
    for key in FORM_KEYS:
        if key not in st.session_state and f"keep.{key}" in st.session_state:
            st.session_state[key] = st.session_state[f"keep.{key}"]


def _load_from_run(from_run: str) -> None:
    """``?from_run=<id>``: the run's plan under the name ``<name>-copy`` (nothing if there is
    no such run, or the DB is busy)."""
    try:
        run = store().get_run(int(from_run))
    except (ValueError, DbBusy):
        run = None
    if run is not None:
        load_plan_into_form(RunPlan.model_validate_json(run.plan), f"run:{from_run}")
        suffix = "-copy"  # the copy's name stays within the limit however long the original's is
        st.session_state["b.name"] = run.name[:MAX_NAME_CHARS - len(suffix)] + suffix


def init_state() -> None:
    """The draft back from a page switch, the quick demo on a first visit, and a run to
    duplicate when the URL names one."""
    _restore_draft()
    if SERVER_ARGS not in st.session_state:
        load_plan_into_form(quick_demo_plan(), "quick")
    st.session_state.setdefault(VLLM_ARGS, {})  # a draft kept from before vLLM plans existed
    st.session_state.setdefault("b.vllm_version", newest_vllm_version())
    from_run = st.query_params.get("from_run")
    if from_run and st.session_state.get(LOADED_FROM) != f"run:{from_run}":
        _load_from_run(from_run)
        variant.request_focus()  # a variant changes a flag or two: the first flag field has the cursor
        # Loaded once: a preset or an upload chosen afterwards must not be overwritten by
        # the link's parameter on the next rerun.
        del st.query_params["from_run"]


def _scenarios() -> list[dict[str, Any]]:
    ss = st.session_state
    scenarios = [SCENARIO_PRESETS[k].model_dump() for k in ss["b.scenarios"]]
    if ss.get("b.custom_on"):
        scenarios.append({"name": "custom", "input_len": int(ss["b.custom_isl"]),
                          "output_len": int(ss["b.custom_osl"])})
    return scenarios


def vllm_engine() -> bool:
    """Whether the form's engine is vLLM (real or emulated)."""
    return _engine_fields().get("engine") == "vllm"


def _engine_fields() -> dict[str, Any]:
    """The form's one engine choice (``vllm-emulator``) as the plan's family and ``emulated``."""
    choice = st.session_state.get("b.engine")
    split = split_label(choice) if isinstance(choice, str) else None
    return {"engine": choice} if split is None else {"engine": split[0], "emulated": split[1]}


def _request_mapping() -> dict[str, Any]:
    """How requests are sent: the endpoint, and what follows from it (an exact ISL only on
    ``/generate``; chat requests always go through the server's chat template).  A vLLM
    plan names no backend: the plan gives it bench_serving's ``vllm`` one, without
    ``--tokenize-prompt`` (domain/plan/run_plan.py)."""
    ss = st.session_state
    backend = ss.get("b.backend", "sglang")
    mapping = {
        "backend": backend, "tokenize_prompt": backend == "sglang" and bool(ss.get("b.tokenize", True)),
        "apply_chat_template": bool(ss["b.chat"]) or backend == CHAT_BACKEND, "thinking_mode": ss["b.thinking"],
        "ignore_eos": not ss.get("b.stop_eos", False),
    }
    if vllm_engine():
        del mapping["backend"], mapping["tokenize_prompt"]
        mapping["apply_chat_template"] = bool(ss["b.chat"])
    return mapping


def _engine_mapping(lang: str) -> dict[str, Any]:
    """The engine, its version and its flags; a vLLM plan runs one aggregated server."""
    ss = st.session_state
    if vllm_engine():
        return {**_engine_fields(), "vllm_version": ss["b.vllm_version"], "topology": {"kind": "aggregated"},
                "server_args": dict(ss[VLLM_ARGS])}
    return {**_engine_fields(), "sglang_version": ss["b.version"], "topology": topology_mapping(lang)[0],
            "server_args": dict(ss[SERVER_ARGS])}


def _benchmark_mapping(scenarios: list[dict[str, Any]]) -> dict[str, Any]:
    ss = st.session_state
    return {
        "scenarios": scenarios, "concurrency": concurrency_list(ss["b.concurrency"]),
        "num_prompts": count_or_text(ss["b.prompts"]), "warmup": count_or_text(ss["b.warmup"]),
        "repeats": int(ss["b.repeats"]), "fresh_launch_per_repeat": bool(ss.get("b.fresh_launch", False)),
        "dataset": ss["b.dataset"], "seed": int(ss["b.seed"]),
        "random_range_ratio": float(ss["b.range_ratio"]), "request_rate": rate_or_text(ss["b.rate"]),
        **_request_mapping(),
    }


def assembled_mapping(lang: str) -> dict[str, Any]:
    """The form as the mapping a plan is validated from (the texts read as numbers where
    they spell one; the validation names whatever is still wrong)."""
    ss = st.session_state
    scenarios = _scenarios()  # read first: of several unreadable entries, the scenario is the one named
    gpu_type = ss["b.gpu_custom"].strip() if ss["b.gpu_type"] == "custom" else ss["b.gpu_type"]
    return {
        "name": ss["b.name"], **_engine_mapping(lang), "model": ss["b.model"],
        "gpu": {"type": gpu_type, "count": int(ss["b.gpu_count"])},
        "benchmark": _benchmark_mapping(scenarios), **quality_mapping(),
        "tags": [x.strip() for x in ss.get("b.tags", "").split(",") if x.strip()],
    }
