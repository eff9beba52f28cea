"""How close the tuner gets to the best configuration of a grid, and for how many evaluations.

Two spaces over the seed's levers (domain/tune/space.py), each evaluated on a virtual clock:
a trial is "measured" by the estimator the emulator serves from
(domain/estimate/estimator.py ``setup_for`` / ``estimate_point``: no process, no GPU), and
the memory-fit check (domain/plan/memory_fit.py, via ``domain.tune.space.cannot_start``)
decides which configurations cannot start; those are pruned, never scored.

- **235B**: Qwen3-235B-A22B-FP8, TP8 EP2 on 8×H200, 1000/1000 tokens at concurrency 256;
- **30B**: Qwen3-30B-A3B (BF16) on 1×H200, 1000/1000 tokens at concurrency 256.

Objective: output tok/s per GPU at that concurrency (domain/tune/score.py), under an SLA
on p99 TPOT (and a loose p99 TTFT) that rules out part of each space: a large running
batch breaks TPOT, a small one queues requests and breaks TTFT.  The estimator's TTFT and
TPOT stand in for the p99s: with fixed request lengths every request of a round sees the
same figures (the estimator's docstring), so its median is its p99.

Each space's grid is every combination of the lever values below (at least 500).  The
grid is evaluated exhaustively once; its best feasible objective is the optimum.  Then,
for each of 20 seeds, the tuner (domain/tune/search.py: seeded multivariate TPE, the SLA
as an Optuna constraint, pruned trials told as pruned) and random search (Optuna's
``RandomSampler``, same seed) each get the same budget of trials drawn from the same
levers (3 % of the grid: 30 trials, the first 10 of them TPE's random start); a trial's
figures are looked up in the grid's evaluations (the virtual clock).
Every trial counts as an evaluation, pruned ones included.  The line printed per space is
the median over the seeds of ``(optimum − best feasible found) / optimum`` (100 % when a
search finds nothing feasible).

What the estimator responds to (checked by :func:`lever_response`, printed without
``--quick``: each lever changed alone from 40 grid points, looking for any change in the
objective, the SLA miss or whether the configuration starts).  It moves with
``max-running-requests`` (the running batch: TPOT, TTFT queueing, throughput), the decode
CUDA-graph batch-size cap (decode steps above it run eagerly, slower), the prefill token
budget (the smaller of ``chunked-prefill-size`` and ``max-prefill-tokens``: a round's
prefill steps) and ``mem-fraction-static`` (the KV pool, which caps the batch only when it
is short).  The check's findings, as printed on this machine:

- 235B: ``mem-fraction-static``, ``schedule-policy``, ``num-continuous-decode-steps`` change
  nothing (both 0.5 and 0.88 hold 256 requests of 2,000 tokens in the KV pool);
- 30B: ``max-prefill-tokens``, ``schedule-policy``, ``num-continuous-decode-steps`` change
  nothing (the 30B prefill cost grows linearly with tokens, so how a round's prefill is cut
  into steps does not move its total; ``mem-fraction-static`` 0.4 leaves the weights no KV
  cache at all, so the memory fit prunes half the grid).

The estimator does not model ``schedule-policy`` nor ``num-continuous-decode-steps`` at all
(nor EP or attention DP, which the default space's layouts carry and these spaces fix).
The flat levers stay in the grid because a grid over the seed's levers pays for them, and
the bench says so rather than inventing an effect; part of the tuner's saving over the grid
is that it learns they do not matter.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import optuna
import pandas as pd

from domain.estimate.estimator import PointEstimate, estimate_point, setup_for
from domain.plan.run_plan import BenchmarkPlan, GpuSpec, RunPlan, Scenario
from domain.tune.score import TrialScore, score_points
from domain.tune.search import best_feasible, make_sampler, tell_pruned, tell_score
from domain.tune.space import ParamValue, cannot_start, propose, trial_plan
from domain.tune.study import Budget, Choice, Lever, Objective, Sla, Study

SEEDS = 20
BUDGET_SHARE = 0.03  # of the grid's evaluations
TARGET_GAP_PCT = 3.0
TARGET_SHARE_PCT = 10.0
GPU = "H200"


@dataclass(frozen=True)
class Space:
    key: str
    model: str
    gpu_count: int
    base_args: Mapping[str, ParamValue]
    scenario: Scenario
    concurrency: int
    sla: Sla
    levers: tuple[Lever, ...]
    version: str = "0.5.23"

    def study(self, seed: int, trials: int) -> Study:
        plan = RunPlan(name=f"tuner bench {self.key}", engine="emulator", sglang_version=self.version,
                       model=self.model, gpu=GpuSpec(type=GPU, count=self.gpu_count),
                       server_args=dict(self.base_args),
                       benchmark=BenchmarkPlan(scenarios=[self.scenario], concurrency=[self.concurrency]))
        return Study(name=f"bench-{self.key}", base_plan=plan, objective=Objective.OUTPUT_TOK_S_PER_GPU,
                     sla=self.sla, space=list(self.levers), budget=Budget(trials=trials), seed=seed)


def _levers(fractions: list[Choice]) -> tuple[Lever, ...]:
    """The seed's seven levers, two to sixteen values each (the running-request cap, the one
    the SLA turns on, finest)."""
    return (
        Lever(flag="max-running-requests", kind="int", low=32, high=512, step=32),
        Lever(flag="cuda-graph-max-bs-decode", kind="choice", choices=[128, 512]),
        Lever(flag="chunked-prefill-size", kind="choice", choices=[2048, 8192]),
        Lever(flag="max-prefill-tokens", kind="choice", choices=[4096, 16384]),
        Lever(flag="mem-fraction-static", kind="choice", choices=fractions),
        Lever(flag="schedule-policy", kind="choice", choices=["fcfs", "lpm"]),
        Lever(flag="num-continuous-decode-steps", kind="choice", choices=[1, 4]),
    )


_MID = Scenario(name="mid", input_len=1000, output_len=1000)
SPACES = (
    Space(key="235b-fp8-8xh200-tp8-ep2", model="Qwen/Qwen3-235B-A22B-FP8", gpu_count=8,
          base_args={"tp-size": 8, "ep-size": 2}, scenario=_MID, concurrency=256,
          sla=Sla(ttft_p99_ms=60_000, tpot_p99_ms=72), levers=_levers([0.5, 0.88])),
    Space(key="30b-1xh200", model="Qwen/Qwen3-30B-A3B", gpu_count=1,
          base_args={"tp-size": 1}, scenario=_MID, concurrency=256,
          sla=Sla(ttft_p99_ms=90_000, tpot_p99_ms=140), levers=_levers([0.4, 0.88])),
)


# -- the virtual clock --------------------------------------------------------------------------


def estimated_points(plan: RunPlan, cache: dict[tuple[str, int, int, int], PointEstimate] | None = None
                     ) -> pd.DataFrame:
    """The plan's points as the estimator predicts them, in the points frame's columns.
    ``cache`` keeps estimates by the estimator's resolved set-up (its ``repr``): two
    configurations it resolves alike get the same figures, so they are computed once."""
    setup = setup_for(plan.model, plan.gpu.type, plan.server_args)
    columns: dict[str, list[object]] = {name: [] for name in _POINT_COLUMNS}
    for point in plan.points():
        s = point.scenario
        key = (repr(setup), s.input_len, s.output_len, point.concurrency)
        est = cache.get(key) if cache is not None else None
        if est is None:
            est = estimate_point(setup, s.input_len, s.output_len, point.concurrency)
            if cache is not None:
                cache[key] = est
        round_s = est.batch * s.output_len / est.output_tok_s if est.output_tok_s > 0 else math.nan
        row = (s.name, point.concurrency, point.repeat_idx, est.ttft_ms, est.tpot_ms, est.output_tok_s,
               est.batch / round_s if round_s > 0 else math.nan, point.num_prompts * round_s / max(1, est.batch),
               None)
        for name, value in zip(_POINT_COLUMNS, row, strict=True):
            columns[name].append(value)
    return pd.DataFrame(columns)


_POINT_COLUMNS = ("scenario", "concurrency", "repeat_idx", "ttft_p99_ms", "tpot_p99_ms", "output_throughput",
                  "request_throughput", "duration_s", "point_id")


@dataclass(frozen=True)
class Outcome:
    pruned: str | None  # why it cannot start
    score: TrialScore | None

    @property
    def feasible_value(self) -> float | None:
        if self.score is None or not self.score.feasible:
            return None
        return self.score.value


Key = tuple[tuple[str, ParamValue], ...]


@dataclass
class Landscape:
    """Every configuration's outcome, evaluated once (the grid) and looked up by the searches."""

    space: Space
    outcomes: dict[Key, Outcome] = field(default_factory=dict)
    estimates: dict[tuple[str, int, int, int], PointEstimate] = field(default_factory=dict)

    def evaluate(self, flags: Mapping[str, ParamValue]) -> Outcome:
        key = tuple(sorted(flags.items()))
        if key not in self.outcomes:
            study = self.space.study(0, 1)
            plan = trial_plan(study, flags, 0)
            reason = cannot_start(plan)
            score = None if reason else score_points(estimated_points(plan, self.estimates), study)
            self.outcomes[key] = Outcome(reason, score)
        return self.outcomes[key]

    def optimum(self) -> float:
        values = [v for o in self.outcomes.values() if (v := o.feasible_value) is not None]
        return max(values)


def _values(lever: Lever) -> list[ParamValue]:
    if lever.kind == "choice":
        return list(lever.choices or ())
    low, high, step = float(lever.low or 0), float(lever.high or 0), float(lever.step or 1)
    count = round((high - low) / step) + 1
    values = [low + i * step for i in range(count)]
    return [int(v) for v in values] if lever.kind == "int" else [round(v, 6) for v in values]


def grid(levers: tuple[Lever, ...]) -> Iterator[dict[str, ParamValue]]:
    names = [lever.flag for lever in levers]
    for combo in itertools.product(*(_values(lever) for lever in levers)):
        yield dict(zip(names, combo, strict=True))


# -- the searches --------------------------------------------------------------------------------


def search(landscape: Landscape, sampler: optuna.samplers.BaseSampler, seed: int, trials: int) -> float | None:
    """The best feasible objective ``sampler`` finds in ``trials`` trials (None: nothing feasible)."""
    study = landscape.space.study(seed, trials)
    ostudy = optuna.create_study(direction="maximize", sampler=sampler)
    for _ in range(trials):
        trial = ostudy.ask()
        outcome = landscape.evaluate(propose(trial, study.space, study.rule_profile))
        if outcome.pruned is not None:
            tell_pruned(ostudy, trial, outcome.pruned)
        elif outcome.score is not None:
            tell_score(ostudy, trial, outcome.score)
    best = best_feasible(ostudy)
    return float(best.value) if best is not None and best.value is not None else None


def gap_pct(found: float | None, optimum: float) -> float:
    return 100.0 if found is None else (optimum - found) / optimum * 100.0


@dataclass(frozen=True)
class SpaceResult:
    space: Space
    grid_points: int
    infeasible: int
    pruned: int
    optimum: float
    budget: int
    tuner_gaps: tuple[float, ...]
    random_gaps: tuple[float, ...]

    @property
    def tuner_gap_pct(self) -> float:
        return statistics.median(self.tuner_gaps)

    @property
    def random_gap_pct(self) -> float:
        return statistics.median(self.random_gaps)

    @property
    def budget_pct(self) -> float:
        return self.budget / self.grid_points * 100.0

    def line(self) -> str:
        return (f"tuner: within {self.tuner_gap_pct:.1f}% of the grid optimum using {self.budget_pct:.1f}% of the "
                f"grid's evaluations (median of {SEEDS} seeds); random search: within {self.random_gap_pct:.1f}% "
                f"using the same budget")


def run_space(space: Space, seeds: int = SEEDS) -> SpaceResult:
    landscape = Landscape(space)
    points = [landscape.evaluate(flags) for flags in grid(space.levers)]
    budget = max(1, math.floor(len(points) * BUDGET_SHARE))
    optimum = landscape.optimum()
    tuner, random = [], []
    for seed in range(seeds):
        study = space.study(seed, budget)
        tuner.append(gap_pct(search(landscape, make_sampler(study), seed, budget), optimum))
        random.append(gap_pct(search(landscape, optuna.samplers.RandomSampler(seed=seed), seed, budget), optimum))
    return SpaceResult(
        space=space, grid_points=len(points), optimum=optimum, budget=budget,
        pruned=sum(o.pruned is not None for o in points),
        infeasible=sum(o.pruned is None and o.feasible_value is None for o in points),
        tuner_gaps=tuple(tuner), random_gaps=tuple(random),
    )


def _spread(gaps: tuple[float, ...]) -> str:
    quartiles = statistics.quantiles(gaps, n=4)
    return f"{quartiles[0]:.1f}–{quartiles[2]:.1f}% (worst {max(gaps):.1f}%)"


# -- does the estimator respond to each lever? -----------------------------------------------------


def lever_response(space: Space, samples: int = 40) -> dict[str, bool]:
    """Per lever: does changing it alone, from any of ``samples`` grid points spread over the
    grid, change the score (objective value, SLA miss, or whether the configuration starts)?"""
    landscape = Landscape(space)
    points = list(grid(space.levers))
    sample = points[:: max(1, len(points) // samples)]
    moved: dict[str, bool] = {}
    for lever in space.levers:
        moved[lever.flag] = any(len({_figures(landscape.evaluate({**flags, lever.flag: value}))
                                     for value in _values(lever)}) > 1 for flags in sample)
    return moved


def _figures(outcome: Outcome) -> tuple[object, ...]:
    if outcome.score is None:
        return (outcome.pruned,)
    return (round(outcome.score.value or 0.0, 6), round(outcome.score.miss, 6))


def _sla_text(sla: Sla) -> str:
    return " and ".join(f"p99 {name} ≤ {limit:g} ms" for name, limit in
                        (("TTFT", sla.ttft_p99_ms), ("TPOT", sla.tpot_p99_ms)) if limit is not None)


def run(quick: bool = False) -> None:
    """Per space, a line that says what was searched and the one result line; without
    ``--quick`` first the levers the estimator does not respond to (both use 20 seeds)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for space in SPACES:
        started = time.perf_counter()
        if not quick:
            flat = [flag for flag, moved in lever_response(space).items() if not moved]
            print(f"{space.key}: levers the estimator does not respond to: {', '.join(flat) or 'none'}")
        result = run_space(space)
        print(f"{space.key}: {space.model} on {space.gpu_count}×{GPU}, {space.scenario.input_len}/"
              f"{space.scenario.output_len} tokens at concurrency {space.concurrency}, SLA {_sla_text(space.sla)}; "
              f"grid {result.grid_points} points ({result.pruned} cannot start by the memory-fit check, "
              f"{result.infeasible} break the SLA), optimum {result.optimum:.1f} output tok/s per GPU as the "
              f"estimator predicts it; budget {result.budget} trials; {time.perf_counter() - started:.1f} s")
        print(result.line())
        print(f"    spread over the seeds (quartiles): tuner {_spread(result.tuner_gaps)}, random search "
              f"{_spread(result.random_gaps)}", flush=True)
