"""The build form's list of the models on this host's disk (domain/plan/local_models.py):
each with what its config.json says; picking one puts its name (an HF cache entry's id, the
server then reads it offline from the cache) or its path into the model field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from domain.core.i18n import t
from domain.plan.local_models import LocalModel, find_models

LIST_TTL_S = 60  # a scan reads every model's config.json and sizes its files


@st.cache_data(ttl=LIST_TTL_S, show_spinner=False)
def cached_local_models(dirs: tuple[str, ...]) -> list[LocalModel]:
    return find_models([Path(d) for d in dirs])


def _reference(model: LocalModel) -> str:
    """What a plan names: the HF id for a cache entry (found again at launch), else the path."""
    return model.name if model.path.parent.name == "snapshots" else str(model.path)


def _use(key: str) -> None:
    chosen = st.session_state.get(key)
    if chosen:
        st.session_state["b.model"] = chosen


def local_models_section(container: Any, dirs: list[Path], lang: str) -> None:
    models = cached_local_models(tuple(str(d) for d in dirs))
    if not models:
        container.caption(t("build.local_models_none", lang, dirs=", ".join(map(str, dirs)) or "-"))
        return
    with container.expander(t("build.local_models", lang, n=len(models))):
        st.dataframe(pd.DataFrame([m.as_row() for m in models]), hide_index=True)
        st.selectbox(t("build.local_models_use", lang), ["", *(_reference(m) for m in models)],
                     key="b.local_model", on_change=_use, args=("b.local_model",))
