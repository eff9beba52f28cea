"""TEST-ONLY fault injection: the real bench driver, whose output file is cut in half after
each point, as a crash or a full disk would leave it.  Runs with the SGLang interpreter
(stdlib only here); tests make it executable with that interpreter as its shebang and
point BENCHDECK_BENCH_PYTHON at it, so the runner's own code path is unchanged."""

import importlib.util
import sys

driver_path = sys.argv[1]
spec = importlib.util.spec_from_file_location("bench_driver", driver_path)
assert spec is not None and spec.loader is not None
driver = importlib.util.module_from_spec(spec)
spec.loader.exec_module(driver)
real_run_one = driver._run_one


def run_then_truncate(module, parser, argv):
    real_run_one(module, parser, argv)
    output = argv[argv.index("--output-file") + 1]
    with open(output, encoding="utf-8") as f:
        text = f.read()
    with open(output, "w", encoding="utf-8") as f:
        f.write(text[: len(text) // 2])


setattr(driver, "_run_one", run_then_truncate)  # noqa: B010 - patching a loaded module
sys.exit(driver.main())
