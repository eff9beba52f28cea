"""The security policy file and model references (docs/fault-suite.md, cases 15-17)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from domain.flags import load_policy, validate_model_ref
from domain.flags.policy import DEFAULT_POLICY_PATH, is_allowed_host
from domain.flags.schema import all_schemas


@pytest.fixture
def models(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    (root / "qwen3-30b").mkdir(parents=True)
    return root


@pytest.mark.parametrize("ref", ["Qwen/Qwen3-235B-A22B-FP8", "Qwen/Qwen3-30B-A3B", "org.x/name_1-2.v3"])
def test_hf_repo_ids_are_accepted(ref: str, models: Path) -> None:
    assert validate_model_ref(ref, [models]) is None


def test_a_path_inside_an_allowed_dir_is_accepted(models: Path) -> None:
    assert validate_model_ref(str(models / "qwen3-30b"), [models]) is None


@pytest.mark.parametrize(
    ("ref", "detail"),
    [
        ("../../etc", "relative_path"),
        ("../etc", "relative_path"),  # shaped like org/name, but '..' is never an id part
        ("./etc", "relative_path"),
        ("models/../../etc", "relative_path"),
        ("-rf/x", "relative_path"),
        ("/etc", "outside_model_dirs"),
        ("", "empty"),
        ("Qwen/Qwen3\n--trust-remote-code", "control_char"),
    ],
)
def test_bad_model_references_are_refused(ref: str, detail: str, models: Path) -> None:
    issue = validate_model_ref(ref, [models])
    assert issue is not None and (issue.code, issue.detail) == ("bad_model_ref", detail)


def test_dot_dot_inside_an_absolute_path_is_resolved_before_the_check(models: Path) -> None:
    issue = validate_model_ref(str(models / "qwen3-30b" / ".." / ".." / "secret"), [models])
    assert issue is not None and issue.detail == "outside_model_dirs"


def test_a_symlink_escaping_the_model_dir_is_refused(models: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    os.symlink(secret, models / "innocent")
    issue = validate_model_ref(str(models / "innocent"), [models])
    assert issue is not None and issue.detail == "outside_model_dirs"


def test_a_sibling_dir_sharing_the_prefix_is_not_inside(models: Path) -> None:
    evil = Path(str(models) + "-evil")
    evil.mkdir()
    issue = validate_model_ref(str(evil / "x"), [models])
    assert issue is not None and issue.detail == "outside_model_dirs"


def test_the_model_dir_itself_is_not_a_model(models: Path) -> None:
    assert validate_model_ref(str(models), [models]) is not None


def test_only_loopback_hosts_are_allowed() -> None:
    policy = load_policy()
    assert is_allowed_host("127.0.0.1", policy) and is_allowed_host("::1", policy)
    assert not is_allowed_host("0.0.0.0", policy)  # noqa: S104 - the value under test
    assert not is_allowed_host("10.0.0.5", policy)


def test_every_flag_the_policy_names_exists_in_some_shipped_schema() -> None:
    """A typo in the policy would silently allow the flag it meant to forbid."""
    policy = load_policy()
    known = set().union(*(s.names for s in all_schemas()))
    named = {
        *policy.runner_owned,
        *policy.forbidden,
        *policy.value_rules,
        *policy.model_ref_flags,
        *policy.path_flags,
        *policy.free_text_flags,
    }
    assert sorted(named - known) == []


def test_the_policy_forbids_what_the_issue_names() -> None:
    policy = load_policy()
    for flag in (
        "trust-remote-code",
        "api-key",
        "admin-api-key",
        "ssl-keyfile-password",
        "enable-custom-logit-processor",
        "crash-dump-folder",
        "debug-tensor-dump-output-folder",
        "export-metrics-to-file-dir",
    ):
        assert flag in policy.forbidden, flag
    for flag in (
        "model-path",
        "model",
        "host",
        "port",
        "nccl-port",
        "base-gpu-id",
        "dist-init-addr",
        "disaggregation-bootstrap-port",
        "encoder-bootstrap-port",
        "engine-info-bootstrap-port",
    ):
        assert flag in policy.runner_owned, flag


def test_every_forbidden_entry_has_a_reason_in_both_languages() -> None:
    policy = load_policy()
    for category in {*policy.forbidden.values(), *(r.category for r in policy.value_rules.values())}:
        reason = policy.reason(category)
        assert reason["ja"] and reason["en"], category


def test_an_administrator_policy_file_replaces_the_shipped_one(tmp_path: Path) -> None:
    custom = tmp_path / "policy.yaml"
    text = DEFAULT_POLICY_PATH.read_text(encoding="utf-8").replace(
        "  - {flag: use-ray, category: network_exposure}", "  - {flag: enable-torch-compile, category: code_execution}"
    )
    custom.write_text(text, encoding="utf-8")
    from domain.flags import validate_server_args

    report = validate_server_args({"enable-torch-compile": True}, "0.5.23", model_dirs=[], policy=load_policy(custom))
    assert report.codes() == ["forbidden"]
    assert validate_server_args({"enable-torch-compile": True}, "0.5.23", model_dirs=[]).ok


def test_a_policy_naming_an_unknown_category_fails_to_load(tmp_path: Path) -> None:
    from domain.flags._data import DataFileError

    custom = tmp_path / "policy.yaml"
    text = DEFAULT_POLICY_PATH.read_text(encoding="utf-8")
    custom.write_text(text.replace("category: code_execution}", "category: nonsense}", 1), encoding="utf-8")
    with pytest.raises(DataFileError, match="nonsense"):
        load_policy(custom)


def test_an_edited_policy_file_is_read_again_without_a_restart(tmp_path) -> None:
    """The administrator edits the policy on a live host: the app and the runner see it."""
    import os

    from domain.flags.policy import DEFAULT_POLICY_PATH, load_policy

    path = tmp_path / "policy.yaml"
    text = DEFAULT_POLICY_PATH.read_text(encoding="utf-8")
    path.write_text(text, encoding="utf-8")
    before = load_policy(path)
    assert "enable-dp-attention" not in before.runner_owned
    path.write_text(text.replace("    - gated-launch-port", "    - gated-launch-port\n    - enable-dp-attention"),
                    encoding="utf-8")
    os.utime(path, ns=(time_ns := os.stat(path).st_mtime_ns + 1_000_000, time_ns))
    assert "enable-dp-attention" in load_policy(path).runner_owned
