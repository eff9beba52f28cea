"""The order the suite's tests are handed to pytest-xdist's workers in.

``--dist worksteal`` gives each of the N workers one contiguous share of the collection, in
order, and an idle worker later takes the back half of the longest remaining share.  In file
order the long end-to-end and browser modules sit wherever their names put them, often at
the end of a share, and the run ends with one or two of them alone on a half-idle machine.
Here each share begins with its long modules (whole modules, so a module's fixtures are set
up once) and ends with short tests, which are what the others steal at the end.  Every
worker computes the same order from the same collection, as xdist requires.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

Item = TypeVar("Item")


def long_first_in_each_share(items: Sequence[Item], workers: int, module_of: Callable[[Item], object],
                             is_long: Callable[[Item], bool]) -> list[Item]:
    """``items`` reordered into ``workers`` shares of (almost) equal length, the long modules
    (those with a long item) spread over the shares' beginnings, the short items after."""
    if workers < 2:
        return list(items)
    modules: dict[object, list[Item]] = {}
    for item in items:
        modules.setdefault(module_of(item), []).append(item)
    long_counts = {module: sum(map(is_long, group)) for module, group in modules.items()}
    short = [item for module, group in modules.items() if not long_counts[module] for item in group]
    shares: list[list[Item]] = [[] for _ in range(workers)]
    loads = [0] * workers  # long items per share
    for module in sorted((m for m in modules if long_counts[m]), key=lambda m: -long_counts[m]):
        emptiest = loads.index(min(loads))  # largest module first, to the share with the fewest long items
        shares[emptiest].extend(modules[module])
        loads[emptiest] += long_counts[module]
    return _filled(shares, short, len(items))


def _filled(shares: list[list[Item]], short: list[Item], total: int) -> list[Item]:
    """Each share topped up with short items to its equal part of ``total``; the rest last."""
    rest = iter(short)
    for index, share in enumerate(shares):
        target = total * (index + 1) // len(shares) - total * index // len(shares)
        share.extend(item for _, item in zip(range(max(0, target - len(share))), rest, strict=False))
    return [item for share in shares for item in share] + list(rest)
