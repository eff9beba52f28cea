"""The failure classifier on every fatal line of SGLang's log (the lines SGLang prints, kept
verbatim in the cases below), and the start-up phases parsed from SGLang's own start-up lines."""

from __future__ import annotations

import pytest

from domain.core.states import FailureKind
from runner.logparse import classify, startup_facts

FATAL_LINES = [
    ("Not enough memory. Please try to increase --mem-fraction-static.", FailureKind.OOM),
    ("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.5.",
     FailureKind.OOM),
    ("Capture cuda graph failed: CUDA out of memory. Possible solutions: 1. set a smaller --mem-fraction-static "
     "2. set a smaller --cuda-graph-max-bs-decode 3. --cuda-graph-backend-decode=disabled", FailureKind.OOM),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", FailureKind.OOM),
    ("Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a common cause "
     "is the OS Out Of Memory (OOM) killer.", FailureKind.OOM),
    ("Scheduler hit an exception: Traceback (most recent call last):", FailureKind.SERVER_CRASH),
    ("Received sigquit from a child process. It usually means the child failed.", FailureKind.SERVER_CRASH),
    ("Initialization failed. warmup error: Traceback", FailureKind.SERVER_CRASH),
    ("Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", FailureKind.SERVER_CRASH),
    ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda error",
     FailureKind.SERVER_CRASH),
    ("torch.distributed.DistBackendError: NCCL error ncclUnhandledCudaError", FailureKind.SERVER_CRASH),
    ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)", FailureKind.SERVER_CRASH),
    ("ncclSystemError: System call (e.g. socket, malloc) or external library call failed", FailureKind.SERVER_CRASH),
    ("rpc_port 30001 is not available. Please use another port.", FailureKind.BAD_ARGS),
    ("launch_server.py: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
     "--cuda-graph-max-bs-prefill", FailureKind.BAD_ARGS),
    ("launch_server.py: error: unrecognized arguments: --foo", FailureKind.BAD_ARGS),
    ("OSError: [Errno 28] No space left on device", FailureKind.DISK_FULL),
]


@pytest.mark.parametrize(("line", "kind"), FATAL_LINES, ids=[k.value + str(i) for i, (_, k) in enumerate(FATAL_LINES)])
def test_every_fatal_line_is_classified(line: str, kind: FailureKind) -> None:
    diagnosis = classify(f"[2026-11-29 10:00:00 TP0] some normal line\n[2026-11-29 10:00:01 TP0] {line}\n",
                         default=FailureKind.SERVER_CRASH)
    assert diagnosis.kind is kind
    assert diagnosis.hint


def test_the_cause_wins_over_the_crash_report_before_it() -> None:
    log = ("Scheduler hit an exception: Traceback (most recent call last):\n"
           "ValueError: Loaded weights leave no GPU memory for the KV cache\n"
           "Received sigquit from a child process.\n")
    assert classify(log, default=FailureKind.SERVER_CRASH).kind is FailureKind.OOM


def test_no_fatal_line_gives_the_default() -> None:
    assert classify("all fine\n", default=FailureKind.BENCH_FAILED).kind is FailureKind.BENCH_FAILED


def test_startup_phases_from_sglang_lines() -> None:
    log = """\
[TP0] Load weight begin. avail mem=139.55 GB
[TP0] Load weight end. elapsed=41.20 s, type=Qwen3MoeForCausalLM, avail mem=82.68 GB, mem usage=56.87 GB.
[TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 674458, K size: 30.87 GB, V size: 30.87 GB
[TP0] Capture cuda graph end. Time elapsed: 12.40 s. mem usage=0.12 GB. avail mem=20.81 GB.
[TP0] max_total_num_tokens=674458, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=64, \
context_len=40960, available_gpu_mem=20.81 GB
The server is fired up and ready to roll!
"""
    facts = startup_facts(log)
    assert facts["load_weight_elapsed_s"] == 41.2 and facts["weight_mem_gb"] == 56.87
    assert facts["kv_cache_tokens"] == 674458 and facts["max_total_num_tokens"] == 674458
    assert facts["max_running_requests"] == 64 and facts["available_gpu_mem_gb"] == 20.81
    assert facts["cuda_graph_elapsed_s"] == 12.4


@pytest.mark.parametrize(
    ("lines", "stage"),
    [
        ([], "init"),
        (["[2026-11-30 TP0] Load weight begin. avail mem=139.10 GB"], "weights"),
        (["Load weight begin. avail mem=139.10 GB", "Load weight end. elapsed=42.1 s, mem usage=56.9 GB"],
         "kv_cache"),
        (["Load weight end. elapsed=42.1 s", "KV Cache is allocated. #tokens: 674458"], "cuda_graphs"),
        (["KV Cache is allocated. #tokens: 1", "Capture cuda graph end. Time elapsed: 12.00 s"], "http_server"),
        (["max_total_num_tokens=674458, chunked_prefill_size=8192", "INFO:     Uvicorn running on http://127.0.0.1:30000"],
         "warmup"),
    ],
)
def test_the_startup_stage_a_log_reached_is_named(lines: list[str], stage: str) -> None:
    from runner.logparse import startup_stage

    assert startup_stage("\n".join(lines)) == stage
