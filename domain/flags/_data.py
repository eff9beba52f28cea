"""Loading the flag package's YAML data files (policy, drift table, risk layers, ...).

The files are plain data that an administrator or the team edits; they are read with a
safe loader only (``domain/core/data_yaml.py``), and each loader in this package turns
the raw mapping into typed objects so a malformed file fails at load time with the
file's name.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import yaml

from domain.core.data_yaml import load_data_yaml

DATA_DIR = Path(__file__).resolve().parent / "data"
T = TypeVar("T")


class DataFileError(ValueError):
    """A data file is missing, unreadable or not shaped as its loader expects."""


def load_yaml_file(path: Path) -> dict[str, Any]:
    """The mapping at the top of ``path``, cached by the file's modification time and size:
    most data files change only on deploy, but the flag policy is edited by an
    administrator on a live host, and the app and the runner must both see the edit."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise DataFileError(f"{path}: {exc}") from exc
    return _load_yaml_file(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _load_yaml_file(path: Path, _mtime_ns: int, _size: int) -> dict[str, Any]:
    try:
        loaded = load_data_yaml(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise DataFileError(f"{path}: {exc}") from exc
    if not isinstance(loaded, dict):
        raise DataFileError(f"{path}: expected a mapping at the top level")
    return loaded


def data_file(name: str) -> dict[str, Any]:
    """A file from this package's ``data/`` directory, by relative name."""
    return load_yaml_file(DATA_DIR / name)


def data_entries(name: str, key: str, build: Callable[[Any], T]) -> tuple[T, ...]:
    """Each entry of the list under ``key`` in a data file, built by ``build``; a missing
    field or a wrong type is a DataFileError naming the file."""
    raw = data_file(name)
    try:
        return tuple(build(entry) for entry in raw[key])
    except (KeyError, TypeError) as exc:
        raise DataFileError(f"{name}: malformed entry {exc}") from exc


def bilingual(raw: object, where: str) -> dict[str, str]:
    """A ``{ja: ..., en: ...}`` mapping from a data file, checked."""
    if not isinstance(raw, dict) or not all(isinstance(raw.get(k), str) for k in ("ja", "en")):
        raise DataFileError(f"{where}: expected a mapping with 'ja' and 'en' texts")
    return {"ja": raw["ja"], "en": raw["en"]}


def pick_language(texts: dict[str, str], lang: str) -> str:
    return texts.get(lang) or texts["en"]


def forget_cached_files() -> None:
    """Drop every cached file (a content change that kept mtime and size, in a test)."""
    _load_yaml_file.cache_clear()
