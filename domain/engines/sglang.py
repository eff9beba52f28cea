"""SGLang's adapter: what benchdeck does SGLang's way."""

from __future__ import annotations

from domain.engines.registry import EngineAdapter

SGLANG = EngineAdapter(
    family="sglang",
    name="SGLang",
    version_field="sglang_version",
    emulated_label="emulator",  # the emulated SGLang's one-word name before the split
    bench_backend="sglang",
    tokenize_prompt=True,
    topologies=frozenset({"aggregated", "router", "pd"}),
)
