"""The host guide (docs/host.md, issue 40) rehearsed as literally as this GPU-less machine
allows: the documented env file, read as systemd and bash read it; a runner host whose SGLang
is a release benchdeck ships no schema for (the real 0.5.22, installed by scripts/lib.sh
``setup_sglang_host_env``) validated with the schema it dumps; a model in the Hugging Face
cache layout; the app behind the real nginx of ops/nginx-benchdeck.conf, where a teammate
queues the form's defaults and watches the run live; and each broken precondition named
where a user looks.  The emulator stands in only for the GPU server process."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from db import Store
from domain.core.env_file import systemd_env
from domain.core.settings import Settings
from domain.flags.schema import SchemaError, forget_host_schemas, known_versions, load_schema, register_host_schema
from domain.plan.checks import check_plan
from domain.plan.claimability import Wanted, host_version_for, why_unclaimable
from runner.doctor_checks import interpreter_findings, model_dir_findings, port_findings
from runner.doctor_tiny import tiny_run_findings
from runner.env_file_check import bash_env
from runner.schema_sync import cached_installed_schema
from tests.conftest import ROOT
from tests.plans import MINIMAL_PLAN_YAML, minimal_plan
from tests.support.actors import admin
from tests.support.app_server import (
    ACTION_TIMEOUT_MS,
    CHROMIUM,
    CHROMIUM_ARGS,
    free_port,
    queued_line,
    running_app,
    screenshot,
)
from tests.support.hf_cache import SHARDS, make_hf_cache, remove_shard
from tests.support.runner_harness import runner_env, start_runner

HOST_PYTHON = ROOT / ".venv-sglang-host" / "bin" / "python"
HOST_VERSION = "0.5.22"
APP = str(ROOT / "app.py")
GUIDE = ROOT / "docs" / "host.md"
NGINX_SITE = ROOT / "ops" / "nginx-benchdeck.conf"
NGINX = "/usr/sbin/nginx"
LOGIN, PASSWORD = "alice@example.com", "correct horse"

pytestmark = pytest.mark.sglang


@pytest.fixture(scope="module")
def host_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runner's schema cache (BENCHDECK_CACHE_DIR) for the rehearsal's host."""
    return tmp_path_factory.mktemp("host-cache")


@pytest.fixture(scope="module")
def host_dump(host_cache: Path) -> dict[str, Any]:
    """The real 0.5.22 package's schema, dumped by the runner's own script into the runner's
    cache (once: ~10-25 s), so the rehearsal's runner starts as a restarted one does."""
    if not HOST_PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail("scripts/test.sh installs .venv-sglang-host (setup_sglang_host_env)")
        pytest.skip("needs .venv-sglang-host (scripts/lib.sh setup_sglang_host_env)")
    schema = cached_installed_schema(HOST_PYTHON, host_cache)
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
    emulated = check_plan(minimal_plan(sglang_version=HOST_VERSION), Settings(), "en")  # the emulator's schemas only
    assert emulated.errors and "The emulator speaks only the SGLang versions benchdeck ships" in emulated.errors[0]


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


# -- the guide's env file (step 5) ---------------------------------------------------------------


def documented_env_file() -> str:
    """The fenced block after the guide's ``env-file`` marker, as written."""
    text = GUIDE.read_text(encoding="utf-8")
    after = text.split("<!-- env-file", 1)[1]
    return after.split("```ini\n", 1)[1].split("```", 1)[0]


def test_the_documented_env_file_reads_the_same_to_systemd_and_bash(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "env"
    path.write_text(documented_env_file(), encoding="utf-8")
    by_systemd = systemd_env(path.read_text(encoding="utf-8"))
    assert by_systemd == bash_env(path) and len(by_systemd) >= 15
    for name, value in by_systemd.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.admins == ["alice@example.com"] and settings.model_dirs == [Path("/models")]
    assert settings.trusted_proxies == ["127.0.0.1"] and settings.auth_mode == "proxy"


# -- the rehearsal ---------------------------------------------------------------------------------


def _host_env(env: dict[str, str], tmp_path: Path, cache: Path) -> dict[str, str]:
    """The documented settings as written, with the host's paths moved under this test's
    directory (there is no /srv, /models or /opt/sglang here): SGLang's interpreter is the
    real 0.5.22 one, the schema cache the one its dump went to."""
    settings = systemd_env(documented_env_file())
    moved = {"BENCHDECK_DB": str(tmp_path / "srv" / "benchdeck.duckdb"),
             "BENCHDECK_WORK_DIR": env["BENCHDECK_WORK_DIR"], "BENCHDECK_CACHE_DIR": str(cache),
             "BENCHDECK_MODEL_DIRS": json.dumps([str(tmp_path / "models")]),
             "BENCHDECK_SGLANG_PYTHON": str(HOST_PYTHON), "BENCHDECK_LANGUAGE": "en"}
    assert set(moved) - {"BENCHDECK_LANGUAGE"} <= set(settings)  # each moved setting is one the guide writes
    (tmp_path / "srv").mkdir()
    base = {k: v for k, v in env.items() if not k.startswith("BENCHDECK_")}
    return {**base, **settings, **moved}


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


def _messages(findings: list[Any]) -> str:
    return "\n".join(f"{f.group}.{f.name} {f.status}: {f.message('en')}" for f in findings)


def _broken_preconditions_are_named(tmp_path: Path) -> None:
    """What ``runner doctor`` (the guide's step 6) says of each precondition this host could
    break, by the doctor's own checks: no GPU for the tiny run, an interpreter without
    SGLang, a missing weight shard, engine ports taken, a model that is not on disk (refused
    at submit, naming the directories searched), a model directory that is not there."""
    settings = Settings(sglang_python=HOST_PYTHON, model_dirs=[tmp_path / "models"])
    no_gpu = _messages(tiny_run_findings(tmp_path / "models", settings, emulated=False))
    assert "tiny_run.launch fail: The tiny run cannot run: there is no GPU to launch on (NVML: " in no_gpu, no_gpu
    wrong = _messages(interpreter_findings(Settings(sglang_python=Path(sys.base_prefix) / "bin" / "python3")))
    assert "interpreters.sglang fail:" in wrong and "cannot dump SGLang's schema" in wrong, wrong
    remove_shard(make_hf_cache(tmp_path / "broken"))
    shard = _messages(tiny_run_findings(tmp_path / "broken", settings, emulated=True))
    assert "tiny_run.model fail: The tiny run cannot start: " in shard and SHARDS[1] in shard, shard
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        ports = _messages(port_findings(Settings(engine_port_range=(port, port + 1))))
    assert "ports.engine_range fail: Only" in ports and f"{port}-{port + 1}" in ports, ports
    absent = check_plan(minimal_plan(engine="sglang", model="Qwen/Qwen3-235B-A22B-FP8"), settings, "en")
    assert any(str(tmp_path / "models") in error for error in absent.errors), absent.errors
    nowhere = _messages(model_dir_findings(Settings(model_dirs=[tmp_path / "nowhere"])))
    assert f"models.{tmp_path / 'nowhere'} fail: " in nowhere and "missing or unreadable" in nowhere, nowhere


def _register_and_submit(env: dict[str, str], tmp_path: Path) -> None:
    """Before any runner: a plan pinned to the host's version is refused naming the versions
    that exist; the first runner registers its dumped schema; then a pinned and an unpinned
    plan validate against it, and a plan pinned to a version nobody has is queued with a warning."""
    pinned, unpinned = _plan_file(tmp_path, "pinned", HOST_VERSION), _plan_file(tmp_path, "unpinned", None)
    before = _cli(env, "check", str(pinned))
    _no_traceback(before)
    assert before.returncode == 1 and "Versions that exist: 0.4.6.post5" in before.stdout
    first = _cli(env, "work", "--burst")  # registers the host (its schema from the cache); the queue is empty
    assert first.returncode == 0, first.stderr
    for plan in (pinned, unpinned):
        done = _cli(env, "check", str(plan))
        _no_traceback(done)
        assert done.returncode == 0 and "Flag check (SGLang 0.5.22)" in done.stdout, done.stdout
    assert "validated against the runner host's SGLang 0.5.22" in done.stdout  # the unpinned one
    elsewhere = _cli(env, "submit", str(_plan_file(tmp_path, "elsewhere", "0.5.23")))
    assert elsewhere.returncode == 0 and "No registered runner has SGLang 0.5.23" in elsewhere.stderr
    assert _cli(env, "submit", str(unpinned)).returncode == 0


def _tls_and_logins(tmp_path: Path) -> Path:
    tls = tmp_path / "tls"
    tls.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-keyout", str(tls / "benchdeck.key"), "-out", str(tls / "benchdeck.crt")],
                   check=True, capture_output=True, timeout=60)
    hashed = subprocess.run(["openssl", "passwd", "-apr1", PASSWORD], check=True, capture_output=True, text=True,
                            timeout=30).stdout.strip()
    (tmp_path / "htpasswd").write_text(f"{LOGIN}:{hashed}\n", encoding="utf-8")
    return tls


def _site(tmp_path: Path, tls: Path, listen: int, app_port: int) -> str:
    """The shipped site file with this test's port, certificate, logins and app port."""
    site = NGINX_SITE.read_text(encoding="utf-8")
    site = site.replace("listen 443 ssl;", f"listen 127.0.0.1:{listen} ssl;")
    site = site.replace("/etc/benchdeck/tls", str(tls)).replace("/etc/benchdeck/htpasswd", str(tmp_path / "htpasswd"))
    return site.replace("127.0.0.1:8501", f"127.0.0.1:{app_port}")


@contextmanager
def running_nginx(tmp_path: Path, site: str) -> Iterator[None]:
    """Debian's nginx in the foreground with a throwaway prefix, serving the site file."""
    (tmp_path / "site.conf").write_text(site, encoding="utf-8")
    main = (f"user root;\nworker_processes 1;\npid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/nginx-error.log;\n"
            "events { worker_connections 256; }\n"
            f"http {{ access_log off; client_body_temp_path {tmp_path}/body; proxy_temp_path {tmp_path}/proxy;\n"
            f"  include {tmp_path}/site.conf; }}\n")
    (tmp_path / "nginx.conf").write_text(main, encoding="utf-8")
    check = subprocess.run([NGINX, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
                           capture_output=True, text=True, timeout=30, check=False)
    assert check.returncode == 0, check.stderr
    proc = subprocess.Popen([NGINX, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-g", "daemon off;"],
                            start_new_session=True)
    try:
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def _queue_the_defaults_and_watch(page: Any, base: str, env: dict[str, str], claiming: subprocess.Popen[str]) -> None:
    """A teammate's first run (step 9): the form at its defaults, queued once the runner
    that claims the unpinned SGLang run has ended, followed live on its page."""
    from playwright.sync_api import expect

    page.goto(f"{base}/build")
    expect(page.get_by_text(f"{LOGIN} (admin")).to_be_visible(timeout=90_000)  # the header reached the app
    expect(page.get_by_role("heading", name="Build a configuration and queue it")).to_be_visible()
    assert claiming.wait(timeout=240) == 0  # it survived the launch that cannot work here
    page.get_by_role("button", name="Queue this run").click()
    expect(queued_line(page, 3)).to_be_visible(timeout=60_000)
    page.get_by_role("link", name="Open run #3", exact=True).click()
    expect(page).to_have_url(re.compile(r"/run\?run=3"), timeout=ACTION_TIMEOUT_MS)
    runner = start_runner(env, "--burst")
    try:
        # Live: the page's own refresh over the proxied WebSocket shows the points arrive.
        expect(page.get_by_text(re.compile(r"Points \([1-9]\d*/\d+\)"))).to_be_visible(timeout=240_000)
        screenshot(page, "host-rehearsal-run-live")
    finally:  # a cold stop (the second signal): the rest of the sweep is not this test's; the run is requeued
        os.killpg(runner.pid, signal.SIGTERM)
        time.sleep(0.5)
        os.killpg(runner.pid, signal.SIGTERM)
        runner.wait(timeout=60)


def _status_names_each_outcome(env: dict[str, str]) -> None:
    """``runner status``: the run pinned to a version no runner has says why, with the fix;
    the unpinned SGLang run ended (its launch failed here, with a reason), none waits silently."""
    status = _cli(env, "status")
    _no_traceback(status)
    assert "gpu-host-1: has sglang 0.5.22, the run pins 0.5.23" in status.stdout, status.stdout
    ended = [line for line in status.stdout.splitlines() if " unpinned" in line]
    assert ended and "queued" not in ended[0] and "running" not in ended[0], status.stdout


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not Path(NGINX).exists() or shutil.which("openssl") is None,
                    reason="scripts/test.sh installs nginx-light (Debian)")
def test_the_host_guide_followed_literally(env: dict[str, str], tmp_path: Path, host_cache: Path,
                                           host_dump: dict[str, Any]) -> None:
    """Steps 4-9 of docs/host.md on a 0.5.22 host: the Done-when of issue 40's host items
    through the real CLI, daemon, app, nginx and browser."""
    from playwright.sync_api import sync_playwright

    host = _host_env(env, tmp_path, host_cache)
    make_hf_cache(tmp_path / "models")  # step 4: the plans' Qwen/Qwen3-30B-A3B, in the HF cache layout
    _broken_preconditions_are_named(tmp_path)  # step 6
    run_env = runner_env(host, BENCHDECK_RUNNER_ID=host["BENCHDECK_RUNNER_ID"], BENCHDECK_STARTUP_TIMEOUT_S="120")
    _register_and_submit(run_env, tmp_path)  # step 8: the runner starts
    claiming = start_runner(run_env, "--burst")  # the unpinned SGLang run's launch fails here while the app starts
    app_port, listen = free_port(), free_port()
    host["BENCHDECK_APP_PORT"] = str(app_port)
    site = _site(tmp_path, _tls_and_logins(tmp_path), listen, app_port)  # step 7
    with running_app(host, port=app_port, timeout_s=120), running_nginx(tmp_path, site), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(ignore_https_errors=True, viewport={"width": 1400, "height": 2200},
                                      http_credentials={"username": LOGIN, "password": PASSWORD})
        page = context.new_page()
        page.set_default_timeout(ACTION_TIMEOUT_MS)
        try:
            _queue_the_defaults_and_watch(page, f"https://127.0.0.1:{listen}", run_env, claiming)
        finally:
            browser.close()
            if claiming.poll() is None:
                os.killpg(claiming.pid, signal.SIGKILL)
                claiming.wait(timeout=30)
    _status_names_each_outcome(run_env)
