"""Resolve parsed flags into the emulated server's configuration, as SGLang resolves its args.

Auto-sized values get SGLang 0.5.23's defaults for the emulated GPU: ``chunked_prefill_size``
and the decode CUDA-graph ``max_bs`` by GPU memory, ``mem_fraction_static`` from the
reserved-memory heuristic, ``max_running_requests`` from the KV capacity.  The result also
says whether start-up must fail, and how (:attr:`EmulatorConfig.startup_fatal`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from domain.estimate.constants import calibration_for
from emulator import sizing
from emulator.flags import EmulateOptions, ParsedFlags, parse_flags
from emulator.scheduler import SchedulerLimits
from emulator.timing import TimingConstants, TimingModel

EMULATOR_VERSION = "1"


class ConfigError(ValueError):
    """A configuration SGLang itself would refuse at start-up (bad combination, unknown model)."""


@dataclass(frozen=True)
class EmulatorConfig:
    flags: ParsedFlags
    model: sizing.ModelSpec
    gpu: sizing.GpuSpec
    gpu_count: int
    tp_size: int
    dp_size: int
    pp_size: int
    attn_dp_size: int
    context_len: int
    chunked_prefill_size: int
    max_prefill_tokens: int
    mem_fraction_static: float
    cuda_graph_max_bs: int | None  # None: decode CUDA graphs disabled
    cuda_graph_bs: tuple[int, ...]
    memory: sizing.MemoryPlan
    max_running_requests: int
    timing: TimingModel

    @property
    def emulate(self) -> EmulateOptions:
        return self.flags.emulate

    @property
    def args(self) -> dict[str, Any]:
        return self.flags.args

    @property
    def time_scale(self) -> float:
        return self.emulate.time_scale

    @property
    def max_total_num_tokens(self) -> int:
        return self.memory.max_total_num_tokens

    @property
    def max_req_input_len(self) -> int:
        return max(0, min(self.context_len - 1, self.max_total_num_tokens - 1))

    @property
    def served_model_name(self) -> str:
        return self.args.get("served_model_name") or self.args["model_path"]

    @property
    def version(self) -> str:
        return f"emulator-{self.flags.schema_version}"

    @property
    def startup_fatal(self) -> str | None:
        """The fatal kind SGLang would hit while starting, or None."""
        injected = self.emulate.faults.get("fatal-at-startup")
        if injected:
            return injected
        if self.memory.rest_gb <= 0:
            return "oom-weights"
        if self.max_total_num_tokens <= 0:
            return "oom-kv"
        if self.cuda_graph_max_bs is not None and self._graph_headroom_gb() < self.memory.graph_reserve_gb:
            return "cuda-graph"
        return None

    def _graph_headroom_gb(self) -> float:
        """What ``1 − mem_fraction_static`` leaves for activations and graph buffers."""
        m = self.memory
        return m.avail_before_load_gb * (1 - m.mem_fraction_static) - 0.5

    def scheduler_limits(self) -> SchedulerLimits:
        return SchedulerLimits(
            max_total_num_tokens=self.max_total_num_tokens,
            max_running_requests=self.max_running_requests,
            chunked_prefill_size=self.chunked_prefill_size,
            max_prefill_tokens=self.max_prefill_tokens,
            radix_cache=not self.args.get("disable_radix_cache", False),
            mixed_chunk=bool(self.args.get("enable_mixed_chunk", False)),
            overlap_prefill_results=self.overlap_prefill_results,
        )

    @property
    def overlap_prefill_results(self) -> bool:
        """Whether a prefill step's first tokens stream only when the next prefill step ends
        (SGLang's overlap scheduler, emulator/scheduler.py).  Not modelled on PD servers (their
        own event loops) nor with mixed chunks (the held prompts would ride the next step)."""
        args = self.args
        return not (args.get("disable_overlap_schedule") or args.get("enable_mixed_chunk")
                    or args.get("disaggregation_mode") in ("prefill", "decode"))


def _positive(args: dict[str, Any], key: str, default: int = 1) -> int:
    value = args.get(key)
    return default if value in (None, 0) else int(value)


def _graph_config(args: dict[str, Any]) -> dict[str, Any]:
    raw = args.get("cuda_graph_config") or {}
    decode = raw.get("decode") if isinstance(raw, dict) else None
    return decode if isinstance(decode, dict) else {}


def _graph_disabled(args: dict[str, Any]) -> bool:
    return bool(
        args.get("disable_cuda_graph")
        or args.get("disable_decode_cuda_graph")
        or args.get("cuda_graph_backend_decode") == "disabled"
        or _graph_config(args).get("backend") == "disabled"
    )


def _graph_max_bs(args: dict[str, Any], gpu: sizing.GpuSpec, tp: int) -> tuple[int | None, bool]:
    """(decode graph max_bs, whether it was left to the default)."""
    if _graph_disabled(args):
        return None, False
    json_cfg = _graph_config(args)
    explicit_list = json_cfg.get("bs") or args.get("cuda_graph_bs_decode") or args.get("cuda_graph_bs")
    for value in (json_cfg.get("max_bs"), args.get("cuda_graph_max_bs_decode"), args.get("cuda_graph_max_bs")):
        if value:
            return int(value), False
    if explicit_list:
        return max(int(b) for b in explicit_list), False
    return sizing.default_cuda_graph_max_bs(gpu.memory_mib, tp), True


def capture_batch_sizes(max_bs: int) -> tuple[int, ...]:
    """SGLang's default ladder: 1, 2, 4, 8, 12, …, then steps of 16 and 32."""
    sizes = [1, 2, 4, 8, *range(12, 33, 4), *range(48, 257, 16), *range(288, 513, 32)]
    return tuple(b for b in sizes if b <= max_bs) or (max_bs,)


def gpu_and_model(gpu_name: str, model_ref: str) -> tuple[sizing.GpuSpec, sizing.ModelSpec]:
    """The emulated GPU and model, whichever engine the emulator speaks; ConfigError for one
    the emulator does not know."""
    if gpu_name not in sizing.GPUS:
        raise ConfigError(f"unknown emulated GPU {gpu_name!r} (known: {', '.join(sizing.GPUS)})")
    try:
        return sizing.GPUS[gpu_name], sizing.resolve_model(model_ref)
    except sizing.UnknownModel as exc:
        raise ConfigError(str(exc)) from exc


def resolve(flags: ParsedFlags, constants: TimingConstants | None = None) -> EmulatorConfig:
    args, emulate = flags.args, flags.emulate
    gpu, model = gpu_and_model(emulate.gpu, args["model_path"])
    tp, dp, pp = _positive(args, "tp_size"), _positive(args, "dp_size"), _positive(args, "pp_size")
    attn_dp = _positive(args, "attn_dp_size")
    if args.get("enable_dp_attention") and dp > 1:  # the deprecated spelling, rewritten by SGLang
        attn_dp, dp = dp, 1
    gpu_count = emulate.gpu_count or tp * dp * pp
    if tp * dp * pp > gpu_count:
        raise ConfigError(f"RuntimeError: CUDA error: invalid device ordinal (tp_size={tp} × dp_size={dp} × "
                          f"pp_size={pp} needs {tp * dp * pp} GPUs, the emulated host has {gpu_count})")
    context_len = int(args.get("context_length") or model.max_position_embeddings)
    chunked = args.get("chunked_prefill_size")
    chunked = sizing.default_chunked_prefill(gpu.memory_mib) if chunked is None else int(chunked)
    if chunked > 0 and attn_dp > 1:
        chunked = max(1, chunked // attn_dp)  # SGLang divides the chunk among attention-DP ranks
    max_prefill = int(args.get("max_prefill_tokens") or 16384)
    graph_bs, graph_default = _graph_max_bs(args, gpu, tp)
    requested_running = args.get("max_running_requests")
    if graph_default and graph_bs is not None and requested_running is not None:
        graph_bs = min(graph_bs, int(requested_running))
    mfs = args.get("mem_fraction_static")
    if mfs is None:
        mfs = sizing.default_mem_fraction_static(gpu.memory_mib, chunked, max_prefill, tp, pp, graph_bs)
    memory = sizing.plan_memory(
        gpu, model, tp_size=tp, attn_dp_size=attn_dp, quantization=args.get("quantization"),
        kv_cache_dtype=args.get("kv_cache_dtype") or "auto", mem_fraction_static=float(mfs),
        max_total_tokens=args.get("max_total_tokens"), graph_max_bs=graph_bs,
    )
    running = sizing.default_max_running_requests(
        memory.max_total_num_tokens, context_len, requested_running, attn_dp) if memory.max_total_num_tokens > 0 else 0
    weight_bytes = sizing.weight_bytes_per_gpu(model, args.get("quantization"), tp) * tp / model.total_params
    calibration = calibration_for(gpu)  # SGLang's constants: the emulator stands in for SGLang
    timing = TimingModel(model=model, gpu=gpu, tp_size=tp, cell_bytes=memory.kv_cell_bytes,
                         weight_bytes=weight_bytes, cuda_graph_max_bs=graph_bs, ceilings=calibration.ceilings,
                         constants=constants or calibration.constants)
    return EmulatorConfig(
        flags=flags, model=model, gpu=gpu, gpu_count=gpu_count, tp_size=tp, dp_size=dp, pp_size=pp,
        attn_dp_size=attn_dp, context_len=context_len, chunked_prefill_size=chunked,
        max_prefill_tokens=max_prefill, mem_fraction_static=float(mfs), cuda_graph_max_bs=graph_bs,
        cuda_graph_bs=capture_batch_sizes(graph_bs) if graph_bs else (), memory=memory,
        max_running_requests=running, timing=timing,
    )


def config_from_argv(argv: Sequence[str], constants: TimingConstants | None = None) -> EmulatorConfig:
    """Parse and resolve a command line (``--model-path`` … as given to the emulator)."""
    return resolve(parse_flags(argv), constants)


def resolved_server_args(cfg: EmulatorConfig) -> dict[str, Any]:
    """The ServerArgs fields with SGLang's auto-sized values filled in (for ``/server_info``)."""
    out = dict(cfg.args)
    out.update(
        tp_size=cfg.tp_size, dp_size=cfg.dp_size, pp_size=cfg.pp_size, attn_dp_size=cfg.attn_dp_size,
        chunked_prefill_size=cfg.chunked_prefill_size, max_prefill_tokens=cfg.max_prefill_tokens,
        mem_fraction_static=cfg.mem_fraction_static, max_running_requests=cfg.max_running_requests,
        context_length=cfg.context_len, cuda_graph_max_bs_decode=cfg.cuda_graph_max_bs,
        served_model_name=cfg.served_model_name,
        cuda_graph_config={
            "decode": {"backend": "disabled" if cfg.cuda_graph_max_bs is None else "full",
                       "max_bs": cfg.cuda_graph_max_bs, "bs": list(cfg.cuda_graph_bs)},
        },
    )
    if "cuda_graph_max_bs" in out:  # schemas before 0.5.20 spell it this way
        out["cuda_graph_max_bs"] = cfg.cuda_graph_max_bs
    out.pop("config", None)  # --config only names a YAML file of flags; it is no ServerArgs field
    return {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v)) for k, v in out.items()}
