"""Build and queue: start from a preset, a previous run or a plan YAML; turn the seed's
levers; see validation, drift translations, rule risk, memory fit and the exact command
update as you edit; queue through the form at the end of the page, once per form instance
(the key is the instance's, so clicks, however close, queue one run), then open the run or
queue another.

This script is the page's layout and its live checks.  The form's state lives in
``pages/parts/build_form.py``, the flag widgets in ``pages/parts/flag_widgets.py`` and
the topology editor in ``pages/parts/topology_editor.py``.  Widgets are live (outside the
form) so that checks follow every edit; the submission itself is the form at the bottom,
with whatever blocks it named beside its button.  An error that names a field is also
drawn right under that field's widget (``pages/parts/build_field_errors.py``).

With a vLLM engine (issue 18) the page swaps in vLLM's version list, one widget per knob of
``domain/flags/data/knobs.yaml`` and the search over that version's flags
(``pages/parts/vllm_levers.py``), the carry-over of the form's SGLang flags
(``pages/parts/vllm_carry.py``), and checks from the vLLM schema; the SGLang flags are kept
aside meanwhile, and the client backend is the plan's ``vllm``.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from domain.core.access import Action
from domain.core.i18n import t
from domain.core.settings import get_settings
from domain.flags.dialects.vllm import assess_vllm_risk, known_vllm_versions, load_vllm_schema, validate_vllm_args
from domain.flags.policy import DEFAULT_POLICY_PATH
from domain.flags.risk import RiskReport
from domain.flags.schema import known_versions, load_schema, version_key
from domain.plan.checks import (
    check_plan,
    context_length_errors,
    default_backend_warnings,
    role_checks,
    schema_version_for,
    thinking_checks,
    vllm_version_for,
)
from domain.plan.claimability import host_version_for, registered_versions
from domain.plan.command import command_preview
from domain.plan.eta import plan_seconds
from domain.plan.flag_report import ConfigCheck
from domain.plan.form_input import readable_problems
from domain.plan.naming import slug
from domain.plan.placeholder_commands import router_command, worker_command
from domain.plan.plan_io import PlanError, dump_plan, load_plan, plan_from_mapping
from domain.plan.presets import CONFIG_PRESETS, GPUS, QUICK_PRESET_KEY, config_preset, preset_plan, quick_demo_plan
from domain.plan.quotas import QuotaExceeded
from domain.plan.run_plan import DEFAULT_CONCURRENCY, SCENARIO_PRESETS, RunPlan
from domain.plan.thinking import CHAT_BACKEND
from domain.plan.topology import layout
from domain.plan.topology_drawing import role_name
from pages.parts import variant
from pages.parts.auth import can, current_actor
from pages.parts.build_field_errors import (
    CUSTOM_SCENARIO_SLOT,
    FieldErrors,
    flag_errors,
    merged,
    problem_errors,
    scenario_length_errors,
    show_field_errors,
    slot_under,
    start_slots,
)
from pages.parts.build_form import (
    HOST_VERSION,
    LOADED_FROM,
    assembled_mapping,
    init_state,
    keep_draft,
    load_plan_into_form,
    queued_run,
    remember_queued,
    reset_idempotency_key,
    submission_key,
    vllm_engine,
)
from pages.parts.common import (
    cached_host_schemas,
    cached_runners,
    clear_run_caches,
    command_line,
    current_language,
    db_guard,
    localised_choice,
    opened_expander,
    store,
)
from pages.parts.flag_widgets import SERVER_ARGS, VLLM_ARGS, advanced_section, apply_translation, levers_section
from pages.parts.local_models import local_models_section
from pages.parts.quality_form import quality_section
from pages.parts.topology_editor import topology_section
from pages.parts.vllm_carry import carry_section
from pages.parts.vllm_levers import vllm_advanced_section, vllm_levers_section

lang = current_language()
settings = get_settings()
YAML_OPEN = "build.yaml_open"  # the plan's YAML expander: drawn only while open (its state, by this key)


# --- start from ----------------------------------------------------------------------
def start_from_section() -> None:
    st.subheader(t("build.start_from", lang))
    c1, c2, c3 = st.columns([2, 1, 2])
    options = [p.key for p in CONFIG_PRESETS]
    chosen = c1.selectbox(t("build.preset", lang), options, index=_preset_shown(options),
                          format_func=lambda k: config_preset(k).name[lang])
    c1.caption(config_preset(chosen).description[lang])
    if c2.button(t("build.load_preset", lang), width="stretch"):
        load_plan_into_form(preset_plan(chosen), f"preset:{chosen}")
        st.rerun()
    if c2.button(t("build.quick_preset", lang), width="stretch", type="primary",
                 help=t("build.quick_preset_help", lang)):
        load_plan_into_form(quick_demo_plan(), "quick")
        st.rerun()
    uploaded = c3.file_uploader(t("build.upload", lang), type=["yaml", "yml"], help=t("build.upload_help", lang))
    if uploaded is not None and st.session_state.get(LOADED_FROM) != f"file:{uploaded.file_id}":
        try:
            plan = load_plan(uploaded.getvalue().decode("utf-8", errors="replace"), max_bytes=settings.max_plan_bytes)
        except PlanError as exc:
            c3.error(t("build.upload_bad", lang) + "\n\n" + "\n".join(f"- {p.text(lang)}" for p in exc.problems))
        else:
            load_plan_into_form(plan, f"file:{uploaded.file_id}")
            st.rerun()
    origin = st.session_state.get(LOADED_FROM, "")
    if origin.startswith("run:"):
        st.info(t("build.duplicated_from", lang, run_id=origin[4:]), icon=":material/content_copy:")


def _preset_shown(options: list[str]) -> int:
    """The preset the form was loaded from (the Quick preset is built on
    :data:`domain.plan.presets.QUICK_PRESET_KEY`), so the box never names another than the form holds."""
    origin = str(st.session_state.get(LOADED_FROM, ""))
    key = QUICK_PRESET_KEY if origin == "quick" else origin.removeprefix("preset:")
    return options.index(key) if key in options else 0


# --- benchmark plan ------------------------------------------------------------------
def benchmark_section() -> None:
    st.subheader(t("build.benchmark", lang))
    c1, c2 = st.columns(2)
    c1.multiselect(t("build.scenarios", lang), list(SCENARIO_PRESETS), key="b.scenarios",
                   format_func=lambda k: f"{k} ({SCENARIO_PRESETS[k].input_len}/{SCENARIO_PRESETS[k].output_len})")
    slot_under(c1, "b.scenarios")
    custom = c1.toggle(t("build.custom_scenario", lang), key="b.custom_on")
    if custom:
        cc1, cc2 = c1.columns(2)
        cc1.number_input("ISL", min_value=1, max_value=1_000_000, value=2000, key="b.custom_isl")
        cc2.number_input("OSL", min_value=1, max_value=1_000_000, value=500, key="b.custom_osl")
        slot_under(c1, CUSTOM_SCENARIO_SLOT)
    c2.text_input(t("build.concurrency", lang), key="b.concurrency",
                  help=t("build.concurrency_help", lang, default=", ".join(map(str, DEFAULT_CONCURRENCY))))
    slot_under(c2, "b.concurrency")
    cc1, cc2, cc3 = c2.columns(3)
    cc1.text_input(t("build.prompts", lang), key="b.prompts", help=t("build.count_help", lang))
    slot_under(cc1, "b.prompts")
    cc2.text_input(t("build.warmup", lang), key="b.warmup", help=t("build.count_help", lang))
    slot_under(cc2, "b.warmup")
    cc3.number_input(t("build.repeats", lang), min_value=1, max_value=20, key="b.repeats")
    slot_under(cc3, "b.repeats")
    c2.checkbox(t("build.fresh_launch", lang), key="b.fresh_launch", help=t("build.fresh_launch_help", lang))
    d1, d2, d3, d4 = st.columns(4)
    d1.selectbox(t("build.dataset", lang), ["random-ids"], key="b.dataset", help=t("build.dataset_help", lang))
    slot_under(d1, "b.dataset")
    d2.number_input(t("build.seed", lang), min_value=0, max_value=2**31 - 1, key="b.seed")
    slot_under(d2, "b.seed")
    d3.number_input(t("build.range_ratio", lang), min_value=0.0, max_value=1.0, step=0.05, key="b.range_ratio",
                    help=t("build.range_ratio_help", lang))
    slot_under(d3, "b.range_ratio")
    d4.text_input(t("build.rate", lang), key="b.rate", help=t("build.rate_help", lang))
    slot_under(d4, "b.rate")
    request_section()


def request_section() -> None:
    """The endpoint, the chat template, thinking mode and EOS: chat requests always go
    through the server's chat template, so the toggle is on and fixed for them."""
    # Two by two: four to a row cut the toggles' labels ("Apply c…", "チャッ…") at 1400 px.
    e1, e2 = st.columns(2)
    e3, e4 = st.columns(2)
    vllm = vllm_engine()
    with e1.container():  # one widget or the other in the same place: the rest keep theirs
        if vllm:  # the plan gives a vLLM engine bench_serving's vllm backend (domain/plan/run_plan.py)
            st.selectbox(t("build.backend", lang), ["vllm"], key="b.backend_vllm", disabled=True,
                         help=t("build.vllm.backend_note", lang))
        else:
            st.selectbox(t("build.backend", lang), ["sglang", "sglang-oai", CHAT_BACKEND], key="b.backend",
                         help=t("build.backend_help", lang))
    slot_under(e1, "b.backend")
    chat = st.session_state.get("b.backend") == CHAT_BACKEND and not vllm
    if chat:
        st.session_state["b.chat"] = True  # before the toggle is drawn: the server applies the template
    e2.toggle(t("build.chat", lang), key="b.chat", help=t("build.chat_help", lang), disabled=chat)
    slot_under(e2, "b.chat")
    e3.selectbox(t("build.thinking", lang), ["n/a", "off", "on"], key="b.thinking",
                 help=t("build.thinking_help", lang))
    slot_under(e3, "b.thinking")
    e4.toggle(t("build.stop_at_eos", lang), key="b.stop_eos", help=t("build.stop_at_eos_help", lang))
    slot_under(e4, "b.stop_eos")
    with st.container():  # under the whole row: a narrow column would stack it word by word
        if vllm:
            st.caption(":material/info: " + t("build.vllm.backend_note", lang))


# --- the live checks ----------------------------------------------------------------------
def _flag_issues(config: ConfigCheck, roles: list[tuple[str, ConfigCheck]]) -> None:
    """The plan-wide flags' errors and warnings, a button per drift translation, then each
    role's errors and warnings."""
    for issue in config.flags.errors:
        st.error(issue.text(lang), icon=":material/error:")
    for issue in config.flags.warnings:
        st.warning(issue.text(lang), icon=":material/warning:")
    for i, translation in enumerate(config.flags.translations):
        st.button(t("build.apply_translation", lang, change=translation.text(lang)), key=f"b.tr.{i}",
                  on_click=apply_translation, args=(translation,))
    for role, role_config in roles:
        for issue in role_config.flags.errors:
            st.error(f"**{role_name(role, lang)}** · {issue.text(lang)}", icon=":material/error:")
        for issue in role_config.flags.warnings:
            st.warning(f"**{role_name(role, lang)}** · {issue.text(lang)}", icon=":material/warning:")


def _memory_fits(config: ConfigCheck, roles: list[tuple[str, ConfigCheck]]) -> None:
    """The plan's memory fit, or one per role when the topology has roles."""
    fits: list[tuple[str | None, ConfigCheck]] = [(None, config)] if not roles else list(roles)
    for who, checked in fits:
        if checked.memory is None:
            st.caption(t("build.no_memory_fit", lang))
            continue
        verdict = checked.memory.verdict
        box = st.success if verdict == "fits" else (st.warning if verdict == "too_small" else st.error)
        heading = "" if who is None else t("build.topo.role_memory", lang, role=role_name(who, lang)) + "\n\n"
        box(heading + checked.memory.text(lang), icon=":material/memory:")


def _commands(plan: RunPlan, host_version: str | None) -> None:
    """The exact commands (``command_line``: selectable text, no copy button)."""
    st.markdown(f"**{t('build.command', lang)}**")
    version = vllm_version_for(plan) if plan.is_vllm else schema_version_for(plan, host_version)
    if plan.topology.kind == "aggregated":
        try:
            command_line(command_preview(plan, version))
        except ValueError as exc:
            st.caption(t("build.topo.no_command", lang, detail=str(exc)))
    else:
        topology_commands(plan, version)
    st.caption(t("build.command_note", lang))


def live_checks(plan: RunPlan | None, problems: list[str], host_version: str | None) -> tuple[list[str], FieldErrors]:
    """The live panel; returns what blocks queueing (empty when the plan may be queued) and
    the errors among them that name a field, by the field's widget."""
    st.subheader(t("build.checks", lang))
    if plan is None:
        st.error(t("build.plan_invalid", lang) + "\n\n" + "\n".join(f"- {p}" for p in problems))
        return problems, {}
    if plan.is_vllm:
        return vllm_live_checks(plan)
    report = check_plan(plan, settings, lang, host_version)
    config = report.config
    assert config is not None  # noqa: S101 - check_plan always sets it
    roles = role_checks(plan, settings, host_version) if plan.topology.kind != "aggregated" else []
    _flag_issues(config, roles)
    for error in context_length_errors(plan, lang, settings.model_dirs):  # ISL + OSL past the context: refused
        st.error(error)
    for warning in default_backend_warnings(plan, lang):  # the runner refuses it where the package is missing
        st.warning(warning, icon=":material/warning:")
    thinking_errors, thinking_warnings = thinking_checks(plan, settings, lang)  # against the served template
    for error in thinking_errors:
        st.error(error, icon=":material/psychology:")
    for warning in thinking_warnings:
        st.warning(warning, icon=":material/psychology:")
    _risk_badges(config.risk)
    _memory_fits(config, roles)
    _commands(plan, host_version)
    _estimate(plan)
    return report.errors, merged(flag_errors(config.flags.errors, lang), scenario_length_errors(plan, lang),
                                 {"b.thinking": thinking_errors})


def vllm_live_checks(plan: RunPlan) -> tuple[list[str], FieldErrors]:
    """A vLLM plan's checks: ``check_plan``'s lines (the flags against the version's schema
    and the vLLM policy, the context length, the thinking template), a button per flag
    renamed in that version, the risk badges from the vLLM layers, and the vLLM command.
    The host's version is not asked for: the form always pins one."""
    version = vllm_version_for(plan)
    report = check_plan(plan, settings, lang)
    for error in report.errors:
        st.error(error, icon=":material/error:")
    for warning in report.warnings:
        st.warning(warning, icon=":material/warning:")
    flags = validate_vllm_args(plan.server_args, version, model_dirs=settings.model_dirs, model=plan.model)
    for i, translation in enumerate(flags.translations):
        st.button(t("build.apply_translation", lang, change=translation.text(lang)), key=f"b.vtr.{i}",
                  on_click=apply_translation, args=(translation, VLLM_ARGS))
    _risk_badges(assess_vllm_risk(plan.server_args, version))
    st.caption(t("build.vllm.no_memory_fit", lang))
    _commands(plan, None)
    _estimate(plan)
    thinking_errors, _ = thinking_checks(plan, settings, lang)
    return report.errors, merged(flag_errors(flags.errors, lang), scenario_length_errors(plan, lang),
                                 {"b.thinking": thinking_errors})


def _estimate(plan: RunPlan) -> None:
    minutes = plan_seconds(plan) / 60
    st.markdown(f"**{t('build.estimate', lang)}**: " + t("build.estimate_value", lang, minutes=f"{minutes:.0f}",
                                                           points=len(plan.points()),
                                                           requests=plan.total_requests()))


def topology_commands(plan: RunPlan, version: str) -> None:
    """The router's command and one worker's per role, with launch-time placeholders."""
    slots = layout(plan.topology, plan.server_args, plan.gpu.count)
    st.markdown(t("build.topo.router_command", lang))
    command_line(router_command(plan, slots))
    st.caption(t("build.topo.router_note", lang))
    for role, group in plan.topology.groups():
        slot = next(s for s in slots if s.role == role)
        try:
            command = worker_command(plan, slot, version)
        except ValueError as exc:
            st.caption(t("build.topo.no_command", lang, detail=str(exc)))
            continue
        st.markdown(t("build.topo.worker_command" if group.count > 1 else "build.topo.worker_command_one", lang,
                      name=slot.name, role=role_name(role, lang), count=group.count))
        command_line(command)


def _risk_badges(risk: RiskReport) -> None:
    """One badge per active flag, coloured by its seed layer's risk; broken rules below."""
    colours = {"low": "green", "low_medium": "blue", "medium": "orange", "medium_high": "orange", "high": "red"}
    badges = []
    for flag_risk in risk.flags:
        if flag_risk.layer is None or flag_risk.risk is None:
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


# --- queueing -----------------------------------------------------------------------
SUBMIT_BUTTON = "b.queue"  # the form's button: True in session state in the rerun its click sends
ANOTHER_BUTTON = "b.queue_another"  # "Queue another from this form": the same, for its click


def _blocking_summary(blocking: list[str]) -> None:
    """What stops this plan, named beside the button (each line names its field or flag)."""
    st.error(t("submit.blocked", lang, count=len(blocking)) + "\n\n" + "\n".join(f"- {b}" for b in blocking),
             icon=":material/error:")


def _queue(plan: RunPlan) -> int | None:
    """Queue ``plan`` under this form instance's key; the run id, or None (with why shown).
    A repeat of the key (a second click whose rerun arrives after the first one queued)
    gets the same run back from the store."""
    actor = current_actor()
    try:
        with db_guard(lang) as guard:
            run_id, _ = store().submit_run(plan, submitted_by=actor, idempotency_key=submission_key(actor.name))
    except QuotaExceeded as exc:
        st.error(exc.text(lang), icon=":material/block:")
        return None
    if guard.failed:
        return None
    remember_queued(run_id)
    variant.announce(run_id, lang)
    clear_run_caches()
    return run_id


def _queued_panel(run_id: int) -> None:
    """Where this form instance went, and the deliberate way to queue another from it."""
    st.success(t("queue.queued", lang, run_id=run_id), icon=":material/check_circle:")
    c1, c2, c3 = st.columns([1, 1, 2], vertical_alignment="center")
    c1.page_link("pages/run.py", label=t("submit.open_run", lang, run_id=run_id), icon=":material/open_in_new:",
                 query_params={"run": str(run_id)})
    variant.compare_link(c2, run_id, st.session_state.get(LOADED_FROM, ""), lang)
    c3.button(t("submit.queue_another", lang), key=ANOTHER_BUTTON, icon=":material/add:",
              on_click=reset_idempotency_key, help=t("submit.queue_another_help", lang))


def _submit_clicked() -> bool:
    """Whether this rerun carries a click of the Queue button, and not in the same rerun as
    "Queue another".  Streamlit merges a rerun request that arrives while another waits and
    keeps every button press of both: a late second click of a double-click and a following
    "Queue another" then arrive together, and the fresh instance must not queue from the
    old instance's click."""
    return bool(st.session_state.get(SUBMIT_BUTTON)) and not st.session_state.get(ANOTHER_BUTTON)


def submit_section(plan: RunPlan | None, blocking: list[str]) -> None:
    """The end of the form: tags, what still blocks queueing, the button, then what the
    click did.  A form instance that has queued keeps its button disabled and shows its run.

    The click is read from session state before the button is drawn, so the run that
    queues already draws the button disabled (a second click then meets a disabled button,
    and its rerun, if it was sent before, finds the instance queued)."""
    st.subheader(t("submit.heading", lang))
    allowed = can(Action.SUBMIT)
    queued = queued_run()
    clicked = _submit_clicked() and queued is None and plan is not None
    if clicked and not blocking and plan is not None:
        queued = _queue(plan)  # a quota or busy message shows here, just above the form
    with st.form("build.submit"):
        st.text_input(t("build.tags", lang), key="b.tags")
        slot_under(st, "b.tags")
        if blocking and queued is None:
            _blocking_summary(blocking)
        st.form_submit_button(t("build.submit", lang), type="primary", icon=":material/send:", key=SUBMIT_BUTTON,
                              disabled=plan is None or not allowed or queued is not None)
        if not allowed:
            st.caption(t("auth.viewer_cannot_queue", lang))
    if clicked and blocking:
        st.error(t("submit.refused", lang), icon=":material/block:")
    if queued is not None:
        _queued_panel(queued)


# --- the page ------------------------------------------------------------------------
st.title(t("build.title", lang))
start_slots()
with db_guard(lang) as guard:
    runners = cached_runners()
    cached_host_schemas()  # the runner hosts' dumped schemas, for the versions they report
    st.session_state[HOST_VERSION] = host_version_for(settings.runner_gpu_type, runners)
    init_state()
if guard.failed:
    st.stop()
host_versions = registered_versions(runners)
start_from_section()

st.subheader(t("build.basics", lang))
b1, b2, b3 = st.columns(3)
b1.text_input(t("build.name", lang), key="b.name",
              help=t("build.name_help", lang, slug=slug(str(st.session_state.get("b.name", "")), "plan")))
slot_under(b1, "b.name")
ENGINES = ["emulator", "sglang", "vllm-emulator", "vllm"]  # the one choice: family and emulation
localised_choice(b1.radio, t("build.engine", lang), ENGINES, "b.engine", lang, horizontal=True,
                 format_func=lambda e: t(f"build.engine_{e.replace('-', '_')}", lang))
slot_under(b1, "b.engine")
with b2.container():  # the engine's own version list, in one place whichever it is
    if vllm_engine():
        st.selectbox(t("build.vllm.version", lang), known_vllm_versions(), key="b.vllm_version",
                     help=t("build.vllm.version_help", lang))
        slot_under(st, "b.vllm_version")
    else:
        versions = sorted(set(known_versions()) | set(host_versions), key=version_key)
        localised_choice(st.selectbox, t("build.version", lang), versions, "b.version", lang,
                         format_func=lambda v: v + ("  ★ " + t("build.host_version", lang) if v in host_versions
                                                    else ""))
        slot_under(st, "b.version")
b2.text_input(t("build.model", lang), key="b.model", help=t("build.model_help", lang))
slot_under(b2, "b.model")
local_models_section(b2, settings.model_dirs, lang)
b3.selectbox(t("build.gpu_type", lang), [*GPUS, "custom"], key="b.gpu_type")
if st.session_state["b.gpu_type"] == "custom":
    b3.text_input(t("build.gpu_custom", lang), key="b.gpu_custom")
slot_under(b3, "b.gpu_type")  # under the custom type's box when there is one
b3.number_input(t("build.gpu_count", lang), min_value=1, max_value=64, key="b.gpu_count")
slot_under(b3, "b.gpu_count")
# Sections whose content varies sit in containers of their own, so the elements after them
# keep their place in the page (a moved widget is drawn anew and may lose its value).
ENGINE_NOTES = {"emulator": "build.emulator_note", "vllm-emulator": "build.vllm.emulator_note",
                "vllm": "build.vllm.real_note"}
with st.container():
    if st.session_state["b.engine"] in ENGINE_NOTES:
        st.caption(":material/science: " + t(ENGINE_NOTES[st.session_state["b.engine"]], lang))

topology_problems: list[str] = []
with st.container():
    if vllm_engine():
        st.caption(t("build.vllm.topology_note", lang))
    else:
        _, topology_problems = topology_section(load_schema(st.session_state["b.version"]),
                                                 dict(st.session_state[SERVER_ARGS]),
                                                 int(st.session_state["b.gpu_count"]), lang)
left, right = st.columns([3, 2], gap="large")
with left:
    with st.container():
        if vllm_engine():
            vllm_schema = load_vllm_schema(st.session_state["b.vllm_version"])
            carry_section(vllm_schema.version, lang)
            vllm_levers_section(vllm_schema, lang)
            vllm_advanced_section(vllm_schema, lang)
        else:
            schema = load_schema(st.session_state["b.version"])
            levers_section(schema, lang)
            variant.focus_first_lever()
            advanced_section(schema, lang)
    benchmark_section()
current: RunPlan | None
problems: list[str] = list(topology_problems)
form_mapping: dict[str, Any] | None = None
plan_field_errors: FieldErrors = {}
try:
    form_mapping = assembled_mapping(lang)
    current = plan_from_mapping(form_mapping)
except PlanError as exc:
    current, problems = None, problems + readable_problems(exc.problems, lang)
    plan_field_errors = problem_errors(exc.problems, lang, form_mapping)
except (ValueError, TypeError) as exc:
    current, problems = None, [*problems, str(exc)]
if problems:
    current = None  # an editor entry that cannot be read never becomes part of a queued plan
with left:
    quality_section(lang, current)
keep_draft()
with right:
    blocking, check_field_errors = live_checks(current, problems, host_versions[-1] if host_versions else None)
    if current is not None and (yaml_box := opened_expander(t("build.yaml", lang), YAML_OPEN)) is not None:
        with yaml_box:
            st.code(dump_plan(current), language="yaml")
            st.download_button(t("build.download_yaml", lang), dump_plan(current),
                               file_name=f"{slug(current.name, 'plan')}.yaml", on_click="ignore")
    policy_path = settings.flag_policy_file or DEFAULT_POLICY_PATH
    # Drawn only when opened: highlighting the policy's 10 KB of YAML was a fifth of a fresh
    # tab's time on this page, for a file most visits never read.
    if (policy_box := opened_expander(t("build.policy", lang), "build.policy_open")) is not None:
        with policy_box:
            st.caption(t("build.policy_help", lang, path=str(policy_path)))
            st.code(policy_path.read_text(encoding="utf-8"), language="yaml")
# The button ends the page, after every field it submits, with what blocks it beside it.
submit_section(current, blocking)
# Each error that names a field also under that field's widget (the summary above keeps them all).
show_field_errors(merged(plan_field_errors, check_field_errors))
