"""The same knob on both engines: SGLang's flags beside vLLM's, from ``data/knobs.yaml``.

Two uses (issue 18): the compare page's flag diff lines an SGLang run's ``server_args``
and a vLLM run's up in rows (:func:`align_args`), equivalent knobs in one row and a flag
with no counterpart said as such; the build page carries an SGLang configuration over to
vLLM (:func:`to_vllm_args`) and lists what it could not carry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from domain.flags.dialects.vllm import load_vllm_schema
from domain.flags.knob_map import Knob, knob_for, knobs
from domain.flags.schema import Schema

__all__ = ["Carried", "Knob", "KnobRow", "align_args", "knob_for", "knob_ids", "knobs", "to_vllm_args"]

_SGLANG_NO_CHUNKING = -1  # SGLang's help: "Setting this to -1 means disabling chunked prefill."


# -- lining two runs up ------------------------------------------------------------------------


@dataclass(frozen=True)
class KnobRow:
    """One row of an SGLang-vs-vLLM flag diff.

    ``knob`` is None for a flag no knob claims: it has no counterpart on the other engine,
    and the row has one side only."""

    knob: Knob | None
    sglang: Mapping[str, object] = field(default_factory=dict)
    vllm: Mapping[str, object] = field(default_factory=dict)

    @property
    def paired(self) -> bool:
        """Both engines set this knob."""
        return bool(self.sglang) and bool(self.vllm)

    @property
    def equivalent(self) -> bool:
        """The two sides set the same setting (not just the closest one)."""
        return self.knob is not None and self.knob.equivalent

    @property
    def no_counterpart(self) -> bool:
        return self.knob is None or (self.knob.sglang == () or self.knob.vllm == ())


def align_args(sglang_args: Mapping[str, object], vllm_args: Mapping[str, object]) -> list[KnobRow]:
    """An SGLang run's flags and a vLLM run's flags in rows: one row per knob either sets
    (knobs.yaml order), then each flag no knob claims in a row of its own (SGLang's first)."""
    rows = []
    for knob in knobs():
        left = {f: v for f, v in sglang_args.items() if f in knob.sglang}
        right = {f: v for f, v in vllm_args.items() if f in knob.vllm}
        if left or right:
            rows.append(KnobRow(knob, left, right))
    rows.extend(KnobRow(None, sglang={f: v}) for f, v in sglang_args.items() if knob_for("sglang", f) is None)
    rows.extend(KnobRow(None, vllm={f: v}) for f, v in vllm_args.items() if knob_for("vllm", f) is None)
    return rows


# -- carrying a configuration over ------------------------------------------------------------


@dataclass(frozen=True)
class Carried:
    """An SGLang configuration carried over to vLLM: what moved and what did not."""

    args: dict[str, object]
    moved: tuple[tuple[str, str], ...]  # (SGLang flag, vLLM flag)
    left: tuple[str, ...]  # SGLang flags with no counterpart or no transferable value


def to_vllm_args(sglang_args: Mapping[str, object], vllm_version: str) -> Carried:
    """The vLLM ``server_args`` (for ``vllm_version``) that set the same knobs as ``sglang_args``.

    Only knobs whose values mean the same thing move (``transfer`` in knobs.yaml); the rest
    are listed in ``left`` for the user to decide, never guessed."""
    schema = load_vllm_schema(vllm_version)
    out: dict[str, object] = {}
    moved: list[tuple[str, str]] = []
    left: list[str] = []
    for flag, value in sglang_args.items():
        knob = knob_for("sglang", flag)
        carried = _carry(knob, value, schema) if knob is not None else None
        if not carried:
            left.append(flag)
            continue
        out.update(carried)
        moved.extend((flag, target) for target in carried)
    return Carried(out, tuple(moved), tuple(left))


def _carry(knob: Knob, value: object, schema: Schema) -> dict[str, object] | None:
    if knob.transfer == "chunked_prefill":
        return _carry_chunking(value, schema)
    target = knob.vllm_flag_in(schema)
    if target is None or knob.transfer == "none":
        return None
    if knob.transfer == "same":
        return {target: value}
    if knob.transfer == "invert" and isinstance(value, bool):
        return {target: not value}
    if knob.transfer == "expert_parallel" and isinstance(value, int) and not isinstance(value, bool):
        return {target: True} if value > 1 else None
    return None


def _carry_chunking(value: object, schema: Schema) -> dict[str, object] | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if value == _SGLANG_NO_CHUNKING:
        switch = "enable-chunked-prefill"
        return {switch: False} if switch in schema else None
    return {"max-num-batched-tokens": value} if "max-num-batched-tokens" in schema else None


def knob_ids(rows: Iterable[KnobRow]) -> list[str]:
    """The knob ids in ``rows`` (rows without a knob left out): handy for page tests."""
    return [row.knob.id for row in rows if row.knob is not None]
