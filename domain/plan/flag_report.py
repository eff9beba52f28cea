"""One configuration, all flag-level checks, and their readable text for ``runner check``.

:func:`check_configuration` runs validation, the rule-risk assessment and the memory-fit
pre-check; :func:`format_check_report` turns the result into plain text in Japanese or
English (errors, warnings, translations, risks, memory fit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from domain.core.i18n import t
from domain.flags.drift import apply_translations
from domain.flags.issues import FlagIssue, FlagReport
from domain.flags.policy import Policy
from domain.flags.risk import DEFAULT_PROFILE, RiskReport, assess_risk
from domain.flags.schema import Schema, load_schema
from domain.flags.validate import validate_server_args
from domain.plan.local_models import model_shape_for
from domain.plan.memory_fit import MemoryFit, memory_fit_for_args
from domain.plan.presets import gpu_preset, model_preset_for

_INDENT = "  "


@dataclass(frozen=True)
class ConfigCheck:
    server_args: Mapping[str, object]
    flags: FlagReport
    risk: RiskReport
    memory: MemoryFit | None
    model: str | None  # the plan's model reference, for the memory heading

    @property
    def ok(self) -> bool:
        """No flag error and no broken rule (warnings, risks and memory are advice)."""
        return self.flags.ok and self.risk.ok

    def text(self, lang: str) -> str:
        return format_check_report(self, lang)


def check_configuration(
    server_args: Mapping[str, object],
    version: str,
    *,
    model_dirs: Sequence[Path],
    model: str | None = None,
    gpu_type: str | None = None,
    gpu_count: int | None = None,
    profile: str = DEFAULT_PROFILE,
    input_len: int | None = None,
    output_len: int | None = None,
    concurrency: int | None = None,
    policy: Policy | None = None,
    schema: Schema | None = None,
) -> ConfigCheck:
    """Validation + risk + memory fit for one configuration (memory only for known presets)."""
    schema = schema or load_schema(version)
    flags = validate_server_args(server_args, version, model_dirs=model_dirs, model=model, policy=policy, schema=schema)
    risk = assess_risk(server_args, version, profile, schema=schema)
    model_preset = model_shape_for(model, model_dirs) if model else None
    gpu = gpu_preset(gpu_type) if gpu_type else None
    memory = None
    if model_preset is not None and gpu is not None:
        memory = memory_fit_for_args(
            server_args,
            model_preset,
            gpu,
            gpu_count=gpu_count,
            input_len=input_len,
            output_len=output_len,
            concurrency=concurrency,
        )
    return ConfigCheck(dict(server_args), flags, risk, memory, model)


def format_check_report(check: ConfigCheck, lang: str) -> str:
    """Readable text: flag issues by severity, translations, rule risk, memory fit."""
    lines = [t("flags.report.title", lang, version=check.flags.version)]
    lines += _issue_section(check.flags, lang)
    lines += _translation_section(check, lang)
    lines += _risk_section(check.risk, lang)
    lines += _memory_section(check, lang)
    return "\n".join(lines)


def _bullet(text: str, depth: int = 1) -> str:
    """A list item whose continuation lines stay indented under it."""
    pad = _INDENT * depth
    first, *rest = text.split("\n")
    return "\n".join([f"{pad}- {first}", *(f"{pad}  {line}" for line in rest)])


def _issue_section(report: FlagReport, lang: str) -> list[str]:
    groups: list[tuple[str, tuple[FlagIssue, ...]]] = [
        ("flags.report.errors", report.errors),
        ("flags.report.warnings", report.warnings),
        ("flags.report.infos", report.infos),
    ]
    lines: list[str] = []
    for heading, issues in groups:
        if issues:
            lines.append(t(heading, lang) + ":")
            lines.extend(_bullet(issue.text(lang)) for issue in issues)
    return lines or [_INDENT + t("flags.report.no_issues", lang)]


def _translation_section(check: ConfigCheck, lang: str) -> list[str]:
    """The whole configuration rewritten, ready to paste back into the plan."""
    if not check.flags.translations:
        return []
    rewritten = apply_translations(check.server_args, check.flags.translations)
    text = yaml.safe_dump(rewritten, allow_unicode=True, sort_keys=False, default_flow_style=False)
    return [t("flags.report.translations", lang) + ":", *(_INDENT + line for line in text.splitlines())]


def _risk_section(risk: RiskReport, lang: str) -> list[str]:
    profile_name = risk.profile.name.get(lang) or risk.profile.name["en"]
    lines = [t("flags.report.risk", lang, profile=profile_name) + ":"]
    if risk.highest is None and not risk.unclassified:
        return [*lines, _INDENT + t("flags.report.risk_none", lang)]
    if risk.highest is not None:
        level = t(f"flags.risk.level.{risk.highest}", lang)
        lines.append(_INDENT + t("flags.report.risk_highest", lang, level=level))
    if risk.unclassified:
        names = ", ".join(f"--{f}" for f in risk.unclassified)
        lines.append(_INDENT + t("flags.report.unclassified", lang, flags=names))
    lines.extend(_bullet(flag_risk.text(lang)) for flag_risk in risk.flags)
    lines.extend(_bullet(note.text(lang)) for note in risk.notes)
    if risk.broken:
        lines.append(_INDENT + t("flags.report.rules_broken", lang) + ":")
        lines.extend(_bullet(b.text(lang), depth=2) for b in risk.broken)
    else:
        lines.append(_INDENT + t("flags.report.rules_ok", lang))
    return lines


def _memory_section(check: ConfigCheck, lang: str) -> list[str]:
    fit = check.memory
    if fit is None:
        if check.model and model_preset_for(check.model) is None:
            return [t("flags.report.memory_unknown_model", lang, model=check.model)]
        return []
    heading = t(
        "flags.report.memory",
        lang,
        model=check.model or fit.model.hf_id,
        gpu=fit.gpu.key,
        gpu_count=fit.gpu_count if fit.gpu_count is not None else fit.layout.gpus,
    )
    lines = [heading + ":", *(_INDENT + line for line in fit.text(lang).split("\n"))]
    if fit.fraction_is_default:
        fraction = f"{fit.mem_fraction_static:.3f}"
        lines.append(_INDENT + t("flags.report.memory_assumed_fraction", lang, fraction=fraction))
    return lines
