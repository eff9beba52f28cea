"""One run in detail (``?run=N``): configuration, resolved server args, start-up facts and
host, the log tail and a readable failure, per-point metrics as they arrive with a small
live chart, telemetry sparklines, and the actions (cancel, re-run, duplicate, compare)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import streamlit as st
from pydantic import ValidationError

from db import LostRace
from db.rows import AttemptRow, PointRow, RunRow, TelemetryRow
from domain.core.access import Action, PermissionDenied
from domain.core.i18n import t
from domain.core.markdown import streamlit_md_text
from domain.core.settings import get_settings
from domain.importer.records import is_imported_plan
from domain.plan.claimability import waiting_reason
from domain.plan.plan_io import dump_plan
from domain.plan.presets import GPUS
from domain.plan.quotas import QuotaExceeded
from domain.plan.run_plan import RunPlan
from domain.render.charts import telemetry_sparklines
from domain.results import energy
from pages.parts.auth import can, current_actor
from pages.parts.common import (
    cached_runners,
    clear_run_caches,
    current_language,
    db_guard,
    opened_expander,
    show_denied,
    source_label,
    store,
)
from pages.parts.run_charts import points_chart_data, points_picture, show_picture
from pages.parts.run_gaps import finished_attempt_gap_lists, finished_attempt_gap_picture, finished_attempt_gaps
from pages.parts.watch_controls import watch_controls

lang = current_language()

HINT_KEYS = {
    "oom": "run.hint_oom", "bad_args": "run.hint_bad_args", "startup_timeout": "run.hint_startup_timeout",
    "server_crash": "run.hint_server_crash", "bench_failed": "run.hint_bench_failed",
    "bad_output": "run.hint_bad_output", "runner_lost": "run.hint_runner_lost",
    "host_unhealthy": "run.hint_host_unhealthy", "disk_full": "run.hint_disk_full", "nccl": "run.hint_nccl",
}
POINT_COLUMNS = {
    "scenario": "scenario", "concurrency": "concurrency", "repeat_idx": "repeat",
    "output_throughput": "output tok/s", "total_throughput": "total tok/s", "request_throughput": "QPS",
    "ttft_median_ms": "TTFT p50 (ms)", "ttft_p99_ms": "TTFT p99 (ms)", "tpot_median_ms": "TPOT p50 (ms)",
    "tpot_p99_ms": "TPOT p99 (ms)", "itl_median_ms": "ITL p50 (ms)", "itl_p99_ms": "ITL p99 (ms)",
    "e2e_median_ms": "E2E p50 (ms)", "e2e_p99_ms": "E2E p99 (ms)", "completed": "completed",
    "requested": "requested", "achieved_concurrency": "achieved conc.",
}
# Throughputs and latencies to a tenth, QPS to a hundredth: the stored values carry four
# or more decimals that no reader of this table can use.
POINT_FORMATS = {**{name: "%.1f" for name in ("output tok/s", "total tok/s", "achieved conc.")},
                 **{name: "%.1f" for name in POINT_COLUMNS.values() if name.endswith("(ms)")}, "QPS": "%.2f"}

# The energy columns (domain/results/energy.py): J/output token, J/request, and its validity in words.
ENERGY_CELLS = {"compare.metric.j_per_token": "%.3f", "compare.metric.j_per_request": "%.1f", "slides.col.energy": None}


def _run_id() -> int | None:
    raw = st.query_params.get("run")
    return int(raw) if raw and raw.isdigit() else None


def actions(run: RunRow) -> None:
    """The actions that apply to this run, side by side with no empty slot: compare always;
    cancel while it is queued or running; re-run and "queue a variant" for a run benchdeck
    launched (an import was measured elsewhere), each only for whom may."""
    owner, imported = run.submitted_by, is_imported_plan(run.plan)
    drawn: list[Callable[[Any], None]] = [lambda column: compare_control(column, run)]
    if not imported and run.status in ("queued", "running") and can(Action.CANCEL, owner=owner):
        drawn.append(lambda column: cancel_control(column, run))
    if not imported and can(Action.RERUN, owner=owner):
        drawn.append(lambda column: rerun_control(column, run))
    if not imported:
        drawn.append(lambda column: column.page_link(
            "pages/build.py", label=t("run.duplicate", lang), icon=":material/content_copy:",
            query_params={"from_run": str(run.id)}))
    for column, draw in zip(st.columns(len(drawn)), drawn, strict=True):
        draw(column)
    if not imported and not can(Action.CANCEL, owner=owner) and not can(Action.RERUN, owner=owner):
        st.caption(t("auth.only_own_runs", lang))


def rerun_control(column: Any, run: RunRow) -> None:
    if not column.button(t("run.rerun", lang), icon=":material/replay:"):
        return
    plan = RunPlan.model_validate_json(run.plan)
    # One re-run per click: the key changes only after a successful submit.
    nonce = st.session_state.setdefault("rerun_nonce", 0)
    try:
        new_id, _ = store().submit_run(plan, submitted_by=current_actor(), rerun_of=run.id,
                                      idempotency_key=f"rerun:{run.id}:{nonce}")
    except QuotaExceeded as exc:
        st.error(exc.text(lang))
        return
    except PermissionDenied as exc:
        show_denied(exc, lang)
        return
    st.session_state["rerun_nonce"] = nonce + 1
    clear_run_caches()
    st.switch_page("pages/run.py", query_params={"run": str(new_id)})


def compare_control(column: Any, run: RunRow) -> None:
    """"Compare with…" asks which side this run takes: the baseline the others are measured
    against, or one of the compared runs (the compare page then asks for the baseline)."""
    with column.popover(t("run.compare", lang), icon=":material/compare_arrows:"):
        st.page_link("pages/compare.py", label=t("run.compare_as_baseline", lang, run_id=run.id),
                     query_params={"baseline": str(run.id), "lang": lang})
        st.page_link("pages/compare.py", label=t("run.compare_as_other", lang, run_id=run.id),
                     query_params={"runs": str(run.id), "lang": lang})


def cancel_control(column: Any, run: RunRow) -> None:
    """Cancel asks first (a popover with the consequence and a second button): a stray
    click on a running sweep would otherwise throw away its remaining points."""
    with column.popover(t("runs.cancel", lang), icon=":material/cancel:"):
        st.caption(t("run.cancel_confirm", lang, run_id=run.id))
        if not st.button(t("run.cancel_yes", lang, run_id=run.id), type="primary", key="run.cancel_yes"):
            return
    try:
        store().cancel_run(run.id, actor=current_actor())
        st.toast(t("runs.cancel_requested", lang, run_id=run.id))
    except LostRace:
        st.warning(t("runs.too_late", lang, run_id=run.id))
    except PermissionDenied as exc:
        show_denied(exc, lang)
    clear_run_caches()


def fill_in(run: RunRow) -> None:
    """An imported run's unknown facts, stated later: a new configuration version."""
    unknown = [k for k in ("model", "gpu_type", "gpu_count", "engine", "engine_version") if getattr(run, k) is None]
    if run.source != "imported" or not unknown or not can(Action.FILL_IN, owner=run.submitted_by):
        return
    with st.expander(t("run.fill_in", lang, fields=", ".join(unknown))), st.form("run.fill_in"):
        facts: dict[str, Any] = {}
        for name in unknown:
            if name == "gpu_count":
                facts[name] = st.number_input(name, min_value=1, max_value=512, value=None)
            elif name == "gpu_type":
                facts[name] = st.selectbox(name, [None, *GPUS])
            elif name == "engine":
                facts[name] = st.selectbox(name, [None, "sglang", "vllm", "trt-llm", "dynamo", "other"])
            else:
                facts[name] = st.text_input(name) or None
        if st.form_submit_button(t("run.fill_in_submit", lang)):
            try:
                new_id = store().fill_in_imported(run.id, facts, actor=current_actor())
            except LostRace:
                st.warning(t("runs.too_late", lang, run_id=run.id))
            except PermissionDenied as exc:
                show_denied(exc, lang)
            else:
                st.success(t("run.filled_in", lang, config=new_id))
                clear_run_caches()


def _source_badge(run: RunRow) -> str:
    """The source as its badge says it: an import of emulator output is both."""
    if run.source == "emulated" and is_imported_plan(run.plan):
        return t("run.source_imported_emulated", lang).upper()
    return source_label(run.source, lang)


def _facts_line(run: RunRow) -> str:
    """Model, GPUs, engine and who submitted it; unknown facts say so (never "None"), and
    an emulated run's GPU is marked as emulated wherever its type came from."""
    unknown = t("run.unknown_value", lang)
    gpu = f"{run.gpu_count or unknown}×{run.gpu_type or unknown}"
    if run.source == "emulated":
        gpu = t("run.gpu_emulated", lang, gpu=gpu)
    engine = " ".join(v for v in (run.engine, run.engine_version) if v) or unknown
    declared = _declared(run)
    if declared is not None:  # engine: external: nothing here was launched or seen by benchdeck
        gpu = t("run.declared_value", lang, value=gpu)
        engine = t("run.declared_engine", lang, engine=" ".join(
            str(v) for v in (declared.get("engine"), declared.get("version")) if v), endpoint=declared.get("endpoint"))
        return " · ".join((t("run.declared_value", lang, value=run.model or unknown), gpu, engine, run.submitted_by))
    return " · ".join((run.model or unknown, gpu, engine, run.submitted_by))


def _declared(run: RunRow) -> dict[str, object] | None:
    """An external run's declared engine, version and endpoint (the plan's ``external``)."""
    if run.engine != "external" or not run.plan:
        return None
    external = json.loads(run.plan).get("external")
    return external if isinstance(external, dict) else None


def header(run: RunRow) -> None:
    # A name is any text: shown as typed (escaped for Markdown, no HTML).  A heading is
    # Markdown with Streamlit's directives (":red[x]" colours x), so ':' is escaped too.
    st.header(f"#{run.id} {streamlit_md_text(run.name).replace(':', chr(92) + ':')}", anchor=False)
    badge = {"succeeded": "green", "failed": "red", "cancelled": "gray", "running": "blue", "queued": "orange"}
    st.markdown(f":{badge[run.status]}-badge[{t('status.' + run.status, lang)}] "
                f":{'violet' if run.source != 'measured' else 'green'}-badge[{_source_badge(run)}]")
    st.text(_facts_line(run))
    if is_imported_plan(run.plan):
        st.caption(t("run.imported_note", lang))
    if run.source == "emulated":
        st.caption(t("run.imported_emulated_note" if is_imported_plan(run.plan) else "overview.emulated_note", lang))
    if _declared(run) is not None:
        st.caption(t("run.declared_note", lang))


def failure(attempt: AttemptRow) -> None:
    kind = attempt.failure_kind
    if attempt.status == "failed" and kind:
        st.error(f"**{kind}** — {attempt.message}\n\n{t(HINT_KEYS.get(kind, 'run.hint_generic'), lang)}",
                 icon=":material/error:")
    elif attempt.status == "cancelled":
        st.warning(attempt.message or t("status.cancelled", lang), icon=":material/cancel:")


def points_section(points: list[PointRow], run: RunRow, telemetry: list[TelemetryRow]) -> None:
    st.subheader(t("run.points", lang, done=len(points), total=run.total_points))
    if not points:
        st.caption(t("run.no_points", lang))
        return
    frame = pd.DataFrame(points)[list(POINT_COLUMNS)].rename(columns=POINT_COLUMNS)
    # Which host ran each point (a Ray node, or this runner host); imported points: unknown.
    frame[t("run.col_host", lang)] = [json.loads(p.timing or "{}").get("host") or "—" for p in points]
    power = energy.power_by_point(telemetry)
    cells = [energy.stored_point_energy(p, power.get(p.id), run.source, run.engine, lang) for p in points]
    for position, key in enumerate(ENERGY_CELLS):
        frame[t(key, lang)] = [cell[position] for cell in cells]
    formats = {**POINT_FORMATS, **{t(key, lang): fmt for key, fmt in ENERGY_CELLS.items() if fmt}}
    st.dataframe(frame, hide_index=True, width="stretch",
                 column_config={name: st.column_config.NumberColumn(format=fmt) for name, fmt in formats.items()})
    show_picture(points_picture(points_chart_data(points)), t("run.points_chart_alt", lang))
    st.caption(t("run.pictures_note", lang))


def telemetry_section(attempt: AttemptRow, telemetry: list[TelemetryRow]) -> None:
    st.subheader(t("run.telemetry", lang))
    unavailable = [row for row in telemetry if row.metric == "unavailable"]
    if unavailable:
        st.caption(t("run.gpu_unavailable", lang, reason=unavailable[0].note))
    directory = attempt.telemetry_dir
    files = sorted(Path(directory).glob("*.parquet")) if directory and Path(directory).is_dir() else []
    if not files:
        st.caption(t("run.no_telemetry", lang))
        return
    samples = pd.concat([pq.read_table(f).to_pandas() for f in files[-8:]], ignore_index=True)
    samples = samples[~samples["warmup"]]
    samples["t"] = samples["ts"] - samples["ts"].min()
    # Still a Vega chart: a point's samples at 4 Hz soon pass 5,000 rows, which vl-convert
    # draws in seconds (and Altair's default transformer refuses), redrawn every 2 s while
    # the run goes on; Streamlit sends the frame as Arrow and the browser draws it.
    st.altair_chart(telemetry_sparklines(samples))
    st.caption(t("run.telemetry_note", lang))


def plan_section(run: RunRow) -> None:
    """The plan as YAML; an imported run has none (its conditions come from the file)."""
    if is_imported_plan(run.plan):
        return
    try:
        plan = RunPlan.model_validate_json(run.plan)
    except ValidationError as exc:  # a plan stored by an older version: the page still shows the run
        st.caption(t("run.plan_unreadable", lang, detail=f"{exc.error_count()} error(s)"))
        return
    if (box := opened_expander(t("run.configuration", lang), f"run.{run.id}.configuration")) is not None:
        with box:
            st.code(dump_plan(plan), language="yaml")


def facts_section(run: RunRow, attempt: AttemptRow | None) -> None:
    plan_section(run)
    if attempt is None:
        return
    facts = json.loads(attempt.startup_facts or "{}")
    topology = facts.pop("topology", None)
    roles = facts.pop("roles", None)
    if topology:
        topology_section(topology, roles or {}, attempt.id)
    elif attempt.server_argv:
        if (box := opened_expander(t("run.command", lang), f"run.{attempt.id}.command")) is not None:
            with box:
                st.code(" ".join(json.loads(attempt.server_argv)), language="bash", wrap_lines=True)
    if facts:
        info = facts.pop("server_info", {})
        cols = st.columns(4)
        cols[0].metric("max_total_num_tokens", f"{facts.get('max_total_num_tokens', '—'):,}"
                       if isinstance(facts.get("max_total_num_tokens"), int) else "—")
        cols[1].metric(t("run.ready_in", lang), f"{facts.get('seconds_to_ready', 0):.1f} s")
        cols[2].metric(t("run.weight_load", lang), f"{facts.get('load_weight_elapsed_s', 0):.1f} s")
        cols[3].metric(t("run.weights_gb", lang), f"{facts.get('weight_mem_gb', 0):.1f} GB")
        if (box := opened_expander(t("run.startup_facts", lang), f"run.{attempt.id}.facts")) is not None:
            with box:
                st.json(facts)
                st.json(info, expanded=False)
    if attempt.host_info and (box := opened_expander(t("run.host", lang), f"run.{attempt.id}.host")) is not None:
        with box:
            st.json(json.loads(attempt.host_info), expanded=1)
    # Keyed by whether the attempt failed too: a failure opens the log even if it was closed before.
    failed = attempt.status == "failed"
    if attempt.log_tail and (box := opened_expander(t("run.log_tail", lang), f"run.{attempt.id}.log.{failed}",
                                                    expanded=failed)) is not None:
        with box:
            st.code(attempt.log_tail[-8000:], language="log")


def topology_section(topology: dict[str, Any], roles: dict[str, Any], key: int) -> None:
    """A router or PD topology as launched: every member, its GPUs, ports, start-up facts
    and exact command."""
    st.subheader(t("run.topology", lang, kind=topology.get("kind", "?")))
    rows = []
    for member in topology.get("members", []):
        role_facts = roles.get(member["name"], {})
        rows.append({
            t("run.col_member", lang): member["name"], t("run.col_role", lang): member["role"],
            "GPUs": ",".join(map(str, member.get("gpu_ids") or [])) or "—",
            t("run.col_ports", lang): ", ".join(f"{k} {v}" for k, v in (member.get("ports") or {}).items()),
            "max_total_num_tokens": role_facts.get("max_total_num_tokens"),
            t("run.ready_in", lang): role_facts.get("seconds_to_ready"),
        })
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    if (box := opened_expander(t("run.command", lang), f"run.{key}.commands")) is not None:
        with box:
            for member in topology.get("members", []):
                st.caption(member["name"])
                st.code(" ".join(member.get("argv") or []), language="bash", wrap_lines=True)


def eta_text(finished: list[PointRow], total: int) -> str:
    """Remaining points × the median time of the finished ones (refined as points land)."""
    remaining = max(total - len(finished), 0)
    seconds = [(p.finished_at - p.started_at).total_seconds() for p in finished if p.started_at and p.finished_at]
    if not seconds:
        return t("run.eta_unknown", lang, remaining=remaining)
    median = float(pd.Series(seconds).median())
    return t("run.eta", lang, remaining=remaining, eta=_duration(median * remaining), done=len(seconds),
             median=_duration(median))


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def scaling_gap_section(run_id: int, attempt: AttemptRow) -> None:
    """"Why not N×?": each concurrency step's gap to linear scaling split into causes read
    from the run's own signals (domain/results/scaling_gap.py); shown once the run is done."""
    st.subheader(t("scaling_gap.title", lang))
    with db_guard(lang) as guard:
        gaps = finished_attempt_gaps(run_id, attempt.id, attempt.startup_facts or "")
    if guard.failed:
        return
    if gaps.empty:
        st.caption(t("scaling_gap.none", lang))
        return
    show_picture(finished_attempt_gap_picture(run_id, attempt.id, attempt.startup_facts or "", lang),
                 t("run.gap_chart_alt", lang))
    for text in finished_attempt_gap_lists(run_id, attempt.id, attempt.startup_facts or "", lang):
        st.markdown(text)
    st.caption(t("scaling_gap.method", lang))


ACTIVE = ("queued", "running")


def live(run_id: int, status_at_load: str) -> None:
    with db_guard(lang) as guard:
        run = store().get_run(run_id)
        if run is None:
            st.error(t("run.not_found", lang, run_id=run_id))
            return
        attempts = store().attempts_of(run_id)
        points = store().points_of(run_id)
        telemetry = store().telemetry_of(run_id)
        runners = cached_runners() if run.status == "queued" else []
    if guard.failed or run is None:  # None has returned above; mypy cannot see it through the guard
        return
    if status_at_load in ACTIVE and run.status not in ACTIVE:
        st.rerun(scope="app")  # the actions above the fragment (Cancel) follow the run's end
    latest = attempts[-1] if attempts else None
    # Every section sits in a container of its own, drawn on every refresh even when empty:
    # the sections after one that comes or goes (the progress bar, the failure) keep their
    # place, so the refresh that follows a run's end replaces them instead of showing the
    # old and the new copy side by side until it finishes.
    with st.container():
        header(run)
    with st.container():
        waiting = waiting_reason(run, runners, datetime.now(UTC).replace(tzinfo=None), get_settings(),
                                 lang) if run.status == "queued" else None
        if waiting is not None:
            st.warning(waiting, icon=":material/hourglass_disabled:")
    with st.container():
        if run.status == "running" and latest is not None:
            finished = [p for p in points if p.attempt_id == latest.id]
            st.progress(len(finished) / run.total_points,
                        text=t("run.progress", lang, point=latest.current_point or "—", status=latest.status))
            st.caption(eta_text(finished, run.total_points))
    with st.container():
        if latest is not None:
            failure(latest)
    with st.container():
        points_section([p for p in points if latest is None or p.attempt_id == latest.id], run, telemetry)
    with st.container():
        if latest is not None:
            telemetry_section(latest, telemetry)
    with st.container():
        if latest is not None and run.status == "succeeded":
            scaling_gap_section(run_id, latest)
    with st.container():
        facts_section(run, latest)
    with st.container():
        if len(attempts) > 1:
            with st.expander(t("run.attempts", lang, n=len(attempts))):
                st.dataframe(pd.DataFrame(attempts)[["attempt_no", "runner_id", "status", "failure_kind",
                                                     "message", "claimed_at", "finished_at"]], hide_index=True)


# A queued or running run is followed every 2 s (its end reruns the whole page, above);
# a finished run is drawn once: its attempts, points and telemetry no longer change, and a
# refresh every 2 s redrew the page (four reads, every chart) for as long as it was open.
live_refreshing = st.fragment(run_every="2s")(live)


run_id = _run_id()
if "run.flash" in st.session_state:
    st.success(st.session_state.pop("run.flash"))
if run_id is None:
    st.info(t("run.pick", lang))
    st.page_link("pages/runs.py", label=t("nav.runs_page", lang), icon=":material/list:")
else:
    with db_guard(lang) as guard:
        current = store().get_run(run_id)
    if guard.failed:
        st.stop()
    if current is not None:
        actions(current)
        if not is_imported_plan(current.plan):  # a watch re-runs a configuration: an import has none to run
            watch_controls(current)
        fill_in(current)
    status = current.status if current is not None else ""
    (live_refreshing if status in ACTIVE else live)(run_id, status)
