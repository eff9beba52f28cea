"""The search: Optuna's TPE sampler over a study's space, with the SLA as a constraint.

TPE (``optuna.samplers.TPESampler``) models the good and the bad trials' parameter
densities and proposes where their ratio is highest; ``multivariate=True`` models the
levers jointly (``max-running-requests`` and ``mem-fraction-static`` interact through the
KV pool), and the study's ``seed`` makes a study reproducible.

Feasibility is an Optuna constraint (``Trial.set_constraint``, Optuna 5's replacement
for the deprecated ``constraints_func``): a value > 0 means infeasible, and TPE ranks
infeasible trials after every feasible one, by how far they miss.  The amount is how far
the worst counted point is over its SLA limit, as a fraction of the limit; a trial that
could not start (pruned before launch) gets :data:`CANNOT_START`, further than any
measured miss, so the sampler learns to stay away from it without spending GPU time.
The same amount is kept as the user attribute :data:`CONSTRAINT_ATTR` (a one-element
list) for the page and the CLI.
"""

from __future__ import annotations

import optuna

from domain.tune.score import TrialScore
from domain.tune.study import Study, study_tag

CONSTRAINT_ATTR = "constraint"  # user attr: list[float], > 0 means the SLA was violated
VIOLATIONS_ATTR = "violations"  # user attr: list[str], the lines of score.sla_violations
PRUNED_REASON_ATTR = "pruned_reason"  # user attr: why the trial never started
MAX_CONCURRENCY_ATTR = "max_concurrency"
CANNOT_START = 1000.0
MISSED = 1.0  # an objective that holds nothing (goodput 0, no concurrency under the SLA)
# TPE's random start: enough to see each of a few levers' halves before modelling them.
STARTUP_TRIALS = 10


def make_sampler(study: Study, *, seed_offset: int = 0,
                 startup_trials: int = STARTUP_TRIALS) -> optuna.samplers.BaseSampler:
    """A seeded multivariate TPE sampler (constraints come from each trial's set_constraint);
    ``seed_offset`` moves the seed on for a study reopened after a restart."""
    return optuna.samplers.TPESampler(seed=study.seed + seed_offset, multivariate=True,
                                      n_startup_trials=startup_trials)


def trials_so_far(storage: optuna.storages.BaseStorage | str, name: str) -> int:
    """How many trials the Optuna study ``name`` already holds in ``storage`` (0: no such study)."""
    backend = optuna.storages.get_storage(storage)
    try:
        study_id = backend.get_study_id_from_name(name)
    except KeyError:
        return 0
    return len(backend.get_all_trials(study_id, deepcopy=False))


def open_optuna_study(study: Study, storage: optuna.storages.BaseStorage | str,
                      sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    """The Optuna study for ``study`` in ``storage`` (named by its tag), created or reopened.

    A sampler's random numbers start again from its seed when the process restarts, so a
    reopened study seeded as before would propose its first trials' parameters again; the
    seed is therefore moved on by the trials already stored (the same for a given storage,
    so a study is still reproducible from its journal)."""
    name = study_tag(study.name)
    if sampler is None:
        sampler = make_sampler(study, seed_offset=trials_so_far(storage, name))
    return optuna.create_study(storage=storage, sampler=sampler, study_name=name, direction="maximize",
                               load_if_exists=True)


def _trial(ostudy: optuna.Study, trial: optuna.trial.Trial | int) -> optuna.trial.Trial:
    """A live handle on trial ``trial`` (a number after a restart: Optuna's storage maps it)."""
    if isinstance(trial, optuna.trial.Trial):
        return trial
    trial_id = ostudy._storage.get_trial_id_from_study_id_trial_number(ostudy._study_id, trial)
    return optuna.trial.Trial(ostudy, trial_id)


def constraint_for(score: TrialScore) -> float:
    """0 for a feasible trial, else how far it missed (:attr:`TrialScore.miss`, at least :data:`MISSED`
    when it missed by having nothing to show)."""
    if score.feasible:
        return 0.0
    return score.miss if score.miss > 0 else MISSED


def tell_score(ostudy: optuna.Study, trial: optuna.trial.Trial | int, score: TrialScore) -> None:
    """Finish a measured trial: its value, its constraint, violations and max concurrency;
    a trial without a value is told as failed."""
    handle = _trial(ostudy, trial)
    amount = constraint_for(score)
    handle.set_user_attr(CONSTRAINT_ATTR, [amount])
    handle.set_user_attr(VIOLATIONS_ATTR, list(score.violations))
    handle.set_user_attr(MAX_CONCURRENCY_ATTR, score.max_concurrency)
    if score.value is None:
        ostudy.tell(handle, state=optuna.trial.TrialState.FAIL)
        return
    handle.set_constraint(CONSTRAINT_ATTR, amount)
    ostudy.tell(handle, score.value)


def tell_pruned(ostudy: optuna.Study, trial: optuna.trial.Trial | int, reason: str) -> None:
    """Finish a trial that was never launched (validator or memory fit): pruned, with its
    reason, and infeasible beyond any measured trial so TPE avoids its neighbourhood."""
    handle = _trial(ostudy, trial)
    handle.set_user_attr(PRUNED_REASON_ATTR, reason)
    handle.set_user_attr(CONSTRAINT_ATTR, [CANNOT_START])
    handle.set_constraint(CONSTRAINT_ATTR, CANNOT_START)
    ostudy.tell(handle, state=optuna.trial.TrialState.PRUNED)


def best_feasible(ostudy: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The completed trial with the highest value among those that met the SLA, or None."""
    done = ostudy.get_trials(deepcopy=False, states=[optuna.trial.TrialState.COMPLETE])
    feasible = [t for t in done if t.value is not None and all(v <= 0 for v in t.constraints.values())]
    return max(feasible, key=lambda t: float(t.value or 0.0)) if feasible else None
