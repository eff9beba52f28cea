"""emulator/build_tokenizer.py: deterministic, idempotent, and usable by the emulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.build_tokenizer import VOCAB_SIZE, build, main
from emulator.tokens import TokenText


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tokenizer")
    assert sorted(build(directory)) == ["chat_template.jinja", "tokenizer.json", "tokenizer_config.json"]
    return directory


def test_build_is_deterministic_and_idempotent(built: Path, tmp_path: Path) -> None:
    assert main([str(tmp_path)]) == 0
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (built / name).read_bytes() == (tmp_path / name).read_bytes(), name
    mtime = (tmp_path / "tokenizer.json").stat().st_mtime_ns
    assert build(tmp_path) == []  # up to date: nothing rewritten
    assert (tmp_path / "tokenizer.json").stat().st_mtime_ns == mtime


def test_emitted_tokens_round_trip(built: Path) -> None:
    tokens = TokenText(built)
    assert tokens.vocab_size == VOCAB_SIZE
    assert len(tokens.emit_ids) > 1000
    seed = TokenText.seed([1, 2, 3])
    ids = [tokens.output_id(seed, i) for i in range(500)]
    text = "".join(tokens.pieces[i] for i in ids)
    assert tokens.encode(text) == ids  # what bench_serving's retokenization relies on
    assert tokens.encode("Any text at all, even 123 or ünïcode!")  # byte-level: nothing is unknown
