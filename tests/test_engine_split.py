"""The plan's engine split into a family and ``emulated`` (issue 39): every old plan file
still loads, a configuration keeps its id whichever way its plan spells the engine, and a
database written before the split (migrations 1-6, the old one-word engine in every place
it was stored) is rewritten by migration 7 and read by the Store as before."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from db import Store
from db import migrations as steps
from db.store import RunnerCapabilities
from domain.plan.plan_io import PlanError, load_plan, plan_from_mapping
from domain.plan.run_plan import RunPlan, configuration_id
from domain.tune.study_yaml import load_study
from tests.conftest import ROOT
from tests.plans import MINIMAL_PLAN_YAML

LIMIT = 256 * 1024
OLD_WORDS = {"emulator": ("sglang", True), "sglang": ("sglang", False), "vllm-emulator": ("vllm", True),
             "vllm": ("vllm", False)}


def _readme_plans() -> list[str]:
    """The plan examples of README.md, as users copy them (the one-word engine among them)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [block for block in re.findall(r"```yaml\n(.*?)```", text, re.S) if re.search(r"^engine:", block, re.M)]


def test_old_plan_files_load_as_family_and_emulated() -> None:
    plans = [load_plan(text, max_bytes=LIMIT) for text in [MINIMAL_PLAN_YAML, *_readme_plans()]]
    plans += [load_study(path).base_plan for path in sorted((ROOT / "tests/fixtures").glob("tune*/*.yaml"))]
    assert (plans[0].engine, plans[0].emulated) == ("sglang", True)
    assert {(p.engine, p.emulated) for p in plans} >= {("sglang", True), ("external", False)}
    for plan in plans:
        assert RunPlan.model_validate_json(plan.model_dump_json()) == plan  # the new spelling reads back


@pytest.mark.parametrize("word", sorted(OLD_WORDS))
def test_the_one_word_and_the_split_spelling_are_one_plan_with_one_configuration_id(word: str) -> None:
    base = {"name": "x", "model": "Qwen/Qwen3-30B-A3B", "gpu": {"type": "H200", "count": 1}}
    family, emulated = OLD_WORDS[word]
    old = plan_from_mapping({**base, "engine": word})
    new = plan_from_mapping({**base, "engine": family, "emulated": emulated})
    assert old == new and (new.engine, new.emulated, new.engine_label) == (family, emulated, word)
    # The id hashes the one word, as before the split: a configuration keeps its id.
    assert configuration_id(new.configuration_snapshot()) == configuration_id(
        {**new.configuration_snapshot(), "engine": word})


@pytest.mark.parametrize(("mapping", "kind"), [
    ({"engine": "emulator", "emulated": False}, "engine_emulated_conflict"),
    ({"engine": "trt-llm"}, "engine_unknown"),
    ({"engine": "external", "emulated": True,
      "external": {"endpoint": "lab", "engine": "trt-llm", "version": None}}, "external_emulated"),
])
def test_a_contradictory_or_unknown_engine_is_refused_by_name(mapping: dict[str, object], kind: str) -> None:
    base = {"name": "x", "model": "Qwen/Qwen3-30B-A3B", "gpu": {"type": "H200", "count": 1}}
    with pytest.raises(PlanError) as refused:
        plan_from_mapping({**base, **mapping})
    assert kind in [problem.kind for problem in refused.value.problems]
    assert all(problem.text(lang) for problem in refused.value.problems for lang in ("ja", "en"))


def _old_plan_json(word: str, name: str) -> str:
    """A plan as the code before the split stored it: the one word, no ``emulated`` key."""
    family, emulated = OLD_WORDS[word]
    data = plan_from_mapping({"name": name, "engine": family, "emulated": emulated, "model": "Qwen/Qwen3-30B-A3B",
                              "gpu": {"type": "H200", "count": 1}}).model_dump(mode="json")
    data.pop("emulated")
    return json.dumps({**data, "engine": word})


def _old_database(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Migrations 1-6 as shipped, then one queued run per old word, written as the old code
    wrote them (configuration row, plan, a point's conditions, a watch's plans)."""
    monkeypatch.setattr(steps, "MIGRATIONS", [m for m in steps.MIGRATIONS if m.number <= 6])
    steps.migrate(path, lock_timeout_s=5)
    monkeypatch.undo()
    ids = {}
    with duckdb.connect(str(path)) as con:
        for index, word in enumerate(sorted(OLD_WORDS)):
            plan = RunPlan.model_validate_json(_old_plan_json(word, word))
            config_id = ids[word] = configuration_id(plan.configuration_snapshot())
            con.execute("INSERT INTO configurations VALUES (?, ?, NULL, 'Qwen/Qwen3-30B-A3B', 'H200', 1, "
                        "'{\"kind\": \"aggregated\"}', '{}', '{}', NULL, now()::TIMESTAMP, 'old')", [config_id, word])
            con.execute("INSERT INTO runs (id, configuration_id, name, plan, status, source, submitted_by, "
                        "submitted_at, total_points) "
                        "VALUES (?, ?, ?, ?, 'queued', 'emulated', 'old', now()::TIMESTAMP, 1)",
                        [index + 1, config_id, word, _old_plan_json(word, word)])
            con.execute("INSERT INTO sweep_points (run_id, scenario, concurrency, repeat_idx, conditions) "
                        "VALUES (?, 'short', 1, 0, ?)", [index + 1, json.dumps({"engine": word, "seed": 42})])
        old = _old_plan_json("emulator", "watched")
        con.execute("INSERT INTO watches (origin_run_id, name, pinned_plan, current_plan, points, state, "
                    "created_by, created_at) VALUES (1, 'w', ?, ?, '[]', 'active', 'old', now()::TIMESTAMP)",
                    [old, old])
    return ids


def test_an_old_database_is_rewritten_and_reads_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "old.duckdb"
    ids = _old_database(path, monkeypatch)
    store = Store(path)
    assert 7 in store.migrate()
    for index, word in enumerate(sorted(OLD_WORDS)):
        run = store.get_run(index + 1)
        family, emulated = OLD_WORDS[word]
        plan = RunPlan.model_validate_json(run.plan)
        assert (run.engine, run.configuration_id) == (family, ids[word])
        assert (plan.engine, plan.emulated, configuration_id(plan.configuration_snapshot())) == (family, emulated,
                                                                                                   ids[word])
    with duckdb.connect(str(path)) as con:
        stored = dict(con.execute("SELECT id, emulated FROM configurations").fetchall())
        conditions = [json.loads(c)["engine"] for (c,) in con.execute("SELECT conditions FROM sweep_points "
                                                                        "ORDER BY run_id").fetchall()]
        watched = con.execute("SELECT pinned_plan, current_plan FROM watches").fetchone()
    assert stored == {ids[w]: OLD_WORDS[w][1] for w in OLD_WORDS}
    assert conditions == [OLD_WORDS[w][0] for w in sorted(OLD_WORDS)]
    assert watched is not None and all(json.loads(p)["engine"] == "sglang" and json.loads(p)["emulated"]
                                       for p in watched)
    # Emulated runs of either family still run anywhere; a real one waits for its engine.
    anywhere = RunnerCapabilities("demo", "H200", 1, None)
    claimed = {store.claim_next(anywhere, lease_s=30).run_id for _ in range(2)}
    assert claimed == {1, 4} and store.claim_next(anywhere, lease_s=30) is None
