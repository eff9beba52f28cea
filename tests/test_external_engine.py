"""``engine: external`` (issue 18): benchmarking a server benchdeck did not start.

The end-to-end test starts an emulator in SGLang mode itself, outside the runner, lists it
in BENCHDECK_EXTERNAL_ENDPOINTS and runs the real runner daemon in burst mode over a real
DuckDB file with the real bench_serving client; the emulator must still be up afterwards
(nothing of benchdeck's tore it down).  The other tests are the plan's refusals, the
submit-side check and the claim, without processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from db import RunnerCapabilities, Store
from domain.compare.comparison import build_comparison
from domain.core.settings import PROJECT_ROOT, ExternalEndpoint, Settings
from domain.core.states import FailureKind
from domain.flags.schema import SCHEMA_DIR, newest_version
from domain.plan.checks import check_plan
from domain.plan.plan_io import PlanError, plan_from_mapping
from domain.plan.run_plan import RunPlan
from domain.results.frames import points_frame
from emulator.testing import free_port, running_emulator
from runner import external, server_process
from tests.support.actors import operator
from tests.support.runner_harness import MARK, assert_nothing_left, audit_rows, run_burst, runner_env, small_plan

TOKENIZER = PROJECT_ROOT / "data" / "tokenizer"
BENCH = {"scenarios": [{"name": "short", "input_len": 64, "output_len": 32}], "concurrency": [1, 2],
         "num_prompts": "3x", "warmup": "1x"}
# The emulated run beside it speaks the same OpenAI completions path as the external one's client.
EMULATED_BENCH = {**BENCH, "backend": "sglang-oai", "tokenize_prompt": False}


def external_plan(endpoint: str = "lab", **overrides: object) -> RunPlan:
    data: dict[str, object] = {
        "name": f"external {endpoint}", "engine": "external", "model": "Qwen/Qwen3-30B-A3B",
        "gpu": {"type": "H200", "count": 1}, "benchmark": BENCH,
        "external": {"endpoint": endpoint, "engine": "sglang", "version": "0.5.23"},
    }
    data.update(overrides)
    return plan_from_mapping(data)


def endpoints_json(*endpoints: dict[str, object]) -> str:
    return json.dumps(list(endpoints))


def _refusal(**overrides: object) -> list[str]:
    with pytest.raises(PlanError) as caught:
        external_plan(**overrides)
    return [problem.kind for problem in caught.value.problems]


def test_the_plan_takes_openai_client_defaults_and_refuses_what_benchdeck_cannot_set() -> None:
    plan = external_plan()
    bench = plan.benchmark
    assert (bench.backend, bench.tokenize_prompt, bench.flush_cache) == ("vllm", False, False)
    assert plan.emulated is False and plan.engine_version == "0.5.23" and plan.is_vllm is False
    assert plan.configuration_snapshot()["external"] == {"endpoint": "lab", "engine": "sglang", "version": "0.5.23"}
    assert _refusal(server_args={"tp-size": 2}) == ["external_server_args"]
    assert _refusal(external=None) == ["external_missing"]
    assert _refusal(sglang_version="0.5.23") == ["external_version"]
    assert _refusal(benchmark={**BENCH, "flush_cache": True}) == ["external_flush_cache"]
    assert _refusal(benchmark={**BENCH, "backend": "sglang"}) == ["external_backend"]
    assert _refusal(benchmark={**BENCH, "tokenize_prompt": True}) == ["tokenize_needs_sglang"]
    assert _refusal(benchmark={**BENCH, "fresh_launch_per_repeat": True}) == ["external_fresh_launch"]
    with pytest.raises(PlanError) as caught:
        small_plan(external={"endpoint": "lab", "engine": "other", "version": None})
    assert [p.kind for p in caught.value.problems] == ["external_fields"]
    # A plan that is not external dumps without the field (stored plans and YAML unchanged).
    assert "external" not in small_plan().model_dump()


def test_endpoints_are_urls_an_administrator_lists() -> None:
    endpoint = ExternalEndpoint(name="lab", base_url="http://10.0.0.5:8000/",
                                metrics_url="http://10.0.0.5:9400/prometheus/metrics")
    assert endpoint.base_url == "http://10.0.0.5:8000" and endpoint.metrics_base == "http://10.0.0.5:9400/prometheus"
    for bad in ({"base_url": "file:///etc/passwd"}, {"base_url": "http://h:1/v1"},
                {"base_url": "http://h:1", "metrics_url": "http://h:1/stats"},
                {"base_url": "http://user:pw@h:1"}):
        with pytest.raises(ValueError):
            ExternalEndpoint(name="x", **bad)
    with pytest.raises(ValueError, match="distinct"):
        Settings(external_endpoints=[endpoint, endpoint])


def test_an_unlisted_endpoint_is_refused_at_submit_in_both_languages() -> None:
    listed = Settings(external_endpoints=[ExternalEndpoint(name="lab", base_url="http://127.0.0.1:8000")])
    assert check_plan(external_plan("lab"), listed, "en").ok
    report = check_plan(external_plan("elsewhere"), listed, "en")
    assert report.errors == ["The external endpoint 'elsewhere' is not listed in BENCHDECK_EXTERNAL_ENDPOINTS "
                             "(listed: lab). A form never takes a URL: ask an administrator to list it."]
    [ja] = check_plan(external_plan("elsewhere"), listed, "ja").errors
    assert "「elsewhere」" in ja and "登録されていません" in ja
    # What the plan declares is said to be declared, and a missing metrics URL is named.
    assert any("declared by the plan" in w for w in report.warnings)
    assert any("lists no metrics_url" in w for w in check_plan(external_plan("lab"), listed, "en").warnings)


def test_any_runner_claims_an_external_run_whatever_its_gpus(store: Store) -> None:
    run_id, _ = store.submit_run(external_plan(gpu={"type": "B200", "count": 8}), submitted_by=operator("t"))
    emulated, _ = store.submit_run(small_plan(gpu={"type": "B200", "count": 8}), submitted_by=operator("t"))
    caps = RunnerCapabilities("elsewhere", "H100", 1, None, None)
    claim = store.claim_next(caps, lease_s=30)
    assert claim is not None and claim.run_id == run_id and claim.plan.external is not None
    assert store.claim_next(caps, lease_s=30) is None  # the emulated B200 run still needs B200s
    assert store.get_run(emulated).status == "queued"


def test_a_silent_endpoint_times_out_and_an_unread_engine_says_why() -> None:
    silent = ExternalEndpoint(name="silent", base_url=f"http://127.0.0.1:{free_port()}",
                              metrics_url="http://127.0.0.1:1/metrics")
    with pytest.raises(server_process.AttemptFailure) as caught:
        external.wait_ready(silent, budget_s=0.5, cancelled=lambda: False)
    assert caught.value.kind is FailureKind.STARTUP_TIMEOUT and "did not answer /v1/models" in str(caught.value)
    plan = external_plan("silent", external={"endpoint": "silent", "engine": "trt-llm", "version": None})
    assert external.samplers_for(plan, external.ExternalDeployment("external", endpoint=silent)) == []
    notes = {row["source"]: row["note"] for row in external.unavailable_rows(plan, silent)}
    assert notes["server"] == "declared engine trt-llm: benchdeck reads only SGLang's and vLLM's /metrics"
    assert notes["gpu"].startswith("not on this host")
    with pytest.raises(server_process.AttemptFailure) as unlisted:
        external.endpoint_for(plan, Settings(external_endpoints=[]))
    assert unlisted.value.kind is FailureKind.BAD_ARGS


@pytest.mark.sglang
@pytest.mark.slow
def test_an_external_server_is_benchmarked_without_being_started_or_stopped(
        store: Store, env: dict[str, str], tmp_path: Path) -> None:
    version = newest_version()
    args = ["--model-path", "Qwen/Qwen3-30B-A3B", "--enable-metrics", "--max-running-requests", "16",
            "--mem-fraction-static", "0.85", "--emulate-gpu", "H200", "--emulate-gpu-count", "1",
            "--emulate-sglang-version", version, "--emulate-schema-dir", str(SCHEMA_DIR),
            "--emulate-tokenizer-dir", str(TOKENIZER)]
    with running_emulator(args, tmp_path / "external.log", timeout=60) as server:
        lab = {"name": "lab", "base_url": server.base_url, "metrics_url": f"{server.base_url}/metrics",
               "tokenizer_dir": str(TOKENIZER)}
        gone = {"name": "gone", "base_url": f"http://127.0.0.1:{free_port()}", "metrics_url": None}
        at_submit = Settings(external_endpoints=[ExternalEndpoint(**lab), ExternalEndpoint(**gone)])
        plans = [small_plan(name="emulated", benchmark=EMULATED_BENCH), external_plan("lab"), external_plan("gone")]
        assert all(check_plan(plan, at_submit, "en").ok for plan in plans)
        emulated, external, dropped = (store.submit_run(p, submitted_by=operator("t"))[0] for p in plans)
        # The administrator drops "gone" from the list after the submit: the runner refuses it.
        renv = runner_env(env, BENCHDECK_EXTERNAL_ENDPOINTS=endpoints_json(lab))
        assert run_burst(renv) == 0
        assert server.alive()  # not torn down: benchdeck did not start it
        server.wait_for("/v1/models", timeout=5)  # and still serving

    run = store.get_run(external)
    assert run.status == "succeeded" and run.source == "measured", store.attempts_of(external)
    [attempt] = store.attempts_of(external)
    facts = json.loads(attempt.startup_facts)
    assert facts["served_models"] == ["Qwen/Qwen3-30B-A3B"] and facts["served_model_is_declared"] is True
    assert facts["max_model_len"] > 0 and facts["emulated"] is False and facts["ready_check"] == "/v1/models"
    assert facts["declared"] == {"declared": True, "endpoint": "lab", "engine": "sglang", "version": "0.5.23",
                                 "model": "Qwen/Qwen3-30B-A3B", "gpu_type": "H200", "gpu_count": 1,
                                 "topology": {"kind": "aggregated"}}
    assert json.loads(attempt.server_argv) == []  # nothing launched
    assert json.loads(attempt.host_info)["run_gpus"]["note"].startswith("not on this host")
    [target] = [row["details"] for row in audit_rows(store, "external_target") if row["run_id"] == external]
    assert target["base_url"] == server.base_url and target["declared"]["engine"] == "sglang"
    points = store.points_of(external)
    assert [p.concurrency for p in points] == [1, 2]
    for point in points:
        conditions = json.loads(point.conditions)
        assert point.completed == point.requested and point.output_throughput > 0
        assert conditions["backend"] == "vllm" and conditions["flush_cache"] is False
        assert conditions["engine"] == "external" and conditions["emulated"] is False
        assert (conditions["declared"], conditions["declared_engine"], conditions["declared_version"]) == (
            True, "sglang", "0.5.23")
        assert conditions["tokenizer"]["source"] == "endpoint"  # the listed tokenizer_dir, even in a kept client
    telemetry = store.telemetry_of(external)
    server_metrics = {t.metric for t in telemetry if t.source == "server"}
    # The emulator's /metrics read with SGLang's reader, as the declared engine says.  Without a
    # cache flush the client marks no end of warmup: gauges span it, and no counter delta is kept.
    assert {"running_reqs", "token_usage", "queued_reqs"} <= server_metrics, server_metrics
    assert not {"generation_tokens_delta", "prompt_tokens_delta"} & server_metrics
    assert all(json.loads(p.conditions)["warmup_excluded_from_telemetry"] is False for p in points)
    gpu = [t for t in telemetry if t.source == "gpu"]
    assert gpu and all(t.metric == "unavailable" and "not on this host" in (t.note or "") for t in gpu)

    failed = store.get_run(dropped)
    [refused] = store.attempts_of(dropped)  # bad_args is never retried
    assert failed.status == "failed" and refused.failure_kind == "bad_args"
    assert "'gone' is not listed in this runner's BENCHDECK_EXTERNAL_ENDPOINTS" in (refused.message or "")
    assert store.points_of(dropped) == []
    assert store.get_run(emulated).status == "succeeded"
    assert_nothing_left(renv[MARK])

    frame = points_frame(p.as_dict() for p in store.points_for_comparison([emulated, external]))
    comparison = build_comparison(frame, emulated, [external], "en", intended_to_differ=frozenset({"engine"}))
    [verdict] = comparison.verdict_lines
    # The engine is the difference under test; the emulated figures stay apart from measured ones.
    assert "under test: engine: sglang → external" in verdict, verdict
    assert "source (measured / emulated / imported): emulated → measured" in verdict
