"""The comparison cache's key (pages/parts/selection.py ``_frame_digest``), on points read
from a real DuckDB file: the same points read twice, or passed through a pickle round trip
as ``st.cache_data`` hands them back, give one key (a rerun finds its comparison); any
change to a value, a dict column, a new point or a renamed run gives another (nothing stale
is ever served)."""

from __future__ import annotations

import pickle

import pandas as pd

from bench import synthetic
from db import Store
from db.connection import transaction
from domain.results.frames import points_frame
from pages.parts.selection import _frame_digest

RUNS = [3, 2, 1]


def _read(store: Store) -> pd.DataFrame:
    return points_frame(p.as_dict() for p in store.points_for_comparison(RUNS))


def test_the_same_points_give_one_key(store: Store) -> None:
    synthetic.fill(store, runs=3, points_per_run=4)
    first, second = _read(store), _read(store)
    assert first is not second
    assert _frame_digest(first) == _frame_digest(second)
    assert _frame_digest(pickle.loads(pickle.dumps(first))) == _frame_digest(first)  # noqa: S301 - our own bytes


def test_taking_rows_from_the_points_keeps_their_key(store: Store) -> None:
    """The picker takes each run's rows from the frame before the comparison is looked up;
    pandas then reorders the frame's blocks in place, which changed its pickle (the server's
    warm-up and the page found two keys for one comparison)."""
    synthetic.fill(store, runs=3, points_per_run=4)
    frame = _read(store)
    before = _frame_digest(frame)
    frame[frame["run_id"] == RUNS[0]]
    assert _frame_digest(frame) == before == _frame_digest(_read(store))


def test_any_change_gives_another_key(store: Store) -> None:
    synthetic.fill(store, runs=3, points_per_run=4)
    frame = _read(store)
    keys = {_frame_digest(frame)}
    changed = frame.copy()
    changed.loc[0, "output_throughput"] = float(changed.loc[0, "output_throughput"]) + 1e-9
    keys.add(_frame_digest(changed))
    args = frame.copy()
    args.at[0, "server_args"] = {**args.at[0, "server_args"], "max-running-requests": 1}
    keys.add(_frame_digest(args))
    with transaction(store.db_path, lock_timeout_s=10) as con:
        con.execute("UPDATE runs SET name = 'renamed' WHERE id = 1")
    keys.add(_frame_digest(_read(store)))
    with transaction(store.db_path, lock_timeout_s=10) as con:
        con.execute("DELETE FROM telemetry_summaries WHERE point_id = (SELECT min(id) FROM sweep_points)")
    keys.add(_frame_digest(_read(store)))
    assert len(keys) == 5


def test_frames_alike_but_for_a_dtype_or_its_categories_get_two_keys() -> None:
    """Column by column, the key still sees what a value's column is: an int column and a
    float one of equal numbers, or two categoricals whose categories sort differently."""
    ints = pd.DataFrame({"c": [1, 2]})
    assert _frame_digest(ints) != _frame_digest(ints.astype("float64"))
    ab = pd.DataFrame({"c": pd.Categorical(["a", "b"], categories=["a", "b"], ordered=True)})
    ba = pd.DataFrame({"c": pd.Categorical(["a", "b"], categories=["b", "a"], ordered=True)})
    assert _frame_digest(ab) != _frame_digest(ba)
