"""What the Build page shows of a topology, as plain functions: the Graphviz drawing and
the server table (``domain/plan/topology_drawing.py``), and the commands with launch-time
placeholders (``domain/plan/placeholder_commands.py``)."""

from __future__ import annotations

from typing import Any

from domain.plan.placeholder_commands import router_command, shell_text, worker_command
from domain.plan.presets import PRESET_SGLANG_VERSION
from domain.plan.run_plan import RunPlan
from domain.plan.topology import Topology, layout, layout_problems
from domain.plan.topology_drawing import (
    CONFLICT_COLOURS,
    gpus_in_use,
    role_name,
    server_rows,
    slots_named_in,
    topology_dot,
)
from domain.plan.transfer_backend import kv_backend
from tests.support.runner_harness import small_plan

PD: dict[str, Any] = {"kind": "pd", "prefill": {"count": 2, "gpus_per_server": 1,
                                                "server_args": {"disaggregation-transfer-backend": "nixl"}},
                      "decode": {"count": 1, "gpus_per_server": 2}}


def _plan(topology: dict[str, Any], gpus: int) -> RunPlan:
    return small_plan(gpu={"type": "H200", "count": gpus}, topology=topology)


def test_pd_drawing_has_router_clusters_gpus_ports_and_the_kv_edge() -> None:
    topology = Topology.model_validate(PD)
    slots = layout(topology, {}, 4)
    dot = topology_dot(topology, slots, set(), 64, "en")
    assert dot.startswith("digraph topology {") and dot.endswith("}")
    for piece in ("client -> router", 'router -> "prefill-1"', 'router -> "decode-0"', "subgraph cluster_prefill",
                  'label="Prefill servers"', "--prefill-policy cache_aware\\n--decode-policy round_robin",
                  "--max-concurrent-requests 64", "GPU 2,3", "bootstrap <port>", "NCCL <port>",
                  '"prefill-1":e -> "decode-0":e', 'label="KV · nixl"'):
        assert piece in dot, piece
    assert CONFLICT_COLOURS[1] not in dot


def test_one_server_is_drawn_without_router_or_cluster_and_runs_of_gpus_are_ranges() -> None:
    plan = _plan({"kind": "aggregated"}, 4)
    plan = plan.model_copy(update={"server_args": {**plan.server_args, "tp-size": 4}})
    slots = layout(plan.topology, plan.server_args, 4)
    dot = topology_dot(plan.topology, slots, set(), None, "ja")
    assert "router" not in dot and "subgraph" not in dot and "GPU 0–3" in dot
    assert 'label="ベンチマーククライアント"' in dot and 'client -> "server"' in dot


def test_servers_named_by_layout_problems_are_drawn_red() -> None:
    topology = Topology.model_validate({**PD, "prefill": {"count": 1, "gpus_per_server": 1, "gpu_ids": [[0]]},
                                        "decode": {"count": 1, "gpus_per_server": 1, "gpu_ids": [[0]]}})
    slots = layout(topology, {}, 2)
    bad = slots_named_in(slots, layout_problems(topology, {}, 2))
    assert bad == {"decode-0"}
    dot = topology_dot(topology, slots, bad, None, "en")
    assert "--max-concurrent-requests ?" in dot
    decode_line = next(line for line in dot.splitlines() if line.lstrip().startswith('"decode-0" ['))
    assert CONFLICT_COLOURS[1] in decode_line and "penwidth=2" in decode_line


def test_server_table_lists_only_the_flags_that_differ() -> None:
    topology = Topology.model_validate(PD)
    slots = layout(topology, {"mem-fraction-static": 0.8}, 4)
    rows = server_rows(slots, {"mem-fraction-static": 0.8}, "en")
    assert [row["Server"] for row in rows] == ["prefill-0", "prefill-1", "decode-0"]
    assert rows[0]["Role"] == "prefill" and rows[2]["GPUs"] == "2,3"
    assert rows[0]["Flags that differ from the plan-wide flags"] == (
        "--disaggregation-transfer-backend nixl  --disaggregation-mode prefill")
    assert rows[2]["Flags that differ from the plan-wide flags"] == "--disaggregation-mode decode"
    assert gpus_in_use(slots) == 4
    assert role_name("decode", "ja") == "デコード"
    assert kv_backend({}) == "mooncake" and kv_backend({"disaggregation-transfer-backend": "nixl"}) == "nixl"


def test_commands_keep_placeholders_unquoted_and_quote_the_rest() -> None:
    assert shell_text(["<sglang-python>", "-m", "x y", "--url", "http://127.0.0.1:<decode-0-port>"]) == (
        "<sglang-python> -m 'x y' --url http://127.0.0.1:<decode-0-port>")
    plan = _plan(PD, 4)
    slots = layout(plan.topology, plan.server_args, 4)
    router = router_command(plan, slots)
    assert router.startswith("<router-python> -m sglang_router.launch_router")
    assert "--prefill http://127.0.0.1:<prefill-1-port> <prefill-1-bootstrap>" in router
    assert "--decode http://127.0.0.1:<decode-0-port>" in router
    worker = worker_command(plan, slots[2], PRESET_SGLANG_VERSION)
    assert worker.startswith("CUDA_VISIBLE_DEVICES=2,3 ") and "--nccl-port <decode-0-nccl>" in worker
