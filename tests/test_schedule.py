"""The suite's order for xdist's workers (tests/support/schedule.py)."""

from __future__ import annotations

from tests.support.schedule import long_first_in_each_share

# (module, long?) items: three long modules of 3, 2 and 1 long items, 20 short items in 4 modules.
ITEMS = ([("e2e_a", True)] * 3 + [("unit_a", False)] * 5 + [("e2e_b", True)] * 2 + [("unit_b", False)] * 5
         + [("browser_c", True)] + [("unit_c", False)] * 5 + [("unit_d", False)] * 5)


def _order(workers: int) -> list[tuple[str, bool]]:
    return long_first_in_each_share(ITEMS, workers, module_of=lambda item: item[0], is_long=lambda item: item[1])


def _shares(order: list[tuple[str, bool]], workers: int) -> list[list[tuple[str, bool]]]:
    """The contiguous shares worksteal hands out at the start (each worker in turn: what is left // workers left)."""
    bounds = [len(order) * k // workers for k in range(workers + 1)]
    return [order[bounds[k]:bounds[k + 1]] for k in range(workers)]


def test_each_share_begins_with_its_long_modules_and_keeps_modules_whole() -> None:
    order = _order(3)
    assert sorted(order) == sorted(ITEMS)  # nothing lost or added
    shares = _shares(order, 3)
    assert [len(share) for share in shares] == [8, 9, 9]
    assert [share[0][0] for share in shares] == ["e2e_a", "e2e_b", "browser_c"]
    for share in shares:  # long items first, then short ones
        flags = [long for _, long in share]
        assert flags == sorted(flags, reverse=True)
    modules_in_order = [module for module, _ in order]
    for module in ("e2e_a", "e2e_b"):  # a long module's items stay together (its fixtures are set up once)
        first, count = modules_in_order.index(module), modules_in_order.count(module)
        assert modules_in_order[first:first + count] == [module] * count


def test_one_worker_keeps_the_file_order() -> None:
    assert _order(1) == ITEMS
