"""An SGLang run beside a vLLM run (issue 18): the flag diff lines their flags up knob by
knob (domain/flags/knobs.py), says which knobs are the same setting, the closest one or
have no counterpart, and the engine is a condition the verdict names."""

from __future__ import annotations

import pandas as pd

from domain.compare.comparability import comparability_matrix, comparability_summary
from domain.compare.config_diff import config_diff
from domain.compare.cross_engine import cross_engine_notes
from domain.core.i18n import catalogue
from tests.test_analysis import frame, point

SGLANG = {"max-running-requests": 16, "mem-fraction-static": 0.85, "chunked-prefill-size": 4096,
          "schedule-conservativeness": 0.5}
VLLM = {"max-num-seqs": 16, "gpu-memory-utilization": 0.9, "max-num-batched-tokens": 8192}


def _pair() -> pd.DataFrame:
    return frame(*(point(1, c, engine="sglang", server_args=SGLANG) for c in (1, 2)),
                 *(point(2, c, engine="vllm", engine_version="0.33.0", server_args=VLLM) for c in (1, 2)))


def test_the_flag_diff_lines_the_two_engines_up_knob_by_knob() -> None:
    diff = config_diff(_pair(), 1, [2]).set_index("flag")
    memory = diff.loc["--mem-fraction-static ↔ --gpu-memory-utilization"]
    assert (memory["baseline_value"], memory["value"], memory["counterpart"]) == ("0.85", "0.9", "closest")
    chunk = diff.loc["--chunked-prefill-size ↔ --max-num-batched-tokens"]
    assert (chunk["baseline_value"], chunk["value"], chunk["differs"]) == ("4096", "8192", True)
    alone = diff.loc["--schedule-conservativeness ↔ —"]
    assert (alone["baseline_value"], alone["value"], alone["counterpart"]) == ("0.5", "unset", "none")


def test_an_equal_knob_of_the_same_setting_is_hidden_unless_asked() -> None:
    data = _pair()
    hidden = set(config_diff(data, 1, [2])["flag"])
    shown = config_diff(data, 1, [2], show_all=True).set_index("flag")
    running = shown.loc["--max-running-requests ↔ --max-num-seqs"]
    assert (running["baseline_value"], running["value"], running["differs"], running["counterpart"]) == (
        "16", "16", False, "equivalent")
    assert running.name not in hidden


def test_the_notes_say_how_each_knob_pairs_in_both_languages() -> None:
    for lang in ("en", "ja"):
        notes = cross_engine_notes(_pair(), 1, [2], lang)
        memory = [n for n in notes if "--gpu-memory-utilization" in n]
        assert memory and memory[0].startswith("#2 ")
        assert ("closest" in memory[0]) if lang == "en" else ("同じではありません" in memory[0])
    assert cross_engine_notes(frame(*(point(1, c) for c in (1, 2)), *(point(2, c) for c in (1, 2))), 1, [2], "en") == []


def test_the_engine_differs_as_a_condition_until_marked_as_under_test() -> None:
    data = _pair()
    summary = comparability_summary(comparability_matrix(data, 1, [1, 2], frozenset())).set_index("run_id")
    assert summary.loc[2, "verdict"] == "not_comparable" and "engine" in summary.loc[2, "differing"]
    marked = comparability_summary(comparability_matrix(data, 1, [1, 2], frozenset({"engine"}))).set_index("run_id")
    # The engine's version and (SGLang vs vLLM) the client backend its API needs follow the engine.
    assert marked.loc[2, "verdict"] == "comparable"
    assert {"engine", "engine_version"} <= set(marked.loc[2, "intended"])
    other_backend = frame(*(point(1, c, engine="sglang", backend="sglang-oai") for c in (1, 2)),
                          *(point(2, c, engine="vllm", engine_version="0.33.0", backend="vllm")
                            for c in (1, 2)))
    matrix = comparability_matrix(other_backend, 1, [1, 2], frozenset({"engine"}))
    assert comparability_summary(matrix).set_index("run_id").loc[2, "verdict"] == "comparable"
    unmarked = comparability_matrix(other_backend, 1, [1, 2], frozenset({"model"}))
    assert set(unmarked[(unmarked.run_id == 2) & (unmarked.state == "differ")]["condition"]) >= {"backend"}


def test_every_counterpart_word_has_both_languages() -> None:
    keys = [f"compare.diff.counterpart.{k}" for k in ("equivalent", "closest", "none")] + [
        f"compare.knob.{k}" for k in ("equivalent", "closest", "none", "heading")]
    assert all(set(catalogue()[key]) >= {"ja", "en"} for key in keys)
