"""Build and queue: start from a preset, a previous run or a plan YAML; turn the seed's
levers; see validation, drift translations, rule risk, memory fit and the exact command
update as you edit; submit through a form (idempotent) and land on the run.

Widgets are live (outside the form) so that checks follow every edit; the submission
itself is the form at the bottom.  Flag values live in ``server_args`` in session state,
not in widget state, so advanced flags keep their values while hidden by the search.
"""

from __future__ import annotations

import uuid
from typing import Any

import streamlit as st
import yaml

from db import DbBusy
from domain.access import Action, PermissionDenied
from domain.checks import check_plan, schema_version_for
from domain.command import command_preview
from domain.estimate import plan_seconds
from domain.flags.drift import apply_translations
from domain.flags.levers import lever_notes, parallelism_glossary
from domain.flags.policy import DEFAULT_POLICY_PATH
from domain.flags.schema import FlagSpec, Schema, known_versions, load_schema, version_key
from domain.i18n import t
from domain.plan import DEFAULT_CONCURRENCY, SCENARIO_PRESETS, RunPlan
from domain.plan_io import PlanError, dump_plan, load_plan, plan_from_mapping
from domain.presets import CONFIG_PRESETS, GPUS, PRESET_SGLANG_VERSION, config_preset, preset_plan, quick_demo_plan
from domain.quotas import QuotaExceeded
from domain.settings import get_settings
from pages.auth import can, current_actor
from pages.common import (
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
    ss[LOADED] = origin
    for key in [k for k in ss if str(k).startswith("b.flag.")]:
        del ss[key]
    _reset_key()


# Streamlit drops a widget's state when its page is not shown; these keys are copied aside
# at the end of every run and restored on the way back, so the draft survives navigation.
FORM_KEYS = ("b.name", "b.engine", "b.version", "b.model", "b.gpu_type", "b.gpu_custom", "b.gpu_count",
             "b.scenarios", "b.custom_on", "b.custom_isl", "b.custom_osl", "b.concurrency", "b.prompts", "b.warmup",
             "b.repeats", "b.dataset", "b.seed", "b.range_ratio", "b.rate", "b.chat", "b.thinking", "b.tags")


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
    _risk_badges(config)
    if config.memory is not None:
        verdict = config.memory.verdict
        box = st.success if verdict == "fits" else (st.warning if verdict == "too_small" else st.error)
        box(config.memory.text(lang), icon=":material/memory:")
    else:
        st.caption(t("build.no_memory_fit", lang))
    st.markdown(f"**{t('build.command', lang)}**")
    st.code(command_preview(plan, schema_version_for(plan, host_version)), language="bash", wrap_lines=True)
    st.caption(t("build.command_note", lang))
    requests_total = plan.total_requests()
    minutes = plan_seconds(plan) / 60
    st.markdown(f"**{t('build.estimate', lang)}**: " + t("build.estimate_value", lang, minutes=f"{minutes:.0f}",
                                                           points=len(plan.points()), requests=requests_total))
    return report.ok


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
b1.radio(t("build.engine", lang), ["emulator", "sglang"], key="b.engine", horizontal=True,
         format_func=lambda e: t(f"build.engine_{e}", lang))
versions = sorted(set(known_versions()) | set(host_versions), key=version_key)
b2.selectbox(t("build.version", lang), versions, key="b.version",
             format_func=lambda v: v + ("  ★ " + t("build.host_version", lang) if v in host_versions else ""))
b2.text_input(t("build.model", lang), key="b.model", help=t("build.model_help", lang))
b3.selectbox(t("build.gpu_type", lang), [*GPUS, "custom"], key="b.gpu_type")
if st.session_state["b.gpu_type"] == "custom":
    b3.text_input(t("build.gpu_custom", lang), key="b.gpu_custom")
b3.number_input(t("build.gpu_count", lang), min_value=1, max_value=64, key="b.gpu_count")
b3.selectbox(t("build.topology", lang), ["aggregated"], key="b.topology", help=t("build.topology_help", lang))
if st.session_state["b.engine"] == "emulator":
    st.caption(":material/science: " + t("build.emulator_note", lang))

schema = load_schema(st.session_state["b.version"])
left, right = st.columns([3, 2], gap="large")
with left:
    levers_section(schema)
    advanced_section(schema)
    benchmark_section()
current: RunPlan | None
problems: list[str] = []
try:
    current = plan_from_mapping(assembled_mapping())
except PlanError as exc:
    current, problems = None, [str(p) for p in exc.problems]
except (ValueError, TypeError) as exc:
    current, problems = None, [str(exc)]
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
