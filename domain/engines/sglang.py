"""SGLang's adapter: what benchdeck does SGLang's way."""

from __future__ import annotations

from domain.engines.registry import LOOPBACK, EngineAdapter
from domain.engines.sglang_log import SGLANG_LOG
from domain.engines.sglang_metrics import SGLANG_METRICS
from domain.flags.dialects.sglang import SGLANG_FLAGS


def owned_flags(model: str, port: str) -> list[str]:
    """What the runner sets on every SGLang server: the model, loopback, its port, metrics on."""
    return ["--model-path", model, "--host", LOOPBACK, "--port", port, "--enable-metrics"]


SGLANG = EngineAdapter(
    family="sglang",
    name="SGLang",
    version_field="sglang_version",
    emulated_label="emulator",  # the emulated SGLang's one-word name before the split
    bench_backend="sglang",
    tokenize_prompt=True,
    topologies=frozenset({"aggregated", "router", "pd"}),
    flags=SGLANG_FLAGS,
    log=SGLANG_LOG,
    launch_module=("sglang.launch_server",),
    owned_flags=owned_flags,
    interpreter_setting="sglang_python",
    no_interpreter_key="check.no_sglang_here",
    emulator_schema_dir=True,  # the emulator ships no schema of its own
    metrics=SGLANG_METRICS,
)
