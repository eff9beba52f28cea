"""Authentication and roles in a real browser, against a real local OIDC provider.

The provider is ``oidc-provider-mock`` (a small, real OpenID Connect server from PyPI:
discovery, authorisation code flow, signed ID tokens); Streamlit's own ``st.login`` talks
to it exactly as it would to Google or Okta.  Its login page lets a test pick a user by
clicking a button, which stands in for typing a password.

Roles come from the allowlists in settings: a viewer cannot queue, an operator queues and
cancels only their own runs, an admin re-prioritises; every action is in the audit log.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from playwright.sync_api import Browser, Page, expect, sync_playwright

from db import Store
from tests.support.actors import admin, operator
from tests.support.app_server import (
    ACTION_TIMEOUT_MS,
    CHROMIUM,
    CHROMIUM_ARGS,
    free_port,
    queued_line,
    running_app,
    screenshot,
)
from tests.support.runner_harness import small_plan

pytestmark = [pytest.mark.browser, pytest.mark.slow]

VIEWER, OP1, OP2, ADMIN = "viewer@example.com", "op1@example.com", "op2@example.com", "admin@example.com"


@pytest.fixture
def oidc_provider(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = open(tmp_path / "oidc.log", "w")
    users = [arg for user in (VIEWER, OP1, OP2, ADMIN) for arg in ("--user", user)]
    proc = subprocess.Popen([sys.executable, "-m", "oidc_provider_mock", "--port", str(port), *users],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{url}/.well-known/openid-configuration", timeout=1).ok:
                    break
            except requests.RequestException:
                time.sleep(0.2)
        else:
            raise RuntimeError("the OIDC provider did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def _secrets(tmp_path: Path, app_port: int, provider: str) -> Path:
    path = tmp_path / "secrets.toml"
    path.write_text(
        "[auth]\n"
        f'redirect_uri = "http://127.0.0.1:{app_port}/oauth2callback"\n'
        'cookie_secret = "test-cookie-secret-not-used-anywhere-else"\n'
        'client_id = "benchdeck"\n'
        'client_secret = "benchdeck-secret"\n'
        f'server_metadata_url = "{provider}/.well-known/openid-configuration"\n',
        encoding="utf-8",
    )
    return path


def _log_in(browser: Browser, url: str, user: str) -> Page:
    """A fresh browser context (its own cookies), logged in as ``user`` at the provider."""
    page = browser.new_context(viewport={"width": 1400, "height": 1600}, locale="en-US").new_page()
    page.goto(f"{url}/?lang=en")
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("button", name=user, exact=True).click()
    expect(page.get_by_text(f"{user} (")).to_be_visible(timeout=ACTION_TIMEOUT_MS)
    return page


def _nav_labels(page: Page) -> list[str]:
    page.get_by_test_id("stSidebarNav").wait_for(timeout=60_000)
    return [link.inner_text().strip() for link in page.get_by_test_id("stSidebarNavLink").all()]


def test_roles_from_the_allowlist_through_a_real_oidc_login(
    env: dict[str, str], db_path: Path, tmp_path: Path, oidc_provider: str, browser: Browser
) -> None:
    store = Store(db_path)
    store.migrate()
    port = free_port()
    env = dict(env, BENCHDECK_AUTH_MODE="oidc", BENCHDECK_ADMINS=json.dumps([ADMIN]),
               BENCHDECK_OPERATORS=json.dumps([OP1, OP2]), BENCHDECK_VIEWERS=json.dumps([VIEWER]))
    # op2's run, queued beforehand: op1 must not be able to cancel it.
    others, _ = store.submit_run(small_plan(name="op2-run"), submitted_by=operator(OP2))
    secrets = _secrets(tmp_path, port, oidc_provider)
    with running_app(env, port=port, extra_args=["--secrets.files", str(secrets)]) as url:
        # Without a login: nothing but the login button.
        anonymous = browser.new_context(locale="en-US").new_page()
        anonymous.goto(f"{url}/runs?lang=en")
        expect(anonymous.get_by_role("button", name="Log in")).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        expect(anonymous.get_by_text("op2-run")).to_have_count(0)
        screenshot(anonymous, "auth-login-required")

        # Viewer: sees runs, has no page to queue from, and the build page's submit is off.
        viewer_page = _log_in(browser, url, VIEWER)
        labels = _nav_labels(viewer_page)
        assert "Queue a plan" not in labels and "Import results" not in labels
        assert "Audit log" not in labels
        viewer_page.goto(f"{url}/build?lang=en")
        submit = viewer_page.get_by_role("button", name="Queue this run")
        expect(submit).to_be_disabled(timeout=ACTION_TIMEOUT_MS)
        expect(viewer_page.get_by_text("Viewers cannot queue runs")).to_be_visible()
        viewer_page.wait_for_timeout(2500)  # let the lever widgets finish drawing for the screenshot
        screenshot(viewer_page, "auth-viewer-build")

        # Operator 1: queues a run from the page, cancels it; op2's run is not offered.
        op_page = _log_in(browser, url, OP1)
        op_page.goto(f"{url}/queue_plan?lang=en")
        op_page.get_by_role("button", name="Quick preset", exact=False).click()
        op_page.wait_for_timeout(1500)
        op_page.get_by_role("button", name="Validate and queue").click()
        expect(queued_line(op_page)).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        [mine] = [r.id for r in store.list_runs() if r.submitted_by == OP1]
        op_page.goto(f"{url}/run?run={others}&lang=en")
        expect(op_page.get_by_text("You can act on your own runs only")).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        expect(op_page.get_by_role("button", name="Cancel")).to_have_count(0)
        op_page.goto(f"{url}/run?run={mine}&lang=en")
        op_page.get_by_role("button", name="Cancel").click()  # asks first
        op_page.get_by_role("button", name=f"Yes, cancel run #{mine}").click()
        _wait(lambda: store.get_run(mine).status == "cancelled", "op1's cancel")
        assert store.get_run(others).status == "queued"
        screenshot(op_page, "auth-operator-run")

        # Admin: re-prioritises op2's run and reads the audit log.
        admin_page = _log_in(browser, url, ADMIN)
        admin_page.goto(f"{url}/runs?lang=en")
        priority = admin_page.get_by_role("spinbutton", name="Priority")
        priority.fill("7")
        priority.press("Tab")  # Enter would submit the form with its first button (Cancel)
        admin_page.get_by_role("button", name="Re-prioritise").click()
        _wait(lambda: store.get_run(others).priority == 7, "admin's re-prioritise")
        admin_page.goto(f"{url}/audit?lang=en")
        expect(admin_page.get_by_text("entries (newest first")).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        admin_page.wait_for_timeout(2000)
        screenshot(admin_page, "auth-admin-audit")

    entries = store.audit_entries(reader=admin())
    seen = {(e.actor, e.action, json.loads(e.details).get("via")) for e in entries}
    assert {(OP1, "submit", "oidc"), (OP1, "cancel", "oidc"), (ADMIN, "priority", "oidc")} <= seen


def _wait(condition: object, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")
