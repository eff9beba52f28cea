"""The Build & queue page's topology editor and drawing: AppTest for the logic, a real
Chromium for how a 2P1D plan looks (screenshots in both languages)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from db import Store
from domain.plan.run_plan import RunPlan
from pages.parts.topology_editor import DRAWING_OPEN
from tests.conftest import ROOT
from tests.support.app_server import ACTION_TIMEOUT_MS
from tests.support.code_spans import code_spans

APP = str(ROOT / "app.py")


def _build_page(at: AppTest | None = None) -> AppTest:
    at = at or AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("pages/build.py").run()
    assert not at.exception
    return at


def _pd(at: AppTest, *, gpus: int, prefill: int = 1, decode: int = 1) -> AppTest:
    at.number_input(key="b.gpu_count").set_value(gpus).run()
    at.radio(key="b.topo.kind@en").set_value("pd").run()
    at.number_input(key="b.topo.prefill.count").set_value(prefill).run()
    at.number_input(key="b.topo.decode.count").set_value(decode).run()
    assert not at.exception
    return at


def _dot(at: AppTest) -> str:
    charts = at.get("graphviz_chart")
    assert len(charts) == 1
    return str(charts[0].proto.spec)


def _errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def _codes(at: AppTest) -> list[str]:
    return code_spans(at)


def _submit_button(at: AppTest):
    return next(b for b in at.button if b.label == "Queue this run")


def test_pd_1p1d_is_drawn_with_gpus_and_ports_and_no_error(app_env: Path) -> None:
    at = _pd(_build_page(), gpus=2)
    assert _errors(at) == []
    dot = _dot(at)
    for piece in ("client -> router", 'router -> "prefill-0"', 'router -> "decode-0"', "GPU 0", "GPU 1",
                  "bootstrap <port>", "NCCL <port>", "--prefill-policy cache_aware", "--decode-policy round_robin",
                  "--max-concurrent-requests 8", "KV · mooncake", '"prefill-0":e -> "decode-0":e'):
        assert piece in dot, piece
    assert "#d93025" not in dot  # nothing marked as a conflict
    table = at.table[0].value
    assert list(table["Server"]) == ["prefill-0", "decode-0"]
    assert list(table["GPUs"]) == ["0", "1"]
    assert list(table["Flags that differ from the plan-wide flags"]) == [
        "--disaggregation-mode prefill", "--disaggregation-mode decode"]
    router = next(c for c in _codes(at) if "sglang_router.launch_router" in c)
    assert "--pd-disaggregation" in router and "--max-concurrent-requests 8" in router
    assert "--prefill http://127.0.0.1:<prefill-0-port> <prefill-0-bootstrap>" in router
    assert "--decode http://127.0.0.1:<decode-0-port>" in router
    prefill = next(c for c in _codes(at) if "--disaggregation-mode prefill" in c)
    assert prefill.startswith("CUDA_VISIBLE_DEVICES=0 ")
    assert "--disaggregation-bootstrap-port <prefill-0-bootstrap>" in prefill
    assert "--nccl-port <prefill-0-nccl>" in prefill
    decode = next(c for c in _codes(at) if "--disaggregation-mode decode" in c)
    assert decode.startswith("CUDA_VISIBLE_DEVICES=1 ") and "bootstrap" not in decode
    assert not _submit_button(at).disabled


def test_overlapping_gpus_show_the_overlap_and_block_the_plan(app_env: Path) -> None:
    at = _pd(_build_page(), gpus=2)
    at.text_input(key="b.topo.prefill.gpu_ids").set_value("0").run()
    at.text_input(key="b.topo.decode.gpu_ids").set_value("0").run()
    assert not at.exception
    assert any("decode-0: GPU 0 is already used by prefill-0" in e for e in _errors(at))
    dot = _dot(at)
    assert '"decode-0" [label="decode-0\\nGPU 0' in dot and "#d93025" in dot  # drawn, and marked
    assert _submit_button(at).disabled


def test_too_few_gpus_and_too_much_parallelism_are_named(app_env: Path) -> None:
    at = _pd(_build_page(), gpus=2, prefill=2)
    assert any("decode-0: GPU 2 does not exist on a 2-GPU host" in e for e in _errors(at))
    at.number_input(key="b.gpu_count").set_value(3).run()
    assert _errors(at) == []
    at.text_area(key="b.topo.decode.other").set_value("tp-size: 2").run()
    assert any("decode-0: its parallelism needs 2 GPUs, it is given 1" in e for e in _errors(at))


def test_role_flags_that_cannot_be_read_are_explained_not_raised(app_env: Path) -> None:
    at = _pd(_build_page(), gpus=2)
    box = at.text_area(key="b.topo.decode.other")
    for text, message in [
        ("{mem-fraction-static: 0.8", "the other flags are not valid YAML/JSON"),
        ("- 1\n- 2", "the other flags must be a mapping"),
        ("a: &x 1\nb: *x", "anchors and aliases are not allowed"),
        ("mem-fraction-static: {a: 1}", "--mem-fraction-static needs a number"),
        ("disaggregation-mode: prefill", "is set by the topology"),
        ("disaggregation-transfer-backend: nixl", None),
    ]:
        box.set_value(text).run()
        assert not at.exception, text
        if message is None:
            assert _errors(at) == [], text
        else:
            assert any(message in e for e in _errors(at)), (text, _errors(at))
            assert _submit_button(at).disabled, text
    at.text_input(key="b.topo.prefill.gpu_ids").set_value("0;1").run()
    assert any("the GPU ids name 2 servers, but the role has 1" in e for e in _errors(at))
    at.text_input(key="b.topo.prefill.gpu_ids").set_value("zero").run()
    assert any("“zero” is not a GPU list" in e for e in _errors(at))


def test_a_role_flag_unknown_to_the_version_is_a_checked_error(app_env: Path) -> None:
    at = _pd(_build_page(), gpus=2)
    at.text_area(key="b.topo.decode.other").set_value("no-such-flag: 1").run()
    assert not at.exception
    assert any(e.startswith("**decode** ·") and "no-such-flag" in e for e in _errors(at)), _errors(at)
    _submit_button(at).click().run()
    assert any("Refused" in e for e in _errors(at))
    assert Store(app_env).list_runs() == []


def test_transfer_backends_that_differ_are_warned(app_env: Path) -> None:
    at = _pd(_build_page(), gpus=2)
    at.selectbox(key="b.topo.prefill.backend").set_value("nixl").run()
    assert any("nixl on prefill and mooncake on decode" in w.value for w in at.warning)
    assert 'label="KV · nixl"' in _dot(at)


def test_router_with_replicas_and_an_explicit_cap(app_env: Path) -> None:
    at = _build_page()
    at.number_input(key="b.gpu_count").set_value(4).run()
    at.radio(key="b.topo.kind@en").set_value("router").run()
    at.number_input(key="b.topo.replica.gpus").set_value(2).run()
    at.selectbox(key="b.topo.policy").set_value("power_of_two").run()
    at.text_input(key="b.topo.max_conc").set_value("300").run()
    assert not at.exception and _errors(at) == []
    dot = _dot(at)
    assert 'router -> "replica-0"' in dot and 'router -> "replica-1"' in dot and "GPU 2,3" in dot
    router = next(c for c in _codes(at) if "sglang_router.launch_router" in c)
    assert "--policy power_of_two" in router and "--max-concurrent-requests 300" in router
    assert "--worker-urls http://127.0.0.1:<replica-0-port> http://127.0.0.1:<replica-1-port>" in router
    at.text_input(key="b.topo.max_conc").set_value("lots").run()
    assert any("must be a whole number" in e for e in _errors(at))


def test_submitted_plan_stores_the_topology_and_duplicate_brings_it_back(app_env: Path) -> None:
    at = _pd(_build_page(), gpus=3, prefill=2)
    at.selectbox(key="b.topo.prefill.backend").set_value("nixl").run()
    at.selectbox(key="b.topo.decode.backend").set_value("nixl").run()
    at.text_input(key="b.topo.decode.ib").set_value("mlx5_0").run()
    at.text_area(key="b.topo.decode.other").set_value('{"mem-fraction-static": 0.7}').run()
    at.text_input(key="b.topo.prefill.gpu_ids").set_value("2;1").run()
    at.text_input(key="b.topo.decode.gpu_ids").set_value("0").run()
    assert _errors(at) == []
    _submit_button(at).click().run()  # local mode: the OS user, admin by default
    assert not at.exception
    runs = Store(app_env).list_runs()
    assert len(runs) == 1
    plan = RunPlan.model_validate_json(runs[0].plan)
    topology = plan.topology
    assert topology.kind == "pd" and topology.label() == "pd 2P1D (P 2×1GPU, D 1×1GPU)"
    assert topology.prefill.gpu_ids == [[2], [1]] and topology.decode.gpu_ids == [[0]]
    assert topology.prefill.server_args == {"disaggregation-transfer-backend": "nixl"}
    assert topology.decode.server_args == {"disaggregation-transfer-backend": "nixl",
                                           "disaggregation-ib-device": "mlx5_0", "mem-fraction-static": 0.7}
    assert topology.router_max_concurrent_requests is None  # the sweep's highest, written at launch

    # Duplicate: the run page links to the build page with ?from_run=<id>.
    fresh = AppTest.from_file(APP, default_timeout=60)
    fresh.query_params["from_run"] = str(runs[0].id)
    fresh.run()
    at = _build_page(fresh)
    assert at.radio(key="b.topo.kind@en").value == "pd"
    assert at.number_input(key="b.topo.prefill.count").value == 2
    assert at.selectbox(key="b.topo.decode.backend").value == "nixl"
    assert at.text_input(key="b.topo.decode.ib").value == "mlx5_0"
    assert at.text_area(key="b.topo.decode.other").value == "mem-fraction-static: 0.7"
    assert at.text_input(key="b.topo.prefill.gpu_ids").value == "2;1"
    assert _errors(at) == []
    # Loading a preset (aggregated) replaces the whole topology, nothing of the draft left.
    next(b for b in at.button if b.label == "Load preset").click().run()
    assert at.radio(key="b.topo.kind@en").value == "aggregated"
    assert at.get("graphviz_chart") == []  # one server: the drawing waits behind its expander
    at.session_state[DRAWING_OPEN.format(kind="aggregated")] = True  # the user opens it
    at.run()
    assert "server" in _dot(at) and "router" not in _dot(at)
    at.radio(key="b.topo.kind@en").set_value("pd").run()
    assert at.text_input(key="b.topo.prefill.gpu_ids").value == ""


# --- in a real browser ---------------------------------------------------------------------------


def _no_error_shown(page) -> None:
    from playwright.sync_api import expect

    errors = page.get_by_test_id("stAlertContentError")
    try:
        expect(errors).to_have_count(0, timeout=60_000)
    except AssertionError:
        raise AssertionError(f"errors shown: {[e.inner_text() for e in errors.all()]}") from None


def _svg_text(chart, text: str):
    """A text drawn in the diagram (not the <title> elements Graphviz adds for tooltips)."""
    return chart.locator("svg text").filter(has_text=re.compile(f"^{re.escape(text)}$"))


@pytest.mark.browser
@pytest.mark.slow
def test_build_a_2p1d_plan_in_the_browser(env, browser_page, db_path) -> None:
    from playwright.sync_api import expect

    from tests.support.app_server import running_app, screenshot

    env["BENCHDECK_LANGUAGE"] = "en"
    page = browser_page
    with running_app(env) as url:
        page.goto(f"{url}/build")
        # The first run must reach the end of the page before an edit: widgets the browser
        # has not drawn yet would be sent back without their values.
        expect(page.get_by_role("button", name="Queue this run")).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        # ... and have finished it: an edit sent while the first run still draws the page came
        # back with the name and model empty once on a loaded host (noted in the closing note).
        expect(page.get_by_test_id("stStatusWidget")).to_be_hidden(timeout=60_000)
        gpu_count = page.get_by_role("spinbutton", name="GPU count", exact=True)
        gpu_count.fill("3")
        gpu_count.press("Enter")
        expect(page.get_by_text("The servers use 3 of the plan's 3 GPUs.", exact=False)).to_be_visible(timeout=60_000)
        page.get_by_text("PD disaggregated (prefill / decode)").click()
        expect(page.get_by_role("radio", name="PD disaggregated (prefill / decode)")).to_be_checked(timeout=60_000)
        expect(page.get_by_text("The servers use 2 of the plan's 3 GPUs.", exact=False)).to_be_visible(timeout=60_000)
        servers = page.get_by_role("spinbutton", name="Servers", exact=True).first
        servers.fill("2")
        servers.press("Enter")
        chart = page.get_by_test_id("stGraphVizChart")
        expect(chart.locator("svg")).to_be_visible(timeout=60_000)
        expect(_svg_text(chart, "prefill-1")).to_have_count(1, timeout=60_000)
        expect(_svg_text(chart, "decode-0")).to_have_count(1)
        expect(page.get_by_text("The servers use 3 of the plan's 3 GPUs.", exact=False)).to_be_visible(timeout=60_000)
        _no_error_shown(page)
        expect(page.get_by_text("--pd-disaggregation").first).to_be_attached()
        page.wait_for_timeout(1000)
        screenshot(page, "build-topology-pd-en")
        page.get_by_text("Router:", exact=True).scroll_into_view_if_needed()
        page.wait_for_timeout(500)
        screenshot(page, "build-topology-pd-commands-en")
        page.get_by_role("heading", name="Topology").scroll_into_view_if_needed()

        page.get_by_text("日本語").click()
        expect(page.get_by_role("radio", name="PD 分離(プリフィル / デコード)")).to_be_checked(timeout=60_000)
        chart = page.get_by_test_id("stGraphVizChart")
        expect(_svg_text(chart, "プリフィルサーバー")).to_have_count(1, timeout=60_000)
        expect(_svg_text(chart, "prefill-1")).to_have_count(1)
        _no_error_shown(page)
        page.wait_for_timeout(1000)
        screenshot(page, "build-topology-pd-ja")
        # An edit after the switch keeps the topology (choices are not matched by their label).
        gpu_count = page.get_by_role("spinbutton", name="GPU 数", exact=True)
        gpu_count.fill("4")
        gpu_count.press("Enter")
        used = page.get_by_text("サーバーは計画の GPU 4 基のうち 3 基を使います。", exact=False)
        expect(used).to_be_visible(timeout=60_000)
        expect(_svg_text(page.get_by_test_id("stGraphVizChart"), "prefill-1")).to_have_count(1, timeout=60_000)


def test_a_real_sglang_pd_plan_that_leaves_the_backend_unset_is_warned(app_env: Path) -> None:
    at = _pd(_build_page(), gpus=2)
    at.radio(key="b.engine@en").set_value("sglang").run()
    assert not at.exception
    assert any("mooncake-transfer-engine" in w.value and "prefill, decode" in w.value for w in at.warning)
    at.selectbox(key="b.topo.prefill.backend").set_value("nixl").run()
    at.selectbox(key="b.topo.decode.backend").set_value("nixl").run()
    assert not any("mooncake-transfer-engine" in w.value for w in at.warning)
