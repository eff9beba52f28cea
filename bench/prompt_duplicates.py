"""Duplicate prompts in the bench client's random-ids datasets, per sweep point.

bench_serving's random-ids prompt ``i`` is the run of ids ``offset_i + i, offset_i + i + 1,
…`` (mod ``tokenizer.vocab_size``) with ``offset_i`` drawn independently, so two prompts
can start on one id: on a real server the second is a full prefix-cache hit.  This
benchmark draws each point's prompts with the installed client's own generator
(``sglang.benchmark.datasets.random.sample_random_requests``, seeded as ``run_benchmark``
seeds it) at concurrency 1, 2, 4, …, 256 and at the prompt quota, with the plan's default
prompt count (``num_prompts`` "10x"), and counts prompts that repeat an earlier one:

- ``raw``: as the client draws them;
- ``sent``: as the warm driver (runner/sglang_side/bench_driver.py) hands them to the
  client after moving each repeated start to an unused id — what a benchdeck run sends.

Vocabularies: 151,643 (``tokenizer.vocab_size`` of Qwen3's tokenizer, which a real run
now uses), the toy tokenizer in the ``tokenizer_dir`` setting (emulated runs), and the old
4,096-id toy for comparison.  ``python -m bench prompt_duplicates`` (a few seconds).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tokenizers import Tokenizer

from domain.core.settings import get_settings
from domain.plan.quotas import Quotas
from domain.plan.run_plan import BenchmarkPlan, resolve_count

DRIVER = Path(__file__).resolve().parent.parent / "runner" / "sglang_side" / "bench_driver.py"
QWEN3_VOCAB = 151_643  # len(vocab.json) of Qwen3's tokenizer; its 26 added tokens are not drawn
OLD_TOY_VOCAB = 4_096
CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256)
INPUT_LEN, OUTPUT_LEN = 128, 128  # repeats depend on the starts, not on the lengths

# Runs in the SGLang interpreter: the client's generator, and the driver's wrapper of it.
PROBE = r"""
import importlib.util, json, random, sys
import numpy as np
from sglang.benchmark.datasets import random as datasets

spec = importlib.util.spec_from_file_location("bench_driver", sys.argv[1])
driver = importlib.util.module_from_spec(spec)
spec.loader.exec_module(driver)
ISL, OSL = json.loads(sys.argv[3])
raw_generator = datasets.sample_random_requests
checks = {}
driver._distinct_random_ids(checks)

class Vocab:
    def __init__(self, size): self.vocab_size = size
    def num_special_tokens_to_add(self): return 0
    def decode(self, ids): return " ".join(map(str, ids))

def repeats(rows):
    seen, count = set(), 0
    for row in rows:
        key = tuple(row.prompt)
        count += key in seen
        seen.add(key)
    return count

def draw(generator, vocab, prompts, seed):
    random.seed(seed)
    np.random.seed(seed)  # as run_benchmark does before drawing the dataset
    return generator(input_len=ISL, output_len=OSL, num_prompts=prompts, range_ratio=1.0,
                     tokenizer=Vocab(vocab), dataset_path="", random_sample=False, return_text=False)

out = []
for vocab, prompts, seed in json.loads(sys.argv[2]):
    out.append({"vocab": vocab, "prompts": prompts,
                "raw": repeats(draw(raw_generator, vocab, prompts, seed)),
                "sent": repeats(draw(datasets.sample_random_requests, vocab, prompts, seed))})
print(json.dumps(out))
"""


def toy_vocab_size(directory: Path) -> int:
    return int(Tokenizer.from_file(str(directory / "tokenizer.json")).get_vocab_size(with_added_tokens=False))


def points() -> list[tuple[str, int]]:
    """(label, prompts) per point: the ladder, then the quota's largest point."""
    spec = BenchmarkPlan().num_prompts
    rows = [(str(c), resolve_count(spec, c)) for c in CONCURRENCY]
    return [*rows, ("quota", Quotas().prompts_per_point)]


def measure(vocabs: list[int], seed: int) -> dict[tuple[int, int], dict[str, int]]:
    settings = get_settings()
    jobs = [(vocab, prompts, seed) for vocab in vocabs for _, prompts in points()]
    done = subprocess.run(  # fixed argv: the configured SGLang interpreter
        [str(settings.bench_python), "-c", PROBE, str(DRIVER), json.dumps(jobs), json.dumps([INPUT_LEN, OUTPUT_LEN])],
        capture_output=True, text=True, check=True, timeout=600,
    )
    return {(r["vocab"], r["prompts"]): r for r in json.loads(done.stdout.strip().splitlines()[-1])}


def run(quick: bool = False) -> None:
    seed = BenchmarkPlan().seed
    toy = toy_vocab_size(get_settings().tokenizer_dir)
    vocabs = list(dict.fromkeys([QWEN3_VOCAB, toy, OLD_TOY_VOCAB]))
    results = measure(vocabs, seed)
    names = {QWEN3_VOCAB: "qwen3", toy: "toy", OLD_TOY_VOCAB: "old toy"}
    if toy == QWEN3_VOCAB:
        names[toy] = "qwen3 = toy"
    print(f"seed {seed}, ISL/OSL {INPUT_LEN}/{OUTPUT_LEN}, range ratio 1.0; repeated prompts (raw client → sent)")
    header = f"{'conc':>6} {'prompts':>8}" + "".join(f" {names[v] + f' ({v:,})':>24}" for v in vocabs)
    print(header)
    for label, prompts in points():
        cells = "".join(f" {results[(v, prompts)]['raw']:>11} → {results[(v, prompts)]['sent']:<10}" for v in vocabs)
        print(f"{label:>6} {prompts:>8}{cells}")
