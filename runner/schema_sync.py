"""The installed SGLang's server-argument schema, extracted with its own interpreter.

The runner runs this at start-up and stores the result in DuckDB keyed by version and
host, so the form validates against what is really installed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

DUMP_SCRIPT = Path(__file__).resolve().parent / "sglang_side" / "schema_dump.py"


class SchemaError(RuntimeError):
    pass


def installed_schema(python: Path, *, timeout_s: float = 300) -> dict[str, Any]:
    try:
        done = subprocess.run(  # noqa: S603 - fixed argv: the configured interpreter and our script
            [str(python), str(DUMP_SCRIPT)], capture_output=True, text=True, timeout=timeout_s, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SchemaError(f"cannot run {python}: {exc}") from exc
    if done.returncode != 0:
        raise SchemaError(f"schema extraction failed with {python}: {done.stderr.strip()[-2000:]}")
    schema = json.loads(done.stdout)
    if not isinstance(schema, dict) or "sglang_version" not in schema:
        raise SchemaError("schema extraction printed no schema")
    return schema
