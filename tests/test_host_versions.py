"""Host SGLang versions are first-class (issue 40): a runner host whose SGLang is a release
benchdeck ships no schema for (the real 0.5.22, installed by scripts/lib.sh
``setup_sglang_host_env``) is validated with the schema it dumps; a version nobody has is a
refusal naming the versions that exist; a run no runner can claim says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from db import Store
from domain.core.settings import Settings
from domain.flags.schema import SchemaError, forget_host_schemas, known_versions, load_schema, register_host_schema
from domain.plan.checks import check_plan
from domain.plan.claimability import Wanted, host_version_for, why_unclaimable
from runner.schema_sync import installed_schema
from tests.conftest import ROOT
from tests.plans import MINIMAL_PLAN_YAML, minimal_plan
from tests.support.actors import admin
from tests.support.hf_cache import make_hf_cache

HOST_PYTHON = ROOT / ".venv-sglang-host" / "bin" / "python"
HOST_VERSION = "0.5.22"
APP = str(ROOT / "app.py")

pytestmark = pytest.mark.sglang


@pytest.fixture(scope="module")
def host_dump() -> dict[str, Any]:
    """The real 0.5.22 package's schema, dumped by the runner's own script (once: ~10-25 s)."""
    if not HOST_PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail("scripts/test.sh installs .venv-sglang-host (setup_sglang_host_env)")
        pytest.skip("needs .venv-sglang-host (scripts/lib.sh setup_sglang_host_env)")
    schema = installed_schema(HOST_PYTHON)
    assert schema["sglang_version"] == HOST_VERSION
    return schema


@pytest.fixture(autouse=True)
def no_host_schemas() -> Iterator[None]:
    forget_host_schemas()
    yield
    forget_host_schemas()


def test_the_host_version_is_not_shipped() -> None:
    """The rehearsal means something only while benchdeck ships no schema for 0.5.22."""
    assert HOST_VERSION not in known_versions()


def test_an_unknown_version_is_refused_naming_the_versions_that_exist() -> None:
    with pytest.raises(SchemaError, match=r"no flag schema for SGLang 0\.5\.25.*0\.5\.23"):
        load_schema("0.5.25")
    report = check_plan(minimal_plan(engine="sglang", sglang_version="0.5.25"), Settings(), "en")
    assert report.errors == [report.detail]
    assert "0.5.25" in report.detail and "0.5.23" in report.detail and "0.4.6.post5" in report.detail


def test_a_registered_host_schema_validates_its_version(host_dump: dict[str, Any]) -> None:
    register_host_schema(host_dump)
    ok = check_plan(minimal_plan(engine="sglang", sglang_version=HOST_VERSION), Settings(), "en")
    assert ok.errors == [] and "SGLang 0.5.22" in ok.detail
    bad = check_plan(minimal_plan(engine="sglang", sglang_version=HOST_VERSION,
                                  server_args={"tp-size": 1, "no-such-flag": 1}), Settings(), "en")
    assert any("no-such-flag" in error for error in bad.errors)


# -- why a queued run waits ----------------------------------------------------------------------


@dataclass
class _Runner:
    id: str = "gpu-a"
    gpu_type: str = "H200"
    gpu_count: int = 8
    sglang_version: str | None = "0.5.24"
    heartbeat_at: datetime = datetime(2026, 1, 1)
    healthy: bool = True
    unhealthy_reason: str | None = None
    info: str = "{}"


NOW = datetime(2026, 1, 1, 0, 0, 10)


def _why(wanted: Wanted, *runners: _Runner) -> list[str]:
    return [b.text("en") for b in why_unclaimable(wanted, list(runners), NOW, offline_after_s=60)]


def test_each_reason_a_runner_cannot_claim_is_named_with_its_fix() -> None:
    sglang = Wanted("sglang", "0.5.23", "H200", 1)
    assert "has sglang 0.5.24, the run pins 0.5.23; resubmit it pinned to 0.5.24" in _why(sglang, _Runner())[0]
    assert "serves H100 GPUs, the run needs H200" in _why(sglang, _Runner(gpu_type="H100"))[0]
    assert "serves 8 GPUs, the run needs 16" in _why(Wanted("sglang", None, "H200", 16, emulated=True), _Runner())[0]
    assert "has no real sglang" in _why(sglang, _Runner(sglang_version=None))[0]
    assert "unhealthy, claims nothing: disk full" in _why(
        Wanted("sglang", None, "H200", 1), _Runner(healthy=False, unhealthy_reason="disk full"))[0]
    assert "offline (last heartbeat 3610 s ago)" in _why(
        Wanted("sglang", None, "H200", 1, emulated=True), _Runner(heartbeat_at=NOW - timedelta(hours=1, seconds=10)))[0]
    assert "No runner has registered" in _why(sglang)[0]


def test_a_run_waits_only_for_a_foreign_process_on_its_own_gpus() -> None:
    busy = _Runner(info=json.dumps({"busy_gpus": {"7": "foreign process on the GPUs: GPU7 pid 4242 (20.0 GB)"}}))
    assert _why(Wanted("sglang", None, "H200", 1, gpu_ids=frozenset({0})), busy) == []
    [why] = _why(Wanted("sglang", None, "H200", 8, gpu_ids=frozenset(range(8))), busy)
    assert "gpu-a: GPU 7, which this run would use, is held by another process: foreign process on the GPUs: " \
        "GPU7 pid 4242" in why


def test_a_run_one_runner_can_claim_has_no_reason() -> None:
    assert _why(Wanted("sglang", "0.5.24", "H200", 8), _Runner(id="old", sglang_version="0.5.23"), _Runner()) == []
    assert _why(Wanted("sglang", None, "H200", 8), _Runner()) == []


def test_an_unpinned_plan_takes_the_version_of_the_runner_of_its_gpu_type() -> None:
    runners = [_Runner(id="a", gpu_type="H100", sglang_version="0.5.20"), _Runner(id="b", sglang_version="0.5.22"),
               _Runner(id="c", sglang_version=None, heartbeat_at=NOW)]
    assert host_version_for("H200", runners) == "0.5.22"
    runners[0].heartbeat_at = NOW  # heard from last
    assert host_version_for("B200", runners) == "0.5.20"  # no runner of that type: any real one
    assert host_version_for("H200", [_Runner(sglang_version=None)]) is None


# -- the command line and the daemon on a 0.5.22 host ---------------------------------------------


def _cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def _plan_file(tmp_path: Path, name: str, version: str | None) -> Path:
    text = MINIMAL_PLAN_YAML.replace("engine: emulator ", "engine: sglang   ").replace("concurrency: [1, 4]",
                                                                                          "concurrency: [1]")
    if version is not None:
        text = text.replace('# sglang_version: "0.5.23"', f'sglang_version: "{version}"')
    path = tmp_path / f"{name}.yaml"
    path.write_text(text.replace("tp1-baseline", name), encoding="utf-8")
    return path


def _no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr


@pytest.mark.slow
def test_a_0522_host_validates_claims_and_explains(env: dict[str, str], tmp_path: Path,
                                                  host_dump: dict[str, Any]) -> None:
    """The Done-when of issue 40's first item, end to end through the real CLI and daemon."""
    make_hf_cache(tmp_path / "models")  # the plans' Qwen/Qwen3-30B-A3B, in the HF cache layout
    env = dict(env, BENCHDECK_SGLANG_PYTHON=str(HOST_PYTHON), BENCHDECK_STARTUP_TIMEOUT_S="120",
               BENCHDECK_MODEL_DIRS=json.dumps([str(tmp_path / "models")]))
    pinned, unpinned = _plan_file(tmp_path, "pinned", HOST_VERSION), _plan_file(tmp_path, "unpinned", None)
    before = _cli(env, "check", str(pinned))  # no runner has registered yet: nothing has 0.5.22
    _no_traceback(before)
    assert before.returncode == 1 and "Versions that exist: 0.4.6.post5" in before.stdout
    first = _cli(env, "work", "--burst")  # registers the host and its dumped schema; the queue is empty
    assert first.returncode == 0, first.stderr
    for plan in (pinned, unpinned):
        done = _cli(env, "check", str(plan))
        _no_traceback(done)
        assert done.returncode == 0 and "Flag check (SGLang 0.5.22)" in done.stdout, done.stdout
    assert "validated against the runner host's SGLang 0.5.22" in done.stdout  # the unpinned one
    elsewhere = _cli(env, "submit", str(_plan_file(tmp_path, "elsewhere", "0.5.23")))
    assert elsewhere.returncode == 0 and "No registered runner has SGLang 0.5.23" in elsewhere.stderr
    assert _cli(env, "submit", str(unpinned)).returncode == 0
    burst = _cli(env, "work", "--burst")  # the launch fails here (no GPU); the runner lives on
    _no_traceback(burst)
    assert burst.returncode == 0
    status = _cli(env, "status")
    assert "runner-local: has sglang 0.5.22, the run pins 0.5.23" in status.stdout, status.stdout
    ended = [line for line in status.stdout.splitlines() if " unpinned" in line]
    assert ended and "queued" not in ended[0] and "running" not in ended[0]


def test_the_run_and_runs_pages_say_why_a_run_waits(app_env: Path) -> None:
    store = Store(app_env)
    store.migrate()
    store.register_runner("gpu-a", host="a", gpu_type="H200", gpu_count=8, sglang_version="0.5.20", healthy=True,
                          unhealthy_reason=None, info={})
    run_id, _ = store.submit_run(minimal_plan(engine="sglang", sglang_version="0.5.23"), submitted_by=admin())
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("pages/runs.py").run()
    assert not at.exception
    cells = "\n".join(str(v) for frame in at.dataframe for v in frame.value.to_numpy().ravel())
    assert "gpu-a: has sglang 0.5.20, the run pins 0.5.23" in cells
    at.query_params["run"] = str(run_id)
    at.switch_page("pages/run.py").run()
    assert not at.exception
    assert any("gpu-a: has sglang 0.5.20, the run pins 0.5.23" in w.value for w in at.warning)
