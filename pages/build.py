"""Build and queue: start from a preset, a previous run or a plan YAML; turn the seed's
levers; see validation, drift translations, rule risk, memory fit and the exact command
update as you edit; submit through a form (idempotent) and land on the run.

Widgets are live (outside the form) so that checks follow every edit; the submission
itself is the form at the bottom.  Flag values live in ``server_args`` in session state,
not in widget state, so advanced flags keep their values while hidden by the search.
"""

from __future__ import annotations

import re
import shlex
import uuid
from typing import Any, get_args

import streamlit as st
import yaml
from pydantic import ValidationError

from db import DbBusy
from domain.core.access import Action, PermissionDenied
from domain.core.i18n import t
from domain.core.settings import get_settings
from domain.flags.drift import apply_translations
from domain.flags.levers import lever_notes, parallelism_glossary
from domain.flags.policy import DEFAULT_POLICY_PATH
from domain.flags.schema import FlagSpec, Schema, known_versions, load_schema, version_key
from domain.plan.checks import check_plan, role_checks, schema_version_for
from domain.plan.command import (
    APP_PYTHON_PLACEHOLDER,
    LOOPBACK,
    PYTHON_PLACEHOLDER,
    command_preview,
    router_argv,
    worker_argv,
)
from domain.plan.estimate import plan_seconds
from domain.plan.plan_io import (
    PlanError,
    PlanProblem,
    dump_plan,
    load_plan,
    plan_from_mapping,
    problems_from_validation,
)
from domain.plan.presets import CONFIG_PRESETS, GPUS, PRESET_SGLANG_VERSION, config_preset, preset_plan, quick_demo_plan
from domain.plan.quotas import QuotaExceeded
from domain.plan.run_plan import DEFAULT_CONCURRENCY, SCENARIO_PRESETS, RunPlan
from domain.plan.topology import MAX_SERVERS_PER_ROLE, Kind, Policy, ServerSlot, Topology, layout, layout_problems
from pages.parts.auth import can, current_actor
from pages.parts.common import (
    cached_runners,
    clear_run_caches,
    current_language,
    show_busy,
    show_denied,
    store,
)

lang = current_language()
settings = get_settings()
ARGS = "build.server_args"
KEY = "build.idempotency_key"
LOADED = "build.loaded_from"

# The topology editor's state: b.topo.<field>, and b.topo.<role>.<field> per role.
KINDS: tuple[Kind, ...] = get_args(Kind)
POLICIES: tuple[Policy, ...] = get_args(Policy)
ROLES: dict[str, tuple[str, ...]] = {"aggregated": (), "router": ("replica",), "pd": ("prefill", "decode")}
GROUP_FIELD = {"replica": "replicas", "prefill": "prefill", "decode": "decode"}
PD_ROLES = ("prefill", "decode")
BACKEND_FLAG = "disaggregation-transfer-backend"
IB_FLAG = "disaggregation-ib-device"
MAX_ROLE_FLAGS_CHARS = 10_000
ROUTER_PYTHON_PLACEHOLDER = "<router-python>"
_ROLE_DEFAULTS: dict[str, Any] = {"count": 1, "gpus": 1, "gpu_ids": "", "backend": None, "ib": "", "other": ""}
TOPOLOGY_DEFAULTS: dict[str, Any] = {
    "b.topo.kind": "aggregated", "b.topo.policy": "cache_aware", "b.topo.decode_policy": "round_robin",
    "b.topo.max_conc": "",
    **{f"b.topo.{role}.{name}": value for role in GROUP_FIELD for name, value in _ROLE_DEFAULTS.items()},
    "b.topo.replica.count": 2,
}


# --- state --------------------------------------------------------------------------
def _reset_key() -> None:
    st.session_state[KEY] = uuid.uuid4().hex


def _load_plan_into_form(plan: RunPlan, origin: str) -> None:
    """Put a plan's values into the widgets' state (used by presets, duplicates, uploads)."""
    ss = st.session_state
    ss["b.name"] = plan.name
    ss["b.engine"] = plan.engine
    ss["b.version"] = plan.sglang_version or PRESET_SGLANG_VERSION
    ss["b.model"] = plan.model
    ss["b.gpu_type"] = plan.gpu.type if plan.gpu.type in GPUS else "custom"
    ss["b.gpu_custom"] = plan.gpu.type if plan.gpu.type not in GPUS else ""
    ss["b.gpu_count"] = plan.gpu.count
    ss[ARGS] = dict(plan.server_args)
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
    ss["b.tags"] = ", ".join(plan.tags)
    _load_topology_into_form(plan.topology)
    ss[LOADED] = origin
    for key in [k for k in ss if str(k).startswith("b.flag.")]:
        del ss[key]
    _reset_key()


def _flags_text(args: dict[str, Any]) -> str:
    return yaml.safe_dump(args, sort_keys=False, allow_unicode=True, default_flow_style=False).strip() if args else ""


def _load_topology_into_form(topology: Topology) -> None:
    """Every topology widget from the plan (defaults for roles it does not have), so
    nothing of an earlier draft leaks into a loaded plan."""
    ss = st.session_state
    for key, value in TOPOLOGY_DEFAULTS.items():
        ss[key] = value
    ss["b.topo.kind"] = topology.kind
    ss["b.topo.policy"] = topology.policy
    ss["b.topo.decode_policy"] = topology.decode_policy
    cap = topology.router_max_concurrent_requests
    ss["b.topo.max_conc"] = "" if cap is None else str(cap)
    for role, group in topology.groups():
        prefix = f"b.topo.{role}."
        ss[prefix + "count"], ss[prefix + "gpus"] = group.count, group.gpus_per_server
        ss[prefix + "gpu_ids"] = ";".join(",".join(map(str, ids)) for ids in group.gpu_ids or [])
        args: dict[str, Any] = dict(group.server_args)
        if role in PD_ROLES:
            if isinstance(args.get(BACKEND_FLAG), str):
                ss[prefix + "backend"] = args.pop(BACKEND_FLAG)
            if isinstance(args.get(IB_FLAG), str):
                ss[prefix + "ib"] = args.pop(IB_FLAG)
        ss[prefix + "other"] = _flags_text(args)


# Streamlit drops a widget's state when its page is not shown; these keys are copied aside
# at the end of every run and restored on the way back, so the draft survives navigation.
FORM_KEYS = ("b.name", "b.engine", "b.version", "b.model", "b.gpu_type", "b.gpu_custom", "b.gpu_count",
             "b.scenarios", "b.custom_on", "b.custom_isl", "b.custom_osl", "b.concurrency", "b.prompts", "b.warmup",
             "b.repeats", "b.dataset", "b.seed", "b.range_ratio", "b.rate", "b.chat", "b.thinking", "b.tags",
             *TOPOLOGY_DEFAULTS)


def _keep_draft() -> None:
    for key in FORM_KEYS:
        if key in st.session_state:
            st.session_state[f"keep.{key}"] = st.session_state[key]


def _restore_draft() -> None:
    for key in FORM_KEYS:
        if key not in st.session_state and f"keep.{key}" in st.session_state:
            st.session_state[key] = st.session_state[f"keep.{key}"]


def _init_state() -> None:
    _restore_draft()
    if ARGS not in st.session_state:
        _load_plan_into_form(quick_demo_plan(), "quick")
    from_run = st.query_params.get("from_run")
    if from_run and st.session_state.get(LOADED) != f"run:{from_run}":
        try:
            run = store().get_run(int(from_run))
        except (ValueError, DbBusy):
            run = None
        if run is not None:
            _load_plan_into_form(RunPlan.model_validate_json(run["plan"]), f"run:{from_run}")
            st.session_state["b.name"] = f"{run['name']}-copy"
        # Loaded once: a preset or an upload chosen afterwards must not be overwritten by
        # the link's parameter on the next rerun.
        del st.query_params["from_run"]


def _adopt_choice(widget_key: str, key: str) -> None:
    st.session_state[key] = st.session_state[widget_key]


def _localised_choice(widget: Any, label: str, options: list[Any] | tuple[Any, ...], key: str, **kwargs: Any) -> Any:
    """A radio or selectbox whose option labels follow the language.  Streamlit keeps such
    a widget's value as its label text, so after a language switch the old label matches
    nothing and the widget falls back to its first option (a PD plan would silently turn
    aggregated).  The widget gets a key per language; the value itself lives under ``key``."""
    widget_key = f"{key}@{lang}"
    if st.session_state.get(widget_key) != st.session_state[key]:
        st.session_state[widget_key] = st.session_state[key]
    return widget(label, options, key=widget_key, on_change=_adopt_choice, args=(widget_key, key), **kwargs)


# --- start from ----------------------------------------------------------------------
def start_from_section() -> None:
    st.subheader(t("build.start_from", lang))
    c1, c2, c3 = st.columns([2, 1, 2])
    options = [p.key for p in CONFIG_PRESETS]
    chosen = c1.selectbox(t("build.preset", lang), options, format_func=lambda k: config_preset(k).name[lang])
    c1.caption(config_preset(chosen).description[lang])
    if c2.button(t("build.load_preset", lang), width="stretch"):
        _load_plan_into_form(preset_plan(chosen), f"preset:{chosen}")
        st.rerun()
    if c2.button(t("build.quick_preset", lang), width="stretch", type="primary"):
        _load_plan_into_form(quick_demo_plan(), "quick")
        st.rerun()
    uploaded = c3.file_uploader(t("build.upload", lang), type=["yaml", "yml"])
    if uploaded is not None and st.session_state.get(LOADED) != f"file:{uploaded.file_id}":
        try:
            plan = load_plan(uploaded.getvalue().decode("utf-8", errors="replace"), max_bytes=settings.max_plan_bytes)
        except PlanError as exc:
            c3.error(t("build.upload_bad", lang) + "\n\n" + "\n".join(f"- {p}" for p in exc.problems))
        else:
            _load_plan_into_form(plan, f"file:{uploaded.file_id}")
            st.rerun()
    origin = st.session_state.get(LOADED, "")
    if origin.startswith("run:"):
        st.info(t("build.duplicated_from", lang, run_id=origin[4:]), icon=":material/content_copy:")


# --- flags ---------------------------------------------------------------------------
def _typed(text: str) -> Any:
    """A text box's value as the scalar it spells (8192 → int, 0.85 → float), else the text;
    the validator then checks it against the flag's type."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, int | float) and not isinstance(value, bool) else text


def _set_flag(name: str, textual: bool = False) -> None:
    value = st.session_state.get(f"b.flag.{name}")
    if textual and isinstance(value, str):
        value = _typed(value.strip())
    args: dict[str, Any] = st.session_state[ARGS]
    if value is None or value == "" or value is False:
        args.pop(name, None)
    else:
        args[name] = value


def _flag_widget(spec: FlagSpec, name: str, container: Any, *, help_text: str | None = None) -> None:
    """A widget typed from the schema: switch, choice, number or text; empty = SGLang default."""
    key = f"b.flag.{name}"
    args: dict[str, Any] = st.session_state[ARGS]
    if key not in st.session_state:
        st.session_state[key] = args.get(name, False if spec.takes_no_value else None)
    label = f"--{name}" + (" ⚠️ " + t("build.deprecated", lang) if spec.deprecated else "")
    default_note = t("build.default", lang, default=spec.default)
    help_text = "\n\n".join(x for x in (help_text, spec.help, default_note) if x)
    on_change = _set_flag
    kwargs: dict[str, Any] = {"args": (name,), "key": key, "help": help_text}
    if spec.takes_no_value:
        container.toggle(label, on_change=on_change, **kwargs)
    elif spec.choices:
        container.selectbox(label, [None, *spec.choices], on_change=on_change, placeholder=t("build.unset", lang),
                            format_func=lambda v: t("build.unset", lang) if v is None else str(v), **kwargs)
    elif spec.type in ("int", "float") and not spec.takes_list:
        step: float | int = 1 if spec.type == "int" else 0.01
        if st.session_state[key] is not None and spec.type == "int":
            st.session_state[key] = int(st.session_state[key])
        if st.session_state[key] is not None and spec.type == "float":
            st.session_state[key] = float(st.session_state[key])
        container.number_input(label, step=step, on_change=on_change, placeholder=t("build.unset", lang),
                               format="%d" if spec.type == "int" else "%.3f", **kwargs)
    else:
        current = st.session_state[key]
        st.session_state[key] = "" if current is None else (
            " ".join(map(str, current)) if isinstance(current, list) else str(current))
        kwargs["args"] = (name, True)
        container.text_input(label, on_change=on_change, placeholder=t("build.unset", lang), **kwargs)


def _spelling(schema: Schema, names: tuple[str, ...]) -> str | None:
    """The spelling of a lever that this version has (e.g. cuda-graph-max-bs vs …-decode)."""
    return next((n for n in names if schema.lookup(n) is not None), None)


def levers_section(schema: Schema) -> None:
    st.subheader(t("build.levers", lang))
    st.caption(t("build.levers_help", lang))
    columns = st.columns(2)
    for index, note in enumerate(lever_notes()):
        name = _spelling(schema, (note.flag, *note.also))
        if name is None:
            continue
        spec = schema.lookup(name)
        assert spec is not None  # noqa: S101 - found just above
        box = columns[index % 2].container(border=True)
        _flag_widget(spec, name, box)
        box.caption(f"**{t('build.why', lang)}** {note.why[lang]}  \n"
                    f"**{t('build.caution', lang)}** {note.caution[lang]}")
    st.markdown(f"**{t('build.parallelism', lang)}**")
    thirds = st.columns(3)
    for index, entry in enumerate(parallelism_glossary()):
        spec = schema.lookup(entry.flag)
        if spec is None:
            continue
        box = thirds[index % 3].container(border=True)
        _flag_widget(spec, entry.flag, box)
        box.caption(f"**{entry.name[lang]}** — {entry.splits[lang]}")


def advanced_section(schema: Schema) -> None:
    with st.expander(t("build.advanced", lang), expanded=bool(st.session_state.get("b.search"))):
        query = st.text_input(t("build.search", lang), key="b.search", placeholder="e.g. kv-cache-dtype, radix")
        covered = {n for note in lever_notes() for n in (note.flag, *note.also)} | {
            e.flag for e in parallelism_glossary()}
        args: dict[str, Any] = st.session_state[ARGS]
        shown = [s for s in schema.specs if not s.suppressed and s.primary not in covered
                 and (s.primary in args or (query and (query.lower() in s.primary or query.lower() in s.help.lower())))]
        st.caption(t("build.advanced_count", lang, shown=len(shown), total=len(schema.specs)))
        for spec in shown[:40]:
            _flag_widget(spec, spec.primary, st)


# --- benchmark plan ------------------------------------------------------------------
def benchmark_section() -> None:
    st.subheader(t("build.benchmark", lang))
    c1, c2 = st.columns(2)
    c1.multiselect(t("build.scenarios", lang), list(SCENARIO_PRESETS), key="b.scenarios",
                   format_func=lambda k: f"{k} ({SCENARIO_PRESETS[k].input_len}/{SCENARIO_PRESETS[k].output_len})")
    custom = c1.toggle(t("build.custom_scenario", lang), key="b.custom_on")
    if custom:
        cc1, cc2 = c1.columns(2)
        cc1.number_input("ISL", min_value=1, max_value=1_000_000, value=2000, key="b.custom_isl")
        cc2.number_input("OSL", min_value=1, max_value=1_000_000, value=500, key="b.custom_osl")
    c2.text_input(t("build.concurrency", lang), key="b.concurrency",
                  help=t("build.concurrency_help", lang, default=", ".join(map(str, DEFAULT_CONCURRENCY))))
    cc1, cc2, cc3 = c2.columns(3)
    cc1.text_input(t("build.prompts", lang), key="b.prompts", help=t("build.count_help", lang))
    cc2.text_input(t("build.warmup", lang), key="b.warmup", help=t("build.count_help", lang))
    cc3.number_input(t("build.repeats", lang), min_value=1, max_value=20, key="b.repeats")
    d1, d2, d3, d4 = st.columns(4)
    d1.selectbox(t("build.dataset", lang), ["random-ids"], key="b.dataset", help=t("build.dataset_help", lang))
    d2.number_input(t("build.seed", lang), min_value=0, max_value=2**31 - 1, key="b.seed")
    d3.number_input(t("build.range_ratio", lang), min_value=0.0, max_value=1.0, step=0.05, key="b.range_ratio",
                    help=t("build.range_ratio_help", lang))
    d4.text_input(t("build.rate", lang), key="b.rate", help=t("build.rate_help", lang))
    e1, e2 = st.columns(2)
    e1.toggle(t("build.chat", lang), key="b.chat", help=t("build.chat_help", lang))
    e2.selectbox(t("build.thinking", lang), ["n/a", "off", "on"], key="b.thinking")


# --- topology ------------------------------------------------------------------------
def _role_name(role: str) -> str:
    return t(f"build.topo.role_{role}", lang)


def _sweep_max() -> int | None:
    values = [v for v in _concurrency(str(st.session_state.get("b.concurrency", ""))) if isinstance(v, int)]
    return max(values) if values else None


def _router_fields(kind: str) -> None:
    pd = kind == "pd"
    columns = st.columns(3)
    policy_help = t("build.topo.policy_help", lang)
    columns[0].selectbox(t("build.topo.prefill_policy" if pd else "build.topo.policy", lang), POLICIES,
                         key="b.topo.policy", help=policy_help)
    if pd:
        columns[1].selectbox(t("build.topo.decode_policy", lang), POLICIES, key="b.topo.decode_policy",
                             help=policy_help)
    sweep = _sweep_max()
    columns[2].text_input(t("build.topo.max_conc", lang), key="b.topo.max_conc",
                          placeholder=t("build.topo.max_conc_placeholder", lang, sweep=sweep or "?"),
                          help=t("build.topo.max_conc_help", lang))


def _role_fields(role: str, box: Any, schema: Schema) -> None:
    prefix = f"b.topo.{role}."
    box.markdown(f"**{t(f'build.topo.group_{role}', lang)}**")
    c1, c2 = box.columns(2)
    c1.number_input(t("build.topo.count", lang), min_value=1, max_value=MAX_SERVERS_PER_ROLE, step=1,
                    key=prefix + "count")
    c2.number_input(t("build.topo.gpus_per_server", lang), min_value=1, max_value=64, step=1, key=prefix + "gpus")
    if role in PD_ROLES:
        spec = schema.lookup(BACKEND_FLAG)
        d1, d2 = box.columns(2)
        if spec is not None:
            chosen = st.session_state[prefix + "backend"]
            options: list[Any] = [None, *(spec.choices or ())]
            if chosen is not None and chosen not in options:
                options.append(chosen)  # another version's value: shown, and the checks say why it is wrong
            unset = t("build.topo.backend_default", lang, default=spec.default)
            d1.selectbox(f"--{BACKEND_FLAG}", options, key=prefix + "backend", help=t("build.topo.backend_help", lang),
                         placeholder=unset, format_func=lambda v: unset if v is None else str(v))
        d2.text_input(f"--{IB_FLAG}", key=prefix + "ib", placeholder=t("build.unset", lang),
                      help=t("build.topo.ib_help", lang))
    box.text_input(t("build.topo.gpu_ids", lang), key=prefix + "gpu_ids", placeholder="0,1;2,3",
                   help=t("build.topo.gpu_ids_help", lang))
    box.text_area(t("build.topo.other_flags", lang), key=prefix + "other", height=90,
                  placeholder="mem-fraction-static: 0.8\nchunked-prefill-size: 4096",
                  help=t("build.topo.other_flags_help", lang))


_GPU_LIST = re.compile(r"[0-9]{1,2}(?:,[0-9]{1,2})*")


def _parse_gpu_ids(text: str, role: str, count: int, gpus: int) -> tuple[list[list[int]] | None, list[str]]:
    """``"0,1;2,3"`` → [[0, 1], [2, 3]]; empty → None (packed in order)."""
    text = text.strip().replace(" ", "").rstrip(";")
    if not text:
        return None, []
    servers = text.split(";")
    if not all(_GPU_LIST.fullmatch(part) for part in servers):
        return None, [t("build.topo.bad_gpu_ids", lang, role=_role_name(role), value=text)]
    ids = [[int(x) for x in part.split(",")] for part in servers]
    if len(ids) != count:
        return None, [t("build.topo.gpu_ids_count", lang, role=_role_name(role), listed=len(ids), count=count)]
    for index, server in enumerate(ids):
        if len(server) != gpus:
            return None, [t("build.topo.gpu_ids_size", lang, role=_role_name(role), index=index, listed=len(server),
                            gpus=gpus)]
    return ids, []


def _flag_value_ok(value: object) -> bool:
    scalar = (bool, int, float, str)
    if isinstance(value, scalar):
        return True
    return isinstance(value, list) and all(isinstance(v, scalar) and not isinstance(v, bool) for v in value)


def _parse_role_flags(text: str, role: str) -> tuple[dict[str, Any], list[str]]:
    """The free-form "other flags" box: a YAML or JSON mapping, or the reasons it is not one."""
    name = _role_name(role)
    text = text.strip()
    if not text:
        return {}, []
    if len(text) > MAX_ROLE_FLAGS_CHARS:
        return {}, [t("build.topo.flags_too_long", lang, role=name, limit=MAX_ROLE_FLAGS_CHARS)]
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                return {}, [t("build.topo.flags_alias", lang, role=name)]
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        detail = str(getattr(exc, "problem", None) or exc).strip()
        if mark is not None:
            detail += f" (line {mark.line + 1}, column {mark.column + 1})"
        return {}, [t("build.topo.flags_bad_yaml", lang, role=name, detail=detail)]
    if data is None:
        return {}, []
    if not isinstance(data, dict):
        return {}, [t("build.topo.flags_not_mapping", lang, role=name)]
    problems = [t("build.topo.flags_bad_name", lang, role=name, flag=key) for key in data if not isinstance(key, str)]
    problems += [t("build.topo.flags_bad_value", lang, role=name, flag=key) for key, value in data.items()
                 if isinstance(key, str) and not _flag_value_ok(value)]
    return ({} if problems else dict(data)), problems


def _group_mapping(role: str) -> tuple[dict[str, Any], list[str]]:
    ss = st.session_state
    prefix = f"b.topo.{role}."
    count, gpus = int(ss[prefix + "count"]), int(ss[prefix + "gpus"])
    group: dict[str, Any] = {"count": count, "gpus_per_server": gpus}
    args: dict[str, Any] = {}
    if role in PD_ROLES:
        if ss[prefix + "backend"]:
            args[BACKEND_FLAG] = ss[prefix + "backend"]
        if str(ss[prefix + "ib"]).strip():
            args[IB_FLAG] = str(ss[prefix + "ib"]).strip()
    other, problems = _parse_role_flags(str(ss[prefix + "other"]), role)
    problems += [t("build.topo.flag_twice", lang, role=_role_name(role), flag=flag)
                 for flag in sorted(set(other) & set(args))]
    group["server_args"] = {**args, **other}
    ids, id_problems = _parse_gpu_ids(str(ss[prefix + "gpu_ids"]), role, count, gpus)
    if ids is not None:
        group["gpu_ids"] = ids
    return group, problems + id_problems


def topology_mapping() -> tuple[dict[str, Any], list[str]]:
    """The plan's ``topology`` from the editor, and what in the editor cannot be read
    (those parts are left out, so the rest can still be drawn; the plan is refused)."""
    ss = st.session_state
    for key, value in TOPOLOGY_DEFAULTS.items():
        if key not in ss:
            ss[key] = value
    kind = ss["b.topo.kind"]
    mapping: dict[str, Any] = {"kind": kind}
    problems: list[str] = []
    if kind == "aggregated":
        return mapping, problems
    mapping["policy"] = ss["b.topo.policy"]
    if kind == "pd":
        mapping["decode_policy"] = ss["b.topo.decode_policy"]
    cap = str(ss["b.topo.max_conc"]).strip()
    if re.fullmatch(r"[0-9]{1,7}", cap):
        mapping["router_max_concurrent_requests"] = int(cap)
    elif cap:
        problems.append(t("build.topo.bad_cap", lang, value=cap))
    for role in ROLES[kind]:
        group, role_problems = _group_mapping(role)
        mapping[GROUP_FIELD[role]] = group
        problems += role_problems
    return mapping, problems


def readable_problems(problems: list[PlanProblem]) -> list[str]:
    """pydantic's wording without its "Value error, " prefix, one line per reason."""
    lines = []
    for problem in problems:
        for part in problem.message.removeprefix("Value error, ").split("; "):
            lines.append(f"{problem.field}: {part}" if problem.field else part)
    return lines


def _dot_text(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _gpu_text(ids: tuple[int, ...]) -> str:
    if len(ids) > 2 and list(ids) == list(range(ids[0], ids[-1] + 1)):
        return f"GPU {ids[0]}–{ids[-1]}"
    return "GPU " + ",".join(map(str, ids))


_ROLE_COLOURS = {"server": ("#f4f6fa", "#7a869a"), "replica": ("#f4f6fa", "#7a869a"),
                 "prefill": ("#e4eefc", "#4a78c2"), "decode": ("#e3f4e6", "#3f9a55")}


def topology_dot(topology: Topology, slots: list[ServerSlot], bad: set[str], cap: int | None) -> str:
    """The topology as Graphviz DOT: client → router → servers, each with GPUs and ports."""
    lines = [
        "digraph topology {",
        '  rankdir=LR; bgcolor="transparent"; compound=true; nodesep=0.3; ranksep=0.55;',
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, margin="0.15,0.06"];',
        '  edge [color="#7a869a", fontname="Helvetica", fontsize=9, fontcolor="#555555"];',
        f'  client [label={_dot_text(t("build.topo.client", lang))}, shape=ellipse, fillcolor="#ffffff", '
        'color="#7a869a"];',
    ]
    front = "client"
    if topology.kind != "aggregated":
        if topology.kind == "pd":
            policy = f"--prefill-policy {topology.policy}\n--decode-policy {topology.decode_policy}"
        else:
            policy = f"--policy {topology.policy}"
        limit = cap if cap is not None else "?"
        label = f"router\n{policy}\n--max-concurrent-requests {limit}\nHTTP <port> · metrics <port>"
        lines.append(f'  router [label={_dot_text(label)}, fillcolor="#fff3d6", color="#c99a2e"];')
        lines.append("  client -> router;")
        front = "router"
    for role in dict.fromkeys(slot.role for slot in slots):
        members = [slot for slot in slots if slot.role == role]
        clustered = role != "server"
        if clustered:
            lines.append(f"  subgraph cluster_{role} {{")
            lines.append(f'    label={_dot_text(t(f"build.topo.group_{role}", lang))}; style="rounded,dashed"; '
                         'color="#9aa5b8"; fontname="Helvetica"; fontsize=10; fontcolor="#555555";')
        for slot in members:
            ports = "HTTP <port>" if role == "server" else "HTTP <port> · NCCL <port>"
            if role == "prefill":
                ports += "\nbootstrap <port>"
            fill, colour = _ROLE_COLOURS.get(role, _ROLE_COLOURS["server"])
            extra = ""
            if slot.name in bad:
                fill, colour, extra = "#fde2e1", "#d93025", ", penwidth=2"
            label = f"{slot.name}\n{_gpu_text(slot.gpu_ids)}\n{ports}"
            lines.append(f'    "{slot.name}" [label={_dot_text(label)}, fillcolor="{fill}", color="{colour}"{extra}];')
        if clustered:
            lines.append("  }")
        lines += [f'  {front} -> "{slot.name}";' for slot in members]
    prefill = [slot for slot in slots if slot.role == "prefill"]
    decode = [slot for slot in slots if slot.role == "decode"]
    if prefill and decode:
        backend = prefill[0].server_args.get(BACKEND_FLAG) or "mooncake"
        # One edge for the whole KV path, on the far side of the router's edges.
        lines.append(f'  "{prefill[-1].name}":e -> "{decode[0].name}":e [style=dashed, constraint=false, '
                     f'color="#4a78c2", fontcolor="#4a78c2", label={_dot_text(f"KV · {backend}")}];')
    lines.append("}")
    return "\n".join(lines)


def _flag_text(name: str, value: Any) -> str:
    if value is True:
        return f"--{name}"
    if isinstance(value, list):
        return f"--{name} " + " ".join(map(str, value))
    return f"--{name} {value}"


def _server_rows(slots: list[ServerSlot], base_args: dict[str, Any]) -> list[dict[str, str]]:
    rows = []
    for slot in slots:
        differ = [_flag_text(k, v) for k, v in slot.server_args.items() if k not in base_args or base_args[k] != v]
        rows.append({
            t("build.topo.col_server", lang): slot.name,
            t("build.topo.col_role", lang): _role_name(slot.role),
            t("build.topo.col_gpus", lang): ",".join(map(str, slot.gpu_ids)),
            t("build.topo.col_flags", lang): "  ".join(differ) or t("build.topo.no_diff", lang),
        })
    return rows


def topology_section(schema: Schema) -> tuple[dict[str, Any], list[str]]:
    """The editor, then the drawing; returns the plan's topology mapping and the editor's problems."""
    st.subheader(t("build.topology", lang))
    topology_mapping()  # fills the editor's defaults
    _localised_choice(st.radio, t("build.topo.kind", lang), KINDS, "b.topo.kind", horizontal=True,
                      format_func=lambda k: t(f"build.topo.kind_{k}", lang), help=t("build.topology_help", lang))
    kind = st.session_state["b.topo.kind"]
    st.caption(t(f"build.topo.why_{kind}", lang))
    if kind != "aggregated":
        _router_fields(kind)
        for column, role in zip(st.columns(len(ROLES[kind])), ROLES[kind], strict=True):
            _role_fields(role, column.container(border=True), schema)
    mapping, problems = topology_mapping()
    base_args: dict[str, Any] = dict(st.session_state[ARGS])
    gpu_count = int(st.session_state["b.gpu_count"])
    try:
        topology = Topology.model_validate(mapping)
    except ValidationError as exc:
        for line in problems + readable_problems(problems_from_validation(exc)):
            st.error(line, icon=":material/error:")
        return mapping, problems
    slots = layout(topology, base_args, gpu_count)
    layout_issues = layout_problems(topology, base_args, gpu_count)
    bad = {slot.name for slot in slots if any(issue.startswith(f"{slot.name}:") for issue in layout_issues)}
    cap = topology.router_max_concurrent_requests or _sweep_max()
    st.graphviz_chart(topology_dot(topology, slots, bad, cap))
    used = len({gpu for slot in slots for gpu in slot.gpu_ids})
    st.caption(t("build.topo.gpu_use", lang, used=used, total=gpu_count) + " " + t("build.topo.ports_note", lang))
    st.table(_server_rows(slots, base_args), hide_index=True)
    for line in problems + layout_issues:
        st.error(line, icon=":material/error:")
    if kind == "pd":
        backends = {role: (topology.groups()[i][1].server_args.get(BACKEND_FLAG) or "mooncake")
                    for i, role in enumerate(PD_ROLES)}
        if backends["prefill"] != backends["decode"]:
            st.warning(t("build.topo.backend_mismatch", lang, **backends), icon=":material/warning:")
    return mapping, problems


# --- assembling and checking -------------------------------------------------------------
def _count(text: str) -> int | str:
    text = text.strip()
    return int(text) if text.isdigit() else text


def _rate(text: str) -> float | str:
    text = text.strip()
    try:
        return "inf" if text == "inf" else float(text)
    except ValueError:
        return text


def _concurrency(text: str) -> list[Any]:
    parts = [p.strip() for p in text.replace("、", ",").split(",") if p.strip()]
    return [int(p) if p.isdigit() else p for p in parts]


def assembled_mapping() -> dict[str, Any]:
    ss = st.session_state
    scenarios = [SCENARIO_PRESETS[k].model_dump() for k in ss["b.scenarios"]]
    if ss.get("b.custom_on"):
        scenarios.append({"name": "custom", "input_len": int(ss["b.custom_isl"]),
                          "output_len": int(ss["b.custom_osl"])})
    gpu_type = ss["b.gpu_custom"].strip() if ss["b.gpu_type"] == "custom" else ss["b.gpu_type"]
    return {
        "name": ss["b.name"], "engine": ss["b.engine"], "sglang_version": ss["b.version"], "model": ss["b.model"],
        "gpu": {"type": gpu_type, "count": int(ss["b.gpu_count"])},
        "topology": topology_mapping()[0],
        "server_args": dict(ss[ARGS]),
        "benchmark": {
            "scenarios": scenarios, "concurrency": _concurrency(ss["b.concurrency"]),
            "num_prompts": _count(ss["b.prompts"]), "warmup": _count(ss["b.warmup"]), "repeats": int(ss["b.repeats"]),
            "dataset": ss["b.dataset"], "seed": int(ss["b.seed"]), "random_range_ratio": float(ss["b.range_ratio"]),
            "request_rate": _rate(ss["b.rate"]), "apply_chat_template": bool(ss["b.chat"]),
            "thinking_mode": ss["b.thinking"],
        },
        "tags": [x.strip() for x in ss.get("b.tags", "").split(",") if x.strip()],
    }


def _apply_translation(translation: Any) -> None:
    args = apply_translations(st.session_state[ARGS], [translation])
    st.session_state[ARGS] = args
    for key in [k for k in st.session_state if str(k).startswith("b.flag.")]:
        del st.session_state[key]


def live_checks(plan: RunPlan | None, problems: list[str], host_version: str | None) -> bool:
    """The live panel; True when the plan may be submitted."""
    st.subheader(t("build.checks", lang))
    if plan is None:
        st.error(t("build.plan_invalid", lang) + "\n\n" + "\n".join(f"- {p}" for p in problems))
        return False
    report = check_plan(plan, settings, lang, host_version)
    config = report.config
    assert config is not None  # noqa: S101 - check_plan always sets it
    for issue in config.flags.errors:
        st.error(issue.text(lang), icon=":material/error:")
    for issue in config.flags.warnings:
        st.warning(issue.text(lang), icon=":material/warning:")
    for i, translation in enumerate(config.flags.translations):
        st.button(t("build.apply_translation", lang, change=translation.text(lang)), key=f"b.tr.{i}",
                  on_click=_apply_translation, args=(translation,))
    roles = role_checks(plan, settings, host_version) if plan.topology.kind != "aggregated" else []
    for role, role_config in roles:
        for issue in role_config.flags.errors:
            st.error(f"**{_role_name(role)}** · {issue.text(lang)}", icon=":material/error:")
        for issue in role_config.flags.warnings:
            st.warning(f"**{_role_name(role)}** · {issue.text(lang)}", icon=":material/warning:")
    _risk_badges(config)
    fits: list[tuple[str | None, Any]] = [(None, config)] if not roles else list(roles)
    for who, checked in fits:
        if checked.memory is None:
            st.caption(t("build.no_memory_fit", lang))
            continue
        verdict = checked.memory.verdict
        box = st.success if verdict == "fits" else (st.warning if verdict == "too_small" else st.error)
        heading = "" if who is None else t("build.topo.role_memory", lang, role=_role_name(who)) + "\n\n"
        box(heading + checked.memory.text(lang), icon=":material/memory:")
    st.markdown(f"**{t('build.command', lang)}**")
    version = schema_version_for(plan, host_version)
    if plan.topology.kind == "aggregated":
        try:
            st.code(command_preview(plan, version), language="bash", wrap_lines=True)
        except ValueError as exc:
            st.caption(t("build.topo.no_command", lang, detail=str(exc)))
    else:
        topology_commands(plan, version)
    st.caption(t("build.command_note", lang))
    requests_total = plan.total_requests()
    minutes = plan_seconds(plan) / 60
    st.markdown(f"**{t('build.estimate', lang)}**: " + t("build.estimate_value", lang, minutes=f"{minutes:.0f}",
                                                           points=len(plan.points()), requests=requests_total))
    return report.ok


_PLACEHOLDER_TOKEN = re.compile(r"[A-Za-z0-9_./:=,\-]*<[a-z0-9\-]+>[A-Za-z0-9_./:=,\-]*")


def _shell(argv: list[str]) -> str:
    """A command line for reading: shell-quoted, except the <placeholders> filled in at launch."""
    return " ".join(arg if _PLACEHOLDER_TOKEN.fullmatch(arg) else shlex.quote(arg) for arg in argv)


def topology_commands(plan: RunPlan, version: str) -> None:
    """The router's command and one worker's per role, with launch-time placeholders."""
    slots = layout(plan.topology, plan.server_args, plan.gpu.count)
    url = {slot.name: f"http://{LOOPBACK}:<{slot.name}-port>" for slot in slots}
    argv = router_argv(
        plan.topology, python=ROUTER_PYTHON_PLACEHOLDER, port="<router-port>", metrics_port="<metrics-port>",
        sweep_max_concurrency=max(plan.benchmark.concurrency),
        workers=[url[s.name] for s in slots if s.role == "replica"],
        prefill=[(url[s.name], f"<{s.name}-bootstrap>") for s in slots if s.role == "prefill"],
        decode=[url[s.name] for s in slots if s.role == "decode"],
    )
    st.markdown(t("build.topo.router_command", lang))
    st.code(_shell(argv), language="bash", wrap_lines=True)
    st.caption(t("build.topo.router_note", lang))
    for role, group in plan.topology.groups():
        slot = next(s for s in slots if s.role == role)
        placeholders = {"http": f"<{slot.name}-port>", "nccl": f"<{slot.name}-nccl>",
                        "bootstrap": f"<{slot.name}-bootstrap>"}
        try:
            worker = worker_argv(plan, slot, python=PYTHON_PLACEHOLDER, ports=placeholders, version=version,
                                 tokenizer_dir=None, app_python=APP_PYTHON_PLACEHOLDER)
        except ValueError as exc:
            st.caption(t("build.topo.no_command", lang, detail=str(exc)))
            continue
        env = "CUDA_VISIBLE_DEVICES=" + ",".join(map(str, slot.gpu_ids))
        st.markdown(t("build.topo.worker_command" if group.count > 1 else "build.topo.worker_command_one", lang,
                      name=slot.name, role=_role_name(role), count=group.count))
        st.code(env + " " + _shell(worker), language="bash", wrap_lines=True)


def _risk_badges(config: Any) -> None:
    """One badge per active flag, coloured by its seed layer's risk; broken rules below."""
    risk = config.risk
    colours = {"low": "green", "low_medium": "blue", "medium": "orange", "medium_high": "orange", "high": "red"}
    badges = []
    for flag_risk in risk.flags:
        if flag_risk.risk is None:
            badges.append(f":gray-badge[--{flag_risk.flag} · {t('build.unclassified', lang)}]")
            continue
        layer = flag_risk.layer.name.get(lang) or flag_risk.layer.name["en"]
        level = t(f"flags.risk.level.{flag_risk.risk}", lang)
        badges.append(f":{colours[flag_risk.risk]}-badge[--{flag_risk.flag} · {layer} · {level}]")
    if badges:
        st.markdown(f"**{t('build.risk', lang)}**  \n" + " ".join(badges))
    for broken in risk.broken:
        st.error(broken.text(lang), icon=":material/gavel:")
    for note in risk.notes:
        st.info(note.text(lang), icon=":material/info:")


def submit_form(plan: RunPlan | None, ok: bool) -> None:
    with st.form("build.submit"):
        st.text_input(t("build.tags", lang), key="b.tags")
        allowed = can(Action.SUBMIT)
        submitted = st.form_submit_button(t("build.submit", lang), type="primary",
                                          disabled=plan is None or not allowed)
        if not allowed:
            st.caption(t("auth.viewer_cannot_queue", lang))
    if not submitted or plan is None:
        return
    if not ok:
        st.error(t("build.refused", lang))
        return
    try:
        run_id, created = store().submit_run(plan, submitted_by=current_actor(),
                                             idempotency_key=st.session_state[KEY])
    except DbBusy as exc:
        show_busy(exc)
        return
    except PermissionDenied as exc:
        show_denied(exc, lang)
        return
    except QuotaExceeded as exc:
        st.error(exc.text(lang), icon=":material/block:")
        return
    clear_run_caches()
    st.session_state["run.flash"] = t("queue.queued" if created else "queue.duplicate", lang, run_id=run_id)
    _reset_key()
    st.switch_page("pages/run.py", query_params={"run": str(run_id)})


# --- the page ------------------------------------------------------------------------
st.title(t("build.title", lang))
try:
    _init_state()
    runners = cached_runners()
except DbBusy as exc:
    show_busy(exc)
    st.stop()
host_versions = sorted({r["sglang_version"] for r in runners if r["sglang_version"]})
start_from_section()

st.subheader(t("build.basics", lang))
b1, b2, b3 = st.columns(3)
b1.text_input(t("build.name", lang), key="b.name")
_localised_choice(b1.radio, t("build.engine", lang), ["emulator", "sglang"], "b.engine", horizontal=True,
                  format_func=lambda e: t(f"build.engine_{e}", lang))
versions = sorted(set(known_versions()) | set(host_versions), key=version_key)
_localised_choice(b2.selectbox, t("build.version", lang), versions, "b.version",
                  format_func=lambda v: v + ("  ★ " + t("build.host_version", lang) if v in host_versions else ""))
b2.text_input(t("build.model", lang), key="b.model", help=t("build.model_help", lang))
b3.selectbox(t("build.gpu_type", lang), [*GPUS, "custom"], key="b.gpu_type")
if st.session_state["b.gpu_type"] == "custom":
    b3.text_input(t("build.gpu_custom", lang), key="b.gpu_custom")
b3.number_input(t("build.gpu_count", lang), min_value=1, max_value=64, key="b.gpu_count")
# Sections whose content varies sit in containers of their own, so the elements after them
# keep their place in the page (a moved widget is drawn anew and may lose its value).
with st.container():
    if st.session_state["b.engine"] == "emulator":
        st.caption(":material/science: " + t("build.emulator_note", lang))

schema = load_schema(st.session_state["b.version"])
with st.container():
    _, topology_problems = topology_section(schema)
left, right = st.columns([3, 2], gap="large")
with left:
    levers_section(schema)
    advanced_section(schema)
    benchmark_section()
current: RunPlan | None
problems: list[str] = list(topology_problems)
try:
    current = plan_from_mapping(assembled_mapping())
except PlanError as exc:
    current, problems = None, problems + readable_problems(exc.problems)
except (ValueError, TypeError) as exc:
    current, problems = None, [*problems, str(exc)]
if problems:
    current = None  # an editor entry that cannot be read never becomes part of a queued plan
_keep_draft()
with right:
    may_submit = live_checks(current, problems, host_versions[-1] if host_versions else None)
    if current is not None:
        with st.expander(t("build.yaml", lang)):
            st.code(dump_plan(current), language="yaml")
            st.download_button(t("build.download_yaml", lang), dump_plan(current), file_name=f"{current.name}.yaml")
    submit_form(current, may_submit)
    policy_path = settings.flag_policy_file or DEFAULT_POLICY_PATH
    with st.expander(t("build.policy", lang)):
        st.caption(t("build.policy_help", lang, path=str(policy_path)))
        st.code(policy_path.read_text(encoding="utf-8"), language="yaml")
