"""Queue a plan: paste or upload plan YAML, see it validated, submit it through a form.

Submission is idempotent: the form carries a key generated once per form instance, so a
double click queues one run.  The full build form arrives with the pages issue."""

import uuid

import streamlit as st

from domain.core.i18n import t
from domain.core.settings import get_settings
from domain.plan.checks import check_plan
from domain.plan.plan_io import PlanError, dump_plan, load_plan
from domain.plan.presets import quick_demo_plan
from domain.plan.quotas import QuotaExceeded
from pages.parts.auth import current_actor
from pages.parts.common import cached_counts, cached_runs, current_language, db_guard, store

lang = current_language()
settings = get_settings()
SUBMIT_KEY = "queue_plan.idempotency_key"
TEXT_KEY = "queue_plan.text"

st.title(t("queue.heading", lang))
st.caption(t("queue.help", lang))


if SUBMIT_KEY not in st.session_state:
    st.session_state[SUBMIT_KEY] = uuid.uuid4().hex
if st.button(t("queue.quick", lang)):
    st.session_state[TEXT_KEY] = dump_plan(quick_demo_plan(settings.runner_gpu_type))
uploaded = st.file_uploader(t("queue.upload", lang), type=["yaml", "yml"])
if uploaded is not None:
    st.session_state[TEXT_KEY] = uploaded.getvalue().decode("utf-8", errors="replace")

with st.form("queue_plan"):
    text = st.text_area(t("queue.text", lang), key=TEXT_KEY, height=360)
    submitted = st.form_submit_button(t("queue.submit", lang), type="primary")

if submitted:
    try:
        plan = load_plan(text, max_bytes=settings.max_plan_bytes)
        report = check_plan(plan, settings, lang)
    except PlanError as exc:
        st.error(t("queue.refused", lang) + "\n\n" + "\n".join(f"- {p.text(lang)}" for p in exc.problems))
    else:
        for warning in report.warnings:
            st.warning(warning)
        if report.errors:
            st.error(t("queue.refused", lang) + "\n\n" + "\n".join(f"- {e}" for e in report.errors))
        else:
            with db_guard(lang):
                try:
                    run_id, created = store().submit_run(
                        plan, submitted_by=current_actor(), idempotency_key=st.session_state[SUBMIT_KEY]
                    )
                except QuotaExceeded as exc:
                    st.error(exc.text(lang))
                else:
                    cached_runs.clear()
                    cached_counts.clear()
                    st.success(t("queue.queued" if created else "queue.duplicate", lang, run_id=run_id))
                    st.caption(t("queue.points_summary", lang, points=len(plan.points()),
                                 requests=plan.total_requests()))
