"""Published measurements as reference points: a row of the silicon table as an llm-d report.

The table is the repository's copy of AIConfigurator's published Qwen3-235B-A22B-FP8 H200
measurements (``domain/estimate/data/measured_qwen3_235b_a22b_fp8_h200.csv``, its header
says where it comes from).  A row pinned as a reference is written as one llm-d benchmark
report v0.2.1 (:func:`reference_report`) and imported through :mod:`domain.importer.llmd`
like any report, so its conditions are checked against the team's runs by the same
checklist: the model, the GPU (H200, the GPUs the experts span), the engine and version,
the lengths (fixed), the concurrency; what the table does not say stays unknown (dataset,
range ratio, warm-up, request count, the harness's metric definitions).

The figures are means: AIConfigurator's tooling fills ``silicon_ttft_ms`` and
``silicon_tpot_ms`` from a benchmark's mean TTFT and mean TPOT.  The table names no
harness, so the report's ``tool`` is ``aiconfigurator-silicon``, whose definitions are
unknown (domain/results/definitions.py): never a match.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain.importer.llmd import NATIVE_KEY
from domain.importer.llmd_schema import WRITTEN_VERSION

TABLE = Path(__file__).parents[1] / "estimate" / "data" / "measured_qwen3_235b_a22b_fp8_h200.csv"
MODEL = "Qwen/Qwen3-235B-A22B-FP8"
TOOL = "aiconfigurator-silicon"


@dataclass(frozen=True)
class ReferenceRow:
    index: int  # 0-based, among the table's data rows
    engine: str
    engine_version: str
    gpu: str
    isl: int
    osl: int
    concurrency: int
    tp_size: int
    gpus: int  # moe_tp × moe_ep: the GPUs the experts span
    ttft_ms: float
    tpot_ms: float
    source: str

    def label(self) -> str:
        return (f"{self.engine} {self.engine_version} · {self.gpus}×{self.gpu} TP{self.tp_size} · "
                f"{self.isl}/{self.osl} · c={self.concurrency} · TTFT {self.ttft_ms:g} ms · TPOT {self.tpot_ms:g} ms")


def reference_rows(path: Path = TABLE) -> list[ReferenceRow]:
    with path.open(encoding="utf-8") as handle:
        lines = [line for line in handle if not line.startswith("#")]
    return [ReferenceRow(index=i, engine=r["engine"], engine_version=r["engine_version"], gpu=r["gpu"],
                         isl=int(r["isl"]), osl=int(r["osl"]), concurrency=int(r["concurrency"]),
                         tp_size=int(r["tp_size"]), gpus=int(r["moe_tp_size"]) * int(r["moe_ep_size"]),
                         ttft_ms=float(r["ttft_ms"]), tpot_ms=float(r["tpot_ms"]), source=r["source"])
            for i, r in enumerate(csv.DictReader(lines))]


def _engine(row: ReferenceRow) -> dict[str, Any]:
    return {
        "metadata": {"schema_version": "0.0.1", "label": f"{row.engine}-0", "cfg_id": _digest(row)},
        "standardized": {"kind": "inference_engine", "tool": row.engine, "tool_version": row.engine_version,
                         "role": "replica", "replicas": 1, "model": {"name": MODEL},
                         "accelerator": {"model": row.gpu, "count": row.gpus, "parallelism": {"tp": row.tp_size}}},
        # SGLang's attention TP is its --tp-size (the row's experts span moe_tp × moe_ep GPUs).
        "native": {"args": {"--tp-size": row.tp_size} if row.engine == "sglang" else {}},
    }


def _load(row: ReferenceRow) -> dict[str, Any]:
    # The lengths are the row's; whether every prompt had exactly them (range ratio) it does not say.
    native = {"run_uid": f"reference-{_digest(row)}", "source": "reference",
              "conditions": {"input_len": row.isl, "output_len": row.osl},
              "reference": {"table": TABLE.name, "row": row.index, "published_by": row.source,
                            "statistic": "mean"}}
    return {"metadata": {"schema_version": "0.0.1", "cfg_id": _digest(row),
                         "description": "a published measurement pinned as a reference"},
            "standardized": {"tool": TOOL, "tool_version": "", "source": "unknown",
                             "input_seq_len": {"distribution": "other", "value": row.isl},
                             "output_seq_len": {"distribution": "other", "value": row.osl},
                             "concurrency": row.concurrency},
            "native": {"config": {NATIVE_KEY: native}}}


def reference_report(row: ReferenceRow) -> dict[str, Any]:
    """The row as an llm-d report v0.2.1: its load, its stack, its two means."""
    latency = {"time_to_first_token": {"units": "ms", "mean": row.ttft_ms},
               "time_per_output_token": {"units": "ms/token", "mean": row.tpot_ms}}
    return {"version": WRITTEN_VERSION,
            "run": {"uid": f"reference-{_digest(row)}", "description": f"reference: {row.label()} ({row.source})",
                    "keywords": ["reference", "aiconfigurator"]},
            "scenario": {"stack": [_engine(row)], "load": _load(row)},
            "results": {"request_performance": {"aggregate": {"latency": latency}}}}


def reference_file_name(row: ReferenceRow) -> str:
    return (f"reference-aiconfigurator-{row.engine}-{row.engine_version}-tp{row.tp_size}-"
            f"{row.isl}x{row.osl}-c{row.concurrency}.json")


def _digest(row: ReferenceRow) -> str:
    return hashlib.sha256(repr(row).encode()).hexdigest()[:32]
