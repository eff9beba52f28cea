"""A model directory in the Hugging Face cache layout, as a host that ran
``huggingface-cli download`` has it: ``models--Org--Name/{blobs,refs/main,snapshots/<sha>}``
with the snapshot's files linked to blobs.  The config.json is Qwen3-30B-A3B's published
one (tests/fixtures/qwen3_30b_a3b), the tokenizer the local one built at set-up
(data/tokenizer); the weight shards are PLACEHOLDERS (a few bytes each, named by a real
index): nothing here loads weights, the checks only look for the files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.conftest import ROOT

CONFIG = ROOT / "tests" / "fixtures" / "qwen3_30b_a3b" / "config.json"
TOKENIZER = ROOT / "data" / "tokenizer"
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
SNAPSHOT = "9e1b7c3d5f0a2b4c6d8e0f1a3b5c7d9e1f3a5b7c"


def _blob(entry: Path, snapshot: Path, name: str, data: bytes) -> None:
    digest = hashlib.sha256(data).hexdigest()
    (entry / "blobs" / digest).write_bytes(data)
    (snapshot / name).symlink_to(Path("../../blobs") / digest)


def make_hf_cache(root: Path, hf_id: str = "Qwen/Qwen3-30B-A3B") -> Path:
    """The cache layout of ``hf_id`` under ``root``; returns the snapshot directory."""
    entry = root / ("models--" + hf_id.replace("/", "--"))
    snapshot = entry / "snapshots" / SNAPSHOT
    (entry / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text(SNAPSHOT, encoding="utf-8")
    _blob(entry, snapshot, "config.json", CONFIG.read_bytes())
    for path in sorted(TOKENIZER.iterdir()):
        _blob(entry, snapshot, path.name, path.read_bytes())
    weight_map = {f"model.layers.{i}.mlp.gate.weight": SHARDS[i % 2] for i in range(48)}
    index = {"metadata": {"total_size": 61_064_000_000}, "weight_map": weight_map}
    _blob(entry, snapshot, "model.safetensors.index.json", json.dumps(index).encode())
    for shard in SHARDS:
        _blob(entry, snapshot, shard, f"placeholder {shard}".encode())
    return snapshot


def remove_shard(snapshot: Path, shard: str = SHARDS[1]) -> None:
    (snapshot / shard).unlink()

