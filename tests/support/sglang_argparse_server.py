"""Runs inside the SGLang environment: SGLang's own argument parser as a line server.

Reads one JSON list of argv strings per line on stdin and answers one JSON object per
line on stdout: ``{"ok": true, "values": {dest: value}}`` or ``{"ok": false, "error": ...}``.
Building ``ServerArgs``' parser takes seconds, so tests start this once and send many
cases.  Stdlib and SGLang only (the app's packages are not installed there).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from typing import NoReturn


class _ParseFailed(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)

    def refuse(message: str) -> NoReturn:  # parser.error() would exit the whole server
        raise _ParseFailed(message)

    parser.error = refuse  # type: ignore[method-assign]
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, object]:
    noise = io.StringIO()
    try:
        with contextlib.redirect_stderr(noise), contextlib.redirect_stdout(noise):
            namespace = parser.parse_args(["--model-path", "benchdeck/placeholder", *argv])
    except (_ParseFailed, SystemExit, ValueError, TypeError, argparse.ArgumentError) as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "values": vars(namespace)}


def main() -> None:
    parser = build_parser()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        answer = parse(parser, json.loads(line))
        print(json.dumps(answer, default=str), flush=True)


if __name__ == "__main__":
    main()
