"""How a topology reads on the Build page: its Graphviz drawing (client → router →
servers, each with its GPUs and ports), the table of servers and the flags in which each
differs from the plan-wide ones, and the roles' names in the page's language."""

from __future__ import annotations

from typing import Any

from domain.core.i18n import t
from domain.plan.topology import ServerSlot, Topology
from domain.plan.transfer_backend import kv_backend

CONFLICT_COLOURS = ("#fde2e1", "#d93025")  # fill, border of a server the layout problems name
_ROLE_COLOURS = {"server": ("#f4f6fa", "#7a869a"), "replica": ("#f4f6fa", "#7a869a"),
                 "prefill": ("#e4eefc", "#4a78c2"), "decode": ("#e3f4e6", "#3f9a55")}
_HEADER = [
    "digraph topology {",
    '  rankdir=LR; bgcolor="transparent"; compound=true; nodesep=0.3; ranksep=0.55;',
    '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, margin="0.15,0.06"];',
    '  edge [color="#7a869a", fontname="Helvetica", fontsize=9, fontcolor="#555555"];',
]


def role_name(role: str, lang: str) -> str:
    return t(f"build.topo.role_{role}", lang)


def slots_named_in(slots: list[ServerSlot], issues: list[str]) -> set[str]:
    """The servers that layout problems start with (``"decode-0: GPU 0 is …"``)."""
    return {slot.name for slot in slots if any(issue.startswith(f"{slot.name}:") for issue in issues)}


def _dot_text(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _gpu_text(ids: tuple[int, ...]) -> str:
    """``GPU 0–3`` for a run of three or more, else the ids listed."""
    if len(ids) > 2 and list(ids) == list(range(ids[0], ids[-1] + 1)):
        return f"GPU {ids[0]}–{ids[-1]}"
    return "GPU " + ",".join(map(str, ids))


def _router_lines(topology: Topology, cap: int | None) -> list[str]:
    if topology.kind == "pd":
        policy = f"--prefill-policy {topology.policy}\n--decode-policy {topology.decode_policy}"
    else:
        policy = f"--policy {topology.policy}"
    limit = cap if cap is not None else "?"
    label = f"router\n{policy}\n--max-concurrent-requests {limit}\nHTTP <port> · metrics <port>"
    return [f'  router [label={_dot_text(label)}, fillcolor="#fff3d6", color="#c99a2e"];', "  client -> router;"]


def _server_line(slot: ServerSlot, bad: set[str]) -> str:
    role = slot.role
    ports = "HTTP <port>" if role == "server" else "HTTP <port> · NCCL <port>"
    if role == "prefill":
        ports += "\nbootstrap <port>"
    fill, colour = _ROLE_COLOURS.get(role, _ROLE_COLOURS["server"])
    extra = ""
    if slot.name in bad:
        (fill, colour), extra = CONFLICT_COLOURS, ", penwidth=2"
    label = f"{slot.name}\n{_gpu_text(slot.gpu_ids)}\n{ports}"
    return f'    "{slot.name}" [label={_dot_text(label)}, fillcolor="{fill}", color="{colour}"{extra}];'


def _role_lines(role: str, members: list[ServerSlot], bad: set[str], front: str, lang: str) -> list[str]:
    """One role's servers (in a dashed cluster, except the single server) and the edges to them."""
    clustered = role != "server"
    lines = []
    if clustered:
        lines.append(f"  subgraph cluster_{role} {{")
        lines.append(f'    label={_dot_text(t(f"build.topo.group_{role}", lang))}; style="rounded,dashed"; '
                     'color="#9aa5b8"; fontname="Helvetica"; fontsize=10; fontcolor="#555555";')
    lines += [_server_line(slot, bad) for slot in members]
    if clustered:
        lines.append("  }")
    return lines + [f'  {front} -> "{slot.name}";' for slot in members]


def _kv_lines(slots: list[ServerSlot]) -> list[str]:
    prefill = [slot for slot in slots if slot.role == "prefill"]
    decode = [slot for slot in slots if slot.role == "decode"]
    if not (prefill and decode):
        return []
    backend = kv_backend(prefill[0].server_args)
    # One edge for the whole KV path, on the far side of the router's edges.
    return [f'  "{prefill[-1].name}":e -> "{decode[0].name}":e [style=dashed, constraint=false, '
            f'color="#4a78c2", fontcolor="#4a78c2", label={_dot_text(f"KV · {backend}")}];']


def topology_dot(topology: Topology, slots: list[ServerSlot], bad: set[str], cap: int | None, lang: str) -> str:
    """The topology as Graphviz DOT: client → router → servers, each with GPUs and ports;
    the servers in ``bad`` are drawn red, ``cap`` is the router's concurrency limit."""
    lines = [*_HEADER, f'  client [label={_dot_text(t("build.topo.client", lang))}, shape=ellipse, '
                       'fillcolor="#ffffff", color="#7a869a"];']
    front = "client"
    if topology.kind != "aggregated":
        lines += _router_lines(topology, cap)
        front = "router"
    for role in dict.fromkeys(slot.role for slot in slots):
        lines += _role_lines(role, [slot for slot in slots if slot.role == role], bad, front, lang)
    lines += _kv_lines(slots)
    lines.append("}")
    return "\n".join(lines)


def _flag_text(name: str, value: Any) -> str:
    if value is True:
        return f"--{name}"
    if isinstance(value, list):
        return f"--{name} " + " ".join(map(str, value))
    return f"--{name} {value}"


def server_rows(slots: list[ServerSlot], base_args: dict[str, Any], lang: str) -> list[dict[str, str]]:
    """One table row per server: its role, GPUs and the flags that differ from ``base_args``."""
    rows = []
    for slot in slots:
        differ = [_flag_text(k, v) for k, v in slot.server_args.items() if k not in base_args or base_args[k] != v]
        rows.append({
            t("build.topo.col_server", lang): slot.name,
            t("build.topo.col_role", lang): role_name(slot.role, lang),
            t("build.topo.col_gpus", lang): ",".join(map(str, slot.gpu_ids)),
            t("build.topo.col_flags", lang): "  ".join(differ) or t("build.topo.no_diff", lang),
        })
    return rows


def gpus_in_use(slots: list[ServerSlot]) -> int:
    return len({gpu for slot in slots for gpu in slot.gpu_ids})
