"""An attempt taken to benchmarking by hand, for tests that store points without a runner."""

from __future__ import annotations

from db import RunnerCapabilities, Store
from db.store import Claim
from domain.core.states import AttemptStatus
from tests.plans import minimal_plan
from tests.support.actors import operator

CAPS = RunnerCapabilities("r1", "H200", 8, None)


def benchmarking_attempt(store: Store) -> Claim:
    """A minimal plan submitted by alice, claimed by runner ``r1`` and moved to benchmarking:
    points may be inserted into the claim's attempt."""
    store.submit_run(minimal_plan(), submitted_by=operator("alice"))
    claim = store.claim_next(CAPS, lease_s=60)
    assert claim is not None
    store.move_attempt(claim.attempt_id, "r1", AttemptStatus.CLAIMED, AttemptStatus.STARTING)
    store.move_attempt(claim.attempt_id, "r1", AttemptStatus.STARTING, AttemptStatus.BENCHMARKING)
    return claim
