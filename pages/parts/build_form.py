"""The Build page's form state: its session-state keys, filling it from a plan (a preset,
a duplicated run through ``?from_run=<id>``, an uploaded YAML), keeping the draft across
page switches, and reading it back as the mapping a plan is validated from."""

from __future__ import annotations

import uuid
from typing import Any

import streamlit as st

from db import DbBusy
from domain.plan.form_input import concurrency_list, count_or_text, rate_or_text
from domain.plan.presets import GPUS, PRESET_SGLANG_VERSION, quick_demo_plan
from domain.plan.run_plan import SCENARIO_PRESETS, RunPlan
from pages.parts.common import store
from pages.parts.flag_widgets import SERVER_ARGS, forget_flag_widgets
from pages.parts.topology_editor import TOPOLOGY_DEFAULTS, load_topology_into_form, topology_mapping

# One per form instance: the same submission arriving twice queues one run.
IDEMPOTENCY_KEY = "build.idempotency_key"
LOADED_FROM = "build.loaded_from"  # "quick", "preset:<key>", "run:<id>" or "file:<upload id>"

# Streamlit drops a widget's state when its page is not shown; these keys are copied aside
# at the end of every run and restored on the way back, so the draft survives navigation.
FORM_KEYS = ("b.name", "b.engine", "b.version", "b.model", "b.gpu_type", "b.gpu_custom", "b.gpu_count",
             "b.scenarios", "b.custom_on", "b.custom_isl", "b.custom_osl", "b.concurrency", "b.prompts", "b.warmup",
             "b.repeats", "b.dataset", "b.seed", "b.range_ratio", "b.rate", "b.chat", "b.thinking", "b.tags",
             *TOPOLOGY_DEFAULTS)


def reset_idempotency_key() -> None:
    st.session_state[IDEMPOTENCY_KEY] = uuid.uuid4().hex


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
    ss["b.dataset"] = bench.dataset
    ss["b.seed"] = bench.seed
    ss["b.range_ratio"] = bench.random_range_ratio
    ss["b.rate"] = str(bench.request_rate)
    ss["b.chat"] = bench.apply_chat_template
    ss["b.thinking"] = bench.thinking_mode


def load_plan_into_form(plan: RunPlan, origin: str) -> None:
    """Put a plan's values into the widgets' state (used by presets, duplicates, uploads)."""
    ss = st.session_state
    ss["b.name"] = plan.name
    ss["b.engine"] = plan.engine
    ss["b.version"] = plan.sglang_version or PRESET_SGLANG_VERSION
    ss["b.model"] = plan.model
    ss["b.gpu_type"] = plan.gpu.type if plan.gpu.type in GPUS else "custom"
    ss["b.gpu_custom"] = plan.gpu.type if plan.gpu.type not in GPUS else ""
    ss["b.gpu_count"] = plan.gpu.count
    ss[SERVER_ARGS] = dict(plan.server_args)
    _load_benchmark_into_form(plan)
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
        st.session_state["b.name"] = f"{run.name}-copy"


def init_state() -> None:
    """The draft back from a page switch, the quick demo on a first visit, and a run to
    duplicate when the URL names one."""
    _restore_draft()
    if SERVER_ARGS not in st.session_state:
        load_plan_into_form(quick_demo_plan(), "quick")
    from_run = st.query_params.get("from_run")
    if from_run and st.session_state.get(LOADED_FROM) != f"run:{from_run}":
        _load_from_run(from_run)
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


def _benchmark_mapping(scenarios: list[dict[str, Any]]) -> dict[str, Any]:
    ss = st.session_state
    return {
        "scenarios": scenarios, "concurrency": concurrency_list(ss["b.concurrency"]),
        "num_prompts": count_or_text(ss["b.prompts"]), "warmup": count_or_text(ss["b.warmup"]),
        "repeats": int(ss["b.repeats"]), "dataset": ss["b.dataset"], "seed": int(ss["b.seed"]),
        "random_range_ratio": float(ss["b.range_ratio"]), "request_rate": rate_or_text(ss["b.rate"]),
        "apply_chat_template": bool(ss["b.chat"]), "thinking_mode": ss["b.thinking"],
    }


def assembled_mapping(lang: str) -> dict[str, Any]:
    """The form as the mapping a plan is validated from (the texts read as numbers where
    they spell one; the validation names whatever is still wrong)."""
    ss = st.session_state
    scenarios = _scenarios()  # read first: of several unreadable entries, the scenario is the one named
    gpu_type = ss["b.gpu_custom"].strip() if ss["b.gpu_type"] == "custom" else ss["b.gpu_type"]
    return {
        "name": ss["b.name"], "engine": ss["b.engine"], "sglang_version": ss["b.version"], "model": ss["b.model"],
        "gpu": {"type": gpu_type, "count": int(ss["b.gpu_count"])},
        "topology": topology_mapping(lang)[0],
        "server_args": dict(ss[SERVER_ARGS]),
        "benchmark": _benchmark_mapping(scenarios),
        "tags": [x.strip() for x in ss.get("b.tags", "").split(",") if x.strip()],
    }
