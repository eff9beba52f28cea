"""Engine adapters: one per engine family (SGLang, vLLM), in one registry.

See :mod:`domain.engines.registry`.  Importing this package registers the shipped families.
"""

from domain.engines.registry import (
    EXTERNAL,
    LOOPBACK,
    EngineAdapter,
    adapter_for,
    families,
    register,
    split_label,
    stored_engine,
    unregister,
)
from domain.engines.sglang import SGLANG
from domain.engines.vllm import VLLM

register(SGLANG)
register(VLLM)

__all__ = ["EXTERNAL", "LOOPBACK", "SGLANG", "VLLM", "EngineAdapter", "adapter_for", "families", "register",
           "split_label", "stored_engine", "unregister"]
