"""The failure classifier on every fatal line of SGLang's log (the lines SGLang prints, kept
verbatim in the cases below), and the start-up phases parsed from SGLang's own start-up lines."""

from __future__ import annotations

import pytest

from domain.core.states import FailureKind
from runner.logparse import classify, find_failure, startup_facts

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
     FailureKind.NCCL),
    ("torch.distributed.DistBackendError: NCCL error ncclUnhandledCudaError", FailureKind.NCCL),
    ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)", FailureKind.NCCL),
    ("ncclSystemError: System call (e.g. socket, malloc) or external library call failed", FailureKind.NCCL),
    ("RuntimeError: NCCL error: remote process exited or there was a network error", FailureKind.NCCL),
    ("RuntimeError: Prefill out of memory. Try to lower your batch size.", FailureKind.OOM),
    ("RuntimeError: Decode out of memory. Try to lower your batch size.", FailureKind.OOM),
    ("RuntimeError: CUDA error: out of memory", FailureKind.OOM),
    ("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB.", FailureKind.OOM),
    ("Exception: Capture prefill CUDA graph failed: torch.OutOfMemoryError: CUDA out of memory.", FailureKind.OOM),
    ("max_total_tokens=131072 is larger than the profiled value -561981. Use the profiled value instead.",
     FailureKind.OOM),
    ("RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes.",
     FailureKind.HOST_UNHEALTHY),
    ("Exception: Capture cuda graph failed: Failed: Assertion error deep_ep.cpp:1030", FailureKind.SERVER_CRASH),
    ("SIGQUIT received. signum=3, frame=None. It usually means one child failed.", FailureKind.SERVER_CRASH),
    ("Subprocess scheduler_0 (pid=123) crashed with exit code -11. Triggering SIGQUIT for cleanup...",
     FailureKind.SERVER_CRASH),
    ("Rank 0 scheduler died during initialization (exit code: -11). If exit code is -9 (SIGKILL), a common cause "
     "is the OS OOM killer.", FailureKind.SERVER_CRASH),
    ("ValueError: metrics_port at 40290 is not available in 30 seconds. metrics_port is used by a process already.",
     FailureKind.BAD_ARGS),
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


# Each is the harmless twin of a fatal wording above: same words, no failure.
HARMLESS_LINES = [
    "Decode out of memory happened. #retracted_reqs: 16, #new_token_ratio: 0.5796 -> 1.0000",
    "KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 4096",
    "flashinfer.comm allreduce_fusion API is not available (No module named 'x'), falling back to standard "
    "implementation",
    "flashinfer.comm unified allreduce_fusion API is not available, falling back to standard implementation",
    "TorchSymmMemCommunicator: World size 3 not supported, communicator is not available.",
    "max_total_tokens=4096 is larger than the profiled value 2048. Use the profiled value instead.",
    "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. pre_model_load_memory=1",
    "[W509 19:10:51.227170454 ProcessGroupNCCL.cpp:1028] Warning: TORCH_NCCL_AVOID_RECORD_STREAMS is the default "
    "now, this environment variable is thus deprecated. (function operator())",
    "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs.",
    "If you encounter OOM issues, please try setting --mem-fraction-static to a lower value",
    "Using default MoE config. Performance might be sub-optimal!",
]


@pytest.mark.parametrize("line", HARMLESS_LINES)
def test_harmless_twins_never_classify(line: str) -> None:
    assert find_failure(f"[2026-11-29 10:00:01 TP0] {line}\n") is None


def test_a_traceback_of_an_http_request_handler_is_not_a_server_failure() -> None:
    log = ("[2025-10-31 21:12:27] ERROR:    Exception in ASGI application\nTraceback (most recent call last):\n"
           '  File "/x/tokenizer_communicator_mixin.py", line 349, in start_expert_distribution_record\n'
           "TypeError: BaseReq.__init__() got an unexpected keyword argument 'action'\n")
    assert find_failure(log) is None


def test_an_unknown_traceback_is_a_retryable_crash_quoting_the_exception_not_the_launchers_eof() -> None:
    log = ("Traceback (most recent call last):\n  File \"/x/deepep.py\", line 304, in __init__\n"
           "TypeError: cannot unpack non-iterable ForwardMetadata object\n"
           "[2026-02-20 11:13:52] Rank 0 scheduler is dead. Please check if there are relevant logs.\n"
           "Traceback (most recent call last):\n  File \"/x/engine.py\", line 847, in _wait_for_scheduler_ready\n"
           "EOFError\n")
    diagnosis = find_failure(log)
    assert diagnosis is not None and diagnosis.kind is FailureKind.SERVER_CRASH and diagnosis.retryable
    assert diagnosis.line == "TypeError: cannot unpack non-iterable ForwardMetadata object"


def test_an_exception_raised_while_parsing_server_args_is_bad_args() -> None:
    log = ("Traceback (most recent call last):\n"
           '  File "/s/sglang/srt/utils.py", line 1392, in get_open_port\n'
           "TypeError: 'str' object cannot be interpreted as an integer\n")
    diagnosis = find_failure(log)
    assert diagnosis is not None and diagnosis.kind is FailureKind.BAD_ARGS and not diagnosis.retryable


def test_scheduler_death_by_sigkill_is_oom_only_without_a_named_cause() -> None:
    died = "RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). ... the OS OOM killer.\n"
    assert classify(died, default=FailureKind.SERVER_CRASH).kind is FailureKind.OOM
    nccl = "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n"
    assert classify(nccl + died, default=FailureKind.SERVER_CRASH).kind is FailureKind.NCCL


def test_the_last_cause_wins_over_earlier_noise() -> None:
    log = ("[TP0] Decode out of memory happened. #retracted_reqs: 1\n"
           "[TP0] rpc_port 30001 is not available. Please use another port.\n"
           "[TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
           "RuntimeError: NCCL error: remote process exited or there was a network error\n"
           "Received sigquit from a child process. It usually means the child failed.\n")
    assert classify(log, default=FailureKind.BENCH_FAILED).kind is FailureKind.NCCL


@pytest.mark.parametrize("prefix", ["sglang-1  | ", "2025-07-25T07:53:08.21748708+08:00 stdout F ",
                                    "(SGLangEngine pid=952, ip=10.150.236.219) "])
def test_collector_prefixes_are_stripped_before_matching(prefix: str) -> None:
    log = "".join(f"{prefix}{line}\n" for line in [
        "Traceback (most recent call last):", '  File "/s/memory_pool.py", line 600, in _create_buffers',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB."])
    diagnosis = find_failure(log)
    assert diagnosis is not None and diagnosis.kind is FailureKind.OOM
    assert diagnosis.line.startswith("torch.OutOfMemoryError")


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


@pytest.mark.parametrize(("lines", "decode_s", "prefill_s"), [
    (["Capture piecewise CUDA graph end. Time elapsed: 6.48 s. mem usage=0.77 GB.",
      "Capture cuda graph end. Time elapsed: 0.86 s. mem usage=0.07 GB."], 0.86, 6.48),
    (["Capture target prefill CUDA graph end. elapsed=3.10 s, mem usage=0.20 GB, avail mem=20.0 GB.",
      "Capture draft decode CUDA graph end. elapsed=9.00 s",
      "Capture target decode CUDA graph end. bs=[1, 2, 4], elapsed=1.25 s, mem usage=0.1 GB."], 1.25, 3.1),
])
def test_decode_and_prefill_graph_times_are_kept_apart(lines: list[str], decode_s: float, prefill_s: float) -> None:
    facts = startup_facts("\n".join(f"[2026-04-05 16:48:18 TP0] {line}" for line in lines))
    assert facts["cuda_graph_elapsed_s"] == decode_s and facts["prefill_cuda_graph_elapsed_s"] == prefill_s


def test_startup_facts_read_through_collector_prefixes() -> None:
    log = ("sglang-1  | [TP0] max_total_num_tokens=46611, chunked_prefill_size=2048, max_prefill_tokens=16384, "
           "max_running_requests=2049, context_len=131072\n")
    facts = startup_facts(log)
    assert (facts["max_total_num_tokens"], facts["max_running_requests"], facts["context_len"]) == (46611, 2049, 131072)
