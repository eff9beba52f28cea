"""An external run's page (issue 18): model, GPUs and engine read as declared, never as
measured, in both languages (AppTest against a real DuckDB file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from db import Store
from tests.support.actors import operator
from tests.support.pages import open_page
from tests.test_external_engine import external_plan


@pytest.mark.parametrize(("lang", "declared", "note"), [
    ("en", "trt-llm 1.0.0 (declared, endpoint lab)", "benchdeck did not start"),
    ("ja", "trt-llm 1.0.0(申告、エンドポイント lab)", "benchdeck が起動していない"),
])
def test_the_run_page_says_what_was_declared(app_env: Path, lang: str, declared: str, note: str) -> None:
    store = Store(app_env)
    store.migrate()
    plan = external_plan(external={"endpoint": "lab", "engine": "trt-llm", "version": "1.0.0"})
    run_id, _ = store.submit_run(plan, submitted_by=operator("t"))
    at = open_page("run", run=str(run_id), lang=lang)
    texts = [element.value for element in at.text]
    facts = next(text for text in texts if declared in text)
    assert "H200" in facts and ("(declared)" in facts or "(申告)" in facts)
    assert any(note in caption.value for caption in at.caption)
