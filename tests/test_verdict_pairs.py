"""Look-alike pairs (issue #15, "Done when"): two runs built to look alike are either not
comparable or their verdict line names the difference with both values — and the caveat,
which every export prints, carries the same line.

Both kinds of run go through a real DuckDB store and ``points_frame``, as the app reads
them: emulator runs written the way the runner writes a point (the plan's
``point_conditions`` plus the engine version and bench client), and imports of the real
bench_serving records in ``build/import-fixtures`` (made by the real client against the
emulator), each edited in the one field the pair is about.  A field a bench_serving record
does not carry (warmup, prompt count without ``--output-details``, chat template) is
stated on import where the import form asks for it (warmup), otherwise it is checked to be
listed as unknown, never as a match.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from db import RunnerCapabilities, Store
from db.imported_runs import import_file
from domain.compare.comparison import Comparison, build_comparison
from domain.core.states import AttemptStatus
from domain.importer.conditions import ImportConditions
from domain.plan.run_plan import point_conditions
from domain.results.bench_record import METRIC_COLUMNS
from domain.results.frames import points_frame
from tests.conftest import ROOT
from tests.plans import minimal_plan
from tests.support.actors import operator
from tools.make_import_fixtures import ensure_fixtures

FIXTURE = ROOT / "build" / "import-fixtures" / "sglang-0.5.23.jsonl"
# The fixture's first scenario: 64/32 at concurrency 1, 2, 4; the plans measure the same.
BENCH = {"scenarios": [{"name": "short", "input_len": 64, "output_len": 32}], "concurrency": [1, 2, 4],
         "num_prompts": "10x", "warmup": "2x"}
KV = "--kv-cache-dtype (Quantization)"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """One store for the module (each test makes its own runs): migrating one per test is the slow part."""
    store = Store(tmp_path_factory.mktemp("pairs") / "pairs.duckdb")
    store.migrate()
    yield store


def emulated_run(store: Store, *, engine: str = "emulator", version: str | None = None,
                 server_args: dict[str, Any] | None = None, **bench: Any) -> int:
    """A run as the runner writes it: each point's conditions are the plan's, plus what
    runner/attempt.py adds (engine version, bench client, the engine as family + emulated)."""
    overrides: dict[str, Any] = {"name": f"run-{engine}", "engine": engine, "benchmark": {**BENCH, **bench}}
    if version is not None:
        overrides["sglang_version"] = version
    if server_args is not None:
        overrides["server_args"] = server_args
    run_id, _ = store.submit_run(minimal_plan(**overrides), submitted_by=operator("t"))
    claim = store.claim_next(RunnerCapabilities("r", "H200", 8, version), lease_s=60)
    assert claim is not None and claim.run_id == run_id
    store.move_attempt(claim.attempt_id, "r", AttemptStatus.CLAIMED, AttemptStatus.STARTING)
    store.record_startup(claim.attempt_id, "r", server_argv=[], startup_facts={}, host_info={"hostname": "h"},
                         bench_client={}, telemetry_dir="")
    store.move_attempt(claim.attempt_id, "r", AttemptStatus.STARTING, AttemptStatus.BENCHMARKING)
    for point in claim.plan.points():
        conditions = point_conditions(claim.plan, point)
        conditions.update(engine_version=version or "0.5.23", bench_tool="sglang.bench_serving",
                          bench_version="0.5.23", engine=claim.plan.engine, emulated=claim.plan.emulated,
                          # The client tokenizer, as runner/bench_client.py records it (the toy one here).
                          tokenizer={"path": "data/tokenizer", "source": "toy", "vocab_size": 151643,
                                     "sha256": "0123456789abcdef"})
        metrics = {column: 1.0 for column in METRIC_COLUMNS}
        metrics.update(completed=point.num_prompts, requested=point.num_prompts)
        store.insert_point(claim.attempt_id, "r", scenario=point.scenario.name, concurrency=point.concurrency,
                           repeat_idx=point.repeat_idx, conditions=conditions, started_at=datetime.now(),
                           finished_at=datetime.now(), metrics=metrics, raw_record={}, telemetry=[])
    store.finish_attempt(claim.attempt_id, "r", AttemptStatus.BENCHMARKING, AttemptStatus.SUCCEEDED)
    return run_id


Edit = Callable[[dict[str, Any]], None]


def imported_run(store: Store, tmp_path: Path, name: str, edit: Edit | None = None, **stated: Any) -> int:
    """The fixture's 64/32 records (c = 1, 2, 4), edited, written under ``name`` and imported."""
    if not FIXTURE.exists():
        ensure_fixtures()  # made with the real client, as the importer's own tests do
    records = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()[:3]]
    assert {(r["random_input_len"], r["random_output_len"]) for r in records} == {(64, 32)}
    for record in records:
        record["tag"] = f"{tmp_path.name}-{name}"  # the store refuses a file it has: one per test and run
        if edit is not None:
            edit(record)
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    [run_id] = import_file(store, path, ImportConditions(**stated), actor=operator("t")).run_ids
    return run_id


def compare(store: Store, base: int, other: int, *, intended: frozenset[str] = frozenset(),
            lang: str = "en") -> Comparison:
    frame = points_frame(p.as_dict() for p in store.points_for_comparison([base, other]))
    return build_comparison(frame, base, [other], lang, intended_to_differ=intended)


def verdict(c: Comparison) -> str:
    """The one verdict line, checked to be in the caveat every export prints."""
    [line] = c.verdict_lines
    assert line in c.caveat
    return line


def setting(key: str, value: Any) -> Edit:
    return lambda record: record.__setitem__(key, value)


def server_info(key: str, value: Any) -> Edit:
    return lambda record: record["server_info"].__setitem__(key, value)


def both(first: Edit, then: Edit) -> Edit:
    def edit(record: dict[str, Any]) -> None:
        first(record)
        then(record)
    return edit


def real_sglang(record: dict[str, Any]) -> None:
    """The record as a real SGLang 0.5.23 serves it: no emulator self-description (so no GPU)."""
    info = record["server_info"]
    info["version"] = "0.5.23"
    info.pop("emulated", None)
    info.pop("emulator", None)


# -- emulator runs ---------------------------------------------------------------------------------

EMULATED_PAIRS = [
    # (pair, the other run's plan, the difference as the verdict names it, fatal)
    ("range ratio 1 / 0", {"random_range_ratio": 0.0}, "range ratio: 1 → 0", True),
    ("warmup 2×c / 1", {"warmup": 1}, "warmup: 2, 4, 8 → 1", False),
    # A request rate makes the arrivals Poisson: a fatal condition (domain/plan/arrivals.py).
    ("request rate inf / 8", {"request_rate": 8}, "request rate: inf → 8", True),
    ("prompts 10×c / 1000", {"num_prompts": 1000}, "request count: 10, 20, 40 → 1000", False),
    ("chat template off / on", {"apply_chat_template": True}, "chat template: false → true", False),
    ("KV-cache dtype auto / fp8", {"server_args": {"tp-size": 1, "kv-cache-dtype": "fp8_e4m3"}},
     f"{KV}: auto → fp8_e4m3", True),
]


@pytest.mark.parametrize(("pair", "other_plan", "named", "fatal"), EMULATED_PAIRS, ids=[p[0] for p in EMULATED_PAIRS])
def test_emulated_pair_is_named_with_both_values(store: Store, pair: str, other_plan: dict[str, Any], named: str,
                                                 fatal: bool) -> None:
    base = emulated_run(store, server_args={"tp-size": 1})
    other = emulated_run(store, **{"server_args": {"tp-size": 1}, **other_plan})
    line = verdict(compare(store, base, other))
    head = "not comparable — " if fatal else "comparable except — "
    assert line.startswith(f"run #{other} vs baseline #{base}: {head}"), line
    assert named in line


def test_sglang_versions_are_named(store: Store) -> None:
    base = emulated_run(store, engine="sglang", version="0.5.17")
    other = emulated_run(store, engine="sglang", version="0.5.23")
    line = verdict(compare(store, base, other))
    assert line.startswith(f"run #{other} vs baseline #{base}: comparable except — engine version: 0.5.17 → 0.5.23")


def test_emulated_against_measured_is_not_comparable(store: Store) -> None:
    """An emulated SGLang run and a measured one are one engine family (sglang) since the
    engine split: the source is what differs, and it alone makes them not comparable."""
    base = emulated_run(store)
    other = emulated_run(store, engine="sglang", version="0.5.23")
    c = compare(store, base, other)
    line = verdict(c)
    assert line.startswith(f"run #{other} vs baseline #{base}: not comparable — ")
    assert "source (measured / emulated / imported): emulated → measured" in line
    assert "engine: " not in line
    assert set(c.checklist.iloc[0]["fatal"]) == {"source"}


def test_a_kv_cache_change_marked_as_under_test_is_comparable_and_said_first(store: Store) -> None:
    base = emulated_run(store, server_args={"tp-size": 1})
    other = emulated_run(store, server_args={"tp-size": 1, "kv-cache-dtype": "fp8_e4m3"})
    c = compare(store, base, other, intended=frozenset({"flag:kv-cache-dtype"}))
    assert verdict(c) == (f"run #{other} vs baseline #{base}: comparable — under test: {KV}: auto → fp8_e4m3")
    assert c.changed_lines == [
        f"#{other}: --kv-cache-dtype: auto → fp8_e4m3 (layer: Quantization, risk: high)",
        f"#{other} under test: {KV}: auto → fp8_e4m3",
    ]
    japanese = compare(store, base, other, intended=frozenset({"flag:kv-cache-dtype"}), lang="ja")
    assert japanese.changed_lines[0] == f"#{other}: --kv-cache-dtype: auto → fp8_e4m3(層: 量子化、リスク: 高)"


def test_a_serving_flag_is_said_in_what_changed_not_in_the_verdict(store: Store) -> None:
    base = emulated_run(store, server_args={"tp-size": 1, "max-running-requests": 64})
    other = emulated_run(store, server_args={"tp-size": 1, "max-running-requests": 128})
    c = compare(store, base, other)
    assert verdict(c) == f"run #{other} vs baseline #{base}: comparable"
    assert c.changed_lines == [
        f"#{other}: --max-running-requests: 64 → 128 (layer: Serving settings, risk: low to medium)"]


# -- imports of real bench_serving records ---------------------------------------------------------

IMPORTED_PAIRS = [
    ("range ratio 1 / 0", setting("random_range_ratio", 0.0), "range ratio: 1 → 0", True),
    ("request rate inf / 8", setting("request_rate", 8.0), "request rate: inf → 8", True),
    ("SGLang 0.5.17 / 0.5.23", server_info("version", "0.5.17"), "engine version: 0.5.23 → 0.5.17", False),
    ("KV-cache dtype auto / fp8", server_info("kv_cache_dtype", "fp8_e4m3"), f"{KV}: auto → fp8_e4m3", True),
]


@pytest.mark.sglang
@pytest.mark.parametrize(("pair", "edit", "named", "fatal"), IMPORTED_PAIRS, ids=[p[0] for p in IMPORTED_PAIRS])
def test_imported_pair_is_named_with_both_values(store: Store, tmp_path: Path, pair: str, edit: Edit, named: str,
                                                 fatal: bool) -> None:
    base = imported_run(store, tmp_path, "base", real_sglang, gpu_type="H200", gpu_count=1)
    other = imported_run(store, tmp_path, "other", both(real_sglang, edit), gpu_type="H200", gpu_count=1)
    line = verdict(compare(store, base, other))
    head = "not comparable — " if fatal else "comparable except — "
    assert line.startswith(f"run #{other} vs baseline #{base}: {head}"), line
    assert named in line


@pytest.mark.sglang
def test_imported_warmup_as_stated_is_named(store: Store, tmp_path: Path) -> None:
    base = imported_run(store, tmp_path, "base", gpu_type="H200", gpu_count=1, warmup=2)
    other = imported_run(store, tmp_path, "other", gpu_type="H200", gpu_count=1, warmup=1)
    assert "warmup: 2 → 1" in verdict(compare(store, base, other))


@pytest.mark.sglang
def test_what_a_record_does_not_say_is_unknown_never_a_match(store: Store, tmp_path: Path) -> None:
    base = imported_run(store, tmp_path, "base", gpu_type="H200", gpu_count=1)
    other = imported_run(store, tmp_path, "other", setting("request_rate", 8.0), gpu_type="H200", gpu_count=1)
    c = compare(store, base, other)
    unknown = set(c.checklist.iloc[0]["unknown"])
    assert {"apply_chat_template", "num_prompts", "warmup"} <= unknown
    assert "unknown on both sides: " in verdict(c) and "chat template" in verdict(c).split("unknown on both sides: ")[1]


@pytest.mark.sglang
def test_unknown_gpu_against_h200_is_not_comparable(store: Store, tmp_path: Path) -> None:
    base = imported_run(store, tmp_path, "base", real_sglang, gpu_type="H200", gpu_count=1)
    other = imported_run(store, tmp_path, "other", real_sglang)  # real SGLang's record names no GPU
    c = compare(store, base, other)
    assert verdict(c).startswith(f"run #{other} vs baseline #{base}: not comparable — GPU type: H200 → ?")
    assert c.checklist.iloc[0]["fatal"] == ["gpu_type"]
    assert "gpu_type" in c.checklist.iloc[0]["unknown"]  # still unknown: we cannot say it differs


@pytest.mark.sglang
def test_an_import_lines_up_with_an_emulated_plan_by_lengths(store: Store, tmp_path: Path) -> None:
    """A real SGLang record imported beside an emulated run of the same 64/32 (emulated vs
    measured elsewhere): the scenarios line up (in64-out32 is 'short'), so the verdict names
    what differs instead of "no common point"."""
    base = emulated_run(store)
    other = imported_run(store, tmp_path, "other", real_sglang)
    c = compare(store, base, other)
    rows = c.frame[c.frame["run_id"] == other]
    assert set(rows["scenario"]) == {"short"} and set(rows["scenario_original"]) == {"in64-out32"}
    assert not c.matrix.loc[c.matrix["condition"] == "points", "fatal"].any()
    line = verdict(c)
    assert line.startswith(f"run #{other} vs baseline #{base}: not comparable — ")
    assert "source (measured / emulated / imported): emulated → " in line
    assert "engine: " not in line  # the same family, sglang, emulated on one side
    assert "GPU type: H200 → ?" in line
    assert set(c.compare["scenario"]) == {"short"}  # the table has one scenario, both runs in it
