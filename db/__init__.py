"""The DuckDB store: schema, migrations and every query.  Nothing outside db/ writes SQL."""

from db.connection import DbBusy, DbUnusable
from db.store import Claim, DuplicateImport, IllegalMove, LostRace, RunnerCapabilities, Store

__all__ = ["Claim", "DbBusy", "DbUnusable", "DuplicateImport", "IllegalMove", "LostRace", "RunnerCapabilities", "Store"]
