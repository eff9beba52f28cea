"""Actors for tests: who submits, cancels or reads the audit log (roles as in settings)."""

from domain.core.access import Actor, Role


def operator(name: str = "test") -> Actor:
    return Actor(name, Role.OPERATOR, via="test")


def admin(name: str = "admin") -> Actor:
    return Actor(name, Role.ADMIN, via="test")


def viewer(name: str = "viewer") -> Actor:
    return Actor(name, Role.VIEWER, via="test")
