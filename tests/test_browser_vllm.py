"""SGLang beside vLLM in a real browser (issue 18): an emulated SGLang run and an emulated vLLM
run of the same model and workload, measured by the real runner in burst mode with the real
bench_serving client (``sglang-oai`` against SGLang, ``vllm`` against vLLM: the same OpenAI
completions path, the only difference the server), then the compare page with the
engine marked as the condition under test, in English and Japanese; and the build page with
a vLLM engine chosen.

Checked: both runs side by side, the verdict naming the engine as under test, the flag diff's
counterpart column and the knob notes.  Screenshots: test-artifacts/compare-vllm-{en,ja}.png
and test-artifacts/build-vllm-{en,ja}.png."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from db import Store
from domain.compare.comparison import build_comparison
from domain.compare.config_diff import config_diff
from domain.compare.cross_engine import cross_engine_notes
from domain.core.i18n import t
from domain.flags.dialects.vllm import newest_vllm_version
from domain.flags.knobs import knobs
from domain.render.tables import comparison_csv, comparison_markdown, md_text
from domain.results.frames import points_frame
from tests.conftest import ROOT
from tests.support.actors import operator
from tests.support.app_server import (
    ACTION_TIMEOUT_MS,
    CHROMIUM,
    CHROMIUM_ARGS,
    full_screenshot,
    grid_with,
    running_app,
)
from tests.support.runner_harness import MARK, assert_nothing_left, run_burst, runner_env, small_plan

pytestmark = [pytest.mark.browser, pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(600)]

BENCH = {"scenarios": [{"name": "short", "input_len": 64, "output_len": 32}], "concurrency": [1, 2],
         "num_prompts": "2x", "warmup": "1x", "backend": "sglang-oai", "tokenize_prompt": False}
SGLANG_NAME, VLLM_NAME = "qwen3-on-sglang", "qwen3-on-vllm"


@dataclass(frozen=True)
class Measured:
    url: str
    sglang: int
    vllm: int
    db_path: Path
    mark: str  # the runner's leftover mark (tests/support/runner_harness.py)

    def __iter__(self) -> Iterator[object]:  # url, sglang, vllm: what the page tests need
        return iter((self.url, self.sglang, self.vllm))


@pytest.fixture(scope="module")
def vllm_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Measured]:
    """One DB, the two runs measured once, and one app for the module."""
    root = tmp_path_factory.mktemp("browser-vllm")
    db_path = root / "bench.duckdb"
    env = dict(os.environ, BENCHDECK_DB=str(db_path), BENCHDECK_LANGUAGE="en",
               BENCHDECK_WORK_DIR=str(root / "runs"), PYTHONPATH=str(ROOT))
    store = Store(db_path, lock_timeout_s=10)
    store.migrate()
    sglang, _ = store.submit_run(small_plan(name=SGLANG_NAME, benchmark=BENCH), submitted_by=operator("t"))
    vllm, _ = store.submit_run(small_plan(name=VLLM_NAME, engine="vllm-emulator", vllm_version=newest_vllm_version(),
                                          server_args={"max-num-seqs": 16, "gpu-memory-utilization": 0.9},
                                          benchmark={**BENCH, "backend": "vllm"}), submitted_by=operator("t"))
    renv = runner_env(env)
    assert run_burst(renv, timeout=300) == 0
    assert [store.get_run(r).status for r in (sglang, vllm)] == ["succeeded", "succeeded"], store.attempts_of(vllm)
    with running_app(env, timeout_s=120) as url:
        yield Measured(url, sglang, vllm, db_path, renv[MARK])


def test_the_runner_launched_and_read_the_emulated_vllm_as_vllm(vllm_app: Measured) -> None:
    """What the runner recorded of the vLLM run: the emulator started as vLLM, the start-up
    facts from vLLM's own lines, the client's vllm backend, vLLM's /metrics under benchdeck's
    names; then the comparison and its exports with the engine under test."""
    store = Store(vllm_app.db_path)
    sglang, vllm = vllm_app.sglang, vllm_app.vllm
    [attempt] = store.attempts_of(vllm)
    argv = json.loads(attempt.server_argv)
    assert argv[argv.index("--emulate-engine") + 1] == "vllm" and argv[argv.index("--max-num-seqs") + 1] == "16"
    facts = json.loads(attempt.startup_facts)
    assert facts["kv_cache_tokens"] > 0 and facts["emulated"] is True and facts["engine"] == "vllm"
    points = store.points_of(vllm)
    assert [p.concurrency for p in points] == [1, 2]
    for point in points:
        conditions = json.loads(point.conditions)
        assert point.completed == point.requested and point.output_throughput > 0
        assert conditions["backend"] == "vllm" and conditions["emulated"] is True
    server = {m.metric for m in store.telemetry_of(vllm) if m.source == "server"}
    assert {"running_reqs", "token_usage", "generation_tokens_delta"} <= server, server
    assert_nothing_left(vllm_app.mark)

    frame = points_frame(p.as_dict() for p in store.points_for_comparison([sglang, vllm]))
    comparison = build_comparison(frame, sglang, [vllm], "en", intended_to_differ=frozenset({"engine"}))
    [verdict] = comparison.verdict_lines
    # Comparable with the engine under test: its version and the backend its API needs follow it.
    assert verdict.startswith("run #2 vs baseline #1: comparable — under test: engine: sglang → vllm")
    assert "backend: sglang-oai → vllm" in verdict
    assert "#2: --mem-fraction-static ↔ --gpu-memory-utilization: 0.85 → 0.9" in comparison.changed_lines[0]
    # The exports open with the headline, which names the engine and the knob under test
    # (CSV '# ' lines, Markdown's first lines); the verdict is in their caveat footer.
    [headline] = comparison.headline_lines
    assert headline.startswith("#2 vs #1 (baseline): comparable; the change under test: "), headline
    assert "; engine: sglang → vllm" in headline
    assert " --mem-fraction-static ↔ --gpu-memory-utilization 0.85 → 0.9 (" in headline  # the knob's own dashes
    csv = comparison_csv(comparison).decode("utf-8")
    assert headline in csv.split("\n", 3)[0] and verdict in csv
    markdown = comparison_markdown(comparison)
    assert md_text(headline) in markdown and md_text(verdict) in markdown
    diff = config_diff(frame, sglang, [vllm], show_all=True).set_index("flag")
    assert diff.loc["--max-running-requests ↔ --max-num-seqs", "counterpart"] == "equivalent"
    assert any("--gpu-memory-utilization" in note for note in cross_engine_notes(frame, sglang, [vllm], "ja"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _page(browser: Browser) -> Page:
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.set_default_timeout(ACTION_TIMEOUT_MS)
    return page






@pytest.mark.parametrize("lang", ["en", "ja"])
def test_sglang_and_vllm_side_by_side_with_the_engine_under_test(vllm_app, browser: Browser, lang: str) -> None:
    url, sglang, vllm = vllm_app
    page = _page(browser)
    page.goto(f"{url}/compare?baseline={sglang}&runs={vllm}&intended=engine&lang={lang}")
    downloads = t("compare.downloads", lang)
    expect(page.get_by_role("heading", name=downloads)).to_be_visible(timeout=90_000)
    page.wait_for_timeout(1500)  # charts draw after their element appears
    # The verdict box comes first: its headline names the engine as the change under test.
    verdict = page.get_by_test_id("stAlert").first
    under_test = t("compare.headline.line", lang, newer="|", older="|", verdict="|", change="|").split("|")[3].strip()
    expect(verdict).to_contain_text(under_test)
    expect(verdict).to_contain_text("sglang → vllm")
    # Both runs, side by side in the tables.
    expect(page.get_by_text(SGLANG_NAME).first).to_be_attached()
    expect(page.get_by_text(VLLM_NAME).first).to_be_attached()
    # The flag diff: the memory knob in one row, marked as the closest counterpart only.
    diff = grid_with(page, "--mem-fraction-static ↔ --gpu-memory-utilization")
    assert t("compare.diff.counterpart", lang) in diff and t("compare.diff.counterpart.closest", lang) in diff
    # Every flag shown: the running-requests cap, the same setting on both.
    page.get_by_text(t("compare.show_all_flags", lang)).click()
    page.wait_for_timeout(1500)
    expect(page.get_by_test_id("stDataFrame").filter(has_text="--max-running-requests ↔ --max-num-seqs")
           .first).to_be_attached(timeout=ACTION_TIMEOUT_MS)
    every = grid_with(page, "--max-running-requests ↔ --max-num-seqs")
    assert t("compare.diff.counterpart.equivalent", lang) in every
    # The knob notes, in the page's language.
    expect(page.get_by_text(t("compare.knob.heading", lang))).to_be_visible()
    memory = next(k for k in knobs() if k.id == "memory_fraction")
    first_sentence = re.split(r"(?<=[。.])", memory.note[lang])[0]
    expect(page.get_by_text(first_sentence, exact=False).first).to_be_attached()
    full_screenshot(page, f"compare-vllm-{lang}")


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_build_page_with_a_vllm_engine(vllm_app, browser: Browser, lang: str) -> None:
    url, _, _ = vllm_app
    page = _page(browser)
    page.goto(f"{url}/build?lang={lang}")
    engine = page.get_by_text(t("build.engine_vllm_emulator", lang), exact=True)
    expect(engine).to_be_visible(timeout=90_000)
    engine.click()
    expect(page.get_by_role("spinbutton", name="--max-num-seqs", exact=True)).to_be_visible(timeout=60_000)
    expect(page.get_by_text(t("build.vllm.version", lang), exact=True)).to_be_visible()
    expect(page.locator("code").filter(has_text="--emulate-engine vllm").first).to_be_visible()
    expect(page.get_by_role("button", name=t("build.vllm.carry", lang))).to_be_visible()
    full_screenshot(page, f"build-vllm-{lang}")
