"""Page logic through Streamlit's AppTest, against a real DuckDB file per test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from db import Store
from db.connection import lock_path_for
from tests.conftest import ROOT
from tests.support.actors import admin
from tests.support.calls import counted
from tests.support.pages import open_page

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
    assert any("Queued run #1" in s.value for s in at.success)
    # A second click whose rerun arrives before the first one's has recorded the run: the
    # button is still enabled then, and the store answers the instance's key with run 1.
    del at.session_state["build.queued_run"]
    at.switch_page("pages/build.py").run()
    _submit(at)
    assert [r.id for r in Store(app_env).list_runs()] == [1]
    assert any("Queued run #1" in s.value for s in at.success)
    # Queueing another from the same form is a deliberate new instance: a second run.
    next(b for b in at.button if b.label == "Queue another from this form").click().run()
    _submit(at)
    assert sorted(r.id for r in Store(app_env).list_runs()) == [1, 2]
    entries = Store(app_env).audit_entries(reader=admin())
    assert [e.action for e in entries] == ["submit", "submit"] and entries[0].actor


def test_busy_when_the_db_lock_is_held_elsewhere(app_env: Path) -> None:
    Store(app_env).migrate()
    # Held by another process, as a runner mid-write would (filelock refuses a second
    # instance of one lock inside one thread, so the holder must be elsewhere).
    holder = subprocess.Popen(
        [sys.executable, "-c", "import filelock, sys, time; lock = filelock.FileLock(sys.argv[1]); lock.acquire(); "
         "print('held', flush=True); time.sleep(120)", str(lock_path_for(app_env))],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        at = AppTest.from_file(APP, default_timeout=60).run()
    finally:
        holder.kill()
        holder.wait()
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


# -- compare and checklist ------------------------------------------------------------------------


def _import(path: Path, *args: str) -> list[int]:
    """``python -m runner import`` into this test's DB (app_env's environment); the run ids."""
    done = subprocess.run([sys.executable, "-m", "runner", "import", str(path), *args], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    return [int(x) for x in done.stdout.split("imported")[0].split()]


def _table_with(at: AppTest, needle: str) -> pd.DataFrame:
    for frame in at.dataframe:
        value = frame.value
        cells = value.data if hasattr(value, "data") else value  # a Styler's frame, or the frame
        if cells.astype(str).apply(lambda col: col.str.contains(needle, regex=False)).any().any():
            return cells
    raise AssertionError(f"no table holds {needle!r}")


def test_compare_page_verdict_first_and_cold_points_kept_on_request(app_env: Path, tmp_path: Path) -> None:
    from tests.test_browser_compare_views import cold_first_copy
    from tools.make_import_fixtures import ensure_fixtures

    fixtures = ensure_fixtures()
    real = _import(fixtures / "sglang-0.5.23.jsonl")[0]
    cold = _import(cold_first_copy(fixtures / "sglang-0.5.23.jsonl", tmp_path / "cold-first.jsonl"))[0]
    old = _import(fixtures / "sglang-0.4.6.post5.jsonl")[0]
    # 0.5.23's records name the emulator as their server (emulated), 0.4.6's name none (imported).
    at = open_page("compare", baseline=str(real), runs=f"{cold},{old}", mixed="1", lang="en")
    # The verdicts are the first alerts, one per run, with both values; not comparable in red.
    # The headline: the newer run against the older (both imported after the baseline).
    assert at.error[0].value.startswith(f"#{old} vs #{real} (baseline): not comparable")
    # Same records, same conditions: comparable (except what neither side's file says).
    assert any(box.value.startswith(f"#{cold} vs #{real} (baseline): comparable")
               for box in [*at.success, *at.warning])
    # The cold c=1 point is badged and measured against c=2 until the user keeps it.
    assert any("Cold first points" in w.value and f"#{cold} " in w.value for w in at.warning)
    column = f"#{cold}"
    left_out = _table_with(at, "basis c=2")[column].tolist()
    # Measured against c=2, no efficiency is inflated by the cold point (kept, c=1's few tok/s
    # make every later point several times "100 %"); a point the emulated measurement itself
    # put above curve.SUPER_LINEAR_EFFICIENCY is badged as such, as it should be.
    left_values = [float(cell.split("%")[0].replace(",", "")) for cell in left_out if cell]
    assert max(left_values) < 150, left_out
    assert all("eff. >100%" not in cell or value > 100 for cell, value in zip(
        [c for c in left_out if c], left_values, strict=True)), left_out
    next(w for w in at.toggle if w.label == "Keep cold first points in the baseline").set_value(True).run()
    kept = _table_with(at, "eff. >100%")[column].tolist()
    assert kept != left_out and all("%" in cell for cell in kept if cell)
    for cell in kept:  # above 100 % never without its mark
        value = float(cell.split("%")[0].replace(",", "")) if cell else 0.0
        assert value <= 100 or " · " in cell, cell


def test_compare_page_offers_flag_conditions_and_keeps_them_in_the_url(app_env: Path, tmp_path: Path) -> None:
    from tools.make_import_fixtures import ensure_fixtures

    # Records that name no server (0.4.6): the flags come from --server-args, as a user pastes them.
    source = ensure_fixtures() / "sglang-0.4.6.post5.jsonl"
    base = _import(source, "--server-args", "--kv-cache-dtype auto")[0]
    copy = tmp_path / "fp8.jsonl"
    copy.write_bytes(source.read_bytes() + b"\n")  # another file: an import is refused twice
    fp8 = _import(copy, "--server-args", "--kv-cache-dtype fp8_e4m3")[0]
    at = open_page("compare", baseline=str(base), runs=str(fp8), lang="en")
    # The Markdown source: the name and values are escaped literal text ("\\_" shows as "_").
    assert "kv-cache-dtype" in at.error[0].value and "auto → fp8\\_e4m3" in at.error[0].value
    intended = next(m for m in at.multiselect if m.label.startswith("Conditions intended to differ"))
    assert "--kv-cache-dtype (Quantization)" in intended.options  # the label of flag:kv-cache-dtype
    intended.set_value(["flag:kv-cache-dtype"]).run()
    assert not at.exception
    assert at.query_params["intended"] == "flag:kv-cache-dtype"  # one value: kept as text
    assert not at.error or not any("kv-cache-dtype" in e.value for e in at.error)


def test_checklist_marks_fatal_differences_with_both_values(app_env: Path, tmp_path: Path) -> None:
    from tools.make_import_fixtures import ensure_fixtures

    # Records that name no server (0.4.6): the flags come from --server-args, as a user pastes them.
    source = ensure_fixtures() / "sglang-0.4.6.post5.jsonl"
    base = _import(source, "--server-args", "--kv-cache-dtype auto")[0]
    copy = tmp_path / "fp8.jsonl"
    copy.write_bytes(source.read_bytes() + b"\n")
    fp8 = _import(copy, "--server-args", "--kv-cache-dtype fp8_e4m3")[0]
    at = open_page("checklist", baseline=str(base), runs=str(fp8), lang="en")
    assert at.error[0].value.startswith(f"#{fp8} — not comparable")
    matrix = _table_with(at, "fp8_e4m3")
    row = matrix.loc[next(i for i in matrix.index if "kv-cache-dtype" in i[1])]
    assert row[f"#{fp8}"] == "✗ auto → fp8_e4m3 (not comparable)"


def test_runs_named_without_a_baseline_ask_for_one(app_env: Path) -> None:
    """A run page's "add to the compared runs" opens the compare page with ?runs= only: the
    page asks for the baseline instead of making the newest run the baseline."""
    from tools.make_import_fixtures import ensure_fixtures

    run = _import(ensure_fixtures() / "sglang-0.5.23.jsonl")[0]
    at = open_page("compare", runs=str(run), lang="en")
    baseline = next(s for s in at.selectbox if s.label.startswith("Baseline"))
    assert baseline.value is None
    assert any("Pick the baseline" in i.value for i in at.info)
    assert next(m for m in at.multiselect if m.label.startswith("Runs to compare")).value == [run]
    baseline.set_value(run).run()  # picking it as the baseline moves it out of the compared runs
    assert not at.exception and at.query_params["baseline"] == str(run)


def test_the_pickers_offer_the_newest_runs_and_any_run_a_link_names(app_env: Path) -> None:
    """With more finished runs than the lists offer, the baseline and compared-runs lists
    hold the newest PICKER_SHOWN and say so; a link to older runs still opens them."""
    from bench import synthetic
    from pages.parts.selection import PICKER_SHOWN

    runs = PICKER_SHOWN + 30
    synthetic.fill(Store(app_env, lock_timeout_s=30), runs=runs, points_per_run=2)
    at = open_page("compare", lang="en")
    baseline = next(s for s in at.selectbox if s.label.startswith("Baseline"))
    assert len(baseline.options) == PICKER_SHOWN and baseline.value == runs  # the newest, as before
    assert any(f"newest {PICKER_SHOWN} of the {runs} matching runs" in c.value for c in at.caption)
    at = open_page("compare", baseline="1", runs="2", lang="en")  # the two oldest, far below the newest 200
    baseline = next(s for s in at.selectbox if s.label.startswith("Baseline"))
    assert baseline.value == 1 and len(baseline.options) == PICKER_SHOWN + 1
    compared = next(m for m in at.multiselect if m.label.startswith("Runs to compare"))
    assert compared.value == [2]
    # The chips say id, name and source; model and GPUs stay in the baseline's list.
    assert all(re.fullmatch(r"#\d+ synthetic-\d+ · EMULATED", o) for o in compared.options), compared.options[:3]
    assert at.query_params["baseline"] == "1" and at.query_params["runs"] == "2"


def test_the_picker_filters_narrow_the_lists_and_say_how_many_are_in_use(app_env: Path) -> None:
    """The filters sit in a popover (drawn when opened); its label counts the filters in use,
    and a filter narrows both lists in SQL, over every finished run."""
    from bench import synthetic
    from pages.parts.selection import PICKER_SHOWN

    runs = PICKER_SHOWN + 30
    synthetic.fill(Store(app_env, lock_timeout_s=30), runs=runs, points_per_run=2)  # GPU counts 1-8, in turn
    at = open_page("compare", lang="en")
    popover = at.get("popover")[0]
    assert popover.proto.popover.label == "Filters (model, GPU, tag, date, status, source)"
    at.multiselect(key="select.filter.gpus").set_value(["2×H200"]).run()
    assert not at.exception
    assert at.get("popover")[0].proto.popover.label.endswith(" · 1 in use")
    baseline = next(s for s in at.selectbox if s.label.startswith("Baseline"))
    two_gpus = (runs + 6) // 8  # synthetic-i has 1 + i % 8 GPUs
    # The chosen baseline (the newest, 6 GPUs) stays offered, as a link's does: the rest match.
    assert baseline.value == runs and baseline.options[-1].startswith(f"#{runs} ")
    assert len(baseline.options) == two_gpus + 1 and all("· 2×H200" in o for o in baseline.options[:-1])
    at.text_input(key="select.filter.tag").input("no-such-tag").run()
    assert at.get("popover")[0].proto.popover.label.endswith(" · 2 in use")
    left = next(s for s in at.selectbox if s.label.startswith("Baseline")).options
    assert left == [baseline.options[-1]]  # no run matches both filters: only the chosen baseline is left


@pytest.mark.parametrize("page", ["compare", "checklist"])
def test_runs_with_the_same_verdict_share_one_box(app_env: Path, page: str) -> None:
    """Four synthetic runs on different GPU counts: each compared run is "comparable except"
    the GPU count, said in one amber box, one paragraph per run in the selection's order."""
    from bench import synthetic

    synthetic.fill(Store(app_env, lock_timeout_s=30), runs=4, points_per_run=2)
    at = open_page(page, baseline="4", runs="3,1,2", lang="en")
    verdicts = [w.value for w in at.warning if "GPU count" in w.value]
    assert len(verdicts) == 1 and not at.error and not [s for s in at.success if "#4" in s.value]
    paragraphs = verdicts[0].split("\n\n")
    # The checklist names the run first; the compare page's headline names both, the baseline #4 marked.
    compared = [p.split(" ")[0] if page == "checklist" else p.split(":")[0].split(" vs ")[1] for p in paragraphs]
    assert compared == ["#3", "#1", "#2"], paragraphs


def test_run_page_explains_the_gaps_one_list_per_scenario(app_env: Path) -> None:
    """"Why not N×?" with two scenarios on the same concurrencies: one list per scenario,
    named, each step once in it (a flat list said "c=1→2" twice without saying of which)."""
    from bench import synthetic

    synthetic.fill(Store(app_env, lock_timeout_s=30), runs=1, points_per_run=6)  # s0 and s1 at c=1, 2, 4
    at = open_page("run", run="1", lang="en")
    assert not at.exception
    lists = [m.value for m in at.markdown if "→" in m.value and "measured against" in m.value]
    assert [m.splitlines()[0] for m in lists] == ["**Scenario s0**", "**Scenario s1**"], lists
    for block in lists:
        steps = [line for line in block.splitlines() if line.startswith("- ")]
        assert [s.split(":")[0] for s in steps] == ["- c=1→2", "- c=2→4"], block


def _two_command_lines() -> None:
    from pages.parts.common import command_line

    command_line("python -m sglang.launch_server --served-model-name 'a `b`'")
    command_line("python -m sglang.launch_server --served-model-name ':material/home:'")


def test_a_command_line_is_a_code_span_unless_streamlit_would_alter_it() -> None:
    """Streamlit's Markdown turns ":material/" into ":material_" even inside a code span:
    such a command goes to st.code, which shows it as it is."""
    from tests.support.code_spans import code_spans

    at = AppTest.from_function(_two_command_lines).run()
    assert code_spans(at) == ["python -m sglang.launch_server --served-model-name 'a `b`'"]
    assert [c.value for c in at.code] == ["python -m sglang.launch_server --served-model-name ':material/home:'"]


def test_a_linked_comparison_warmed_by_the_server_is_the_one_the_pages_use(
        app_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """scripts/page_warmup.py calls warm_compare (the compare page) or warm_comparison (the
    checklist) with a link's query when the page's HTML is asked for: the pages' first run
    then computes nothing anew, neither the analysis nor the compare page's first tables,
    and a link they read otherwise (another language) is computed by the page as before."""
    from domain.compare import comparability
    from pages.parts import compare_tables, selection
    from tests.test_browser_compare_views import cold_first_copy
    from tools.make_import_fixtures import ensure_fixtures

    fixtures = ensure_fixtures()
    real = _import(fixtures / "sglang-0.5.23.jsonl")[0]
    cold = _import(cold_first_copy(fixtures / "sglang-0.5.23.jsonl", tmp_path / "cold-first.jsonl"))[0]
    built: list[str] = []
    build = selection.comparison_with_settings

    def built_in_language(*args: Any, **kwargs: Any) -> Any:
        built.append(args[3])  # the language
        return build(*args, **kwargs)

    monkeypatch.setattr(selection, "comparison_with_settings", built_in_language)
    read: list[str] = []
    for name in ("picker_choices", "runs_for_picker"):  # the picker's two lists, read once
        monkeypatch.setattr(Store, name, counted(getattr(Store, name), name, read))
    tables: list[str] = []
    for name in ("_run_headers", "_metric_table"):
        monkeypatch.setattr(compare_tables, name, counted(getattr(compare_tables, name), name, tables))
    monkeypatch.setattr(comparability, "intended_choices",
                        counted(comparability.intended_choices, "intended_choices", tables))
    compare_tables.warm_compare({"baseline": [str(real)], "runs": [str(cold)], "lang": ["en"], "stat": ["p90"]})
    assert built == ["en"] and sorted(read) == ["picker_choices", "runs_for_picker"]
    warmed = ["intended_choices", "_run_headers", "_metric_table", "_metric_table", "_metric_table"]
    assert tables == warmed
    open_page("compare", baseline=str(real), runs=str(cold), lang="en", stat="p90")
    open_page("checklist", baseline=str(real), runs=str(cold), lang="en")
    assert built == ["en"] and tables == warmed
    open_page("compare", baseline=str(real), runs=str(cold), lang="ja")
    # The choices are the runs' flags (no words): read once for both languages.
    assert built == ["en", "ja"] and sorted(tables) == sorted([*warmed, *warmed[1:]])
    # Nothing is started for a link the page would refuse or could not read.
    selection.warm_comparison({"baseline": [str(real)], "runs": []})
    selection.warm_comparison({"baseline": ["x"], "runs": [str(cold)]})
    assert built == ["en", "ja"]


@pytest.mark.parametrize(("state", "shown", "run"), [
    ({"selection": {"rows": [1], "columns": []}}, [30, 20, 10], 20),
    ({"selection": {"rows": [], "columns": []}}, [30, 20, 10], None),
    ({"selection": {"rows": [3]}}, [30, 20, 10], None),  # the table as drawn had no such row
    (None, [30, 20, 10], None),
    ({"selection": {"rows": [0]}}, [], None),
])
def test_a_picked_row_is_read_against_the_table_as_drawn(state: object, shown: list[int], run: int | None) -> None:
    from pages.parts.runs_table import picked_run

    assert picked_run(state, shown) == run


def test_compare_page_shows_a_ramp_in_the_measured_window(app_env: Path) -> None:
    """The method badges (domain/results/method_badges.py) in the compare page's validity
    table and legend: the real cold sweep (tests/fixtures/cold_first_point) imported in
    process, its c=1 point a ramp."""
    from db.imported_runs import import_file
    from domain.importer.conditions import ImportConditions
    from tests.support.actors import operator

    store = Store(app_env)
    store.migrate()
    fixture = ROOT / "tests" / "fixtures" / "cold_first_point" / "sweep-0.5.23.jsonl"
    [run] = import_file(store, fixture, ImportConditions(), actor=operator("t")).run_ids
    at = open_page("compare", baseline=str(run), runs=str(run), lang="en")
    at.session_state["compare.analysis_tab.en"] = "Validity"  # the analyses' tab, as a click opens it
    at.run()
    cells = _table_with(at, "ramp")[f"#{run}"].tolist()
    assert [cell for cell in cells if "ramp" in cell] == ["cold, lengths ?, ramp"], cells
    legend = " ".join(m.value for m in at.markdown)
    assert "ramp = ramp in the measured window: The first requests' TTFT is several times" in legend
