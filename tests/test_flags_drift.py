"""Schemas by exact spelling, and drift translation between SGLang versions."""

from __future__ import annotations

import pytest

from domain.flags import (
    SchemaError,
    known_versions,
    load_schema,
    newest_version,
    retarget,
    validate_server_args,
    version_key,
)
from domain.flags.drift import drift_rules, spellings
from domain.flags.schema import all_schemas

SHIPPED = ["0.4.6.post5", "0.5.9", "0.5.15.post1", "0.5.20", "0.5.23"]


# -- schemas ------------------------------------------------------------------------------------


def test_the_shipped_versions_are_known_oldest_first() -> None:
    assert [v for v in known_versions() if v in SHIPPED] == SHIPPED
    assert newest_version() == known_versions()[-1]


def test_versions_sort_numerically_with_post_releases_last() -> None:
    assert sorted(["0.5.15.post1", "0.5.9", "0.5.15", "0.4.10.post2", "0.5.15rc1"], key=version_key) == [
        "0.4.10.post2",
        "0.5.9",
        "0.5.15rc1",
        "0.5.15",
        "0.5.15.post1",
    ]


def test_lookup_is_exact_and_knows_aliases() -> None:
    schema = load_schema("0.5.23")
    assert schema.lookup("model") is schema.lookup("model-path") is schema.lookup("--model-path")
    assert schema.lookup("ep") is schema.lookup("ep-size")
    assert schema.lookup("prefill-only") is None  # argparse would prefix-match it
    assert schema.lookup("prefill-only-disable-kv-cache") is not None
    assert schema.lookup("tp") is None


def test_an_unknown_version_is_an_error() -> None:
    with pytest.raises(SchemaError):
        load_schema("9.9.9")


# -- the drift table itself -----------------------------------------------------------------------


def test_every_replacement_flag_in_the_table_exists_in_some_shipped_version() -> None:
    """A typo on the `new` side would make a translation that SGLang rejects."""
    known = set().union(*(s.names for s in all_schemas()))
    for rule in drift_rules():
        assert set(rule.new or {}) <= known, rule.id


def test_the_table_covers_the_issue_list() -> None:
    ids = {rule.id for rule in drift_rules()}
    assert {"cuda_graph_max_bs", "cuda_graph_bs", "disable_cuda_graph", "enable_dp_attention", "enable_ep_moe"} <= ids


def test_aliases_are_grouped_across_versions_but_negations_are_not() -> None:
    assert {"tp-size", "tensor-parallel-size"} <= spellings("tp-size")
    assert {"ep-size", "expert-parallel-size", "ep"} <= spellings("ep")
    assert "no-enable-tf32-matmul" not in spellings("enable-tf32-matmul")


# -- re-targeting -----------------------------------------------------------------------------------


def test_a_0_5_9_configuration_is_retargeted_to_0_5_23() -> None:
    old = {
        "tp-size": 8,
        "cuda-graph-max-bs": 160,
        "cuda-graph-bs": [1, 2, 4, 8],
        "disable-cuda-graph": True,
        "enable-dp-attention": True,
        "dp-size": 8,
        "enable-piecewise-cuda-graph": True,
        "mem-fraction-static": 0.85,
    }
    new, changes, missing = retarget(old, "0.5.9", "0.5.23")
    assert new == {
        "tp-size": 8,
        "mem-fraction-static": 0.85,
        "cuda-graph-max-bs-decode": 160,
        "cuda-graph-bs-decode": [1, 2, 4, 8],
        "cuda-graph-backend-decode": "disabled",
        "cuda-graph-backend-prefill": "disabled",
        "attn-dp-size": 8,
    }
    assert {c.rule for c in changes} == {
        "cuda_graph_max_bs",
        "cuda_graph_bs",
        "disable_cuda_graph",
        "enable_dp_attention",
    }
    assert [m.flag for m in missing] == ["enable-piecewise-cuda-graph"]
    assert missing[0].note is not None  # says why there is nothing like it
    assert validate_server_args(new, "0.5.23", model_dirs=[]).issues == ()


def test_a_0_5_23_configuration_is_retargeted_back_to_0_5_9() -> None:
    new = {"tp-size": 8, "attn-dp-size": 8, "cuda-graph-max-bs-decode": 256, "cuda-graph-bs-decode": [1, 8]}
    old, changes, missing = retarget(new, "0.5.23", "0.5.9")
    assert old == {
        "tp-size": 8,
        "enable-dp-attention": True,
        "dp-size": 8,
        "cuda-graph-max-bs": 256,
        "cuda-graph-bs": [1, 8],
    }
    assert len(changes) == 3 and missing == ()
    assert validate_server_args(old, "0.5.9", model_dirs=[]).issues == ()


def test_enable_ep_moe_from_0_4_6_becomes_ep_size_equal_to_tp_size() -> None:
    new, changes, _ = retarget({"enable-ep-moe": True, "tp-size": 8}, "0.4.6.post5", "0.5.23")
    assert new == {"tp-size": 8, "ep-size": 8}
    assert [c.rule for c in changes] == ["enable_ep_moe"]


def test_retargeting_to_0_5_15_modernises_deprecated_spellings() -> None:
    new, changes, _ = retarget({"cuda-graph-max-bs": 160}, "0.5.9", "0.5.15.post1")
    assert new == {"cuda-graph-max-bs-decode": 160}
    assert [c.rule for c in changes] == ["cuda_graph_max_bs"]  # deprecated there, so modernised


def test_an_alias_the_target_lacks_is_respelled() -> None:
    new, changes, _ = retarget({"ep": 2, "tp-size": 8}, "0.5.23", "0.4.6.post5")
    assert new == {"ep-size": 2, "tp-size": 8}
    assert [c.rule for c in changes] == ["alias"]


def test_a_false_switch_the_target_lacks_is_simply_dropped() -> None:
    new, changes, missing = retarget({"enable-piecewise-cuda-graph": False}, "0.5.9", "0.5.23")
    assert new == {} and missing == () and [c.rule for c in changes] == ["unset_switch"]


def test_a_rewrite_never_overwrites_a_different_value() -> None:
    new, changes, missing = retarget({"attn-dp-size": 4, "dp-size": 2}, "0.5.23", "0.5.9")
    assert new == {"dp-size": 2} and changes == ()  # no rewrite that would clobber dp-size 2
    assert [m.flag for m in missing] == ["attn-dp-size"]


@pytest.mark.parametrize("target", SHIPPED)
def test_retargeting_the_newest_defaults_of_the_levers_validates_everywhere(target: str) -> None:
    levers = {
        "max-running-requests": 128,
        "chunked-prefill-size": 8192,
        "max-prefill-tokens": 16384,
        "schedule-policy": "fcfs",
        "cuda-graph-max-bs-decode": 128,
        "mem-fraction-static": 0.88,
        "num-continuous-decode-steps": 1,
        "tp-size": 8,
        "ep-size": 2,
    }
    args, _, missing = retarget(levers, "0.5.23", target)
    assert missing == ()
    assert validate_server_args(args, target, model_dirs=[]).issues == ()


def test_an_unknown_source_version_is_an_error() -> None:
    with pytest.raises(SchemaError):
        retarget({}, "0.0.1", "0.5.23")
