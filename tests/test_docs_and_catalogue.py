"""Every setting is documented in the README; every UI string exists in both languages."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from domain.core.i18n import _HERE, LANGUAGES, catalogue, t
from domain.core.settings import Settings
from tests.conftest import ROOT


def test_every_setting_is_documented_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`(BENCHDECK_[A-Z0-9_]+)`", readme))
    missing = {f"BENCHDECK_{name.upper()}" for name in Settings.model_fields} - documented
    assert not missing, f"settings missing from the README: {sorted(missing)}"


def test_every_catalogue_key_has_both_languages() -> None:
    lacking = {
        key: sorted(set(LANGUAGES) - set(texts))
        for key, texts in catalogue().items()
        if set(LANGUAGES) - {lang for lang, text in texts.items() if isinstance(text, str) and text.strip()}
    }
    assert not lacking, f"keys lacking a language: {lacking}"


def test_catalogue_keys_are_unique_across_files() -> None:
    seen: dict[str, str] = {}
    for path in sorted(Path(_HERE).glob("*.yaml")):
        for key in yaml.safe_load(path.read_text(encoding="utf-8")) or {}:
            assert key not in seen, f"{key} in both {seen[key]} and {path.name}"
            seen[key] = path.name


def test_every_key_used_in_code_exists() -> None:
    used: set[str] = set()
    for path in [ROOT / "app.py", *ROOT.glob("pages/*.py"), *ROOT.glob("runner/**/*.py"), *ROOT.glob("domain/**/*.py")]:
        used |= set(re.findall(r"""\bt\(\s*["']([a-z_]+\.[a-z0-9_.]+)["']\s*[,)]""", path.read_text(encoding="utf-8")))
    missing = used - set(catalogue())
    assert not missing, f"keys used but not in the catalogue: {sorted(missing)}"


def test_metric_names_stay_as_the_field_writes_them() -> None:
    for texts in catalogue().values():
        for metric in ("TTFT", "TPOT", "ITL"):
            if metric in texts["en"]:
                assert metric in texts["ja"]
    assert t("status.succeeded", "ja") == "成功"
