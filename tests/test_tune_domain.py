"""The tuner's domain (issue 17): the study and its YAML, the default space and the rule
profile's bans, one trial's plan, scores, and the Optuna search with real Optuna objects."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.storages.journal import JournalFileBackend

from domain.flags.risk import assess_risk
from domain.plan.plan_io import PlanError
from domain.plan.run_plan import RunPlan
from domain.tune.score import (
    TrialScore,
    concurrency_margins,
    max_concurrency_under_sla,
    next_concurrency,
    score_points,
    sla_violations,
)
from domain.tune.search import (
    CANNOT_START,
    CONSTRAINT_ATTR,
    PRUNED_REASON_ATTR,
    VIOLATIONS_ATTR,
    best_feasible,
    make_sampler,
    open_optuna_study,
    tell_pruned,
    tell_score,
)
from domain.tune.space import (
    LAYOUT,
    BannedProposal,
    ParamValue,
    allowed_space,
    banned_reason,
    banned_rule,
    cannot_start,
    default_space,
    expand_params,
    propose,
    trial_plan,
)
from domain.tune.study import Lever, Objective, Sla, Study, study_tag
from domain.tune.study_yaml import dump_study, load_study, study_from_yaml

FIXTURE = Path(__file__).parent / "fixtures" / "tune" / "study_default_space.yaml"
optuna.logging.set_verbosity(optuna.logging.WARNING)


def _study(**changes: object) -> Study:
    return load_study(FIXTURE).model_copy(update=changes)


# -- the study and its YAML ----------------------------------------------------------------------


def test_a_study_without_a_space_gets_the_seed_levers_for_its_version() -> None:
    study = load_study(FIXTURE)
    flags = [lever.flag for lever in study.space]
    assert flags[:5] == ["max-running-requests", "chunked-prefill-size", "max-prefill-tokens",
                         "mem-fraction-static", "num-continuous-decode-steps"]
    assert {"schedule-policy", "cuda-graph-max-bs-decode", LAYOUT} <= set(flags)
    assert study_tag(study.name) == "study-qwen3-235b-tp8-levers"


def test_a_study_survives_its_own_yaml() -> None:
    study = load_study(FIXTURE)
    assert study_from_yaml(dump_study(study)) == study


@pytest.mark.parametrize(("change", "field"), [
    ("objective: goodput\nsla: {}", "goodput needs an SLA"),
    ("sla: {tpot_p99_ms: 50, concurrencies: [3]}", "not in the base plan"),
    ("rule_profile: '1999'", "no rule profile"),
    ("budget: {trials: 501}", "budget.trials"),
    ("name: 'not a slug'", "name"),
])
def test_a_bad_study_is_refused_field_by_field(change: str, field: str) -> None:
    text = FIXTURE.read_text(encoding="utf-8")
    key = change.split(":")[0]
    kept = [line for line in text.splitlines() if not line.startswith(f"{key}:")]
    if key == "objective":
        kept = [line for line in kept if not line.startswith("sla:")]
    with pytest.raises(PlanError) as refused:
        study_from_yaml("\n".join([*kept, change]))
    shown = str(refused.value)
    assert (field in shown) or (field == "goodput needs an SLA" and "needs an SLA" in shown)


def test_a_space_with_a_banned_value_is_refused_with_the_rule() -> None:
    text = FIXTURE.read_text(encoding="utf-8") + (
        "space:\n  - {flag: kv-cache-dtype, kind: choice, choices: [auto, fp8_e4m3]}\n")
    with pytest.raises(PlanError) as refused:
        study_from_yaml(text)
    problem = refused.value.problems[0]
    assert (problem.field, problem.kind) == ("space.0", "banned_by_rules")
    assert "no_quality_lowering_quantization" in problem.message
    assert problem.text("ja").startswith("探索空間の --kv-cache-dtype fp8_e4m3 はルールプロファイル 2025 で禁止")
    assert "lower model quality" in problem.text("en")


# -- the default space and the rule profile ------------------------------------------------------


@pytest.mark.parametrize(("version", "graph_flag", "attention_dp"), [
    ("0.5.23", "cuda-graph-max-bs-decode", "attn-dp-size=2"),
    ("0.5.9", "cuda-graph-max-bs", "enable-dp-attention=true,dp-size=2"),
    ("0.4.6.post5", "cuda-graph-max-bs", "enable-dp-attention=true,dp-size=2"),
])
def test_the_default_space_spells_flags_as_the_version_does(version: str, graph_flag: str, attention_dp: str) -> None:
    space = {lever.flag: lever for lever in default_space(version, 8, "2025")}
    assert graph_flag in space
    assert ("cuda-graph-max-bs" in space) == (graph_flag == "cuda-graph-max-bs")
    assert any(attention_dp in str(choice) for choice in space[LAYOUT].choices or ())


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_every_layout_fills_the_gpus_and_attention_dp_stays_inside_tp(gpus: int) -> None:
    layout = next(lever for lever in default_space("0.5.23", gpus, "2025") if lever.flag == LAYOUT)
    for choice in layout.choices or ():
        flags = expand_params({LAYOUT: choice})
        tp, dp = int(flags["tp-size"]), int(flags.get("dp-size", 1))
        assert tp * dp == gpus
        assert tp % int(flags.get("ep-size", 1)) == 0
        attn = int(flags.get("attn-dp-size", 1))
        assert tp % attn == 0 and (attn == 1 or dp == 1)


def test_the_2025_profile_bans_quantization_and_experimental_flags() -> None:
    rule = banned_rule("torch-compile-max-bs", 32, "2025")
    assert rule is not None and rule.id == "no_experimental_features"
    assert set(rule.reason) == {"ja", "en"}
    assert banned_reason("kv-cache-dtype", "fp8_e4m3", "2025") is not None
    assert banned_reason("kv-cache-dtype", "auto", "2025") is None
    assert banned_reason("enable-torch-compile", False, "2025") is None  # a switch set off breaks nothing


def test_a_layout_lever_must_be_written_as_flag_sets() -> None:
    assert Lever(flag=LAYOUT, kind="choice", choices=["tp-size=8,ep-size=2", "tp-size=4,dp-size=2"])
    with pytest.raises(ValueError, match="layout choices"):
        Lever(flag=LAYOUT, kind="choice", choices=["tp8 ep2"])


def test_a_mixed_lever_keeps_only_its_allowed_choices() -> None:
    levers = [Lever(flag="kv-cache-dtype", kind="choice", choices=["auto", "fp8_e4m3", "bf16"]),
              Lever(flag="torch-compile-max-bs", kind="int", low=1, high=64),
              Lever(flag="max-running-requests", kind="int", low=16, high=256)]
    kept = allowed_space(levers, "2025")
    assert [(lever.flag, lever.choices) for lever in kept] == [
        ("kv-cache-dtype", ["auto", "bf16"]), ("max-running-requests", None)]


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
@pytest.mark.parametrize("sampler_kind", ["random", "tpe"])
def test_no_trial_ever_proposes_a_flag_the_2025_rules_forbid(version: str, sampler_kind: str) -> None:
    """Hundreds of real Optuna trials over the default space plus a lever whose values are
    partly banned (kv-cache-dtype): every proposal passes the rule profile's own check
    (domain/flags/risk.py assess_risk, the one the plan checks use)."""
    space = allowed_space([*default_space(version, 8, "2025"),
                           Lever(flag="kv-cache-dtype", kind="choice", choices=["auto", "fp8_e4m3", "fp8_e5m2"])],
                          "2025")
    sampler = (optuna.samplers.RandomSampler(seed=3) if sampler_kind == "random"
               else optuna.samplers.TPESampler(seed=3, multivariate=True, n_startup_trials=10))
    ostudy = optuna.create_study(direction="maximize", sampler=sampler)
    seen_values = set()
    for _ in range(200 if sampler_kind == "random" else 40):
        trial = ostudy.ask()
        flags = propose(trial, space, "2025")
        report = assess_risk(flags, version, "2025")
        assert report.ok, report.broken
        seen_values.add(flags["kv-cache-dtype"])
        ostudy.tell(trial, float(flags["max-running-requests"]))
    assert seen_values == {"auto"}


def test_a_stepped_float_is_proposed_as_the_value_written() -> None:
    space = [Lever(flag="mem-fraction-static", kind="float", low=0.70, high=0.93, step=0.01)]
    trial = optuna.trial.FixedTrial({"mem-fraction-static": 0.7 + 10 * 0.01})
    assert propose(trial, space) == {"mem-fraction-static": 0.8}


def test_an_unchecked_banned_space_raises_instead_of_proposing() -> None:
    space = [Lever(flag="torch-compile-max-bs", kind="int", low=1, high=8)]
    trial = optuna.create_study().ask()
    with pytest.raises(BannedProposal, match="no_experimental_features"):
        propose(trial, space, "2025")


# -- one trial's plan ----------------------------------------------------------------------------


def test_a_trial_plan_carries_the_study_and_replaces_the_whole_layout() -> None:
    study = load_study(FIXTURE)
    plan = trial_plan(study, {"max-running-requests": 160, LAYOUT: "tp-size=8,attn-dp-size=4"}, 3)
    assert plan.tags[-2:] == ["study-qwen3-235b-tp8-levers", "trial-3"]
    assert plan.name == "qwen3-235b-tp8-levers · trial 3"
    assert plan.server_args == {"mem-fraction-static": 0.88, "max-running-requests": 160, "tp-size": 8,
                                "attn-dp-size": 4}
    assert plan.benchmark == study.base_plan.benchmark


def test_memory_fit_says_which_configurations_cannot_start() -> None:
    study = load_study(FIXTURE)
    assert cannot_start(trial_plan(study, {LAYOUT: "tp-size=8,ep-size=2"}, 0)) is None
    moe_plan = trial_plan(study, {LAYOUT: "tp-size=8"}, 1)
    moe = cannot_start(moe_plan)
    assert moe is not None and "multiple of 128" in moe
    assert "128 の倍数になりません" in (cannot_start(moe_plan, "ja") or "")
    base = study.base_plan.model_dump()
    small = RunPlan.model_validate({**base, "model": "Qwen/Qwen3-30B-A3B", "gpu": {"type": "H200", "count": 1},
                                    "server_args": {"mem-fraction-static": 0.3}})
    assert cannot_start(small) is not None


# -- scores --------------------------------------------------------------------------------------


def _points(rows: list[tuple[int, float, float, float]], scenario: str = "mid") -> pd.DataFrame:
    """(concurrency, ttft p99, tpot p99, output tok/s) per point, two repeats each."""
    records = [{"scenario": scenario, "concurrency": c, "repeat_idx": r, "ttft_p99_ms": ttft, "tpot_p99_ms": tpot,
                "output_throughput": tok + r * 10.0, "request_throughput": tok / 1000, "duration_s": 60.0,
                "point_id": 10 * c + r}
               for c, ttft, tpot, tok in rows for r in (0, 1)]
    return pd.DataFrame(records)


def test_output_per_gpu_is_the_mean_over_the_sla_concurrencies() -> None:
    study = _study(sla=Sla(tpot_p99_ms=72, concurrencies=[128, 256]))
    points = _points([(64, 1000, 40, 800.0), (128, 2000, 55, 1600.0), (256, 4000, 70, 2400.0)])
    score = score_points(points, study)
    assert score.feasible and score.violations == ()
    assert score.value == pytest.approx(((1605 + 2405) / 2) / 8)


def test_a_point_over_its_limit_makes_the_trial_infeasible_and_says_how_far() -> None:
    study = _study(sla=Sla(tpot_p99_ms=60))
    points = _points([(64, 1000, 40, 800.0), (128, 2000, 75, 1600.0)])
    score = score_points(points, study)
    assert not score.feasible
    assert score.violations == ("mid c=128: p99 TPOT 75 ms > 60 ms",)
    assert score.miss == pytest.approx(0.25)
    assert sla_violations(points.iloc[:2], study.sla) == []
    assert sla_violations(points, study.sla, "ja") == ["mid・並列数 128: p99 TPOT 75 ms が上限 60 ms を超えています"]


def test_goodput_counts_good_requests_when_there_are_samples_and_says_so() -> None:
    study = _study(objective=Objective.GOODPUT, sla=Sla(tpot_p99_ms=60))
    points = _points([(64, 1000, 40, 800.0)])
    aggregate = score_points(points, study)
    assert (aggregate.value, aggregate.basis) == (pytest.approx(0.8), "aggregate")
    requests = pd.DataFrame({"success": [True, True, True, False], "ttft_ms": [100.0] * 4,
                             "tpot_ms": [50.0, 59.0, 61.0, 10.0]})
    sampled = score_points(points, study, {640: requests, 641: requests})
    assert (sampled.value, sampled.basis) == (pytest.approx(2 / 60), "requests")


def test_max_concurrency_interpolates_between_the_last_pass_and_the_first_fail() -> None:
    assert max_concurrency_under_sla([(8, 0.5), (16, 0.2), (32, -0.2)]) == pytest.approx(24.0)
    # A noisy pass above a fail is pooled into a non-increasing fit first.
    # (16 and 32 pool to a margin of -0.05, so the crossing lies between 8 and 16.)
    assert max_concurrency_under_sla([(8, 0.4), (16, -0.2), (32, 0.1), (64, -0.5)]) == pytest.approx(
        8 + 8 * 0.4 / 0.45)
    assert max_concurrency_under_sla([(8, 0.4), (16, 0.1)]) == 16.0
    assert max_concurrency_under_sla([(8, -0.1), (16, -0.3)]) is None


def test_max_concurrency_objective_reads_the_margins_of_the_points() -> None:
    study = _study(objective=Objective.MAX_CONCURRENCY, sla=Sla(tpot_p99_ms=60))
    points = _points([(64, 1000, 30, 800.0), (128, 2000, 50, 1600.0), (256, 4000, 90, 2400.0)])
    margins = concurrency_margins(points, study.sla)
    assert [c for c, _ in margins] == [64, 128, 256]
    expected = 128 + 128 * (10 / 60) / (10 / 60 + 30 / 60)
    score = score_points(points, study)
    assert score.feasible and score.value == pytest.approx(expected) and score.max_concurrency == score.value


def test_bisection_finds_the_boundary_in_logarithmic_steps() -> None:
    holds = 37  # the highest concurrency that meets the SLA
    results: dict[int, bool] = {}
    while (c := next_concurrency(results, 1, 256)) is not None:
        results[c] = c <= holds
    assert max(c for c, ok in results.items() if ok) == holds
    assert min(c for c, ok in results.items() if not ok) == holds + 1
    assert len(results) <= 2 + math.ceil(math.log2(256))
    assert next_concurrency({1: False}, 1, 256) is None
    assert next_concurrency({256: True, 1: True}, 1, 256) is None


# -- the search ----------------------------------------------------------------------------------


def _proposals(study: Study, n: int) -> list[dict[str, ParamValue]]:
    ostudy = optuna.create_study(direction="maximize", sampler=make_sampler(study))
    out = []
    for _ in range(n):
        trial = ostudy.ask()
        flags = propose(trial, study.space, study.rule_profile)
        out.append(flags)
        ostudy.tell(trial, float(flags["max-running-requests"]))
    return out


def test_the_same_seed_proposes_the_same_trials() -> None:
    study = load_study(FIXTURE)
    assert _proposals(study, 14) == _proposals(study, 14)
    assert _proposals(study, 3) != _proposals(study.model_copy(update={"seed": 8}), 3)


def test_scores_become_values_constraints_and_reasons() -> None:
    study = load_study(FIXTURE)
    ostudy = optuna.create_study(direction="maximize", sampler=make_sampler(study))
    first, second, third, fourth = (ostudy.ask() for _ in range(4))
    tell_score(ostudy, first, TrialScore(300.0, True, (), None))
    tell_score(ostudy, second, TrialScore(900.0, False, ("mid c=256: p99 TPOT 90 ms > 72 ms",), None, miss=0.25))
    tell_pruned(ostudy, third, "the weights leave no KV cache")
    tell_score(ostudy, fourth, TrialScore(None, False, ("no measured points",), None, "none"))
    trials = ostudy.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE", "PRUNED", "FAIL"]
    assert [t.user_attrs[CONSTRAINT_ATTR] for t in trials[:3]] == [[0.0], [0.25], [CANNOT_START]]
    assert trials[1].user_attrs[VIOLATIONS_ATTR] == ["mid c=256: p99 TPOT 90 ms > 72 ms"]
    assert trials[2].user_attrs[PRUNED_REASON_ATTR] == "the weights leave no KV cache"
    assert trials[1].constraints == {CONSTRAINT_ATTR: 0.25}
    best = best_feasible(ostudy)
    assert best is not None and best.number == 0  # the 900 broke the SLA
    assert ostudy.best_trial.number == 0  # Optuna's own pick honours the constraint too


def _journal(path: Path) -> optuna.storages.JournalStorage:
    return optuna.storages.JournalStorage(JournalFileBackend(str(path)))


def test_a_reopened_study_keeps_its_trials_and_does_not_replay_its_first_proposals(tmp_path: Path) -> None:
    study = load_study(FIXTURE)
    before = open_optuna_study(study, _journal(tmp_path / "j.log"))
    trial = before.ask()
    first = propose(trial, study.space, study.rule_profile)
    # The runner stops here, mid-trial; a new process reopens the study and finishes it by number.
    after = open_optuna_study(study, _journal(tmp_path / "j.log"))
    tell_score(after, trial.number, TrialScore(250.0, True, (), None))
    assert after.get_trials()[0].state.name == "COMPLETE"
    assert after.get_trials()[0].params == before.get_trials()[0].params
    second = propose(after.ask(), study.space, study.rule_profile)
    assert second != first
