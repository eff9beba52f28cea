"""PD sweeps end to end: the real daemon launches 1P1D and 2P1D topologies of emulated
workers behind the real sglang-router 0.3.2 and sweeps them with the real bench_serving
client, beside an aggregated run; the compare page and the checklist then put
"PD vs aggregated" side by side with the topology difference marked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from db import Store
from tests.support.actors import admin, operator
from tests.support.app_server import ACTION_TIMEOUT_MS, running_app, screenshot
from tests.support.runner_harness import MARK, assert_nothing_left, run_burst, runner_env, small_plan

pytestmark = [pytest.mark.browser, pytest.mark.sglang, pytest.mark.slow]

BENCH = {"scenarios": [{"name": "short", "input_len": 64, "output_len": 32}],
         "concurrency": [1, 2], "num_prompts": "4x", "warmup": "1x"}
ARGS = {"max-running-requests": 8, "mem-fraction-static": 0.85}


@pytest.fixture
def swept(store: Store, env: dict[str, str]) -> tuple[dict[str, int], dict[str, str]]:
    runs = {
        "aggregated": small_plan(name="aggregated", gpu={"type": "H200", "count": 2}, benchmark=BENCH,
                                 server_args=ARGS),
        "1P1D": small_plan(name="pd-1p1d", gpu={"type": "H200", "count": 2}, benchmark=BENCH, server_args=ARGS,
                           topology={"kind": "pd", "prefill": {"count": 1}, "decode": {"count": 1}}),
        "2P1D": small_plan(name="pd-2p1d", gpu={"type": "H200", "count": 3}, benchmark=BENCH, server_args=ARGS,
                           topology={"kind": "pd", "prefill": {"count": 2}, "decode": {"count": 1}}),
    }
    ids = {label: store.submit_run(plan, submitted_by=operator("t"))[0] for label, plan in runs.items()}
    renv = runner_env(env, BENCHDECK_STARTUP_TIMEOUT_S="120")
    assert run_burst(renv, timeout=480) == 0
    return ids, renv


def test_pd_sweeps_through_the_router_and_compare_with_aggregated(
    swept: tuple[dict[str, int], dict[str, str]], store: Store, browser_page: object, db_path: Path
) -> None:
    ids, renv = swept
    for label, run_id in ids.items():
        assert store.get_run(run_id).status == "succeeded", (label, store.attempts_of(run_id))
        points = store.points_of(run_id)
        assert len(points) == 2 and all(p.completed == p.requested for p in points)
    assert_nothing_left(renv[MARK])

    # Start-up facts and telemetry are kept per role; the router's cap is explicit.
    [attempt] = store.attempts_of(ids["2P1D"])
    facts = json.loads(attempt.startup_facts)
    assert set(facts["roles"]) == {"prefill-0", "prefill-1", "decode-0"}
    assert [m["name"] for m in facts["topology"]["members"]] == ["prefill-0", "prefill-1", "decode-0", "router"]
    sources = {t.source for t in store.telemetry_of(ids["2P1D"])}
    assert {"server:prefill-0", "server:prefill-1", "server:decode-0"} <= sources
    launches = [json.loads(e.details) for e in store.audit_entries(reader=admin(), action="launch",
                                                                       run_id=ids["1P1D"])]
    router = next(d["argv"] for d in launches if d["member"] == "router")
    assert router[router.index("--max-concurrent-requests") + 1] == "2"
    assert "--pd-disaggregation" in router

    page: Page = browser_page  # type: ignore[assignment]
    base, pd1, pd2 = ids["aggregated"], ids["1P1D"], ids["2P1D"]
    with running_app(renv) as url:
        page.goto(f"{url}/checklist?baseline={base}&runs={pd1},{pd2}&lang=en")
        line = page.get_by_text(re.compile(rf"#{pd1} — "))
        expect(line).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        expect(line).to_contain_text("topology")  # the difference the checklist marks
        page.get_by_test_id("stDataFrame").first.wait_for()
        page.wait_for_timeout(2500)
        screenshot(page, "checklist-pd-vs-aggregated-en")
        page.goto(f"{url}/compare?baseline={base}&runs={pd1},{pd2}&lang=en")
        # The compare page opens with one verdict line per run (comparability.verdict_line).
        expect(page.get_by_text(re.compile(rf"#{pd2} vs #{base} \(baseline\): "))).to_be_visible(
            timeout=ACTION_TIMEOUT_MS)
        page.wait_for_timeout(3000)
        screenshot(page, "compare-pd-vs-aggregated-en")
        page.goto(f"{url}/run?run={pd2}&lang=en")
        expect(page.get_by_text("Topology (pd)")).to_be_visible(timeout=ACTION_TIMEOUT_MS)
        page.wait_for_timeout(2500)
        screenshot(page, "run-pd-2p1d-en")
