"""Resolve ``vllm serve`` flags into the emulated engine's configuration, as vLLM sizes itself.

The result is an :class:`~emulator.config.EmulatorConfig` (so the scheduler, step loop,
timing model and request plumbing are the SGLang personality's, unchanged) carrying the
vLLM figures in :class:`VllmSizing`.  Citations are to the wheels' sources
(``V33`` = ``.venv-vllm/src/0.33.0/vllm``, ``V11`` = ``.venv-vllm/src/0.11.2/vllm``).

Memory, vLLM's way (V33 ``v1/worker/gpu_worker.py:700-775``, ``v1/worker/utils.py:724-770``):
``requested = ceil(total × gpu_memory_utilization)``; the KV pool is ``requested − weights
− peak activations of the profile run − non-torch memory`` and, in 0.33.0 (where
``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to 1, V33 ``envs.py:2219``), minus the
CUDA-graph estimate.  So ``--gpu-memory-utilization`` is the share of the GPU's *total*
memory this instance may use for everything; SGLang's ``--mem-fraction-static`` is the
share of the memory *available at start-up* given to weights + KV only (activations and
graphs live in the ``1 − fraction`` left over, emulator/sizing.py).  The CUDA context is
outside both: it only has to fit in ``total − requested`` (vLLM refuses to start when free
memory is below ``requested``).  Blocks: ``num_gpu_blocks = KV bytes // (block_size × cell)``,
``GPU KV cache size = blocks × block_size`` tokens (V11 ``kv_cache_utils.py:1217-1221``).

Assumptions of the emulator (stated, not measured): the profile run's activation peak is
``max_num_batched_tokens × hidden × 2 B × ACTIVATION_COPIES`` plus the sampler's FP32
logits for ``max_num_seqs`` rows; non-torch memory (NCCL, cuBLAS workspaces) is
:data:`NON_TORCH_GIB`; CUDA-graph memory is SGLang's reserve per captured size (2 MiB × the
largest size).  The step times use the SGLang-fitted constants of
``domain/estimate/calibration.yaml``: no vLLM measurement is fitted yet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from domain.estimate.constants import calibration_for
from emulator import sizing
from emulator.config import ConfigError, EmulatorConfig, gpu_and_model
from emulator.flags import ParsedFlags
from emulator.scheduler import SchedulerLimits
from emulator.timing import TimingConstants, TimingModel
from emulator.vllm_flags import VllmFlags

ACTIVATION_COPIES = 24
NON_TORCH_GIB = 0.6
DEFAULT_BLOCK_SIZE = 16  # CacheConfig.DEFAULT_BLOCK_SIZE (V33 config/cache.py:185)
GRAPH_MIB_PER_SIZE = 2.0


@dataclass(frozen=True)
class VllmSizing:
    """What vLLM decides at start-up, in its own terms (GiB are 2**30 bytes, as vLLM prints)."""

    version: str
    model_path: str
    served_names: tuple[str, ...]
    gpu_memory_utilization: float
    total_gib: float
    requested_gib: float
    free_at_start_gib: float
    weight_gib: float
    activation_gib: float
    graph_gib: float  # captured graphs; subtracted from the KV pool in 0.33.0 only
    kv_available_gib: float
    block_size: int
    num_gpu_blocks: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    prefix_caching: bool
    capture_sizes: tuple[int, ...]  # empty: --enforce-eager
    kv_cache_dtype: str

    @property
    def kv_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    @property
    def max_concurrency(self) -> float:
        return self.kv_tokens / self.max_model_len if self.max_model_len else 0.0


@dataclass(frozen=True)
class VllmEmulatorConfig(EmulatorConfig):
    vllm: VllmSizing

    @property
    def served_model_name(self) -> str:
        return self.vllm.served_names[0]  # the first name is the one in responses and metrics

    @property
    def version(self) -> str:
        return self.vllm.version

    @property
    def max_req_input_len(self) -> int:
        return max(0, self.context_len - 1)

    @property
    def startup_fatal(self) -> str | None:
        """The fatal kind vLLM would hit while starting, or None."""
        injected = self.emulate.faults.get("fatal-at-startup")
        if injected:
            return injected
        v = self.vllm
        if v.free_at_start_gib < v.requested_gib:
            return "free-memory"
        if v.weight_gib > v.free_at_start_gib:
            return "oom-weights"
        if v.kv_available_gib <= 0 or v.num_gpu_blocks <= 0:
            return "oom-kv"
        if v.kv_tokens < v.max_model_len:
            return "kv-too-small"
        return None

    def scheduler_limits(self) -> SchedulerLimits:
        """vLLM v1 puts running decodes and prefill chunks in one step under one token budget
        (``max_num_batched_tokens``): the scheduler's mixed-chunk mode."""
        v = self.vllm
        return SchedulerLimits(
            max_total_num_tokens=self.max_total_num_tokens, max_running_requests=v.max_num_seqs,
            chunked_prefill_size=v.max_num_batched_tokens if v.chunked_prefill else -1,
            max_prefill_tokens=v.max_num_batched_tokens, radix_cache=v.prefix_caching, mixed_chunk=v.chunked_prefill,
        )


def batch_defaults(gpu: sizing.GpuSpec, version: str, world_size: int) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) for the OpenAI server when not given:
    ``EngineArgs.get_batch_defaults`` (V33 ``engine/arg_utils.py:2940-3039``, V11 :1870-1944)."""
    total = gpu.memory_mib * sizing.MIB
    big = total >= 70 * sizing.GIB and gpu.name != "A100"
    if version != "0.11.2" and total >= 160 * sizing.GIB:
        return 16384, 1024  # 0.33.0: B200/B300 tier
    return (8192, 1024) if big else (2048, 256)


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, gpu: sizing.GpuSpec, version: str,
                  args: dict[str, Any]) -> tuple[int, ...]:
    """CUDA-graph capture sizes: ``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)`` with
    ``max = min(2 × max_num_seqs, 512)`` (1024 on Blackwell in 0.33.0), capped by
    ``max_num_batched_tokens``, which is added when it falls inside (V33 ``config/vllm.py:2447-2600``,
    V11 ``config/vllm.py:807-860``)."""
    if args.get("enforce_eager"):
        return ()
    ceiling = 1024 if version != "0.11.2" and gpu.name == "B200" else 512
    explicit = args.get("max_cudagraph_capture_size")
    listed = args.get("cuda_graph_sizes")  # 0.11.2 only
    top = int(explicit) if explicit else min(2 * max_num_seqs, ceiling)
    if listed:
        sizes = sorted({int(s) for s in listed if int(s) <= max_num_batched_tokens})
        return tuple(sizes)
    top = min(top, max_num_batched_tokens)
    sizes = [s for s in (1, 2, 4) if s <= top] + list(range(8, min(top + 1, 256), 8))
    if top >= 256:
        sizes += list(range(256, top + 1, 16))
    if max_num_batched_tokens <= top and max_num_batched_tokens not in sizes:
        sizes.append(max_num_batched_tokens)
    return tuple(sorted(sizes))


def _kv_dtype(args: dict[str, Any]) -> str:
    dtype = str(args.get("kv_cache_dtype") or "auto")
    return "fp8_e4m3" if dtype == "fp8" else dtype


def _max_model_len(args: dict[str, Any], model: sizing.ModelSpec) -> int:
    given = args.get("max_model_len")
    return model.max_position_embeddings if given in (None, -1) else int(given)


def _activation_gib(model: sizing.ModelSpec, tokens: int, seqs: int) -> float:
    return (tokens * model.hidden_size * 2 * ACTIVATION_COPIES + seqs * model.vocab_size * 4) / sizing.GIB


def _sizing(flags: VllmFlags, gpu: sizing.GpuSpec, model: sizing.ModelSpec, tp: int) -> VllmSizing:
    args, version = flags.args, flags.schema_version
    default_tokens, default_seqs = batch_defaults(gpu, version, tp * int(args.get("pipeline_parallel_size") or 1))
    seqs = int(args.get("max_num_seqs") or default_seqs)
    chunked = args.get("enable_chunked_prefill") is not False  # on by default in the v1 engine
    max_len = _max_model_len(args, model)
    batched = args.get("max_num_batched_tokens")
    if batched is None:  # V33 arg_utils.py:3166-3200: without chunking a whole prompt must fit
        batched = default_tokens if chunked else max(max_len, default_tokens)
    batched = int(batched)
    graphs = capture_sizes(seqs, batched, gpu, version, args)
    total = gpu.memory_mib / 1024
    util = float(args["gpu_memory_utilization"])
    requested = math.ceil(gpu.memory_mib * sizing.MIB * util) / sizing.GIB
    weights = sizing.weight_bytes_per_gpu(model, args.get("quantization"), tp) / sizing.GIB
    activation = _activation_gib(model, batched, seqs) + NON_TORCH_GIB
    graph = GRAPH_MIB_PER_SIZE * max(graphs, default=0) / 1024
    counted_graph = graph if version != "0.11.2" else 0.0
    kv = requested - weights - activation - counted_graph
    dtype = _kv_dtype(args)
    cell = sizing.kv_cell_bytes(model, dtype, tp)
    block = int(args.get("block_size") or DEFAULT_BLOCK_SIZE)
    blocks = max(0, int(kv * sizing.GIB // (block * cell))) if kv > 0 else 0
    if args.get("max_model_len") == -1 and blocks:  # --max-model-len auto: the longest that fits
        max_len = min(max_len, blocks * block)
    return VllmSizing(
        version=version, model_path=flags.model, served_names=flags.served_names, gpu_memory_utilization=util,
        total_gib=total, requested_gib=requested, free_at_start_gib=total - sizing.CONTEXT_OVERHEAD_GIB,
        weight_gib=weights, activation_gib=activation, graph_gib=graph, kv_available_gib=kv, block_size=block,
        num_gpu_blocks=blocks, max_model_len=max_len, max_num_seqs=seqs, max_num_batched_tokens=batched,
        chunked_prefill=chunked, prefix_caching=args.get("enable_prefix_caching") is not False,
        capture_sizes=graphs, kv_cache_dtype=dtype,
    )


def _verify_batch(v: VllmSizing) -> None:
    """``SchedulerConfig.verify_max_model_len`` (V33 ``config/scheduler.py:317-336``, V11 :249-268),
    raised while the engine config is built: a traceback, exit status 1."""
    batched = v.max_num_batched_tokens
    if batched < v.max_model_len and not v.chunked_prefill:
        raise ConfigError(f"ValueError: max_num_batched_tokens ({batched}) is smaller than max_model_len "
                          f"({v.max_model_len}). This effectively limits the maximum sequence length to "
                          "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
                          "max_num_batched_tokens or decrease max_model_len.")
    if batched < v.max_num_seqs:
        raise ConfigError(f"ValueError: max_num_batched_tokens ({batched}) must be greater than or equal to "
                          f"max_num_seqs ({v.max_num_seqs}).")


def resolve_vllm(flags: VllmFlags, constants: TimingConstants | None = None) -> VllmEmulatorConfig:
    args, emulate = flags.args, flags.emulate
    gpu, model = gpu_and_model(emulate.gpu, flags.model)
    tp = int(args.get("tensor_parallel_size") or 1)
    pp = int(args.get("pipeline_parallel_size") or 1)
    dp = int(args.get("data_parallel_size") or 1)
    gpu_count = emulate.gpu_count or tp * pp * dp
    if tp * pp * dp > gpu_count:
        raise ConfigError(f"ValueError: World size ({tp * pp}) x data parallel size ({dp}) is larger than the "
                          f"number of available GPUs ({gpu_count}) on the emulated host")
    v = _sizing(flags, gpu, model, tp)
    _verify_batch(v)
    memory = sizing.MemoryPlan(
        gpu_total_gb=v.total_gib, avail_before_load_gb=v.free_at_start_gib, weight_gb=v.weight_gib,
        mem_fraction_static=v.gpu_memory_utilization, rest_gb=v.kv_available_gib,
        kv_cell_bytes=sizing.kv_cell_bytes(model, v.kv_cache_dtype, tp), max_total_num_tokens=v.kv_tokens,
        graph_reserve_gb=v.graph_gib,
    )
    graph_max = max(v.capture_sizes) if v.capture_sizes else None
    calibration = calibration_for(gpu)
    weight_bytes = sizing.weight_bytes_per_gpu(model, args.get("quantization"), tp) * tp / model.total_params
    timing = TimingModel(model=model, gpu=gpu, tp_size=tp, cell_bytes=memory.kv_cell_bytes, weight_bytes=weight_bytes,
                         cuda_graph_max_bs=graph_max, ceilings=calibration.ceilings,
                         constants=constants or calibration.constants)
    parsed = ParsedFlags(args=args, explicit=flags.explicit, emulate=emulate, argv=flags.argv,
                         schema_version=flags.schema_version)
    return VllmEmulatorConfig(
        flags=parsed, model=model, gpu=gpu, gpu_count=gpu_count, tp_size=tp, dp_size=dp, pp_size=pp,
        attn_dp_size=1, context_len=v.max_model_len,
        chunked_prefill_size=v.max_num_batched_tokens if v.chunked_prefill else -1,
        max_prefill_tokens=v.max_num_batched_tokens, mem_fraction_static=v.gpu_memory_utilization,
        cuda_graph_max_bs=graph_max, cuda_graph_bs=v.capture_sizes, memory=memory,
        max_running_requests=v.max_num_seqs, timing=timing, vllm=v,
    )
