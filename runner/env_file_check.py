"""An env file read by systemd's rules (domain/core/env_file.py) and by bash, compared: the
host guide's file serves both the units and the cron backup, which sources it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from domain.core.env_file import systemd_env


def bash_env(path: Path, prefix: str = "BENCHDECK_") -> dict[str, str]:
    """The ``prefix`` variables a bash that runs ``set -a; . FILE`` has, from an empty
    environment (as the documented cron line sources the file).  RuntimeError when bash
    refuses the file."""
    script = 'set -a; . "$1" >/dev/null; env -0'
    done = subprocess.run(["/bin/bash", "-c", script, "bash", str(path)],  # noqa: S603 - fixed argv
                          capture_output=True, env={"PATH": os.defpath}, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"bash could not source {path}: {done.stderr.decode(errors='replace').strip()}")
    pairs = (item.split("=", 1) for item in done.stdout.decode(errors="replace").split("\0") if "=" in item)
    return {key: value for key, value in pairs if key.startswith(prefix)}


def disagreements(path: Path, prefix: str = "BENCHDECK_") -> list[tuple[str, str | None, str | None]]:
    """(name, as systemd reads it, as bash reads it) for each setting the two read differently."""
    by_systemd = {k: v for k, v in systemd_env(path.read_text(encoding="utf-8")).items() if k.startswith(prefix)}
    by_bash = bash_env(path, prefix)
    names = sorted(set(by_systemd) | set(by_bash))
    return [(n, by_systemd.get(n), by_bash.get(n)) for n in names if by_systemd.get(n) != by_bash.get(n)]
