"""Command line of the emulator: SGLang's own flags, matched exactly, plus ``--emulate-*``.

The SGLang flags come from the dumped argparse schema of the emulated version
(``sglang_args_<version>.json``), so the emulator accepts exactly what that SGLang
release accepts and nothing else: the parser is built with ``allow_abbrev=False`` (a
misspelt or shortened flag is never rescued by prefix matching) and an unknown flag exits
with status 2 and argparse's usual ``error: unrecognized arguments`` message, as
``sglang.launch_server`` does.  (This stands in for the project's flags validator.)

Emulator-only options all start with ``--emulate-`` (see :data:`EMULATE_HELP`); each can
also be set by an environment variable ``BENCHDECK_EMULATE_<NAME>``, the flag winning.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

DEFAULT_SGLANG_VERSION = "0.5.23"
PROG = "launch_server.py"

EMULATE_HELP = {
    "cold-start-s": "Emulated cold start: the first S wall seconds of forward steps run slower (lazy JIT/first-use "
                    "warm-up). Default 0 (off). Parsed by emulator/launch.py before the SGLang flags.",
    "cold-start-factor": "How much slower the cold start runs (>= 1). Default 10.",
    "gpu": "GPU type to emulate (H200, H100, H20, B200, A100). Default H200.",
    "gpu-count": "Number of emulated GPUs on the host. Default: tp × dp × pp of the flags.",
    "time-scale": "Slow-motion factor S ≥ 1 applied to every emulated duration; bench figures come out "
                  "with throughput ÷ S and latencies × S. Default 1 (real-GPU speed).",
    "startup-s": "Wall seconds from launch to ready (weights, KV, graphs, warmup). Default 2.",
    "sglang-version": f"SGLang version whose flag schema is accepted. Default {DEFAULT_SGLANG_VERSION}.",
    "tokenizer-dir": "Local tokenizer directory (built by emulator/build_tokenizer.py if missing). "
                     "Required unless --tokenizer-path names a directory with a tokenizer.json.",
    "schema-dir": "Directory of dumped SGLang flag schemas (sglang_args_<version>.json). Required: the "
                  "emulator accepts exactly the flags of the version it emulates and ships no schema of its own.",
    "fault": "Inject a failure (repeatable): never-ready, crash-during-warmup, crash-after-requests=N, "
             "crash-after-s=T, stall-after-requests=N, ignore-sigterm, fatal-at-startup=KIND "
             "(KIND: oom-weights, oom-kv, cuda-graph, host-oom, nccl, watchdog).",
}
# Argparse dests of SGLang ≤ 0.5.9 that ServerArgs exposes under the names 0.5.15+ parse into.
LEGACY_DESTS = {"tensor_parallel_size": "tp_size", "pipeline_parallel_size": "pp_size",
                "data_parallel_size": "dp_size", "expert_parallel_size": "ep_size"}
FAULT_KINDS = {"never-ready", "crash-during-warmup", "crash-after-requests", "crash-after-s",
               "stall-after-requests", "ignore-sigterm", "fatal-at-startup"}
FATAL_KINDS = {"oom-weights", "oom-kv", "cuda-graph", "host-oom", "nccl", "watchdog"}


@dataclass(frozen=True)
class EmulateOptions:
    gpu: str = "H200"
    gpu_count: int | None = None
    time_scale: float = 1.0
    startup_s: float = 2.0
    sglang_version: str = DEFAULT_SGLANG_VERSION
    schema_dir: Path | None = None
    tokenizer_dir: Path | None = None
    faults: dict[str, str] = field(default_factory=dict)  # kind → value ("" for flags)


@dataclass(frozen=True)
class ParsedFlags:
    args: dict[str, Any]  # dest → value, every schema dest present (defaults filled in)
    explicit: frozenset[str]  # dests given on the command line
    emulate: EmulateOptions
    argv: tuple[str, ...]
    schema_version: str


def schema_path(version: str, schema_dir: Path) -> Path:
    path = schema_dir / f"sglang_args_{version}.json"
    if path.is_file():
        return path
    raise FileNotFoundError(f"no flag schema sglang_args_{version}.json in {schema_dir}")


@lru_cache(maxsize=8)
def load_schema(version: str, schema_dir: Path) -> tuple[dict[str, Any], ...]:
    data = json.loads(schema_path(version, schema_dir).read_text(encoding="utf-8"))
    return tuple(data["args"])


_SUFFIX = re.compile(r"^([0-9]*\.?[0-9]+)(k|M|G|T|Ki|Mi|Gi|Ti)?$")
_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def human_readable_int(text: str) -> int:
    """SGLang's ``human_readable_int``: 1k = 1000, 1Ki = 1024; decimals only with SI suffixes."""
    match = _SUFFIX.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"invalid human-readable int: {text!r}")
    number, suffix = match.groups()
    if suffix is None:
        return int(number)
    if "." in number and suffix.endswith("i"):
        raise argparse.ArgumentTypeError(f"decimals are not allowed with IEC suffixes: {text!r}")
    return int(float(number) * _SI[suffix])


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"invalid JSON: {exc}") from exc


def _nullable_str(text: str) -> str | None:
    return None if text.lower() in ("none", "null") else text


_TYPES: dict[str, Any] = {
    "int": int, "float": float, "str": str, "human_readable_int": human_readable_int,
    "loads": _json_value, "json_list_type": _json_value, "parse_cuda_graph_config_arg": _json_value,
    "nullable_str": _nullable_str,
}


class _DeprecatedTrue(argparse.Action):
    """A deprecated switch: stores True and warns, as SGLang's deprecated actions do."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"WARNING: '{option_string}' is deprecated and will be removed in a future release.",
              file=sys.stderr)
        setattr(namespace, self.dest, True)


def _add_schema_arg(group: argparse._ArgumentGroup, spec: dict[str, Any]) -> None:
    flags, action, nargs = spec["flags"], spec["action"], spec["nargs"]
    common: dict[str, Any] = {"dest": spec["dest"], "default": argparse.SUPPRESS}
    if spec.get("required"):
        common["required"] = True
    if action == "BooleanOptionalAction":
        positive = [f for f in flags if not f.startswith("--no-")]
        group.add_argument(*positive, action=argparse.BooleanOptionalAction, **common)
    elif action == "_StoreTrueAction":
        group.add_argument(*flags, action="store_true", **common)
    elif nargs == 0:  # deprecated switches and const actions
        group.add_argument(*flags, action=_DeprecatedTrue, nargs=0, **common)
    else:
        kwargs = {"type": _TYPES.get(str(spec["type"]), str), "choices": spec["choices"]}
        if nargs is not None:
            kwargs["nargs"] = nargs
        group.add_argument(*flags, **common, **kwargs)


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text}")
    return value


def _add_emulate_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("emulator-only options (benchdeck)")
    group.add_argument("--emulate-gpu", help=EMULATE_HELP["gpu"])
    group.add_argument("--emulate-gpu-count", type=int, help=EMULATE_HELP["gpu-count"])
    group.add_argument("--emulate-time-scale", type=_positive_float, help=EMULATE_HELP["time-scale"])
    group.add_argument("--emulate-cold-start-s", type=float, help=EMULATE_HELP["cold-start-s"])
    group.add_argument("--emulate-cold-start-factor", type=float, help=EMULATE_HELP["cold-start-factor"])
    group.add_argument("--emulate-startup-s", type=float, help=EMULATE_HELP["startup-s"])
    group.add_argument("--emulate-sglang-version", help=EMULATE_HELP["sglang-version"])
    group.add_argument("--emulate-schema-dir", type=Path, help=EMULATE_HELP["schema-dir"])
    group.add_argument("--emulate-tokenizer-dir", type=Path, help=EMULATE_HELP["tokenizer-dir"])
    group.add_argument("--emulate-fault", action="append", default=[], help=EMULATE_HELP["fault"])


def build_parser(version: str, schema_dir: Path) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, allow_abbrev=False,
                                     description="benchdeck emulator engine (speaks SGLang's HTTP protocol)")
    group = parser.add_argument_group("SGLang server arguments")
    for spec in load_schema(version, schema_dir):
        _add_schema_arg(group, spec)
    _add_emulate_args(parser)
    return parser


def _env(name: str) -> str | None:
    return os.environ.get("BENCHDECK_EMULATE_" + name.upper().replace("-", "_")) or None


def _parse_faults(parser: argparse.ArgumentParser, items: Sequence[str]) -> dict[str, str]:
    faults: dict[str, str] = {}
    for item in items:
        kind, _, value = item.partition("=")
        if kind not in FAULT_KINDS:
            parser.error(f"argument --emulate-fault: unknown fault {kind!r} (known: {', '.join(sorted(FAULT_KINDS))})")
        if kind == "fatal-at-startup" and value not in FATAL_KINDS:
            parser.error(f"argument --emulate-fault: fatal-at-startup needs one of {', '.join(sorted(FATAL_KINDS))}")
        faults[kind] = value
    return faults


def _pre_option(argv: Sequence[str], name: str) -> str | None:
    """The schema must be known before the parser exists, so its two options are read first."""
    flag = "--emulate-" + name
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return _env(name)


def _emulate_options(parser: argparse.ArgumentParser, ns: argparse.Namespace, version: str,
                     schema_dir: Path) -> EmulateOptions:
    def pick(name: str, cast: Any, default: Any) -> Any:
        value = getattr(ns, "emulate_" + name.replace("-", "_"))
        if value is None and (raw := _env(name)) is not None:
            try:
                value = cast(raw)
            except (TypeError, ValueError):
                parser.error(f"environment BENCHDECK_EMULATE_{name.upper().replace('-', '_')}: invalid {raw!r}")
        return default if value is None else value

    faults = list(ns.emulate_fault) or [f for f in (_env("fault") or "").split(",") if f]
    return EmulateOptions(
        gpu=pick("gpu", str, "H200"),
        gpu_count=pick("gpu-count", int, None),
        time_scale=pick("time-scale", _positive_float, 1.0),
        startup_s=pick("startup-s", float, 2.0),
        sglang_version=version,
        schema_dir=schema_dir,
        tokenizer_dir=pick("tokenizer-dir", Path, None),
        faults=_parse_faults(parser, faults),
    )


def _config_args(path: str) -> list[str]:
    """SGLang's ``--config file.yaml``: each key becomes ``--key [value]`` (True: a bare switch, False:
    left out, a list: several values, a mapping: JSON)."""
    if Path(path).suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"Config file must be YAML format, got: {Path(path).suffix}")
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError("Config file must contain a dictionary at root level")
    args: list[str] = []
    for key, value in data.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, list):
            args += [flag, *map(str, value)]
        elif isinstance(value, dict):
            args += [flag, json.dumps(value)]
        elif value is not False and value is not None:
            args += [flag, str(value)]
    return args


def expand_config(argv: Sequence[str]) -> list[str]:
    """Replace ``--config FILE`` by the file's options, placed first so the command line wins."""
    argv = list(argv)
    if "--config" not in argv:
        return argv
    at = argv.index("--config")
    if at + 1 >= len(argv) or argv.count("--config") > 1:
        raise ValueError("--config needs exactly one YAML file")
    return _config_args(argv[at + 1]) + argv[:at] + argv[at + 2:]


def parse_flags(argv: Sequence[str]) -> ParsedFlags:
    """Parse a command line; exits 2 with argparse's message on any unknown or invalid flag."""
    try:
        argv = expand_config(argv)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"{PROG}: error: argument --config: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    version = _pre_option(argv, "sglang-version") or DEFAULT_SGLANG_VERSION
    given_dir = _pre_option(argv, "schema-dir")
    if given_dir is None:
        print(f"{PROG}: error: the emulator needs --emulate-schema-dir (or BENCHDECK_EMULATE_SCHEMA_DIR): "
              "the directory of the dumped SGLang flag schemas", file=sys.stderr)
        raise SystemExit(2)
    schema_dir = Path(given_dir)
    try:
        schema = load_schema(version, schema_dir)
    except FileNotFoundError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    parser = build_parser(version, schema_dir)
    ns = parser.parse_args(list(argv))
    given = {LEGACY_DESTS.get(k, k): v for k, v in vars(ns).items() if not k.startswith("emulate_")}
    args = {LEGACY_DESTS.get(spec["dest"], spec["dest"]): spec["default"] for spec in schema}
    args.update(given)
    return ParsedFlags(args=args, explicit=frozenset(given), emulate=_emulate_options(parser, ns, version, schema_dir),
                       argv=tuple(argv), schema_version=version)
