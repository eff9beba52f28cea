"""vLLM's adapter: what benchdeck does vLLM's way."""

from __future__ import annotations

from domain.engines.registry import EngineAdapter

VLLM = EngineAdapter(
    family="vllm",
    name="vLLM",
    version_field="vllm_version",
    emulated_label="vllm-emulator",
    # vLLM serves the OpenAI API, not SGLang's /generate; that client sends text, so no
    # --tokenize-prompt (bench_serving sends token ids only to its sglang backend).
    bench_backend="vllm",
    tokenize_prompt=False,
    topologies=frozenset({"aggregated"}),  # benchdeck launches no vLLM prefill/decode pairs
)
