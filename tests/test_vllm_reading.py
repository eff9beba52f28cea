"""The runner reads a vLLM server's log and /metrics (domain/engines/vllm_log.py through the
shared log reader, domain/engines/vllm_metrics.py through the shared metrics reader).

Every log line and every /metrics family here is built at test time from the shipped wheels'
sources (``.venv-vllm/src/<version>/vllm``, unpacked by ``scripts/setup_vllm_env.sh``): the
message's format string (a ``%`` string or an f-string) is taken from the file that logs or
raises it and filled with values, the line header from vLLM's own ``logger.py`` format; the
exposition is rendered by the real prometheus_client from the families ``v1/metrics/loggers.py``
defines.  So a wording or a metric name changed in a shipped wheel fails a test here.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import http.server
import io
import logging
import re
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from domain.core.states import FailureKind
from domain.engines import sglang_metrics
from domain.engines.vllm_log import READY_LINES, VLLM_LOG
from domain.engines.vllm_metrics import VLLM_COUNTERS, VLLM_GAUGES, VLLM_METRICS
from runner import telemetry
from runner.telemetry import read_server_metrics, server_samples
from tests.conftest import ROOT

SRC = ROOT / ".venv-vllm" / "src"
# vLLM's log through the shared reader, under the names the tests read it by.
classify, find_failure, startup_facts, startup_stage = (VLLM_LOG.classify, VLLM_LOG.diagnose, VLLM_LOG.startup_facts,
                                                        VLLM_LOG.startup_stage)
NEW, OLD = "0.33.0", "0.11.2"
VERSIONS = (NEW, OLD)
TORCH_INDUCTOR = next((ROOT / ".venv-sglang" / "lib").glob("python3*/site-packages/torch/_inductor/utils.py"), None)
UVICORN_LIFESPAN = next((ROOT / ".venv" / "lib").glob("python3*/site-packages/uvicorn/lifespan/on.py"), None)


# -- format strings from the sources ----------------------------------------------------------


@functools.cache
def _tree(path: Path) -> ast.Module:
    if not path.exists():
        pytest.fail(f"{path} is missing: run `bash scripts/setup_vllm_env.sh`")
    return ast.parse(path.read_text(encoding="utf-8"))


def _vllm_file(version: str, relative: str) -> Path:
    return SRC / version / "vllm" / relative


def _template(node: ast.AST) -> str | None:
    """A string literal's text; an f-string's with each ``{expression}`` kept as written."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                parts.append("{" + ast.unparse(value.value) + "}")
            else:
                parts.append(str(value.value) if isinstance(value, ast.Constant) else "")
        return "".join(parts)
    return None


@functools.cache
def _strings(path: Path) -> frozenset[str]:
    """Every string literal and f-string template in ``path`` (an f-string's pieces not apart)."""
    nodes = list(ast.walk(_tree(path)))
    inner = {id(part) for node in nodes if isinstance(node, ast.JoinedStr) for part in node.values}
    return frozenset(text for node in nodes if id(node) not in inner and (text := _template(node)) is not None)


def fmt(path: Path, needle: str) -> str:
    """The one string literal (or f-string) in ``path`` that contains ``needle``."""
    found = {text for text in _strings(path) if needle in text}
    assert len(found) == 1, f"{len(found)} strings with {needle!r} in {path}: {sorted(found)}"
    return found.pop()


def fill(template: str, **values: object) -> str:
    """An f-string template with its expressions replaced: by ``values`` (keyed by the
    expression's last name) or, for any other, ``1``."""
    def value(match: re.Match[str]) -> str:
        key = re.findall(r"\w+", match.group(1))[-1]
        return str(values.get(key, 1))
    return re.sub(r"\{([^{}]+)\}", value, template)


# -- log lines as vLLM writes them ----------------------------------------------------------


def _log_format(version: str) -> tuple[str, str]:
    """vLLM's ``_FORMAT`` (with an empty VLLM_LOGGING_PREFIX) and ``_DATE_FORMAT``."""
    assigned = {node.targets[0].id: node.value for node in ast.walk(_tree(_vllm_file(version, "logger.py")))
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}
    return fill(_template(assigned["_FORMAT"]) or "", VLLM_LOGGING_PREFIX=""), str(_template(assigned["_DATE_FORMAT"]))


def log(version: str, message: str, *, level: str = "INFO", process: str = "EngineCore_DP0",
        fileinfo: str = "core.py") -> str:
    """``message`` as vLLM prints it: the header on every line of a multi-line message
    (NewLineFormatter: ``\\n`` becomes ``\\r\\n`` + the header); the process prefix from the
    format (0.33.0) or from the coloured stdout wrapper (0.11.2, ``_add_prefix``)."""
    form, datefmt = _log_format(version)
    record = logging.LogRecord("vllm", getattr(logging, level), fileinfo, 1586, message, None, None)
    record.vllm_process_name, record.fileinfo, record.process = process, fileinfo, 4242
    text = logging.Formatter(form, datefmt).format(record)
    header = text.split(message)[0]
    text = text.replace("\n", "\r\n" + header)
    if version == OLD:
        colours = {node.targets[0].id: ast.literal_eval(node.value)
                   for node in ast.walk(_tree(_vllm_file(version, "utils/system_utils.py")))
                   if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                   and node.targets[0].id in ("CYAN", "RESET")}
        prefix = f"{colours['CYAN']}({process} pid=4242){colours['RESET']} "
        text = "\n".join(prefix + line for line in text.split("\n"))
    return text + "\n"


def _raise_from(path: Path, function: str, exc: BaseException) -> str:
    """A real traceback whose innermost frame is ``function`` in ``path`` (a vLLM file)."""
    code = compile(f"def {function}(exc):\n    raise exc\n", str(path), "exec")
    scope: dict[str, Callable[[BaseException], None]] = {}
    exec(code, scope)  # noqa: S102 - compiles two lines of our own under vLLM's file name
    try:
        scope[function](exc)
    except BaseException:
        return traceback.format_exc()
    raise AssertionError("unreachable")


def engine_failure(version: str, exc: BaseException, *, where: str = "v1/engine/core.py",
                   function: str = "run_engine_core") -> str:
    """The engine core's dying words (``logger.exception`` of v1/engine/core.py) around ``exc``
    raised in ``where``, then the API server's "Engine core initialization failed" traceback."""
    report = fmt(_vllm_file(version, "v1/engine/core.py"), "EngineCore failed to start")
    traceback_text = _raise_from(_vllm_file(version, where), function, exc).rstrip()
    return log(version, f"{report}\n{traceback_text}", level="ERROR") + init_failed(version, exitcode=1)


def init_failed(version: str, *, exitcode: int) -> str:
    """The API server's traceback when an engine core process ended with ``exitcode``."""
    message = fmt(_vllm_file(version, "v1/engine/utils.py"), "Engine core initialization failed")
    api = _raise_from(_vllm_file(version, "v1/engine/utils.py"), "wait_for_engine_startup",
                      RuntimeError(fill(message, finished={"EngineCore_DP0": exitcode})))
    return "".join(f"(APIServer pid=4241) {line}\n" for line in api.splitlines())


# -- start-up facts and stages --------------------------------------------------------------


def _startup_log(version: str) -> tuple[str, dict[str, float]]:
    """A start-up log of ``version`` from the real format strings, and the facts it states."""
    runner = _vllm_file(version, "v1/worker/gpu_model_runner.py")
    lines = [
        log(version, fmt(_vllm_file(version, "entrypoints/common/startup.py" if version == NEW
                                    else "entrypoints/utils.py"), "non-default args")
            % {"model_tag": "Qwen/Qwen3-8B", "max_num_seqs": 96, "max_num_batched_tokens": 8192},
            process="APIServer", fileinfo="startup.py"),
        log(version, fmt(_vllm_file(version, "config/scheduler.py"), "Chunked prefill is enabled") % 8192),
        log(version, fmt(runner, "Starting to load model") % "Qwen/Qwen3-8B"),
        log(version, fmt(_vllm_file(version, "model_executor/model_loader/default_loader.py"), "Loading weights took")
            % 3.27),
        log(version, fmt(runner, "Model loading took") % (15.27, 4.123456)),
        log(version, fmt(_vllm_file(version, "v1/worker/gpu_worker.py"), "Available KV cache memory") % 102.5),
    ]
    kv = _vllm_file(version, "v1/core/kv_cache_utils.py")
    engine = _vllm_file(version, "v1/engine/core.py")
    if version == NEW:  # the KV line; compile time is reported in the init line
        lines.append(log(version, fmt(kv, "KV cache size: %s tokens") % ("GPU", "1,234,560", "32,768", 37.68)))
        init_line = fmt(engine, "(compilation: %.2f s)") % (48.31, 21.5)
    else:  # two KV lines and a compile line of its own
        lines.append(log(version, fmt(kv, "GPU KV cache size: %s tokens") % "1,234,560"))
        lines.append(log(version, fmt(kv, "Maximum concurrency for %s tokens per request") % ("32,768", 37.68)))
        lines.append(log(version, fmt(_vllm_file(version, "compilation/monitor.py"), "torch.compile takes") % 21.5))
        init_line = fmt(engine, "init engine (profile") % 48.31
    # graphs are captured in the engine's warm-up, which the init line times
    lines.append(log(version, fmt(runner, "Graph capturing finished in") % (9.0, 0.84)))
    lines.append(log(version, init_line))
    facts = {"max_running_requests": 96, "max_num_batched_tokens": 8192, "weights_read_s": 3.27,
             "weight_mem_gb": 15.27, "load_weight_elapsed_s": 4.123456, "kv_cache_mem_gb": 102.5,
             "kv_cache_tokens": 1234560, "max_total_num_tokens": 1234560, "context_len": 32768,
             "max_concurrency_for_context": 37.68, "compile_s": 21.5, "cuda_graph_elapsed_s": 9.0,
             "cuda_graph_mem_gb": 0.84, "engine_init_s": 48.31}
    return "".join(lines), facts


def _ready_lines(version: str) -> str:
    if version == NEW:
        port = fmt(_vllm_file(version, "entrypoints/launchers/api_server/entry.py"), "Starting vLLM server on")
        text = log(version, port % "http://0.0.0.0:8000", process="APIServer", fileinfo="entry.py")
    else:
        port = fmt(_vllm_file(version, "entrypoints/openai/api_server.py"), "Starting vLLM API server")
        text = log(version, port % (0, "http://0.0.0.0:8000"), process="APIServer", fileinfo="api_server.py")
    assert UVICORN_LIFESPAN is not None, "uvicorn is a dependency of the app's environment"
    ready = fmt(UVICORN_LIFESPAN, "Application startup complete")
    return text + f"INFO:     {ready}\n"


@pytest.mark.parametrize("version", VERSIONS)
def test_startup_facts_of_each_shipped_wording(version: str) -> None:
    text, facts = _startup_log(version)
    assert startup_facts(text) == facts
    assert all(isinstance(startup_facts(text)[key], int)
               for key in ("kv_cache_tokens", "max_total_num_tokens", "context_len", "max_running_requests"))


@pytest.mark.parametrize("version", VERSIONS)
def test_startup_stages_in_order(version: str) -> None:
    text, _ = _startup_log(version)
    lines = (text + _ready_lines(version)).splitlines(keepends=True)
    seen = [startup_stage("".join(lines[:n])) for n in range(len(lines) + 1)]
    assert list(dict.fromkeys(seen)) == ["init", "weights", "kv_cache", "cuda_graphs", "http_server", "ready"]


def test_ready_lines_are_the_shipped_ones() -> None:
    texts = _ready_lines(NEW) + _ready_lines(OLD)
    assert all(line in texts for line in READY_LINES)
    assert startup_stage(_ready_lines(OLD).splitlines()[0]) == "ready"  # 0.11.2's numbered port line


def test_a_debug_log_gives_the_defaulted_max_num_seqs() -> None:
    line = fmt(_vllm_file(NEW, "engine/arg_utils.py"), "Defaulting max_num_seqs to") % (1024, "openai-api-server")
    assert startup_facts(log(NEW, line, level="DEBUG", process="APIServer"))["max_running_requests"] == 1024
    assert "max_running_requests" not in startup_facts(_startup_log(NEW)[0].replace("'max_num_seqs': 96, ", ""))


# -- fatal lines ----------------------------------------------------------------------------


def _kv_too_small(version: str) -> str:
    path = _vllm_file(version, "v1/core/kv_cache_planning.py" if version == NEW else "v1/core/kv_cache_utils.py")
    estimated = fmt(path, "the estimated maximum model length is")
    return fill(fmt(path, "To serve at least one request"), max_model_len=131072, estimated_msg=fill(
        estimated, estimated_max_len=50000))


def _oom_cases(version: str) -> Iterator[tuple[str, str]]:
    kv_utils = _vllm_file(version, "v1/core/kv_cache_planning.py" if version == NEW else "v1/core/kv_cache_utils.py")
    yield "no KV memory", engine_failure(version, ValueError(fmt(kv_utils, "No available memory for the cache")))
    yield "KV below one max-len request", engine_failure(version, ValueError(_kv_too_small(version)))
    cuda_oom = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB "
                "of which 1.06 GiB is free.")
    if version == NEW:
        runner = _vllm_file(version, "v1/worker/gpu_model_runner.py")
        failed_load = fmt(runner, "Failed to load model - not enough GPU memory")
        yield "weights do not fit", log(version, f"{failed_load} (original error: {cuda_oom})", level="ERROR")
        yield "sampler warm-up", engine_failure(version, RuntimeError(fill(
            fmt(runner, "CUDA out of memory occurred when warming up sampler"), num_reqs=1024)))
    yield "raw CUDA OOM", engine_failure(version, type("OutOfMemoryError", (RuntimeError,), {
        "__module__": "torch"})(cuda_oom), where="v1/worker/gpu_model_runner.py", function="load_model")


@pytest.mark.parametrize("version", VERSIONS)
def test_out_of_memory(version: str) -> None:
    for what, text in _oom_cases(version):
        diagnosis = classify(text, default=FailureKind.SERVER_CRASH)
        assert diagnosis.kind == FailureKind.OOM, what
        assert not diagnosis.retryable and diagnosis.hint


@pytest.mark.parametrize("version", VERSIONS)
def test_the_kv_line_is_quoted_over_the_reports_around_it(version: str) -> None:
    diagnosis = classify(engine_failure(version, ValueError(_kv_too_small(version))), default=FailureKind.SERVER_CRASH)
    assert diagnosis.line.startswith("ValueError: To serve at least one request")
    assert "max-model-len" in diagnosis.hint


@pytest.mark.parametrize("version", VERSIONS)
def test_a_busy_gpu_is_the_hosts_fault(version: str) -> None:
    where = "v1/worker/utils.py" if version == NEW else "v1/worker/gpu_worker.py"
    message = fill(fmt(_vllm_file(version, where), "on startup is less than desired"), gpu_memory_utilization=0.92)
    diagnosis = classify(engine_failure(version, ValueError(message), where=where, function="request_memory"),
                         default=FailureKind.SERVER_CRASH)
    assert diagnosis.kind == FailureKind.HOST_UNHEALTHY, diagnosis


def test_rejected_arguments() -> None:
    import argparse

    import pydantic

    parser = argparse.ArgumentParser(prog="vllm serve", usage="vllm serve [model_tag] [options]")
    parser.add_argument("--port", type=int)
    err = io.StringIO()
    with pytest.raises(SystemExit), contextlib.redirect_stderr(err):
        parser.parse_args(["--bogus"])
    field = "gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)"
    assert field in _vllm_file(NEW, "config/cache.py").read_text(encoding="utf-8")

    @pydantic.dataclasses.dataclass
    class CacheConfig:  # that field of vLLM's pydantic CacheConfig
        gpu_memory_utilization: float = pydantic.Field(default=0.92, gt=0, le=1)

    with pytest.raises(pydantic.ValidationError) as validation:
        CacheConfig(gpu_memory_utilization=1.5)
    cases = {
        "argparse": err.getvalue(),
        "pydantic": log(NEW, "Error" + "\n" + _raise_from(_vllm_file(NEW, "engine/arg_utils.py"),
                                                           "create_engine_config", validation.value), level="ERROR"),
        "config frame": _raise_from(_vllm_file(NEW, "config/model.py"), "__post_init__",
                                    ValueError("unknown runner 'foo'")),
        "not a valid": _raise_from(_vllm_file(OLD, "engine/arg_utils.py"), "create_load_config",
                                   ValueError("'safetensor' is not a valid LoadFormat")),
        "port taken": _raise_from(_vllm_file(NEW, "entrypoints/launchers/launcher.py"), "create_server_socket",
                                  OSError(98, "Address already in use")),
    }
    for what, text in cases.items():
        assert classify(text, default=FailureKind.SERVER_CRASH).kind == FailureKind.BAD_ARGS, what


@pytest.mark.parametrize("version", VERSIONS)
def test_nccl_is_the_cause_not_the_engine_report(version: str) -> None:
    wrapper = _vllm_file(version, "distributed/device_communicators/pynccl_wrapper.py")
    message = fill(fmt(wrapper, "NCCL error: "), error_str="unhandled system error")
    text = engine_failure(version, RuntimeError(message), where="distributed/device_communicators/pynccl_wrapper.py",
                          function="NCCL_CHECK")
    diagnosis = classify(text, default=FailureKind.SERVER_CRASH)
    assert (diagnosis.kind, diagnosis.line) == (FailureKind.NCCL, f"RuntimeError: {message}")
    assert diagnosis.retryable


@pytest.mark.parametrize("version", VERSIONS)
def test_engine_death_reports(version: str) -> None:
    executor = fmt(_vllm_file(version, "v1/executor/multiproc_executor.py"), "died unexpectedly")
    died = executor % (("VllmWorker-1", 1) if version == NEW else ("VllmWorker-1",))
    dead = fmt(_vllm_file(version, "v1/engine/exceptions.py"), "EngineCore encountered an issue")
    texts = [log(version, died, level="ERROR"),
             log(version, f"vllm.v1.engine.exceptions.EngineDeadError: {dead}", level="ERROR", process="APIServer")]
    client = _vllm_file(version, "v1/engine/core_client.py")
    if version == NEW:
        texts.append(log(version, fmt(client, "engine core exited unexpectedly"), level="WARNING"))
    else:
        texts.append(log(version, fmt(client, "died unexpectedly") % "EngineCore_DP0", level="ERROR"))
    for text in texts:
        diagnosis = classify(text, default=FailureKind.BENCH_FAILED)
        assert (diagnosis.kind, diagnosis.retryable) == (FailureKind.SERVER_CRASH, True), text
    assert classify(init_failed(version, exitcode=1), default=FailureKind.OOM).kind == FailureKind.SERVER_CRASH
    # an engine core killed by SIGKILL without a word: the host's OOM killer
    killed = classify(init_failed(version, exitcode=-9), default=FailureKind.SERVER_CRASH)
    assert (killed.kind, killed.line.startswith("RuntimeError: Engine core initialization failed")) == (
        FailureKind.OOM, True)


@pytest.mark.parametrize("version", VERSIONS)
def test_runtime_faults_name_their_cause(version: str) -> None:
    """At run time the engine dies through "WorkerProc hit an exception." (multiproc executor)
    and "EngineCore encountered a fatal error."; the exception under them names the cause."""
    worker = fmt(_vllm_file(version, "v1/executor/multiproc_executor.py"), "WorkerProc hit an exception")
    fatal = fmt(_vllm_file(version, "v1/engine/core.py"), "EngineCore encountered a fatal error")
    causes = {FailureKind.SERVER_CRASH: RuntimeError("CUDA error: an illegal memory access was encountered"),
              FailureKind.DISK_FULL: OSError(28, "No space left on device")}
    for kind, exc in causes.items():
        trace = _raise_from(_vllm_file(version, "v1/worker/gpu_model_runner.py"), "execute_model", exc).rstrip()
        text = log(version, f"{worker}\n{trace}", level="ERROR", process="VllmWorker TP0") + log(
            version, fatal, level="ERROR")
        diagnosis = classify(text, default=FailureKind.BENCH_FAILED)
        assert (diagnosis.kind, diagnosis.line) == (kind, traceback.format_exception_only(exc)[-1].strip())


def test_no_failure_gives_the_default() -> None:
    text, _ = _startup_log(NEW)
    assert classify(text + _ready_lines(NEW), default=FailureKind.STARTUP_TIMEOUT) == classify(
        "", default=FailureKind.STARTUP_TIMEOUT)
    assert classify("", default=FailureKind.STARTUP_TIMEOUT).kind == FailureKind.STARTUP_TIMEOUT


# -- harmless lines -------------------------------------------------------------------------


def _stats_line(version: str) -> str:
    """The periodic stats line: its parts as loggers.py lists them, then the KV usage and the
    prefix cache hit rate (0.11.2 lists them too; 0.33.0 appends them after the device name)."""
    lists = [node for node in ast.walk(_tree(_vllm_file(version, "v1/metrics/loggers.py")))
             if isinstance(node, ast.List) and node.elts and all(isinstance(e, ast.Constant) for e in node.elts)]
    parts = next(ast.literal_eval(node) for node in lists
                 if "Avg prompt throughput: %.1f tokens/s" in ast.literal_eval(node))
    kv = ["GPU KV cache usage: %.1f%%", "Prefix cache hit rate: %.1f%%"]
    tail = [] if kv[0] in parts else kv
    return ", ".join(parts + tail)


def _harmless_lines() -> Iterator[tuple[str, str]]:
    shim = _vllm_file(NEW, "entrypoints/openai/api_server.py")
    for needle in ("`vllm.entrypoints.openai.api_server` is deprecated", "command is deprecated"):
        yield needle, warnings.formatwarning(fmt(shim, needle), DeprecationWarning, str(shim), 24)
    if TORCH_INDUCTOR is not None:
        # torch's own logger, not vLLM's format: only the process prefix
        yield "max_autotune", f"(EngineCore_DP0 pid=4242) {fmt(TORCH_INDUCTOR, 'Not enough SMs')}\n"
    for version in VERSIONS:
        wrapper = _vllm_file(version, "distributed/device_communicators/pynccl_wrapper.py")
        yield f"no NCCL library {version}", log(version, fmt(wrapper, "Failed to load NCCL library from") % (
            "libnccl.so.2", "cuda"), level="ERROR")
        pynccl = _vllm_file(version, "distributed/device_communicators/pynccl.py")
        yield f"nccl version {version}", log(version, fmt(pynccl, "vLLM is using nccl") % "2.27.3")
        advisory = fill(fmt(_vllm_file(version, "v1/worker/gpu_worker.py"), "Desired GPU memory utilization is"))
        yield f"memory advisory {version}", log(version, advisory)
        yield f"stats line {version}", log(version, _stats_line(version) % (1.0, 2.0, 3, 4, 95.0, 12.5))
    yield "numa warning", log(NEW, fmt(_vllm_file(NEW, "v1/worker/cpu_worker.py"), "is not a valid memory node")
                              % (3, 0), level="WARNING")
    request = _raise_from(_vllm_file(NEW, "v1/engine/async_llm.py"), "generate", ValueError("prompt too long"))
    stream = fmt(_vllm_file(NEW, "entrypoints/openai/completion/serving.py"), "Error in completion stream")
    yield "a failed request", log(NEW, stream + "\n" + request.rstrip(), level="ERROR", process="APIServer")
    yield "ASGI", "ERROR:    Exception in ASGI application\n" + request


def test_harmless_lines_are_no_failure() -> None:
    lines = dict(_harmless_lines())
    assert len(lines) == 13 + (TORCH_INDUCTOR is not None)
    assert {what: find_failure(text) for what, text in lines.items()} == dict.fromkeys(lines)


def test_a_failed_request_does_not_hide_the_engine_dying_after_it() -> None:
    request = dict(_harmless_lines())["a failed request"]
    dying = engine_failure(NEW, ValueError(_kv_too_small(NEW)))
    assert classify(request + dying, default=FailureKind.SERVER_CRASH).kind == FailureKind.OOM


# -- collectors' wrappers -------------------------------------------------------------------


_WRAPS: dict[str, Callable[[str], str]] = {
    "docker compose": lambda line: f"vllm-1  | {line}",
    "CRI": lambda line: f"2026-12-02T00:21:42.123456789Z stderr F {line}",
}


@pytest.mark.parametrize("wrap", list(_WRAPS))
@pytest.mark.parametrize("version", VERSIONS)
def test_wrapped_logs_read_the_same(wrap: str, version: str) -> None:
    text, facts = _startup_log(version)
    failing = text + engine_failure(version, ValueError(_kv_too_small(version)))
    wrapped = "\n".join(_WRAPS[wrap](line) for line in failing.splitlines()) + "\n"
    assert startup_facts(wrapped) == facts
    assert classify(wrapped, default=FailureKind.SERVER_CRASH) == classify(failing, default=FailureKind.SERVER_CRASH)
    assert startup_stage(wrapped) == startup_stage(failing) == "http_server"


# -- /metrics -------------------------------------------------------------------------------


_METRIC_CLASSES = {"_gauge_cls": Gauge, "_counter_cls": Counter, "_histogram_cls": Histogram}


def _families(version: str) -> tuple[list[str], dict[str, tuple[type, list[str]]]]:
    """loggers.py's per-engine label names and every ``vllm:*`` family it defines: class and labels."""
    tree = _tree(_vllm_file(version, "v1/metrics/loggers.py"))
    base = next(ast.literal_eval(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "labelnames")
    families: dict[str, tuple[type, list[str]]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _METRIC_CLASSES):
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        name, labels = keywords.get("name"), keywords.get("labelnames")
        if not (isinstance(name, ast.Constant) and str(name.value).startswith("vllm:")):
            continue
        if isinstance(labels, ast.BinOp) and isinstance(labels.right, ast.List):
            label_names = base + ast.literal_eval(labels.right)
        elif isinstance(labels, ast.Name) and labels.id == "labelnames":
            label_names = list(base)
        else:
            continue  # labels computed at run time (e.g. cache_config_info's): not a family read here
        families[str(name.value)] = (_METRIC_CLASSES[node.func.attr], label_names)
    return base, families


_VALUES = {"vllm:num_requests_running": (7, 5), "vllm:num_requests_waiting": (3, 0),
           "vllm:kv_cache_usage_perc": (0.5, 0.25), "vllm:prompt_tokens": (10240, 8192),
           "vllm:generation_tokens": (2048, 1024), "vllm:num_preemptions": (2, 0),
           "vllm:prefix_cache_queries": (10240, 8192), "vllm:prefix_cache_hits": (4096, 0)}


def exposition(version: str, engines: int = 2) -> bytes:
    """What ``version``'s /metrics shows with ``engines`` data-parallel engines: every family
    loggers.py defines with vLLM's labels, histograms observed across their buckets."""
    base, families = _families(version)
    assert base == ["model_name", "engine"]
    registry = CollectorRegistry()
    for name, (kind, labels) in families.items():
        metric = kind(name, f"vLLM's {name}", labels, registry=registry)
        for engine in range(engines):
            child = metric.labels(*(str(engine) if label == "engine" else "Qwen/Qwen3-8B" if label == "model_name"
                                    else "x" for label in labels))
            value = _VALUES.get(name, (1, 1))[engine % 2]
            if kind is Gauge:
                child.set(value)
            elif kind is Counter:
                child.inc(value)
            else:
                for seconds in (0.01, 0.3, 4.0, 90.0):
                    child.observe(seconds)
    return generate_latest(registry)


def _prometheus_totals(text: bytes) -> dict[str, float]:
    """The expected totals, through the Prometheus parser: summed over engines, the KV usage averaged."""
    names = {**VLLM_GAUGES, **VLLM_COUNTERS}
    values: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if sample.name in names:
                values.setdefault(names[sample.name], []).append(sample.value)
    return {m: (sum(v) / len(v) if m == "token_usage" else sum(v)) for m, v in values.items()}


@pytest.mark.parametrize("version", VERSIONS)
def test_metrics_as_benchdeck_names(version: str) -> None:
    text = exposition(version)
    samples = server_samples(VLLM_METRICS, text, now=12.5)
    got = {s.metric: s.value for s in samples}
    assert got == _prometheus_totals(text)
    assert got == {"running_reqs": 12, "queued_reqs": 3, "token_usage": 0.375, "prompt_tokens_total": 18432,
                   "generation_tokens_total": 3072, "retracted_requests_total": 2,
                   "prefix_cache_queries_total": 18432, "prefix_cache_hits_total": 4096}
    assert {(s.ts, s.source, s.device) for s in samples} == {(12.5, "server", None)}
    assert server_samples(VLLM_METRICS, text.decode(), now=12.5) == samples


def test_the_names_are_the_ones_the_rest_of_benchdeck_reads() -> None:
    assert {"running_reqs", "queued_reqs", "token_usage"} <= set(sglang_metrics.SERVER_GAUGES.values())
    kept = {*sglang_metrics.SERVER_COUNTERS.values(), *sglang_metrics.SCHEDULER_COUNTERS.values()}
    assert {"prompt_tokens_total", "generation_tokens_total", "retracted_requests_total"} <= kept
    assert {"prompt_tokens_total", "generation_tokens_total", "retracted_requests_total"} <= set(
        telemetry.COUNTER_DELTAS)


def test_counter_deltas_come_out_of_summarise() -> None:
    before, after = exposition(NEW), exposition(NEW).replace(b"} 10240.0", b"} 20480.0")
    samples = server_samples(VLLM_METRICS, before, 10.0) + server_samples(VLLM_METRICS, after, 20.0)
    rows = telemetry.summarise(samples, since=10.0)
    deltas = {row["metric"]: row["max"] for row in rows if row["metric"].endswith("_delta")}
    assert deltas["prompt_tokens_delta"] == 10240 and deltas["generation_tokens_delta"] == 0


def test_an_older_prometheus_client_exposition() -> None:
    """prometheus_client before 0.17 wrote a counter's TYPE line without ``_total``."""
    text = exposition(OLD)
    older = re.sub(rb"# (HELP|TYPE) (vllm:\w+)_total ", rb"# \1 \2 ", text)
    older = re.sub(rb"# (HELP|TYPE) (vllm:\w+)_created .*\n", b"", older)
    assert older != text
    assert server_samples(VLLM_METRICS, older, 1.0) == server_samples(VLLM_METRICS, text, 1.0)


def test_one_engine_and_a_server_without_stats() -> None:
    got = {s.metric: s.value for s in server_samples(VLLM_METRICS, exposition(NEW, engines=1), 1.0)}
    assert got["token_usage"] == 0.5 and got["running_reqs"] == 7
    # --disable-log-stats: the HTTP families only, no vllm:* family at all
    assert server_samples(VLLM_METRICS, b'# HELP http_requests_total x\n# TYPE http_requests_total counter\n'
                        b'http_requests_total{handler="/v1/completions"} 4.0\n', 1.0) == []


def test_read_over_http() -> None:
    body = exposition(OLD)

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        samples = read_server_metrics(VLLM_METRICS, f"http://127.0.0.1:{server.server_address[1]}", now=3.0)
    finally:
        server.shutdown()
        server.server_close()
    assert samples == server_samples(VLLM_METRICS, body, 3.0)
