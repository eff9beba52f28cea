"""A part of the store kept in a module of its own (the watch's, the quality probe's): it opens
the same DuckDB file as its :class:`~db.store.Store`, under the same lock and timeout."""

from __future__ import annotations

from typing import Any

from db.connection import connect, transaction
from db.store import Store


class StorePart:
    def __init__(self, store: Store):
        self.store = store

    def _tx(self) -> Any:
        return transaction(self.store.db_path, lock_timeout_s=self.store.lock_timeout_s)

    def _read(self) -> Any:
        """An access that only reads (beside a serving holder's writes, as ``Store._read``)."""
        return connect(self.store.db_path, lock_timeout_s=self.store.lock_timeout_s, reading=True)
