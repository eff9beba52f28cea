"""Flag validation against the shipped SGLang schemas (issue 3's "Done when" list first)."""

from __future__ import annotations

from pathlib import Path

import pytest

from domain.core.i18n import catalogue
from domain.flags import FlagReport, validate_server_args

MODELS_DIR = Path("/srv/models")


def check(args: dict[str, object], version: str = "0.5.23", **kwargs: object) -> FlagReport:
    kwargs.setdefault("model_dirs", [MODELS_DIR])
    return validate_server_args(args, version, **kwargs)


def only(report: FlagReport, flag: str):
    issues = report.for_flag(flag)
    assert len(issues) == 1, issues
    return issues[0]


# -- the issue's required outcomes -------------------------------------------------------------


def test_cuda_graph_max_bs_passes_on_0_5_9() -> None:
    assert check({"cuda-graph-max-bs": 160}, "0.5.9").issues == ()


def test_cuda_graph_max_bs_warns_on_0_5_15_and_offers_the_decode_flag() -> None:
    issue = only(check({"cuda-graph-max-bs": 160}, "0.5.15.post1"), "cuda-graph-max-bs")
    assert (issue.severity, issue.code) == ("warning", "deprecated")
    assert issue.translation is not None and dict(issue.translation.add) == {"cuda-graph-max-bs-decode": 160}


def test_cuda_graph_max_bs_is_an_error_on_0_5_23_that_offers_the_decode_flag() -> None:
    report = check({"cuda-graph-max-bs": 160})
    issue = only(report, "cuda-graph-max-bs")
    assert (issue.severity, issue.code) == ("error", "removed_in_version")
    assert issue.params["last"] == "0.5.15.post1"
    assert issue.translation is not None
    assert issue.translation.remove == ("cuda-graph-max-bs",)
    assert dict(issue.translation.add) == {"cuda-graph-max-bs-decode": 160}
    assert not report.ok


def test_dp_attention_warns_on_0_5_23_and_translates_to_attn_dp_size() -> None:
    report = check({"enable-dp-attention": True, "dp-size": 8, "tp-size": 8})
    issue = only(report, "enable-dp-attention")
    assert (issue.severity, issue.code) == ("warning", "deprecated")
    assert issue.translation is not None
    assert set(issue.translation.remove) == {"enable-dp-attention", "dp-size"}
    assert dict(issue.translation.add) == {"attn-dp-size": 8}
    assert report.ok  # a warning does not block the launch


def test_prefill_only_is_unknown_on_0_5_23_even_though_argparse_would_prefix_match() -> None:
    issue = only(check({"prefill-only": True}), "prefill-only")
    assert (issue.severity, issue.code) == ("error", "unknown_flag")
    assert issue.translation is not None and dict(issue.translation.add) == {"disaggregation-mode": "prefill"}


@pytest.mark.parametrize(
    ("args", "flag", "code"),
    [
        ({"trust-remote-code": True}, "trust-remote-code", "forbidden"),
        ({"host": "0.0.0.0"}, "host", "forbidden"),  # noqa: S104 - the value under test
        ({"served-model-name": "; rm -rf /"}, "served-model-name", "bad_value"),
        ({"tool-call-parser": "; rm -rf /"}, "tool-call-parser", "bad_value"),
        ({"chat-template": "$(id)"}, "chat-template", "bad_value"),
        ({"revision": "`id`"}, "revision", "bad_value"),
        ({"json-model-override-args": '{"a": "$(id)"}'}, "json-model-override-args", "bad_value"),
        ({"api-key": "sk-123"}, "api-key", "forbidden"),
        ({"admin-api-key": "x"}, "admin-api-key", "forbidden"),
        ({"enable-custom-logit-processor": True}, "enable-custom-logit-processor", "forbidden"),
        ({"crash-dump-folder": "/tmp/x"}, "crash-dump-folder", "forbidden"),
        ({"config": "/srv/models/x.yaml"}, "config", "forbidden"),
        ({"load-format": "remote"}, "load-format", "forbidden"),
        ({"log-requests-target": ["stdout", "/var/log"]}, "log-requests-target", "forbidden"),
    ],
)
def test_forbidden_flags_and_values_are_refused(args: dict[str, object], flag: str, code: str) -> None:
    issue = only(check(args), flag)
    assert (issue.severity, issue.code) == ("error", code)


def test_the_model_reference_dot_dot_etc_is_refused() -> None:
    report = check({}, model="../../etc")
    assert report.codes("model") == ["bad_model_ref"]
    assert not report.ok


@pytest.mark.parametrize(
    "flag",
    [
        "model-path",
        "model",
        "port",
        "nccl-port",
        "base-gpu-id",
        "dist-init-addr",
        "disaggregation-bootstrap-port",
        "encoder-bootstrap-port",
        "nnodes",
    ],
)
def test_runner_owned_flags_are_refused_with_an_explanation(flag: str) -> None:
    issue = only(check({flag: 1 if "port" in flag or flag in ("base-gpu-id", "nnodes") else "x"}), flag)
    assert issue.code == "runner_owned"
    assert issue.note is not None and "runner" in issue.note["en"]


def test_loopback_host_is_still_runner_owned() -> None:
    assert check({"host": "127.0.0.1"}).codes("host") == ["runner_owned"]


def test_port_99999_is_refused() -> None:
    assert not check({"port": 99999}).ok


# -- numbers -------------------------------------------------------------------------------------


def test_chunked_prefill_size_minus_one_disables_chunking_and_is_valid() -> None:
    assert check({"chunked-prefill-size": -1}).issues == ()


@pytest.mark.parametrize(
    ("args", "flag", "code", "detail"),
    [
        ({"chunked-prefill-size": -2}, "chunked-prefill-size", "bad_value", "out_of_range"),
        ({"chunked-prefill-size": 0}, "chunked-prefill-size", "bad_value", "out_of_range"),
        ({"tp-size": 0}, "tp-size", "bad_value", "out_of_range"),
        ({"mem-fraction-static": 1.5}, "mem-fraction-static", "bad_value", "out_of_range"),
        ({"mem-fraction-static": 0}, "mem-fraction-static", "bad_value", "out_of_range"),
        ({"mem-fraction-static": float("nan")}, "mem-fraction-static", "bad_value", "not_finite"),
        ({"mem-fraction-static": float("inf")}, "mem-fraction-static", "bad_value", "not_finite"),
        ({"mem-fraction-static": "nan"}, "mem-fraction-static", "bad_value", "not_finite"),
        ({"max-running-requests": "８"}, "max-running-requests", "bad_value", "non_ascii_digit"),
        ({"max-running-requests": "٣"}, "max-running-requests", "bad_value", "non_ascii_digit"),
        ({"tp-size": True}, "tp-size", "bad_type", "bool_as_number"),
        ({"mem-fraction-static": False}, "mem-fraction-static", "bad_type", "bool_as_number"),
        ({"tp-size": "abc"}, "tp-size", "bad_type", "int"),
        ({"tp-size": 8.0}, "tp-size", "bad_type", "int"),
        ({"tp-size": 8.5}, "tp-size", "bad_type", "int"),
        ({"schedule-conservativeness": "fast"}, "schedule-conservativeness", "bad_type", "float"),
        ({"log-requests-level": 7}, "log-requests-level", "bad_choice", None),
    ],
)
def test_bad_numbers_are_rejected(args: dict[str, object], flag: str, code: str, detail: str | None) -> None:
    issue = only(check(args), flag)
    assert (issue.severity, issue.code, issue.detail) == ("error", code, detail)


@pytest.mark.parametrize(
    "args",
    [
        {"tp-size": 8, "mem-fraction-static": 0.88, "max-running-requests": 256},
        {"tp-size": "8"},  # an ASCII integer string is what argv would carry anyway
        {"max-prefill-tokens": "16k", "context-length": "128Ki", "max-total-tokens": 100000},
        {"schedule-conservativeness": 1, "watchdog-timeout": 600.5},
        {"log-requests-level": 2},
    ],
)
def test_good_numbers_pass(args: dict[str, object]) -> None:
    assert check(args).issues == ()


def test_human_readable_ints_are_checked_against_the_range_after_expansion() -> None:
    assert check({"max-prefill-tokens": "0k"}).codes("max-prefill-tokens") == ["bad_value"]
    assert check({"max-prefill-tokens": "1.5Ki"}).codes("max-prefill-tokens") == ["bad_type"]


# -- types, choices, nargs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "flag", "code", "detail"),
    [
        ({"enable-torch-compile": "yes"}, "enable-torch-compile", "bad_type", "switch"),
        ({"enable-torch-compile": 1}, "enable-torch-compile", "bad_type", "switch"),
        ({"schedule-policy": "fastest"}, "schedule-policy", "bad_choice", None),
        ({"kv-cache-dtype": "int3"}, "kv-cache-dtype", "bad_choice", None),
        ({"schedule-policy": None}, "schedule-policy", "missing_value", None),
        ({"schedule-policy": ""}, "schedule-policy", "missing_value", None),
        ({"served-model-name": True}, "served-model-name", "missing_value", "switch_value"),
        ({"tp-size": [8]}, "tp-size", "bad_nargs", "list_for_scalar"),
        ({"cuda-graph-bs-decode": []}, "cuda-graph-bs-decode", "missing_value", "list"),
        ({"cuda-graph-bs-decode": [1, [2]]}, "cuda-graph-bs-decode", "bad_nargs", "nested"),
        ({"cuda-graph-bs-decode": [1, "two"]}, "cuda-graph-bs-decode", "bad_type", "int"),
        ({"cuda-graph-config": "[1, 2]"}, "cuda-graph-config", "bad_type", "json_dict"),
        ({"cuda-graph-config": "{not json"}, "cuda-graph-config", "bad_value", "bad_json"),
        ({"cuda-graph-config": '{"decode": {"max_bs": NaN}}'}, "cuda-graph-config", "bad_value", "bad_json"),
        (
            {"preferred-sampling-params": {"temperature": float("nan")}},
            "preferred-sampling-params",
            "bad_value",
            "not_finite",
        ),
    ],
)
def test_bad_types_choices_and_nargs_name_the_flag(
    args: dict[str, object], flag: str, code: str, detail: str | None
) -> None:
    issue = only(check(args), flag)
    assert (issue.severity, issue.code, issue.detail) == ("error", code, detail)
    assert f"--{flag}" in issue.message("en")


@pytest.mark.parametrize(
    "args",
    [
        {"enable-torch-compile": True, "disable-radix-cache": False},
        {"cuda-graph-bs-decode": [1, 2, 4, 8, 16]},
        {"cuda-graph-bs-decode": 8},  # one value for a nargs='+' flag
        {"uvicorn-access-log-exclude-prefixes": []},  # nargs='*' may be empty
        {"cuda-graph-config": {"decode": {"max_bs": 256}}},
        {"cuda-graph-config": '{"decode":{"max_bs":256}}'},
        {"schedule-policy": "lpm", "kv-cache-dtype": "fp8_e4m3"},
        {"enable-tf32-matmul": False, "no-enable-fused-qk-norm-rope": True},
        {"served-model-name": "qwen3 235b (test)"},
        {"reasoning-parser": "qwen3", "tool-call-parser": "qwen25"},
        {"model-checksum": True},  # nargs='?' as a bare flag
    ],
)
def test_well_formed_values_pass(args: dict[str, object]) -> None:
    assert check(args).issues == ()


# -- strings --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ("-x", "leading_dash"),
        ("--trust-remote-code", "leading_dash"),
        ("qwen3\n--api-key", "control_char"),
        ("qwen3\x00", "control_char"),
        ("qwen\u202e3", "control_char"),  # a bidi override disguising text
        ("a|b", "shell_meta"),
        ("a b", "shell_meta"),
        ("$HOME", "shell_meta"),
        ("qwen３", "unsafe_chars"),
        ("../../secret", "path_traversal"),
    ],
)
def test_unsafe_strings_are_rejected(value: str, detail: str) -> None:
    issue = only(check({"tool-call-parser": value}), "tool-call-parser")
    assert (issue.code, issue.detail) == ("bad_value", detail)


def test_model_ref_flags_must_be_hf_ids_or_inside_the_model_dirs(tmp_path: Path) -> None:
    inside = tmp_path / "models" / "draft"
    inside.mkdir(parents=True)
    dirs = [tmp_path / "models"]
    assert check({"speculative-draft-model-path": str(inside)}, model_dirs=dirs).issues == ()
    assert check({"speculative-draft-model-path": "Tengyunw/qwen3_30b_moe_eagle3"}, model_dirs=dirs).issues == ()
    outside = check({"speculative-draft-model-path": "/etc"}, model_dirs=dirs)
    assert (only(outside, "speculative-draft-model-path").detail) == "outside_model_dirs"


def test_path_flags_take_a_bare_name_or_a_path_inside_the_model_dirs(tmp_path: Path) -> None:
    dirs = [tmp_path]
    assert check({"chat-template": "chatml"}, model_dirs=dirs).issues == ()
    assert check({"chat-template": str(tmp_path / "t.jinja")}, model_dirs=dirs).issues == ()
    assert only(check({"chat-template": "/etc/passwd"}, model_dirs=dirs), "chat-template").detail == (
        "outside_model_dirs"
    )
    assert only(check({"chat-template": "templates/t.jinja"}, model_dirs=dirs), "chat-template").detail == (
        "relative_path"
    )


# -- schema status ---------------------------------------------------------------------------------------


def test_unknown_flags_get_the_nearest_real_flags() -> None:
    issue = only(check({"max-running-request": 8}), "max-running-request")
    assert issue.code == "unknown_flag"
    assert "max-running-requests" in issue.candidates


def test_a_flag_written_with_dashes_says_so() -> None:
    issue = only(check({"--tp-size": 8}), "--tp-size")
    assert (issue.code, issue.detail, issue.candidates) == ("unknown_flag", "leading_dashes", ("tp-size",))


def test_a_flag_from_a_newer_version_is_not_yet_available_and_translated_back() -> None:
    issue = only(check({"attn-dp-size": 4, "tp-size": 8}, "0.5.20"), "attn-dp-size")
    assert (issue.code, issue.params["first"]) == ("not_yet_available", "0.5.23")
    assert issue.translation is not None
    assert dict(issue.translation.add) == {"enable-dp-attention": True, "dp-size": 4}


def test_a_removed_flag_without_counterpart_explains_why() -> None:
    issue = only(check({"enable-piecewise-cuda-graph": True}), "enable-piecewise-cuda-graph")
    assert issue.code == "removed_in_version" and issue.translation is None
    assert issue.note is not None and "tc_piecewise" in issue.note["en"]


def test_enable_ep_moe_on_0_5_9_translates_to_ep_size_equal_to_tp_size() -> None:
    issue = only(check({"enable-ep-moe": True, "tp-size": 8}, "0.5.9"), "enable-ep-moe")
    assert issue.code == "removed_in_version"
    assert issue.translation is not None and dict(issue.translation.add) == {"tp-size": 8, "ep-size": 8}


def test_deprecated_flag_with_a_schema_replacement_but_no_drift_rule_names_it() -> None:
    report = check({"hybrid-kvcache-ratio": 0.5}, "0.5.9")  # DeprecatedAction: retired
    issue = only(report, "hybrid-kvcache-ratio")
    assert (issue.severity, issue.code, issue.detail) == ("error", "deprecated", "retired")


def test_deprecation_false_positive_of_the_dump_is_not_reported() -> None:
    assert check({"unified-cache-external-linker-config": {"a": 1}}).issues == ()


def test_two_spellings_of_one_flag_are_an_error() -> None:
    report = check({"tp-size": 8, "tensor-parallel-size": 4})
    assert report.codes() == ["duplicate_flag"]


def test_hidden_flags_are_reported_as_info() -> None:
    report = check({"forward-pass-metrics-worker-id": "w1"})
    assert [(i.severity, i.code) for i in report.issues] == [("info", "hidden_flag")]
    assert report.ok


def test_a_schema_object_can_replace_the_shipped_one() -> None:
    from domain.flags import Schema, load_schema

    shipped = load_schema("0.5.23")
    trimmed = Schema(version="9.9.9", specs=tuple(s for s in shipped.specs if s.primary != "tp-size"))
    report = validate_server_args({"tp-size": 8}, "9.9.9", model_dirs=[MODELS_DIR], schema=trimmed)
    assert report.version == "9.9.9" and report.codes() == ["removed_in_version"]


# -- messages ---------------------------------------------------------------------------------------------

EVERYTHING_WRONG: dict[str, object] = {
    "cuda-graph-max-bs": 160,
    "enable-dp-attention": True,
    "dp-size": 8,
    "prefill-only": True,
    "trust-remote-code": True,
    "host": "0.0.0.0",  # noqa: S104
    "port": 1,
    "load-format": "remote",
    "served-model-name": "; rm -rf /",
    "tool-call-parser": "-x",
    "revision": "a\x07",
    "reasoning-parser": "a b",
    "chat-template": "/etc/passwd",
    "hf-chat-template-name": "../x",
    "warmups": "ｘ",
    "chunked-prefill-size": -5,
    "mem-fraction-static": float("nan"),
    "max-running-requests": "８",
    "tp-size": True,
    "pp-size": "two",
    "schedule-conservativeness": "fast",
    "schedule-policy": "best",
    "enable-torch-compile": "yes",
    "kv-cache-dtype": None,
    "served-model-name-x": "x",
    "cuda-graph-bs-decode": [],
    "gc-threshold": [[1]],
    "random-seed": [1, 2],
    "sampling-defaults": True,
    "cuda-graph-config": "[]",
    "sidecar-args": "{}",
    "preferred-sampling-params": "1",
    "extra-metric-labels": "{bad",
    "disable-cuda-graph": True,
    "grpc-mode": True,
    "forward-pass-metrics-ipc-name": "x",
    "attention-data-parallel-size": 2,
    "attn-dp-size": 2,
    "--ep": 2,
    "enable-piecewise-cuda-graph": True,
    "speculative-draft-model-path": "relative/path/x",
    "tokenizer-path": "/etc",
}


@pytest.mark.parametrize("lang", ["ja", "en"])
def test_every_issue_renders_in_both_languages_from_the_catalogue(lang: str) -> None:
    report = check(EVERYTHING_WRONG, model="")
    assert len({i.message_key for i in report.issues}) >= 25
    for issue in report.issues:
        assert issue.message_key in catalogue()
        text = issue.text(lang)
        assert "{" not in text.replace("{bad", "").replace("{}", ""), text


def test_every_flags_message_has_japanese_and_english() -> None:
    keys = [k for k in catalogue() if k.startswith("flags.")]
    assert len(keys) > 80
    for key in keys:
        assert catalogue()[key]["ja"].strip() and catalogue()[key]["en"].strip(), key
