"""The one UI string catalogue, Japanese and English.

Strings live in YAML files beside this module, one file per area (``core.yaml``,
``flags.yaml``, ...), merged into one catalogue at import.  A key may be defined in only
one file, and every key must carry both ``ja`` and ``en`` (``tests/test_i18n.py``).
Metric names (TTFT, TPOT, ITL) stay as the field writes them in both languages.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from domain.core.data_yaml import load_data_yaml

LANGUAGES = ("ja", "en")
_HERE = Path(__file__).resolve().parent


class CatalogueError(ValueError):
    pass


@lru_cache(maxsize=1)
def catalogue() -> dict[str, dict[str, str]]:
    merged: dict[str, dict[str, str]] = {}
    for path in sorted(_HERE.glob("*.yaml")):
        entries = load_data_yaml(path.read_text(encoding="utf-8")) or {}
        for key, texts in entries.items():
            if key in merged:
                raise CatalogueError(f"string key {key!r} defined twice (again in {path.name})")
            merged[key] = texts
    return merged


def t(key: str, lang: str, /, **params: Any) -> str:
    """The text for ``key`` in ``lang``, formatted with ``params``.

    An unknown key raises KeyError: a missing string is a bug the tests catch, not
    something to paper over at run time."""
    text = catalogue()[key][lang if lang in LANGUAGES else "en"]
    return text.format(**params) if params else text
