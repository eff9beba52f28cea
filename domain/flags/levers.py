"""The seed's lever flags with their "why look at it" / "caution" notes, and what each
kind of parallelism splits; both from ``data/levers.yaml``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from domain.flags._data import DataFileError, bilingual, data_file


@dataclass(frozen=True)
class LeverNote:
    flag: str  # the current spelling the note is keyed by
    also: tuple[str, ...]  # older or sibling spellings it covers
    why: Mapping[str, str]
    caution: Mapping[str, str]


@dataclass(frozen=True)
class ParallelismEntry:
    key: str
    flag: str
    name: Mapping[str, str]
    splits: Mapping[str, str]


@lru_cache(maxsize=1)
def lever_notes() -> tuple[LeverNote, ...]:
    raw = data_file("levers.yaml")
    try:
        return tuple(
            LeverNote(
                flag=str(flag),
                also=tuple(entry.get("also") or ()),
                why=bilingual(entry["why"], f"levers.yaml: {flag}.why"),
                caution=bilingual(entry["caution"], f"levers.yaml: {flag}.caution"),
            )
            for flag, entry in raw["levers"].items()
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise DataFileError(f"levers.yaml: malformed entry {exc}") from exc


def lever_note(flag: str) -> LeverNote | None:
    """The note for ``flag`` under any of its spellings (``cuda-graph-max-bs`` included)."""
    return next((n for n in lever_notes() if flag == n.flag or flag in n.also), None)


def lever_flags() -> tuple[str, ...]:
    """Every spelling the seed's levers go by, across versions."""
    return tuple(name for note in lever_notes() for name in (note.flag, *note.also))


@lru_cache(maxsize=1)
def parallelism_glossary() -> tuple[ParallelismEntry, ...]:
    raw = data_file("levers.yaml")
    try:
        return tuple(
            ParallelismEntry(
                key=str(e["key"]),
                flag=str(e["flag"]),
                name=bilingual(e["name"], f"levers.yaml: {e['key']}.name"),
                splits=bilingual(e["splits"], f"levers.yaml: {e['key']}.splits"),
            )
            for e in raw["parallelism"]
        )
    except (KeyError, TypeError) as exc:
        raise DataFileError(f"levers.yaml: malformed parallelism entry {exc}") from exc
