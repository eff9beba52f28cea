"""Quality probes in DuckDB (issue 42), beside ``db.store.Store`` on the same short locked
accesses: the runner records an attempt's probe; the CLI, the pages and the runner (for a
reference run's outputs) read a run's latest one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from db.store import utcnow
from db.store_part import StorePart
from domain.plan.run_plan import RunPlan

RECORD_PROBE = """
INSERT INTO quality_probes (attempt_id, run_id, recorded_at, prompt_set, reference_run_id, record)
SELECT id, run_id, ?, ?, ?, ? FROM attempts WHERE id = ? AND runner_id = ? AND status = 'benchmarking'
RETURNING run_id
"""
PROBES_OF_RUNS = """
SELECT run_id, record FROM quality_probes WHERE run_id IN (SELECT unnest(?::BIGINT[]))
ORDER BY run_id, recorded_at
"""
# The first succeeded run of the same model with the same prompt set (the usual baseline).
REFERENCE_FOR = """
SELECT q.run_id FROM quality_probes q JOIN runs r ON r.id = q.run_id
WHERE q.prompt_set = ?::JSON AND r.status = 'succeeded' AND q.run_id < ?
  AND json_extract_string(q.record, '$.model') = ?
ORDER BY q.run_id LIMIT 1
"""


class QualityStore(StorePart):
    def record_probe(self, attempt_id: int, runner_id: str, record: dict[str, Any]) -> bool:
        """False: the attempt is not benchmarking under this runner any more (a late write)."""
        reference = (record.get("teacher_forced") or {}).get("reference_run_id")
        with self._tx() as con:
            return bool(con.execute(RECORD_PROBE, [
                utcnow(), json.dumps(record["prompt_set"], sort_keys=True), reference,
                json.dumps(record), attempt_id, runner_id]).fetchall())

    def probes_of(self, run_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """Each run's latest probe record (a run without one is absent)."""
        with self._read() as con:
            rows = con.execute(PROBES_OF_RUNS, [list(run_ids)]).fetchall()
        return {int(run_id): json.loads(record) for run_id, record in rows}

    def reference_for(self, run_id: int, model: str, prompt_set: dict[str, Any]) -> int | None:
        with self._read() as con:
            row = con.execute(REFERENCE_FOR, [json.dumps(prompt_set, sort_keys=True), run_id, model]).fetchone()
        return None if row is None else int(row[0])


def quality_reference(store: QualityStore, run_id: int, plan: RunPlan) -> tuple[int, dict[str, Any]] | None:
    """The run whose outputs this run's probe scores teacher-forced: the plan's
    ``quality.reference_run`` when its probe used the same prompt set, else the first
    earlier succeeded run of the same model with that prompt set; None: there is none."""
    quality = plan.quality
    if quality is None:
        return None
    key = quality.prompt_set_key()
    reference = quality.reference_run or store.reference_for(run_id, plan.model, key)
    record = store.probes_of([reference]).get(reference) if reference else None
    if reference is None or record is None or record.get("prompt_set") != key or not record.get("outputs"):
        return None
    return reference, record
