"""SGLang server-argument schemas: the shipped files, and the extractor that makes them.

The ``sglang``-marked test re-dumps the pinned release with the real SGLang
environment and expects the shipped file byte-for-byte (bar the Python version).
The others read the shipped JSON directly, or run the stdlib-only dump script on a
fake ``sglang`` package, so they need no SGLang at all.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ROOT

SCHEMA_DIR = ROOT / "domain" / "flags" / "schemas"
DUMP_SCRIPT = ROOT / "runner" / "sglang_side" / "schema_dump.py"

def pinned_version() -> str:
    """The release requirements-sglang.txt pins (its ``# sglang==`` line, as scripts/lib.sh reads it)."""
    for line in (ROOT / "requirements-sglang.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("# sglang=="):
            return line.removeprefix("# sglang==").strip()
    raise AssertionError("requirements-sglang.txt has no '# sglang==' line")


PINNED = pinned_version()
# Action counts of the real releases' argument parsers, as the shipped schemas hold them.
EXPECTED_NUM_ARGS = {"0.4.6.post5": 145, "0.5.9": 331, "0.5.15.post1": 437, "0.5.20": 494, "0.5.23": 531}


def load(version: str) -> dict[str, Any]:
    return json.loads((SCHEMA_DIR / f"sglang_args_{version}.json").read_text(encoding="utf-8"))


def by_flag(version: str) -> dict[str, dict[str, Any]]:
    return {flag: arg for arg in load(version)["args"] for flag in arg["flags"]}


def bench_python() -> Path:
    return Path(os.environ.get("BENCHDECK_BENCH_PYTHON", ROOT / ".venv-sglang" / "bin" / "python"))


def without_python(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != "python"}


# --------------------------------------------------------------------------- the real release


@pytest.mark.sglang
@pytest.mark.slow
def test_pinned_schema_matches_a_fresh_dump() -> None:
    python = bench_python()
    if not python.exists():
        pytest.fail(f"no SGLang interpreter at {python}; run scripts/test.sh or set BENCHDECK_BENCH_PYTHON")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [str(python), str(DUMP_SCRIPT)], capture_output=True, text=True, check=True, env=env, timeout=240
    )
    fresh = json.loads(out.stdout)
    shipped = load(PINNED)
    assert fresh["sglang_version"] == PINNED, "the SGLang environment has another release than pinned"
    assert [a["flags"] for a in fresh["args"]] == [a["flags"] for a in shipped["args"]]
    assert without_python(fresh) == without_python(shipped), "run tools/regenerate_schemas.py"


# --------------------------------------------------------------------------- shipped files


@pytest.mark.parametrize("version", sorted(EXPECTED_NUM_ARGS))
def test_shipped_schema_is_whole(version: str) -> None:
    schema = load(version)
    flags = [flag for arg in schema["args"] for flag in arg["flags"]]
    assert schema["sglang_version"] == version
    assert schema["num_args"] == len(schema["args"]) == EXPECTED_NUM_ARGS[version]
    assert len(flags) == len(set(flags)), "a flag spelling appears twice"
    assert all(arg["primary"] in arg["flags"] for arg in schema["args"])


def test_pinned_schema_needed_no_stubs() -> None:
    assert load(PINNED)["stubbed"] == []


def test_cuda_graph_max_bs_history() -> None:
    assert by_flag("0.5.9")["--cuda-graph-max-bs"]["deprecated"] is False
    alias = by_flag("0.5.15.post1")["--cuda-graph-max-bs"]
    assert alias["deprecated"] is True and alias["replacement"] == "--cuda-graph-max-bs-decode"
    for version in ("0.5.20", "0.5.23"):
        flags = by_flag(version)
        assert "--cuda-graph-max-bs" not in flags
        assert "--cuda-graph-max-bs-decode" in flags


def test_enable_dp_attention_gives_way_to_attn_dp_size() -> None:
    assert by_flag("0.5.20")["--enable-dp-attention"]["deprecated"] is False
    assert "--attn-dp-size" not in by_flag("0.5.20")
    old = by_flag("0.5.23")["--enable-dp-attention"]
    assert old["deprecated"] is True and old["replacement"].startswith("--attn-dp-size")
    assert by_flag("0.5.23")["--attn-dp-size"]["deprecated"] is False


def test_deprecated_counts() -> None:
    counts = {v: sum(a["deprecated"] for a in load(v)["args"]) for v in EXPECTED_NUM_ARGS}
    assert counts == {"0.4.6.post5": 2, "0.5.9": 2, "0.5.15.post1": 23, "0.5.20": 6, "0.5.23": 7}


# --------------------------------------------------------------------------- the extractor


def dump_module() -> ModuleType:
    """The dump script imported into this (app) interpreter; it is stdlib only."""
    spec = importlib.util.spec_from_file_location("sglang_schema_dump", DUMP_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _DeprecatedStoreTrueAction(argparse.Action):
    """Shaped like SGLang's own: carries the replacement in ``new_flag``."""

    def __init__(self, option_strings: list[str], dest: str, new_flag: str | None = None, **kw: Any) -> None:
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        pass


def test_describe_reads_deprecation_replacement_and_order() -> None:
    dump = dump_module()
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", action=_DeprecatedStoreTrueAction, new_flag="--new", help="Deprecated.")
    parser.add_argument("--legacy", action="store_true", help="Deprecated. Use --modern=x instead.")
    parser.add_argument("--modern", help="Replaces the deprecated --legacy.")
    parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--fused", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--backend", choices={"b", "c", "a"}, help=argparse.SUPPRESS)
    got = {a.dest: dump.describe(a, "options") for a in parser._actions if a.dest != "help"}

    assert (got["old"]["deprecated"], got["old"]["replacement"]) == (True, "--new")
    assert (got["legacy"]["replacement"], got["legacy"]["type"]) == ("--modern=x", "bool")
    assert got["modern"]["deprecated"] is False
    assert (got["tp_size"]["primary"], got["tp_size"]["type"]) == ("--tp-size", "int")
    assert got["fused"]["primary"] == "--fused" and got["fused"]["flags"] == ["--fused", "--no-fused"]
    assert got["backend"]["choices"] == ["a", "b", "c"] and got["backend"]["suppressed"] is True


def test_stub_missing_dumps_a_package_whose_imports_fail(tmp_path: Path) -> None:
    srt = tmp_path / "sglang" / "srt"
    srt.mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text("__version__ = '9.9.9'\n")
    (srt / "__init__.py").write_text("")
    # A removed dependency, a name a dependency dropped, and an sglang module that breaks.
    (srt / "broken.py").write_text("raise RuntimeError('needs a GPU')\n")
    (srt / "server_args.py").write_text(
        "import argparse\n"
        "import benchdeck_missing_dep.sub as dep\n"
        "from json import benchdeck_no_such_name\n"
        "from sglang.srt import broken\n"
        "class Base(dep.Base, total=False):\n"
        "    pass\n"
        "class ServerArgs:\n"
        "    @staticmethod\n"
        "    def add_cli_args(parser: argparse.ArgumentParser) -> None:\n"
        "        parser.add_argument('--model-path', required=True, help='The model.')\n"
        "        parser.add_argument('--enable-x', action='store_true')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    out = subprocess.run(
        [sys.executable, str(DUMP_SCRIPT), "--stub-missing"],
        capture_output=True, text=True, check=True, env=env, timeout=60,
    )
    schema = json.loads(out.stdout)
    assert schema["sglang_version"] == "9.9.9" and schema["num_args"] == 2
    assert schema["stubbed"] == ["benchdeck_missing_dep", "json:benchdeck_no_such_name", "sglang.srt.broken"]
    assert [a["primary"] for a in schema["args"]] == ["--model-path", "--enable-x"]
