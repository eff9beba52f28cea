"""Scripts run by the SGLang interpreter (``<sglang python> runner/sglang_side/X.py``),
never imported by benchdeck: they import nothing of it, only SGLang and the standard library."""
