"""A real local Ray cluster for tests: a head and worker nodes, each ``ray start --block``
in its own process group, with benchdeck's GPU-type resources (``benchdeck_gpu:<TYPE>``).

Every node is a separate raylet on this machine, as ``ray start`` makes them on separate
hosts; killing one node's group is a node dying.  The cluster gets its own short temp dir
(Ray's socket paths must stay under ~100 characters) and small object stores.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.app_server import ROOT, free_port

RAY = str(ROOT / ".venv" / "bin" / "ray")
OBJECT_STORE_BYTES = 80 * 1024 * 1024


@dataclass
class RayNode:
    name: str
    resources: dict[str, float]
    proc: subprocess.Popen[bytes]


@dataclass
class LocalRayCluster:
    address: str
    temp_dir: Path
    env: dict[str, str]
    nodes: dict[str, RayNode] = field(default_factory=dict)

    def kill_node(self, name: str) -> None:
        """A node dies: SIGKILL to its whole group (raylet, object store, its workers)."""
        node = self.nodes[name]
        os.killpg(node.proc.pid, signal.SIGKILL)
        node.proc.wait(timeout=30)

    def stop(self) -> None:
        # A warm stop, then a cold one: the cluster is thrown away with its temp dir, so
        # a node that has not gone in 5 s is killed (a graceful Ray stop on two busy cores
        # took ~30 s per test, all of it waiting).
        for node in reversed(list(self.nodes.values())):
            if node.proc.poll() is None:
                os.killpg(node.proc.pid, signal.SIGTERM)
        for node in self.nodes.values():
            try:
                node.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(node.proc.pid, signal.SIGKILL)
                node.proc.wait()


_HANDED_OUT: set[int] = set()


def _distinct_free_ports(count: int) -> list[int]:
    """Ports free now and never handed out before in this process (binding port 0 twice in
    a row can return the same port once the first socket is closed)."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            held.append(sock)
            port = int(sock.getsockname()[1])
            if port not in _HANDED_OUT:
                ports.append(port)
                _HANDED_OUT.add(port)
    finally:
        for sock in held:
            sock.close()
    return ports


def _own_ports() -> list[str]:
    """Every port a node opens, picked free and distinct: several raylets on one host would
    otherwise all try Ray's defaults (dashboard agent 52365, metrics export, ...)."""
    named = ["node-manager-port", "object-manager-port", "metrics-export-port", "dashboard-agent-listen-port",
             "dashboard-agent-grpc-port", "runtime-env-agent-port"]
    ports = _distinct_free_ports(len(named) + 12)
    workers = ",".join(str(p) for p in ports[len(named):])
    return [f"--{name}={port}" for name, port in zip(named, ports, strict=False)] + [f"--worker-port-list={workers}"]


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([RAY, "start", "--block", "--disable-usage-stats", "--num-cpus=2",
                                 f"--object-store-memory={OBJECT_STORE_BYTES}", "--node-ip-address=127.0.0.1",
                                 *_own_ports(), *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _wait_for_nodes(cluster: LocalRayCluster, count: int, timeout_s: float = 180) -> None:
    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [n for n in ray.nodes() if n.get("Alive")]
        if len(alive) >= count:
            return
        time.sleep(0.5)
    logs = "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-1500:] for p in cluster.temp_dir.glob("*.log"))
    raise RuntimeError(f"only {len(ray.nodes())} of {count} Ray nodes came up:\n{logs}")


@contextmanager
def local_ray_cluster(workers: dict[str, dict[str, float]], env: dict[str, str]) -> Iterator[LocalRayCluster]:
    """Head (no benchdeck resources: the daemon's host) plus one node per ``workers`` entry."""
    import ray

    temp_dir = Path(tempfile.mkdtemp(prefix="rb-", dir="/tmp"))
    port = free_port()
    env = dict(env, RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(ROOT))
    cluster = LocalRayCluster(address=f"127.0.0.1:{port}", temp_dir=temp_dir, env=env)
    try:
        cluster.nodes["head"] = RayNode("head", {}, _start(
            ["--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp_dir}",
             "--resources={}"], env, temp_dir / "head.log"))
        _wait_for_gcs(port)
        # The test process is a Ray driver only to watch the nodes come and go.
        ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
        for index, (name, resources) in enumerate(workers.items(), start=2):
            cluster.nodes[name] = RayNode(name, resources, _start(
                [f"--address={cluster.address}", f"--resources={json.dumps(resources)}"], env,
                temp_dir / f"{name}.log"))
            _wait_for_nodes(cluster, index)  # one at a time: nodes joining at once race for ports
        yield cluster
        shutil.rmtree(temp_dir, ignore_errors=True)  # kept when the cluster failed: its logs say why
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.stop()


def _wait_for_gcs(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise RuntimeError(f"the Ray head did not open port {port}")
