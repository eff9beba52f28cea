#!/usr/bin/env bash
# The importer's test fixtures: the real bench_serving (SGLang 0.5.23 and 0.4.6.post5) and
# aiperf 0.13.0 run against the emulator, output in build/import-fixtures/ (gitignored).
# Creates .venv-aiperf (requirements-aiperf.txt) on the way; does nothing when up to date.
source "$(dirname "$0")/lib.sh"
setup_app_env requirements-dev.txt
setup_sglang_env
setup_tokenizer
.venv/bin/python tools/make_import_fixtures.py "$@"
