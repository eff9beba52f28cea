"""The DuckDB store: schema, migrations and every query.  Nothing outside db/ writes SQL."""

from db.connection import DbBusy, DbHolderNotAnswering, DbUnusable
from db.store import Claim, DuplicateImport, IllegalMove, LostRace, RunnerCapabilities, Store

__all__ = ["Claim", "DbBusy", "DbHolderNotAnswering", "DbUnusable", "DuplicateImport", "IllegalMove", "LostRace",
           "RunnerCapabilities", "Store"]
