"""Build the small local tokenizer that the emulator engine and the bench client share.

Usage: ``python -m emulator.build_tokenizer OUT_DIR`` (``make run`` and ``make test`` build
``data/tokenizer``, the ``tokenizer_dir`` setting's default).  Nothing is downloaded: a
byte-level BPE is trained with the
``tokenizers`` library on a corpus generated here from a fixed seed, so every build gives
byte-identical files.  Running it again over an up-to-date directory changes nothing.

The directory holds what ``transformers.AutoTokenizer.from_pretrained(dir)`` needs to load
a ``PreTrainedTokenizerFast``, which is also all that SGLang's bench_serving needs:

- ``tokenizer.json``: the trained byte-level BPE, widened to ``VOCAB_SIZE`` ids;
- ``tokenizer_config.json``: class, special tokens (bos/eos/pad), max length;
- ``chat_template.jinja``: a ChatML template, as Qwen models use, with Qwen3's enable_thinking switch.

Byte-level BPE is chosen over a word-level vocabulary so that any text (chat prompts,
ShareGPT-style text) encodes without unknown tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

TRAINED_VOCAB_SIZE = 4096  # what the BPE learns from the corpus below
# The id range bench_serving's random-ids prompts are drawn from (``tokenizer.vocab_size``):
# Qwen3's, so emulated runs draw the very prompts a real Qwen3 run draws, and a sweep up to
# the prompt quota never runs out of distinct prompts.  Ids past the trained ones are
# filler tokens that no text encodes to.
VOCAB_SIZE = 151_643
SEED = 20261129
CORPUS_LINES = 6000
BOS, EOS = "<|startoftext|>", "<|endoftext|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [EOS, BOS, IM_START, IM_END]
# Bumped when the corpus or trainer settings change, so a stale directory is rebuilt.
BUILD_VERSION = 3

_ONSETS = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
           "br", "ch", "cl", "dr", "gr", "pl", "sh", "st", "th", "tr"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou"]
_CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ng"]
_COMMON = ("the of and to in is that for it as with was on be by at this are from or an "
           "which one have not but all can had there were their more when will would what "
           "about into time some could them other then these than been many only like "
           "model server token request batch cache memory prefill decode throughput latency").split()
_PUNCT = [".", ",", ";", ":", "?", "!"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}"
    "{% endif %}"
)


def _word(rng: random.Random) -> str:
    syllables = rng.choice([1, 1, 2, 2, 2, 3, 3, 4])
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                   for _ in range(syllables))


def corpus(seed: int = SEED, lines: int = CORPUS_LINES) -> Iterator[str]:
    """Deterministic pseudo-English: a fixed lexicon drawn with Zipf-like weights."""
    rng = random.Random(seed)  # noqa: S311  # reproducible text, not secrets
    lexicon = sorted({_word(rng) for _ in range(6000)}) + _COMMON
    rng.shuffle(lexicon)
    weights = [1.0 / (rank + 1) for rank in range(len(lexicon))]
    for _ in range(lines):
        words = rng.choices(lexicon, weights=weights, k=rng.randint(6, 24))
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 9999)))
        sentence = " ".join(words)
        yield sentence[0].upper() + sentence[1:] + rng.choice(_PUNCT)


def train() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TRAINED_VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    return widen(tokenizer)


def widen(tokenizer: Tokenizer) -> Tokenizer:
    """The trained BPE with filler tokens up to ``VOCAB_SIZE`` (no merge reaches them)."""
    data = json.loads(tokenizer.to_str())
    vocab = data["model"]["vocab"]
    for index in range(len(vocab), VOCAB_SIZE):
        vocab[f"<|filler_{index}|>"] = index
    return Tokenizer.from_str(json.dumps(data))


def tokenizer_config() -> dict[str, object]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 131072,
        "benchdeck_build_version": BUILD_VERSION,
        "benchdeck_note": "Local tokenizer built by emulator/build_tokenizer.py for the emulator engine.",
    }


def render_files() -> dict[str, str]:
    """File name → exact text.  Kept in memory so an unchanged build writes nothing."""
    return {
        "tokenizer.json": train().to_str(pretty=True) + "\n",
        "tokenizer_config.json": json.dumps(tokenizer_config(), indent=2, sort_keys=True) + "\n",
        "chat_template.jinja": CHAT_TEMPLATE + "\n",
    }


def build(out_dir: Path) -> list[str]:
    """Write the tokenizer into ``out_dir``; returns the names of files that changed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, text in render_files().items():
        path = out_dir / name
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        # Atomic, and per process: two emulators building at once never see (or write) half a file.
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        changed.append(name)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("out_dir", type=Path, help="output directory (make run uses data/tokenizer)")
    args = parser.parse_args(argv)
    out_dir = args.out_dir
    changed = build(out_dir)
    print(f"tokenizer in {out_dir}: " + (f"wrote {', '.join(changed)}" if changed else "up to date"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
