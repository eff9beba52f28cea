"""The one clock every database writer uses (a module of its own, below db/store.py, so the
backup and upgrade code that store.py calls can read it too)."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    # Naive UTC: DuckDB TIMESTAMP has no zone, and every writer uses this one clock.
    return datetime.now(UTC).replace(tzinfo=None)
