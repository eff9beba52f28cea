"""The installed SGLang's server-argument schema, extracted with its own interpreter.

The runner runs this at start-up and stores the result in DuckDB keyed by version and
host, so the form validates against what is really installed."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

DUMP_SCRIPT = Path(__file__).resolve().parent / "sglang_side" / "schema_dump.py"


class SchemaError(RuntimeError):
    pass


# Which SGLang an interpreter has, read from its package metadata without importing SGLang
# (an import takes seconds; this, a tenth of one): the cache key of a dump.
_IDENTITY = ("import importlib.metadata as m, os; d = m.distribution('sglang'); p = str(d.locate_file(''));"
             "r = d.read_text('RECORD') or ''; print(d.version, p, len(r), os.stat(p).st_mtime_ns)")


def _identity(python: Path) -> str | None:
    """Version, location and RECORD size of the interpreter's sglang package, or None."""
    try:
        done = subprocess.run([str(python), "-c", _IDENTITY], capture_output=True, text=True,  # noqa: S603
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return f"{Path(python).absolute()} {done.stdout.strip()}" if done.returncode == 0 else None


def cached_installed_schema(python: Path, cache_dir: Path) -> dict[str, Any]:
    """``installed_schema``, kept under ``cache_dir`` per interpreter and installed SGLang
    package: a runner restarted by systemd does not wait for a dump it made before, and a
    reinstall (another version, another RECORD) is dumped anew."""
    identity = _identity(python)
    if identity is None:
        return installed_schema(python)
    path = cache_dir / f"sglang-schema-{hashlib.sha256(identity.encode()).hexdigest()[:16]}.json"
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        pass
    schema = installed_schema(python)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(schema), encoding="utf-8")
    except OSError:
        pass  # a cache that cannot be written only costs the next start the dump
    return schema


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
