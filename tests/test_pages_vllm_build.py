"""The build page's vLLM mode (issue 18) through Streamlit's AppTest, against a real DuckDB file.

Checked in both languages: the engine choice offers the two vLLM engines; a vLLM engine
shows the vLLM version select (newest shipped by default), one widget per knob that the
version has (with the SGLang side and the knob's note), the fixed ``vllm`` client backend
and the vLLM command; "Carry this configuration over to vLLM" moves what means the same and
lists the rest; an unknown flag's error shows under the panel and blocks queueing; a valid
vLLM plan queues from the form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from db import Store
from domain.core.i18n import t
from domain.flags.dialects.vllm import known_vllm_versions, load_vllm_schema, newest_vllm_version
from domain.flags.knobs import knobs
from pages.parts.flag_widgets import SERVER_ARGS, VLLM_ARGS
from tests.conftest import ROOT
from tests.support.actors import operator
from tests.support.code_spans import code_spans
from tests.support.runner_harness import small_plan

APP = str(ROOT / "app.py")


def _build_page(lang: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params["lang"] = lang
    at.run()
    at.switch_page("pages/build.py").run()
    assert not at.exception
    return at


def _choose_engine(at: AppTest, lang: str, engine: str) -> None:
    at.radio(key=f"b.engine@{lang}").set_value(engine).run()
    assert not at.exception, at.exception


def _texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [i.value for i in at.info]
    return "\n".join(str(p) for p in parts)


def _command(at: AppTest) -> str:
    return next(c for c in code_spans(at) if "--emulate-engine" in c or "vllm.entrypoints" in c)


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_a_vllm_engine_shows_its_version_levers_backend_and_command(app_env: Path, lang: str) -> None:
    at = _build_page(lang)
    engines = at.radio(key=f"b.engine@{lang}")
    assert list(engines.options) == [t(f"build.engine_{e}", lang)
                                     for e in ("emulator", "sglang", "vllm_emulator", "vllm")]
    _choose_engine(at, lang, "vllm-emulator")
    version = at.selectbox(key="b.vllm_version")
    assert version.value == newest_vllm_version() and list(version.options) == known_vllm_versions()
    assert version.label == t("build.vllm.version", lang)
    labels = {w.label for w in [*at.number_input, *at.selectbox, *at.text_input, *at.toggle]}
    schema = load_vllm_schema(newest_vllm_version())
    has = [k for k in knobs() if any(f in schema for f in k.vllm)]
    assert len(has) >= 10
    for flag in ("--max-num-seqs", "--gpu-memory-utilization", "--max-num-batched-tokens", "--tensor-parallel-size",
                 "--enable-expert-parallel", "--kv-cache-dtype", "--cudagraph-capture-sizes", "--enforce-eager",
                 "--enable-prefix-caching", "--enable-chunked-prefill"):
        assert flag in labels, (flag, sorted(labels))
    assert "--max-running-requests" not in labels and "--mem-fraction-static" not in labels
    texts = _texts(at)
    memory = next(k for k in knobs() if k.id == "memory_fraction")
    assert t("build.vllm.not_same", lang, flags="`--mem-fraction-static`") in texts
    assert memory.note[lang] in texts
    # The client backend is fixed and explained; the command is the emulator started as vLLM.
    assert at.selectbox(key="b.backend_vllm").value == "vllm" and at.selectbox(key="b.backend_vllm").disabled
    assert t("build.vllm.backend_note", lang) in texts
    command = _command(at)
    assert "--emulate-engine vllm" in command and f"--emulate-vllm-version {newest_vllm_version()}" in command
    # The older version has its own spelling of the CUDA-graph sizes.
    at.selectbox(key="b.vllm_version").set_value("0.11.2").run()
    labels = {w.label for w in [*at.number_input, *at.selectbox, *at.text_input, *at.toggle]}
    assert "--cudagraph-capture-sizes" in labels and "--cuda-graph-sizes ⚠️ " + t("build.deprecated", lang) \
        not in labels
    # Real vLLM: the runner's vLLM interpreter runs `vllm serve`.
    _choose_engine(at, lang, "vllm")
    assert "vllm.entrypoints.cli.main serve" in _command(at)
    # Back to SGLang: its levers are back, with the form's SGLang flags untouched.
    _choose_engine(at, lang, "emulator")
    assert any(n.label == "--max-running-requests" for n in at.number_input)


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_carry_over_moves_what_means_the_same_and_lists_the_rest(app_env: Path, lang: str) -> None:
    at = _build_page(lang)
    at.session_state[SERVER_ARGS] = {"max-running-requests": 24, "mem-fraction-static": 0.8,
                                     "chunked-prefill-size": 4096, "disable-radix-cache": True,
                                     "enable-mixed-chunk": True}
    _choose_engine(at, lang, "vllm-emulator")
    at.selectbox(key="b.vllm_version").set_value("0.33.0").run()
    carry = next(b for b in at.button if b.label == t("build.vllm.carry", lang))
    carry.click().run()
    assert not at.exception
    assert at.session_state[VLLM_ARGS] == {"max-num-seqs": 24, "max-num-batched-tokens": 4096,
                                           "enable-prefix-caching": False}
    report = next(i.value for i in at.info if t("build.vllm.carried_title", lang, version="0.33.0") in i.value)
    assert "`--max-running-requests 24` → `--max-num-seqs 24`" in report
    # Off, as vLLM 0.33.0 spells it (0.11.2 has only --no-enable-prefix-caching).
    assert "`--disable-radix-cache` → `--disable-prefix-caching`" in report
    assert t("build.vllm.carried_left", lang, count=2) in report
    assert "`--mem-fraction-static 0.8`" in report and "`--enable-mixed-chunk`" in report
    assert t("build.vllm.carried_no_counterpart", lang) in report
    # The widgets show the carried values, and the command carries them.
    assert next(n for n in at.number_input if n.label == "--max-num-seqs").value == 24
    command = _command(at)
    assert "--max-num-seqs 24" in command and "--disable-prefix-caching" in command
    off = at.selectbox(key="b.vflag.enable-prefix-caching")
    assert off.value is False and off.format_func(off.value) == "--disable-prefix-caching"
    assert "--max-running-requests" not in command


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_an_invalid_vllm_flag_is_named_under_its_widget_and_blocks_queueing(app_env: Path, lang: str) -> None:
    at = _build_page(lang)
    _choose_engine(at, lang, "vllm-emulator")
    at.selectbox(key="b.vllm_version").set_value("0.33.0").run()
    # vLLM reads "4k" as 4000 (its human_readable_int); "12q" is no number at all.
    next(w for w in at.text_input if w.label == "--max-num-batched-tokens").set_value("12q").run()
    assert at.session_state[VLLM_ARGS]["max-num-batched-tokens"] == "12q"
    errors = [e.value for e in at.error]
    assert any(e.startswith("vLLM 0.33.0: ") and "--max-num-batched-tokens" in e and "12q" in e for e in errors), \
        errors
    # The same error right under the widget (pages/parts/build_field_errors.py's slot).
    assert any(m.value.startswith(":red[:material/error: --max-num-batched-tokens") and "12q" in m.value
               for m in at.markdown)
    next(b for b in at.button if b.label == t("build.submit", lang)).click().run()
    assert any(t("submit.refused", lang) in e.value for e in at.error)
    assert Store(app_env).list_runs() == []


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_a_flag_gone_in_the_chosen_version_offers_its_translation(app_env: Path, lang: str) -> None:
    at = _build_page(lang)
    _choose_engine(at, lang, "vllm-emulator")
    at.selectbox(key="b.vllm_version").set_value("0.11.2").run()
    at.session_state[VLLM_ARGS] = {"cuda-graph-sizes": [1, 2, 4]}  # 0.11.2's deprecated spelling
    at.run()
    assert any(w.value.startswith("vLLM 0.11.2: ") and "--cuda-graph-sizes" in w.value for w in at.warning)
    at.selectbox(key="b.vllm_version").set_value("0.33.0").run()
    assert any("vLLM 0.33.0: " in e.value and "--cuda-graph-sizes" in e.value for e in at.error)
    translate = next(b for b in at.button if "--cudagraph-capture-sizes 1 2 4" in b.label)
    translate.click().run()
    assert at.session_state[VLLM_ARGS] == {"cudagraph-capture-sizes": [1, 2, 4]}
    assert not at.error, [e.value for e in at.error]
    assert next(w for w in at.text_input if w.label == "--cudagraph-capture-sizes").value == "1 2 4"
    assert "--cudagraph-capture-sizes 1 2 4" in _command(at)


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_a_vllm_plan_queues_from_the_form(app_env: Path, lang: str) -> None:
    at = _build_page(lang)
    _choose_engine(at, lang, "vllm-emulator")
    next(n for n in at.number_input if n.label == "--max-num-seqs").set_value(12).run()
    next(n for n in at.number_input if n.label == "--gpu-memory-utilization").set_value(0.85).run()
    assert not at.error, [e.value for e in at.error]
    next(b for b in at.button if b.label == t("build.submit", lang)).click().run()
    assert not at.exception
    [run] = Store(app_env).list_runs()
    plan = json.loads(Store(app_env).get_run(run.id).plan)
    assert (plan["engine"], plan["emulated"]) == ("vllm", True) and plan["vllm_version"] == newest_vllm_version()
    assert plan.get("sglang_version") is None
    assert plan["server_args"] == {"max-num-seqs": 12, "gpu-memory-utilization": 0.85}
    assert plan["benchmark"]["backend"] == "vllm" and plan["benchmark"]["tokenize_prompt"] is False


def test_a_vllm_run_duplicates_into_the_vllm_form(app_env: Path) -> None:
    store = Store(app_env)
    store.migrate()
    plan = small_plan(name="on-vllm", engine="vllm-emulator", vllm_version="0.11.2",
                      server_args={"max-num-seqs": 16, "enable-prefix-caching": False})
    run_id, _ = store.submit_run(plan, submitted_by=operator("t"))
    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params["from_run"] = str(run_id)
    at.run()
    at.switch_page("pages/build.py").run()
    assert not at.exception
    assert at.session_state["b.engine"] == "vllm-emulator" and at.selectbox(key="b.vllm_version").value == "0.11.2"
    assert at.session_state[VLLM_ARGS] == {"max-num-seqs": 16, "enable-prefix-caching": False}
    assert at.session_state[SERVER_ARGS] == {}
    assert at.selectbox(key="b.vflag.enable-prefix-caching").value is False
    assert "--max-num-seqs 16 --no-enable-prefix-caching" in _command(at)
