"""Models from the host's disk (issue 40): listed with their config.json facts (HF cache
layouts resolved to their snapshot), the memory fit and context check from config.json, every
shard of the index checked before launch, the server offline, an HF id not on disk refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from domain.core.settings import Settings
from domain.plan.checks import check_plan
from domain.plan.local_models import find_models, model_shape_for
from runner.model_access import model_problem, server_env
from tests.plans import minimal_plan
from tests.support.hf_cache import SHARDS, make_hf_cache, remove_shard


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    make_hf_cache(tmp_path / "hub")
    return tmp_path / "hub"


def _settings(cache: Path, **extra: object) -> Settings:
    """This host runs SGLang (any interpreter path: nothing here starts it)."""
    return Settings(model_dirs=[cache], sglang_python=Path("/usr/bin/python3"), **extra)


def test_the_cache_layout_is_listed_with_its_config_facts(cache: Path) -> None:
    [model] = find_models([cache])
    assert model.name == "Qwen/Qwen3-30B-A3B" and model.path.parent.name == "snapshots"
    row = model.as_row()
    assert (row["architecture"], row["layers"], row["experts"], row["dtype"], row["context_length"]) == (
        "Qwen3MoeForCausalLM", 48, 128, "bfloat16", 40960)


def test_memory_fit_reads_config_json_not_the_name(cache: Path) -> None:
    snapshot = find_models([cache])[0].path
    renamed = snapshot.parents[3] / "finetunes" / "team-moe-v2"  # a name no preset matches
    renamed.parent.mkdir()
    renamed.symlink_to(snapshot, target_is_directory=True)
    shape = model_shape_for(str(renamed), [cache.parent])
    assert shape is not None and shape.num_layers == 48 and round(shape.total_params_b, 1) == 30.5
    report = check_plan(minimal_plan(engine="sglang", model=str(renamed)), _settings(cache.parent), "en")
    assert report.config is not None and report.config.memory is not None, report.detail


def test_the_context_check_uses_the_local_config(cache: Path) -> None:
    plan = minimal_plan(engine="sglang", benchmark={"scenarios": [{"name": "long", "input_len": 40000,
                                                                     "output_len": 2000}], "concurrency": [1]})
    report = check_plan(plan, _settings(cache), "en")
    assert any("40960" in e and "config.json" in e for e in report.errors), report.errors


def test_an_hf_id_not_on_disk_is_refused_naming_the_dirs_searched(cache: Path) -> None:
    report = check_plan(minimal_plan(engine="sglang", model="Qwen/Qwen3-235B-A22B-FP8"), _settings(cache), "en")
    assert any("Qwen/Qwen3-235B-A22B-FP8 is not on this host's disk" in e and str(cache) in e for e in report.errors)
    assert report.errors[0] in report.detail  # runner check prints it
    allowed = check_plan(minimal_plan(engine="sglang", model="Qwen/Qwen3-235B-A22B-FP8"),
                         _settings(cache, allow_model_downloads=True), "en")
    assert not any("not on this host's disk" in e for e in allowed.errors)
    emulated = check_plan(minimal_plan(model="Qwen/Qwen3-235B-A22B-FP8"), _settings(cache), "en")
    assert emulated.errors == []  # the emulator reads no weights
    elsewhere = check_plan(minimal_plan(engine="sglang", model="Qwen/Qwen3-235B-A22B-FP8"),
                           Settings(model_dirs=[cache]), "en")
    assert elsewhere.errors == []  # no SGLang here: the runner host's disk is checked there, before launch


def test_a_missing_shard_is_named_before_launch(cache: Path) -> None:
    plan = minimal_plan(engine="sglang", model="Qwen/Qwen3-30B-A3B")
    assert model_problem(plan, _settings(cache)) is None
    remove_shard(find_models([cache])[0].path)
    problem = model_problem(plan, _settings(cache))
    assert problem is not None and SHARDS[1] in problem and SHARDS[0] not in problem
    assert any(SHARDS[1] in e for e in check_plan(plan, _settings(cache), "en").errors)


def test_the_server_runs_offline_from_the_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    env = server_env(minimal_plan(engine="sglang", model="Qwen/Qwen3-30B-A3B"), _settings(cache))
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_HUB_CACHE"] == str(cache)
    settings = _settings(cache)
    assert env["TRITON_CACHE_DIR"] == str(settings.cache_dir / "triton")  # JIT caches outlive a restart
    online = server_env(minimal_plan(engine="sglang"), _settings(cache, allow_model_downloads=True))
    assert "HF_HUB_OFFLINE" not in online or online["HF_HUB_OFFLINE"] != "1"


def test_the_build_form_lists_the_hosts_models_and_uses_one(app_env: Path, cache: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from streamlit.testing.v1 import AppTest

    from domain.core.settings import get_settings
    from tests.conftest import ROOT

    monkeypatch.setenv("BENCHDECK_MODEL_DIRS", json.dumps([str(cache)]))
    get_settings.cache_clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("pages/build.py").run()
    assert not at.exception
    assert any(e.label.startswith("Models on this host (1") for e in at.expander)
    cells = "\n".join(str(v) for frame in at.dataframe for v in frame.value.to_numpy().ravel())
    assert "Qwen3MoeForCausalLM" in cells and "40960" in cells
    picker = next(s for s in at.selectbox if s.label == "Use this model")
    picker.set_value("Qwen/Qwen3-30B-A3B").run()
    assert next(w for w in at.text_input if w.label == "Model").value == "Qwen/Qwen3-30B-A3B"
