"""The quality rows of a comparison read from the Store (issue 42): one function for the
compare page, the checklist and ``runner export``, as ``db/scaling_gap_inputs.py`` is for
the deck's gaps."""

from __future__ import annotations

from collections.abc import Sequence

from db.quality_store import QualityStore
from db.store import Store
from domain.compare.comparison import Comparison
from domain.plan.run_plan import RunPlan
from domain.results.quality import QualityResult, compare_quality
from domain.results.quality_view import QualityRow, quality_rows


def pinned_labels(store: Store, run_ids: Sequence[int]) -> dict[int, str]:
    labels = {}
    for run_id in run_ids:
        run = store.get_run(run_id)
        if run is None or not run.plan:
            continue
        try:
            plan = RunPlan.model_validate_json(run.plan)
        except ValueError:  # an imported run's stand-in plan: nothing pinned
            continue
        if plan.pinned_acceptance is not None:
            labels[run_id] = plan.pinned_acceptance.label()
    return labels


def quality_results(store: Store, baseline: int, runs: Sequence[int]) -> list[QualityResult]:
    probes = QualityStore(store).probes_of([baseline, *runs])
    return [compare_quality(run, probes.get(run), baseline, probes.get(baseline)) for run in runs]


def with_quality(store: Store, c: Comparison) -> Comparison:
    """``c`` with its quality rows set (read now: a probe lands after the run's last point)."""
    rows: list[QualityRow] = quality_rows(c.compare, quality_results(store, c.baseline_run_id, c.run_ids), c.lang,
                                          pinned_labels(store, [c.baseline_run_id, *c.run_ids]))
    c.quality_rows = rows
    return c


def trial_quality(store: Store, run_id: int) -> QualityResult | None:
    """A run's quality against the reference its probe scored teacher-forced (the first run
    of that prompt set and model, or the plan's ``reference_run``); None when the run is
    that reference itself.  A run without a probe reads "not measured"."""
    probes = QualityStore(store).probes_of([run_id])
    record = probes.get(run_id)
    reference = ((record or {}).get("teacher_forced") or {}).get("reference_run_id")
    if record is not None and not record.get("not_measured") and reference is None:
        return None
    if reference is None:
        return compare_quality(run_id, record, run_id, record)
    base = QualityStore(store).probes_of([reference]).get(reference)
    return compare_quality(run_id, record, int(reference), base)
