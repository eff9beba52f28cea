"""Regenerate the shipped SGLang server-argument schemas (domain/flags/schemas/).

Usage::

    .venv/bin/python tools/regenerate_schemas.py                # every shipped version
    .venv/bin/python tools/regenerate_schemas.py 0.5.21 0.5.22  # add or refresh some

For each version the real wheel is fetched (``pip download --no-deps``, cached in
``build/sglang-wheels/``), unpacked without its dependencies into
``build/sglang-<ver>/``, and ``runner/sglang_side/schema_dump.py`` runs with the SGLang
interpreter and ``PYTHONPATH`` pointing there, so the unpacked release shadows the
one installed in ``.venv-sglang``. Older releases want other torch/transformers
versions than that environment has, so their dump runs with ``--stub-missing``;
the modules that had to be stubbed are listed in each file's ``stubbed`` field.

The version installed in ``.venv-sglang`` itself (the pinned one) is dumped
straight from that environment, without stubs, so its file is exactly what the
``sglang`` test marker checks against.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DUMP_SCRIPT = ROOT / "runner" / "sglang_side" / "schema_dump.py"
SCHEMA_DIR = ROOT / "domain" / "flags" / "schemas"
BUILD_DIR = ROOT / "build"
WHEEL_CACHE = BUILD_DIR / "sglang-wheels"
# Used only when schemas/ is empty; otherwise every version already shipped is redone.
DEFAULT_VERSIONS = ("0.4.6.post5", "0.5.9", "0.5.15.post1", "0.5.20", "0.5.23")


def shipped_versions() -> list[str]:
    shipped = [p.name.removeprefix("sglang_args_").removesuffix(".json")
               for p in sorted(SCHEMA_DIR.glob("sglang_args_*.json"))]
    return shipped or list(DEFAULT_VERSIONS)


def bench_python() -> Path:
    """The SGLang interpreter; the same variable the runner and the tests read."""
    return Path(os.environ.get("BENCHDECK_BENCH_PYTHON", ROOT / ".venv-sglang" / "bin" / "python"))


def _run(cmd: list[str], env: dict[str, str] | None = None, capture: bool = False) -> str:
    """Run argv (never through a shell), echo it, fail loudly; return stdout if captured."""
    shown = [f"PYTHONPATH={env['PYTHONPATH']}"] if env and "PYTHONPATH" in env else []
    print("+", " ".join(shown + cmd), file=sys.stderr)
    stdout = subprocess.PIPE if capture else None
    result = subprocess.run(cmd, check=True, text=True, env=env, cwd=ROOT, stdout=stdout)  # noqa: S603
    return result.stdout if capture else ""


def installed_version(python: Path) -> str | None:
    """The sglang version the SGLang environment itself has, or None."""
    probe = "import importlib.metadata as m; print(m.version('sglang'))"
    result = subprocess.run(  # noqa: S603 - fixed argv, no shell
        [str(python), "-c", probe], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() if result.returncode == 0 else None


def fetch_wheel(python: Path, version: str) -> Path:
    """Download sglang==version (no deps) into the cache, unless it is already there."""
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    cached = sorted(WHEEL_CACHE.glob(f"sglang-{version}-*.whl"))
    if not cached:
        _run([str(python), "-m", "pip", "download", "-q", "--no-deps",
              "--dest", str(WHEEL_CACHE), f"sglang=={version}"])
        cached = sorted(WHEEL_CACHE.glob(f"sglang-{version}-*.whl"))
    if not cached:
        raise SystemExit(f"pip download gave no wheel for sglang=={version}")
    return cached[0]


def unpack(python: Path, version: str, wheel: Path) -> Path:
    """Install the wheel alone into build/sglang-<ver>; a finished tree is reused."""
    target = BUILD_DIR / f"sglang-{version}"
    if (target / f"sglang-{version}.dist-info").is_dir():
        return target
    # The bench interpreter's pip, so compiled parts match the Python that imports them.
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
          "--upgrade", "--target", str(target), str(wheel)])
    return target


def dump(python: Path, version: str, pinned: str | None) -> str:
    """Run the dump script; the pinned version runs unstubbed in its own environment."""
    cmd = [str(python), str(DUMP_SCRIPT)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if version != pinned:
        tree = unpack(python, version, fetch_wheel(python, version))
        env["PYTHONPATH"] = str(tree)
        cmd.append("--stub-missing")
    return _run(cmd, env=env, capture=True)


def regenerate(version: str, python: Path, pinned: str | None) -> Path:
    text = dump(python, version, pinned)
    out = SCHEMA_DIR / f"sglang_args_{version}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("versions", nargs="*", default=shipped_versions(),
                     help="sglang releases (default: every version already in domain/flags/schemas/)")
    cli.add_argument("--bench-python", type=Path, default=bench_python(),
                     help="SGLang interpreter (default: $BENCHDECK_BENCH_PYTHON or .venv-sglang)")
    opts = cli.parse_args(argv)
    pinned = installed_version(opts.bench_python)
    for version in opts.versions:
        out = regenerate(version, opts.bench_python, pinned)
        print(f"wrote {out.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
