"""An imported run's page (pages/run.py) offers only what applies to a run measured
elsewhere: no re-run, no "queue a variant", no watch (each launches the configuration, and
an import has no plan to launch), and its points counted as stored, not against an attempt
it never had.  A run benchdeck launched, on the same page, offers all three."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from db import Store
from db.imported_runs import import_file
from domain.importer.conditions import ImportConditions
from tests.support.actors import operator
from tests.support.pages import open_page
from tests.test_import_samples import _record
from tests.test_watch import _finished_run, _plan

LAUNCHING = {"Re-run", "Queue a variant of this run", "Watch this configuration"}


def _import_emulated(store: Store, tmp_path: Path) -> int:
    """Two points (c=8, c=16) of emulator output imported from a bench_serving file: source
    ``emulated`` and succeeded, the case a watch would otherwise be offered for."""
    lines = [json.dumps({**_record(40, details=False), "max_concurrency": c}) for c in (8, 16)]
    source = tmp_path / "bench.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    [run_id] = import_file(store, source, ImportConditions(engine="emulator"), actor=operator("t")).run_ids
    return int(run_id)


def _offered(at: AppTest) -> set[str]:
    """The labels of the page's buttons, page links and popovers."""
    return ({b.label for b in at.button} | {p.proto.label for p in at.get("page_link")}
            | {p.proto.popover.label for p in at.get("popover")})


def test_an_imported_run_offers_nothing_that_launches_and_counts_its_points(app_env: Path, tmp_path: Path) -> None:
    store = Store(app_env, lock_timeout_s=30)
    store.migrate()
    launched_id = _finished_run(store, _plan(), [100.0])  # launched by benchdeck, succeeded
    imported = _import_emulated(store, tmp_path)
    run = store.get_run(imported)
    assert run is not None and (run.source, run.status, run.total_points) == ("emulated", "succeeded", 2)
    launched = open_page("run", run=str(launched_id), lang="en")
    assert LAUNCHING <= _offered(launched), _offered(launched)
    page = open_page("run", run=str(imported), lang="en")
    assert not LAUNCHING & _offered(page), _offered(page)
    assert "Points (2/2)" in [s.value for s in page.subheader], [s.value for s in page.subheader]
    # The points table's energy columns: an import carries no power (domain/results/energy.py).
    points = page.dataframe[0].value
    assert points["J/output token"].isna().all() and set(points["Energy"]) == {"no power data (emulated)"}
