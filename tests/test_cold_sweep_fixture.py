"""A sweep whose first point ran cold, as the real SGLang 0.5.23 client recorded it against
a cold-started emulator (tests/fixtures/cold_first_point/, made by
tools/make_cold_sweep_fixture.py), imported into a real DuckDB store and compared.

What must hold: the c=1 point carries the ``cold_first_point`` badge and is left out of the
efficiency baseline (c=2 is the basis), so no point shows an efficiency above
:data:`~domain.results.curve.SUPER_LINEAR_EFFICIENCY` without a badge; when the user keeps
the cold point, c=1 is the basis again and every super-linear point says so.  Below, the
emulator option that made it (``--emulate-cold-start-s``) on its own.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd
import pytest

from db import Store
from db.imported_runs import ImportResult, import_file
from domain.compare.comparison import Comparison, build_comparison
from domain.importer.conditions import ImportConditions
from domain.render.tables import comparison_markdown, point_notes
from domain.results.curve import COLD_EFFICIENCY, SUPER_LINEAR_EFFICIENCY
from domain.results.frames import points_frame
from emulator.cold_start import cold_start_options
from emulator.step_loop import DEFAULT_COLD_FACTOR, ColdStart
from tests.conftest import ROOT
from tests.support.actors import operator

FIXTURE_DIR = ROOT / "tests" / "fixtures" / "cold_first_point"
FIXTURE = FIXTURE_DIR / "sweep-0.5.23.jsonl"
SWEEP = [1, 2, 4, 8, 16]
BADGED = ("cold", "super_linear")


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[ImportResult, pd.DataFrame]:
    """The fixture through the importer into a fresh DuckDB file, and the points as the
    compare page reads them."""
    store = Store(tmp_path_factory.mktemp("cold") / "bench.duckdb", lock_timeout_s=10)
    store.migrate()
    result = import_file(store, FIXTURE, ImportConditions(), actor=operator("t"))
    frame = points_frame(p.as_dict() for p in store.points_for_comparison(result.run_ids))
    return result, frame


def _comparison(imported: tuple[ImportResult, pd.DataFrame], **kwargs: Any) -> tuple[int, str, Comparison]:
    result, frame = imported
    [run_id] = result.run_ids
    [scenario] = frame["scenario"].unique()
    return run_id, scenario, build_comparison(frame, run_id, [run_id], "en", **kwargs)


def _unbadged_above_linear(scaling: pd.DataFrame) -> pd.DataFrame:
    flagged = scaling[list(BADGED)].fillna(False).astype(bool).any(axis=1)
    return scaling[(scaling["efficiency"] > SUPER_LINEAR_EFFICIENCY) & ~flagged]


def test_the_fixture_is_one_sweep_from_the_real_client(imported: tuple[ImportResult, pd.DataFrame]) -> None:
    result, frame = imported
    assert len(result.run_ids) == 1 and result.points == len(SWEEP) and not result.skipped
    assert not result.preview.problems
    assert sorted(frame["concurrency"]) == SWEEP
    # The Python client's record of 0.5.9 and later (49 keys), not a hand-written one.
    assert {p.record_format.family for p in result.preview.runs[0].points} == {"sglang-49"}
    by_c = frame.set_index("concurrency")["output_throughput"]
    assert (by_c[2] / by_c[1]) / 2 > COLD_EFFICIENCY  # the first point is far below its neighbour's trend


def test_the_cold_first_point_is_badged_and_out_of_the_baseline(imported: tuple[ImportResult, pd.DataFrame]) -> None:
    run_id, scenario, c = _comparison(imported)
    scaling = c.scaling.set_index("concurrency")
    assert bool(scaling.loc[1, "cold"]) and not scaling.drop(index=1)["cold"].any()
    assert set(scaling["baseline_concurrency"]) == {2}
    assert scaling.loc[2, "efficiency"] == pytest.approx(1.0)
    assert _unbadged_above_linear(c.scaling).empty, c.scaling
    assert not scaling["super_linear"].any()  # with c=1 out, the sweep scales sub-linearly
    cold = c.badges[c.badges["badge"] == "cold_first_point"]
    assert list(zip(cold["run_id"], cold["scenario"], cold["concurrency"], strict=True)) == [(run_id, scenario, 1)]


def test_the_exports_say_so(imported: tuple[ImportResult, pd.DataFrame]) -> None:
    _, _, c = _comparison(imported)
    notes = point_notes(c).set_index("concurrency")
    assert "cold first point" in notes.loc[1, "validity"]
    assert set(notes["efficiency_basis"]) == {2}
    measured = notes.drop(index=1)["efficiency_pct"]
    assert measured.max() <= 100.0 + 1e-9, notes  # the basis itself is 100 %, the rest below
    assert "cold first point" in comparison_markdown(c)
    assert "ramp in the measured window" in notes.loc[1, "validity"]


def test_the_cold_first_point_is_a_ramp_in_the_measured_window(imported: tuple[ImportResult, pd.DataFrame]) -> None:
    """No per-request arrays here: the ramp is read across points (method_badges' docstring),
    the c=1 point's median TTFT several times the c=2 point's, and only there."""
    run_id, scenario, c = _comparison(imported)
    ramp = c.badges[c.badges["badge"] == "ramp_in_window"]
    print("\n" + ramp.to_string())
    assert list(zip(ramp["run_id"], ramp["scenario"], ramp["concurrency"], strict=True)) == [(run_id, scenario, 1)]
    assert ramp.iloc[0]["detail"] == "median TTFT 7.2× that at c=2 (506 vs 70 ms): at least 50 % of the requests"


def test_a_kept_cold_point_is_the_baseline_and_super_linear_is_badged(
        imported: tuple[ImportResult, pd.DataFrame]) -> None:
    run_id, scenario, c = _comparison(imported)
    kept = build_comparison(c.frame, run_id, [run_id], "en", keep_cold={(run_id, scenario, 1)})
    scaling = kept.scaling.set_index("concurrency")
    assert set(scaling["baseline_concurrency"]) == {1}
    assert bool(scaling.loc[1, "cold"])  # still marked cold, only kept as the basis
    assert scaling.loc[2, "efficiency"] > COLD_EFFICIENCY
    above = scaling[scaling["efficiency"] > SUPER_LINEAR_EFFICIENCY]
    assert not above.empty and above["super_linear"].all()
    assert _unbadged_above_linear(kept.scaling).empty
    badged = kept.badges[kept.badges["badge"] == "super_linear"]
    assert set(badged["concurrency"]) == set(above.index)


def test_the_records_say_they_came_from_a_cold_emulator(imported: tuple[ImportResult, pd.DataFrame]) -> None:
    result, frame = imported
    # From the records' server_info ("emulated": true): SGLang, emulated.
    assert set(frame["engine"]) == {"sglang"} and set(frame["source"]) == {"emulated"}
    [run] = result.preview.runs
    assert all(p.server is not None and p.server.emulated for p in run.points)
    manifest = json.loads((FIXTURE_DIR / "manifest.json").read_text(encoding="utf-8"))
    first = json.loads(FIXTURE.read_text(encoding="utf-8").splitlines()[0].replace("Infinity", "1e999"))
    command = first["server_info"]["launch_command"]
    assert f"--emulate-cold-start-s {manifest['cold_start']['seconds']:g}" in command
    assert first["server_info"]["emulated"] is True


def test_the_imported_run_is_labelled_emulated(imported: tuple[ImportResult, pd.DataFrame]) -> None:
    _, frame = imported
    assert set(frame["source"]) == {"emulated"}


# -- the emulator option ----------------------------------------------------------------------------


def test_cold_start_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCHDECK_EMULATE_COLD_START_S", raising=False)
    cold, rest = cold_start_options(["--model-path", "m", "--emulate-startup-s", "1"])
    assert cold is None and rest == ["--model-path", "m", "--emulate-startup-s", "1"]


def test_cold_start_options_leave_the_sglang_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCHDECK_EMULATE_COLD_START_FACTOR", "3")
    cold, rest = cold_start_options(["--emulate-cold-start-s", "4", "--model-path", "m",
                                     "--emulate-cold-start-factor=5"])
    assert rest == ["--model-path", "m"]
    assert cold is not None and (cold.seconds, cold.factor) == (4.0, 5.0)  # the flag wins over the environment
    monkeypatch.setenv("BENCHDECK_EMULATE_COLD_START_S", "2")
    from_env, _ = cold_start_options(["--model-path", "m"])
    assert from_env is not None and (from_env.seconds, from_env.factor) == (2.0, 3.0)


@pytest.mark.parametrize("argv", [["--emulate-cold-start-s", "soon"], ["--emulate-cold-start-s", "1",
                                  "--emulate-cold-start-factor", "0.5"], ["--emulate-cold-start-s", "nan"],
                                  ["--emulate-cold-start-s"]])
def test_a_bad_cold_start_value_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cold_start_options(argv)
    assert exited.value.code == 2 and "--emulate-cold-start" in capsys.readouterr().err


def test_cold_steps_are_slower_until_the_window_is_spent() -> None:
    cold = ColdStart(seconds=1.0, factor=DEFAULT_COLD_FACTOR)
    assert cold.stretch(0.05) == pytest.approx(0.5)  # cold: factor × warm
    # 0.5 s of the window left: the step runs cold for 0.5 s (0.05 s of work), the rest warm.
    assert cold.stretch(0.1) == pytest.approx(0.5 + 0.05)
    assert cold.over and cold.slowed_steps == 2
    assert cold.stretch(0.1) == pytest.approx(0.1)
    assert cold.as_dict()["over"] is True and math.isclose(cold.as_dict()["spent_s"], 1.0)


def test_the_fixture_maker_sizes_the_window_from_the_predictor() -> None:
    from tools.make_cold_sweep_fixture import COLD_MARGIN, cold_seconds, predicted_warm

    warm_c1 = predicted_warm(1)["duration_s"]
    assert cold_seconds() == pytest.approx(COLD_MARGIN * DEFAULT_COLD_FACTOR * warm_c1, abs=0.05)
    manifest = json.loads((FIXTURE_DIR / "manifest.json").read_text(encoding="utf-8"))
    assert (ROOT / manifest["made_by"]).is_file()
    cold, warm_then = manifest["cold_start"], manifest["predicted_warm"]["1"]["duration_s"]
    # Sized as the maker sizes it, from the predictor of the day it was made.
    assert cold["seconds"] == pytest.approx(cold["margin"] * cold["factor"] * warm_then, abs=0.05)
