"""Page logic through Streamlit's AppTest, against a real DuckDB file per test."""

from __future__ import annotations

from pathlib import Path

import filelock
from streamlit.testing.v1 import AppTest

from db import Store
from db.connection import lock_path_for
from tests.conftest import ROOT
from tests.support.actors import admin

APP = str(ROOT / "app.py")


def _build_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("pages/build.py").run()
    assert not at.exception
    return at


def _number(at: AppTest, label: str):
    return next(n for n in at.number_input if n.label == label)


def _submit(at: AppTest) -> None:
    next(b for b in at.button if b.label == "Queue this run").click().run()


def test_overview_empty_state(app_env: Path) -> None:
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert any("The queue is empty" in info.value for info in at.info)


def test_validation_message_shows_beside_the_edit_and_blocks_submit(app_env: Path) -> None:
    at = _build_page()
    assert not at.error
    _number(at, "--max-running-requests").set_value(-5).run()
    assert any("--max-running-requests -5 is out of range" in e.value for e in at.error)
    _submit(at)
    assert any("Refused" in e.value for e in at.error)
    assert Store(app_env).list_runs() == []


def test_submit_is_idempotent_per_form_instance(app_env: Path) -> None:
    at = _build_page()
    at.session_state["build.idempotency_key"] = "one-form"
    _submit(at)
    assert [r.id for r in Store(app_env).list_runs()] == [1]
    at.switch_page("pages/build.py").run()
    at.session_state["build.idempotency_key"] = "one-form"  # the same submission arriving twice
    _submit(at)
    assert [r.id for r in Store(app_env).list_runs()] == [1]
    entries = Store(app_env).audit_entries(reader=admin())
    assert [e.action for e in entries] == ["submit"] and entries[0].actor


def test_busy_when_the_db_lock_is_held_elsewhere(app_env: Path) -> None:
    Store(app_env).migrate()
    with filelock.FileLock(str(lock_path_for(app_env))):
        at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert any("busy" in w.value for w in at.warning)


def test_runs_page_summarises_runner_health_and_names_each_problem(app_env: Path) -> None:
    store = Store(app_env)
    store.migrate()
    store.register_runner("gpu-a", host="a", gpu_type="H200", gpu_count=8, sglang_version="0.5.23", healthy=True,
                          unhealthy_reason=None, info={})
    store.register_runner("ray:b:1234abcd", host="b", gpu_type="H100", gpu_count=8, sglang_version=None,
                          healthy=False, unhealthy_reason="disk full: /data 100% used", info={"executor": "ray"})
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("pages/runs.py").run()
    assert not at.exception
    assert any("2 hosts: 1 healthy, 1 unhealthy, 0 offline (8 GPUs on healthy hosts)" in c.value for c in at.caption)
    assert any("ray:b:1234abcd (b)" in w.value and "disk full" in w.value for w in at.warning)
