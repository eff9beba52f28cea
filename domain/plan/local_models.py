"""Models on the host's disk, under ``BENCHDECK_MODEL_DIRS``: plain model directories and
Hugging Face cache layouts (``models--Org--Name/snapshots/<sha>``, resolved to the snapshot
``refs/main`` names, else the newest), each with what its ``config.json`` says.

The memory-fit and context checks read the model's shape from that ``config.json``
(``preset_from_config``), not from a name match; ``missing_files`` lists the weight shards
an index names (and the tokenizer files) that are absent or unreadable, so a plan fails
before a launch rather than minutes into one.  An HF id is looked up in the cache layouts
(``find_hf_id``): the server runs offline, so an id that is not on disk is refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain.plan.presets import ModelPreset

INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
SINGLE_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
_MAX_DEPTH = 3  # /models/<org>/<name> at most; deeper trees are not scanned


@dataclass(frozen=True)
class LocalModel:
    """One model directory and the facts its config.json gives."""

    path: Path  # the directory the server is given (an HF cache: the snapshot)
    name: str  # Org/Name for an HF cache entry, else the directory's name
    architecture: str | None
    layers: int | None
    experts: int | None
    dtype: str | None
    context_length: int | None
    size_gb: float

    def as_row(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path), "architecture": self.architecture, "layers": self.layers,
                "experts": self.experts, "dtype": self.dtype, "context_length": self.context_length,
                "size_gb": round(self.size_gb, 1)}


def read_config(model_dir: Path) -> dict[str, Any] | None:
    """The directory's config.json (a multimodal model's text_config merged in), or None."""
    try:
        raw = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    text = raw.get("text_config")
    return {**raw, **text} if isinstance(text, dict) else raw


def _dtype(config: dict[str, Any]) -> str | None:
    quant = config.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method"):
        return str(quant["quant_method"])
    value = config.get("torch_dtype") or config.get("dtype")
    return str(value) if value else None


def _size_gb(model_dir: Path) -> float:
    """Bytes of the files in the directory, following the cache's links to its blobs."""
    total = 0
    for entry in model_dir.iterdir():
        try:
            if entry.is_file():
                total += entry.stat().st_size
        except OSError:
            continue
    return total / 1e9


def describe(model_dir: Path, name: str) -> LocalModel | None:
    config = read_config(model_dir)
    if config is None:
        return None
    architectures = config.get("architectures") or [None]
    return LocalModel(model_dir, name, architectures[0], config.get("num_hidden_layers"),
                      config.get("num_experts") or config.get("n_routed_experts"), _dtype(config),
                      config.get("max_position_embeddings"), _size_gb(model_dir))


def hf_snapshot(cache_entry: Path) -> Path | None:
    """``models--Org--Name`` -> the snapshot ``refs/main`` points at, else the newest one."""
    snapshots = cache_entry / "snapshots"
    try:
        ref = (cache_entry / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        ref = ""
    if ref and (snapshots / ref).is_dir():
        return snapshots / ref
    try:
        found = [p for p in snapshots.iterdir() if p.is_dir()]
    except OSError:
        return None
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _hf_name(cache_entry: Path) -> str:
    return cache_entry.name.removeprefix("models--").replace("--", "/", 1)


def _candidates(directory: Path, depth: int = 0) -> Iterator[tuple[Path, str]]:
    """(model directory, name) under ``directory``: HF cache entries and dirs with a config.json."""
    try:
        entries = sorted(p for p in directory.iterdir() if p.is_dir())
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith("models--"):
            snapshot = hf_snapshot(entry)
            if snapshot is not None:
                yield snapshot, _hf_name(entry)
        elif (entry / "config.json").is_file():
            yield entry, entry.name
        elif depth + 1 < _MAX_DEPTH and not entry.name.startswith("."):
            yield from _candidates(entry, depth + 1)


def models_under(directory: Path) -> list[LocalModel]:
    """Every model found under one directory (the directory itself when it is a model)."""
    if (directory / "config.json").is_file():
        found = describe(directory, directory.name)
        return [found] if found else []
    return [m for path, name in _candidates(directory) if (m := describe(path, name)) is not None]


def find_models(dirs: Sequence[Path]) -> list[LocalModel]:
    return [model for directory in dirs for model in models_under(directory)]


def find_hf_id(hf_id: str, dirs: Sequence[Path]) -> Path | None:
    """The local snapshot of an HF id in one of the cache layouts, or None."""
    entry_name = "models--" + hf_id.replace("/", "--")
    for directory in dirs:
        for root in (directory, directory / "hub"):
            snapshot = hf_snapshot(root / entry_name) if (root / entry_name).is_dir() else None
            if snapshot is not None and (snapshot / "config.json").is_file():
                return snapshot
    return None


def local_model_dir(model_ref: str, dirs: Sequence[Path]) -> Path | None:
    """The directory holding a plan's model on this host: its path, or an HF id's snapshot."""
    if os.path.isabs(model_ref):
        path = Path(model_ref)
        return path if (path / "config.json").is_file() else None
    return find_hf_id(model_ref, dirs)


# --- what must be there before a launch ---------------------------------------------------------
def _readable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.R_OK)


def _weight_files(model_dir: Path) -> list[str] | None:
    """The files the weights are in: every shard an index names, a single file, or None
    when the directory shows neither."""
    for index in INDEX_FILES:
        try:
            weight_map = json.loads((model_dir / index).read_text(encoding="utf-8")).get("weight_map", {})
        except OSError:
            continue
        except ValueError:
            return [index]  # an index that does not parse: named as the broken file
        return sorted(set(weight_map.values()))
    present = [name for name in SINGLE_WEIGHTS if (model_dir / name).exists()]
    return present or None


def missing_files(model_dir: Path) -> list[str]:
    """The config, weight shards and tokenizer files the server needs that are absent or
    unreadable here (an empty list: all there)."""
    if not os.access(model_dir, os.R_OK | os.X_OK):
        return [str(model_dir)]
    missing = [] if _readable(model_dir / "config.json") else ["config.json"]
    weights = _weight_files(model_dir)
    missing += ["model.safetensors.index.json"] if weights is None else [
        name for name in weights if not _readable(model_dir / name)]
    if not any(_readable(model_dir / name) for name in TOKENIZER_FILES):
        missing.append(" | ".join(TOKENIZER_FILES))
    return missing


# --- the model's shape for the memory fit ------------------------------------------------------
def preset_from_config(model_dir: Path, name: str) -> ModelPreset | None:
    """A MoE model's shape from its config.json (Qwen3-MoE's field names), for the memory
    fit and the context check; None for a config that does not give all of it."""
    config = read_config(model_dir)
    if config is None or not config.get("num_experts"):
        return None
    try:
        shape = _shape(config)
    except (KeyError, TypeError, ValueError):
        return None
    fp8 = _dtype(config) == "fp8"
    draft = ModelPreset(key=f"local:{name}", hf_id=name, **shape, total_params_b=0.0, active_params_b=0.0,
                        weight_dtype="fp8" if fp8 else "bf16", quant_block=_quant_block(config) if fp8 else None)
    total = draft.params_from_config
    active = total - draft.moe_params + draft.moe_params * draft.experts_per_token // draft.num_experts
    return ModelPreset(**{**draft.__dict__, "total_params_b": total / 1e9, "active_params_b": active / 1e9})


def _shape(config: dict[str, Any]) -> dict[str, Any]:
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    return {"num_layers": int(config["num_hidden_layers"]), "hidden_size": hidden, "num_attention_heads": heads,
            "num_kv_heads": int(config.get("num_key_value_heads", heads)),
            "head_dim": int(config.get("head_dim") or hidden // heads), "num_experts": int(config["num_experts"]),
            "experts_per_token": int(config["num_experts_per_tok"]),
            "moe_intermediate_size": int(config["moe_intermediate_size"]), "vocab_size": int(config["vocab_size"]),
            "max_position_embeddings": int(config["max_position_embeddings"]),
            "tie_word_embeddings": bool(config.get("tie_word_embeddings", False))}


def _quant_block(config: dict[str, Any]) -> int | None:
    block = (config.get("quantization_config") or {}).get("weight_block_size")
    return int(block[0]) if isinstance(block, list) and block else None


def model_shape_for(model_ref: str, dirs: Sequence[Path]) -> ModelPreset | None:
    """The model's shape for the memory fit: its config.json where the model is on this
    host's disk (a path, or an HF id in a cache layout), else a preset matched by name."""
    from domain.plan.presets import model_preset_for

    local = local_model_dir(model_ref, dirs)
    shape = preset_from_config(local, model_ref) if local is not None else None
    return shape or model_preset_for(model_ref)


def local_context_length(model_ref: str, dirs: Sequence[Path]) -> tuple[int, str] | None:
    """(max_position_embeddings, the config.json it came from) for a model on this disk."""
    local = local_model_dir(model_ref, dirs)
    config = read_config(local) if local is not None else None
    value = (config or {}).get("max_position_embeddings")
    if local is None or not isinstance(value, int) or value <= 0:
        return None
    return value, str(local / "config.json")


def model_disk_errors(model_ref: str, dirs: Sequence[Path], *, downloads_allowed: bool, lang: str) -> list[str]:
    """A real engine's model, checked where it will be read: an HF id that no cache layout
    under ``dirs`` holds is refused (the server runs offline), and a directory that lacks a
    weight shard, its config or its tokenizer is named with what is missing."""
    from domain.core.i18n import t

    local = local_model_dir(model_ref, dirs)
    if local is None:
        if os.path.isabs(model_ref) or not downloads_allowed:
            searched = ", ".join(str(d) for d in dirs) or "-"
            return [t("check.model_not_on_disk", lang, model=model_ref, dirs=searched)]
        return []
    missing = missing_files(local)
    return [t("check.model_files_missing", lang, path=local, files=", ".join(missing))] if missing else []
