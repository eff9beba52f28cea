"""The path from one queued run to the next variant and its comparison: after "Queue this
run" a toast with the run's link stays in view (the form is long, and its confirmation is
at the bottom), the form keeps its values, and once a second run is queued from the same
form (or from a run's "Queue a variant"), a link compares the two.  A variant opened from a
run page focuses the first flag field, the one a variant usually changes."""

from __future__ import annotations

import streamlit as st
import streamlit.components.v1 as components

from domain.core.i18n import t

HISTORY = "build.queued_history"  # the runs this session queued from the form, oldest first
FOCUS_ONCE = "build.focus_lever"  # set by a variant link; the next form draw focuses a flag field
# The form's flag fields are labelled with the flag ("--max-running-requests"); the first one
# drawn is the first lever.  Streamlit draws widgets in its own page, not in the component's
# frame, so the script reaches its parent (same origin).
_FOCUS_SCRIPT = """<script>
const find = () => window.parent.document.querySelector('input[aria-label^="--"]');
let tries = 0;
const timer = setInterval(() => {
  const field = find();
  if (field || ++tries > 50) { clearInterval(timer); if (field) { field.focus(); field.select(); } }
}, 200);
</script>"""


def announce(run_id: int, lang: str) -> None:
    """Remember ``run_id`` and show a toast with its link that stays until closed."""
    history = st.session_state.setdefault(HISTORY, [])
    if run_id not in history:
        history.append(run_id)
    st.toast(t("variant.queued_toast", lang, run_id=run_id), icon=":material/check_circle:", duration="infinite")


def variant_of(run_id: int, loaded_from: str) -> int | None:
    """The run ``run_id`` is a variant of: the run the form was loaded from, else the run
    this session queued from the form just before it."""
    if loaded_from.startswith("run:") and loaded_from[4:].isdigit() and int(loaded_from[4:]) != run_id:
        return int(loaded_from[4:])
    history = st.session_state.get(HISTORY, [])
    earlier = history[:history.index(run_id)] if run_id in history else history
    return earlier[-1] if earlier else None


def compare_link(column: object, run_id: int, loaded_from: str, lang: str) -> None:
    """A link comparing ``run_id`` with the run it is a variant of, the older as baseline."""
    other = variant_of(run_id, loaded_from)
    if other is None:
        return
    older, newer = sorted((other, run_id))
    column.page_link("pages/compare.py", label=t("variant.compare", lang, newer=newer, older=older),  # type: ignore[attr-defined]
                     icon=":material/compare_arrows:",
                     query_params={"baseline": str(older), "runs": str(newer), "lang": lang})


def request_focus() -> None:
    st.session_state[FOCUS_ONCE] = True


def focus_first_lever() -> None:
    """Focus the form's first flag field once, after a variant link opened the form."""
    if st.session_state.pop(FOCUS_ONCE, False):
        components.html(_FOCUS_SCRIPT, height=0)
