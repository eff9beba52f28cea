"""benchdeck's Streamlit entry point: the frame (language, identity) and the navigation.

Run with ``make run`` (scripts/serve_app.py).  Pages live in pages/ and only arrange what
db/ and domain/ return; they never start processes.
"""

from pathlib import Path

import streamlit as st

from domain.core.access import Action, permits
from domain.core.i18n import t
from pages.parts.auth import gate
from pages.parts.common import current_language, language_switch

# The tab's icon is a file served by the app itself: a ":material/…:" icon is fetched from
# fonts.gstatic.com by the browser, which a GPU host off the internet never answers.
FAVICON = Path(__file__).resolve().parent / "pages" / "assets" / "favicon.png"
st.set_page_config(page_title="benchdeck", page_icon=str(FAVICON), layout="wide")

language_switch()
lang = current_language()
actor = gate(lang)  # stops here, with the reason, for a session without identity or role
may_write = permits(actor, Action.SUBMIT)

# Pages follow the role: viewers get no pages whose only purpose is to write, admins get
# the audit log.  db/ still checks every write.
pages = {
    t("nav.section_run", lang): [
        st.Page("pages/overview.py", title=t("nav.overview", lang), icon=":material/home:", default=True),
        st.Page("pages/build.py", title=t("nav.build", lang), icon=":material/add_circle:"),
        st.Page("pages/runs.py", title=t("nav.runs_page", lang), icon=":material/list:"),
        st.Page("pages/run.py", title=t("nav.run_detail", lang), icon=":material/description:"),
        *([st.Page("pages/queue_plan.py", title=t("nav.queue_plan", lang), icon=":material/upload_file:")]
          if may_write else []),
    ],
    t("nav.section_analyse", lang): [
        st.Page("pages/compare.py", title=t("nav.compare", lang), icon=":material/compare_arrows:"),
        st.Page("pages/checklist.py", title=t("nav.checklist", lang), icon=":material/checklist:"),
        st.Page("pages/history.py", title=t("nav.history", lang), icon=":material/timeline:"),
        st.Page("pages/tune.py", title=t("nav.tune", lang), icon=":material/tune:"),
        *([st.Page("pages/imports.py", title=t("nav.imports", lang), icon=":material/upload:")]
          if may_write else []),
    ],
}
if permits(actor, Action.VIEW_AUDIT):
    pages[t("nav.section_admin", lang)] = [
        st.Page("pages/audit.py", title=t("nav.audit", lang), icon=":material/policy:"),
    ]
st.navigation(pages).run()
