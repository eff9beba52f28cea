"""The runner's side of a plan's workload (domain/plan/workload.py): the client's
arguments, what the warm driver must load itself, and the file's hash for each point.

The client's own datasets and flags are used wherever the 0.5.23 client has them; the
driver (runner/sglang_side/bench_driver.py) adds trace replay and plain JSONL prompts.
``--cache-report`` asks the client to sum the server's own ``cached_tokens`` per request
(``cache_report`` in the record: the point's cache-hit rate as the server counted it).
"""

from __future__ import annotations

from typing import Any

from domain.plan.run_plan import BenchmarkPlan, RunPlan
from domain.plan.workload import driver_dataset, workload_label, workload_path
from domain.plan.workload_files import file_sha256, workload_file_problems

CACHE_REPORT_BACKENDS = frozenset({"sglang", "sglang-oai", "sglang-oai-chat"})


class WorkloadFileError(RuntimeError):
    """The workload's file changed since the plan was checked and is now unusable."""


def workload_argv(bench: BenchmarkPlan, known_flags: set[str]) -> list[str]:
    """The dataset arguments (the workload's, else the plan's dataset), and
    ``--cache-report`` wherever the client and the backend have it (random prompts too: a
    point that hit the cache where none was expected is then visible)."""
    argv = bench.workload.client_argv() if bench.workload is not None else ["--dataset-name", bench.dataset]
    if bench.backend in CACHE_REPORT_BACKENDS and "--cache-report" in known_flags:
        argv.append("--cache-report")
    return argv


def driver_request(plan: RunPlan) -> dict[str, Any] | None:
    """The rows the warm driver loads itself (None: the client's own dataset)."""
    workload = plan.benchmark.workload
    return driver_dataset(workload) if workload is not None else None


def checked_workload_label(plan: RunPlan) -> str | None:
    """The point's ``workload`` condition with the file's hash, after checking the file
    again (it may have changed since ``runner check``)."""
    workload = plan.benchmark.workload
    if workload is None:
        return None
    problems = workload_file_problems(workload)
    if problems:
        raise WorkloadFileError("; ".join(problem.text("en") for problem in problems[:5]))
    path = workload_path(workload)
    return workload_label(workload, file_sha256(path) if path is not None else None)
