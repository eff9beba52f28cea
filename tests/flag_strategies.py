"""Hypothesis strategies for valid (and deliberately broken) SGLang server_args.

Used by the argv round-trip tests and by the test that runs SGLang's real parser over
the same cases, so that the validator, the renderer and SGLang never disagree.
"""

from __future__ import annotations

from decimal import Decimal
from typing import cast

from hypothesis import strategies as st

from domain.flags.policy import Policy, load_policy
from domain.flags.schema import FlagSpec, Schema
from domain.flags.values import FLOAT_TYPES, INT_TYPES, Range, range_for

# argparse type functions that check more than the JSON shape; their values are covered elsewhere.
_SKIPPED_TYPES = frozenset({"parse_cuda_graph_config_arg"})
_TEXT = st.from_regex(r"[a-z][a-z0-9_.]{0,12}", fullmatch=True)
_HUMAN_INTS = {"4k": 4000, "16k": 16000, "1Ki": 1024, "2Mi": 2 * 1024 * 1024, "1.5k": 1500}


def eligible_specs(schema: Schema, policy: Policy | None = None) -> list[FlagSpec]:
    """Flags a plan may set freely: not policy-refused, not path-checked, not deprecated or hidden."""
    policy = policy or load_policy()
    refused = {
        *policy.runner_owned,
        *policy.forbidden,
        *policy.value_rules,
        *policy.model_ref_flags,
        *policy.path_flags,
    }
    return [
        spec
        for spec in schema.specs
        if not refused & set(spec.names)
        and not (spec.deprecated or spec.retired or spec.suppressed)
        and spec.type not in _SKIPPED_TYPES
        and spec.nargs != "?"
        and spec.action != "LoRAPathAction"
    ]


def _int_bounds(value_range: Range | None) -> tuple[int, int]:
    if value_range is None:
        return 0, 100_000
    low = value_range.minimum if value_range.minimum is not None else 0
    high = value_range.maximum if value_range.maximum is not None else low + 100_000
    return int(low), int(high)


def _float_values(value_range: Range | None) -> st.SearchStrategy[float]:
    low, high = 0.0, 1000.0
    if value_range is not None:
        low = value_range.minimum if value_range.minimum is not None else low
        high = value_range.maximum if value_range.maximum is not None else high
        if value_range.max_exclusive is not None:
            high = min(high, value_range.max_exclusive)
    exclude_low = value_range is not None and value_range.min_exclusive is not None
    exclude_high = value_range is not None and value_range.max_exclusive is not None
    return st.floats(
        min_value=low,
        max_value=high,
        exclude_min=exclude_low,
        exclude_max=exclude_high,
        allow_nan=False,
        allow_infinity=False,
    )


def element_values(spec: FlagSpec) -> st.SearchStrategy[object]:
    """One valid element for ``spec`` (a list flag takes several)."""
    if spec.choices:
        return st.sampled_from(spec.choices)
    value_range = range_for(spec.primary)
    if spec.type in INT_TYPES:
        low, high = _int_bounds(value_range)
        ints: st.SearchStrategy[object] = st.integers(min_value=low, max_value=high)
        if spec.type == "human_readable_int" and (value_range is None or (value_range.minimum or 0) <= 1000):
            return st.one_of(ints, st.sampled_from(sorted(_HUMAN_INTS)))
        return ints
    if spec.type in FLOAT_TYPES:
        return _float_values(value_range)
    if spec.type == "loads":
        return st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), st.integers(0, 100), max_size=3)
    if spec.type == "json_list_type":
        return st.lists(st.integers(0, 100), max_size=3)
    return _TEXT


def flag_values(spec: FlagSpec) -> st.SearchStrategy[object]:
    if spec.takes_no_value:
        return st.just(True)
    element = element_values(spec)
    if spec.takes_list:
        return st.lists(element, min_size=1 if spec.nargs == "+" else 0, max_size=4)
    return element


@st.composite
def valid_server_args(draw: st.DrawFn, specs: list[FlagSpec]) -> dict[str, object]:
    chosen = draw(st.lists(st.sampled_from(specs), min_size=1, max_size=8, unique_by=lambda s: s.dest))
    return {spec.primary: draw(flag_values(spec)) for spec in chosen}


def expected_dest_value(spec: FlagSpec, value: object) -> object:
    """What SGLang's parser stores for ``value`` (JSON-comparable)."""
    if spec.takes_no_value:
        return True
    if spec.takes_list:
        return [_converted(spec, item) for item in cast(list[object], value)]
    return _converted(spec, value)


def _converted(spec: FlagSpec, value: object) -> object:
    if isinstance(value, str) and value in _HUMAN_INTS and spec.type == "human_readable_int":
        return _HUMAN_INTS[value]
    if spec.type in FLOAT_TYPES and isinstance(value, int | float):
        return float(Decimal(repr(float(value))))
    return value
