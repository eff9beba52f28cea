"""What each Ray node has to offer: its GPUs, and the SGLang interpreter and version the
node itself reports.

The head's own SGLang (often none) says nothing about a node's, so every node runs
``report_this_node`` once (a small Ray task pinned to it): the interpreter its own
``BENCHDECK_SGLANG_PYTHON`` names and the schema ``runner/schema_sync.py`` extracts with it.
``RayRunner`` (runner/ray_executor.py) claims for one node at a time with that node's
version, so an ``engine: sglang`` run pinned to a version goes only to a node that has it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import ray
from ray._private.state import available_resources_per_node
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from domain.core.settings import Settings
from runner.schema_sync import SchemaError, installed_schema

RESOURCE_PREFIX = "benchdeck_gpu:"


@dataclass(frozen=True)
class NodeReport:
    """A node's SGLang as the node sees it; no version: the node serves emulator runs only."""

    sglang_python: str | None
    sglang_version: str | None
    schema: dict[str, Any] | None = None
    error: str | None = None  # an interpreter configured but unusable: why


@dataclass(frozen=True)
class Offer:
    """One claim the head can make now: up to ``gpu_count`` GPUs of one node."""

    node_id: str
    gpu_type: str
    gpu_count: int
    sglang_version: str | None


def report_this_node() -> NodeReport:
    """Runs on the node: its own environment decides, as for a local runner."""
    python = Settings().sglang_python
    if python is None:
        return NodeReport(None, None)
    try:
        schema = installed_schema(python)
    except SchemaError as exc:
        return NodeReport(str(python), None, error=str(exc))
    return NodeReport(str(python), str(schema["sglang_version"]), schema)


remote_report = ray.remote(report_this_node)


def pinned_to(node_id: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def _submit_report(node_id: str) -> Any:
    # No CPU asked: a node busy with runs still reports.
    return remote_report.options(num_cpus=0, max_retries=0, scheduling_strategy=pinned_to(node_id)).remote()


def _poll_report(ref: Any) -> NodeReport | None:
    """The report when the task has ended (a Ray error is raised), else None."""
    ready, _ = ray.wait([ref], timeout=0)
    return ray.get(ready[0]) if ready else None


class NodeReports:
    """Each node's report, asked once per node and kept; a node whose report failed (it
    died, or its worker did) is asked again at the next refresh."""

    def __init__(self, submit: Callable[[str], Any] = _submit_report,
                 poll: Callable[[Any], NodeReport | None] = _poll_report):
        self._submit, self._poll = submit, poll
        self.reports: dict[str, NodeReport] = {}
        self._pending: dict[str, Any] = {}

    def refresh(self, node_ids: Iterable[str]) -> bool:
        """Ask the nodes not asked yet, collect what has come back; True if a report arrived."""
        for node_id in node_ids:
            if node_id not in self.reports and node_id not in self._pending:
                self._pending[node_id] = self._submit(node_id)
        arrived = False
        for node_id, ref in list(self._pending.items()):
            try:
                report = self._poll(ref)
            except ray.exceptions.RayError:
                del self._pending[node_id]
                continue
            if report is not None:
                self.reports[node_id] = report
                del self._pending[node_id]
                arrived = True
        return arrived

    def version_of(self, node_id: str) -> str | None:
        """None until the node has reported: until then it is offered for emulator runs only."""
        report = self.reports.get(node_id)
        return report.sglang_version if report is not None else None

    def schema_of(self, node_id: str) -> dict[str, Any] | None:
        report = self.reports.get(node_id)
        return report.schema if report is not None else None


def gpu_types(resources: dict[str, float]) -> dict[str, float]:
    """The benchdeck GPUs in a Ray resource map, by type."""
    return {k[len(RESOURCE_PREFIX):]: v for k, v in resources.items() if k.startswith(RESOURCE_PREFIX)}


def free_by_node() -> dict[str, dict[str, float]]:
    """Free benchdeck GPUs per alive node, by type."""
    # Ray has no public per-node view of free resources; this developer API is the one.
    return {node_id: gpu_types(resources) for node_id, resources in available_resources_per_node().items()}


def offers(free_by_node: dict[str, dict[str, float]], version_of: Callable[[str], str | None]) -> list[Offer]:
    """Per GPU type and SGLang version, the node with the most free GPUs (at least one):
    one claim each per pass, so a run always has a node that can take it whole."""
    best: dict[tuple[str, str | None], Offer] = {}
    for node_id, free in free_by_node.items():
        version = version_of(node_id)
        for gpu_type, count in free.items():
            key = (gpu_type, version)
            if count >= 1 and (key not in best or count > best[key].gpu_count):
                best[key] = Offer(node_id, gpu_type, int(count), version)
    return list(best.values())
