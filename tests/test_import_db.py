"""Imports written to a real DuckDB file: one transaction per file, duplicates refused by
content hash, unknowns kept unknown, and an imported run beside an emulated one in the
comparison (the checklist lists exactly what differs or is unknown)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from db import DuplicateImport, Store
from db.imported_runs import import_file
from domain.compare.comparability import comparability_matrix, comparability_summary
from domain.importer.conditions import ImportConditions
from domain.results.frames import points_frame
from tests.conftest import ROOT
from tests.support.actors import admin, operator
from tests.support.runner_harness import run_burst, runner_env, small_plan
from tools.make_import_fixtures import ensure_fixtures

FIXTURES = ROOT / "build" / "import-fixtures"
pytestmark = pytest.mark.sglang  # the fixtures come from the real bench_serving (scripts/setup_import_fixtures.sh)


@pytest.fixture(scope="module", autouse=True)
def fixtures_exist() -> None:
    """Generated on first use if missing or stale, as the importer's own tests do."""
    assert ensure_fixtures() == FIXTURES


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", "import", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_cli_import_then_duplicate(env: dict[str, str], db_path: Path) -> None:
    first = _cli(env, str(FIXTURES / "sglang-0.5.23.jsonl"), "--gpu", "H200x1")
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["1", "2"]
    again = _cli(env, str(FIXTURES / "sglang-0.5.23.jsonl"))
    assert again.returncode == 1 and "imported already" in again.stderr
    store = Store(db_path)
    assert len(store.list_runs()) == 2 and len(store.list_imports()) == 1
    # The fixture ran against the emulator (its server_info says so): emulated, and still an import.
    assert all(r.source == "emulated" and r.plan == "{}" for r in store.list_runs())
    assert [e.action for e in store.audit_entries(reader=admin())] == ["import"]


def test_bad_statement_imports_nothing(env: dict[str, str], db_path: Path) -> None:
    done = _cli(env, str(FIXTURES / "sglang-0.5.23.jsonl"), "--sglang-version", "0.5.23",
                "--server-args", "python -m sglang.launch_server --no-such-flag 3")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert not db_path.exists() or Store(db_path).list_runs() == []


def test_unknowns_stay_unknown(store: Store) -> None:
    result = import_file(store, FIXTURES / "sglang-0.4.6.post5.jsonl", ImportConditions(), actor=operator("t"))
    frame = points_frame(p.as_dict() for p in store.points_for_comparison(result.run_ids))
    assert frame["gpu_type"].isna().all() or frame["gpu_type"].iloc[0] is None
    assert frame["warmup"].isna().all() and frame["seed"].isna().all()


def test_one_file_is_one_transaction(store: Store) -> None:
    source = FIXTURES / "sglang-0.5.23.jsonl"
    import_file(store, source, ImportConditions(), actor=operator("t"))
    with pytest.raises(DuplicateImport):
        import_file(store, source, ImportConditions(), actor=operator("t"))
    assert len(store.list_runs()) == 2  # the refused second import left nothing


@pytest.mark.slow
def test_imported_beside_emulated_in_checklist_and_compare(store: Store, env: dict[str, str], db_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    store.submit_run(small_plan(name="emulated", benchmark={
        "scenarios": [{"name": "in64-out32", "input_len": 64, "output_len": 32}],
        "concurrency": [1, 2, 4], "num_prompts": "3x", "warmup": "1x"}), submitted_by=operator("t"))
    assert run_burst(runner_env(env)) == 0
    [imported, _] = import_file(store, FIXTURES / "sglang-0.5.23.jsonl",
                                ImportConditions(gpu_type="H200", gpu_count=1), actor=operator("t")).run_ids
    frame = points_frame(p.as_dict() for p in store.points_for_comparison([1, imported]))
    matrix = comparability_matrix(frame, 1, [imported])
    states = dict(zip(matrix["condition"], matrix["state"], strict=True))
    differ = {c for c, s in states.items() if s == "differ"}
    unknown = {c for c, s in states.items() if s == "unknown"}
    # The file is the emulator's output (its server_info says so): emulated like run 1, not a
    # measurement, so the source matches; the import of plain records differs (below).
    assert "source" not in differ and frame["source"].eq("emulated").all()
    assert {"warmup", "seed", "num_prompts"} <= unknown  # bench_serving records do not say these
    assert "output_len" not in differ and "input_len" not in differ and "model" not in differ
    [plain] = import_file(store, FIXTURES / "sglang-0.4.6.post5.jsonl", ImportConditions(gpu_type="H200", gpu_count=1),
                          actor=operator("t")).run_ids
    other = points_frame(p.as_dict() for p in store.points_for_comparison([1, plain]))
    other_states = comparability_matrix(other, 1, [plain])
    assert "source" in set(other_states.loc[other_states["state"] == "differ", "condition"])
    [summary] = comparability_summary(matrix).to_dict("records")
    assert summary["verdict"] != "comparable" and set(summary["unknown"]) == unknown

    monkeypatch.setenv("BENCHDECK_DB", str(db_path))
    monkeypatch.setenv("BENCHDECK_LANGUAGE", "en")
    import streamlit as st

    from domain.core.settings import get_settings

    get_settings.cache_clear()
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params.update({"baseline": "1", "runs": str(imported), "mixed": "1"})
    at.run()
    at.switch_page("pages/compare.py").run()
    assert not at.exception
    text = " ".join(e.value for e in [*at.warning, *at.error, *at.success])
    assert f"#{imported}" in text
    get_settings.cache_clear()
    st.cache_resource.clear()


def test_filling_in_later_makes_a_new_linked_configuration(store: Store) -> None:
    stated = ImportConditions(model="Qwen/Qwen3-30B-A3B")  # the GPU is left unknown at import
    run_id = import_file(store, FIXTURES / "sglang-0.4.6.post5.jsonl", stated, actor=operator("t")).run_ids[0]
    before = store.get_run(run_id)
    new_id = store.fill_in_imported(run_id, {"gpu_type": "H100", "gpu_count": 8, "model": "ignored-if-known"},
                                    actor=admin("alice"))
    after = store.get_run(run_id)
    assert new_id != before.configuration_id and after.configuration_id == new_id
    assert (after.gpu_type, after.gpu_count) == ("H100", 8)
    assert after.model == before.model == "Qwen/Qwen3-30B-A3B"  # a known fact is not overwritten
    [entry] = [e for e in store.audit_entries(reader=admin()) if e.action == "fill_in"]
    assert entry.actor == "alice" and before.configuration_id in entry.details


def test_an_imported_run_lists_its_real_point_count(store: Store) -> None:
    """An import has no attempt: the runs list counted its points as 0 of N."""
    import_file(store, FIXTURES / "sglang-0.4.6.post5.jsonl", ImportConditions(), actor=operator("t"))
    [run] = store.list_runs()
    assert run.points_done == run.total_points > 0
