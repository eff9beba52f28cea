#!/usr/bin/env bash
# The README's second command: install what the tests need and run the whole suite.
source "$(dirname "$0")/lib.sh"
# Bytecode is cached (the __pycache__ directories are not tracked): where the environment sets
# PYTHONDONTWRITEBYTECODE, every process the suite starts (runners, emulators, CLIs, the app,
# each pytest worker's rewritten test modules) compiled its modules from source again, and
# the SGLang client, installed without bytecode below, compiled thousands at every start.
unset PYTHONDONTWRITEBYTECODE
# The Debian packages first, in the background (one apt-get update for all of them): a real
# browser for the page tests, fonts so Japanese and emoji render (Playwright cannot download
# its own browser here), and the host guide's reverse proxy (docs/host.md), run for real by
# tests/test_host_rehearsal.py.
debian_packages chromium nginx-light &
debian=$!
# The tests import a small part of SGLang's and AIPerf's environments: their modules are
# compiled to bytecode as they are first imported, not all at install (scripts/lib.sh).
PIP_COMPILE_FLAG=--no-compile
# The environments install beside each other: mostly downloads and unpacking.  SGLang's
# client, then the host rehearsal's 0.5.22 over its dependencies; vLLM's real argument parser
# (CPU-only; two wheels' sources, cached) for the vLLM flag tests, and the router for the PD
# tests; AIPerf for the importer's fixtures; the app's own.
( setup_sglang_env && setup_sglang_host_env ) &
sglang=$!
( bash scripts/setup_vllm_env.sh && setup_router_env ) &
others=$!
setup_aiperf_env &
aiperf=$!
setup_app_env requirements-dev.txt
setup_tokenizer
wait "$sglang" || { log "the SGLang environments failed (above)"; exit 1; }
wait "$aiperf" || { log "the AIPerf environment failed (above)"; exit 1; }
# The importer's fixtures: real bench_serving (two SGLang versions) and aiperf output.  They
# mostly wait on the clients and emulators they start, so they run beside the lint (a cold
# mypy is a minute of CPU) instead of before it.
bash scripts/setup_import_fixtures.sh &
fixtures=$!
log "lint"
bash scripts/lint.sh
wait "$others" || { log "the vLLM or router environment failed (above)"; exit 1; }
wait "$debian" || { log "the Debian packages failed (above)"; exit 1; }
wait "$fixtures" || { log "the import fixtures failed (above)"; exit 1; }
log "tests"
# Exit 5 (no tests collected) is a failure here, like any other non-zero exit.
# Four workers (pytest-xdist) on the CI machine's two cores: the suite is parallel-safe (every
# test has its own DuckDB file, ports and temp dirs), and most of its time is spent waiting, not
# computing: emulated engines running in slow motion, servers and browsers starting, runners
# polling.  Measured per test (the CPU of the test and of the processes it waited for, over its
# wall time), the end-to-end and browser tests keep a core busy well under half of their time, so
# two workers left the machine idle for much of the run.  BENCHDECK_TEST_WORKERS=0 runs it serially; arguments given
# to this script come after and win.  Work stealing: a worker that runs out takes tests from
# another's queue, so a few minute-long end-to-end tests queued together at the end do not leave
# cores idle.  The ten slowest tests are listed at the end, so each run shows where its time goes.
.venv/bin/python -m pytest -n "${BENCHDECK_TEST_WORKERS:-4}" --dist worksteal --durations=10 "$@"
