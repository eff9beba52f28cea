"""``python -m runner doctor`` (issue 40): the host checked as a whole, in both languages,
exit 1 on a failure; ``--bundle`` an archive a helper can read.  This machine has no GPU,
so the real command must fail its NVML check; the GPU checks' logic is also run over the
NVML stand-in (tests/support/fake_nvml.py), and for real on the lent GPU machine."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from domain.core.env_file import systemd_env
from domain.core.settings import Settings
from runner.doctor_checks import auth_findings, env_file_findings
from runner.doctor_gpu import gpu_findings
from tests.conftest import ROOT
from tests.support.fake_nvml import FakeGpu, FakeNvml


def _doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def doctor_json(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One real ``doctor --json --bundle --tiny-run HF_CACHE --emulated`` on this GPU-less
    machine (the tiny run on the emulator, as docs/host.md allows there), shared below."""
    import os

    from tests.support.hf_cache import make_hf_cache

    tmp = tmp_path_factory.mktemp("doctor")
    make_hf_cache(tmp / "hub")
    (tmp / "runs" / "attempt-7").mkdir(parents=True)
    (tmp / "runs" / "attempt-7" / "server.log").write_text(
        "[2026-01-01 00:00:00] Load weight begin. avail mem=139.00 GB\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n", encoding="utf-8")
    env = dict(os.environ, BENCHDECK_DB=str(tmp / "db.duckdb"), BENCHDECK_WORK_DIR=str(tmp / "runs"),
               BENCHDECK_LANGUAGE="en", BENCHDECK_MODEL_DIRS=json.dumps([str(tmp)]), PYTHONPATH=str(ROOT))
    bundle = tmp / "bundle.tar.gz"
    tiny = ("--tiny-run", str(tmp / "hub"), "--emulated")
    return _doctor(env, "doctor", "--json", "--bundle", str(bundle), *tiny), bundle


def test_doctor_fails_here_naming_the_nvml_check(doctor_json: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    done, _ = doctor_json
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False and "gpu.nvml" in report["failed"]
    nvml = next(c for c in report["checks"] if c["group"] == "gpu" and c["name"] == "nvml")
    assert nvml["status"] == "fail" and "NVML is unavailable" in nvml["message"]
    names = {f"{c['group']}.{c['name']}" for c in report["checks"]}
    assert {"settings.parse", "interpreters.bench_client", "ports.engine_range", "disk.work_dir", "disk.dev_shm",
            "auth.app_start"} <= names
    assert "Traceback" not in done.stderr


def test_the_bundle_holds_the_report_the_environments_and_the_attempts(
        doctor_json: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    done, bundle = doctor_json
    with tarfile.open(bundle) as tar:
        names = set(tar.getnames())
        report = json.loads(tar.extractfile("doctor.json").read())
        diagnosis = json.loads(tar.extractfile("attempts/attempt-7/diagnose.json").read())
        settings = json.loads(tar.extractfile("settings.json").read())
    assert {"doctor.txt", "pip-freeze/app.txt", "pip-freeze/bench.txt", "nvidia-smi-q.txt",
            "attempts/attempt-7/server.log.tail"} <= names
    assert report["failed"] == json.loads(done.stdout)["failed"]
    assert diagnosis["failure"]["kind"] == "oom"
    assert settings["BENCHDECK_WORK_DIR"]["source"] == "environment"
    assert settings["BENCHDECK_TOKENIZER_DIR"]["value"] != "***"  # a path, not a secret


def test_the_tiny_run_on_the_emulator_is_labelled_and_timed(
        doctor_json: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    done, bundle = doctor_json
    tiny = {c["name"]: c for c in json.loads(done.stdout)["checks"] if c["group"] == "tiny_run"}
    assert {name: c["status"] for name, c in tiny.items()} == {"launch": "ok", "stages": "ok", "point": "ok"}
    assert all(c["message"].startswith("[EMULATED] ") for c in tiny.values())
    assert "Qwen/Qwen3-30B-A3B (SGLang 0.5.23, 1 GPU) served after" in tiny["launch"]["message"]
    stages = tiny["stages"]["facts"]
    assert list(stages["stage_seconds"]) == ["init", "weights", "kv_cache", "cuda_graphs", "http_server", "warmup",
                                             "ready"]
    assert min(stages["stage_seconds"].values()) >= 0 and stages["server_log_says"]["load_weight_elapsed_s"] > 0
    assert tiny["point"]["facts"]["metrics"]["completed"] == 3 and "not a measurement" in tiny["point"]["message"]
    with tarfile.open(bundle) as tar:
        assert "tiny_run.point" in tar.extractfile("doctor.txt").read().decode()
        logs = [n for n in tar.getnames() if n.startswith("attempts/doctor-tiny-run-")]
    assert any(n.endswith("/attempt-0/server.log.tail") for n in logs), logs


def test_without_sglang_the_tiny_run_says_why_it_cannot_run(tmp_path: Path) -> None:
    from runner.doctor_tiny import tiny_run_findings
    from tests.support.hf_cache import make_hf_cache

    make_hf_cache(tmp_path / "hub")
    [unset] = tiny_run_findings(tmp_path / "hub", Settings(), emulated=False)
    assert (unset.status, unset.name) == ("fail", "launch")
    assert "BENCHDECK_SGLANG_PYTHON is unset" in unset.message("en") and "--emulated" in unset.message("en")
    assert "実機の SGLang がありません" in unset.message("ja")
    [nothing] = tiny_run_findings(tmp_path / "empty", Settings(), emulated=True)
    assert nothing.status == "fail" and "No model under" in nothing.message("en")


def test_stage_durations_run_from_each_stage_to_the_next() -> None:
    from runner.doctor_tiny import stage_durations

    assert stage_durations({"weights": 3.0, "kv_cache": 10.5, "ready": 12.0}, 1.0, 12.5) == {
        "init": 2.0, "weights": 7.5, "kv_cache": 1.5, "ready": 0.5}


def test_secrets_are_redacted_by_their_names_words() -> None:
    from runner.doctor_checks import redacted

    assert redacted("BENCHDECK_API_TOKEN", "t0p") == "***" and redacted("BENCHDECK_OIDC_SECRET", "s") == "***"
    assert redacted("BENCHDECK_TOKENIZER_DIR", "/data/tok") == "/data/tok"


def test_doctor_speaks_japanese(env: dict[str, str]) -> None:
    done = _doctor(dict(env, BENCHDECK_LANGUAGE="ja"), "doctor")
    assert done.returncode == 1
    assert "NVML を使えません" in done.stdout and "件のチェックが失敗しました" in done.stdout
    assert "[SKIP] tiny_run.launch: --tiny-run なし" in done.stdout


def test_unreadable_settings_are_a_named_failure_not_a_traceback(env: dict[str, str]) -> None:
    broken = dict(env, BENCHDECK_ENGINE_PORT_RANGE="30000")
    done = _doctor(broken, "doctor", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 1 and "settings.parse" in report["failed"]
    assert "BENCHDECK_ENGINE_PORT_RANGE" in report["checks"][0]["message"]
    status = _doctor(broken, "status")
    assert status.returncode == 2 and "BENCHDECK_ENGINE_PORT_RANGE" in status.stderr
    assert "Traceback" not in done.stderr + status.stderr


def test_the_gpu_checks_pass_on_a_clean_host_and_name_each_problem() -> None:
    gpus = [FakeGpu(f"GPU-{i:08d}-aaaa") for i in range(8)]
    clean = gpu_findings(Settings(runner_gpu_type="H200", runner_gpu_count=8), FakeNvml(gpus))
    assert {f.name: f.status for f in clean} == {"nvml": "ok", "type": "ok", "count": "ok",
                                                 "foreign_processes": "ok", "ecc_remap": "ok", "clocks": "ok"}
    gpus[3].processes = [(4242, 30.0)]
    problems = {f.name: f for f in gpu_findings(Settings(runner_gpu_type="B200", runner_gpu_count=8),
                                                FakeNvml(gpus[:4]))}
    assert problems["type"].status == "fail" and problems["count"].status == "fail"
    assert "GPU3 pid 4242" in problems["foreign_processes"].message("en")


def test_an_env_file_is_read_as_systemd_reads_it() -> None:
    text = ("# comment\n; another\nA=1\n  B = two words  \nC='[\"x\"]'\nD=\"a\\$b\\q\"\nE=x\\\ny\nF\n"
            "G=\nH=\"multi\nline\"\n")
    assert systemd_env(text) == {"A": "1", "B": "two words", "C": '["x"]', "D": "a$b\\q", "E": "xy", "G": "",
                                 "H": "multi\nline"}


def test_an_env_file_that_bash_reads_otherwise_fails(tmp_path: Path) -> None:
    unquoted = tmp_path / "bad.env"
    unquoted.write_text('BENCHDECK_ADMINS=["alice@example.com"]\nBENCHDECK_RUNNER_ID=gpu-1\n', encoding="utf-8")
    [bad] = env_file_findings(unquoted)
    assert bad.status == "fail" and "BENCHDECK_ADMINS" in bad.message("en") and "RUNNER_ID" not in bad.message("en")
    quoted = tmp_path / "good.env"
    quoted.write_text("BENCHDECK_ADMINS='[\"alice@example.com\"]'\n", encoding="utf-8")
    assert env_file_findings(quoted)[0].status == "ok"


def test_auth_that_would_stop_the_app_or_admit_nobody_fails() -> None:
    refused = auth_findings(Settings(auth_mode="proxy"))
    assert refused[0].status == "fail" and "TRUSTED_PROXIES" in refused[0].message("en")
    nobody = auth_findings(Settings(auth_mode="proxy", trusted_proxies=["127.0.0.1"]))
    assert [f.status for f in nobody] == ["ok", "fail"] and "nobody" in nobody[1].message("en")
    team = auth_findings(Settings(auth_mode="proxy", trusted_proxies=["127.0.0.1"], operators=["@example.com"]))
    assert [f.status for f in team] == ["ok", "ok"]


def test_the_models_found_are_listed_and_a_missing_shard_fails(tmp_path: Path) -> None:
    from runner.doctor_checks import model_dir_findings
    from tests.support.hf_cache import SHARDS, make_hf_cache, remove_shard

    snapshot = make_hf_cache(tmp_path / "hub")
    listed, files = model_dir_findings(Settings(model_dirs=[tmp_path / "hub"]))
    assert listed.facts["models"][0]["architecture"] == "Qwen3MoeForCausalLM" and files.status == "ok"
    remove_shard(snapshot)
    _, files = model_dir_findings(Settings(model_dirs=[tmp_path / "hub"]))
    assert (files.name, files.status) == ("Qwen/Qwen3-30B-A3B", "fail") and SHARDS[1] in files.message("en")
    [missing] = model_dir_findings(Settings(model_dirs=[tmp_path / "nowhere"]))
    assert missing.status == "fail" and "missing or unreadable" in missing.message("en")
