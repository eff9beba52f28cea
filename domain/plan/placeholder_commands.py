"""A topology's commands as the Build page shows them before launch: the router's and
one worker's per role, built by ``domain/plan/command.py`` exactly as the runner builds
them, with ``<placeholders>`` where only the launch knows the value (ports, interpreters)."""

from __future__ import annotations

import re
import shlex

from domain.plan.command import APP_PYTHON_PLACEHOLDER, LOOPBACK, PYTHON_PLACEHOLDER, router_argv, worker_argv
from domain.plan.run_plan import RunPlan
from domain.plan.topology import ServerSlot

ROUTER_PYTHON_PLACEHOLDER = "<router-python>"
_PLACEHOLDER_TOKEN = re.compile(r"[A-Za-z0-9_./:=,\-]*<[a-z0-9\-]+>[A-Za-z0-9_./:=,\-]*")


def shell_text(argv: list[str]) -> str:
    """A command line for reading: shell-quoted, except the <placeholders> filled in at launch."""
    return " ".join(arg if _PLACEHOLDER_TOKEN.fullmatch(arg) else shlex.quote(arg) for arg in argv)


def router_command(plan: RunPlan, slots: list[ServerSlot]) -> str:
    """The router's command, its workers named by their placeholder ports."""
    url = {slot.name: f"http://{LOOPBACK}:<{slot.name}-port>" for slot in slots}
    argv = router_argv(
        plan.topology, python=ROUTER_PYTHON_PLACEHOLDER, port="<router-port>", metrics_port="<metrics-port>",
        sweep_max_concurrency=max(plan.benchmark.concurrency),
        workers=[url[s.name] for s in slots if s.role == "replica"],
        prefill=[(url[s.name], f"<{s.name}-bootstrap>") for s in slots if s.role == "prefill"],
        decode=[url[s.name] for s in slots if s.role == "decode"],
    )
    return shell_text(argv)


def worker_command(plan: RunPlan, slot: ServerSlot, version: str) -> str:
    """One server's command with its GPUs in front; ValueError when its flags cannot be
    rendered for ``version`` (the checks say why)."""
    placeholders = {"http": f"<{slot.name}-port>", "nccl": f"<{slot.name}-nccl>",
                    "bootstrap": f"<{slot.name}-bootstrap>"}
    argv = worker_argv(plan, slot, python=PYTHON_PLACEHOLDER, ports=placeholders, version=version,
                       tokenizer_dir=None, app_python=APP_PYTHON_PLACEHOLDER)
    return "CUDA_VISIBLE_DEVICES=" + ",".join(map(str, slot.gpu_ids)) + " " + shell_text(argv)
