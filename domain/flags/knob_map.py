"""The knob map: which flag of one engine sets the same knob on another (``data/knobs.yaml``).

A plan written for one engine often carries a flag of the other (``max-running-requests``
on a vLLM plan): the flag is refused there like any unknown one, and
:func:`counterpart_issue` says whose flag it is and which flag of the plan's engine sets
the same knob, so every place a plan is checked (``runner check``, ``runner submit``,
the Build form, the runner before launch) offers it.  The compare page's rows and the
Build page's carry-over (``knobs.py``) read the same table.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from domain.flags._data import DataFileError, bilingual, data_file
from domain.flags.issues import UNKNOWN_FLAG, FlagIssue

Transfer = Literal["same", "invert", "chunked_prefill", "expert_parallel", "none"]
_TRANSFERS: frozenset[str] = frozenset({"same", "invert", "chunked_prefill", "expert_parallel", "none"})
# The engines knobs.yaml has a column for, and how a message names them.
ENGINE_NAMES = {"sglang": "SGLang", "vllm": "vLLM"}


@dataclass(frozen=True)
class Knob:
    id: str
    name: Mapping[str, str]
    sglang: tuple[str, ...]  # every SGLang spelling, any shipped version
    vllm: tuple[str, ...]  # every vLLM spelling, any shipped version
    transfer: Transfer
    equivalent: bool  # False: the closest counterpart, not the same setting (see note)
    note: Mapping[str, str]

    def flags(self, engine: str) -> tuple[str, ...]:
        """This knob's spellings on ``engine`` (none for an engine knobs.yaml has no column for)."""
        return {"sglang": self.sglang, "vllm": self.vllm}.get(engine, ())

    def flag_in(self, engine: str, schema: Container[str]) -> str | None:
        """The first of this knob's ``engine`` spellings that ``schema`` has (its positive one)."""
        return next((f for f in self.flags(engine) if f in schema), None)

    def vllm_flag_in(self, schema: Container[str]) -> str | None:
        return self.flag_in("vllm", schema)


@lru_cache(maxsize=1)
def knobs() -> tuple[Knob, ...]:
    raw = data_file("knobs.yaml")
    try:
        return tuple(_knob_from(entry) for entry in raw["knobs"])
    except (KeyError, TypeError) as exc:
        raise DataFileError(f"knobs.yaml: malformed entry {exc}") from exc


def _knob_from(entry: Mapping[str, Any]) -> Knob:
    where = f"knobs.yaml: {entry['id']}"
    if entry["transfer"] not in _TRANSFERS:
        raise DataFileError(f"{where}: unknown transfer {entry['transfer']!r}")
    return Knob(
        id=str(entry["id"]),
        name=bilingual(entry["name"], where),
        sglang=tuple(entry.get("sglang") or ()),
        vllm=tuple(entry.get("vllm") or ()),
        transfer=entry["transfer"],
        equivalent=bool(entry["equivalent"]),
        note=bilingual(entry["note"], where),
    )


def knob_for(engine: str, flag: str) -> Knob | None:
    """The knob an ``engine`` ("sglang" or "vllm") flag belongs to; None: no counterpart."""
    return next((knob for knob in knobs() if flag in knob.flags(engine)), None)


def counterpart_issue(engine: str, flag: str, schema: Container[str], version: str) -> FlagIssue | None:
    """The refusal of ``flag`` (not a flag of ``engine`` in any version) when another engine
    spells it: naming that engine and, where the knob map has one in ``schema``, the flag of
    ``engine`` that sets the same knob, offered as the candidate.  None: no engine spells it."""
    for other in ENGINE_NAMES:
        knob = knob_for(other, flag) if other != engine else None
        if knob is not None:
            return _issue(engine, other, flag, knob, knob.flag_in(engine, schema), version)
    return None


def _issue(engine: str, other: str, flag: str, knob: Knob, target: str | None, version: str) -> FlagIssue:
    params = {"version": version, "engine": ENGINE_NAMES.get(engine, engine), "other": ENGINE_NAMES[other]}
    if target is None:
        return FlagIssue(flag, "error", UNKNOWN_FLAG, "other_engine_none", params, note=knob.note)
    detail = "other_engine" if knob.equivalent else "other_engine_closest"
    note = None if knob.equivalent else knob.note
    return FlagIssue(flag, "error", UNKNOWN_FLAG, detail, {**params, "counterpart": target}, candidates=(target,),
                     note=note)
