"""What flag validation reports: issues with stable codes, rendered through the catalogue.

An issue carries data, not prose: a ``code`` (and an optional ``detail`` sub-code) that
tests and the UI can rely on, the ``params`` its message needs, and any suggested
translation.  The words come from ``domain/core/i18n/flags.yaml`` at render time, so every
message exists in Japanese and English.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from domain.core.i18n import t

Severity = Literal["error", "warning", "info"]
ParamValue = str | int | float

# Stable codes; the UI and tests key on these, so they never change meaning.
UNKNOWN_FLAG = "unknown_flag"
BAD_TYPE = "bad_type"
BAD_CHOICE = "bad_choice"
MISSING_VALUE = "missing_value"
BAD_NARGS = "bad_nargs"
DEPRECATED = "deprecated"
REMOVED_IN_VERSION = "removed_in_version"
NOT_YET_AVAILABLE = "not_yet_available"
RUNNER_OWNED = "runner_owned"
FORBIDDEN = "forbidden"
BAD_VALUE = "bad_value"
BAD_MODEL_REF = "bad_model_ref"
HIDDEN_FLAG = "hidden_flag"
DUPLICATE_FLAG = "duplicate_flag"


def format_flag_args(args: Mapping[str, object]) -> str:
    """``{"attn-dp-size": 8, "x": True}`` -> ``--attn-dp-size 8 --x`` for messages."""
    parts: list[str] = []
    for name, value in args.items():
        if value is True:
            parts.append(f"--{name}")
        elif isinstance(value, list | tuple):
            parts.append(" ".join([f"--{name}", *(str(v) for v in value)]))
        else:
            parts.append(f"--{name} {value}")
    return " ".join(parts)


@dataclass(frozen=True)
class Translation:
    """A suggested rewrite: drop ``remove`` from the configuration, then set ``add``."""

    rule: str
    remove: tuple[str, ...]
    add: Mapping[str, object]
    removed_values: Mapping[str, object] = field(default_factory=dict)
    note: Mapping[str, str] | None = None  # ja/en text from the drift table

    def text(self, lang: str) -> str:
        before = format_flag_args(self.removed_values) or " ".join(f"--{n}" for n in self.remove)
        after = format_flag_args(self.add) or t("flags.translation.nothing", lang)
        line = t("flags.translation.line", lang, before=before, after=after)
        return f"{line} ({self.note[lang]})" if self.note else line


@dataclass(frozen=True)
class FlagIssue:
    """One finding about one flag (or about the model reference)."""

    flag: str
    severity: Severity
    code: str
    detail: str | None = None
    params: Mapping[str, ParamValue] = field(default_factory=dict)
    translation: Translation | None = None
    candidates: tuple[str, ...] = ()
    # Explanation taken from an administrator's data file (policy reason), ja and en.
    note: Mapping[str, str] | None = None

    @property
    def message_key(self) -> str:
        return f"flags.issue.{self.code}.{self.detail}" if self.detail else f"flags.issue.{self.code}"

    def message(self, lang: str) -> str:
        """The one-line message, without suggestions."""
        return t(self.message_key, lang, flag=self.flag, **self.params)

    def text(self, lang: str) -> str:
        """The message plus its reason, the nearest flags and the offered translation."""
        lines = [self.message(lang)]
        if self.note:
            lines.append(self.note.get(lang) or self.note["en"])
        if self.candidates:
            names = ", ".join(f"--{c}" for c in self.candidates)
            lines.append(t("flags.issue.candidates", lang, candidates=names))
        if self.translation is not None:
            lines.append(self.translation.text(lang))
        return "\n".join(lines)


@dataclass(frozen=True)
class FlagReport:
    """All findings for one configuration against one SGLang version."""

    version: str
    issues: tuple[FlagIssue, ...]

    @property
    def errors(self) -> tuple[FlagIssue, ...]:
        return tuple(i for i in self.issues if i.severity == "error")

    @property
    def warnings(self) -> tuple[FlagIssue, ...]:
        return tuple(i for i in self.issues if i.severity == "warning")

    @property
    def infos(self) -> tuple[FlagIssue, ...]:
        return tuple(i for i in self.issues if i.severity == "info")

    @property
    def ok(self) -> bool:
        """No errors: the configuration may be launched (warnings are shown, not blocking)."""
        return not self.errors

    @property
    def translations(self) -> tuple[Translation, ...]:
        """Each offered translation once, in the order the flags appear."""
        seen: dict[str, Translation] = {}
        for issue in self.issues:
            if issue.translation is not None:
                seen.setdefault(issue.translation.rule, issue.translation)
        return tuple(seen.values())

    def codes(self, flag: str | None = None) -> list[str]:
        """The codes reported (for one flag, or all): handy in tests and logs."""
        return [i.code for i in self.issues if flag is None or i.flag == flag]

    def for_flag(self, flag: str) -> tuple[FlagIssue, ...]:
        return tuple(i for i in self.issues if i.flag == flag)
