"""The engine command a run will execute, built the same way for the runner and the form.

The runner owns ``--model-path``, ``--host`` (loopback), ``--port`` and ``--enable-metrics``;
everything else comes from the plan's ``server_args``, rendered flag by flag against the
chosen version's schema (exact names, never argparse's prefix matching).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from domain.flags.argv import render_argv
from domain.flags.dialects.vllm import render_vllm_argv
from domain.flags.schema import SCHEMA_DIR
from domain.plan.run_plan import RunPlan
from domain.plan.topology import ServerSlot, Topology, router_concurrency_cap

LOOPBACK = "127.0.0.1"
RUNNER_FLAGS = ("--model-path", "--host", "--port", "--enable-metrics")
PYTHON_PLACEHOLDER = "<sglang-python>"
VLLM_PYTHON_PLACEHOLDER = "<vllm-python>"
APP_PYTHON_PLACEHOLDER = "<app-python>"
PORT_PLACEHOLDER = "<port>"


def server_argv(
    plan: RunPlan, *, python: str, port: int | str, version: str, tokenizer_dir: Path | None,
    app_python: str = sys.executable, slot: ServerSlot | None = None,
) -> list[str]:
    """The exact engine command; the emulator takes the same flags as SGLang.  ``slot``
    is one server of a router or PD topology: its own flags and GPU count."""
    if plan.is_vllm:
        return vllm_server_argv(plan, python=python, port=port, version=version, tokenizer_dir=tokenizer_dir,
                                app_python=app_python)
    if not plan.emulated:
        head = [python, "-m", "sglang.launch_server"]
    else:
        head = [app_python, "-m", "emulator"]
    argv = [*head, "--model-path", plan.model, "--host", LOOPBACK, "--port", str(port), "--enable-metrics"]
    argv += render_argv(slot.server_args if slot else plan.server_args, version)
    if plan.emulated:
        gpus = len(slot.gpu_ids) if slot else plan.gpu.count
        # The emulator ships no schema of its own: it is told where benchdeck's are.
        argv += ["--emulate-gpu", plan.gpu.type, "--emulate-gpu-count", str(gpus),
                 "--emulate-sglang-version", version, "--emulate-schema-dir", str(SCHEMA_DIR)]
        if tokenizer_dir is not None:
            argv += ["--emulate-tokenizer-dir", str(tokenizer_dir)]
    return argv


# What the runner owns on a vLLM command line; served-model-name is the model as the plan
# names it, so the client's --model and /metrics' model_name label are the plan's model.
VLLM_RUNNER_FLAGS = ("--model", "--host", "--port", "--served-model-name")


def vllm_server_argv(
    plan: RunPlan, *, python: str, port: int | str, version: str, tokenizer_dir: Path | None,
    app_python: str = sys.executable,
) -> list[str]:
    """A vLLM server: ``vllm serve``'s own entry module (``python -m vllm.entrypoints.cli.main
    serve``, with a ``__main__`` guard in 0.11.2 and 0.33.0 alike, where
    ``vllm.entrypoints.openai.api_server`` became a deprecated shim), or the emulator started as
    vLLM.  Flags are rendered against the vLLM version's schema (domain/flags/dialects/vllm.py)."""
    if not plan.emulated:
        head = [python, "-m", "vllm.entrypoints.cli.main", "serve"]
    else:
        head = [app_python, "-m", "emulator", "--emulate-engine", "vllm"]
    argv = [*head, "--model", plan.model, "--host", LOOPBACK, "--port", str(port),
            "--served-model-name", plan.model]
    argv += render_vllm_argv(plan.server_args, version)
    if plan.emulated:
        argv += ["--emulate-gpu", plan.gpu.type, "--emulate-gpu-count", str(plan.gpu.count),
                 "--emulate-vllm-version", version]
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
    python = VLLM_PYTHON_PLACEHOLDER if plan.is_vllm and not plan.emulated else PYTHON_PLACEHOLDER
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
