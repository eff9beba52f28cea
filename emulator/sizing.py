"""The emulator's model and GPU-memory sizing: the estimator's, re-exported.

The code moved to :mod:`domain.estimate.sizing` so that the estimator (``python -m runner
estimate``) and the emulator size a configuration with one and the same arithmetic.  It
is still separate code from ``domain/plan/memory_fit.py``, so the two keep checking each
other (tests/test_memory_fit_vs_emulator.py).
"""

from __future__ import annotations

from domain.estimate.sizing import (
    CONTEXT_OVERHEAD_GIB,
    GIB,
    GPUS,
    KNOWN_MODELS,
    KV_DTYPE_BYTES,
    MIB,
    QWEN3_30B_A3B,
    QWEN3_235B_A22B,
    GpuSpec,
    MemoryPlan,
    ModelSpec,
    UnknownModel,
    default_chunked_prefill,
    default_cuda_graph_max_bs,
    default_max_running_requests,
    default_mem_fraction_static,
    kv_cell_bytes,
    plan_memory,
    resolve_model,
    weight_bytes_per_gpu,
)

__all__ = [
    "CONTEXT_OVERHEAD_GIB", "GIB", "GPUS", "KNOWN_MODELS", "KV_DTYPE_BYTES", "MIB", "QWEN3_30B_A3B",
    "QWEN3_235B_A22B", "GpuSpec", "MemoryPlan", "ModelSpec", "UnknownModel", "default_chunked_prefill",
    "default_cuda_graph_max_bs", "default_max_running_requests", "default_mem_fraction_static", "kv_cell_bytes",
    "plan_memory", "resolve_model", "weight_bytes_per_gpu",
]
