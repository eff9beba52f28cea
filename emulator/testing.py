"""Start and stop an emulator as a real child process (for tests and demos).

Callers pass the emulator's arguments whole, including ``--emulate-schema-dir`` and
``--emulate-tokenizer-dir``: the emulator is told where things are, it never looks.

The child runs in its own session (``start_new_session=True``, never through a shell) so
that :meth:`EmulatorProcess.stop` can signal its whole process group, SIGTERM first and
SIGKILL after a grace period, and nothing is left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# The child runs ``-m emulator`` from the folder that holds this package, nothing else.
PACKAGE_PARENT = Path(__file__).resolve().parents[1]


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now (another process may still take it before the child binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """GET ``url``; the status code, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310  # loopback http only
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return None


@dataclass
class EmulatorProcess:
    proc: subprocess.Popen[bytes]
    host: str
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_for(self, path: str, status: int = 200, timeout: float = 30.0) -> None:
        """Poll ``path`` until it answers ``status``; raise with the log tail if the child dies."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if http_status(self.base_url + path, timeout=1.0) == status:
                return
            if not self.alive():
                raise RuntimeError(f"emulator exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            time.sleep(0.05)
        raise TimeoutError(f"{path} never answered {status} within {timeout} s:\n{self.log()[-3000:]}")

    def wait_ready(self, timeout: float = 30.0) -> None:
        self.wait_for("/health", 200, timeout)

    def wait_exit(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout=timeout)

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signum)

    def stop(self, grace_s: float = 5.0) -> int | None:
        """SIGTERM the process group, then SIGKILL it after ``grace_s``; returns the exit status."""
        if self.alive():
            self.signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        self.signal_group(signal.SIGKILL)  # also catches any straggler left in the group
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace_s)
        return self.proc.returncode


def start_emulator(args: Sequence[str], log_path: Path, *, host: str = "127.0.0.1", port: int | None = None,
                   env: Mapping[str, str] | None = None, python: str = sys.executable) -> EmulatorProcess:
    """Launch ``python -m emulator --host H --port P ARGS`` with its output in ``log_path``."""
    port = port or free_port(host)
    command = [python, "-m", "emulator", "--host", host, "--port", str(port), *args]
    child_env = {**os.environ, **(env or {})}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(  # noqa: S603  # fixed argv, no shell
            command, cwd=PACKAGE_PARENT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=child_env, start_new_session=True,
        )
    return EmulatorProcess(proc=proc, host=host, port=port, log_path=log_path)


@contextlib.contextmanager
def running_emulator(args: Sequence[str], log_path: Path, *, ready: bool = True, timeout: float = 30.0,
                     env: Mapping[str, str] | None = None) -> Iterator[EmulatorProcess]:
    """Start an emulator, optionally wait for ``/health`` 200, and always stop its group."""
    emulator = start_emulator(args, log_path, env=env)
    try:
        if ready:
            emulator.wait_ready(timeout)
        yield emulator
    finally:
        emulator.stop()
