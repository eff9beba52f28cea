"""``engine: vllm`` and ``engine: vllm-emulator`` in a plan (issue 18): what the plan accepts,
what ``check_plan`` says against the vLLM schemas, the command the runner and the form build,
and which runner may claim the run — against a real DuckDB file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from db import Store
from db.store import RunnerCapabilities
from domain.core.settings import get_settings
from domain.flags.dialects.vllm import known_vllm_versions
from domain.plan.checks import check_plan
from domain.plan.command import command_preview, server_argv
from domain.plan.plan_io import PlanError, plan_from_mapping
from domain.plan.run_plan import RunPlan
from tests.conftest import ROOT
from tests.support.actors import operator

BASE = {"name": "vllm", "model": "Qwen/Qwen3-30B-A3B", "gpu": {"type": "H200", "count": 1}}


def _plan(**changes: object) -> RunPlan:
    return plan_from_mapping({**BASE, "engine": "vllm-emulator", **changes})


def test_a_vllm_plan_names_its_own_version_and_is_emulated_or_measured() -> None:
    emulated = _plan(vllm_version="0.11.2")
    assert (emulated.is_vllm, emulated.emulated, emulated.engine_version) == (True, True, "0.11.2")
    measured = _plan(engine="vllm")
    assert (measured.emulated, measured.engine_version) == (False, None)
    assert emulated.configuration_snapshot()["engine_version"] == "0.11.2"


@pytest.mark.parametrize(("changes", "kind"), [
    ({"engine": "vllm", "sglang_version": "0.5.23"}, "engine_version_mismatch"),
    ({"engine": "sglang", "vllm_version": "0.33.0"}, "engine_version_mismatch"),
    ({"gpu": {"type": "H200", "count": 2}, "topology": {"kind": "router", "replicas": {"count": 2}}},
     "vllm_topology"),
])
def test_what_a_vllm_plan_cannot_say_is_refused_in_both_languages(changes: dict[str, object], kind: str) -> None:
    with pytest.raises(PlanError) as refused:
        _plan(**changes)
    [problem] = refused.value.problems
    assert problem.kind == kind
    assert "vLLM" in problem.text("en") and "vLLM" in problem.text("ja") and problem.text("ja") != problem.text("en")


def test_check_plan_validates_against_the_plans_vllm_version() -> None:
    settings = get_settings()
    ok = check_plan(_plan(server_args={"max-num-seqs": 8, "gpu-memory-utilization": 0.9}), settings, "en")
    assert ok.ok and ok.config is None  # no SGLang memory fit or contest-rule check for vLLM
    typo = check_plan(_plan(server_args={"max-num-seq": 8}), settings, "ja")
    assert not typo.ok and "vLLM 0.33.0" in typo.errors[0] and "max-num-seqs" in typo.detail
    # Renamed between the shipped versions: fine on 0.11.2 (deprecated), refused on 0.33.0.
    renamed = {"cuda-graph-sizes": [1, 2, 4, 8]}
    assert check_plan(_plan(vllm_version="0.11.2", server_args=renamed), settings, "en").ok
    newer = check_plan(_plan(vllm_version="0.33.0", server_args=renamed), settings, "en")
    assert not newer.ok and "cudagraph-capture-sizes" in newer.detail
    forbidden = check_plan(_plan(server_args={"trust-remote-code": True}), settings, "en")
    assert not forbidden.ok and "policy" in forbidden.errors[0]


def test_a_real_vllm_plan_warns_where_no_vllm_is_configured() -> None:
    report = check_plan(_plan(engine="vllm"), get_settings(), "en")
    assert report.ok and any("BENCHDECK_VLLM_PYTHON" in w for w in report.warnings)


def test_the_command_is_vllm_serve_or_the_emulator_as_vllm_with_the_runners_flags() -> None:
    args = {"max-num-seqs": 8, "gpu-memory-utilization": 0.85}
    real = server_argv(_plan(engine="vllm", server_args=args), python="/opt/vllm/bin/python", port=8123,
                       version="0.33.0", tokenizer_dir=None)
    assert real[:4] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.cli.main", "serve"]
    for flag, value in (("--model", BASE["model"]), ("--host", "127.0.0.1"), ("--port", "8123"),
                        ("--served-model-name", BASE["model"]), ("--max-num-seqs", "8"),
                        ("--gpu-memory-utilization", "0.85")):
        assert real[real.index(flag) + 1] == value
    emulated = server_argv(_plan(server_args=args), python="", port=8123, version="0.11.2",
                           tokenizer_dir=Path("/tok"), app_python="/app/python")
    assert emulated[:5] == ["/app/python", "-m", "emulator", "--emulate-engine", "vllm"]
    assert emulated[emulated.index("--emulate-vllm-version") + 1] == "0.11.2"
    assert emulated[emulated.index("--emulate-tokenizer-dir") + 1] == "/tok"
    assert command_preview(_plan(engine="vllm"), "0.33.0").startswith("<vllm-python> -m vllm.entrypoints.cli.main")


def test_only_a_runner_with_vllm_claims_a_vllm_run_and_any_runner_an_emulated_one(tmp_path: Path) -> None:
    store = Store(tmp_path / "bench.duckdb")
    store.migrate()
    real, _ = store.submit_run(_plan(engine="vllm", vllm_version="0.33.0"), submitted_by=operator())
    emulated, _ = store.submit_run(_plan(name="emulated"), submitted_by=operator())
    assert store.get_run(emulated).source == "emulated" and store.get_run(real).source == "measured"
    demo = RunnerCapabilities("demo", "H200", 1, None)
    first = store.claim_next(demo, lease_s=30)
    assert first is not None and first.run_id == emulated
    assert store.claim_next(demo, lease_s=30) is None  # the real vLLM run waits
    older = RunnerCapabilities("older", "H200", 1, None, vllm_version="0.11.2")
    assert store.claim_next(older, lease_s=30) is None  # pinned to 0.33.0
    host = RunnerCapabilities("vllm-host", "H200", 1, None, vllm_version="0.33.0")
    claim = store.claim_next(host, lease_s=30)
    assert claim is not None and claim.run_id == real


def test_runner_check_validates_a_vllm_plan_against_every_shipped_version(tmp_path: Path) -> None:
    plan = tmp_path / "vllm.yaml"
    plan.write_text("name: vllm-check\nengine: vllm-emulator\nmodel: Qwen/Qwen3-30B-A3B\n"
                    "gpu: {type: H200, count: 1}\nserver_args:\n  cuda-graph-sizes: [1, 2, 4, 8]\n"
                    "  max-num-seq: 8\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "runner", "--lang", "en", "check", str(plan)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    out = done.stdout + done.stderr
    for version in known_vllm_versions():  # each line names the version it is about
        assert f"vLLM {version}: --max-num-seq is not a flag of vLLM {version}." in out
    assert "--cuda-graph-sizes 1 2 4 8 → --cudagraph-capture-sizes 1 2 4 8" in out  # renamed in 0.33.0: translated
    assert "--max-num-seqs" in out  # the nearest real name
