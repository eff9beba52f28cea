"""Prompt token counting and generated text for the emulator, from the local tokenizer.

bench_serving re-tokenizes the generated text to report
``total_output_tokens_retokenized``, so the emulator only emits tokens that round-trip:
byte-level BPE tokens of the form " word" (a leading space and ASCII letters), each of
which encodes back to itself, so ``len(encode(decode(ids))) == len(ids)``.  Which tokens
a request gets is a deterministic function of its prompt.

Thinking mode follows Qwen3's chat template (see domain/plan/thinking.py): a chat request
with ``chat_template_kwargs.enable_thinking`` false gets the empty reasoning block the
template closes after the generation prompt; with true, the emulated model reasons
before it answers, so a generation that may stop at EOS runs
:meth:`TokenText.thinking_length` tokens longer.  Without the keyword the toy model does
not reason (Qwen3's own default is to reason; the toy template's is not).  The reasoning
is emitted as the same round-tripping " word" tokens as the answer: ``<think>`` is not a
single token of the toy tokenizer, and a tag split into pieces would not re-tokenize to
the count the server reports.
"""

from __future__ import annotations

import json
import zlib
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

# Mean length of a generation that is allowed to stop at EOS (requests without ignore_eos).
NATURAL_EOS_MEAN = 256
# Mean length of the emulated reasoning before the answer (thinking mode on): an emulator
# constant that makes the effect visible, not a measurement of any model.
THINKING_MEAN = 512
# What Qwen3's template appends after "<|im_start|>assistant\n" when enable_thinking is false.
EMPTY_THINK_BLOCK = "<think>\n\n</think>\n\n"


def ensure_tokenizer(directory: Path) -> bool:
    """Build the local tokenizer if it is missing, or if benchdeck built it with an older
    recipe (its ``benchdeck_build_version``); True when it had to be built.  A tokenizer
    directory benchdeck did not build is never touched."""
    if (directory / "tokenizer.json").is_file() and not _stale_build(directory):
        return False
    from emulator.build_tokenizer import build  # trains a BPE: only when the directory is empty

    build(directory)
    return True


def _stale_build(directory: Path) -> bool:
    from emulator.build_tokenizer import BUILD_VERSION

    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    built = config.get("benchdeck_build_version")
    return isinstance(built, int) and built < BUILD_VERSION


class TokenText:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        config_path = directory / "tokenizer_config.json"  # optional in a tokenizer directory
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
        eos = config.get("eos_token")
        eos = eos.get("content") if isinstance(eos, dict) else eos  # older configs nest it
        self.eos_id = self.tokenizer.token_to_id(eos or "") or 0
        self.vocab_size = self.tokenizer.get_vocab_size()
        self.emit_ids = self._round_trip_ids()
        self.pieces = {i: self.tokenizer.decode([i]) for i in self.emit_ids}
        if not self.emit_ids:
            raise ValueError(f"tokenizer in {directory} has no ' word' tokens to emit")

    def _round_trip_ids(self) -> list[int]:
        ids = []
        for token, idx in sorted(self.tokenizer.get_vocab().items(), key=lambda kv: kv[1]):
            word = token[1:]
            if token.startswith("Ġ") and len(word) > 1 and word.isascii() and word.isalpha():
                if self.tokenizer.encode(" " + word, add_special_tokens=False).ids == [idx]:
                    ids.append(idx)
        return ids

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    @staticmethod
    def seed(prompt_ids: Sequence[int]) -> int:
        return zlib.crc32(array("q", prompt_ids).tobytes())

    def output_id(self, seed: int, index: int) -> int:
        # A stride coprime with nearly any list length walks the list without short cycles.
        return self.emit_ids[(seed + index * 7919) % len(self.emit_ids)]

    def natural_length(self, seed: int) -> int:
        """Where an emulated EOS falls: 1 … 2·NATURAL_EOS_MEAN, fixed by the prompt."""
        return 1 + (seed >> 7) % (2 * NATURAL_EOS_MEAN)

    def thinking_length(self, seed: int) -> int:
        """How long the emulated model reasons before answering: 1 … 2·THINKING_MEAN, fixed by
        the prompt (other bits of the seed than :meth:`natural_length`'s)."""
        return 1 + (seed >> 17) % (2 * THINKING_MEAN)

    def chat_prompt(self, messages: Sequence[dict[str, Any]], enable_thinking: bool | None = None) -> str:
        """ChatML with the generation prompt, as in the tokenizer's chat_template.jinja; with
        ``enable_thinking`` false, Qwen3's empty reasoning block after it."""
        parts = []
        for message in messages:
            content = message.get("content") or ""
            if isinstance(content, list):  # OpenAI content parts
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            parts.append(f"<|im_start|>{message.get('role', 'user')}\n{content}<|im_end|>\n")
        closed = EMPTY_THINK_BLOCK if enable_thinking is False else ""
        return "".join(parts) + "<|im_start|>assistant\n" + closed
