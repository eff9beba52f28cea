"""PD and attention DP on a real host: the ports SGLang derives from ``--port`` are
reserved with it, and a PD run whose KV transfer backend the SGLang environment cannot
import is refused before launch (warned about in the plan checks)."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from domain.core.settings import get_settings
from domain.core.states import FailureKind
from domain.flags.policy import load_policy
from domain.plan.checks import check_plan, default_backend_warnings
from domain.plan.run_plan import RunPlan
from domain.plan.topology import layout
from domain.plan.transfer_backend import role_backends
from runner import backend_probe
from runner import topology as topo
from runner.attempt import AttemptExecution
from runner.server_process import AttemptFailure
from tests.support.runner_harness import small_plan

ATTN_DP = {"attn-dp-size": 2, "tp-size": 2}
PD = {"kind": "pd", "prefill": {}, "decode": {}}


# --- derived ports ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "derived"),
    [
        (ATTN_DP, (30013, 30233, 30234, 30235, 30236, 30237, 30238, 30239)),
        ({"dp-size": 2, "enable-dp-attention": True}, (30013, 30233, *range(30234, 30240))),
        ({"dp-size": 2}, ()),  # replicas talk over IPC
        ({"enable-dp-attention": True}, ()),  # one attention group: SGLang leaves attention DP off
        (ATTN_DP | {"dist-init-addr": "10.0.0.1:5000"}, ()),  # derived from the address, not --port
        (ATTN_DP | {"nnodes": 2}, ()),
    ],
)
def test_ports_derived_from_port_follow_the_flags(args: dict[str, object], derived: tuple[int, ...]) -> None:
    assert topo.dp_attention_ports(30000, args) == derived


def test_derived_ports_go_below_port_near_the_top_of_the_range() -> None:
    assert topo.dp_attention_ports(65400, ATTN_DP) == (65413, 65167, *range(65168, 65174))
    assert topo.dp_attention_ports(65300, ATTN_DP) == (65313, 65533, *range(65526, 65532))


@pytest.fixture
def two_free_ports() -> Iterator[int]:
    """The low end of two adjacent free ports, with their derived ports free too."""
    for low in range(42000, 43000, 7):
        wanted = [low, low + 1, *topo.dp_attention_ports(low, ATTN_DP), *topo.dp_attention_ports(low + 1, ATTN_DP)]
        if all(topo.port_is_free(p) for p in wanted):
            yield low
            return
    pytest.skip("no free ports in 42000-42999")


def _lowest_first(low: int, high: int, *, exclude: set[int]) -> int:
    free = [port for port in range(low, high + 1) if port not in exclude]
    if not free:
        raise RuntimeError(f"no free port in {low}-{high}")
    return free[0]


def test_a_port_whose_derived_port_is_taken_is_not_picked(two_free_ports: int) -> None:
    low = two_free_ports
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", low + 233))  # what SGLang would bind for --port low
        holder.listen()
        picker = topo.PortPicker(low, low + 1)
        assert picker(lambda port: topo.dp_attention_ports(port, ATTN_DP)) == low + 1
    assert set(topo.dp_attention_ports(low + 1, ATTN_DP)) <= picker.taken


def test_a_port_whose_derived_port_was_handed_out_is_not_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topo, "pick_free_port", _lowest_first)
    monkeypatch.setattr(topo, "port_is_free", lambda port: True)
    picker = topo.PortPicker(30000, 30001)
    picker.taken.add(30233)  # handed out earlier (say, to another server)
    assert picker(lambda port: topo.dp_attention_ports(port, ATTN_DP)) == 30001


def test_two_servers_under_attention_dp_get_ranges_that_do_not_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    """30000 holds 30233-30239; 30001-30006 would derive into that block, 30007 starts above it."""
    monkeypatch.setattr(topo, "pick_free_port", _lowest_first)
    monkeypatch.setattr(topo, "port_is_free", lambda port: True)
    picker = topo.PortPicker(30000, 30999)
    derived = lambda port: topo.dp_attention_ports(port, ATTN_DP)  # noqa: E731
    assert [picker(derived), picker(derived)] == [30000, 30007]
    assert not set(derived(30000)) & set(derived(30007))


def test_derived_ports_are_never_handed_out_afterwards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topo, "pick_free_port", _lowest_first)
    monkeypatch.setattr(topo, "port_is_free", lambda port: True)
    picker = topo.PortPicker(30000, 30013)  # 30013 is 30000's handshake port
    assert picker(lambda port: topo.dp_attention_ports(port, ATTN_DP)) == 30000
    assert [picker() for _ in range(12)] == list(range(30001, 30013))
    with pytest.raises(topo.server_process.AttemptFailure, match="no free port"):
        picker()


def test_no_port_left_is_a_host_failure(two_free_ports: int) -> None:
    low = two_free_ports
    picker = topo.PortPicker(low, low)
    picker.taken.add(low + 233)
    with pytest.raises(topo.server_process.AttemptFailure, match="no free port"):
        picker(lambda port: topo.dp_attention_ports(port, ATTN_DP))


def test_a_worker_under_attention_dp_reserves_its_derived_ports(tmp_path: Path, two_free_ports: int,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    plan = small_plan(gpu={"type": "H200", "count": 2}, server_args=ATTN_DP)
    launcher = topo.Launcher(plan=plan, version="0.5.23", sglang_python="", router_python="", tokenizer_dir=None,
                             attempt_dir=tmp_path, env={}, ports=topo.PortPicker(two_free_ports, two_free_ports + 1),
                             on_launch=lambda member: None)
    monkeypatch.setattr(launcher, "_launch", lambda *args: None)  # no process: only the ports matter
    [slot] = layout(plan.topology, plan.server_args, plan.gpu.count)
    member = launcher.launch_worker(slot)
    assert set(topo.dp_attention_ports(member.ports["http"], ATTN_DP)) <= launcher.ports.taken


# --- the transfer backend --------------------------------------------------------------------


def _pd_plan(engine: str = "sglang", prefill_args: dict[str, object] | None = None,
             decode_args: dict[str, object] | None = None) -> RunPlan:
    topology = {"kind": "pd", "prefill": {"server_args": prefill_args or {}},
                "decode": {"server_args": decode_args or {}}}
    return small_plan(engine=engine, gpu={"type": "H200", "count": 2}, topology=topology)


def test_each_role_says_its_backend_and_whether_the_plan_named_it() -> None:
    plan = _pd_plan(prefill_args={"disaggregation-transfer-backend": "nixl"})
    assert [(r.role, r.backend, r.named, r.needs) for r in role_backends(plan)] == [
        ("prefill", "nixl", True, ("nixl", "nixl")),
        ("decode", "mooncake", False, ("mooncake", "mooncake-transfer-engine"))]
    assert role_backends(small_plan()) == []


def test_the_probe_asks_the_interpreter_and_caches_the_answer() -> None:
    backend_probe.module_installed.cache_clear()
    assert backend_probe.module_installed(sys.executable, "json") is True
    assert backend_probe.module_installed(sys.executable, "no_such_module_here") is False
    assert backend_probe.module_installed("/nonexistent/python", "json") is None
    assert backend_probe.module_installed.cache_info().currsize == 3


def test_a_default_backend_the_environment_lacks_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_probe, "module_installed", lambda python, module: False)
    message = backend_probe.missing_backend(_pd_plan(), "/envs/sglang/bin/python")
    assert message is not None
    assert message.startswith("prefill: --disaggregation-transfer-backend is unset")
    assert "mooncake-transfer-engine" in message and "/envs/sglang/bin/python" in message


def test_a_named_backend_the_environment_lacks_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def installed(python: str, module: str) -> bool:
        asked.append(module)
        return module != "nixl"

    monkeypatch.setattr(backend_probe, "module_installed", installed)
    plan = _pd_plan(prefill_args={"disaggregation-transfer-backend": "fake"},
                    decode_args={"disaggregation-transfer-backend": "nixl"})
    message = backend_probe.missing_backend(plan, "py")
    assert message is not None
    assert message.startswith("decode: the KV transfer backend nixl needs the Python package nixl")
    assert asked == ["nixl"]  # fake needs nothing


@pytest.mark.parametrize(
    ("plan", "python"),
    [(_pd_plan(engine="emulator"), "py"),  # the emulator accepts every backend
     (_pd_plan(), ""),  # no SGLang here: the claim never happens
     (small_plan(engine="sglang"), "py")],  # not PD
)
def test_nothing_to_refuse(monkeypatch: pytest.MonkeyPatch, plan: RunPlan, python: str) -> None:
    monkeypatch.setattr(backend_probe, "module_installed", lambda python, module: False)
    assert backend_probe.missing_backend(plan, python) is None


def test_an_interpreter_that_cannot_be_asked_refuses_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_probe, "module_installed", lambda python, module: None)
    assert backend_probe.missing_backend(_pd_plan(), "py") is None


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_the_checks_warn_when_a_pd_plan_leaves_the_backend_to_the_default(lang: str) -> None:
    [warning] = default_backend_warnings(_pd_plan(decode_args={"disaggregation-transfer-backend": "nixl"}), lang)
    assert "prefill" in warning and "decode" not in warning and "mooncake-transfer-engine" in warning
    assert warning in check_plan(_pd_plan(decode_args={"disaggregation-transfer-backend": "nixl"}),
                                 get_settings(), lang).warnings


def test_the_checks_stay_quiet_when_every_role_names_its_backend_or_it_is_emulated() -> None:
    named = {"disaggregation-transfer-backend": "nixl"}
    assert default_backend_warnings(_pd_plan(prefill_args=named, decode_args=named), "en") == []
    assert default_backend_warnings(small_plan(engine="sglang", server_args=named | {"tp-size": 1},
                                               gpu={"type": "H200", "count": 2}, topology=PD), "en") == []
    assert default_backend_warnings(_pd_plan(engine="emulator"), "en") == []


def test_the_runner_refuses_the_attempt_before_launch_as_bad_args(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_probe, "module_installed", lambda python, module: False)
    settings = get_settings().model_copy(update={"sglang_python": Path("/envs/sglang/bin/python")})
    execution = AttemptExecution(
        ctx=SimpleNamespace(settings=settings),  # only the settings are read here
        nvml=None, nvml_reason=None, host_info={}, sglang_version="0.5.23",
        policy=load_policy(settings.flag_policy_file), policy_sha256=None,
        host_state=None,
    )
    with pytest.raises(AttemptFailure, match="mooncake-transfer-engine") as refused:
        execution._validate_at_the_edge(_pd_plan(), "0.5.23")
    assert refused.value.kind == FailureKind.BAD_ARGS
