"""Scripts run by the vLLM interpreter (``<vllm python> runner/vllm_side/X.py``), never
imported by benchdeck: they import nothing of it, only vLLM and the standard library."""
