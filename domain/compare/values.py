"""How a condition's value compares and reads: one normal form for the values of a points frame
(NaN, numpy scalars, lists and dicts alike), and its text."""

from __future__ import annotations

import math
from collections.abc import Hashable

import numpy as np
import pandas as pd

# A flag absent from a run whose flag set is known, and whose schema default is None.
UNSET_TEXT = "unset"


MISSING_TEXT = "?"


def normalise(value: object) -> object:
    """One spelling per value, so 128 == 128.0 and 'inf' == inf; None for anything unknown."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str):
        return math.inf if value.strip().lower() in ("inf", "+inf", "infinity") else value
    if isinstance(value, int | float) or hasattr(value, "__float__"):
        number = float(value)
        if math.isnan(number):
            return None
        return int(number) if number.is_integer() else number
    return value


def display(value: object) -> str:
    """A value as the checklist shows it; '?' for unknown."""
    value = normalise(value)
    if value is None:
        return MISSING_TEXT
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return str(value)


def hashable(value: object) -> Hashable:
    """A normalised value as a set member or dict key (lists and dicts are not hashable)."""
    if isinstance(value, dict):
        return tuple(sorted(value.items()))
    if isinstance(value, list):
        return tuple(value)
    return value


def rows_of(frame: pd.DataFrame, run_id: int) -> pd.DataFrame:
    """One run's rows of the points frame; a run with none is a KeyError, never an empty side."""
    rows = frame[frame["run_id"] == run_id]
    if rows.empty:
        raise KeyError(f"run {run_id} has no points in the frame")
    return rows


def is_vllm(rows: pd.DataFrame) -> bool:
    """Whether a run's rows are a vLLM run's (its flags are vLLM's, not SGLang's)."""
    return bool(rows.iloc[0].get("engine") == "vllm")
