"""The engine command a run will execute, built the same way for the runner and the form.

The runner owns ``--model-path``, ``--host`` (loopback), ``--port`` and ``--enable-metrics``;
everything else comes from the plan's ``server_args``, rendered flag by flag against the
chosen version's schema (exact names, never argparse's prefix matching).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from domain.flags.argv import render_argv
from domain.plan import RunPlan

LOOPBACK = "127.0.0.1"
RUNNER_FLAGS = ("--model-path", "--host", "--port", "--enable-metrics")
PYTHON_PLACEHOLDER = "<sglang-python>"
APP_PYTHON_PLACEHOLDER = "<app-python>"
PORT_PLACEHOLDER = "<port>"


def server_argv(
    plan: RunPlan, *, python: str, port: int | str, version: str, tokenizer_dir: Path | None,
    app_python: str = sys.executable,
) -> list[str]:
    """The exact engine command; the emulator takes the same flags as SGLang."""
    if plan.engine == "sglang":
        head = [python, "-m", "sglang.launch_server"]
    else:
        head = [app_python, "-m", "runner.emulator"]
    argv = [*head, "--model-path", plan.model, "--host", LOOPBACK, "--port", str(port), "--enable-metrics"]
    argv += render_argv(plan.server_args, version)
    if plan.engine == "emulator":
        argv += ["--emulate-gpu", plan.gpu.type, "--emulate-gpu-count", str(plan.gpu.count),
                 "--emulate-sglang-version", version]
        if tokenizer_dir is not None:
            argv += ["--emulate-tokenizer-dir", str(tokenizer_dir)]
    return argv


def command_preview(plan: RunPlan, version: str) -> str:
    """The command as the runner will run it, with placeholders for what is only known at
    launch (the interpreter path on the runner host, and the free port it picks)."""
    argv = server_argv(plan, python=PYTHON_PLACEHOLDER, port=PORT_PLACEHOLDER, version=version,
                       tokenizer_dir=None, app_python=APP_PYTHON_PLACEHOLDER)
    return shlex.join(argv).replace(f"'{PYTHON_PLACEHOLDER}'", PYTHON_PLACEHOLDER).replace(
        f"'{APP_PYTHON_PLACEHOLDER}'", APP_PYTHON_PLACEHOLDER).replace(f"'{PORT_PLACEHOLDER}'", PORT_PLACEHOLDER)
