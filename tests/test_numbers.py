"""One rule for what counts as a number in a value read from elsewhere (domain/core/numbers.py)."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest

from domain.core.numbers import real_number


@pytest.mark.parametrize(("value", "expected"), [
    (3, 3.0), (2.5, 2.5), (np.int64(7), 7.0), (np.float32(0.5), 0.5), (Decimal("1.25"), 1.25), (math.inf, math.inf),
])
def test_real_numbers_are_floats(value: object, expected: float) -> None:
    assert real_number(value) == expected


@pytest.mark.parametrize("value", [None, pd.NA, True, np.bool_(False), "3", [1], object()])
def test_anything_else_is_no_number(value: object) -> None:
    assert real_number(value) is None


def test_text_counts_only_where_the_caller_allows_it() -> None:
    assert real_number(" 3.5 ", text=True) == 3.5
    assert real_number("1e3", text=True) == 1000.0
    assert real_number("fast", text=True) is None
    assert real_number("3.5") is None


def test_nan_and_infinities_are_numbers_unless_finite_is_asked() -> None:
    assert math.isnan(real_number(math.nan) or 0.0)
    assert real_number(math.nan, finite=True) is None
    assert real_number("inf", text=True, finite=True) is None
    assert real_number(np.float64(2.0), finite=True) == 2.0
