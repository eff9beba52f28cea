"""The host guide followed literally (docs/host.md, issue 40): its env file reads the same to
systemd and to bash and the app starts with it; behind the real nginx of
ops/nginx-benchdeck.conf (TLS, basic auth setting the identity header, the WebSocket upgrade)
a browser reaches the Build page as the logged-in teammate, queues a run from the form's
defaults and watches it run live."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from domain.core.env_file import systemd_env
from domain.core.settings import Settings
from runner.env_file_check import bash_env
from tests.conftest import ROOT
from tests.support.app_server import ACTION_TIMEOUT_MS, CHROMIUM, CHROMIUM_ARGS, free_port, running_app, screenshot
from tests.support.runner_harness import runner_env, start_runner

GUIDE = ROOT / "docs" / "host.md"
NGINX_SITE = ROOT / "ops" / "nginx-benchdeck.conf"
NGINX = "/usr/sbin/nginx"
LOGIN, PASSWORD = "alice@example.com", "correct horse"


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


def _host_env(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The documented settings, with the host's paths moved under this test's directory
    (there is no /srv or /models here) and no real SGLang (the emulator serves the run)."""
    settings = systemd_env(documented_env_file())
    moved = {"BENCHDECK_DB": str(tmp_path / "srv" / "benchdeck.duckdb"),
             "BENCHDECK_WORK_DIR": env["BENCHDECK_WORK_DIR"], "BENCHDECK_CACHE_DIR": str(tmp_path / "srv" / "cache"),
             "BENCHDECK_MODEL_DIRS": json.dumps([str(tmp_path / "models")]), "BENCHDECK_LANGUAGE": "en"}
    del settings["BENCHDECK_SGLANG_PYTHON"]
    (tmp_path / "srv").mkdir()
    (tmp_path / "models").mkdir()
    base = {k: v for k, v in env.items() if not k.startswith("BENCHDECK_")}
    return {**base, **settings, **moved}


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


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not Path(NGINX).exists() or shutil.which("openssl") is None,
                    reason="scripts/test.sh installs nginx-light (Debian)")
def test_through_the_real_proxy_a_teammate_queues_a_run_and_sees_it_live(env: dict[str, str],
                                                                         tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    host = _host_env(env, tmp_path)
    app_port, listen = free_port(), free_port()
    host["BENCHDECK_APP_PORT"] = str(app_port)
    tls = _tls_and_logins(tmp_path)
    runner = None
    site = _site(tmp_path, tls, listen, app_port)
    with running_app(host, port=app_port, timeout_s=120), running_nginx(tmp_path, site):
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context(ignore_https_errors=True, viewport={"width": 1400, "height": 2200},
                                          http_credentials={"username": LOGIN, "password": PASSWORD})
            page = context.new_page()
            page.set_default_timeout(ACTION_TIMEOUT_MS)
            try:
                page.goto(f"https://127.0.0.1:{listen}/build")
                expect(page.get_by_text(f"{LOGIN} (admin")).to_be_visible(timeout=90_000)  # the header reached the app
                expect(page.get_by_role("heading", name="Build a configuration and queue it")).to_be_visible()
                page.get_by_role("button", name="Queue this run").click()
                expect(page.get_by_text("Queued run #1")).to_be_visible(timeout=60_000)
                page.get_by_role("link", name="Open run #1", exact=True).click()
                expect(page).to_have_url(re.compile(r"/run\?run=1"), timeout=30_000)
                runner = start_runner(runner_env(host), "--burst")
                # Live: the page's own refresh over the proxied WebSocket shows the points arrive.
                expect(page.get_by_text(re.compile(r"Points \([1-9]\d*/\d+\)"))).to_be_visible(timeout=240_000)
                screenshot(page, "host-proxy-run-live")
            finally:
                if runner is not None:
                    os.killpg(runner.pid, signal.SIGTERM)
                    runner.wait(timeout=60)
                browser.close()
