"""The Build page's topology editor: the kind (one server, router with replicas, PD
prefill/decode), the router's policies and concurrency cap, per role the server count,
GPUs, transfer backend and other flags; then the drawing, the server table and the
problems that block the plan.

Its state is ``b.topo.<field>``, and ``b.topo.<role>.<field>`` per role."""

from __future__ import annotations

import re
from typing import Any, get_args

import streamlit as st
from pydantic import ValidationError

from domain.core.i18n import t
from domain.flags.schema import Schema
from domain.plan.form_input import (
    flags_yaml,
    gpu_ids_text,
    highest_concurrency,
    parse_gpu_ids,
    parse_role_flags,
    readable_problems,
)
from domain.plan.plan_io import problems_from_validation
from domain.plan.topology import MAX_SERVERS_PER_ROLE, Kind, Policy, Topology, layout, layout_problems
from domain.plan.topology_drawing import (
    gpus_in_use,
    role_name,
    server_rows,
    slots_named_in,
    topology_dot,
)
from domain.plan.transfer_backend import BACKEND_FLAG, kv_backend
from pages.parts.common import localised_choice, opened_expander

DRAWING_OPEN = "build.topo.drawing_open.{kind}"  # the drawing's expander, one per topology kind

KINDS: tuple[Kind, ...] = get_args(Kind)
POLICIES: tuple[Policy, ...] = get_args(Policy)
ROLES: dict[str, tuple[str, ...]] = {"aggregated": (), "router": ("replica",), "pd": ("prefill", "decode")}
GROUP_FIELD = {"replica": "replicas", "prefill": "prefill", "decode": "decode"}
PD_ROLES = ("prefill", "decode")
IB_FLAG = "disaggregation-ib-device"
_ROLE_DEFAULTS: dict[str, Any] = {"count": 1, "gpus": 1, "gpu_ids": "", "backend": None, "ib": "", "other": ""}
TOPOLOGY_DEFAULTS: dict[str, Any] = {
    "b.topo.kind": "aggregated", "b.topo.policy": "cache_aware", "b.topo.decode_policy": "round_robin",
    "b.topo.max_conc": "",
    **{f"b.topo.{role}.{name}": value for role in GROUP_FIELD for name, value in _ROLE_DEFAULTS.items()},
    "b.topo.replica.count": 2,
}


def load_topology_into_form(topology: Topology) -> None:
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
        ss[prefix + "gpu_ids"] = gpu_ids_text(group.gpu_ids)
        args: dict[str, Any] = dict(group.server_args)
        if role in PD_ROLES:
            if isinstance(args.get(BACKEND_FLAG), str):
                ss[prefix + "backend"] = args.pop(BACKEND_FLAG)
            if isinstance(args.get(IB_FLAG), str):
                ss[prefix + "ib"] = args.pop(IB_FLAG)
        ss[prefix + "other"] = flags_yaml(args)


# --- reading the editor ------------------------------------------------------------------
def _group_mapping(role: str, lang: str) -> tuple[dict[str, Any], list[str]]:
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
    other, problems = parse_role_flags(str(ss[prefix + "other"]), role, lang)
    problems += [t("build.topo.flag_twice", lang, role=role_name(role, lang), flag=flag)
                 for flag in sorted(set(other) & set(args))]
    group["server_args"] = {**args, **other}
    ids, id_problems = parse_gpu_ids(str(ss[prefix + "gpu_ids"]), role, count, gpus, lang)
    if ids is not None:
        group["gpu_ids"] = ids
    return group, problems + id_problems


def topology_mapping(lang: str) -> tuple[dict[str, Any], list[str]]:
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
        group, role_problems = _group_mapping(role, lang)
        mapping[GROUP_FIELD[role]] = group
        problems += role_problems
    return mapping, problems


# --- the widgets -------------------------------------------------------------------------
def _sweep_max() -> int | None:
    return highest_concurrency(str(st.session_state.get("b.concurrency", "")))


def _router_fields(kind: str, lang: str) -> None:
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


def _pd_fields(prefix: str, box: Any, schema: Schema, lang: str) -> None:
    """A PD role's transfer backend (typed from the schema) and InfiniBand device."""
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


def _role_fields(role: str, box: Any, schema: Schema, lang: str) -> None:
    prefix = f"b.topo.{role}."
    box.markdown(f"**{t(f'build.topo.group_{role}', lang)}**")
    c1, c2 = box.columns(2)
    c1.number_input(t("build.topo.count", lang), min_value=1, max_value=MAX_SERVERS_PER_ROLE, step=1,
                    key=prefix + "count")
    c2.number_input(t("build.topo.gpus_per_server", lang), min_value=1, max_value=64, step=1, key=prefix + "gpus")
    if role in PD_ROLES:
        _pd_fields(prefix, box, schema, lang)
    box.text_input(t("build.topo.gpu_ids", lang), key=prefix + "gpu_ids", placeholder="0,1;2,3",
                   help=t("build.topo.gpu_ids_help", lang))
    box.text_area(t("build.topo.other_flags", lang), key=prefix + "other", height=90,
                  placeholder="mem-fraction-static: 0.8\nchunked-prefill-size: 4096",
                  help=t("build.topo.other_flags_help", lang))


def _editor(schema: Schema, lang: str) -> None:
    """The kind and, beyond one server, the router's and each role's fields."""
    topology_mapping(lang)  # fills the editor's defaults
    localised_choice(st.radio, t("build.topo.kind", lang), KINDS, "b.topo.kind", lang, horizontal=True,
                     format_func=lambda k: t(f"build.topo.kind_{k}", lang), help=t("build.topology_help", lang))
    kind: str = st.session_state["b.topo.kind"]
    st.caption(t(f"build.topo.why_{kind}", lang))
    if kind != "aggregated":
        _router_fields(kind, lang)
        for column, role in zip(st.columns(len(ROLES[kind])), ROLES[kind], strict=True):
            _role_fields(role, column.container(border=True), schema, lang)


def _drawing(topology: Topology, problems: list[str], base_args: dict[str, Any], gpu_count: int, lang: str) -> None:
    """The drawing, the server table, every problem, and a PD backend mismatch."""
    slots = layout(topology, base_args, gpu_count)
    layout_issues = layout_problems(topology, base_args, gpu_count)
    # Drawn only while open, and open at first only beyond one server: Graphviz's engine
    # (WebAssembly) cost a fresh tab 0.35-0.45 s of main-thread script (Chromium's
    # Performance metrics, this page, here) to draw one server's box, which the table below
    # lists as well.  One state per kind, so a router or PD topology opens drawn.
    box = opened_expander(t("build.topo.drawing", lang), DRAWING_OPEN.format(kind=topology.kind),
                          expanded=topology.kind != "aggregated")
    if box is not None:
        with box:
            cap = topology.router_max_concurrent_requests or _sweep_max()  # the drawing's router label
            st.graphviz_chart(topology_dot(topology, slots, slots_named_in(slots, layout_issues), cap, lang))
    st.caption(t("build.topo.gpu_use", lang, used=gpus_in_use(slots), total=gpu_count) + " "
               + t("build.topo.ports_note", lang))
    st.table(server_rows(slots, base_args, lang), hide_index=True)
    for line in problems + layout_issues:
        st.error(line, icon=":material/error:")
    if topology.kind == "pd":
        backends = {role: kv_backend(topology.groups()[i][1].server_args) for i, role in enumerate(PD_ROLES)}
        if backends["prefill"] != backends["decode"]:
            st.warning(t("build.topo.backend_mismatch", lang, **backends), icon=":material/warning:")


def topology_section(schema: Schema, base_args: dict[str, Any], gpu_count: int, lang: str
                     ) -> tuple[dict[str, Any], list[str]]:
    """The editor, then the drawing; returns the plan's topology mapping and the editor's problems.
    ``base_args`` are the plan-wide flags and ``gpu_count`` the plan's GPUs."""
    st.subheader(t("build.topology", lang))
    _editor(schema, lang)
    mapping, problems = topology_mapping(lang)
    try:
        topology = Topology.model_validate(mapping)
    except ValidationError as exc:
        for line in problems + readable_problems(problems_from_validation(exc), lang):
            st.error(line, icon=":material/error:")
        return mapping, problems
    _drawing(topology, problems, base_args, gpu_count, lang)
    return mapping, problems
