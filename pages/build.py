"""Build and queue: start from a preset, a previous run or a plan YAML; turn the seed's
levers; see validation, drift translations, rule risk, memory fit and the exact command
update as you edit; submit through a form (idempotent) and land on the run.

This script is the page's layout and its live checks.  The form's state lives in
``pages/parts/build_form.py``, the flag widgets in ``pages/parts/flag_widgets.py`` and
the topology editor in ``pages/parts/topology_editor.py``.  Widgets are live (outside the
form) so that checks follow every edit; the submission itself is the form at the bottom.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from domain.core.access import Action
from domain.core.i18n import t
from domain.core.settings import get_settings
from domain.flags.policy import DEFAULT_POLICY_PATH
from domain.flags.schema import known_versions, load_schema, version_key
from domain.plan.checks import (
    check_plan,
    context_length_errors,
    default_backend_warnings,
    role_checks,
    schema_version_for,
)
from domain.plan.command import command_preview
from domain.plan.estimate import plan_seconds
from domain.plan.flag_report import ConfigCheck
from domain.plan.form_input import readable_problems
from domain.plan.placeholder_commands import router_command, worker_command
from domain.plan.plan_io import PlanError, dump_plan, load_plan, plan_from_mapping
from domain.plan.presets import CONFIG_PRESETS, GPUS, config_preset, preset_plan, quick_demo_plan
from domain.plan.quotas import QuotaExceeded
from domain.plan.run_plan import DEFAULT_CONCURRENCY, SCENARIO_PRESETS, RunPlan
from domain.plan.topology import layout
from domain.plan.topology_drawing import role_name
from pages.parts.auth import can, current_actor
from pages.parts.build_form import (
    IDEMPOTENCY_KEY,
    LOADED_FROM,
    assembled_mapping,
    init_state,
    keep_draft,
    load_plan_into_form,
    reset_idempotency_key,
)
from pages.parts.common import cached_runners, clear_run_caches, current_language, db_guard, localised_choice, store
from pages.parts.flag_widgets import SERVER_ARGS, advanced_section, apply_translation, levers_section
from pages.parts.topology_editor import topology_section

lang = current_language()
settings = get_settings()


# --- start from ----------------------------------------------------------------------
def start_from_section() -> None:
    st.subheader(t("build.start_from", lang))
    c1, c2, c3 = st.columns([2, 1, 2])
    options = [p.key for p in CONFIG_PRESETS]
    chosen = c1.selectbox(t("build.preset", lang), options, format_func=lambda k: config_preset(k).name[lang])
    c1.caption(config_preset(chosen).description[lang])
    if c2.button(t("build.load_preset", lang), width="stretch"):
        load_plan_into_form(preset_plan(chosen), f"preset:{chosen}")
        st.rerun()
    if c2.button(t("build.quick_preset", lang), width="stretch", type="primary"):
        load_plan_into_form(quick_demo_plan(), "quick")
        st.rerun()
    uploaded = c3.file_uploader(t("build.upload", lang), type=["yaml", "yml"])
    if uploaded is not None and st.session_state.get(LOADED_FROM) != f"file:{uploaded.file_id}":
        try:
            plan = load_plan(uploaded.getvalue().decode("utf-8", errors="replace"), max_bytes=settings.max_plan_bytes)
        except PlanError as exc:
            c3.error(t("build.upload_bad", lang) + "\n\n" + "\n".join(f"- {p}" for p in exc.problems))
        else:
            load_plan_into_form(plan, f"file:{uploaded.file_id}")
            st.rerun()
    origin = st.session_state.get(LOADED_FROM, "")
    if origin.startswith("run:"):
        st.info(t("build.duplicated_from", lang, run_id=origin[4:]), icon=":material/content_copy:")


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


def live_checks(plan: RunPlan | None, problems: list[str], host_version: str | None) -> bool:
    """The live panel; True when the plan may be submitted."""
    st.subheader(t("build.checks", lang))
    if plan is None:
        st.error(t("build.plan_invalid", lang) + "\n\n" + "\n".join(f"- {p}" for p in problems))
        return False
    report = check_plan(plan, settings, lang, host_version)
    config = report.config
    assert config is not None  # noqa: S101 - check_plan always sets it
    roles = role_checks(plan, settings, host_version) if plan.topology.kind != "aggregated" else []
    _flag_issues(config, roles)
    for error in context_length_errors(plan, lang):  # ISL + OSL past the context: every such request is refused
        st.error(error)
    for warning in default_backend_warnings(plan, lang):  # the runner refuses it where the package is missing
        st.warning(warning, icon=":material/warning:")
    _risk_badges(config)
    _memory_fits(config, roles)
    _commands(plan, host_version)
    requests_total = plan.total_requests()
    minutes = plan_seconds(plan) / 60
    st.markdown(f"**{t('build.estimate', lang)}**: " + t("build.estimate_value", lang, minutes=f"{minutes:.0f}",
                                                           points=len(plan.points()), requests=requests_total))
    return report.ok


def topology_commands(plan: RunPlan, version: str) -> None:
    """The router's command and one worker's per role, with launch-time placeholders."""
    slots = layout(plan.topology, plan.server_args, plan.gpu.count)
    st.markdown(t("build.topo.router_command", lang))
    st.code(router_command(plan, slots), language="bash", wrap_lines=True)
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
        st.code(command, language="bash", wrap_lines=True)


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
        with db_guard(lang) as guard:
            run_id, created = store().submit_run(plan, submitted_by=current_actor(),
                                                 idempotency_key=st.session_state[IDEMPOTENCY_KEY])
    except QuotaExceeded as exc:
        st.error(exc.text(lang), icon=":material/block:")
        return
    if guard.failed:
        return
    clear_run_caches()
    st.session_state["run.flash"] = t("queue.queued" if created else "queue.duplicate", lang, run_id=run_id)
    reset_idempotency_key()
    st.switch_page("pages/run.py", query_params={"run": str(run_id)})


# --- the page ------------------------------------------------------------------------
st.title(t("build.title", lang))
with db_guard(lang) as guard:
    init_state()
    runners = cached_runners()
if guard.failed:
    st.stop()
host_versions = sorted({r.sglang_version for r in runners if r.sglang_version})
start_from_section()

st.subheader(t("build.basics", lang))
b1, b2, b3 = st.columns(3)
b1.text_input(t("build.name", lang), key="b.name")
localised_choice(b1.radio, t("build.engine", lang), ["emulator", "sglang"], "b.engine", lang, horizontal=True,
                 format_func=lambda e: t(f"build.engine_{e}", lang))
versions = sorted(set(known_versions()) | set(host_versions), key=version_key)
localised_choice(b2.selectbox, t("build.version", lang), versions, "b.version", lang,
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
    _, topology_problems = topology_section(schema, dict(st.session_state[SERVER_ARGS]),
                                             int(st.session_state["b.gpu_count"]), lang)
left, right = st.columns([3, 2], gap="large")
with left:
    levers_section(schema, lang)
    advanced_section(schema, lang)
    benchmark_section()
current: RunPlan | None
problems: list[str] = list(topology_problems)
try:
    current = plan_from_mapping(assembled_mapping(lang))
except PlanError as exc:
    current, problems = None, problems + readable_problems(exc.problems)
except (ValueError, TypeError) as exc:
    current, problems = None, [*problems, str(exc)]
if problems:
    current = None  # an editor entry that cannot be read never becomes part of a queued plan
keep_draft()
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
