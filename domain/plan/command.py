"""The engine command a run will execute, built the same way for the runner and the form.

The runner owns the model, ``--host`` (loopback) and ``--port`` (SGLang also gets
``--enable-metrics``, vLLM ``--served-model-name``: the engine adapter's ``owned_flags``);
everything else comes from the plan's ``server_args``, rendered flag by flag against the
chosen version's schema (exact names, never argparse's prefix matching).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from domain.engines import LOOPBACK, EngineAdapter, adapter_for
from domain.flags.argv import render_flags
from domain.flags.schema import SCHEMA_DIR
from domain.plan.run_plan import RunPlan
from domain.plan.topology import ServerSlot, Topology, router_concurrency_cap

PYTHON_PLACEHOLDER = "<sglang-python>"
APP_PYTHON_PLACEHOLDER = "<app-python>"
PORT_PLACEHOLDER = "<port>"


def server_argv(
    plan: RunPlan, *, python: str, port: int | str, version: str, tokenizer_dir: Path | None,
    app_python: str = sys.executable, slot: ServerSlot | None = None,
) -> list[str]:
    """The exact engine command, built from the plan's engine adapter (domain/engines/): the
    engine's launch module with ``python`` (its interpreter), or benchdeck's emulator speaking
    that engine with ``app_python``; then the flags the runner owns and the plan's flags in
    the engine's syntax, rendered against the version's schema.  ``slot`` is one server of a
    router or PD topology: its own flags and GPU count."""
    adapter = adapter_for(plan.engine)
    if plan.emulated:
        head = [app_python, "-m", "emulator", *adapter.emulator_args]
    else:
        head = [python, "-m", *adapter.launch_module]
    args = slot.server_args if slot else plan.server_args
    argv = [*head, *adapter.owned_flags(plan.model, str(port))]
    argv += render_flags(adapter.flags, args, adapter.flags.schema(version))
    if plan.emulated:
        argv += _emulator_flags(adapter, plan, version, tokenizer_dir, len(slot.gpu_ids) if slot else plan.gpu.count)
    return argv


def _emulator_flags(adapter: EngineAdapter, plan: RunPlan, version: str, tokenizer_dir: Path | None,
                    gpus: int) -> list[str]:
    """What the emulator is told that a real engine finds out itself: the GPUs it pretends
    to have, the engine version it speaks, where that version's schema is (the emulator
    ships none of its own) and the tokenizer it counts with."""
    argv = ["--emulate-gpu", plan.gpu.type, "--emulate-gpu-count", str(gpus),
            f"--emulate-{adapter.family}-version", version]
    if adapter.emulator_schema_dir:
        argv += ["--emulate-schema-dir", str(SCHEMA_DIR)]
    if tokenizer_dir is not None:
        argv += ["--emulate-tokenizer-dir", str(tokenizer_dir)]
    return argv


def worker_argv(
    plan: RunPlan, slot: ServerSlot, *, python: str, ports: Mapping[str, int | str], version: str,
    tokenizer_dir: Path | None, app_python: str = sys.executable,
) -> list[str]:
    """One server of a topology: its flags and GPU count, its HTTP port, and (router and
    PD topologies) its own NCCL port and, on a prefill server, its PD bootstrap port.  The
    runner passes the ports it picked; the build page passes placeholders."""
    if slot.role == "server":
        return server_argv(plan, python=python, port=ports["http"], version=version, tokenizer_dir=tokenizer_dir,
                           app_python=app_python)
    argv = server_argv(plan, python=python, port=ports["http"], version=version, tokenizer_dir=tokenizer_dir,
                       app_python=app_python, slot=slot)
    argv += ["--nccl-port", str(ports["nccl"])]
    if slot.role == "prefill":
        argv += ["--disaggregation-bootstrap-port", str(ports["bootstrap"])]
    return argv


def command_preview(plan: RunPlan, version: str) -> str:
    """The command as the runner will run it, with placeholders for what is only known at
    launch (the interpreter path on the runner host, and the free port it picks)."""
    python = PYTHON_PLACEHOLDER if plan.emulated else f"<{plan.engine}-python>"
    argv = server_argv(plan, python=python, port=PORT_PLACEHOLDER, version=version,
                       tokenizer_dir=None, app_python=APP_PYTHON_PLACEHOLDER)
    return shlex.join(argv).replace(f"'{python}'", python).replace(
        f"'{APP_PYTHON_PLACEHOLDER}'", APP_PYTHON_PLACEHOLDER).replace(f"'{PORT_PLACEHOLDER}'", PORT_PLACEHOLDER)


def router_argv(
    topology: Topology, *, python: str, port: int | str, metrics_port: int | str, sweep_max_concurrency: int,
    workers: list[str], prefill: list[tuple[str, int | str]], decode: list[str],
) -> list[str]:
    """The SGLang router's command (sglang-router 0.3.2 / smg 1.13.0 take the same flags).

    ``--max-concurrent-requests`` is always explicit: one router version defaults to 256
    with a queue of 100, which would silently cap a sweep.  The Prometheus port is picked
    like every other port, so two routers on one host never collide on 29000."""
    argv = [python, "-m", "sglang_router.launch_router", "--host", LOOPBACK, "--port", str(port),
            "--prometheus-host", LOOPBACK, "--prometheus-port", str(metrics_port),
            "--max-concurrent-requests", str(router_concurrency_cap(topology, sweep_max_concurrency)),
            "--log-level", "info"]
    if topology.kind == "pd":
        argv += ["--pd-disaggregation", "--prefill-policy", topology.policy, "--decode-policy", topology.decode_policy]
        for url, bootstrap in prefill:
            argv += ["--prefill", url, str(bootstrap)]
        for url in decode:
            argv += ["--decode", url]
    else:
        argv += ["--policy", topology.policy, "--worker-urls", *workers]
    return argv
