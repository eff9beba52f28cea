"""Every page in Japanese at 1400 px, in a real browser: no label cut short (its text wider
than the box that shows it, Streamlit's ellipsis) and no English sentence left
untranslated.  The test lists each one it finds, page by page.

A label is any text Streamlit cuts with an ellipsis: widget labels, buttons, tabs, the
value shown in a select box, page links, expander titles.  An English sentence is a line of
visible text with no Japanese character and at least three English words of three letters
or more, leaving out what is the same in both languages: run and flag names, metric names,
units, commands and code (see :data:`SAME_IN_BOTH`).  Streamlit's own uploader instructions
("Drag and drop file here", "Limit 200MB per file") are drawn by Streamlit in English and
cannot be translated through its API; the uploader's label and help are ours, in Japanese.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page

from bench import synthetic
from db import Store
from tests.support.app_server import running_app, screenshot

# A listing, not a race: a rerun would only double its time.
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.flaky(reruns=0)]

PAGES = ("", "build", "runs", "run?run=1", "compare?baseline=1&runs=2,3", "checklist?baseline=1&runs=2,3",
         "history", "tune", "audit")
STREAMLIT_OWN = ("Drag and drop file here", "200MB per file", "Browse files", "Press Enter to apply")
COMMAND = re.compile(r"^(<app-python>|python |\.venv|\S*/bin/)|\s--[a-z]")  # a command line: code, not prose
# Words that read the same in a Japanese page: names of things, units, commands.
SAME_IN_BOTH = re.compile(r"(--[\w-]+|https?://\S+|[\w./-]*\d[\w./-]*|TTFT|TPOT|ITL|E2E|QPS|GPU|KV|SGLang|vLLM|"
                          r"Qwen\S*|H200|H100|YAML|JSON|CSV|PPTX|PNG|SVG|Markdown|Pareto|SLA|p\d+|tok/s\S*|ms|"
                          r"emulator|benchdeck|bench_serving|synthetic\S*)", re.IGNORECASE)
JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
ENGLISH_WORD = re.compile(r"\b[A-Za-z]{3,}\b")

CUT_LABELS_JS = """() => {
  const found = [];
  const roots = document.querySelectorAll('[data-testid="stWidgetLabel"], button, [role="tab"],'
    + ' [data-baseweb="select"], [data-testid="stPageLink"], [data-testid="stExpander"] summary,'
    + ' [data-testid="stSidebarNavLink"]');
  for (const root of roots) {
    for (const el of [root, ...root.querySelectorAll('*')]) {
      const style = getComputedStyle(el);
      const text = (el.innerText || '').trim();
      if (!text || style.display === 'none' || el.offsetParent === null) continue;
      const cut = el.scrollWidth > el.clientWidth + 1
        && (style.textOverflow === 'ellipsis' || style.overflow === 'hidden' || style.overflowX === 'hidden');
      if (cut) found.push(text.split('\\n')[0] + ` (${el.scrollWidth}px in ${el.clientWidth}px)`);
    }
  }
  return [...new Set(found)];
}"""


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("labels-ja")
    db_path = root / "bench.duckdb"
    synthetic.fill(Store(db_path, lock_timeout_s=30), runs=3, points_per_run=4)
    env = dict(__import__("os").environ, BENCHDECK_DB=str(db_path), BENCHDECK_LANGUAGE="ja",
               BENCHDECK_WORK_DIR=str(root / "runs"), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    with running_app(env, timeout_s=120) as url:
        yield url


def untranslated(text: str) -> list[str]:
    lines = []
    for line in (raw.strip() for raw in text.splitlines()):
        if not line or JAPANESE.search(line) or COMMAND.search(line) or any(own in line for own in STREAMLIT_OWN):
            continue
        if len(ENGLISH_WORD.findall(SAME_IN_BOTH.sub(" ", line))) >= 3:
            lines.append(line)
    return lines


def _visit(page: Page, url: str, path: str) -> tuple[list[str], list[str]]:
    joiner = "&" if "?" in path else "?"
    page.goto(f"{url}/{path}{joiner}lang=ja")
    page.get_by_test_id("stMain").wait_for()
    page.wait_for_timeout(3000)
    # Until the page has drawn everything (no placeholder left), then a moment for the grids.
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stSkeleton\"]')", timeout=90_000)
    page.wait_for_timeout(2000)
    screenshot(page, f"labels-ja-{path.split('?')[0] or 'overview'}")
    cut = page.evaluate(CUT_LABELS_JS)
    text = page.locator('[data-testid="stMain"], [data-testid="stSidebar"]').all_inner_texts()
    return cut, untranslated("\n".join(text))


def test_no_cut_label_and_no_english_sentence_on_any_page_in_japanese(app: str, browser_page: Page) -> None:
    found: dict[str, tuple[list[str], list[str]]] = {}
    for path in PAGES:
        cut, english = _visit(browser_page, app, path)
        if cut or english:
            found[path or "overview"] = (cut, english)
    report = "\n".join(f"{page}: cut {cut}; untranslated {english}" for page, (cut, english) in found.items())
    print(report or "no cut label, no untranslated line")
    assert not found, report
