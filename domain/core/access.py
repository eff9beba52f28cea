"""Who is asking, and what they may do: identity, roles and the start-up rule.

Pure functions only: the app (pages/parts/auth.py) feeds them what Streamlit knows about a
request, and db/store.py calls ``require`` inside every write transaction, so a hidden
button is never the only check.

Three ways to know who someone is (``BENCHDECK_AUTH_MODE``):

- ``oidc``: Streamlit's ``st.login``; the identity is the ID token's e-mail (or ``sub``).
- ``proxy``: a reverse proxy that already authenticates sets a header (for example
  oauth2-proxy's ``X-Forwarded-Email``); it is believed only when the connection comes
  from one of ``BENCHDECK_TRUSTED_PROXIES``.
- ``local``: the app listens on loopback only and everyone who reaches it acts as the
  OS user running it; the UI says so.

OIDC and the proxy only say who someone is.  Roles come from the allowlists in settings.
"""

from __future__ import annotations

import getpass
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"


class Action(StrEnum):
    SUBMIT = "submit"
    CANCEL = "cancel"
    RERUN = "rerun"
    PRIORITY = "priority"
    IMPORT = "import"
    FILL_IN = "fill_in"
    VIEW_AUDIT = "view_audit"
    RESTORE = "restore"  # replace the database with a backup (CLI on the runner host)


# What each role may do.  "own" actions need the actor to be the run's submitter
# unless the role is admin.
_OPERATOR_ACTIONS = {Action.SUBMIT, Action.CANCEL, Action.RERUN, Action.IMPORT, Action.FILL_IN}
_OWN_ONLY_FOR_OPERATORS = {Action.CANCEL, Action.RERUN, Action.FILL_IN}


@dataclass(frozen=True)
class Actor:
    """A person (or the runner host's shell user) acting through the app or the CLI."""

    name: str
    role: Role
    via: str = "local"  # oidc | proxy | local | cli: shown in the audit log


class PermissionDenied(PermissionError):
    """The actor's role does not allow this action (checked in db/ on every write)."""

    def __init__(self, actor: Actor, action: Action, run_id: int | None = None):
        target = f" on run {run_id}" if run_id is not None else ""
        super().__init__(f"{actor.name} ({actor.role}) may not {action}{target}")
        self.actor = actor
        self.action = action
        self.run_id = run_id


def permits(actor: Actor, action: Action, *, owner: str | None = None) -> bool:
    """Whether ``actor`` may do ``action``; ``owner`` is the run's submitter, if any."""
    if actor.role is Role.ADMIN:
        return True
    if actor.role is Role.OPERATOR and action in _OPERATOR_ACTIONS:
        return action not in _OWN_ONLY_FOR_OPERATORS or owner == actor.name
    return False


def require(actor: Actor, action: Action, *, owner: str | None = None, run_id: int | None = None) -> None:
    if not permits(actor, action, owner=owner):
        raise PermissionDenied(actor, action, run_id)


# --- roles from the allowlists ---------------------------------------------------------
def _matches(identity: str, entry: str) -> bool:
    """An allowlist entry is an exact identity or ``@domain`` for a whole e-mail domain."""
    identity, entry = identity.strip().lower(), entry.strip().lower()
    if entry.startswith("@"):
        return identity.endswith(entry) and identity.count("@") == 1
    return identity == entry


def role_for(
    identity: str,
    *,
    admins: Iterable[str],
    operators: Iterable[str],
    viewers: Iterable[str],
    default_role: Role | None,
) -> Role | None:
    """The highest role whose allowlist names ``identity``; None means no access at all."""
    for role, entries in ((Role.ADMIN, admins), (Role.OPERATOR, operators), (Role.VIEWER, viewers)):
        if any(_matches(identity, e) for e in entries):
            return role
    return default_role


# --- trusted proxy ----------------------------------------------------------------------
def is_trusted_proxy(client_ip: str | None, trusted: Iterable[str]) -> bool:
    """Whether the connection comes from a configured proxy (addresses or CIDR networks)."""
    if not client_ip:
        return False
    try:
        address = ipaddress.ip_address(client_ip.split("%")[0])
    except ValueError:
        return False
    for entry in trusted:
        try:
            if address in ipaddress.ip_network(entry.strip(), strict=False):
                return True
        except ValueError:
            continue
    return False


def identity_from_proxy(
    headers: Mapping[str, str], client_ip: str | None, *, header: str, trusted: Iterable[str]
) -> str | None:
    """The proxy's identity header, only when the request came through a trusted proxy."""
    if not is_trusted_proxy(client_ip, trusted):
        return None
    wanted = header.lower()
    for name, value in headers.items():
        if name.lower() == wanted and value.strip():
            return value.strip()
    return None


def identity_from_oidc(user_info: Mapping[str, object]) -> str | None:
    """E-mail if the provider sends one (what allowlists name), else the subject."""
    if not user_info.get("is_logged_in", False):
        return None
    for claim in ("email", "sub"):
        value = user_info.get(claim)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


# --- start-up rule ------------------------------------------------------------------------
def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def startup_refusal(
    *, mode: str, address: str, has_oidc_secrets: bool, trusted_proxies: list[str], allow_open_network: bool
) -> str | None:
    """Why the app must not start with these settings, or None.  Reachable from the
    network without authentication is refused unless explicitly allowed."""
    if mode == "oidc" and not has_oidc_secrets:
        return "BENCHDECK_AUTH_MODE=oidc needs an [auth] section in .streamlit/secrets.toml"
    if mode == "proxy" and not trusted_proxies:
        return "BENCHDECK_AUTH_MODE=proxy needs BENCHDECK_TRUSTED_PROXIES (the proxy's addresses)"
    if mode == "local" and not is_loopback(address) and not allow_open_network:
        return (
            f"refusing to listen on {address or 'all addresses'} without authentication: use "
            "BENCHDECK_AUTH_MODE=oidc or proxy, bind to 127.0.0.1, or set "
            "BENCHDECK_ALLOW_UNAUTHENTICATED_NETWORK=true to accept that anyone who can reach it acts as you"
        )
    return None


def local_actor(local_role: str, *, via: str) -> Actor:
    """The OS user running this process: the identity in local mode and in the CLI, where
    whoever has a shell on the runner host could reach the processes anyway."""
    return Actor(getpass.getuser(), Role(local_role), via=via)
