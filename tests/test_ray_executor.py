"""Several GPU hosts through Ray: a real local Ray cluster (a head and two worker nodes
offering different GPU types as benchdeck_gpu:<TYPE>), the real daemon with
BENCHDECK_EXECUTOR=ray, the emulator and the real bench_serving client on the nodes.

Every node is a separate raylet on this machine, started with ``ray start`` as on separate
hosts; killing one node's process group is that node dying.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import psutil
import pytest

from db import Store
from runner.ray_executor import node_runner_id
from tests.support.actors import admin, operator
from tests.support.ray_cluster import LocalRayCluster, local_ray_cluster
from tests.support.runner_harness import MARK, runner_env, small_plan, start_runner, wait_for

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

NODES = {"node-h100": {"benchdeck_gpu:H100": 2.0}, "node-h200": {"benchdeck_gpu:H200": 2.0}}


@pytest.fixture
def cluster(env: dict[str, str]) -> Iterator[tuple[LocalRayCluster, dict[str, str]]]:
    # Three raylets and their workers share 2 cores here: a lease of 30 s (production: 60)
    # instead of the harness's 4 s, so a starved heartbeat thread is not a lost runner.
    renv = runner_env(env, BENCHDECK_MAX_ATTEMPTS="1", BENCHDECK_LEASE_S="30", BENCHDECK_HEARTBEAT_S="1")
    with local_ray_cluster(NODES, renv) as c:
        yield c, dict(renv, BENCHDECK_EXECUTOR="ray", BENCHDECK_RAY_ADDRESS=c.address)


def _plan(name: str, gpu_type: str, prompts: str = "3x") -> object:
    return small_plan(name=name, gpu={"type": gpu_type, "count": 1},
                      benchmark={"scenarios": [{"name": "short", "input_len": 32, "output_len": 16}],
                                 "concurrency": [1, 2], "num_prompts": prompts, "warmup": "1x"})


def _node_of_each_run(store: Store) -> dict[int, str]:
    placed = store.audit_entries(reader=admin(), action="placed")
    return {int(e.run_id): json.loads(e.details)["node_id"] for e in placed}


def _engines_left(mark: str) -> list[str]:
    """Engine servers, routers and bench clients still alive from this test (Ray's own
    processes on the surviving nodes are not leftovers)."""
    left = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            if proc.environ().get(MARK) == mark and ("emulator" in cmd or "bench_driver" in cmd
                                                     or "sglang_router" in cmd or "bench_serving" in cmd):
                left.append(f"{proc.pid}: {cmd[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return left


def test_runs_go_to_the_node_with_their_gpu_type_and_a_cancel_reaches_the_remote_process_group(
    cluster: tuple[LocalRayCluster, dict[str, str]], store: Store
) -> None:
    """One cluster of three raylets for both, started once: four runs
    placed by GPU type land in DuckDB, then a cancel mid-benchmark stops a node's engine."""
    import ray

    ray_cluster, env = cluster
    runs = {store.submit_run(_plan(f"run-{i}", gpu), submitted_by=operator("t"))[0]: gpu
            for i, gpu in enumerate(["H100", "H200", "H100", "H200"])}
    daemon = start_runner(env, "--burst")
    assert daemon.wait(timeout=400) == 0
    nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes()}
    placed = _node_of_each_run(store)
    for run_id, gpu in runs.items():
        run = store.get_run(run_id)
        assert run.status == "succeeded", [(a.failure_kind, a.message) for a in store.attempts_of(run_id)]
        assert f"benchdeck_gpu:{gpu}" in nodes[placed[run_id]], "placed on a node of its GPU type"
        points = store.points_of(run_id)
        assert len(points) == 2 and all(p.completed == p.requested for p in points)
        assert all(json.loads(p.timing)["host"] for p in points)  # which host ran each point
    hosts = {r.id: r for r in store.list_runners()}
    for node in ray.nodes():
        if any(k.startswith("benchdeck_gpu:") for k in node["Resources"]):
            assert node_runner_id(node) in hosts
            assert json.loads(hosts[node_runner_id(node)].info)["reported"], "the node reported its own SGLang"
    assert _engines_left(env[MARK]) == []
    assert ray_cluster.nodes["node-h100"].proc.poll() is None  # nothing killed a node here
    _cancel_reaches_the_remote_process_group(env, store)


def _cancel_reaches_the_remote_process_group(env: dict[str, str], store: Store) -> None:
    run_id, _ = store.submit_run(_plan("long", "H200", prompts="60x"), submitted_by=operator("t"))
    daemon = start_runner(env, "--burst")
    wait_for(lambda: len(store.points_of(run_id)) >= 1, 240, "the run benchmarking")
    assert _engines_left(env[MARK]), "the engine runs on the node"
    store.cancel_run(run_id, actor=operator("t"))
    assert daemon.wait(timeout=120) == 0
    assert store.get_run(run_id).status == "cancelled"
    deadline = time.monotonic() + 20
    while _engines_left(env[MARK]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _engines_left(env[MARK]) == []


def test_a_node_dying_mid_run_is_runner_lost_and_the_other_runs_complete(
    cluster: tuple[LocalRayCluster, dict[str, str]], store: Store
) -> None:
    ray_cluster, env = cluster
    doomed, _ = store.submit_run(_plan("doomed", "H100", prompts="40x"), submitted_by=operator("t"))
    others = [store.submit_run(_plan(f"other-{i}", "H200"), submitted_by=operator("t"))[0] for i in range(2)]
    daemon = start_runner(env, "--burst")
    wait_for(lambda: len(store.points_of(doomed)) >= 1, 240, "the H100 run benchmarking")
    ray_cluster.kill_node("node-h100")
    assert daemon.wait(timeout=400) == 0
    [attempt] = store.attempts_of(doomed)
    assert (attempt.status, attempt.failure_kind) == ("failed", "runner_lost")
    assert store.get_run(doomed).status == "failed"
    for run_id in others:
        assert store.get_run(run_id).status == "succeeded"
    deadline = time.monotonic() + 20
    while _engines_left(env[MARK]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _engines_left(env[MARK]) == []
    dead = [r for r in store.list_runners() if r.id.startswith("ray:") and not r.healthy]
    assert dead and dead[0].unhealthy_reason.startswith("Ray node")
