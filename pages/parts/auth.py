"""Who is using this browser session: the app's side of domain/core/access.py.

app.py calls ``gate()`` before any page runs; a session without an identity or a role
sees a short explanation (and a login button under OIDC) and nothing else.  Pages ask
``current_actor()`` to build buttons from the role; db/ checks the role again on every
write, so a hidden button is never the only check.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from domain.core.access import (
    Action,
    Actor,
    Role,
    identity_from_oidc,
    identity_from_proxy,
    local_actor,
    permits,
    role_for,
)
from domain.core.i18n import t
from domain.core.settings import Settings, get_settings

_ACTOR_KEY = "_benchdeck_actor"


def _role(identity: str, settings: Settings) -> Role | None:
    default = None if settings.default_role == "none" else Role(settings.default_role)
    return role_for(identity, admins=settings.admins, operators=settings.operators, viewers=settings.viewers,
                    default_role=default)


def _oidc_identity() -> str | None:
    user: Any = st.user
    return identity_from_oidc(user.to_dict())


def _proxy_identity(settings: Settings) -> str | None:
    # st.context.ip_address is the TCP peer (scripts/serve_app.py switches off uvicorn's
    # X-Forwarded-For rewriting), reported as None for loopback.
    client_ip = st.context.ip_address or "127.0.0.1"
    return identity_from_proxy(dict(st.context.headers), client_ip, header=settings.trusted_proxy_header,
                               trusted=settings.trusted_proxies)


def resolve_actor(settings: Settings) -> tuple[Actor | None, str | None]:
    """(actor, identity) of this session; actor None with an identity = not on any allowlist."""
    if settings.auth_mode == "local":
        return local_actor(settings.local_role, via="local"), None
    identity = _oidc_identity() if settings.auth_mode == "oidc" else _proxy_identity(settings)
    if identity is None:
        return None, None
    role = _role(identity, settings)
    return (Actor(identity, role, via=settings.auth_mode) if role else None), identity


def gate(lang: str) -> Actor:
    """The session's actor, or stop the script with the reason (and a way to log in)."""
    settings = get_settings()
    actor, identity = resolve_actor(settings)
    if actor is not None:
        st.session_state[_ACTOR_KEY] = actor
        _identity_caption(actor, lang)
        return actor
    st.title("benchdeck")
    if identity is not None:
        st.error(t("auth.not_allowed", lang, user=identity))
        if settings.auth_mode == "oidc":
            st.button(t("auth.logout", lang), on_click=st.logout)
    elif settings.auth_mode == "oidc":
        st.info(t("auth.login_needed", lang))
        st.button(t("auth.login", lang), on_click=st.login, type="primary")
    else:
        st.error(t("auth.no_identity_proxy", lang))
    st.stop()
    raise AssertionError("st.stop() returned")  # for the type checker: gate never falls through


def _identity_caption(actor: Actor, lang: str) -> None:
    role = t(f"auth.role_{actor.role}", lang)
    if actor.via == "local":
        st.sidebar.caption(t("app.identity_local", lang, user=actor.name, role=role))
    else:
        st.sidebar.caption(t("auth.identity", lang, user=actor.name, role=role, via=actor.via))
    if actor.via == "oidc":
        st.sidebar.button(t("auth.logout", lang), on_click=st.logout, key="logout")


def current_actor() -> Actor:
    """The actor gate() established for this session (app.py runs it before every page)."""
    actor = st.session_state.get(_ACTOR_KEY)
    if not isinstance(actor, Actor):
        # A page run outside app.py (AppTest of a single page): resolve it now.
        resolved, _ = resolve_actor(get_settings())
        if resolved is None:
            st.stop()
        actor = resolved
    return actor


def can(action: Action, *, owner: str | None = None) -> bool:
    """Whether to show a control: the same rule db/ enforces on the write."""
    return permits(current_actor(), action, owner=owner)
