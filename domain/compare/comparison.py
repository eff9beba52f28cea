"""One comparison: a baseline and runs in one language, with every frame the compare page,
``runner export`` and the exports (:mod:`domain.render.tables`, :mod:`domain.render.deck`)
read from it.  Numbers and text only; the charts are built from it in :mod:`domain.render`.
"""

from __future__ import annotations

from collections.abc import Collection, MutableMapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pandas as pd

from domain.compare import comparability, config_diff, values
from domain.compare.caveat import caveat_lines, changed_lines
from domain.core.settings import Settings
from domain.results import (
    analysis,
    curve,
    curve_number,
    definitions,
    difference,
    estimate_overlay,
    method_badges,
    validity,
)
from domain.results.headline import headline_lines
from domain.results.requests import BootstrapMemo, RequestSamples


@dataclass
class Comparison:
    """A baseline and runs compared in one language, with every derived frame.

    ``saturation``, ``pareto`` and ``estimates`` are computed when first read (the knee fits
    and the estimator are about a third of a nine-run comparison, and a compare page's first
    view shows none of them); once computed they are kept, like the fields."""

    frame: pd.DataFrame
    baseline_run_id: int
    run_ids: list[int]
    lang: str
    intended_to_differ: frozenset[str]
    summary: pd.DataFrame  # analysis.summarise_points
    compare: pd.DataFrame  # analysis.compare_table (long)
    scaling: pd.DataFrame
    badges: pd.DataFrame  # validity.validity_badges
    matrix: pd.DataFrame  # comparability.comparability_matrix
    checklist: pd.DataFrame  # comparability.comparability_summary
    caveat: list[str] = field(default_factory=list)
    # The server flags that differ from the baseline, with each flag's layer and risk
    # (config_diff.config_diff): every export says what changed, not only the page.
    flag_diff: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(config_diff.DIFF_COLUMNS)))
    # One line per compared run naming its verdict and each difference with both values,
    # in the UI language: the first lines of every export and of the first slide.
    verdict_lines: list[str] = field(default_factory=list)
    # What changed, per run: each differing server flag with its layer and risk, or a line
    # saying none does, then the conditions marked as under test with both values.
    changed_lines: list[str] = field(default_factory=list)
    # Per compared run: the verdict and the change under test from the older run to the newer
    # (domain/results/headline.py): the verdict box's line, every export's first, the slide's title.
    headline_lines: list[str] = field(default_factory=list)
    gain_threshold_pct: float = curve.DEFAULT_SATURATION_GAIN_PCT  # the knee rule's threshold, for labels
    # The p99 SLA of the saturation rule (curve.saturation_points), when one is set.
    sla_metric: str | None = None
    sla_threshold_ms: float | None = None
    # The cold first points the user keeps in the knee (curve.saturation_points' ``keep``).
    keep_cold: frozenset[tuple[object, object, object]] = frozenset()
    # Below this |Δ| in %, a delta beyond the noise is 'small', never better/worse (difference.py).
    practical_threshold_pct: float = difference.DEFAULT_PRACTICAL_THRESHOLD_PCT
    # Each run's quality row beside its speed delta (domain/results/quality_view.py), set by
    # the reader of the stored probes (db/quality_inputs.py); the exports' lines after the verdicts.
    quality_rows: list[Any] = field(default_factory=list)
    # The interactivity (tok/s/user) each curve's one number is read at (domain/results/curve_number.py).
    interactivity_target: float = curve_number.DEFAULT_INTERACTIVITY

    @property
    def quality_lines(self) -> list[str]:
        """The rows' lines for the exports; none when no compared run was probed or pinned
        (the page still shows each run's "not measured")."""
        if all(row.verdict == "not_measured" and not row.pinned for row in self.quality_rows):
            return []
        return [row.line for row in self.quality_rows]

    @cached_property
    def run_names(self) -> dict[object, tuple[object, object]]:
        """Per run of the summary: (run_name, source), as its first row says them."""
        first = self.summary[["run_id", "run_name", "source"]].drop_duplicates("run_id")
        return {run_id: (name, source) for run_id, name, source in first.itertuples(index=False)}

    @cached_property
    def not_comparable(self) -> frozenset[object]:
        """The runs whose checklist verdict is 'not_comparable'."""
        return frozenset(self.checklist.loc[self.checklist["verdict"] == "not_comparable", "run_id"])

    @cached_property
    def saturation(self) -> pd.DataFrame:
        """Where each curve saturates and which rule said so (curve.saturation_points)."""
        return curve.saturation_points(self.summary, gain_threshold_pct=self.gain_threshold_pct,
                                       sla_metric=self.sla_metric, sla_threshold_ms=self.sla_threshold_ms,
                                       keep=self.keep_cold)

    @cached_property
    def pareto(self) -> pd.DataFrame:
        """Throughput against latency, the frontier marked (curve.pareto_points)."""
        return curve.pareto_points(self.summary)

    @cached_property
    def estimates(self) -> pd.DataFrame:
        """The estimator's figures per point and measured ÷ estimated
        (estimate_overlay.estimates_for): the charts' dashed lines and the exports' ratio
        columns."""
        return estimate_overlay.estimates_for(self.frame, self.summary)


def build_comparison(frame: pd.DataFrame, baseline_run_id: int, run_ids: Sequence[int], lang: str, *,
                     intended_to_differ: Collection[str] = frozenset(),
                     gain_threshold_pct: float = curve.DEFAULT_SATURATION_GAIN_PCT,
                     sla_metric: str | None = None, sla_threshold_ms: float | None = None,
                     requests: RequestSamples | None = None,
                     keep_cold: Collection[tuple[object, object, object]] = (),
                     bootstrap_memos: MutableMapping[int, BootstrapMemo] | None = None,
                     practical_threshold_pct: float = difference.DEFAULT_PRACTICAL_THRESHOLD_PCT,
                     timelines: RequestSamples | None = None) -> Comparison:
    """``requests``: per-request samples by point id (pooled percentiles, bootstrap noise);
    ``bootstrap_memos``: their intervals computed before, by point id (analysis.summarise_points);
    ``keep_cold``: (run, scenario, concurrency) cold first points the user keeps in the
    efficiency baseline and the knee (by default they are left out and badged);
    ``timelines``: the samples' per-request columns the method badges read
    (method_badges.TIMELINE_COLUMNS; by default ``requests``)."""
    others = [r for r in dict.fromkeys(run_ids) if r != baseline_run_id]
    # Aligned first, so the analysis, the matrix, the charts and the exports all see one name.
    selected = align_scenarios(frame[frame["run_id"].isin([baseline_run_id, *others])], baseline_run_id)
    summary = analysis.summarise_points(selected, requests=requests, bootstrap_memos=bootstrap_memos)
    matrix = comparability.comparability_matrix(selected, baseline_run_id, others, intended_to_differ)
    checklist = comparability.comparability_summary(matrix)
    flag_diff = config_diff.config_diff(selected, baseline_run_id, others)
    scaling = curve.scaling_efficiency(summary, keep=keep_cold)
    method = method_badges.method_badges(selected, requests if timelines is None else timelines, summary=summary,
                                         same_config=method_badges.same_config_runs(matrix, baseline_run_id))
    badges = pd.concat([validity.validity_badges(selected), validity.curve_badges(scaling), method],
                       ignore_index=True)
    return Comparison(
        frame=selected, baseline_run_id=baseline_run_id, run_ids=others, lang=lang,
        intended_to_differ=frozenset(intended_to_differ), summary=summary,
        # ``selected`` holds exactly these runs, so the summary above is compare_table's own.
        compare=analysis.compare_table(selected, baseline_run_id, [baseline_run_id, *others], requests=requests,
                                       summary=summary, practical_threshold_pct=practical_threshold_pct),
        scaling=scaling, badges=badges, matrix=matrix,
        checklist=checklist,
        caveat=caveat_lines(selected, baseline_run_id, others, lang, intended_to_differ, checklist,
                            practical_threshold_pct),
        flag_diff=flag_diff,
        # ... and where a metric's definitions differ, a run's figure converted exactly from its requests
        verdict_lines=[*comparability.verdict_lines(checklist, baseline_run_id, lang),
                       *definitions.conversion_lines(selected, [baseline_run_id, *others], requests, lang)],
        changed_lines=changed_lines(flag_diff, checklist, baseline_run_id, lang),
        headline_lines=headline_lines(flag_diff, checklist, baseline_run_id, lang),
        gain_threshold_pct=gain_threshold_pct, sla_metric=sla_metric, sla_threshold_ms=sla_threshold_ms,
        keep_cold=frozenset(keep_cold), practical_threshold_pct=practical_threshold_pct,
    )


# -- scenarios by their lengths ----------------------------------------------------------------

Lengths = tuple[object, object]


def align_scenarios(frame: pd.DataFrame, baseline_run_id: int) -> pd.DataFrame:
    """The frame with each run's scenarios named as the baseline's of the same lengths.

    Scenarios match by (input_len, output_len), not by name: an imported ``in128-out64``
    is the plan's ``short`` when that is 128/64.  A scenario of another run whose lengths
    equal those of exactly one baseline scenario takes its name (two baseline scenarios of
    those lengths: the one of the same ``random_range_ratio``, if exactly one).  A range
    ratio that differs still aligns, so the verdict names it with both values rather than
    hiding it as "no common point".  Lengths matching no baseline scenario (or a rename
    that would merge two scenarios of one run) keep their name.  ``scenario_original``
    keeps the name each row was measured under."""
    aligned = frame.copy()
    if "scenario_original" not in aligned.columns:
        aligned["scenario_original"] = aligned["scenario"]
    base = _scenario_lengths(frame[frame["run_id"] == baseline_run_id])
    for run_id, rows in frame[frame["run_id"] != baseline_run_id].groupby("run_id", sort=False):
        for scenario, target in _renames(_scenario_lengths(rows), base).items():
            aligned.loc[(aligned["run_id"] == run_id) & (aligned["scenario"] == scenario), "scenario"] = target
    return aligned


def _scenario_lengths(rows: pd.DataFrame) -> dict[object, tuple[Lengths | None, object]]:
    """Per scenario: its one (input_len, output_len) (None when unknown or several), and its
    range ratio (None unless one)."""
    found: dict[object, tuple[Lengths | None, object]] = {}
    ratios = rows["random_range_ratio"] if "random_range_ratio" in rows.columns else pd.Series(None, index=rows.index)
    # The four columns read, not the whole frame: each group would copy every column.
    narrow = pd.DataFrame({"scenario": rows["scenario"], "input_len": rows["input_len"],
                           "output_len": rows["output_len"], "_ratio": ratios})
    for scenario, group in narrow.groupby("scenario", sort=False):
        lengths = {(values.normalise(i), values.normalise(o))
                   for i, o in zip(group["input_len"], group["output_len"], strict=True)}
        ratio = {values.normalise(r) for r in group["_ratio"]}
        one = next(iter(lengths)) if len(lengths) == 1 else None
        found[scenario] = (one if one is not None and None not in one else None,
                           next(iter(ratio)) if len(ratio) == 1 else None)
    return found


def _renames(run: dict[object, tuple[Lengths | None, object]],
             base: dict[object, tuple[Lengths | None, object]]) -> dict[object, object]:
    """Scenario → the baseline's name for it, leaving out renames that would merge two."""
    wanted = {s: target for s, (lengths, ratio) in run.items()
              if (target := _baseline_name(lengths, ratio, base)) is not None and target != s}
    kept = set(run) - set(wanted)
    targets = list(wanted.values())
    return {s: target for s, target in wanted.items() if target not in kept and targets.count(target) == 1}


def _baseline_name(lengths: Lengths | None, ratio: object,
                   base: dict[object, tuple[Lengths | None, object]]) -> object:
    if lengths is None:
        return None
    same = [name for name, (b_lengths, _) in base.items() if b_lengths == lengths]
    if len(same) > 1:
        same = [name for name in same if base[name][1] == ratio and ratio is not None]
    return same[0] if len(same) == 1 else None


def comparison_with_settings(frame: pd.DataFrame, baseline_run_id: int, run_ids: Sequence[int], lang: str,
                             settings: Settings, *, intended_to_differ: Collection[str] = frozenset(),
                             requests: RequestSamples | None = None,
                             keep_cold: Collection[tuple[object, object, object]] = (),
                             bootstrap_memos: MutableMapping[int, BootstrapMemo] | None = None,
                             timelines: RequestSamples | None = None) -> Comparison:
    """build_comparison with the saturation rule, the p99 SLA, the practical threshold and the
    one-number interactivity taken from the settings, as both the compare page and ``runner
    export`` use it."""
    built = build_comparison(frame, baseline_run_id, run_ids, lang, intended_to_differ=intended_to_differ,
                             gain_threshold_pct=settings.saturation_gain_pct,
                             sla_metric=settings.sla_metric if settings.sla_ms else None,
                             sla_threshold_ms=settings.sla_ms, requests=requests, keep_cold=keep_cold,
                             bootstrap_memos=bootstrap_memos,
                             practical_threshold_pct=settings.practical_threshold_pct, timelines=timelines)
    built.interactivity_target = settings.interactivity_target
    return built
