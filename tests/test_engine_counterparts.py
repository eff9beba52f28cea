"""A flag of the other engine on a plan is refused with its counterpart from the knob map
(``domain/flags/data/knobs.yaml``) offered, wherever a plan is checked: ``runner check``
(a real subprocess), ``check_plan`` (what ``runner submit`` and the runner run), and the
Build form (Streamlit's AppTest against a real DuckDB file)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from db import Store
from domain.core.i18n import t
from domain.core.settings import get_settings
from domain.flags.dialects.vllm import known_vllm_versions
from domain.flags.validate import validate_server_args
from domain.plan.checks import check_plan
from pages.parts.flag_widgets import VLLM_ARGS
from tests.conftest import ROOT
from tests.support.runner_harness import small_plan

VLLM_PLAN = ("name: vllm-counterpart\nengine: vllm-emulator\nmodel: Qwen/Qwen3-30B-A3B\n"
             "gpu: {type: H200, count: 1}\nserver_args:\n  max-running-requests: 64\n")


def test_runner_check_refuses_an_sglang_flag_on_a_vllm_plan_and_offers_max_num_seqs(tmp_path: Path) -> None:
    plan = tmp_path / "vllm.yaml"
    plan.write_text(VLLM_PLAN, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "runner", "--lang", "en", "check", str(plan)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    for version in known_vllm_versions():
        assert (f"vLLM {version}: --max-running-requests is a flag of SGLang, not of vLLM {version}: "
                "vLLM sets the same knob with --max-num-seqs.") in done.stdout


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_check_plan_offers_the_counterpart_in_both_directions(lang: str) -> None:
    vllm = check_plan(small_plan(engine="vllm-emulator", server_args={"max-running-requests": 64}),
                      get_settings(), lang)
    assert vllm.errors and all("--max-num-seqs" in line for line in vllm.errors)
    sglang = check_plan(small_plan(server_args={"max-num-seqs": 64}), get_settings(), lang)
    assert any("--max-num-seqs" in line and "--max-running-requests" in line for line in sglang.errors)


def test_a_closest_counterpart_says_so_and_a_missing_one_is_named_missing() -> None:
    report = validate_server_args({"gpu-memory-utilization": 0.8, "enable-chunked-prefill": True}, "0.5.23",
                                  model_dirs=[])
    closest, none = report.issues
    assert (closest.code, closest.detail, closest.candidates) == (
        "unknown_flag", "other_engine_closest", ("mem-fraction-static",))
    assert closest.note is not None and "not the same setting" in closest.message("en")
    assert (none.code, none.detail, none.candidates) == ("unknown_flag", "other_engine_none", ())
    assert "SGLang has no counterpart" in none.message("en")


def test_the_build_form_shows_the_counterpart_and_refuses_to_queue(app_env: Path) -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.query_params["lang"] = "en"
    at.run()
    at.switch_page("pages/build.py").run()
    at.radio(key="b.engine@en").set_value("vllm-emulator").run()
    at.session_state[VLLM_ARGS] = {"max-running-requests": 64}
    at.run()
    assert any("--max-running-requests" in e.value and "--max-num-seqs" in e.value for e in at.error), \
        [e.value for e in at.error]
    next(b for b in at.button if b.label == t("build.submit", "en")).click().run()
    assert Store(app_env).list_runs() == []
