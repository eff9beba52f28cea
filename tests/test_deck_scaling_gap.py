""""Why not N×?" in the comparison deck (issue 16): one slide per run with a concurrency step,
its stacked bars, its sentences and the caveat, from real emulator runs (the runner daemon,
the emulator, the real bench_serving client, a real DuckDB file) read back with python-pptx,
in the page's path (``db.scaling_gap_inputs`` → ``deck.comparison_deck``) and through
``python -m runner export``.  An imported sweep (no telemetry, no attempt) gets its slide too.

The slides are also drawn roughly with Pillow and the deck's own font, to see the layout
(no LibreOffice on the test hosts): ``test-artifacts/deck-scaling-gap-<lang>.png``."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from PIL import Image, ImageDraw, ImageFont
from pptx import Presentation
from pptx.util import Emu

from db import Store
from db.imported_runs import import_file
from db.scaling_gap_inputs import explained_gaps
from domain.compare.comparison import Comparison, build_comparison
from domain.core.i18n import t
from domain.importer.conditions import ImportConditions
from domain.render import deck, gap_slides, slide_parts, tables
from domain.results.frames import points_frame
from domain.results.scaling_gap import GAP_COLUMNS, gap_sentences, top_cause
from tests.conftest import ROOT
from tests.support.actors import operator
from tests.support.app_server import ARTIFACTS
from tests.support.runner_harness import MARK, assert_nothing_left, run_burst, runner_env, small_plan

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

CAP = 2  # --max-running-requests of the swept run: c=4 must wait for it
COLD_SWEEP = ROOT / "tests" / "fixtures" / "cold_first_point" / "sweep-0.5.23.jsonl"
CJK_FONT = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")


@dataclass(frozen=True)
class Runs:
    db_path: Path
    env: dict[str, str]
    swept: int  # c = 1, 2, 4 under the cap
    single: int  # c = 2 only: nothing to explain


def _bench(concurrency: list[int]) -> dict[str, object]:
    return {"scenarios": [{"name": "short", "input_len": 64, "output_len": 64}], "concurrency": concurrency,
            "num_prompts": "3x", "warmup": "1x"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """Two emulated runs in one real DuckDB file, run once for the module (each run costs
    the emulator and the real client): a sweep capped at ``CAP`` running requests and a
    run measured at one concurrency."""
    tmp = tmp_path_factory.mktemp("deck-gap")
    db_path = tmp / "bench.duckdb"
    store = Store(db_path, lock_timeout_s=10)
    store.migrate()
    swept, _ = store.submit_run(small_plan(name="capped", benchmark=_bench([1, 2, 4]), server_args={
        "max-running-requests": CAP, "mem-fraction-static": 0.85}), submitted_by=operator("t"))
    single, _ = store.submit_run(small_plan(name="one-point", benchmark=_bench([2])), submitted_by=operator("t"))
    env = {**os.environ, "BENCHDECK_DB": str(db_path), "BENCHDECK_LANGUAGE": "en",
           "BENCHDECK_WORK_DIR": str(tmp / "runs"), "PYTHONPATH": str(ROOT)}
    # Slow motion, as in tests/test_scaling_gap_emulator.py: ITL is the step time on a busy host.
    renv = runner_env(env, BENCHDECK_EMULATE_TIME_SCALE="4")
    assert run_burst(renv, timeout=600) == 0
    assert [store.get_run(r).status for r in (swept, single)] == ["succeeded", "succeeded"]
    assert_nothing_left(renv[MARK])
    yield Runs(db_path, env, swept, single)


def _comparison(store: Store, baseline: int, others: list[int], lang: str) -> Comparison:
    frame = points_frame(p.as_dict() for p in store.points_for_comparison([baseline, *others]))
    return build_comparison(frame, baseline, others, lang)


def _gap_slides(pptx: bytes, lang: str) -> list[Any]:
    prefix = t("scaling_gap.title", lang)
    return [s for s in Presentation(io.BytesIO(pptx)).slides if _texts(s) and _texts(s)[0].startswith(prefix)]


def _texts(slide: Any) -> list[str]:
    """The slide's text boxes in the order they were added (the title first)."""
    return [shape.text_frame.text for shape in slide.shapes if shape.has_text_frame and shape.text_frame.text]


def _paragraphs(slides: list[Any]) -> list[str]:
    return [p.text for s in slides for shape in s.shapes if shape.has_text_frame for p in shape.text_frame.paragraphs]


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_the_deck_has_a_why_not_n_slide_per_swept_run(runs: Runs, lang: str) -> None:
    store = Store(runs.db_path, lock_timeout_s=10)
    gaps = explained_gaps(store, [runs.swept, runs.single])
    assert gaps[runs.single].empty  # one concurrency: no step
    frame = gaps[runs.swept]
    assert top_cause(frame, 2, 4) == "running_cap_or_kv_pool"  # the cap, induced: what the slide must say
    c = _comparison(store, runs.swept, [runs.single], lang)
    pptx = deck.comparison_deck(c, gaps=gaps)
    slides = _gap_slides(pptx, lang)
    label = tables.run_label_of(c, runs.swept)
    assert label.endswith(t("compare.suffix.emulated", lang))  # labelled as everywhere else
    assert _texts(slides[0])[0] == t("deck_gap.title", lang, title=t("scaling_gap.title", lang), run=label)
    assert not any(tables.run_label_of(c, runs.single) in _texts(s)[0] for s in slides)  # skipped, nothing drawn
    text = _paragraphs(slides)
    for (scenario, _, _), step in frame.groupby(["scenario", "c_from", "c_to"]):
        summary, *causes = gap_sentences(step, lang)  # the page's sentences, in the deck's language
        assert t("deck_gap.step", lang, scenario=scenario, summary=summary) in text, summary
        assert causes and all(f"• {cause}" in text for cause in causes), causes
    cap_sentence = {"en": f"--max-running-requests {CAP} caps the batch",
                    "ja": f"--max-running-requests {CAP} がバッチを頭打ちにし"}[lang]
    assert any(cap_sentence in line for line in text)
    assert t("scaling_gap.method", lang) in text  # how the split is measured
    for slide in Presentation(io.BytesIO(pptx)).slides:
        assert [shape.text_frame.text for shape in slide.shapes if shape.name == "benchdeck-caveat"] == [
            "\n".join(c.caveat)]
    pictures = [shape for shape in slides[0].shapes if shape.shape_type == 13]  # MSO_SHAPE_TYPE.PICTURE
    assert len(pictures) == 1 and Image.open(io.BytesIO(pictures[0].image.blob)).width > 600
    for index, slide in enumerate(slides):
        _check_and_draw(slide, ARTIFACTS / f"deck-scaling-gap-{lang}{'' if index == 0 else f'-{index + 1}'}.png")


def test_the_cli_exports_the_slide(runs: Runs, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "runner", "--lang", "ja", "export", "--baseline", str(runs.single), "--runs",
         str(runs.swept), "--format", "pptx", "--out", str(out)],
        cwd=ROOT, env=runs.env, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    pptx = (out / f"compare-{runs.single}-{runs.swept}.pptx").read_bytes()
    slides = _gap_slides(pptx, "ja")
    titles = [_texts(s)[0] for s in slides]
    assert titles and all(f"(#{runs.swept})（エミュレート）" in title for title in titles), titles  # the single: none
    frame = explained_gaps(Store(runs.db_path, lock_timeout_s=10), [runs.swept])[runs.swept]
    summary = gap_sentences(frame, "ja")[0]
    assert any(summary in line for line in _paragraphs(slides))  # the summary, in Japanese, as on the run page


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_an_imported_sweep_gets_its_slide_with_the_unexplained_part_left_remaining(store: Store, lang: str) -> None:
    [run_id] = import_file(store, COLD_SWEEP, ImportConditions(), actor=operator("t")).run_ids
    frame = explained_gaps(store, [run_id])[run_id]
    assert set(frame["c_to"]) == {2, 4, 8, 16}
    # No telemetry and no start-up facts: no signal for the queue, the clock or the graphs.
    for cause in ("running_cap_or_kv_pool", "throttling", "eager_batches"):
        assert (frame.loc[frame.cause == cause, "tok_s"] == 0).all(), cause
    by_step = frame.groupby(["c_from", "c_to"])
    assert (by_step["tok_s"].sum() - by_step["gap"].first()).abs().max() < 1e-6  # the causes add up to the gap
    assert (frame.cause == "remaining").sum() == 4
    c = _comparison(store, run_id, [run_id], lang)
    slides = _gap_slides(deck.comparison_deck(c, gaps={run_id: frame}), lang)
    assert slides and f"(#{run_id}){t('compare.suffix.emulated', lang)}" in _texts(slides[0])[0]
    text = _paragraphs(slides)
    for (scenario, _, _), step in frame.groupby(["scenario", "c_from", "c_to"]):
        summary, *causes = gap_sentences(step, lang)
        assert t("deck_gap.step", lang, scenario=scenario, summary=summary) in text
        assert all(f"• {cause}" in text for cause in causes)
    for index, slide in enumerate(slides):  # four steps: what does not fit beside the chart goes on after it
        _check_and_draw(slide, ARTIFACTS / f"deck-scaling-gap-imported-{lang}-{index + 1}.png")


# -- a rough drawing of a slide -----------------------------------------------------------------

PX_PER_INCH = 96


def _px(value: int) -> int:
    return round(Emu(value).inches * PX_PER_INCH)


def _check_and_draw(slide: Any, path: Path) -> None:
    """Draw the picture and every text box (wrapped with the deck's font at its size) where the
    slide puts them, and fail when a text box's wrapped text runs past its box."""
    image = Image.new("RGB", (_px(slide_parts.SLIDE_W), _px(slide_parts.SLIDE_H)), "white")
    draw = ImageDraw.Draw(image)
    for shape in slide.shapes:
        box = (_px(shape.left), _px(shape.top), _px(shape.left + shape.width), _px(shape.top + shape.height))
        if shape.shape_type == 13:
            image.paste(Image.open(io.BytesIO(shape.image.blob)).convert("RGB").resize(
                (box[2] - box[0], box[3] - box[1])), box[:2])
        elif shape.has_text_frame:
            draw.rectangle(box, outline="#dddddd")
            bottom = _draw_text(draw, shape.text_frame, box)
            if shape.name != deck.FOOTER_NAME:  # the caveat: every slide's footer, drawn but not this test's subject
                assert bottom <= box[3] + 2, f"{bottom - box[3]} px past its box: {shape.text_frame.text[:80]}"
    path.parent.mkdir(exist_ok=True)
    image.save(path)


def _draw_text(draw: ImageDraw.ImageDraw, frame: Any, box: tuple[int, int, int, int]) -> int:
    """Each paragraph wrapped to the box at its run's size; returns the bottom of the text."""
    y = box[1] + 5  # python-pptx's default top inset, 0.05 in
    for paragraph in frame.paragraphs:
        if not paragraph.runs:
            continue
        run = paragraph.runs[0]
        size = round(run.font.size.pt * PX_PER_INCH / 72)
        font = ImageFont.truetype(str(CJK_FONT), size, index=0)
        y += round(paragraph.space_before.pt * PX_PER_INCH / 72) if paragraph.space_before else 0
        for line in _wrap(paragraph.text, font, box[2] - box[0] - 20):  # 0.1 in insets left and right
            draw.text((box[0] + 10, y), line, fill="black", font=font)
            y += round(size * 1.2)
    return y


def _wrap(text: str, font: ImageFont.FreeTypeFont, width: int) -> list[str]:
    """Greedy wrapping at spaces, and anywhere inside Japanese (which has no spaces)."""
    lines, line = [], ""
    for token in _tokens(text):
        if line and font.getlength(line + token) > width:
            lines.append(line.rstrip())
            line = token.lstrip()
        else:
            line += token
    return [*lines, line]


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    for ch in text:
        if out and ch.isascii() and not ch.isspace() and out[-1][-1:].isascii() and not out[-1][-1:].isspace():
            out[-1] += ch  # a Latin word stays whole
        else:
            out.append(ch)
    return out


def test_the_rough_drawing_wraps_japanese_and_keeps_latin_words_whole() -> None:
    font = ImageFont.truetype(str(CJK_FONT), 15, index=0)
    lines = _wrap("出力は平均 64 トークン benchmark-throughput " * 6, font, 300)
    assert len(lines) > 1 and all(font.getlength(line) <= 300 for line in lines)
    assert all("benchmark-throughput" in line or "benchmark-" not in line for line in lines)


def test_a_run_absent_from_the_gaps_gets_no_slide(store: Store) -> None:
    [run_id] = import_file(store, COLD_SWEEP, ImportConditions(), actor=operator("t")).run_ids
    c = _comparison(store, run_id, [run_id], "en")
    assert gap_slides.scaling_gap_slides(c, {}) == []
    assert gap_slides.scaling_gap_slides(c, {run_id: pd.DataFrame(columns=list(GAP_COLUMNS))}) == []


def test_sentences_that_do_not_fit_beside_the_chart_go_on_after_it(store: Store) -> None:
    """A run of three scenarios (the imported sweep's steps under three names): twelve steps do
    not fit one slide; the rest go on text-only slides numbered after it, each within its box."""
    [run_id] = import_file(store, COLD_SWEEP, ImportConditions(), actor=operator("t")).run_ids
    frame = explained_gaps(store, [run_id])[run_id]
    three = pd.concat([frame.assign(scenario=f"{name}-{s}") for name in ("a", "b", "c") for s in frame.scenario[:1]])
    c = _comparison(store, run_id, [run_id], "ja")
    slides = _gap_slides(deck.comparison_deck(c, gaps={run_id: three}), "ja")
    title = t("deck_gap.title", "ja", title=t("scaling_gap.title", "ja"), run=tables.run_label_of(c, run_id))
    assert len(slides) > 1
    assert [_texts(s)[0] for s in slides] == [
        t("compare.deck.table_part", "ja", title=title, part=n, parts=len(slides)) for n in range(1, len(slides) + 1)]
    assert sum(shape.shape_type == 13 for s in slides for shape in s.shapes) == 1  # the chart, on the first only
    summaries = [p for p in _paragraphs(slides) if p.startswith("【")]
    assert len(summaries) == 12 and len(set(summaries)) == 12  # every step once, none lost at a page break
    for index, slide in enumerate(slides):
        _check_and_draw(slide, ARTIFACTS / f"deck-scaling-gap-pages-ja-{index + 1}.png")
