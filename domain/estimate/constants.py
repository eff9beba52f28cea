"""The estimator's fitted constants and the GPUs' ceilings, read from ``calibration.yaml``.

The file says, per GPU, what the GPU can do at best (its ceilings, measured where we
could) and, per GPU and engine family, the constants fitted against public measurements
(``domain/estimate/calibrate.py``), each with its source and its cross-validated error.
A GPU or family the file does not calibrate borrows the nearest calibrated entry, and
says so in the returned source (:attr:`Calibration.borrowed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any

from domain.core.data_yaml import load_data_yaml
from domain.estimate.sizing import GPUS, GpuSpec
from domain.estimate.step_time import Ceilings, TimingConstants

CALIBRATION_FILE = Path(__file__).with_name("calibration.yaml")
REFERENCE_GPU = "H200"  # the GPU whose measured ceilings scale the datasheets of the others
DEFAULT_FAMILY = "sglang"


# How each engine family schedules prefill against decode (the estimator's serving model):
# "rounds": prefill first, decodes wait (SGLang's default scheduler without --enable-mixed-chunk);
# "mixed": prefill chunks ride in the decode steps (vLLM V1's chunked prefill, always on).
SERVING_BY_FAMILY = {"sglang": "rounds", "vllm": "mixed"}


@dataclass(frozen=True)
class Calibration:
    gpu: str
    family: str
    constants: TimingConstants
    ceilings: Ceilings
    source: str  # where the constants came from (calibration.yaml's entry)
    borrowed: bool  # the constants were fitted on another GPU or engine family
    fitted_on: str = ""  # the calibration.yaml key the constants come from, e.g. "H200/sglang"
    cv_rows: int = 0  # rows of the leave-one-ISL-group-out cross-validation (0: none)
    cv_ttft_mae_pct: float | None = None
    cv_tpot_mae_pct: float | None = None
    # dimension → (lowest, highest) value the fitted rows covered; outside it the figures are extrapolated
    measured_range: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def serving(self) -> str:
        return SERVING_BY_FAMILY.get(self.family, "rounds")


@cache
def _document() -> dict[str, Any]:
    data = load_data_yaml(CALIBRATION_FILE.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{CALIBRATION_FILE} is not a mapping")
    return data


def _measured_ceilings(gpu: str) -> Ceilings | None:
    entry = (_document().get("ceilings") or {}).get(gpu)
    if not entry:
        return None
    return Ceilings(hbm_bytes_per_s=float(entry["hbm_gb_s"]) * 1e9, bf16_flops=float(entry["bf16_tflops"]) * 1e12,
                    fp8_flops=float(entry["fp8_tflops"]) * 1e12, source=str(entry["source"]))


def ceilings_for(gpu: GpuSpec) -> Ceilings:
    """Measured ceilings, or the datasheet scaled by what the reference GPU achieved of its own."""
    measured = _measured_ceilings(gpu.name)
    if measured is not None:
        return measured
    ref, ref_sheet = _measured_ceilings(REFERENCE_GPU), GPUS[REFERENCE_GPU]
    if ref is None:
        return Ceilings(gpu.hbm_tb_s * 1e12, gpu.bf16_tflops * 1e12, gpu.fp8_tflops * 1e12, "datasheet peak")
    return Ceilings(
        hbm_bytes_per_s=gpu.hbm_tb_s * 1e12 * ref.hbm_bytes_per_s / (ref_sheet.hbm_tb_s * 1e12),
        bf16_flops=gpu.bf16_tflops * 1e12 * ref.bf16_flops / (ref_sheet.bf16_tflops * 1e12),
        fp8_flops=gpu.fp8_tflops * 1e12 * ref.fp8_flops / (ref_sheet.fp8_tflops * 1e12),
        source=f"datasheet peak × what {REFERENCE_GPU} achieved of its datasheet ({ref.source})",
    )


def _constants(values: dict[str, Any]) -> TimingConstants:
    known = {f.name for f in fields(TimingConstants)}
    return TimingConstants(**{k: float(v) for k, v in values.items() if k in known})


def _entry(gpu: str, family: str) -> tuple[str, dict[str, Any], bool] | None:
    entries = _document().get("constants") or {}
    for key, borrowed in ((f"{gpu}/{family}", False), (f"{REFERENCE_GPU}/{family}", True),
                          (f"{gpu}/{DEFAULT_FAMILY}", True), (f"{REFERENCE_GPU}/{DEFAULT_FAMILY}", True)):
        if key in entries:
            return key, entries[key], borrowed
    return None


def engine_family(engine: str) -> str:
    """The emulator stands in for SGLang, so it runs on SGLang's constants."""
    return DEFAULT_FAMILY if engine in ("sglang", "emulator") else engine


def calibration_for(gpu: GpuSpec, family: str = DEFAULT_FAMILY) -> Calibration:
    found = _entry(gpu.name, family)
    ceilings = ceilings_for(gpu)
    if found is None:
        return Calibration(gpu.name, family, TimingConstants(), ceilings, "built-in defaults", True)
    key, entry, borrowed = found
    cv = entry.get("cross_validated") or {}
    constants = _constants({**(entry.get("assumed") or {}), **entry["fitted"]})
    return Calibration(
        gpu.name, family, constants, ceilings, " ".join(str(entry["source"]).split()), borrowed,
        fitted_on=key, cv_rows=int(cv.get("rows", 0)), cv_ttft_mae_pct=cv.get("ttft_mae_pct"),
        cv_tpot_mae_pct=cv.get("tpot_mae_pct"),
        measured_range={k: (int(v[0]), int(v[1])) for k, v in (entry.get("measured_range") or {}).items()},
    )


def constants_for(gpu: GpuSpec, family: str = DEFAULT_FAMILY) -> TimingConstants:
    return calibration_for(gpu, family).constants
