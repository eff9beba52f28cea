"""Import results measured outside benchdeck: bench_serving JSONL from any SGLang version or
an AIPerf export.  Upload, preview (runs, points, conditions detected and unknown, problems
per line), state what the files do not say, confirm.  One file = one transaction; a file
imported before is detected by its content hash."""

from __future__ import annotations

import io
import re
from typing import Any

import pandas as pd
import streamlit as st
from pydantic import ValidationError

from db import DuplicateImport
from db.imported_runs import import_file
from domain.core.i18n import t
from domain.importer import ImportPreview, LineProblem, preview_import
from domain.importer.conditions import ImportConditions
from domain.importer.records import safe_file_name
from domain.importer.shapes import NOT_A_FORMAT
from domain.plan.presets import GPUS
from pages.parts.auth import current_actor
from pages.parts.common import clear_run_caches, current_language, db_guard, store

lang = current_language()
st.title(t("imports.title", lang))
st.caption(t("imports.help", lang))


def preview_table(preview: ImportPreview) -> pd.DataFrame:
    return pd.DataFrame([{
        t("imports.run", lang): f"#{run.index + 1}",
        t("imports.points", lang): len(run.points),
        "concurrency": ", ".join(str(c) for c in run.concurrencies),
        t("imports.detected", lang): ", ".join(sorted(run.detected)),
        t("imports.unknown", lang): ", ".join(sorted(run.unknown)),
        t("imports.server_info", lang): t("imports.from_file", lang) if run.server else "—",
    } for run in preview.runs])


def problems_table(problems: list[LineProblem]) -> pd.DataFrame:
    return pd.DataFrame([{t("imports.line", lang): p.line or "—", t("imports.problem", lang): p.text(lang)}
                         for p in problems])


def conditions_form() -> ImportConditions | None:
    with st.form("imports.conditions"):
        st.markdown(f"**{t('imports.state', lang)}**")
        c1, c2, c3 = st.columns(3)
        model = c1.text_input(t("col.model", lang), placeholder=t("imports.unknown_value", lang))
        unknown = t("imports.unknown_value", lang)
        gpu_type = c2.selectbox(t("build.gpu_type", lang), [None, *GPUS], format_func=lambda v: v or unknown)
        gpu_count = c3.number_input(t("build.gpu_count", lang), min_value=1, max_value=512, value=None,
                                    placeholder=t("imports.unknown_value", lang))
        engine = c1.selectbox(t("build.engine", lang), [None, "sglang", "vllm", "trt-llm", "dynamo", "other"],
                              format_func=lambda v: v or unknown)
        version = c2.text_input(t("imports.engine_version", lang), placeholder=t("imports.unknown_value", lang))
        dataset = c3.text_input(t("build.dataset", lang), placeholder=t("imports.unknown_value", lang))
        warmup = c1.number_input(t("build.warmup", lang), min_value=0, max_value=100_000, value=None,
                                 placeholder=t("imports.unknown_value", lang))
        command = st.text_area(t("imports.server_command", lang), placeholder="python -m sglang.launch_server ...")
        confirmed = st.form_submit_button(t("imports.confirm", lang), type="primary")
    if not confirmed:
        return None
    try:
        return ImportConditions(model=model or None, gpu_type=gpu_type, gpu_count=int(gpu_count) if gpu_count else None,
                                engine=engine,  # type: ignore[arg-type]  # one of the listed engines
                                engine_version=version or None, server_command=command or None,
                                dataset=dataset or None, warmup=int(warmup) if warmup is not None else None)
    except (ValidationError, ValueError) as exc:
        st.error(t("imports.bad_statement", lang) + f"\n\n{exc}")
        return None


# Browsers send a file name in multipart/form-data with '"', LF and CR percent-encoded (the
# HTML standard's multipart/form-data encoding); Streamlit passes the name on as sent.
_MULTIPART_ESCAPES = {"%22": '"', "%0A": "\n", "%0D": "\r"}


def upload_name(upload: Any) -> str:
    """The name of the file as the user's system has it (its control characters are
    dropped later, by safe_file_name)."""
    name = str(upload.name)
    for escaped, char in _MULTIPART_ESCAPES.items():
        name = name.replace(escaped, char)
    return name


def kind_label(preview: ImportPreview) -> str:
    """The file's format; a file that turned out to be none of them is not called JSONL."""
    if any(p.code in NOT_A_FORMAT for p in preview.problems):
        return t("import.kind.unrecognised", lang)
    return t("import.kind." + preview.source_kind, lang)


def _md(text: str) -> str:
    """An upload's name inside a Markdown message, shown as typed: every ASCII punctuation
    character backslash-escaped (CommonMark), so ``[x](y)``, ``**``, ``:red[...]`` or HTML
    in a file name stay text."""
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", text)


def do_import(files: list[Any], previews: list[ImportPreview], stated: ImportConditions) -> None:
    for upload, preview in zip(files, previews, strict=True):
        if not preview.importable:
            continue  # its problems are shown above; nothing to write, nothing to log
        name = _md(safe_file_name(upload_name(upload)))
        try:
            with db_guard(lang) as guard:
                result = import_file(store(), io.BytesIO(upload.getvalue()), stated, actor=current_actor(),
                                     file_name=upload_name(upload), preview=preview)
        except DuplicateImport as exc:
            st.warning(t("imports.duplicate", lang, file=name, runs=", ".join(f"#{r}" for r in exc.run_ids)))
            continue
        if guard.failed:
            return
        if result.refused:
            st.warning(t("imports.refused", lang, file=name))
            continue
        clear_run_caches()
        st.success(t("imports.done", lang, file=name, runs=", ".join(f"#{r}" for r in result.run_ids),
                     points=result.points))
        for run_id in result.run_ids:
            st.page_link("pages/run.py", label=f"#{run_id}", query_params={"run": str(run_id)})


files = st.file_uploader(t("imports.upload", lang), type=["jsonl", "json", "csv", "yaml", "yml"],
                         accept_multiple_files=True)
previews: list[ImportPreview] = []
for upload in files or []:
    preview = preview_import(io.BytesIO(upload.getvalue()), file_name=upload_name(upload))
    previews.append(preview)
    st.subheader(f"{_md(safe_file_name(upload_name(upload)))} · {kind_label(preview)}")
    st.caption(t("imports.summary", lang, runs=len(preview.runs), points=sum(len(r.points) for r in preview.runs),
                 problems=len(preview.problems), sha=preview.sha256[:12]))
    if preview.runs:
        st.dataframe(preview_table(preview), hide_index=True, width="stretch")
    whole_file = [p for p in preview.problems if p.line == 0]
    if not preview.importable and whole_file:
        # What the file is and what was expected, in one sentence; its per-line problems follow.
        st.error(whole_file[-1].text(lang), icon=":material/block:")
    line_problems = [p for p in preview.problems if p.line != 0 or preview.importable]
    if line_problems:
        st.dataframe(problems_table(line_problems), hide_index=True, width="stretch")
if any(p.importable for p in previews):
    statement = conditions_form()
    if statement is not None:
        do_import(list(files or []), previews, statement)
elif previews:
    st.info(t("imports.nothing_importable", lang))
