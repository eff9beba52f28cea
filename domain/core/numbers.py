"""What counts as a number in a value read from elsewhere (a record's field, a frame's
cell, a flag's value): one rule for the modules that read such values.

A real number is an ``int``, a ``float``, a ``Decimal`` (DuckDB's DECIMAL) or NumPy's
scalar of either; a bool is not one (``True`` is not one request).  Text counts only where
the caller says it may hold a number (``text=True``: ``" 3.5 "``, ``"1e3"``, ``"inf"``).
"""

from __future__ import annotations

import math
import numbers
from decimal import Decimal


def real_number(value: object, *, text: bool = False, finite: bool = False) -> float | None:
    """``value`` as a float, or None when it holds no number (None, pd.NA, a bool, other
    objects, text unless ``text``).  NaN and infinities are numbers unless ``finite``."""
    number = _as_float(value, text=text)
    if number is None or (finite and not math.isfinite(number)):
        return None
    return number


def _as_float(value: object, *, text: bool) -> float | None:
    if isinstance(value, bool) or type(value).__name__ == "bool_":  # NumPy's bool is no number either
        return None
    if isinstance(value, numbers.Real | Decimal):
        return float(value)
    if text and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None
