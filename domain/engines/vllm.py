"""vLLM's adapter: what benchdeck does vLLM's way."""

from __future__ import annotations

from domain.engines.registry import LOOPBACK, EngineAdapter
from domain.engines.vllm_log import VLLM_LOG
from domain.engines.vllm_metrics import VLLM_METRICS
from domain.flags.dialects.vllm import VLLM_FLAGS


def owned_flags(model: str, port: str) -> list[str]:
    """What the runner sets on every vLLM server; served-model-name is the model as the plan
    names it, so the client's --model and /metrics' model_name label are the plan's model."""
    return ["--model", model, "--host", LOOPBACK, "--port", port, "--served-model-name", model]


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
    flags=VLLM_FLAGS,
    log=VLLM_LOG,
    # ``vllm serve``'s own entry module, with a ``__main__`` guard in 0.11.2 and 0.33.0 alike
    # (``vllm.entrypoints.openai.api_server`` became a deprecated shim).
    launch_module=("vllm.entrypoints.cli.main", "serve"),
    owned_flags=owned_flags,
    interpreter_setting="vllm_python",
    no_interpreter_key="check.no_vllm_here",
    emulator_args=("--emulate-engine", "vllm"),
    metrics=VLLM_METRICS,
)
