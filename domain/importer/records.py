"""What an import writes: a configuration snapshot per run (with where each fact came from)
and a point per record.  Pure, so the database transaction in db/ stays a plain loop."""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Literal

from domain.flags.schema import SchemaError, load_schema
from domain.importer import ImportPreview, PointRow, RunGroup
from domain.importer.conditions import RunStatement
from domain.plan.naming import MAX_NAME_CHARS, is_control

# runs.plan of an imported run: it was measured elsewhere, so there is no plan
# (db/queries.py INSERT_IMPORTED_RUN writes this literal).
IMPORTED_PLAN = "{}"
UNNAMED = "imported"
MAX_FILE_NAME_CHARS = 255


def is_imported_plan(plan: str | None) -> bool:
    """Whether a run row is an import, whatever its source says (an import of emulator
    output has source ``emulated``)."""
    return (plan or "").strip() == IMPORTED_PLAN


def clean_text(text: str) -> str:
    """NFC, control characters removed (domain.plan.naming.is_control), trimmed."""
    return "".join(c for c in unicodedata.normalize("NFC", text) if not is_control(c)).strip()


def _stem_and_suffix(file_name: str) -> tuple[str, str]:
    base = re.split(r"[/\\]", file_name)[-1]
    stem, dot, ext = base.rpartition(".")
    return (stem, dot + ext) if stem else (base, "")


def safe_file_name(file_name: str, runs: int = 1) -> str:
    """An upload's name as an import stores and shows it: its last path component, as text
    without control characters, its stem short enough that ``<stem>#<runs>`` is a run name
    (at most MAX_NAME_CHARS characters).  Any other text is kept: a name is shown as text
    everywhere, and each export neutralises what its format would execute."""
    stem, suffix = _stem_and_suffix(clean_text(file_name))
    stem = clean_text(stem)[:MAX_NAME_CHARS - len(f"#{max(runs, 1)}")].rstrip() or UNNAMED
    return (stem + clean_text(suffix))[:MAX_FILE_NAME_CHARS]


def run_name(file_name: str, index: int, runs: int = 1) -> str:
    """The name of the ``index``-th run (0-based) of an import of ``file_name``: ``<stem>#<n>``."""
    stem, _ = _stem_and_suffix(safe_file_name(file_name, runs))
    return f"{stem}#{index + 1}"


Source = Literal["imported", "emulated"]


def run_source(engine: Any) -> Source:
    """``emulated`` when the engine is benchdeck's emulator (its server_info says so, or the
    user stated it), else ``imported``: emulator output must never pass as a measurement,
    imported or not.  That the run was imported stays known from its plan (IMPORTED_PLAN)
    and its configuration's environment (``imported_from``)."""
    return "emulated" if engine == "emulator" else "imported"


def _version_number(version: Any) -> str | None:
    match = re.search(r"[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+)?", str(version or ""))
    return match.group(0) if match else None


def non_default_args(resolved: dict[str, Any], version: Any) -> dict[str, Any]:
    """A server_info's resolved args, less every flag still at its schema default: the
    same shape as a plan's server_args, so the configuration diff shows real changes."""
    number = _version_number(version)
    try:
        schema = load_schema(number) if number else None
    except SchemaError:
        schema = None
    if schema is None:
        return dict(resolved)
    out = {}
    for flag, value in resolved.items():
        spec = schema.lookup(flag)
        if spec is None or value != spec.default:
            out[flag] = value
    return out


def configuration_for(run: RunGroup, statement: RunStatement, preview: ImportPreview) -> dict[str, Any]:
    """The configuration snapshot of one imported run; unknown facts stay None."""
    values = {name: stated.value for name, stated in statement.values.items()}
    args = values.get("server_args") or {}
    from_file = statement.values.get("server_args")
    if from_file is not None and from_file.provenance == "file":
        args = non_default_args(dict(args), values.get("engine_version"))
    for owned in ("model-path", "host", "port"):
        args.pop(owned, None)
    return {
        "engine": values.get("engine"),
        "engine_version": _version_number(values.get("engine_version")) or values.get("engine_version"),
        "model": values.get("model"),
        "gpu_type": values.get("gpu_type"),
        "gpu_count": values.get("gpu_count"),
        "topology": {"kind": None},
        "server_args": args,
        "environment": {
            "imported_from": preview.file_name, "sha256": preview.sha256, "format": preview.source_kind,
            "run_index": run.index,
            "provenance": {name: stated.provenance for name, stated in statement.values.items()},
            "conflicts": {name: {"file": f, "user": u} for name, (f, u) in statement.conflicts.items()},
            "max_total_num_tokens": values.get("max_total_num_tokens"),
            "dataset": values.get("dataset"), "warmup": values.get("warmup"),
            # Both facts, whatever runs.source can hold: imported, and (or not) emulated.
            "imported": True, "emulated": run_source(values.get("engine")) == "emulated",
        },
        "source": run_source(values.get("engine")),
    }


def point_values(row: PointRow, statement: RunStatement) -> dict[str, Any]:
    """One point's row: conditions from the file, filled by the user's statement where the
    file is silent (dataset, warmup), everything else unknown stays None."""
    conditions = dict(row.conditions)
    for name in ("dataset", "warmup"):
        stated = statement.values.get(name)
        if conditions.get(name) is None and stated is not None and stated.value is not None:
            conditions[name] = stated.value
    engine_version = statement.values.get("engine_version")
    conditions["engine_version"] = engine_version.value if engine_version else None
    conditions["imported"] = True
    return {
        "scenario": conditions.get("scenario") or "imported",
        "concurrency": conditions.get("concurrency"),
        "repeat_idx": int(conditions.get("repeat_idx") or 0),
        "conditions": conditions,
        "metrics": dict(row.metrics),
        "raw": row.raw,
    }
