"""``vllm serve``'s own argument parser as a line server, for the tests that hold benchdeck's
vLLM validator to it (tests/test_vllm_flags.py).

Run with the vLLM environment's interpreter::

    .venv-vllm/bin/python runner/vllm_side/argparse_server.py --source .venv-vllm/src/0.33.0

Reads one JSON list of argv strings per line on stdin (the options after the model) and
answers one JSON object per line: ``{"ok": true, "values": {dest: value}}`` or
``{"ok": false, "error": ...}``. The parser is the one ``schema_dump.py`` dumps, built
with the same stubs; a placeholder model tag is put first, as ``vllm serve MODEL ...``.
Stdlib and vLLM only, nothing of benchdeck.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from typing import NoReturn

import schema_dump  # this directory's dump script (the script's own directory is on sys.path)

PLACEHOLDER_MODEL = "benchdeck/placeholder"


class _ParseFailed(Exception):
    pass


def build() -> argparse.ArgumentParser:
    parser, _entry = schema_dump.build_parser(schema_dump.StubFinder(schema_dump.wheel_pins()))

    def refuse(message: str) -> NoReturn:  # parser.error() would exit the whole server
        raise _ParseFailed(message)

    parser.error = refuse
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, object]:
    noise = io.StringIO()
    try:
        with contextlib.redirect_stderr(noise), contextlib.redirect_stdout(noise):
            namespace = parser.parse_args([PLACEHOLDER_MODEL, *argv])
    except (_ParseFailed, SystemExit, ValueError, TypeError, argparse.ArgumentError) as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "values": vars(namespace)}


def main() -> None:
    cli = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    cli.add_argument("--source", help="a directory holding the unpacked wheel (vllm/ and its .dist-info)")
    opts = cli.parse_args()
    if opts.source:
        sys.path.insert(0, opts.source)
    with contextlib.redirect_stderr(io.StringIO()):  # the stub log
        parser = build()
    print(json.dumps({"ready": True, "version": schema_dump._vllm_version()}), flush=True)
    for line in sys.stdin:
        print(json.dumps(parse(parser, json.loads(line)), default=str), flush=True)


if __name__ == "__main__":
    main()
