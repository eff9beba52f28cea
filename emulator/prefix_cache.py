"""The emulated engine's prefix cache: a radix-cache stand-in whose memory is the KV pool's.

SGLang's RadixAttention keeps the KV of prefilled and finished requests in a radix tree
inside the same token pool the running requests use; a new request reuses the longest cached prefix of
its prompt (only that prefix's tokens skip the prefill), and the tree's unreferenced
leaves are evicted, least recently used first, when the pool needs room
(sglang/srt/mem_cache/radix_cache.py).  Here the tree is a chain of 32-token pages keyed
by a rolling hash, so a match is always page aligned, and :meth:`PrefixCache.fit` evicts
least recently used pages until the cache fits what the running requests' reservations
leave of the pool.  Simplifications: pages a running request reuses are counted both in
its reservation and in the cache (SGLang counts them once, so the cache here gives way a
little sooner under memory pressure), and only prompts are cached, not the generated
tokens SGLang also inserts (a multi-turn history's previous answers are recomputed).

Also here: ``sglext`` with ``cached_tokens_details``, which SGLang's OpenAI-compatible
routes add when a request sets ``return_cached_tokens_details`` (the bench client asks
for it under ``--cache-report``); with no hierarchical cache every cached token is on the device.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

PAGE = 32


class PrefixCache:
    """LRU set of page-aligned prompt prefixes, keyed by a rolling hash."""

    def __init__(self, capacity_tokens: int, enabled: bool) -> None:
        self.capacity_pages = max(0, capacity_tokens // PAGE)
        self.enabled = enabled
        self._pages: OrderedDict[int, None] = OrderedDict()

    @staticmethod
    def keys(ids: Sequence[int]) -> list[int]:
        keys, h = [], 0
        for start in range(0, len(ids) - PAGE + 1, PAGE):
            h = hash((h, tuple(ids[start:start + PAGE])))
            keys.append(h)
        return keys

    def match(self, keys: Sequence[int]) -> int:
        if not self.enabled:
            return 0
        matched = 0
        for key in keys:
            if key not in self._pages:
                break
            self._pages.move_to_end(key)
            matched += 1
        return matched * PAGE

    def insert(self, keys: Sequence[int]) -> None:
        if not self.enabled:
            return
        for key in keys:
            self._pages[key] = None
            self._pages.move_to_end(key)
        self._evict(self.capacity_pages)

    def fit(self, free_tokens: int) -> None:
        """Evict least recently used pages until the cache holds at most ``free_tokens``
        (what the running requests leave of the KV pool)."""
        self._evict(min(self.capacity_pages, max(0, free_tokens) // PAGE))

    def _evict(self, pages: int) -> None:
        while len(self._pages) > pages:
            self._pages.popitem(last=False)

    def clear(self) -> None:
        self._pages.clear()

    @property
    def tokens(self) -> int:
        return len(self._pages) * PAGE


def sglext(body: dict[str, Any], cached: int) -> dict[str, Any]:
    """The ``sglext`` field of an OpenAI-compatible answer (empty: the request did not ask)."""
    if not body.get("return_cached_tokens_details"):
        return {}
    return {"sglext": {"cached_tokens_details": {"device": cached, "host": 0}}}
