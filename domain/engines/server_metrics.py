"""An engine server's ``/metrics`` as benchdeck's server metrics, for any engine family: which
families are kept under which benchdeck name, and how their series add up to one value for
the whole server.  Written once; each engine adapter (``domain/engines/``) brings its
:class:`MetricNames` (SGLang's in ``sglang_metrics.py``, vLLM's in ``vllm_metrics.py``), and
runner/telemetry.py reads a server's exposition with them.

The benchdeck names are the same for every family (``running_reqs``, ``token_usage``, the
token counters that ``runner.telemetry.summarise`` turns into ``*_delta`` rows), so the
sampler, the summaries and the compare page need not know which engine served.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

Labels = Mapping[str, str]


@dataclass(frozen=True)
class GaugeSeries:
    """One labelled series of a gauge (or a kept counter), as /metrics exposes it."""

    name: str  # the engine's name, e.g. sglang:num_running_reqs
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class ServerMetric:
    """How one exposed family becomes one of benchdeck's server metrics."""

    metric: str  # benchdeck's name
    counter: bool = False  # exposed as ``<family>_total``; summarised as its increase
    per_replica: bool = True  # one series per replica kept (its other ranks repeat it); False: every series adds up
    ratio: bool = False  # a fraction of each replica's own pool: averaged over replicas, not summed
    breakdown: str = ""  # a series with this label set is a breakdown of the total beside it: dropped
    split: tuple[str, Mapping[str, str]] | None = None  # (label, its value -> metric); other values dropped

    def metric_of(self, labels: Labels) -> str | None:
        """The benchdeck metric a series of this family counts towards, or None to drop it."""
        if self.breakdown and labels.get(self.breakdown, ""):
            return None
        if self.split is not None:
            label, names = self.split
            return names.get(labels.get(label, ""))
        return self.metric


def _first_kept(labels: Labels) -> tuple[int, ...]:
    return ()  # every series of a replica ranks alike: the first one read is kept


@dataclass(frozen=True)
class MetricNames:
    """One engine family's /metrics: the kept families by exposed name (a counter's with
    ``_total``), which replica a series describes, and which of a replica's series is kept
    (the lowest ``rank``; the others repeat it)."""

    kept: Mapping[str, ServerMetric] = field(default_factory=dict)
    replica: Callable[[Labels], tuple[str, ...]] = lambda labels: ()
    rank: Callable[[Labels], tuple[int, ...]] = _first_kept

    def is_counter(self, name: str) -> bool:
        """Whether the exposed family ``name`` is a counter (its TYPE line may lack ``_total``)."""
        return self.kept[name].counter

    def totals(self, series: Iterable[GaugeSeries]) -> dict[str, float]:
        """The kept metrics for the whole server: per metric, one series per replica (every
        series where the family is not per replica), summed; ratios averaged."""
        chosen: dict[tuple[object, ...], GaugeSeries] = {}
        for index, s in enumerate(series):
            rule = self.kept.get(s.name)
            metric = None if rule is None else rule.metric_of(s.labels)
            if rule is None or metric is None:
                continue
            key: tuple[object, ...] = (metric, *self.replica(s.labels)) if rule.per_replica else (metric, index)
            held = chosen.get(key)
            if held is None or self.rank(s.labels) < self.rank(held.labels):
                chosen[key] = s
        values: dict[str, list[float]] = {}
        for key, s in chosen.items():
            values.setdefault(str(key[0]), []).append(s.value)
        ratios = {rule.metric for rule in self.kept.values() if rule.ratio}
        return {metric: (sum(v) / len(v) if metric in ratios else sum(v)) for metric, v in values.items()}


NO_METRICS = MetricNames()  # a family whose /metrics benchdeck does not read
