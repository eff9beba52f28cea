"""The flag schemas runner hosts dumped at start-up, made the ones validation uses in this
process (``domain.flags.schema.register_host_schema``): the CLI's ``check`` and ``submit``
and the build form validate a plan against the schema of the host that will run it."""

from __future__ import annotations

import logging

from db.store import Store
from domain.flags.schema import SchemaError, register_host_schema

log = logging.getLogger("benchdeck.db")


def register_stored_schemas(store: Store) -> list[str]:
    """Register every stored host schema; the versions registered.  A stored dump that no
    longer reads as a schema is skipped with a warning (it cannot be validated against)."""
    versions = []
    for raw in store.host_schemas():
        try:
            versions.append(register_host_schema(raw).version)
        except SchemaError as exc:
            log.warning("a stored SGLang schema is unreadable and is ignored: %s", exc)
    return versions
