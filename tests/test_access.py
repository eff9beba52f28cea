"""Identity, roles and the start-up rule: the pure rules, the checks in db/ (a hidden
button is not a permission check), the launcher's refusal, and the trusted-proxy mode
in a real browser."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from db import Store
from domain.core.access import (
    Action,
    Actor,
    PermissionDenied,
    Role,
    identity_from_oidc,
    identity_from_proxy,
    permits,
    role_for,
    startup_refusal,
)
from domain.core.states import RunStatus
from domain.plan.plan_io import dump_plan
from tests.plans import minimal_plan
from tests.support.actors import admin, operator, viewer
from tests.support.app_server import ACTION_TIMEOUT_MS, CHROMIUM, CHROMIUM_ARGS, ROOT, running_app, screenshot

# --- the rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "action", "own", "allowed"),
    [
        (Role.VIEWER, Action.SUBMIT, True, False),
        (Role.VIEWER, Action.CANCEL, True, False),
        (Role.VIEWER, Action.VIEW_AUDIT, True, False),
        (Role.OPERATOR, Action.SUBMIT, True, True),
        (Role.OPERATOR, Action.IMPORT, True, True),
        (Role.OPERATOR, Action.CANCEL, True, True),
        (Role.OPERATOR, Action.CANCEL, False, False),
        (Role.OPERATOR, Action.RERUN, True, True),
        (Role.OPERATOR, Action.RERUN, False, False),
        (Role.OPERATOR, Action.FILL_IN, False, False),
        (Role.OPERATOR, Action.PRIORITY, True, False),
        (Role.OPERATOR, Action.VIEW_AUDIT, True, False),
        (Role.ADMIN, Action.CANCEL, False, True),
        (Role.ADMIN, Action.PRIORITY, False, True),
        (Role.ADMIN, Action.VIEW_AUDIT, False, True),
    ],
)
def test_what_each_role_may_do(role: Role, action: Action, own: bool, allowed: bool) -> None:
    actor = Actor("me@example.com", role)
    assert permits(actor, action, owner="me@example.com" if own else "other@example.com") is allowed


def test_roles_come_from_the_allowlists_highest_first() -> None:
    lists = {"admins": ["boss@example.com"], "operators": ["@example.com"], "viewers": ["guest@other.org"]}
    assert role_for("Boss@Example.com", **lists, default_role=None) is Role.ADMIN
    assert role_for("anyone@example.com", **lists, default_role=None) is Role.OPERATOR
    assert role_for("guest@other.org", **lists, default_role=None) is Role.VIEWER
    assert role_for("stranger@other.org", **lists, default_role=None) is None
    assert role_for("stranger@other.org", **lists, default_role=Role.VIEWER) is Role.VIEWER
    # "@example.com" names the domain, not a suffix of another domain or a second "@".
    assert role_for("x@evil-example.com", **lists, default_role=None) is None
    assert role_for("x@evil.org@example.com", **lists, default_role=None) is None


def test_the_proxy_header_counts_only_from_a_trusted_address() -> None:
    headers = {"x-forwarded-email": "op@example.com"}
    kwargs = {"header": "X-Forwarded-Email", "trusted": ["10.0.0.5", "192.168.1.0/24"]}
    assert identity_from_proxy(headers, "10.0.0.5", **kwargs) == "op@example.com"
    assert identity_from_proxy(headers, "192.168.1.77", **kwargs) == "op@example.com"
    assert identity_from_proxy(headers, "10.0.0.6", **kwargs) is None
    assert identity_from_proxy(headers, None, **kwargs) is None
    assert identity_from_proxy(headers, "not-an-ip", **kwargs) is None
    assert identity_from_proxy({"x-forwarded-email": "  "}, "10.0.0.5", **kwargs) is None


def test_oidc_identity_is_the_email_else_the_subject() -> None:
    assert identity_from_oidc({"is_logged_in": True, "email": "a@example.com", "sub": "123"}) == "a@example.com"
    assert identity_from_oidc({"is_logged_in": True, "sub": "123"}) == "123"
    assert identity_from_oidc({"is_logged_in": False}) is None


@pytest.mark.parametrize(
    ("mode", "address", "secrets", "proxies", "allow", "refused"),
    [
        ("local", "127.0.0.1", False, [], False, False),
        ("local", "::1", False, [], False, False),
        ("local", "localhost", False, [], False, False),
        ("local", "0.0.0.0", False, [], False, True),  # noqa: S104  (the case under test)
        ("local", "", False, [], False, True),  # Streamlit's default: every address
        ("local", "10.1.2.3", False, [], True, False),  # explicitly allowed
        ("oidc", "0.0.0.0", True, [], False, False),  # noqa: S104
        ("oidc", "0.0.0.0", False, [], False, True),  # noqa: S104  (no [auth] section)
        ("proxy", "0.0.0.0", False, ["10.0.0.5"], False, False),  # noqa: S104
        ("proxy", "127.0.0.1", False, [], False, True),  # proxy mode without proxies
    ],
)
def test_startup_rule(mode: str, address: str, secrets: bool, proxies: list[str], allow: bool, refused: bool) -> None:
    reason = startup_refusal(mode=mode, address=address, has_oidc_secrets=secrets, trusted_proxies=proxies,
                             allow_open_network=allow)
    assert (reason is not None) is refused


def test_the_launcher_refuses_an_open_address_without_auth(env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "scripts/serve_app.py", "--server.address", "0.0.0.0"],  # noqa: S104
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "refusing to listen on 0.0.0.0 without authentication" in done.stderr


# --- db/ checks the role on every write --------------------------------------------------------


def test_db_refuses_writes_the_role_does_not_allow(store: Store) -> None:
    mine, _ = store.submit_run(minimal_plan(name="mine"), submitted_by=operator("alice"))
    theirs, _ = store.submit_run(minimal_plan(name="theirs"), submitted_by=operator("bob"))
    with pytest.raises(PermissionDenied):
        store.submit_run(minimal_plan(name="v"), submitted_by=viewer("victor"))
    with pytest.raises(PermissionDenied):
        store.cancel_run(theirs, actor=operator("alice"))
    with pytest.raises(PermissionDenied):
        store.set_priority(mine, 5, actor=operator("alice"))
    with pytest.raises(PermissionDenied):
        store.submit_run(minimal_plan(name="again"), submitted_by=operator("alice"), rerun_of=theirs)
    with pytest.raises(PermissionDenied):
        store.audit_entries(reader=operator("alice"))
    # Nothing of the refused writes exists: no run, no state change, no audit row.
    runs = {r.name: r for r in store.list_runs()}
    assert set(runs) == {"mine", "theirs"}
    assert runs["theirs"].status == "queued" and runs["mine"].priority == 0
    assert [e.action for e in store.audit_entries(reader=admin())] == ["submit", "submit"]

    assert store.cancel_run(mine, actor=operator("alice")) is RunStatus.CANCELLED
    again, _ = store.submit_run(minimal_plan(name="mine"), submitted_by=operator("alice"), rerun_of=mine)
    store.set_priority(theirs, 5, actor=admin("root"))
    assert store.cancel_run(theirs, actor=admin("root")) is RunStatus.CANCELLED
    entries = store.audit_entries(reader=admin())
    assert [(e.actor, e.action, e.run_id) for e in entries[:4]] == [
        ("root", "cancel", theirs), ("root", "priority", theirs), ("alice", "rerun", again), ("alice", "cancel", mine),
    ]
    assert json.loads(entries[0].details) == {"was": "queued", "role": "admin", "via": "test"}


def test_the_audit_log_filters(store: Store) -> None:
    first, _ = store.submit_run(minimal_plan(name="a"), submitted_by=operator("alice@example.com"))
    store.submit_run(minimal_plan(name="b"), submitted_by=operator("bob@example.com"))
    store.cancel_run(first, actor=admin("root"))
    reader = admin()
    assert [e.action for e in store.audit_entries(reader=reader, actor="alice")] == ["submit"]
    assert [e.actor for e in store.audit_entries(reader=reader, action="cancel")] == ["root"]
    assert len(store.audit_entries(reader=reader, run_id=first)) == 2
    assert store.audit_actions(reader=reader) == ["cancel", "submit"]


def test_the_cli_acts_as_the_local_role(env: dict[str, str], tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(dump_plan(minimal_plan(name="cli")), encoding="utf-8")
    denied = subprocess.run([sys.executable, "-m", "runner", "submit", str(plan)], cwd=ROOT,
                            env=dict(env, BENCHDECK_LOCAL_ROLE="viewer"), capture_output=True, text=True, timeout=120)
    assert denied.returncode == 1 and "Not allowed" in denied.stderr, denied.stderr
    assert "Traceback" not in denied.stderr


# --- trusted proxy mode, in a real browser -----------------------------------------------------


@pytest.mark.browser
@pytest.mark.slow
def test_proxy_identity_only_from_the_trusted_address(env: dict[str, str], store: Store) -> None:
    headers = {"X-Forwarded-Email": "op@example.com"}
    roles = {"BENCHDECK_AUTH_MODE": "proxy", "BENCHDECK_OPERATORS": json.dumps(["op@example.com"])}
    trusted = dict(env, **roles, BENCHDECK_TRUSTED_PROXIES=json.dumps(["127.0.0.1"]))
    elsewhere = dict(env, **roles, BENCHDECK_TRUSTED_PROXIES=json.dumps(["10.9.9.9"]))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            with running_app(trusted) as url:
                page = browser.new_context(extra_http_headers=headers, locale="en-US").new_page()
                page.goto(f"{url}/?lang=en")
                expect(page.get_by_text("op@example.com (operator, signed in via proxy)")).to_be_visible(
                    timeout=ACTION_TIMEOUT_MS)
            with running_app(elsewhere) as url:
                # The header arrives from an untrusted peer, even claiming to be forwarded by the proxy.
                spoofed = {**headers, "X-Forwarded-For": "10.9.9.9", "X-Real-IP": "10.9.9.9"}
                page = browser.new_context(extra_http_headers=spoofed, locale="en-US").new_page()
                page.goto(f"{url}/?lang=en")
                expect(page.get_by_text("No identity from the authenticating proxy")).to_be_visible(
                    timeout=ACTION_TIMEOUT_MS)
                expect(page.get_by_text("op@example.com")).to_have_count(0)
                screenshot(page, "auth-proxy-refused")
        finally:
            browser.close()


# --- cross-origin writes, and the server's own protections ---------------------------------------


def test_streamlit_protections_stay_on() -> None:
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    assert config["server"]["enableXsrfProtection"] is True
    assert config["server"]["enableCORS"] is True
    assert config["server"]["address"] == "127.0.0.1"
    assert config["client"]["showErrorDetails"] == "none"


@pytest.mark.slow
def test_a_cross_origin_write_without_the_xsrf_token_is_refused(env: dict[str, str]) -> None:
    """Fault case 22 (docs/fault-suite.md): the app's only HTTP write (file upload) needs Streamlit's XSRF
    token, which a page from another origin cannot read."""
    import requests

    with running_app(env) as url:
        refused = requests.put(f"{url}/_stcore/upload_file/some-session/some-file",
                               files={"file": ("plan.yaml", b"name: x\n")},
                               headers={"Origin": "http://evil.example"}, timeout=10)
    assert refused.status_code == 403
