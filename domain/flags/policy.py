"""The runner host's security policy for flags and model references.

The policy is data (``data/policy.yaml`` by default; the administrator may point the
runner at another file).  This module turns it into a :class:`Policy` and answers the
questions validation asks: is this flag runner-owned, forbidden, or forbidden with this
value; is this host loopback; does this model reference stay inside the allowed
directories.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain.flags._data import DATA_DIR, DataFileError, bilingual, load_yaml_file
from domain.flags.issues import BAD_MODEL_REF, FORBIDDEN, RUNNER_OWNED, FlagIssue
from domain.flags.strings import has_control_characters

DEFAULT_POLICY_PATH = DATA_DIR / "policy.yaml"

# An HF repository id: exactly one slash, each part starting with a letter or digit, so
# '..', '.hidden' and '-option' never pass as ids (SecurityReference S11).
_HF_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$", re.ASCII)


@dataclass(frozen=True)
class ValueRule:
    """A flag accepted only with some values: ``refused`` values fail, or only ``allowed`` pass."""

    flag: str
    category: str
    refused: frozenset[str] = frozenset()
    allowed: frozenset[str] | None = None

    def refuses(self, value: object) -> bool:
        text = str(value)
        if self.allowed is not None:
            return text not in self.allowed
        return text in self.refused


@dataclass(frozen=True)
class Policy:
    source: Path
    allowed_hosts: frozenset[str]
    runner_owned: frozenset[str]
    runner_owned_why: Mapping[str, str]
    categories: Mapping[str, Mapping[str, str]]
    forbidden: Mapping[str, str]  # flag -> category
    value_rules: Mapping[str, ValueRule]
    model_ref_flags: frozenset[str]
    path_flags: frozenset[str]
    free_text_flags: frozenset[str]

    def reason(self, category: str) -> Mapping[str, str]:
        return self.categories[category]


def load_policy(path: Path | None = None) -> Policy:
    """Read and check a policy file (the shipped default when ``path`` is None)."""
    source = path or DEFAULT_POLICY_PATH
    raw = load_yaml_file(source)
    try:
        return _policy_from_mapping(raw, source)
    except (KeyError, TypeError) as exc:
        raise DataFileError(f"{source}: missing or malformed entry {exc}") from exc


def _policy_from_mapping(raw: Mapping[str, Any], source: Path) -> Policy:
    categories = {name: bilingual(texts, f"{source}: category {name}") for name, texts in raw["categories"].items()}
    forbidden = {str(e["flag"]): str(e["category"]) for e in raw.get("forbidden") or ()}
    rules = {str(e["flag"]): _value_rule(e) for e in raw.get("forbidden_values") or ()}
    for category in [*forbidden.values(), *(r.category for r in rules.values())]:
        if category not in categories:
            raise DataFileError(f"{source}: unknown category {category!r}")
    owned = raw["runner_owned"]
    return Policy(
        source=source,
        allowed_hosts=frozenset(str(h) for h in raw["allowed_hosts"]),
        runner_owned=frozenset(str(f) for f in owned["flags"]),
        runner_owned_why=bilingual(owned["why"], f"{source}: runner_owned.why"),
        categories=categories,
        forbidden=forbidden,
        value_rules=rules,
        model_ref_flags=frozenset(raw.get("model_ref_flags") or ()),
        path_flags=frozenset(raw.get("path_flags") or ()),
        free_text_flags=frozenset(raw.get("free_text_flags") or ()),
    )


def _value_rule(entry: Mapping[str, Any]) -> ValueRule:
    allowed = entry.get("allowed")
    return ValueRule(
        flag=str(entry["flag"]),
        category=str(entry["category"]),
        refused=frozenset(str(v) for v in entry.get("values") or ()),
        allowed=frozenset(str(v) for v in allowed) if allowed is not None else None,
    )


def is_allowed_host(host: object, policy: Policy) -> bool:
    return isinstance(host, str) and host in policy.allowed_hosts


def policy_issue(flag: str, value: object, policy: Policy) -> FlagIssue | None:
    """The policy's verdict on one flag and value, before any schema check."""
    if flag == "host" and not is_allowed_host(value, policy):
        # A non-loopback host is a security problem first, and only then runner-owned.
        return FlagIssue(flag, "error", FORBIDDEN, "non_loopback_host", {"value": str(value)})
    if flag in policy.runner_owned:
        return FlagIssue(flag, "error", RUNNER_OWNED, note=policy.runner_owned_why)
    if flag in policy.forbidden:
        category = policy.forbidden[flag]
        return FlagIssue(flag, "error", FORBIDDEN, params={"category": category}, note=policy.reason(category))
    return _value_rule_issue(flag, value, policy)


def _value_rule_issue(flag: str, value: object, policy: Policy) -> FlagIssue | None:
    rule = policy.value_rules.get(flag)
    if rule is None:
        return None
    values = value if isinstance(value, list | tuple) else [value]
    refused = [v for v in values if rule.refuses(v)]
    if not refused:
        return None
    return FlagIssue(
        flag,
        "error",
        FORBIDDEN,
        "value",
        {"value": str(refused[0]), "category": rule.category},
        note=policy.reason(rule.category),
    )


def is_hf_repo_id(text: str) -> bool:
    return bool(_HF_REPO_ID.match(text)) and ".." not in text


def validate_model_ref(model: object, model_dirs: Sequence[Path], *, flag: str = "model") -> FlagIssue | None:
    """None when ``model`` is an HF repo id or an absolute path that resolves inside a model dir.

    Symlinks are resolved before the containment check, and containment is "the
    directory's real path plus a separator", so ``/models-evil`` is not inside ``/models``.
    Existence is not required: the UI host may not see the runner's disks."""
    if not isinstance(model, str) or not model.strip():
        return FlagIssue(flag, "error", BAD_MODEL_REF, "empty")
    if has_control_characters(model):
        return FlagIssue(flag, "error", BAD_MODEL_REF, "control_char")
    if is_hf_repo_id(model):
        return None
    return path_inside_issue(flag, model, model_dirs, code=BAD_MODEL_REF)


def path_inside_issue(flag: str, text: str, model_dirs: Sequence[Path], *, code: str) -> FlagIssue | None:
    """None when ``text`` is an absolute path whose real path lies inside one of ``model_dirs``."""
    dirs = ", ".join(str(d) for d in model_dirs) or "-"
    if not os.path.isabs(text):
        return FlagIssue(flag, "error", code, "relative_path", {"value": text, "dirs": dirs})
    if is_inside_any(Path(text), model_dirs):
        return None
    return FlagIssue(flag, "error", code, "outside_model_dirs", {"value": text, "dirs": dirs})


def is_inside_any(path: Path, dirs: Sequence[Path]) -> bool:
    resolved = os.path.realpath(path)
    for directory in dirs:
        root = os.path.realpath(directory)
        if resolved.startswith(root.rstrip(os.sep) + os.sep):
            return True
    return False
