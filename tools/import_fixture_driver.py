"""Run bench_serving several times in one process, inside the SGLang environment.

Used by ``tools/make_import_fixtures.py`` so the client's imports (seconds each) are paid
once per client, not once per run::

    .venv-sglang/bin/python tools/import_fixture_driver.py CLIENT '[["--backend", ...], ...]'

CLIENT is ``module`` for the installed SGLang's ``sglang.benchmark.serving.cli_main``,
``rust`` for its Rust client (``sglang.benchmark.rust_client.main``), or the path of an old
single-file ``bench_serving.py``, executed as ``__main__`` per run.
After each run one line ``FIXTURE_RUN {json}`` reports ``index``, ``ok``, ``error`` and
``wall_s``; a failing run (the all-failed case) is reported, not fatal.
"""

from __future__ import annotations

import json
import runpy
import sys
import time
import traceback
from collections.abc import Callable


def _module_runner() -> Callable[[list[str]], None]:
    from sglang.benchmark.serving import cli_main  # the SGLang environment only

    def run(argv: list[str]) -> None:
        sys.argv = ["bench_serving", *argv]
        cli_main()

    return run


def _rust_runner() -> Callable[[list[str]], None]:
    from sglang.benchmark.rust_client import main as rust_main  # the SGLang environment only

    def run(argv: list[str]) -> None:
        status = rust_main(["rust_client", *argv])
        if status:
            raise SystemExit(status)

    return run


def _path_runner(path: str) -> Callable[[list[str]], None]:
    def run(argv: list[str]) -> None:
        sys.argv = [path, *argv]
        runpy.run_path(path, run_name="__main__")

    return run


def _report(index: int, started: float, error: str | None) -> None:
    result = {"index": index, "ok": error is None, "error": error, "wall_s": round(time.perf_counter() - started, 3)}
    print("FIXTURE_RUN " + json.dumps(result), flush=True)


def main(client: str, runs_json: str) -> int:
    runners = {"module": _module_runner, "rust": _rust_runner}
    run = runners[client]() if client in runners else _path_runner(client)
    for index, argv in enumerate(json.loads(runs_json)):
        started = time.perf_counter()
        try:
            run(argv)
        except SystemExit as exc:  # argparse errors and the client's own exit(1)
            _report(index, started, None if exc.code in (0, None) else f"SystemExit({exc.code!r})")
        except Exception as exc:  # the failure itself is what the caller records
            last = traceback.extract_tb(exc.__traceback__)[-1]
            _report(index, started, f"{type(exc).__name__}: {exc} (at {last.name}:{last.lineno})")
        else:
            _report(index, started, None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
