"""What the engine-side scripts share (``runner/sglang_side/``, ``runner/vllm_side/``): run by
each engine's own interpreter, stdlib only, imported by path (not as benchdeck's package)."""
