#!/usr/bin/env bash
# The README's second command: install what the tests need and run the whole suite.
source "$(dirname "$0")/lib.sh"
setup_app_env requirements-dev.txt
setup_sglang_env
setup_sglang_host_env
# vLLM's real argument parser (CPU-only; two wheels' sources, cached) for the vLLM flag tests.
bash scripts/setup_vllm_env.sh
setup_router_env
setup_tokenizer
# The importer's fixtures: real bench_serving (two SGLang versions) and aiperf output.  They
# mostly wait on the clients and emulators they start, so they run beside the Debian
# installs and the lint (a cold mypy is a minute of CPU) instead of before them.
bash scripts/setup_import_fixtures.sh &
fixtures=$!
# A real browser for the page tests, and a CJK font so Japanese renders (Debian packages;
# Playwright cannot download its own browser here).
[ -x /usr/bin/chromium ] || apt_install chromium
# The host guide's reverse proxy (docs/host.md), run for real by tests/test_host_rehearsal.py.
[ -x /usr/sbin/nginx ] || apt_install nginx-light
setup_cjk_font
log "lint"
bash scripts/lint.sh
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
# cores idle.
.venv/bin/python -m pytest -n "${BENCHDECK_TEST_WORKERS:-4}" --dist worksteal "$@"
