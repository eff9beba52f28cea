"""Topologies: the layout rules (pure), and whole deployments of emulated workers behind
the real sglang-router 0.3.2 (router + replicas, and PD: prefill + decode)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
import requests
from pydantic import ValidationError

from domain.core.settings import Settings, get_settings
from domain.plan.command import router_argv
from domain.plan.run_plan import RunPlan
from domain.plan.topology import ServerSlot, Topology, layout
from runner import topology as deploy_mod
from tests.support.runner_harness import MARK, assert_nothing_left, small_plan

ROUTER_PYTHON = Settings().router_python


def _plan(topology: dict[str, object], gpus: int = 4, **overrides: object) -> RunPlan:
    return small_plan(gpu={"type": "H200", "count": gpus}, topology=topology, **overrides)


# --- layout ------------------------------------------------------------------------------------


def test_pd_layout_packs_gpus_in_order_and_sets_each_role() -> None:
    plan = _plan({"kind": "pd", "prefill": {"count": 2, "gpus_per_server": 1,
                                            "server_args": {"disaggregation-transfer-backend": "mooncake"}},
                  "decode": {"count": 1, "gpus_per_server": 2}})
    slots = layout(plan.topology, plan.server_args, plan.gpu.count)
    assert [(s.name, s.gpu_ids, s.server_args["disaggregation-mode"]) for s in slots] == [
        ("prefill-0", (0,), "prefill"), ("prefill-1", (1,), "prefill"), ("decode-0", (2, 3), "decode")]
    assert slots[0].server_args["disaggregation-transfer-backend"] == "mooncake"
    assert "disaggregation-transfer-backend" not in slots[2].server_args
    assert plan.topology.label() == "pd 2P1D (P 2×1GPU, D 1×2GPU)"


@pytest.mark.parametrize(
    ("topology", "gpus", "message"),
    [
        ({"kind": "pd", "prefill": {"count": 2, "gpus_per_server": 2}, "decode": {"count": 1, "gpus_per_server": 2}},
         4, "GPU 4 does not exist"),
        ({"kind": "pd", "prefill": {"gpu_ids": [[0]]}, "decode": {"gpu_ids": [[0]]}}, 2,
         "GPU 0 is already used by prefill-0"),
        ({"kind": "router", "replicas": {"count": 2, "gpus_per_server": 1, "server_args": {"tp-size": 2}}}, 4,
         "needs 2 GPUs, it is given 1"),
        ({"kind": "pd", "prefill": {"server_args": {"disaggregation-mode": "decode"}}, "decode": {}}, 2,
         "set by the topology"),
        ({"kind": "pd", "prefill": {}}, 2, "pd topology needs decode"),
        ({"kind": "aggregated", "replicas": {}}, 2, "aggregated topology takes no replicas"),
        ({"kind": "router", "replicas": {"count": 2, "gpu_ids": [[0]]}}, 2, "gpu_ids lists 1 servers"),
    ],
)
def test_impossible_layouts_are_refused_with_the_reason(topology: dict[str, object], gpus: int, message: str) -> None:
    data = small_plan().model_dump(mode="json") | {"gpu": {"type": "H200", "count": gpus}, "topology": topology}
    with pytest.raises(ValidationError, match=message):
        RunPlan.model_validate(data)


def test_old_plans_and_aggregated_configuration_ids_are_unchanged() -> None:
    old = _plan("aggregated", 1)
    assert old.topology == Topology()
    assert old.configuration_snapshot()["topology"] == {"kind": "aggregated"}


def test_router_cap_is_explicit_and_follows_the_sweep() -> None:
    plan = _plan({"kind": "router", "replicas": {"count": 2}}, 2, benchmark={
        "scenarios": [{"name": "s", "input_len": 8, "output_len": 8}], "concurrency": [1, 300]})
    argv = router_argv(plan.topology, python="py", port=1, metrics_port=2, sweep_max_concurrency=300,
                       workers=["http://a", "http://b"], prefill=[], decode=[])
    assert argv[argv.index("--max-concurrent-requests") + 1] == "300"
    assert argv[argv.index("--policy") + 1] == "cache_aware"


# --- real deployments ----------------------------------------------------------------------------


def _launcher(plan: RunPlan, tmp_path: Path, mark: str, launched: list[str]) -> deploy_mod.Launcher:
    env = dict(os.environ, **{MARK: mark})
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return deploy_mod.Launcher(
        plan=plan, version="0.5.23", sglang_python="", router_python=str(ROUTER_PYTHON),
        tokenizer_dir=get_settings().tokenizer_dir,  # the emulator is told its tokenizer, as the runner tells it
        attempt_dir=tmp_path, env=env, ports=deploy_mod.PortPicker(32000, 32999),
        on_launch=lambda m: launched.append(f"{m.name}:{json.dumps(m.ports, sort_keys=True)}"),
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "topology",
    [
        {"kind": "pd", "prefill": {"count": 2}, "decode": {"count": 1}},
        {"kind": "router", "replicas": {"count": 2}, "policy": "round_robin"},
    ],
    ids=["2P1D", "router-2"],
)
def test_a_topology_starts_in_order_serves_through_the_router_and_stops_as_one(
    topology: dict[str, object], tmp_path: Path
) -> None:
    plan = _plan(topology, 4, server_args={"max-running-requests": 8})
    mark, launched = uuid.uuid4().hex, list[str]()
    deployment = deploy_mod.Deployment(plan.topology.kind)
    try:
        ready = deploy_mod.deploy(_launcher(plan, tmp_path, mark, launched), deployment, budget_s=90,
                                  cancelled=lambda: False)
        names = [m.name for m in deployment.members]
        assert names[-1] == "router" and set(ready) == set(names)
        ports = [p for m in deployment.members for p in m.ports.values()]
        assert len(ports) == len(set(ports)), "every port distinct"
        seen = deploy_mod.router_workers(deployment.base_url)
        assert len(seen) == len(deployment.workers) and all(w["is_healthy"] for w in seen)
        if plan.topology.kind == "pd":
            assert sorted(w["worker_type"] for w in seen) == ["decode", "prefill", "prefill"]
            assert all(m.server.argv.count("--disaggregation-mode") == 1 for m in deployment.workers)
        for _ in range(4):
            reply = requests.post(f"{deployment.base_url}/generate", json={
                "text": "hello there", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}}, timeout=30)
            assert reply.status_code == 200 and reply.json()["meta_info"]["completion_tokens"] == 5
        router_argv_used = deployment.members[-1].server.argv
        assert router_argv_used[router_argv_used.index("--max-concurrent-requests") + 1] == "2"
    finally:
        still_taken = deployment.stop(5)
    assert still_taken == []
    assert_nothing_left(mark)


@pytest.mark.slow
def test_a_worker_that_dies_in_start_up_fails_the_deployment_and_leaves_nothing(tmp_path: Path) -> None:
    plan = _plan({"kind": "pd", "prefill": {}, "decode": {}}, 2)
    mark, launched = uuid.uuid4().hex, list[str]()
    launcher = _launcher(plan, tmp_path, mark, launched)
    plain_argv = launcher.worker_argv

    def prefill_crashes(slot: ServerSlot, ports: dict[str, int]) -> list[str]:
        extra = ["--emulate-fault", "crash-during-warmup"] if slot.role == "prefill" else []
        return plain_argv(slot, ports) + extra

    launcher.worker_argv = prefill_crashes  # type: ignore[method-assign]  # one member gets the fault
    deployment = deploy_mod.Deployment("pd")
    try:
        with pytest.raises(deploy_mod.server_process.AttemptFailure, match="prefill-0"):
            deploy_mod.deploy(launcher, deployment, budget_s=60, cancelled=lambda: False)
    finally:
        deployment.stop(5)
    assert len(launched) == 2  # both workers started; the router never did
    assert_nothing_left(mark)
